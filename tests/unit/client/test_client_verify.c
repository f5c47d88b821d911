/* SPDX-License-Identifier: Apache-2.0 */
/* The public-key side of an operation (src/client/verify.c): loading public
 * keys, hashing per opcode, and verifying every kind of answer - with
 * positive cases made by OpenSSL with the private key here, and negative
 * cases for every way an answer can be wrong. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/pem.h>
#include <openssl/rsa.h>

#include "client/verify.h"
#include "keys/keystore.h"

static EVP_PKEY *rsa, *p256, *ed;

static int setup(void **state)
{
    rsa = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
    p256 = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    ed = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    return rsa && p256 && ed ? 0 : -1;
}

static int teardown(void **state)
{
    EVP_PKEY_free(rsa);
    EVP_PKEY_free(p256);
    EVP_PKEY_free(ed);
    return 0;
}

/* Signs a digest the way the key server does for op (protocol P4). */
static size_t sign_digest(EVP_PKEY *k, uint8_t op, const uint8_t *d,
                          size_t dlen, uint8_t *sig, size_t cap)
{
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_pkey(NULL, k, NULL);
    assert_non_null(ctx);
    assert_int_equal(EVP_PKEY_sign_init(ctx), 1);
    kl_op_class cls = kl_op_classify(op);
    if (cls == KL_OPC_RSA || cls == KL_OPC_RSA_PSS) {
        assert_int_equal(EVP_PKEY_CTX_set_signature_md(ctx, kl_op_md(op)), 1);
    }
    if (cls == KL_OPC_RSA_PSS) {
        assert_int_equal(
            EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PSS_PADDING), 1);
        assert_int_equal(
            EVP_PKEY_CTX_set_rsa_pss_saltlen(ctx, RSA_PSS_SALTLEN_DIGEST), 1);
    }
    size_t n = cap;
    assert_int_equal(EVP_PKEY_sign(ctx, sig, &n, d, dlen), 1);
    EVP_PKEY_CTX_free(ctx);
    return n;
}

static void check_sign(EVP_PKEY *k, uint8_t op)
{
    uint8_t d[KL_MAX_DIGEST], sig[600];
    size_t dlen;
    char why[256];
    assert_int_equal(kl_op_digest(op, "message", 7, d, &dlen), KL_OK);
    assert_int_equal(dlen, kl_op_digest_len(op));
    size_t n = sign_digest(k, op, d, dlen, sig, sizeof sig);
    assert_int_equal(kl_verify_output(k, op, d, dlen, sig, n, why, sizeof why),
                     KL_OK);
    /* a flipped bit in the signature or the digest fails */
    sig[n / 2] ^= 1;
    assert_int_equal(kl_verify_output(k, op, d, dlen, sig, n, why, sizeof why),
                     KL_E_BAD_VALUE);
    assert_non_null(strstr(why, "does not verify"));
    sig[n / 2] ^= 1;
    d[0] ^= 1;
    assert_int_equal(kl_verify_output(k, op, d, dlen, sig, n, why, sizeof why),
                     KL_E_BAD_VALUE);
}

static void test_rsa_pkcs1_all_hashes(void **state)
{
    static const uint8_t opsl[] = {
        KL_OP_RSA_SIGN_MD5SHA1, KL_OP_RSA_SIGN_SHA1,   KL_OP_RSA_SIGN_SHA224,
        KL_OP_RSA_SIGN_SHA256,  KL_OP_RSA_SIGN_SHA384, KL_OP_RSA_SIGN_SHA512};
    for (size_t i = 0; i < sizeof opsl; i++)
        check_sign(rsa, opsl[i]);
}

/* A PKCS#1 signature is not accepted as PSS and vice versa, and the hash
 * must be the opcode's. */
static void test_rsa_padding_and_hash_must_match(void **state)
{
    uint8_t d[32], sig[256];
    char why[256];
    memset(d, 7, sizeof d);
    size_t n = sign_digest(rsa, KL_OP_RSA_SIGN_SHA256, d, 32, sig, sizeof sig);
    assert_int_equal(kl_verify_output(rsa, KL_OP_RSA_PSS_SIGN_SHA256, d, 32,
                                      sig, n, why, sizeof why),
                     KL_E_BAD_VALUE);
    n = sign_digest(rsa, KL_OP_RSA_PSS_SIGN_SHA256, d, 32, sig, sizeof sig);
    assert_int_equal(kl_verify_output(rsa, KL_OP_RSA_SIGN_SHA256, d, 32, sig, n,
                                      why, sizeof why),
                     KL_E_BAD_VALUE);
    assert_int_equal(kl_verify_output(rsa, KL_OP_RSA_PSS_SIGN_SHA256, d, 32,
                                      sig, n, why, sizeof why),
                     KL_OK);
}

static void test_rsa_pss(void **state)
{
    check_sign(rsa, KL_OP_RSA_PSS_SIGN_SHA256);
    check_sign(rsa, KL_OP_RSA_PSS_SIGN_SHA384);
    check_sign(rsa, KL_OP_RSA_PSS_SIGN_SHA512);
}

