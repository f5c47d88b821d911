/* SPDX-License-Identifier: Apache-2.0 */
/* Overload control: a request whose client has gone is dropped
 * before execution. One worker; the "slow" key is RSA-4096, slow for real
 * (a few milliseconds of CPU per signature, on the pool's slow class). A
 * client queues enough signatures on it to keep the worker busy for about
 * 2 s, and vanishes: the worker skips the ones it had not started, so the
 * next client's request on that key waits for one of them at most, not
 * for all. */
#include "test_abuse_common.h"

/* what the abandoned requests would take if they all ran */
#define BACKLOG_MS 2000.0

static td_daemon d;
static char *dir;
static uint8_t slow_ski[20], fast_ski[20];

static int setup(void **state)
{
    dir = tp_tempdir("gone");
    EVP_PKEY *slow = tp_genkey(dir, "rsa-4096.key", "RSA", NULL, 4096);
    tp_ski(slow, slow_ski);
    EVP_PKEY_free(slow);
    tp_copy_key(dir, tp_path("keys/ecdsa-p384.key"));
    EVP_PKEY *fast = tp_load_pub(tp_path("pubkeys/ecdsa-p384.pem"));
    tp_ski(fast, fast_ski);
    EVP_PKEY_free(fast);
    td_opts o = {.name = "gone", .key_dirs = dir, .shards = 1, .workers = 1};
    td_start(&d, &o);
    return 0;
}

static int teardown(void **state)
{
    int st = d.pid ? td_stop(&d, 0) : 0;
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

static kl_request_spec spec_for(const uint8_t *ski)
{
    kl_request_spec s = {.opcode = ski == slow_ski ? KL_OP_RSA_SIGN_SHA256
                                                   : KL_OP_ECDSA_SIGN_SHA256,
                         .payload = ha_digest,
                         .payload_len = 32,
                         .ski = ski};
    return s;
}

static double sign_ms(kl_client *c, const uint8_t *ski)
{
    kl_request_spec s = spec_for(ski);
    kl_client_result r;
    double t0 = td_now_ms();
    td_call(&d, c, &s, &r);
    double ms = td_now_ms() - t0;
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    kl_client_result_free(&r);
    return ms;
}

/* R from keylessd's "stopped: C connections, R requests" line. */
static unsigned long long requests_read(void)
{
    char *log = td_read_log(&d);
    const char *p = log ? strstr(log, "stopped: ") : NULL;
    unsigned long long conns = 0, req = 0;
    if (!p || sscanf(p, "stopped: %llu connections, %llu requests", &conns,
                     &req) != 2) {
        td_dump_log(&d);
        fail_msg("no \"stopped:\" line in keylessd's log");
    }
    free(log);
    return req;
}

static void test_work_of_a_vanished_client_is_dropped(void **state)
{
    kl_client *b = td_connect(&d);
    double alone = sign_ms(b, fast_ski);
    /* one RSA-4096 signature here (the best of three, round trip
     * included): how many make the backlog */
    double one = 1e9;
    for (int i = 0; i < 3; i++) {
        double ms = sign_ms(b, slow_ski);
        if (ms < one)
            one = ms;
    }
    int n = (int)(BACKLOG_MS / one) + 1;
    if (n < 40)
        n = 40;
    if (n > 1000) /* max_inflight_per_conn is 1024 */
        n = 1000;
    kl_client *a = td_connect(&d);
    kl_request_spec s = spec_for(slow_ski);
    for (int i = 0; i < n; i++) {
        uint32_t id;
        assert_int_equal(kl_client_send(a, &s, &id), KL_OK);
    }
    assert_int_equal(kl_client_flush(a, 2000), KL_OK);
    ha_sleep_ms(20); /* the server has read them: one runs, the rest wait */
    kl_client_close(a);
    ha_sleep_ms(20); /* and has seen the close */
    double after = sign_ms(b, fast_ski);
    /* the slow key still works for a client that stays, and its request
     * waits for at most the one signature that was running */
    double slow_after = sign_ms(b, slow_ski);
    print_message("%d abandoned RSA-4096 jobs (%.1f ms each, %.0f ms if they "
                  "ran): then a P-384 request took %.1f ms (alone %.1f ms), "
                  "an RSA-4096 one %.1f ms\n",
                  n, one, n * one, after, alone, slow_after);
    assert_true(after < 500);
    assert_true(slow_after < 500);
    /* the test can tell: running them would have taken far longer */
    assert_true(n * one >= 1000);
    kl_client_close(b);
    /* and the server did read them all: they were queued, then dropped */
    assert_int_equal(td_stop(&d, 0), 0);
    assert_true(requests_read() >= (unsigned long long)n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_work_of_a_vanished_client_is_dropped),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
