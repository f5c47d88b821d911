/* SPDX-License-Identifier: Apache-2.0 */
/* Key files whose contents are not one key (docs/OPERATIONS.md "Key
 * files"): private and public halves of different keys, in every encoding
 * and key type; RSA keys without their primes; the all-zero EC scalar;
 * several keys in one file. */
#include "keytest.h"

#include <openssl/param_build.h>

#include "keys/decode.h"

/* A key whose private part is a's and whose public part is b's: what a
 * file pieced together from two keys decodes to. */
static EVP_PKEY *mixed_key(EVP_PKEY *a, EVP_PKEY *b)
{
    OSSL_PARAM *pa = NULL, *pb = NULL;
    assert_int_equal(EVP_PKEY_todata(a, EVP_PKEY_KEYPAIR, &pa), 1);
    assert_int_equal(EVP_PKEY_todata(b, EVP_PKEY_PUBLIC_KEY, &pb), 1);
    /* b's public values replace a's (n, e / the EC point) */
    for (OSSL_PARAM *p = pa; p->key; p++) {
        const OSSL_PARAM *q = OSSL_PARAM_locate_const(pb, p->key);
        if (q && (!strcmp(p->key, OSSL_PKEY_PARAM_RSA_N) ||
                  !strcmp(p->key, OSSL_PKEY_PARAM_PUB_KEY))) {
            assert_true(q->data_size <= p->data_size);
            memset(p->data, 0, p->data_size);
            memcpy(p->data, q->data, q->data_size);
            p->data_size = q->data_size;
        }
    }
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_pkey(NULL, a, NULL);
    EVP_PKEY *k = NULL;
    assert_int_equal(EVP_PKEY_fromdata_init(ctx), 1);
    assert_int_equal(EVP_PKEY_fromdata(ctx, &k, EVP_PKEY_KEYPAIR, pa), 1);
    EVP_PKEY_CTX_free(ctx);
    OSSL_PARAM_free(pa);
    OSSL_PARAM_free(pb);
    return k;
}

static void expect_ski_of(const kl_keystore *ks, EVP_PKEY *k, bool present)
{
    uint8_t ski[KL_SKI_LEN];
    assert_int_equal(kl_ski_from_pkey(k, ski), KL_OK);
    if ((kl_keystore_find(ks, ski) != NULL) != present)
        fail_msg("key %s in the store", present ? "missing" : "unexpectedly");
}

/* Ed25519 PKCS#8 v2 (RFC 8410 OneAsymmetricKey) carrying a public key. */
static uint8_t *ed25519_v2(EVP_PKEY *priv_of, EVP_PKEY *pub_of, size_t *len)
{
    uint8_t priv[32], pub[32];
    size_t n = 32;
    assert_int_equal(EVP_PKEY_get_raw_private_key(priv_of, priv, &n), 1);
    n = 32;
    assert_int_equal(EVP_PKEY_get_raw_public_key(pub_of, pub, &n), 1);
    static const uint8_t head[] = {0x30, 0x51, 0x02, 0x01, 0x01, 0x30,
                                   0x05, 0x06, 0x03, 0x2b, 0x65, 0x70,
                                   0x04, 0x22, 0x04, 0x20};
    uint8_t *der = malloc(0x53);
    assert_non_null(der);
    memcpy(der, head, sizeof head);
    memcpy(der + 16, priv, 32);
    memcpy(der + 48, "\x81\x21\x00", 3);
    memcpy(der + 51, pub, 32);
    *len = 0x53;
    return der;
}

/* A file whose public part is another key's is refused at every load, in
 * every encoding, and never files the key under the other key's SKI. */