static void test_ecdsa(void **state)
{
    check_sign(p256, KL_OP_ECDSA_SIGN_SHA256);
    check_sign(p256, KL_OP_ECDSA_SIGN_SHA384); /* truncated to the order */
    check_sign(p256, KL_OP_ECDSA_SIGN_SHA1);
    check_sign(p256, KL_OP_ECDSA_SIGN_MD5SHA1);
}

static void test_ed25519_over_message(void **state)
{
    uint8_t msg[130], sig[64];
    size_t n = sizeof sig;
    char why[256];
    memset(msg, ' ', 64);
    memcpy(msg + 64, "TLS 1.3, server CertificateVerify", 33);
    msg[97] = 0;
    memset(msg + 98, 0xAA, 32);
    EVP_MD_CTX *m = EVP_MD_CTX_new();
    assert_int_equal(EVP_DigestSignInit(m, NULL, NULL, NULL, ed), 1);
    assert_int_equal(EVP_DigestSign(m, sig, &n, msg, sizeof msg), 1);
    EVP_MD_CTX_free(m);
    assert_int_equal(kl_verify_output(ed, KL_OP_ED25519_SIGN, msg, sizeof msg,
                                      sig, n, why, sizeof why),
                     KL_OK);
    msg[129] ^= 1;
    assert_int_equal(kl_verify_output(ed, KL_OP_ED25519_SIGN, msg, sizeof msg,
                                      sig, n, why, sizeof why),
                     KL_E_BAD_VALUE);
}

static void test_op_must_fit_key(void **state)
{
    uint8_t d[32] = {0}, sig[8] = {0};
    char why[256];
    assert_int_equal(kl_verify_output(p256, KL_OP_RSA_SIGN_SHA256, d, 32, sig,
                                      8, why, sizeof why),
                     KL_E_BAD_VALUE);
    assert_non_null(strstr(why, "does not fit"));
    assert_int_equal(kl_verify_output(rsa, KL_OP_ECDSA_SIGN_SHA256, d, 32, sig,
                                      8, why, sizeof why),
                     KL_E_BAD_VALUE);
    assert_int_equal(
        kl_verify_output(rsa, KL_OP_PING, d, 32, sig, 8, why, sizeof why),
        KL_E_BAD_VALUE);
    assert_int_equal(kl_op_digest(KL_OP_ED25519_SIGN, "x", 1, d, &(size_t){0}),
                     KL_E_BAD_VALUE);
}

/* The raw decrypt result (protocol P4) re-encrypts to the ciphertext, with
 * or without leading zero bytes on the ciphertext. */
static void test_rsa_decrypt(void **state)
{
    uint8_t pt[48], ct[300], blk[256];
    size_t ctlen = 256, blen = sizeof blk;
    char why[256];
    memset(pt, 0x33, sizeof pt);
    EVP_PKEY_CTX *e = EVP_PKEY_CTX_new_from_pkey(NULL, rsa, NULL);
    assert_int_equal(EVP_PKEY_encrypt_init(e), 1);
    assert_int_equal(EVP_PKEY_CTX_set_rsa_padding(e, RSA_PKCS1_PADDING), 1);
    assert_int_equal(EVP_PKEY_encrypt(e, ct + 2, &ctlen, pt, sizeof pt), 1);
    EVP_PKEY_CTX_free(e);
    EVP_PKEY_CTX *d = EVP_PKEY_CTX_new_from_pkey(NULL, rsa, NULL);
    assert_int_equal(EVP_PKEY_decrypt_init(d), 1);
    assert_int_equal(EVP_PKEY_CTX_set_rsa_padding(d, RSA_NO_PADDING), 1);
    assert_int_equal(EVP_PKEY_decrypt(d, blk, &blen, ct + 2, ctlen), 1);
    EVP_PKEY_CTX_free(d);
    assert_int_equal(blen, 256);

    assert_int_equal(kl_verify_output(rsa, KL_OP_RSA_DECRYPT, ct + 2, ctlen,
                                      blk, blen, why, sizeof why),
                     KL_OK);
    ct[0] = ct[1] = 0;
    assert_int_equal(kl_verify_output(rsa, KL_OP_RSA_DECRYPT, ct, ctlen + 2,
                                      blk, blen, why, sizeof why),
                     KL_OK);
    const uint8_t *m;
    size_t mlen;
    assert_int_equal(kl_pkcs1_type2_unpad(blk, blen, &m, &mlen), KL_OK);
    assert_int_equal(mlen, sizeof pt);
    assert_memory_equal(m, pt, mlen);

    /* wrong length, wrong content */
    assert_int_equal(kl_verify_output(rsa, KL_OP_RSA_DECRYPT, ct + 2, ctlen,
                                      blk + 1, blen - 1, why, sizeof why),
                     KL_E_BAD_VALUE);
    blk[100] ^= 1;
    assert_int_equal(kl_verify_output(rsa, KL_OP_RSA_DECRYPT, ct + 2, ctlen,
                                      blk, blen, why, sizeof why),
                     KL_E_BAD_VALUE);
    assert_non_null(strstr(why, "re-encrypting"));
}

