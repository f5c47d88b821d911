/* SPDX-License-Identifier: Apache-2.0 */
/* Protocol P8: responses leave as soon as they are ready, in any order. On
 * one connection a slow request (a key on a token that takes 500 ms per
 * operation, slowkey.h, then a real RSA-4096 signature) followed by ECDSA
 * requests: the ECDSA answers must not wait behind the slow one. */
#include "daemon.h"
#include "pki.h"
#include "slowkey.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/verify.h"

#define FAST 50
#define DELAY_MS 500

static td_daemon d;
static char *dir, *slow_dir;
static EVP_PKEY *fast_pub, *slow_pub, *rsa4096_pub;
static uint8_t fast_ski[20], slow_ski[20], rsa4096_ski[20];

static int setup(void **state)
{
    dir = tp_tempdir("ooo");
    slow_dir = tp_tempdir("ooo-slow");
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    fast_pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    slow_pub = tp_genkey(slow_dir, "slow-p256.key", "EC", "P-256", 0);
    rsa4096_pub = tp_genkey(dir, "rsa-4096.key", "RSA", NULL, 4096);
    tp_ski(fast_pub, fast_ski);
    tp_ski(slow_pub, slow_ski);
    tp_ski(rsa4096_pub, rsa4096_ski);
    char key[1200];
    snprintf(key, sizeof key, "%s/slow-p256.key", slow_dir);
    td_opts o = {.name = "ooo",
                 .key_dirs = dir,
                 .slow_key = td_slow_key(key, DELAY_MS, 1)};
    td_start(&d, &o);
    return 0;
}

static int teardown(void **state)
{
    int st = td_stop(&d, 0);
    EVP_PKEY_free(fast_pub);
    EVP_PKEY_free(slow_pub);
    EVP_PKEY_free(rsa4096_pub);
    tp_rmtree(dir);
    tp_rmtree(slow_dir);
    return st == 0 ? 0 : -1;
}

static const uint8_t dg[32] = {9, 8, 7, 6, 5, 4, 3, 2, 1};

/* Sends the slow request, then FAST ECDSA requests, all in one flush;
 * returns the slow answer's position among the FAST + 1 answers (0 =
 * first) and checks every answer. */
static int slow_position(uint8_t slow_op, const uint8_t *ski, EVP_PKEY *pub,
                         double *slow_ms)
{
    kl_client *c = td_connect(&d);
    kl_request_spec s = {
        .opcode = slow_op, .payload = dg, .payload_len = sizeof dg, .ski = ski};
    uint32_t slow_id, id;
    assert_int_equal(kl_client_send(c, &s, &slow_id), KL_OK);
    s.opcode = KL_OP_ECDSA_SIGN_SHA256;
    s.ski = fast_ski;
    for (int i = 0; i < FAST; i++)
        assert_int_equal(kl_client_send(c, &s, &id), KL_OK);
    double t0 = td_now_ms();
    assert_int_equal(kl_client_flush(c, 30000), KL_OK);
    int pos = -1;
    for (int k = 0; k <= FAST; k++) {
        kl_client_result r;
        char why[256];
        kl_status st = kl_client_recv(c, 30000, &r);
        if (st != KL_OK) {
            td_dump_log(&d);
            fail_msg("answer %d: %s", k + 1, kl_status_str(st));
        }
        assert_int_equal(r.opcode, KL_OP_RESPONSE);
        bool is_slow = r.id == slow_id;
        if (is_slow) {
            pos = k;
            *slow_ms = td_now_ms() - t0;
        }
        if (kl_verify_output(is_slow ? pub : fast_pub,
                             is_slow ? slow_op : KL_OP_ECDSA_SIGN_SHA256, dg,
                             sizeof dg, r.payload, r.payload_len, why,
                             sizeof why) != KL_OK)
            fail_msg("id %u: %s", r.id, why);
        kl_client_result_free(&r);
    }
    kl_client_close(c);
    assert_true(pos >= 0);
    return pos;
}

/* The slow request is answered last: all 50 ECDSA answers come first. */
static void test_delayed_request_answered_last(void **state)
{
    double ms = 0;
    int pos = slow_position(KL_OP_ECDSA_SIGN_SHA256, slow_ski, slow_pub, &ms);
    print_message("delayed answer at position %d of %d after %.0f ms\n", pos,
                  FAST + 1, ms);
    if (pos != FAST)
        fail_msg("the delayed answer came at position %d: %d ECDSA answers "
                 "waited behind it",
                 pos, FAST - pos);
    /* and it was really delayed */
    assert_true(ms >= DELAY_MS * 0.9);
}

/* A real slow operation: RSA-4096 (milliseconds) ahead of fast ECDSA
 * (tens of microseconds). Most ECDSA answers must overtake it. */
static void test_rsa4096_overtaken_by_ecdsa(void **state)
{
    double ms = 0;
    int best = -1;
    /* a noisy machine can stall any one thread: best of three tries */
    for (int attempt = 0; attempt < 3 && best < FAST / 2; attempt++) {
        int pos =
            slow_position(KL_OP_RSA_SIGN_SHA256, rsa4096_ski, rsa4096_pub, &ms);
        print_message("RSA-4096 answer at position %d of %d (%.1f ms)\n", pos,
                      FAST + 1, ms);
        if (pos > best)
            best = pos;
    }
    if (best < FAST / 2)
        fail_msg("only %d of %d ECDSA answers overtook the RSA-4096 one", best,
                 FAST);
}

/* kl_client_call gives up at its timeout and cancels the request: the
 * late answer is dropped, and the connection keeps working. */
static void test_call_timeout_cancels(void **state)
{
    kl_client *c = td_connect(&d);
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                         .payload = dg,
                         .payload_len = sizeof dg,
                         .ski = slow_ski};
    kl_client_result r;
    double t0 = td_now_ms();
    assert_int_equal(kl_client_call(c, &s, 100, &r), KL_E_TIMEOUT);
    double ms = td_now_ms() - t0;
    assert_true(ms >= 95 && ms < DELAY_MS);
    /* still counted: the server will answer it */
    assert_int_equal(kl_client_outstanding(c), 1);
    /* a fast request meanwhile is answered (ahead of the slow one) */
    s.ski = fast_ski;
    td_call(&d, c, &s, &r);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    kl_client_result_free(&r);
    /* the cancelled answer arrives and is dropped: nothing is returned */
    assert_int_equal(kl_client_recv(c, DELAY_MS + 1000, &r), KL_E_TIMEOUT);
    assert_int_equal(kl_client_outstanding(c), 0);
    td_expect_ping(&d, c);
    kl_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delayed_request_answered_last),
        cmocka_unit_test(test_rsa4096_overtaken_by_ecdsa),
        cmocka_unit_test(test_call_timeout_cancels),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
