/* SPDX-License-Identifier: Apache-2.0 */
/* The capacity outage: remote capacity must be bounded by the
 * remote, never by local threads or a handful of connections. One
 * upstream connection (max_conns_per_remote = 1) with 100 ms injected
 * round trip must carry >= 5,000 remote ECDSA operations per second, and
 * >= 0.9 of what the in-flight count allows (in flight / round trip) up to
 * the server's own throughput. */
#include "../tools/rtharness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INFLIGHT 900u
#define RUN_MS 3000.0

static void test_one_connection_capacity(void **state)
{
    char *dir = tp_tempdir("router-cap"), *keydir = tp_tempdir("router-capk");
    uint8_t ski[20];
    rh_dc dc;
    char table[1024];
    rh_one_route(&dc, "cap", dir, keydir, 50, ski, table,
                 sizeof table); /* 100 ms round trip */
    kl_router_opts o = rh_opts(table);
    o.max_conns_per_remote = 1;
    o.default_deadline_ns = 5000 * KL_NS_PER_MS;
    o.timeout_ceiling_ns = 5000 * KL_NS_PER_MS;
    o.timeout_floor_ns =
        2000 * KL_NS_PER_MS; /* queueing must not be taken for loss */
    kl_router *r = rh_router(&o);
    rh_wait_measured(r, 1);

    rh_req q;
    rh_req_make(&q, ski, -1, NULL);
    rh_batch bt;
    rh_batch_init(&bt);
    /* warm-up */
    rh_run(r, &bt, &q, 2000, INFLIGHT);
    rh_batch_init(&bt);
    double t0 = td_now_ms();
    unsigned sent = 0;
    while (td_now_ms() - t0 < RUN_MS) {
        pthread_mutex_lock(&bt.mu);
        while (bt.inflight >= INFLIGHT) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 10;
            if (pthread_cond_timedwait(&bt.cv, &bt.mu, &ts) != 0) {
                pthread_mutex_unlock(&bt.mu);
                rh_print_remotes(r);
                kl_router_stats rs;
                kl_router_get_stats(r, &rs);
                fail_msg("no answer for 10 s: %u in flight, %u done; "
                         "router: routed %llu answered %llu",
                         bt.inflight, bt.done, (unsigned long long)rs.routed,
                         (unsigned long long)rs.answered);
            }
        }
        pthread_mutex_unlock(&bt.mu);
        (void)rh_submit(r, &bt, &q);
        sent++;
    }
    pthread_mutex_lock(&bt.mu);
    while (bt.inflight)
        pthread_cond_wait(&bt.cv, &bt.mu);
    pthread_mutex_unlock(&bt.mu);
    double secs = (td_now_ms() - t0) / 1000.0;
    double rate = bt.done / secs;
    double ideal = INFLIGHT / 0.100;
    kl_remote_stats st[2];
    size_t n = kl_router_remote_stats(r, st, 2);
    fprintf(stderr,
            "one connection, 100 ms round trip, %u in flight: %u ops in "
            "%.2f s = %.0f ops/s (in flight / rtt = %.0f; ratio %.2f); "
            "mean latency %.1f ms; connections %u; errors %u\n",
            INFLIGHT, bt.done, secs, rate, ideal, rate / ideal,
            bt.sum_ms / bt.done, n ? st[0].conns : 0,
            bt.done - bt.by_err[KL_ERR_NONE]);
    assert_int_equal(bt.by_err[KL_ERR_NONE], bt.done);
    assert_int_equal(n, 1);
    assert_int_equal(st[0].conns, 1);
    assert_true(rate >= 5000.0);
    kl_router_free(r);
    rh_dc_stop(&dc);
    tp_rmtree(dir);
    tp_rmtree(keydir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_connection_capacity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