static void test_refuses_mismatched_pairs(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);
    static const char *kinds[] = {"RSA", "P-256", "P-384", "P-521", "P-224"};
    static const tk_form forms[] = {TK_PEM_PKCS8, TK_PEM_TRAD, TK_DER_PKCS8,
                                    TK_DER_TRAD};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        EVP_PKEY *a, *b;
        if (!strcmp(kinds[i], "RSA")) {
            a = tk_vector_pkey("keys/rsa-2048.key");
            b = tk_vector_pkey("reference-keys/rsa.key");
        } else {
            a = EVP_EC_gen(kinds[i]);
            b = EVP_EC_gen(kinds[i]);
        }
        assert_non_null(a);
        assert_non_null(b);
        EVP_PKEY *mix = mixed_key(a, b);
        for (size_t f = 0; f < 4; f++) {
            tk_expect_form_refused(ks, &r, dir, mix, forms[f],
                                   "the private and public parts of the key "
                                   "do not match");
            expect_ski_of(ks, b, false);
        }
        /* the genuine key still loads */
        r.n = 0;
        assert_int_equal(
            kl_keystore_add_file(ks, tk_write_key(dir, "a.key", a, forms[0])),
            KL_OK);
        expect_ski_of(ks, a, true);
        EVP_PKEY_free(mix);
        EVP_PKEY_free(a);
        EVP_PKEY_free(b);
    }
    /* RSA: the public exponent of another key */
    EVP_PKEY *a = tk_vector_pkey("keys/rsa-3072.key");
    OSSL_PARAM *pa = NULL;
    assert_int_equal(EVP_PKEY_todata(a, EVP_PKEY_KEYPAIR, &pa), 1);
    OSSL_PARAM *e = OSSL_PARAM_locate(pa, OSSL_PKEY_PARAM_RSA_E);
    assert_non_null(e);
    assert_int_equal(OSSL_PARAM_set_uint(e, 3), 1);
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, "RSA", NULL);
    EVP_PKEY *bad_e = NULL;
    assert_int_equal(EVP_PKEY_fromdata_init(ctx), 1);
    assert_int_equal(EVP_PKEY_fromdata(ctx, &bad_e, EVP_PKEY_KEYPAIR, pa), 1);
    tk_expect_form_refused(ks, &r, dir, bad_e, TK_PEM_TRAD, "do not match");
    EVP_PKEY_free(bad_e);
    EVP_PKEY_CTX_free(ctx);
    OSSL_PARAM_free(pa);
    EVP_PKEY_free(a);

    /* Ed25519: a PKCS#8 v2 file (RFC 8410, with its public key) whose
     * public key is another key's, in DER and PEM */
    EVP_PKEY *ea = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    EVP_PKEY *eb = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    size_t n;
    uint8_t *der = ed25519_v2(ea, eb, &n);
    tk_expect_refused(ks, &r, dir, der, n,
                      "the private and public parts of the key do not match");
    BIO *bio = BIO_new(BIO_s_mem());
    assert_true(PEM_write_bio(bio, "PRIVATE KEY", "", der, (long)n));
    size_t pn;
    uint8_t *pem = tk_bio_take(bio, &pn);
    tk_expect_refused(ks, &r, dir, pem, pn, "do not match");
    free(pem);
    expect_ski_of(ks, eb, false);
    expect_ski_of(ks, ea, false);
    free(der);
    /* the genuine v2 file loads, under its own SKI */
    der = ed25519_v2(ea, ea, &n);
    r.n = 0;
    const char *p = tk_write(dir, "ed.key", der, n, 0600);
    if (kl_keystore_add_file(ks, p) != KL_OK)
        fail_msg("Ed25519 PKCS#8 v2 refused: %s", r.line[0]);
    expect_ski_of(ks, ea, true);
    free(der);
    EVP_PKEY_free(ea);
    EVP_PKEY_free(eb);
    kl_keystore_free(ks);

    /* In a directory, the pieced-together file sorts first and claims the
     * genuine key's SKI: refused, the genuine file serves (also how a
     * reload or the directory watch loads: tolerant, skipping bad files). */
    EVP_PKEY *x = EVP_EC_gen("P-256"), *y = EVP_EC_gen("P-256");
    EVP_PKEY *xy = mixed_key(x, y);
    char *d2 = tk_tmpdir();
    tk_write_key(d2, "a-pieced.key", xy, TK_PEM_TRAD);
    const char *genuine = tk_write_key(d2, "b-genuine.key", y, TK_PEM_PKCS8);
    char want[4200];
    snprintf(want, sizeof want, "%s", genuine);
    kl_keystore_opts o = {
        .skip_bad_keys = true, .report = tk_report, .report_arg = &r};
    memset(&r, 0, sizeof r);
    ks = kl_keystore_new(&o);
    assert_int_equal(kl_keystore_add_dir(ks, d2), KL_OK);
    assert_int_equal(kl_keystore_count(ks), 1);
    assert_true(tk_find(&r, "a-pieced.key", "do not match") >= 0);
    uint8_t ski[KL_SKI_LEN];
    assert_int_equal(kl_ski_from_pkey(y, ski), KL_OK);
    assert_string_equal(kl_key_path(kl_keystore_find(ks, ski)), want);
    kl_keystore_free(ks);
    /* and at startup (not tolerant) the load stops, naming the file */
    ks = tk_store(&r, false, false);
    assert_int_equal(kl_keystore_add_dir(ks, d2), KL_E_KEY);
    assert_true(tk_find(&r, "a-pieced.key", "do not match") >= 0);
    kl_keystore_free(ks);
    EVP_PKEY_free(xy);
    EVP_PKEY_free(x);
    EVP_PKEY_free(y);
    tk_rmrf(d2);
    tk_rmrf(dir);
}