static void test_unpad_rejects(void **state)
{
    uint8_t b[64];
    const uint8_t *m;
    size_t ml;
    memset(b, 0x42, sizeof b);
    b[0] = 0;
    b[1] = 2;
    b[40] = 0;
    assert_int_equal(kl_pkcs1_type2_unpad(b, sizeof b, &m, &ml), KL_OK);
    assert_int_equal(ml, 23);
    b[1] = 1; /* type 1 is a signature block */
    assert_int_equal(kl_pkcs1_type2_unpad(b, sizeof b, &m, &ml),
                     KL_E_BAD_VALUE);
    b[1] = 2;
    b[40] = 0x42; /* no separator */
    assert_int_equal(kl_pkcs1_type2_unpad(b, sizeof b, &m, &ml),
                     KL_E_BAD_VALUE);
    b[5] = 0; /* PS of 3 bytes: too short */
    assert_int_equal(kl_pkcs1_type2_unpad(b, sizeof b, &m, &ml),
                     KL_E_BAD_VALUE);
    assert_int_equal(kl_pkcs1_type2_unpad(b, 10, &m, &ml), KL_E_BAD_VALUE);
}

/* Certificates and public keys from the vectors, PEM and DER; a private
 * key file or garbage gets a message naming the file. */
static void test_pubkey_load(void **state)
{
    static const struct {
        const char *file, *desc, *ski;
    } cases[] = {
        {"pubkeys/ecdsa-p256.pubkey.pem", "ECDSA-P-256",
         "069386e232beb421876020fe1cf6f810a37b4ef8"},
        {"certs/ecdsa-p384.crt", "ECDSA-P-384",
         "74d106aff6c7deae4694a524e9b931887466ed9a"},
        {"certs/ed25519.crt", "Ed25519",
         "16913a8bfd34883606daf05bb9cb8b3e25160c81"},
        {"pubkeys/rsa-3072.pubkey.pem", "RSA-3072",
         "9e9c68d8a84010866904fe901bb69cef1385c6fe"},
        {"reference-keys/rsa.pubkey", "RSA-2048",
         "406550d87609ecae021a83ef2c1f372c08f42699"},
    };
    char err[512], desc[64], hex[41];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        EVP_PKEY *pk = NULL;
        uint8_t ski[20];
        assert_int_equal(
            kl_pubkey_load(tu_vector_path(cases[i].file), &pk, err, sizeof err),
            KL_OK);
        assert_string_equal(kl_pubkey_desc(pk, desc, sizeof desc),
                            cases[i].desc);
        assert_int_equal(kl_ski_from_pkey(pk, ski), KL_OK);
        kl_ski_hex(ski, hex);
        assert_string_equal(hex, cases[i].ski);

        /* the same key in DER */
        unsigned char *der = NULL;
        int dl = i2d_PUBKEY(pk, &der);
        assert_true(dl > 0);
        char path[] = "/tmp/kl-verify-der-XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, der, (size_t)dl), dl);
        close(fd);
        EVP_PKEY *pk2 = NULL;
        assert_int_equal(kl_pubkey_load(path, &pk2, err, sizeof err), KL_OK);
        assert_int_equal(EVP_PKEY_eq(pk, pk2), 1);
        unlink(path);
        OPENSSL_free(der);
        EVP_PKEY_free(pk2);
        EVP_PKEY_free(pk);
    }
    EVP_PKEY *pk = NULL;
    assert_int_equal(kl_pubkey_load(tu_vector_path("keys/rsa-2048.key"), &pk,
                                    err, sizeof err),
                     KL_E_BAD_VALUE);
    assert_non_null(strstr(err, "holds a private key"));
    assert_int_equal(
        kl_pubkey_load(tu_vector_path("README.md"), &pk, err, sizeof err),
        KL_E_BAD_VALUE);
    assert_non_null(strstr(err, "README.md"));
    assert_int_equal(kl_pubkey_load("/nonexistent/x.pem", &pk, err, sizeof err),
                     KL_E_IO);
    assert_non_null(strstr(err, "/nonexistent/x.pem"));
    assert_null(pk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rsa_pkcs1_all_hashes),
        cmocka_unit_test(test_rsa_padding_and_hash_must_match),
        cmocka_unit_test(test_rsa_pss),
        cmocka_unit_test(test_ecdsa),
        cmocka_unit_test(test_ed25519_over_message),
        cmocka_unit_test(test_op_must_fit_key),
        cmocka_unit_test(test_rsa_decrypt),
        cmocka_unit_test(test_unpad_rejects),
        cmocka_unit_test(test_pubkey_load),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
