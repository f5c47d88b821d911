/* SPDX-License-Identifier: Apache-2.0 */
/* SIGTERM drain: keylessd stops accepting, finishes the requests in flight
 * (their answers still arrive), closes the connection and exits 0. The
 * requests in flight are on a slow key (a token that takes 1 s per
 * operation, slowkey.h). */
#include "daemon.h"
#include "pki.h"
#include "slowkey.h"
#include "testutil.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/verify.h"

#define INFLIGHT 4

static char *dir, *slow_dir;
static EVP_PKEY *slow_pub, *fast_pub;
static uint8_t slow_ski[20], fast_ski[20];
static const char *slow_key;

static int setup(void **state)
{
    dir = tp_tempdir("drain");
    slow_dir = tp_tempdir("drain-slow");
    slow_pub = tp_genkey(slow_dir, "slow-p256.key", "EC", "P-256", 0);
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    fast_pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    tp_ski(slow_pub, slow_ski);
    tp_ski(fast_pub, fast_ski);
    /* two sessions: two requests run at once, 1 s each */
    char key[1200];
    snprintf(key, sizeof key, "%s/slow-p256.key", slow_dir);
    slow_key = td_slow_key(key, 1000, 2);
    return 0;
}

static int teardown(void **state)
{
    EVP_PKEY_free(slow_pub);
    EVP_PKEY_free(fast_pub);
    tp_rmtree(dir);
    tp_rmtree(slow_dir);
    return 0;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void drain_with(int sig)
{
    td_daemon d;
    td_opts o = {.name = sig == SIGTERM ? "drain-term" : "drain-int",
                 .key_dirs = dir,
                 .slow_key = slow_key};
    static const uint8_t dg[32] = {0x42};
    td_start(&d, &o);
    kl_client *c = td_connect(&d);
    td_expect_ping(&d, c);
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                         .payload = dg,
                         .payload_len = sizeof dg,
                         .ski = slow_ski};
    uint32_t id;
    for (int i = 0; i < INFLIGHT; i++)
        assert_int_equal(kl_client_send(c, &s, &id), KL_OK);
    assert_int_equal(kl_client_flush(c, 5000), KL_OK);
    /* let the server read them (two token sessions, 1 s per request: the
     * last answer comes ~2 s later, inside the 5 s drain), then stop it */
    sleep_ms(300);
    double t0 = td_now_ms();
    td_signal(&d, sig);

    for (int i = 0; i < INFLIGHT; i++) {
        kl_client_result r;
        char why[256];
        kl_status st = kl_client_recv(c, 10000, &r);
        if (st != KL_OK) {
            td_dump_log(&d);
            fail_msg("in-flight answer %d of %d lost at shutdown: %s (%s)",
                     i + 1, INFLIGHT, kl_status_str(st),
                     kl_client_last_error(c));
        }
        assert_int_equal(r.opcode, KL_OP_RESPONSE);
        assert_int_equal(kl_verify_output(slow_pub, s.opcode, dg, sizeof dg,
                                          r.payload, r.payload_len, why,
                                          sizeof why),
                         KL_OK);
        kl_client_result_free(&r);
    }
    /* then the connection closes */
    kl_client_result r;
    kl_status st = kl_client_recv(c, 8000, &r);
    if (st != KL_E_CLOSED && st != KL_E_TLS)
        fail_msg("connection not closed after the drain: %s",
                 kl_status_str(st));
    kl_client_close(c);

    /* no new connections while stopping or after */
    kl_client_opts co = td_client_opts(&d);
    co.connect_timeout_ms = 2000;
    kl_client *c2 = NULL;
    char err[256];
    if (kl_client_connect(&co, &c2, err, sizeof err) == KL_OK) {
        kl_client_close(c2);
        fail_msg("keylessd accepted a connection after SIGTERM");
    }

    int status = td_wait(&d, 10000);
    double ms = td_now_ms() - t0;
    print_message("drained %d requests and exited with %d after %.0f ms\n",
                  INFLIGHT, status, ms);
    if (status != 0) {
        td_dump_log(&d);
        if (status == -2)
            (void)td_stop(&d, 1000);
        fail_msg("keylessd exit status %d after draining, expected 0", status);
    }
}

static void test_sigterm_drains_then_exits_0(void **state)
{
    drain_with(SIGTERM);
}

static void test_sigint_drains_then_exits_0(void **state)
{
    drain_with(SIGINT);
}

/* With nothing in flight, SIGTERM exits promptly. */
static void test_idle_sigterm_exits_fast(void **state)
{
    td_daemon d;
    td_opts o = {.name = "drain-idle", .key_dirs = dir};
    td_start(&d, &o);
    kl_client *c = td_connect(&d);
    td_expect_ping(&d, c);
    double t0 = td_now_ms();
    int st = td_stop(&d, 10000);
    double ms = td_now_ms() - t0;
    kl_client_close(c);
    assert_int_equal(st, 0);
    if (ms > 3000)
        fail_msg("an idle keylessd took %.0f ms to exit after SIGTERM", ms);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigterm_drains_then_exits_0),
        cmocka_unit_test(test_sigint_drains_then_exits_0),
        cmocka_unit_test(test_idle_sigterm_exits_fast),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