/* DER of a non-negative INTEGER (len < 64 KiB) at p; returns its size. */
static size_t der_int(uint8_t *p, const BIGNUM *bn)
{
    int nb = BN_num_bytes(bn);
    size_t pad = BN_is_zero(bn) || BN_num_bits(bn) % 8 == 0 ? 1 : 0;
    size_t len = (size_t)nb + pad, off = 0;
    p[off++] = 0x02;
    if (len < 128) {
        p[off++] = (uint8_t)len;
    } else {
        p[off++] = 0x82;
        p[off++] = (uint8_t)(len >> 8);
        p[off++] = (uint8_t)len;
    }
    if (pad)
        p[off++] = 0;
    off += (size_t)BN_bn2bin(bn, p + off);
    return off;
}

/* PKCS#1 RSAPrivateKey with n and e of one key, d of another (or the same),
 * and every prime and CRT value 0: what tools that know only n, e and d
 * write. OpenSSL cannot encode such a key itself. */
static uint8_t *rsa_ned_der(EVP_PKEY *from, EVP_PKEY *d_from, size_t *len)
{
    BIGNUM *n = NULL, *e = NULL, *d = NULL, *zero = BN_new();
    assert_true(EVP_PKEY_get_bn_param(from, OSSL_PKEY_PARAM_RSA_N, &n));
    assert_true(EVP_PKEY_get_bn_param(from, OSSL_PKEY_PARAM_RSA_E, &e));
    assert_true(EVP_PKEY_get_bn_param(d_from, OSSL_PKEY_PARAM_RSA_D, &d));
    uint8_t body[2048];
    size_t m = der_int(body, zero);
    m += der_int(body + m, n);
    m += der_int(body + m, e);
    m += der_int(body + m, d);
    for (int i = 0; i < 5; i++)
        m += der_int(body + m, zero);
    uint8_t *der = malloc(m + 4);
    assert_non_null(der);
    der[0] = 0x30;
    der[1] = 0x82;
    der[2] = (uint8_t)(m >> 8);
    der[3] = (uint8_t)m;
    memcpy(der + 4, body, m);
    *len = m + 4;
    BN_free(n), BN_free(e), BN_clear_free(d), BN_free(zero);
    return der;
}

/* An RSA key known only by n, e and d is checked by a round trip through d
 * and e: loaded when whole, refused when its d is another key's. */
static void test_rsa_without_primes(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    EVP_PKEY *a = tk_vector_pkey("keys/rsa-2048.key");
    EVP_PKEY *b = tk_vector_pkey("reference-keys/rsa.key");
    size_t n;
    uint8_t *der = rsa_ned_der(a, a, &n);
    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);
    const char *p = tk_write(dir, "ned.key", der, n, 0600);
    if (kl_keystore_add_file(ks, p) != KL_OK)
        fail_msg("n, e, d key refused: %s", r.line[0]);
    expect_ski_of(ks, a, true);
    free(der);
    der = rsa_ned_der(a, b, &n);
    tk_expect_refused(ks, &r, dir, der, n, "e and d are not inverses");
    free(der);
    kl_keystore_free(ks);
    EVP_PKEY_free(a);
    EVP_PKEY_free(b);
    tk_rmrf(dir);
}

