/* SPDX-License-Identifier: Apache-2.0 */
/* Every opcode of protocol P4 against a running keylessd on loopback, each
 * answer verified with OpenSSL: RSA PKCS#1 v1.5 for all six hashes, PSS for
 * three, ECDSA on four curves, Ed25519 over a TLS 1.3 CertificateVerify
 * message, RSA decrypt returning the padded block, and pings. */
#include "daemon.h"
#include "pki.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/rsa.h>

#include "client/verify.h"

typedef struct key {
    const char *name;
    EVP_PKEY *pub;
    uint8_t ski[20];
} key;

enum { RSA2048, P224, P256, P384, P521, ED25519, NKEYS };
static key keys[NKEYS];
static td_daemon d;
static kl_client *c;
static char *dir;

static void add_pki_key(int i, const char *name)
{
    char src[256];
    snprintf(src, sizeof src, "keys/%s.key", name);
    tp_copy_key(dir, tp_path(src));
    snprintf(src, sizeof src, "pubkeys/%s.pem", name);
    keys[i].name = name;
    keys[i].pub = tp_load_pub(tp_path(src));
    tp_ski(keys[i].pub, keys[i].ski);
}

static void add_gen_key(int i, const char *name, const char *curve)
{
    char file[64];
    snprintf(file, sizeof file, "%s.key", name);
    keys[i].name = name;
    keys[i].pub = tp_genkey(dir, file, "EC", curve, 0);
    tp_ski(keys[i].pub, keys[i].ski);
}

static int setup(void **state)
{
    dir = tp_tempdir("ops");
    add_pki_key(RSA2048, "rsa-2048");
    add_pki_key(P256, "ecdsa-p256");
    add_pki_key(P384, "ecdsa-p384");
    add_pki_key(ED25519, "ed25519");
    /* P-224 and P-521 are not demo keys: made for this run */
    add_gen_key(P224, "ecdsa-p224", "P-224");
    add_gen_key(P521, "ecdsa-p521", "P-521");
    td_opts o = {.name = "ops", .key_dirs = dir};
    td_start(&d, &o);
    c = td_connect(&d);
    return 0;
}

static int teardown(void **state)
{
    kl_client_close(c);
    int st = td_stop(&d, 0);
    for (int i = 0; i < NKEYS; i++)
        EVP_PKEY_free(keys[i].pub);
    tp_rmtree(dir);
    /* keylessd must exit 0 after SIGTERM (and clean under ASan) */
    return st == 0 ? 0 : -1;
}

/* Sends op on input with key k, expects success, verifies the answer. */
static void sign_and_verify(int k, uint8_t op, const uint8_t *in, size_t inlen)
{
    kl_request_spec s = {.opcode = op,
                         .payload = in,
                         .payload_len = inlen,
                         .ski = keys[k].ski,
                         .sni = "keyless.example",
                         .server_ip = (const uint8_t *)"\x7f\0\0\1",
                         .server_ip_len = 4};
    kl_client_result r;
    char why[256] = "";
    td_call(&d, c, &s, &r);
    if (r.opcode != KL_OP_RESPONSE)
        fail_msg("%s with %s: opcode 0x%02x error 0x%02x (%s)", kl_op_name(op),
                 keys[k].name, r.opcode, r.error, kl_err_text(r.error));
    if (kl_verify_output(keys[k].pub, op, in, inlen, r.payload, r.payload_len,
                         why, sizeof why) != KL_OK)
        fail_msg("%s with %s: %s", kl_op_name(op), keys[k].name, why);
    /* P5: padded to 1024 bytes unless the payload makes it longer */
    assert_int_equal(r.msg_len, kl_response_len(r.payload_len));
    kl_client_result_free(&r);
}

static void sign_message(int k, uint8_t op, const char *msg)
{
    uint8_t dg[KL_MAX_DIGEST];
    size_t n;
    assert_int_equal(kl_op_digest(op, msg, strlen(msg), dg, &n), KL_OK);
    sign_and_verify(k, op, dg, n);
}

