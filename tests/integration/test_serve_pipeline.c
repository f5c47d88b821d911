/* SPDX-License-Identifier: Apache-2.0 */
/* Protocol P8: 2048 requests pipelined on one connection (twice the
 * per-connection in-flight limit, so the server's backpressure is
 * exercised) are all answered, each with the right id - proven by
 * verifying every signature against the digest sent under that id. */
#include "daemon.h"
#include "pki.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "client/verify.h"

#define N 2048

static td_daemon d;
static char *dir;
static EVP_PKEY *ec_pub, *ed_pub;
static uint8_t ec_ski[20], ed_ski[20];

static int setup(void **state)
{
    dir = tp_tempdir("pipeline");
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    tp_copy_key(dir, tp_path("keys/ed25519.key"));
    ec_pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    ed_pub = tp_load_pub(tp_path("pubkeys/ed25519.pem"));
    tp_ski(ec_pub, ec_ski);
    tp_ski(ed_pub, ed_ski);
    td_opts o = {.name = "pipeline", .key_dirs = dir};
    td_start(&d, &o);
    return 0;
}

static int teardown(void **state)
{
    int st = td_stop(&d, 0);
    EVP_PKEY_free(ec_pub);
    EVP_PKEY_free(ed_pub);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

typedef struct sent {
    uint8_t op;
    uint8_t in[32];
    bool answered;
} sent;

static void test_2048_pipelined(void **state)
{
    static sent reqs[N + 1];
    kl_client *c = td_connect(&d);
    memset(reqs, 0, sizeof reqs);
    /* ids are 1..N (unique per connection); each request's input is
     * distinct, so a response matched to the wrong id fails to verify */
    for (uint32_t i = 0; i < N; i++) {
        uint32_t id;
        uint8_t in[32];
        for (int b = 0; b < 32; b++)
            in[b] = (uint8_t)(i * 31 + (uint32_t)b * 7);
        in[0] = (uint8_t)(i >> 8);
        in[1] = (uint8_t)i;
        uint8_t op = i % 4 == 3   ? KL_OP_ED25519_SIGN
                     : i % 4 == 2 ? KL_OP_PING
                                  : KL_OP_ECDSA_SIGN_SHA256;
        kl_request_spec s = {.opcode = op,
                             .payload = in,
                             .payload_len = sizeof in,
                             .ski = op == KL_OP_ED25519_SIGN ? ed_ski
                                    : op == KL_OP_PING       ? NULL
                                                             : ec_ski};
        assert_int_equal(kl_client_send(c, &s, &id), KL_OK);
        assert_true(id >= 1 && id <= N);
        assert_int_equal(reqs[id].op, 0);
        reqs[id].op = op;
        memcpy(reqs[id].in, in, 32);
    }
    assert_int_equal(kl_client_outstanding(c), N);
    /* all of it written before reading a single response */
    double t0 = td_now_ms();
    kl_status st = kl_client_flush(c, 60000);
    if (st != KL_OK) {
        td_dump_log(&d);
        fail_msg("writing %d pipelined requests: %s (%s)", N, kl_status_str(st),
                 kl_client_last_error(c));
    }
    for (int k = 0; k < N; k++) {
        kl_client_result r;
        st = kl_client_recv(c, 60000, &r);
        if (st != KL_OK) {
            td_dump_log(&d);
            fail_msg("response %d of %d: %s (%s)", k + 1, N, kl_status_str(st),
                     kl_client_last_error(c));
        }
        if (!r.tracked || r.id < 1 || r.id > N || reqs[r.id].answered)
            fail_msg("response %d has id %u: unknown or answered twice", k + 1,
                     r.id);
        sent *q = &reqs[r.id];
        q->answered = true;
        char why[256];
        if (q->op == KL_OP_PING) {
            assert_int_equal(r.opcode, KL_OP_PONG);
            assert_int_equal(r.payload_len, 32);
            assert_memory_equal(r.payload, q->in, 32);
        } else {
            if (r.opcode != KL_OP_RESPONSE)
                fail_msg("id %u: opcode 0x%02x error 0x%02x (%s)", r.id,
                         r.opcode, r.error, kl_err_text(r.error));
            if (kl_verify_output(q->op == KL_OP_ED25519_SIGN ? ed_pub : ec_pub,
                                 q->op, q->in, 32, r.payload, r.payload_len,
                                 why, sizeof why) != KL_OK)
                fail_msg("id %u: %s", r.id, why);
        }
        kl_client_result_free(&r);
    }
    print_message("%d pipelined requests answered in %.0f ms\n", N,
                  td_now_ms() - t0);
    assert_int_equal(kl_client_outstanding(c), 0);
    /* the connection is still fine */
    td_expect_ping(&d, c);
    kl_client_close(c);
}

/* Duplicate ids are legal (P2; the reference bench tool sends every
 * request with id 0): each one is answered. */
static void test_duplicate_ids_all_answered(void **state)
{
    kl_client *c = td_connect(&d);
    static const uint8_t p[] = "dup";
    kl_request_spec s = {
        .id = 0, .opcode = KL_OP_PING, .payload = p, .payload_len = sizeof p};
    for (int i = 0; i < 300; i++)
        assert_int_equal(kl_client_send_with_id(c, &s), KL_OK);
    assert_int_equal(kl_client_flush(c, 30000), KL_OK);
    for (int i = 0; i < 300; i++) {
        kl_client_result r;
        assert_int_equal(kl_client_recv(c, 30000, &r), KL_OK);
        assert_int_equal(r.id, 0);
        assert_true(r.tracked);
        assert_int_equal(r.opcode, KL_OP_PONG);
        kl_client_result_free(&r);
    }
    assert_int_equal(kl_client_outstanding(c), 0);
    kl_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_2048_pipelined),
        cmocka_unit_test(test_duplicate_ids_all_answered),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
