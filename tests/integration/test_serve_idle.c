/* SPDX-License-Identifier: Apache-2.0 */
/* Protocol P8 idle timeout (--idle-timeout=1s here): a silent connection is
 * closed after about 1 s; a request still in flight at that moment gets its
 * response before the close (a request on a slow key: a token that takes
 * 1.6 s per operation, slowkey.h). */
#include "daemon.h"
#include "pki.h"
#include "slowkey.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/verify.h"

static td_daemon d;
static char *dir;
static EVP_PKEY *slow_pub;
static uint8_t slow_ski[20];

static int setup(void **state)
{
    static const char *extra[2];
    dir = tp_tempdir("idle");
    slow_pub = tp_genkey(dir, "slow-p256.key", "EC", "P-256", 0);
    tp_ski(slow_pub, slow_ski);
    extra[0] = "--idle-timeout=1s";
    /* the slow request outlives the idle timeout */
    char key[1200];
    snprintf(key, sizeof key, "%s/slow-p256.key", dir);
    td_opts o = {
        .name = "idle", .extra = extra, .slow_key = td_slow_key(key, 1600, 1)};
    td_start(&d, &o);
    return 0;
}

static int teardown(void **state)
{
    int st = td_stop(&d, 0);
    EVP_PKEY_free(slow_pub);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

static void test_silent_connection_closed(void **state)
{
    kl_client *c = td_connect(&d);
    td_expect_ping(&d, c);
    double t0 = td_now_ms();
    kl_client_result r;
    kl_status st = kl_client_recv(c, 6000, &r);
    double ms = td_now_ms() - t0;
    print_message("idle connection closed after %.0f ms (%s)\n", ms,
                  kl_status_str(st));
    if (st == KL_OK)
        fail_msg("unexpected message on an idle connection");
    if (st == KL_E_TIMEOUT)
        fail_msg("idle connection still open after 6 s (--idle-timeout=1s)");
    assert_true(st == KL_E_CLOSED || st == KL_E_TLS);
    if (ms < 800 || ms > 3000)
        fail_msg("idle connection closed after %.0f ms, expected about 1000 "
                 "(800..3000)",
                 ms);
    kl_client_close(c);
}

/* Traffic keeps a connection open: pings every 400 ms for 2.4 s. */
static void test_active_connection_kept(void **state)
{
    kl_client *c = td_connect(&d);
    for (int i = 0; i < 6; i++) {
        td_expect_ping(&d, c);
        kl_client_result r;
        assert_int_equal(kl_client_recv(c, 400, &r), KL_E_TIMEOUT);
    }
    td_expect_ping(&d, c);
    kl_client_close(c);
}

static void test_in_flight_request_answered_before_close(void **state)
{
    static const uint8_t dg[32] = {0xAB};
    kl_client *c = td_connect(&d);
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                         .payload = dg,
                         .payload_len = sizeof dg,
                         .ski = slow_ski};
    uint32_t id;
    assert_int_equal(kl_client_send(c, &s, &id), KL_OK);
    double t0 = td_now_ms();
    assert_int_equal(kl_client_flush(c, 5000), KL_OK);
    kl_client_result r;
    kl_status st = kl_client_recv(c, 10000, &r);
    if (st != KL_OK) {
        td_dump_log(&d);
        fail_msg("the in-flight request got no answer: %s (%s)",
                 kl_status_str(st), kl_client_last_error(c));
    }
    double ms = td_now_ms() - t0;
    char why[256];
    assert_int_equal(r.id, id);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    assert_int_equal(kl_verify_output(slow_pub, s.opcode, dg, sizeof dg,
                                      r.payload, r.payload_len, why,
                                      sizeof why),
                     KL_OK);
    kl_client_result_free(&r);
    /* it outlived the idle timeout (1 s) */
    assert_true(ms >= 1400);
    /* then the idle connection closes */
    st = kl_client_recv(c, 5000, &r);
    print_message("answer after %.0f ms, closed after %.0f ms (%s)\n", ms,
                  td_now_ms() - t0, kl_status_str(st));
    assert_true(st == KL_E_CLOSED || st == KL_E_TLS);
    kl_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_silent_connection_closed),
        cmocka_unit_test(test_active_connection_kept),
        cmocka_unit_test(test_in_flight_request_answered_before_close),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
