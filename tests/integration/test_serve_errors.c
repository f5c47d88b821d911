/* SPDX-License-Identifier: Apache-2.0 */
/* Every error path of protocol P6 over a real connection, unknown tags
 * ignored (P3), and each malformed body of P3 answered `format error` with
 * the request's id while the connection stays usable. */
#include "daemon.h"
#include "pki.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>

#include "client/verify.h"

static td_daemon d;
static kl_client *c;
static char *dir;
static EVP_PKEY *rsa_pub, *ec_pub;
static uint8_t rsa_ski[20], ec_ski[20];

static int setup(void **state)
{
    dir = tp_tempdir("errors");
    tp_copy_key(dir, tp_path("keys/rsa-2048.key"));
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    rsa_pub = tp_load_pub(tp_path("pubkeys/rsa-2048.pem"));
    ec_pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    tp_ski(rsa_pub, rsa_ski);
    tp_ski(ec_pub, ec_ski);
    td_opts o = {.name = "errors", .key_dirs = dir};
    td_start(&d, &o);
    c = td_connect(&d);
    return 0;
}

static int teardown(void **state)
{
    kl_client_close(c);
    int st = td_stop(&d, 0);
    EVP_PKEY_free(rsa_pub);
    EVP_PKEY_free(ec_pub);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

static const uint8_t digest32[32] = {0x11, 0x22, 0x33};

static kl_request_spec req(uint8_t op, const uint8_t *ski)
{
    kl_request_spec s = {.opcode = op,
                         .payload = digest32,
                         .payload_len = sizeof digest32,
                         .ski = ski};
    return s;
}

/* P6 0x02: a valid SKI that no key has. */
static void test_key_not_found(void **state)
{
    uint8_t other[20];
    memset(other, 0x5C, sizeof other);
    kl_request_spec s = req(KL_OP_ECDSA_SIGN_SHA256, other);
    td_expect_error(&d, c, &s, KL_ERR_KEY_NOT_FOUND);
    s = req(KL_OP_RSA_SIGN_SHA256, other);
    td_expect_error(&d, c, &s, KL_ERR_KEY_NOT_FOUND);
}

/* P6 0x08: SKI missing, all zero (P7: invalid), or not 20 bytes long
 * (P3: treated as absent). */
static void test_missing_or_invalid_ski_is_internal(void **state)
{
    kl_request_spec s = req(KL_OP_ECDSA_SIGN_SHA256, NULL);
    td_expect_error(&d, c, &s, KL_ERR_INTERNAL);
    static const uint8_t zero[20];
    s = req(KL_OP_ECDSA_SIGN_SHA256, zero);
    td_expect_error(&d, c, &s, KL_ERR_INTERNAL);

    /* raw: opcode 0x15, a 19-byte SKI item, a payload */
    uint8_t m[8 + 4 + 22 + 35];
    size_t n = 0;
    memcpy(m, "\x01\x00\x00\x00\x00\x00\x0c\x01", 8);
    n = 8;
    memcpy(m + n, "\x11\x00\x01\x15", 4);
    n += 4;
    memcpy(m + n, "\x04\x00\x13", 3);
    memcpy(m + n + 3, ec_ski, 19);
    n += 22;
    memcpy(m + n, "\x12\x00\x20", 3);
    memcpy(m + n + 3, digest32, 32);
    n += 35;
    m[2] = (uint8_t)((n - 8) >> 8);
    m[3] = (uint8_t)(n - 8);
    assert_int_equal(kl_client_send_raw(c, m, n), KL_OK);
    kl_client_result r;
    assert_int_equal(kl_client_recv(c, 30000, &r), KL_OK);
    assert_int_equal(r.id, 0x0c01);
    assert_int_equal(r.opcode, KL_OP_ERROR);
    assert_int_equal(r.error, KL_ERR_INTERNAL);
    kl_client_result_free(&r);
}

/* P4/P6 0x05: unknown opcodes (0x00 and the old raw decrypt 0x08
 * included), and an unconfigured custom function. */
static void test_bad_opcode(void **state)
{
    static const uint8_t ops[] = {0x00, 0x08, 0x09, 0x11, 0x19, 0x25,
                                  0x34, 0x38, 0x99, 0xF3, 0xFE};
    for (size_t i = 0; i < sizeof ops; i++) {
        kl_request_spec s = req(ops[i], ec_ski);
        td_expect_error(&d, c, &s, KL_ERR_BAD_OPCODE);
    }
    kl_request_spec s = req(KL_OP_CUSTOM, ec_ski);
    s.custom_func = "anything";
    td_expect_error(&d, c, &s, KL_ERR_BAD_OPCODE);
    s = req(KL_OP_CUSTOM, NULL);
    td_expect_error(&d, c, &s, KL_ERR_BAD_OPCODE);
}

/* P4/P6 0x06: response opcodes sent as requests. */
static void test_unexpected_opcode(void **state)
{
    static const uint8_t ops[] = {KL_OP_RESPONSE, KL_OP_PONG, KL_OP_ERROR};
    for (size_t i = 0; i < sizeof ops; i++) {
        kl_request_spec s = req(ops[i], ec_ski);
        td_expect_error(&d, c, &s, KL_ERR_UNEXPECTED_OPCODE);
        s = req(ops[i], NULL);
        td_expect_error(&d, c, &s, KL_ERR_UNEXPECTED_OPCODE);
    }
}

/* P4/P6 0x08: seal, unseal and RPC without a configured back end. */
static void test_seal_unseal_rpc_internal(void **state)
{
    static const uint8_t ops[] = {KL_OP_SEAL, KL_OP_UNSEAL, KL_OP_RPC};
    for (size_t i = 0; i < sizeof ops; i++) {
        kl_request_spec s = req(ops[i], NULL);
        td_expect_error(&d, c, &s, KL_ERR_INTERNAL);
        s = req(ops[i], ec_ski);
        td_expect_error(&d, c, &s, KL_ERR_INTERNAL);
    }
}

/* P4/P6 0x01: RSA and PSS digests of the wrong length. */
static void test_wrong_digest_length_is_crypto(void **state)
{
    static const uint8_t d20[20], d48[48];
    kl_request_spec s = req(KL_OP_RSA_SIGN_SHA256, rsa_ski);
    s.payload = d20;
    s.payload_len = sizeof d20;
    td_expect_error(&d, c, &s, KL_ERR_CRYPTO);
    s.opcode = KL_OP_RSA_PSS_SIGN_SHA256;
    td_expect_error(&d, c, &s, KL_ERR_CRYPTO);
    s.opcode = KL_OP_RSA_SIGN_SHA384;
    td_expect_error(&d, c, &s, KL_ERR_CRYPTO);
    s.opcode = KL_OP_RSA_SIGN_MD5SHA1;
    td_expect_error(&d, c, &s, KL_ERR_CRYPTO);
    s.opcode = KL_OP_RSA_PSS_SIGN_SHA512;
    s.payload = d48;
    s.payload_len = sizeof d48;
    td_expect_error(&d, c, &s, KL_ERR_CRYPTO);
    s.payload_len = 0;
    s.opcode = KL_OP_RSA_SIGN_SHA1;
    td_expect_error(&d, c, &s, KL_ERR_CRYPTO);
}

/* P4/P6 0x01: a ciphertext greater than the modulus. */
static void test_rsa_decrypt_c_above_n_is_crypto(void **state)
{
    BIGNUM *n = NULL;
    uint8_t nb[256];
    assert_int_equal(EVP_PKEY_get_bn_param(rsa_pub, OSSL_PKEY_PARAM_RSA_N, &n),
                     1);
    assert_int_equal(BN_add_word(n, 1), 1);
    assert_int_equal(BN_bn2binpad(n, nb, sizeof nb), 256);
    BN_free(n);
    kl_request_spec s = req(KL_OP_RSA_DECRYPT, rsa_ski);
    s.payload = nb;
    s.payload_len = sizeof nb;
    td_expect_error(&d, c, &s, KL_ERR_CRYPTO);
    /* longer than the modulus, with a non-zero top byte */
    uint8_t big[257];
    memset(big, 0xFF, sizeof big);
    s.payload = big;
    s.payload_len = sizeof big;
    td_expect_error(&d, c, &s, KL_ERR_CRYPTO);
}

/* P4: keylessd checks the opcode against the key type (crypto error). */
static void test_opcode_key_type_mismatch_is_crypto(void **state)
{
    static const struct {
        uint8_t op;
        int rsa_key;
    } cases[] = {
        {KL_OP_RSA_SIGN_SHA256, 0},   {KL_OP_RSA_PSS_SIGN_SHA256, 0},
        {KL_OP_RSA_DECRYPT, 0},       {KL_OP_ED25519_SIGN, 0},
        {KL_OP_ECDSA_SIGN_SHA256, 1}, {KL_OP_ED25519_SIGN, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kl_request_spec s =
            req(cases[i].op, cases[i].rsa_key ? rsa_ski : ec_ski);
        td_expect_error(&d, c, &s, KL_ERR_CRYPTO);
    }
}

/* Appends an item to a raw message under construction. */
static void item(uint8_t *m, size_t *n, uint8_t tag, const void *v, size_t len)
{
    m[(*n)++] = tag;
    m[(*n)++] = (uint8_t)(len >> 8);
    m[(*n)++] = (uint8_t)len;
    if (len)
        memcpy(m + *n, v, len);
    *n += len;
}

static void header(uint8_t *m, size_t n, uint32_t id)
{
    m[0] = 1;
    m[1] = 0;
    m[2] = (uint8_t)((n - 8) >> 8);
    m[3] = (uint8_t)(n - 8);
    m[4] = (uint8_t)(id >> 24);
    m[5] = (uint8_t)(id >> 16);
    m[6] = (uint8_t)(id >> 8);
    m[7] = (uint8_t)id;
}

/* P3: unknown tags are skipped, wherever they are - the request is served
 * and the signature verifies. */
static void test_unknown_tags_ignored(void **state)
{
    uint8_t m[400];
    size_t n = 8;
    uint8_t op = KL_OP_ECDSA_SIGN_SHA256;
    item(m, &n, 0x30, "abc", 3);
    item(m, &n, KL_TAG_OPCODE, &op, 1);
    item(m, &n, 0xEE, NULL, 0);
    item(m, &n, KL_TAG_SKI, ec_ski, 20);
    item(m, &n, 0x07, "zzzzzzzz", 8);
    item(m, &n, KL_TAG_PAYLOAD, digest32, 32);
    item(m, &n, 0x99, digest32, 32);
    header(m, n, 0xA1B2C3D4);
    assert_int_equal(kl_client_send_raw(c, m, n), KL_OK);
    kl_client_result r;
    char why[256];
    assert_int_equal(kl_client_recv(c, 30000, &r), KL_OK);
    assert_int_equal(r.id, 0xA1B2C3D4);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    assert_int_equal(kl_verify_output(ec_pub, op, digest32, 32, r.payload,
                                      r.payload_len, why, sizeof why),
                     KL_OK);
    kl_client_result_free(&r);
}

/* P3: each malformed body gets `format error` with its id, and the
 * connection stays usable (a ping after each one is answered). */
static void test_malformed_bodies_format_error(void **state)
{
    static const struct {
        const char *name;
        const char *body; /* hex */
    } cases[] = {
        {"item overruns the body", "1100011512ffff00"},
        {"opcode item of length 2", "1100021515"},
        {"opcode item of length 0", "110000"},
        {"known tag twice (opcode)", "11000115110001f1"},
        {"known tag twice (payload)", "110001f1120001aa120001bb"},
        {"compliance region of length 2", "110001f11700020101"},
        {"client IP of length 5", "110001f1030005010203040a"},
        {"server IP of length 3", "110001f1050003010203"},
        {"item overruns after a good item", "110001f1120005aabb"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t blen;
        uint8_t *body = tu_unhex(cases[i].body, &blen);
        uint8_t m[64];
        uint32_t id = 0x7E000000u + (uint32_t)i;
        memcpy(m + 8, body, blen);
        header(m, 8 + blen, id);
        free(body);
        assert_int_equal(kl_client_send_raw(c, m, 8 + blen), KL_OK);
        kl_client_result r;
        kl_status st = kl_client_recv(c, 30000, &r);
        if (st != KL_OK) {
            td_dump_log(&d);
            fail_msg("%s: no answer (%s: %s)", cases[i].name, kl_status_str(st),
                     kl_client_last_error(c));
        }
        if (r.id != id || r.opcode != KL_OP_ERROR || r.error != KL_ERR_FORMAT)
            fail_msg("%s: expected format error for id 0x%08x, got id 0x%08x "
                     "opcode 0x%02x error 0x%02x",
                     cases[i].name, id, r.id, r.opcode, r.error);
        kl_client_result_free(&r);
        td_expect_ping(&d, c);
    }
}

/* P3: 1 or 2 stray bytes after the last item are ignored; a missing
 * opcode means opcode 0 (bad opcode), not a format error. */
static void test_stray_bytes_and_empty_body(void **state)
{
    uint8_t m[32];
    size_t n = 8;
    uint8_t op = KL_OP_PING;
    item(m, &n, KL_TAG_OPCODE, &op, 1);
    m[n++] = 0x20;
    m[n++] = 0x00;
    header(m, n, 77);
    assert_int_equal(kl_client_send_raw(c, m, n), KL_OK);
    kl_client_result r;
    assert_int_equal(kl_client_recv(c, 30000, &r), KL_OK);
    assert_int_equal(r.id, 77);
    assert_int_equal(r.opcode, KL_OP_PONG);
    kl_client_result_free(&r);

    header(m, 8, 78);
    assert_int_equal(kl_client_send_raw(c, m, 8), KL_OK);
    assert_int_equal(kl_client_recv(c, 30000, &r), KL_OK);
    assert_int_equal(r.id, 78);
    assert_int_equal(r.opcode, KL_OP_ERROR);
    assert_int_equal(r.error, KL_ERR_BAD_OPCODE);
    kl_client_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_not_found),
        cmocka_unit_test(test_missing_or_invalid_ski_is_internal),
        cmocka_unit_test(test_bad_opcode),
        cmocka_unit_test(test_unexpected_opcode),
        cmocka_unit_test(test_seal_unseal_rpc_internal),
        cmocka_unit_test(test_wrong_digest_length_is_crypto),
        cmocka_unit_test(test_rsa_decrypt_c_above_n_is_crypto),
        cmocka_unit_test(test_opcode_key_type_mismatch_is_crypto),
        cmocka_unit_test(test_unknown_tags_ignored),
        cmocka_unit_test(test_malformed_bodies_format_error),
        cmocka_unit_test(test_stray_bytes_and_empty_body),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
