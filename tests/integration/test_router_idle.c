/* SPDX-License-Identifier: Apache-2.0 */
/* Upstream connections grow with load and shrink when it is gone
 * (src/router/remote.c): a remote gets another connection when each one
 * carries conn_inflight_threshold requests; one beyond the first that
 * carried nothing for conn_idle_ms is closed, while the first (opened in
 * advance) stays. Load fills the connections in order, so a light load
 * that one connection carries lets the extra ones go rather than keeping
 * all of them busy. One "data centre" 40 ms away, real keylessd behind a
 * faultproxy, the router in this process. */
#include "../tools/rtharness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kl_remote_stats stats_of(kl_router *r)
{
    kl_remote_stats st[2];
    assert_int_equal(kl_router_remote_stats(r, st, 2), 1);
    return st[0];
}

static void test_extra_connections_close_when_idle(void **state)
{
    (void)state;
    char *dir = tp_tempdir("router-idle"), *keydir = tp_tempdir("router-idlek");
    uint8_t ski[20];
    rh_dc dc;
    char table[1024];
    rh_one_route(&dc, "idle", dir, keydir, 20, ski, table,
                 sizeof table); /* 40 ms round trip */
    kl_router_opts o = rh_opts(table);
    o.conn_inflight_threshold = 8;
    o.max_conns_per_remote = 4;
    o.conn_idle_timeout_ns = 600 * KL_NS_PER_MS;
    o.timeout_floor_ns =
        2000 * KL_NS_PER_MS; /* a stalled machine is not a lost remote */
    kl_router *r = rh_router(&o);
    rh_wait_measured(r, 1);
    assert_int_equal(stats_of(r).conns, 1);

    rh_req q;
    rh_req_make(&q, ski, -1, NULL);
    rh_batch bt;
    rh_batch_init(&bt);
    /* heavy: 64 in flight > 4 x 8 - the remote grows to its maximum */
    rh_run(r, &bt, &q, 1500, 64);
    kl_remote_stats st = stats_of(r);
    fprintf(stderr, "after 64 in flight: %u connections\n", st.conns);
    assert_int_equal(st.conns, 4);
    assert_int_equal(st.idle_closed, 0);

    /* light: 4 in flight, which one connection carries, for ~2 s - the
     * extra connections get nothing and close after 600 ms */
    double t0 = td_now_ms();
    rh_run(r, &bt, &q, 200, 4);
    st = stats_of(r);
    fprintf(stderr,
            "after %.0f ms at 4 in flight: %u connection(s), %llu closed "
            "idle\n",
            td_now_ms() - t0, st.conns, (unsigned long long)st.idle_closed);
    assert_true(td_now_ms() - t0 > 1200);
    assert_int_equal(st.conns, 1);
    assert_int_equal(st.idle_closed, 3);

    /* nothing at all: the first connection stays (opened in advance) */
    fp_sleep_ms(1500);
    st = stats_of(r);
    assert_int_equal(st.conns, 1);
    assert_true(st.up);
    assert_int_equal(st.idle_closed, 3);
    for (int e = 1; e < 256; e++)
        if (bt.by_err[e])
            fprintf(stderr, "error %d: %u\n", e, bt.by_err[e]);
    /* every request was answered with a signature, none lost to a close */
    assert_int_equal(bt.done, 1700);
    assert_int_equal(bt.by_err[KL_ERR_NONE], 1700);
    kl_router_free(r);
    rh_dc_stop(&dc);
    tp_rmtree(dir);
    tp_rmtree(keydir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extra_connections_close_when_idle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