static void test_rsa_pkcs1_six_hashes(void **state)
{
    static const uint8_t ops[] = {
        KL_OP_RSA_SIGN_MD5SHA1, KL_OP_RSA_SIGN_SHA1,   KL_OP_RSA_SIGN_SHA224,
        KL_OP_RSA_SIGN_SHA256,  KL_OP_RSA_SIGN_SHA384, KL_OP_RSA_SIGN_SHA512};
    for (size_t i = 0; i < sizeof ops; i++)
        sign_message(RSA2048, ops[i], "pkcs1 v1.5 over every hash");
}

static void test_rsa_pss_three_hashes(void **state)
{
    sign_message(RSA2048, KL_OP_RSA_PSS_SIGN_SHA256, "pss");
    sign_message(RSA2048, KL_OP_RSA_PSS_SIGN_SHA384, "pss");
    sign_message(RSA2048, KL_OP_RSA_PSS_SIGN_SHA512, "pss");
}

static void test_ecdsa_four_curves(void **state)
{
    sign_message(P224, KL_OP_ECDSA_SIGN_SHA224, "P-224");
    sign_message(P256, KL_OP_ECDSA_SIGN_SHA256, "P-256");
    sign_message(P384, KL_OP_ECDSA_SIGN_SHA384, "P-384");
    sign_message(P521, KL_OP_ECDSA_SIGN_SHA512, "P-521");
}

/* Every ECDSA opcode, and digests longer than the order (truncated). */
static void test_ecdsa_every_opcode(void **state)
{
    for (uint8_t op = KL_OP_ECDSA_SIGN_MD5SHA1; op <= KL_OP_ECDSA_SIGN_SHA512;
         op++) {
        sign_message(P256, op, "every ecdsa opcode");
        sign_message(P224, op, "every ecdsa opcode");
    }
}

/* Pure Ed25519 over the 130-byte TLS 1.3 CertificateVerify input: 64
 * spaces, the context string, a zero byte, the 32-byte transcript hash. */
static void test_ed25519_certificate_verify(void **state)
{
    static const char ctx[] = "TLS 1.3, server CertificateVerify";
    uint8_t m[130];
    memset(m, 0x20, 64);
    memcpy(m + 64, ctx, 33);
    m[97] = 0;
    for (int i = 0; i < 32; i++)
        m[98 + i] = (uint8_t)(i * 7 + 1);
    sign_and_verify(ED25519, KL_OP_ED25519_SIGN, m, sizeof m);
    /* deterministic: the same message gives the same signature */
    kl_request_spec s = {.opcode = KL_OP_ED25519_SIGN,
                         .payload = m,
                         .payload_len = sizeof m,
                         .ski = keys[ED25519].ski};
    kl_client_result a, b;
    td_call(&d, c, &s, &a);
    td_call(&d, c, &s, &b);
    assert_int_equal(a.payload_len, 64);
    assert_memory_equal(a.payload, b.payload, 64);
    kl_client_result_free(&a);
    kl_client_result_free(&b);
}

static void rsa_encrypt(const uint8_t *pt, size_t ptlen, uint8_t *ct,
                        size_t *ctlen)
{
    EVP_PKEY_CTX *e = EVP_PKEY_CTX_new_from_pkey(NULL, keys[RSA2048].pub, NULL);
    assert_non_null(e);
    assert_int_equal(EVP_PKEY_encrypt_init(e), 1);
    assert_int_equal(EVP_PKEY_CTX_set_rsa_padding(e, RSA_PKCS1_PADDING), 1);
    assert_int_equal(EVP_PKEY_encrypt(e, ct, ctlen, pt, ptlen), 1);
    EVP_PKEY_CTX_free(e);
}