/* The fuzz_keyfile finding (fuzz/corpus/keyfile/ecdsa-p256-zero-scalar.der):
 * a SEC1 P-256 key whose scalar is all zeros. Its public key is the point
 * at infinity, which has no SKI; it is refused as invalid, not aborted on
 * and not reported as an SKI failure. */
static const uint8_t zero_scalar_p256[] = {
    0x30, 0x31, 0x02, 0x01, 0x01, 0x04, 0x20, 0,    0,    0,    0,    0,   0,
    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,   0,
    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,   0,
    0xa0, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07};

static void test_refuses_zero_scalar(void **state)
{
    (void)state;
    /* the fuzz target's own invariants, on the same bytes */
    kl_key_decoder *d = kl_key_decoder_new();
    assert_non_null(d);
    EVP_PKEY *pk = NULL;
    kl_key_info info;
    char why[KL_KEY_WHY_LEN] = "";
    assert_int_equal(kl_key_decode_buffer(d, zero_scalar_p256,
                                          sizeof zero_scalar_p256, &pk, &info,
                                          why, sizeof why),
                     KL_E_KEY);
    assert_null(pk);
    assert_non_null(strstr(why, "zero or not below the curve order"));
    kl_key_decoder_free(d);

    char *dir = tk_tmpdir();
    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);
    tk_expect_refused(ks, &r, dir, zero_scalar_p256, sizeof zero_scalar_p256,
                      "EC private key is zero");
    /* the checked-in corpus file is these bytes */
    size_t n;
    char path[4096];
    snprintf(path, sizeof path,
             "%s/fuzz/corpus/keyfile/ecdsa-p256-zero-scalar.der", tu_src_dir());
    char *corpus = tu_read_file(path, &n);
    assert_int_equal(n, sizeof zero_scalar_p256);
    assert_memory_equal(corpus, zero_scalar_p256, n);
    free(corpus);
    kl_keystore_free(ks);
    tk_rmrf(dir);
}

static void test_refuses_several_keys_in_a_file(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    EVP_PKEY *a = tk_vector_pkey("keys/ecdsa-p256.key");
    EVP_PKEY *b = tk_vector_pkey("keys/rsa-2048.key");
    size_t na, nb, nc;
    uint8_t *pa = tk_encode(a, TK_PEM_PKCS8, &na);
    uint8_t *pb = tk_encode(b, TK_PEM_TRAD, &nb);
    char *cert = tu_read_file(tu_vector_path("certs/ecdsa-p256.crt"), &nc);
    uint8_t *all = malloc(na + nb + nc + na);
    memcpy(all, pa, na);
    memcpy(all + na, cert, nc);
    memcpy(all + na + nc, pb, nb);
    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);
    tk_expect_refused(ks, &r, dir, all, na + nc + nb,
                      "file holds 2 private keys; keylessd loads one key per "
                      "file");
    memcpy(all + na + nc + nb, pa, na); /* even the same key twice */
    tk_expect_refused(ks, &r, dir, all, na + nc + nb + na,
                      "holds 3 private keys");
    assert_int_equal(kl_keystore_count(ks), 0);
    /* DER keys one after the other */
    free(pa);
    free(pb);
    pa = tk_encode(a, TK_DER_PKCS8, &na);
    pb = tk_encode(b, TK_DER_TRAD, &nb);
    memcpy(all, pa, na);
    memcpy(all + na, pb, nb);
    tk_expect_refused(ks, &r, dir, all, na + nb, "file holds 2 private keys");
    /* a DER key with a stray newline after it still loads */
    memcpy(all + na, "\n", 1);
    r.n = 0;
    assert_int_equal(
        kl_keystore_add_file(ks, tk_write(dir, "nl.key", all, na + 1, 0600)),
        KL_OK);
    free(all);
    free(cert);
    free(pa);
    free(pb);
    EVP_PKEY_free(a);
    EVP_PKEY_free(b);
    kl_keystore_free(ks);
    tk_rmrf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refuses_mismatched_pairs),
        cmocka_unit_test(test_rsa_without_primes),
        cmocka_unit_test(test_refuses_zero_scalar),
        cmocka_unit_test(test_refuses_several_keys_in_a_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
