/* SPDX-License-Identifier: Apache-2.0 */
/* Overload control: a request whose client has gone is dropped
 * before execution. One worker; every request on the "slow" key takes
 * 50 ms (--test-delay). A client queues 40 of them and vanishes: the
 * worker skips the 39 it had not started, so the next client's request
 * waits for one of them at most (about 50 ms), not for all (2 s). */
#include "test_abuse_common.h"

static td_daemon d;
static char *dir;
static uint8_t slow_ski[20], fast_ski[20];

static int setup(void **state)
{
    static char delay[128];
    static const char *extra[2];
    dir = tp_tempdir("gone");
    EVP_PKEY *slow = tp_genkey(dir, "slow-p256.key", "EC", "P-256", 0);
    tp_ski(slow, slow_ski);
    EVP_PKEY_free(slow);
    tp_copy_key(dir, tp_path("keys/ecdsa-p384.key"));
    EVP_PKEY *fast = tp_load_pub(tp_path("pubkeys/ecdsa-p384.pem"));
    tp_ski(fast, fast_ski);
    EVP_PKEY_free(fast);
    snprintf(delay, sizeof delay, "--test-delay=%s:50", tp_ski_hex(slow_ski));
    extra[0] = delay;
    td_opts o = {.name = "gone",
                 .key_dirs = dir,
                 .extra = extra,
                 .shards = 1,
                 .workers = 1};
    td_start(&d, &o);
    return 0;
}

static int teardown(void **state)
{
    int st = td_stop(&d, 0);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

static double sign_ms(kl_client *c, const uint8_t *ski)
{
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                         .payload = ha_digest,
                         .payload_len = 32,
                         .ski = ski};
    kl_client_result r;
    double t0 = td_now_ms();
    td_call(&d, c, &s, &r);
    double ms = td_now_ms() - t0;
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    kl_client_result_free(&r);
    return ms;
}

static void test_work_of_a_vanished_client_is_dropped(void **state)
{
    kl_client *b = td_connect(&d);
    double alone = sign_ms(b, fast_ski);
    kl_client *a = td_connect(&d);
    for (int i = 0; i < 40; i++) {
        kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                             .payload = ha_digest,
                             .payload_len = 32,
                             .ski = slow_ski};
        uint32_t id;
        assert_int_equal(kl_client_send(a, &s, &id), KL_OK);
    }
    assert_int_equal(kl_client_flush(a, 2000), KL_OK);
    ha_sleep_ms(20); /* the server has read them: one runs, 39 wait */
    kl_client_close(a);
    ha_sleep_ms(20); /* and has seen the close */
    double after = sign_ms(b, fast_ski);
    print_message("a request behind 39 abandoned 50-ms jobs: %.1f ms (alone "
                  "%.1f ms; 2000 ms if they ran)\n",
                  after, alone);
    assert_true(after < 500);
    /* the slow key itself still works for a client that stays */
    assert_true(sign_ms(b, slow_ski) >= 45);
    kl_client_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_work_of_a_vanished_client_is_dropped),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