/* P4: the raw block 00 02 PS 00 M comes back, padding not removed. */
static void test_rsa_decrypt_returns_padded_block(void **state)
{
    uint8_t pt[48], ct[256];
    size_t ctlen = sizeof ct;
    pt[0] = 3;
    pt[1] = 3;
    for (size_t i = 2; i < sizeof pt; i++)
        pt[i] = (uint8_t)(i * 13);
    rsa_encrypt(pt, sizeof pt, ct, &ctlen);
    assert_int_equal(ctlen, 256);
    sign_and_verify(RSA2048, KL_OP_RSA_DECRYPT, ct, ctlen);

    kl_request_spec s = {.opcode = KL_OP_RSA_DECRYPT,
                         .payload = ct,
                         .payload_len = ctlen,
                         .ski = keys[RSA2048].ski};
    kl_client_result r;
    td_call(&d, c, &s, &r);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    assert_int_equal(r.payload_len, 256);
    assert_int_equal(r.payload[0], 0x00);
    assert_int_equal(r.payload[1], 0x02);
    const uint8_t *m;
    size_t mlen;
    assert_int_equal(kl_pkcs1_type2_unpad(r.payload, r.payload_len, &m, &mlen),
                     KL_OK);
    assert_int_equal(mlen, sizeof pt);
    assert_memory_equal(m, pt, sizeof pt);
    kl_client_result_free(&r);
}

/* P4: leading zero bytes are allowed, and c == n is accepted and gives all
 * zeros (as the reference does). */
static void test_rsa_decrypt_edges(void **state)
{
    uint8_t pt[16] = {1, 2, 3}, ct[260];
    size_t ctlen = 256;
    rsa_encrypt(pt, sizeof pt, ct + 4, &ctlen);
    memset(ct, 0, 4);
    sign_and_verify(RSA2048, KL_OP_RSA_DECRYPT, ct, ctlen + 4);

    BIGNUM *n = NULL;
    uint8_t nb[256];
    assert_int_equal(
        EVP_PKEY_get_bn_param(keys[RSA2048].pub, OSSL_PKEY_PARAM_RSA_N, &n), 1);
    assert_int_equal(BN_bn2binpad(n, nb, sizeof nb), 256);
    BN_free(n);
    kl_request_spec s = {.opcode = KL_OP_RSA_DECRYPT,
                         .payload = nb,
                         .payload_len = sizeof nb,
                         .ski = keys[RSA2048].ski};
    kl_client_result r;
    td_call(&d, c, &s, &r);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    assert_int_equal(r.payload_len, 256);
    static const uint8_t zeros[256];
    assert_memory_equal(r.payload, zeros, 256);
    kl_client_result_free(&r);
}

/* P4: a ping echoes any bytes as a pong; P5: an empty pong has no payload
 * item and is still 1024 bytes; a large one is not padded. */
static void test_ping(void **state)
{
    td_expect_ping(&d, c);
    kl_request_spec s = {.opcode = KL_OP_PING};
    kl_client_result r;
    td_call(&d, c, &s, &r);
    assert_int_equal(r.opcode, KL_OP_PONG);
    assert_int_equal(r.payload_len, 0);
    assert_int_equal(r.msg_len, 1024);
    kl_client_result_free(&r);

    static uint8_t big[2000];
    memset(big, 0x5A, sizeof big);
    s.payload = big;
    s.payload_len = sizeof big;
    td_call(&d, c, &s, &r);
    assert_int_equal(r.opcode, KL_OP_PONG);
    assert_int_equal(r.msg_len, 2015);
    assert_memory_equal(r.payload, big, sizeof big);
    kl_client_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rsa_pkcs1_six_hashes),
        cmocka_unit_test(test_rsa_pss_three_hashes),
        cmocka_unit_test(test_ecdsa_four_curves),
        cmocka_unit_test(test_ecdsa_every_opcode),
        cmocka_unit_test(test_ed25519_certificate_verify),
        cmocka_unit_test(test_rsa_decrypt_returns_padded_block),
        cmocka_unit_test(test_rsa_decrypt_edges),
        cmocka_unit_test(test_ping),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
