/* SPDX-License-Identifier: Apache-2.0 */
/* PKCS#11 keys through a real keylessd: an RSA key in a SoftHSM2 token (a
 * `uri:` key store) and an ECDSA key on disk, served side by side. Every
 * HSM operation verifies with OpenSSL, --keystore-debug lists the token key,
 * and on one connection a slow HSM operation (the token behind the
 * test-only fault shim, which stalls each operation: slowkey.h; run on the
 * blocking workers) does not delay the file key's answers. */
#include "daemon.h"
#include "pki.h"
#include "slowkey.h"
#include "testutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/rsa.h>

#include "client/verify.h"

#define FAST 50
#define DELAY_MS 400

static td_daemon d;
static char *dir;
static char stores[PATH_MAX + 2048];
static EVP_PKEY *rsa_pub, *ec_pub;
static uint8_t rsa_ski[20], ec_ski[20];
static const uint8_t dg[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

static int setup(void **state)
{
    /* A token of our own (SOFTHSM2_CONF and the shim's settings reach
     * keylessd through the environment it inherits) on which every
     * operation takes DELAY_MS, two at a time. */
    const char *uri = td_slow_key(tp_path("keys/rsa-2048.key"), DELAY_MS, 2);
    dir = tp_tempdir("hsm-server");
    char keys[512];
    snprintf(keys, sizeof keys, "%s/keys", dir);
    tu_sh("mkdir -p %s", keys);
    tp_copy_key(keys, tp_path("keys/ecdsa-p256.key"));

    rsa_pub = tp_load_pub(tp_path("pubkeys/rsa-2048.pem"));
    ec_pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    tp_ski(rsa_pub, rsa_ski);
    tp_ski(ec_pub, ec_ski);

    snprintf(stores, sizeof stores,
             "--private-key-stores=[{dir: %s}, {uri: \"%s\"}]", keys, uri);
    static const char *extra[2];
    extra[0] = stores;
    td_opts o = {.name = "hsm-server", .extra = extra};
    td_start(&d, &o);
    return 0;
}

static int teardown(void **state)
{
    int st = td_stop(&d, 0);
    EVP_PKEY_free(rsa_pub);
    EVP_PKEY_free(ec_pub);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

static void check_answer(const kl_client_result *r, EVP_PKEY *pub, uint8_t op,
                         const uint8_t *in, size_t inlen)
{
    char why[256];
    assert_int_equal(r->opcode, KL_OP_RESPONSE);
    if (kl_verify_output(pub, op, in, inlen, r->payload, r->payload_len, why,
                         sizeof why) != KL_OK)
        fail_msg("op 0x%02x: %s", op, why);
}

/* Every RSA operation on the token key, answered and verified. */
static void test_hsm_key_operations(void **state)
{
    static const uint8_t ops[] = {
        KL_OP_RSA_SIGN_SHA256,     KL_OP_RSA_SIGN_SHA384,
        KL_OP_RSA_SIGN_SHA512,     KL_OP_RSA_PSS_SIGN_SHA256,
        KL_OP_RSA_PSS_SIGN_SHA384, KL_OP_RSA_SIGN_MD5SHA1,
    };
    kl_client *c = td_connect(&d);
    uint8_t in[64];
    for (size_t i = 0; i < sizeof in; i++)
        in[i] = (uint8_t)(i * 7 + 1);
    for (size_t i = 0; i < sizeof ops; i++) {
        size_t len = kl_op_digest_len(ops[i]);
        kl_request_spec s = {.opcode = ops[i],
                             .payload = in,
                             .payload_len = len,
                             .ski = rsa_ski};
        kl_client_result r;
        td_call(&d, c, &s, &r);
        check_answer(&r, rsa_pub, ops[i], in, len);
        kl_client_result_free(&r);
    }
    /* raw RSA decrypt of a PKCS#1 v1.5 ciphertext: the padded block */
    uint8_t ct[256], msg[48];
    size_t ctlen = sizeof ct;
    memset(msg, 0xAB, sizeof msg);
    EVP_PKEY_CTX *pc = EVP_PKEY_CTX_new(rsa_pub, NULL);
    assert_int_equal(EVP_PKEY_encrypt_init(pc), 1);
    assert_int_equal(EVP_PKEY_CTX_set_rsa_padding(pc, RSA_PKCS1_PADDING), 1);
    assert_int_equal(EVP_PKEY_encrypt(pc, ct, &ctlen, msg, sizeof msg), 1);
    EVP_PKEY_CTX_free(pc);
    kl_request_spec s = {.opcode = KL_OP_RSA_DECRYPT,
                         .payload = ct,
                         .payload_len = ctlen,
                         .ski = rsa_ski};
    kl_client_result r;
    td_call(&d, c, &s, &r);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    assert_int_equal(r.payload_len, 256);
    assert_int_equal(r.payload[0], 0x00);
    assert_int_equal(r.payload[1], 0x02);
    assert_int_equal(r.payload[256 - sizeof msg - 1], 0x00);
    assert_memory_equal(r.payload + 256 - sizeof msg, msg, sizeof msg);
    kl_client_result_free(&r);
    kl_client_close(c);
}

/* One slow HSM request, then FAST file-key ECDSA requests, in one flush:
 * every ECDSA answer arrives before the HSM one. */
static void test_slow_hsm_does_not_delay_file_key(void **state)
{
    kl_client *c = td_connect(&d);
    kl_request_spec s = {.opcode = KL_OP_RSA_SIGN_SHA256,
                         .payload = dg,
                         .payload_len = sizeof dg,
                         .ski = rsa_ski};
    uint32_t slow_id, id;
    assert_int_equal(kl_client_send(c, &s, &slow_id), KL_OK);
    s.opcode = KL_OP_ECDSA_SIGN_SHA256;
    s.ski = ec_ski;
    for (int i = 0; i < FAST; i++)
        assert_int_equal(kl_client_send(c, &s, &id), KL_OK);
    double t0 = td_now_ms();
    assert_int_equal(kl_client_flush(c, 30000), KL_OK);
    int pos = -1;
    double last_fast_ms = 0, slow_ms = 0;
    for (int k = 0; k <= FAST; k++) {
        kl_client_result r;
        kl_status st = kl_client_recv(c, 30000, &r);
        if (st != KL_OK) {
            td_dump_log(&d);
            fail_msg("answer %d: %s", k + 1, kl_status_str(st));
        }
        bool is_slow = r.id == slow_id;
        if (is_slow) {
            pos = k;
            slow_ms = td_now_ms() - t0;
            check_answer(&r, rsa_pub, KL_OP_RSA_SIGN_SHA256, dg, sizeof dg);
        } else {
            last_fast_ms = td_now_ms() - t0;
            check_answer(&r, ec_pub, KL_OP_ECDSA_SIGN_SHA256, dg, sizeof dg);
        }
        kl_client_result_free(&r);
    }
    kl_client_close(c);
    print_message("HSM answer at position %d of %d after %.0f ms; last ECDSA "
                  "after %.1f ms\n",
                  pos, FAST + 1, slow_ms, last_fast_ms);
    if (pos != FAST)
        fail_msg("%d ECDSA answers waited behind the HSM operation",
                 FAST - pos);
    assert_true(slow_ms >= DELAY_MS * 0.9);
    /* the file key's answers did not wait for the HSM at all */
    assert_true(last_fast_ms < DELAY_MS / 2);
}

/* --keystore-debug lists the token key by its SKI, like a file key. */
static void test_keystore_debug_lists_token_key(void **state)
{
    char bin[1024];
    snprintf(bin, sizeof bin, "%s/keylessd", tu_bin_dir());
    const char *argv[] = {bin, stores, "--keystore-debug", NULL};
    char *out = NULL;
    int rc = td_run(argv, &out, 30000);
    if (rc != 0)
        fail_msg("keylessd --keystore-debug exited %d:\n%s", rc, out);
    char ski_hex[41];
    snprintf(ski_hex, sizeof ski_hex, "%s", tp_ski_hex(rsa_ski));
    if (!strstr(out, ski_hex) || !strstr(out, "pkcs11:"))
        fail_msg("token key %s not listed:\n%s", ski_hex, out);
    if (strstr(out, "pin-value=" TD_SLOW_PIN))
        fail_msg("the PIN leaked into the listing:\n%s", out);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hsm_key_operations),
        cmocka_unit_test(test_slow_hsm_does_not_delay_file_key),
        cmocka_unit_test(test_keystore_debug_lists_token_key),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
