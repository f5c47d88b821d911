/* SPDX-License-Identifier: Apache-2.0 */
/* The retry storm (client issue): a key server slowed below the offered
 * rate (the key on a token with one session that takes 20 ms per
 * operation, slowkey.h: ~50/s) and callers offering ~100/s with 100 ms
 * deadlines. The requests that reach the key server must stay within 1.1x
 * of the requests the callers made, and the key server must give no caller
 * a signature past its deadline: the client drops what it could not write
 * in time, sends each request's remaining budget (protocol P9), and the
 * server sheds what expires in its queue and answers an operation still
 * running at its deadline with an error then. Server-side numbers come
 * from keylessd's own counters (the "stopped:" line it logs at exit).
 *
 * Goodput stays near the token's capacity: admission control estimates
 * the wait for a token session from the measured time of its calls, and
 * refuses at once what would end past its deadline (docs/DESIGN.md
 * "Deadlines"), so the token's time goes to requests a caller still
 * waits for. Without that estimate the token ran operations that ended
 * late and a few signatures of ~150 reached a caller. */
#include "daemon.h"
#include "pki.h"
#include "slowkey.h"
#include "testutil.h"

#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NREQ 300
#define RATE_PER_S 100
#define DEADLINE_MS 100
#define DELAY_MS 20

typedef struct outcome {
    int calls;
    kl_status status;
    uint8_t opcode, error;
} outcome;

static void on_result(void *arg, const kl_result *res)
{
    outcome *o = arg;
    o->calls++;
    o->status = res->status;
    o->opcode = res->opcode;
    o->error = res->error;
}

/* keylessd's exit counters: "stopped: C connections, R requests, E errors,
 * S shed, ..." */
static void server_counts(const td_daemon *d, unsigned long long *req,
                          unsigned long long *errs, unsigned long long *shed)
{
    char *log = td_read_log(d);
    assert_non_null(log);
    const char *p = strstr(log, "stopped: ");
    if (!p) {
        td_dump_log(d);
        fail_msg("no \"stopped:\" line in keylessd's log");
    }
    unsigned long long conns;
    assert_int_equal(sscanf(p,
                            "stopped: %llu connections, %llu requests, %llu "
                            "errors, %llu shed",
                            &conns, req, errs, shed),
                     4);
    free(log);
}

static void test_storm(void **state)
{
    static outcome out[NREQ];
    td_daemon d;
    EVP_PKEY *pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    uint8_t ski[20];
    tp_ski(pub, ski);
    EVP_PKEY_free(pub);
    td_opts o = {.name = "client-storm",
                 .slow_key =
                     td_slow_key(tp_path("keys/ecdsa-p256.key"), DELAY_MS, 1),
                 .workers = 1,
                 .shards = 1};
    td_start(&d, &o);

    /* a few requests in flight per connection, like a pooled client */
    kl_target_opts ov = {.max_inflight = 4};
    const td_daemon *ds[] = {&d};
    kl_target *t = td_target(ds, 1, &ov);
    memset(out, 0, sizeof out);
    uint8_t digest[32] = {1};
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                         .payload = digest,
                         .payload_len = 32,
                         .ski = ski};
    double start = td_now_ms(), gap = 1000.0 / RATE_PER_S;
    int sent = 0;
    for (;;) {
        double now = td_now_ms();
        while (sent < NREQ && now >= start + sent * gap) {
            assert_int_equal(kl_async_submit(t, &s, DEADLINE_MS, on_result,
                                             &out[sent], NULL),
                             KL_OK);
            sent++;
        }
        int done = 0;
        for (int i = 0; i < NREQ; i++)
            done += out[i].calls > 0;
        if (done == NREQ)
            break;
        assert_true(now - start < 20000);
        struct pollfd p = {.fd = kl_async_fd(t), .events = POLLIN};
        (void)poll(&p, 1, 2);
        assert_int_equal(kl_async_process(t), KL_OK);
    }
    unsigned ok = 0, shed_seen = 0, timeouts = 0;
    for (int i = 0; i < NREQ; i++) {
        assert_int_equal(out[i].calls, 1);
        if (out[i].status == KL_OK && out[i].opcode == KL_OP_RESPONSE)
            ok++;
        else if (out[i].status == KL_OK && out[i].error == KL_ERR_INTERNAL)
            shed_seen++;
        else if (out[i].status == KL_E_TIMEOUT)
            timeouts++;
        else
            fail_msg("request %d: status %d opcode 0x%02x error %u", i,
                     out[i].status, out[i].opcode, out[i].error);
    }
    /* Keep the connection until the server has answered what it holds
     * (late answers are dropped by the target): keylessd counts a request
     * it finishes after the client left as neither answered nor shed. */
    double linger = td_now_ms() + 4 * DELAY_MS * 3 + 200;
    while (td_now_ms() < linger) {
        struct pollfd p = {.fd = kl_async_fd(t), .events = POLLIN};
        (void)poll(&p, 1, 10);
        assert_int_equal(kl_async_process(t), KL_OK);
    }
    kl_target_stats st;
    kl_target_get_stats(t, &st);
    kl_target_free(t);
    int rc = td_stop(&d, 0);
    assert_int_equal(rc, 0);
    unsigned long long srv_req, srv_err, srv_shed;
    server_counts(&d, &srv_req, &srv_err, &srv_shed);
    unsigned long long crypto = srv_req - srv_err;
    fprintf(stderr,
            "storm: %d requests made, %" PRIu64 " written (%" PRIu64
            " dropped unsent, %" PRIu64 " retries); server: %llu requests, "
            "%llu shed, %llu signed; client: %u signed, %u shed answers, "
            "%u timeouts\n",
            NREQ, st.written, st.expired_unsent, st.retries, srv_req, srv_shed,
            crypto, ok, shed_seen, timeouts);

    /* the overload was real: the offered rate is twice what one session
     * with a 20 ms cost can do, so the server had to shed */
    assert_true(srv_shed > 0);
    /* goodput (see the top of the file): capacity over the ~3 s run is
     * about NREQ * 1000 / RATE_PER_S / DELAY_MS = 150; at least half of it
     * reaches a caller in time */
    fprintf(stderr, "storm: goodput %u of a capacity of about %d\n", ok,
            NREQ * 1000 / RATE_PER_S / DELAY_MS);
    assert_true(ok >= (unsigned)(NREQ * 1000 / RATE_PER_S / DELAY_MS) / 2);
    /* within 1.1x, counted on both sides of the wire */
    assert_int_equal(st.submitted, NREQ);
    assert_true(st.written * 10 <= (uint64_t)NREQ * 11);
    assert_int_equal(srv_req, st.written);
    assert_true(srv_req * 10 <= (unsigned long long)NREQ * 11);
    /* no answers for the expired: every error the server sent was a shed
     * request, and every signature it sent was for a request whose budget
     * had not run out, so all but a hair's breadth of them reached a
     * caller */
    assert_int_equal(srv_err, srv_shed);
    assert_true(crypto >= ok);
    assert_true(crypto <= ok + 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_storm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
