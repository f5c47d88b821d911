/* SPDX-License-Identifier: Apache-2.0 */
/* The key store: SKIs (protocol P7), every accepted encoding, every refusal
 * with its reason, permissions, duplicates, directories. */
#include "keytest.h"

#include <errno.h>
#include <jansson.h>
#include <openssl/param_build.h>

#include "keys/decode.h"

static void expect_ski(const kl_keystore *ks, const char *hex, const char *desc)
{
    uint8_t ski[KL_SKI_LEN];
    char buf[32];
    assert_int_equal(kl_ski_parse(hex, ski), KL_OK);
    const kl_key *k = kl_keystore_find(ks, ski);
    if (!k)
        fail_msg("no key with SKI %s", hex);
    assert_memory_equal(kl_key_ski(k), ski, KL_SKI_LEN);
    if (desc)
        assert_string_equal(kl_key_desc(k, buf, sizeof buf), desc);
}

static void test_reference_key_skis(void **state)
{
    (void)state;
    tk_reports r;
    kl_keystore *ks = tk_store(&r, true, false);
    assert_int_equal(
        kl_keystore_add_file(ks, tu_vector_path("reference-keys/rsa.key")),
        KL_OK);
    assert_int_equal(
        kl_keystore_add_file(ks, tu_vector_path("reference-keys/ecdsa.key")),
        KL_OK);
    assert_int_equal(
        kl_keystore_add_file(ks, tu_vector_path("reference-keys/ed25519.key")),
        KL_OK);
    assert_int_equal(kl_keystore_count(ks), 3);
    expect_ski(ks, "406550D87609ECAE021A83EF2C1F372C08F42699", "RSA-2048");
    expect_ski(ks, "D9C69B8E23ABBA7C26FD5D0E282F3DD679741036", "ECDSA-P-256");
    expect_ski(ks, "1B5E422431D15E92E88312C04807591D62C2B687", "Ed25519");
    assert_int_equal(r.n, 0);
    kl_keystore_free(ks);
}

static void test_vector_key_skis(void **state)
{
    (void)state;
    json_error_t jerr;
    json_t *root = json_load_file(tu_vector_path("vectors.json"), 0, &jerr);
    assert_non_null(root);
    json_t *keys = json_object_get(root, "keys");
    assert_int_equal(json_array_size(keys), 5);
    tk_reports r;
    kl_keystore *ks = tk_store(&r, true, false);
    size_t i;
    json_t *k;
    json_array_foreach(keys, i, k)
    {
        const char *file = json_string_value(json_object_get(k, "file"));
        assert_int_equal(kl_keystore_add_file(ks, tu_vector_path(file)), KL_OK);
    }
    json_array_foreach(keys, i, k)
    {
        expect_ski(ks, json_string_value(json_object_get(k, "ski")),
                   json_string_value(json_object_get(k, "type")));
    }
    /* a dense index in load order */
    for (i = 0; i < 5; i++) {
        uint8_t ski[KL_SKI_LEN];
        assert_int_equal(kl_ski_parse(json_string_value(json_object_get(
                                          json_array_get(keys, i), "ski")),
                                      ski),
                         KL_OK);
        assert_int_equal(kl_key_index(kl_keystore_find(ks, ski)), i);
    }
    json_decref(root);
    kl_keystore_free(ks);
}

/* Each vector key in each private encoding loads with the same SKI. */
static void test_every_private_encoding(void **state)
{
    (void)state;
    static const struct {
        const char *file, *ski;
    } v[] = {
        {"keys/rsa-2048.key", "3d47b731991ed4a0e281cdc8349c14ec537d220c"},
        {"keys/ecdsa-p384.key", "74d106aff6c7deae4694a524e9b931887466ed9a"},
        {"keys/ed25519.key", "16913a8bfd34883606daf05bb9cb8b3e25160c81"},
        {"reference-keys/ecdsa.key",
         "d9c69b8e23abba7c26fd5d0e282f3dd679741036"},
    };
    static const tk_form forms[] = {TK_PEM_PKCS8, TK_PEM_TRAD, TK_DER_PKCS8,
                                    TK_DER_TRAD};
    char *dir = tk_tmpdir();
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        EVP_PKEY *pk = tk_vector_pkey(v[i].file);
        for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
            /* Ed25519 has only PKCS#8 (RFC 8410) */
            if (EVP_PKEY_is_a(pk, "ED25519") &&
                (forms[f] == TK_PEM_TRAD || forms[f] == TK_DER_TRAD))
                continue;
            tk_reports r;
            kl_keystore *ks = tk_store(&r, false, false);
            const char *p = tk_write_key(dir, "k.key", pk, forms[f]);
            if (kl_keystore_add_file(ks, p) != KL_OK)
                fail_msg("%s form %zu: %s", v[i].file, f, r.line[0]);
            expect_ski(ks, v[i].ski, NULL);
            kl_keystore_free(ks);
        }
        EVP_PKEY_free(pk);
    }
    tk_rmrf(dir);
}

/* The PEM labels the formats produce, checked so the encodings above
 * really are PKCS#1 / SEC1 / PKCS#8. */
static void test_pem_labels(void **state)
{
    (void)state;
    EVP_PKEY *rsa = tk_vector_pkey("keys/rsa-2048.key");
    EVP_PKEY *ec = tk_vector_pkey("keys/ecdsa-p256.key");
    size_t n;
    uint8_t *p = tk_encode(rsa, TK_PEM_TRAD, &n);
    assert_non_null(memmem(p, n, "BEGIN RSA PRIVATE KEY", 21));
    free(p);
    p = tk_encode(ec, TK_PEM_TRAD, &n);
    assert_non_null(memmem(p, n, "BEGIN EC PRIVATE KEY", 20));
    free(p);
    p = tk_encode(ec, TK_PEM_PKCS8, &n);
    assert_non_null(memmem(p, n, "BEGIN PRIVATE KEY", 17));
    free(p);
    EVP_PKEY_free(rsa);
    EVP_PKEY_free(ec);
}

static void test_all_curves_and_compressed_points(void **state)
{
    (void)state;
    static const char *curves[] = {"P-224", "P-256", "P-384", "P-521"};
    static const char *descs[] = {"ECDSA-P-224", "ECDSA-P-256", "ECDSA-P-384",
                                  "ECDSA-P-521"};
    char *dir = tk_tmpdir();
    for (size_t i = 0; i < 4; i++) {
        EVP_PKEY *k = EVP_EC_gen(curves[i]);
        assert_non_null(k);
        uint8_t want[KL_SKI_LEN];
        assert_int_equal(kl_ski_from_pkey(k, want), KL_OK);
        /* The SKI hashes the uncompressed point even when the file holds
         * a compressed one (protocol P7). */
        assert_true(EVP_PKEY_set_utf8_string_param(
            k, OSSL_PKEY_PARAM_EC_POINT_CONVERSION_FORMAT, "compressed"));
        size_t n;
        uint8_t *sec1 = tk_encode(k, TK_DER_TRAD, &n);
        tk_reports r;
        kl_keystore *ks = tk_store(&r, false, false);
        const char *p = tk_write(dir, "c.key", sec1, n, 0600);
        assert_int_equal(kl_keystore_add_file(ks, p), KL_OK);
        char hex[41], buf[32];
        kl_ski_hex(want, hex);
        expect_ski(ks, hex, descs[i]);
        const kl_key *key = kl_keystore_find(ks, want);
        assert_int_equal(kl_key_get_type(key), KL_KEY_EC);
        assert_int_not_equal(kl_key_curve(key), 0);
        (void)buf;
        kl_keystore_free(ks);
        free(sec1);
        EVP_PKEY_free(k);
    }
    tk_rmrf(dir);
}

/* PEM files with other blocks around the key: the key block is found. */
static void test_pem_with_other_blocks(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    size_t cn, kn;
    char *cert = tu_read_file(tu_vector_path("certs/ecdsa-p256.crt"), &cn);
    EVP_PKEY *k = tk_vector_pkey("keys/ecdsa-p256.key");
    uint8_t *key = tk_encode(k, TK_PEM_TRAD, &kn);
    const char params[] = "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n"
                          "-----END EC PARAMETERS-----\n";
    size_t total = cn + strlen(params) + kn;
    char *both = malloc(total);
    memcpy(both, cert, cn);
    memcpy(both + cn, params, strlen(params));
    memcpy(both + cn + strlen(params), key, kn);
    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);
    assert_int_equal(
        kl_keystore_add_file(ks, tk_write(dir, "both.key", both, total, 0600)),
        KL_OK);
    expect_ski(ks, "069386e232beb421876020fe1cf6f810a37b4ef8", "ECDSA-P-256");
    kl_keystore_free(ks);
    free(both);
    free(key);
    free(cert);
    EVP_PKEY_free(k);
    tk_rmrf(dir);
}

/* Windows line endings and a trailing comment still load. */
static void test_pem_crlf(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    size_t n;
    char *pem = tu_read_file(tu_vector_path("keys/rsa-3072.key"), &n);
    char *crlf = malloc(2 * n + 32);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (pem[i] == '\n')
            crlf[m++] = '\r';
        crlf[m++] = pem[i];
    }
    memcpy(crlf + m, "# a comment\r\n", 13);
    m += 13;
    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);
    assert_int_equal(
        kl_keystore_add_file(ks, tk_write(dir, "crlf.key", crlf, m, 0600)),
        KL_OK);
    expect_ski(ks, "9e9c68d8a84010866904fe901bb69cef1385c6fe", "RSA-3072");
    kl_keystore_free(ks);
    free(crlf);
    free(pem);
    tk_rmrf(dir);
}

/* ---- refusals ----------------------------------------------------------- */

static void test_refuses_encrypted_public_and_certificates(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);
    EVP_PKEY *rsa = tk_vector_pkey("keys/rsa-2048.key");
    EVP_PKEY *ec = tk_vector_pkey("keys/ecdsa-p256.key");
    EVP_PKEY *ed = tk_vector_pkey("keys/ed25519.key");
    EVP_PKEY *all[] = {rsa, ec, ed};
    for (int i = 0; i < 3; i++) {
        tk_expect_form_refused(ks, &r, dir, all[i], TK_PEM_PKCS8_ENCRYPTED,
                               "encrypted private keys are not supported");
        tk_expect_form_refused(ks, &r, dir, all[i], TK_DER_PKCS8_ENCRYPTED,
                               "encrypted private keys are not supported");
        tk_expect_form_refused(ks, &r, dir, all[i], TK_PEM_PUBKEY,
                               "public key, not a private key");
        tk_expect_form_refused(ks, &r, dir, all[i], TK_DER_PUBKEY,
                               "public key, not a private key");
    }
    tk_expect_form_refused(ks, &r, dir, rsa, TK_PEM_TRAD_ENCRYPTED,
                           "encrypted private keys are not supported");
    tk_expect_form_refused(ks, &r, dir, ec, TK_PEM_TRAD_ENCRYPTED,
                           "encrypted private keys are not supported");
    tk_expect_form_refused(ks, &r, dir, rsa, TK_PEM_RSA_PUBKEY,
                           "public key, not a private key");
    tk_expect_form_refused(ks, &r, dir, rsa, TK_DER_RSA_PUBKEY,
                           "public key, not a private key");
    /* the message says how to fix it */
    tk_expect_form_refused(ks, &r, dir, ec, TK_PEM_PKCS8_ENCRYPTED,
                           "openssl pkey");

    size_t n;
    char *pem = tu_read_file(tu_vector_path("certs/rsa-2048.crt"), &n);
    tk_expect_refused(ks, &r, dir, pem, n, "certificate, not a private key");
    BIO *b = BIO_new_mem_buf(pem, (int)n);
    X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
    assert_non_null(x);
    unsigned char *der = NULL;
    int dn = i2d_X509(x, &der);
    tk_expect_refused(ks, &r, dir, der, (size_t)dn,
                      "certificate, not a private key");
    OPENSSL_free(der);
    X509_free(x);
    BIO_free(b);
    free(pem);
    pem = tu_read_file(tu_vector_path("reference-keys/ecdsa.pubkey"), &n);
    tk_expect_refused(ks, &r, dir, pem, n, "public key, not a private key");
    free(pem);

    /* the store still works after all those failures */
    assert_int_equal(
        kl_keystore_add_file(ks, tk_write_key(dir, "ok.key", ec, TK_DER_TRAD)),
        KL_OK);
    expect_ski(ks, "069386e232beb421876020fe1cf6f810a37b4ef8", NULL);
    EVP_PKEY_free(rsa);
    EVP_PKEY_free(ec);
    EVP_PKEY_free(ed);
    kl_keystore_free(ks);
    tk_rmrf(dir);
}

static EVP_PKEY *fake_rsa(int bits)
{
    /* Consistency is not checked on decode, so random numbers of the right
     * sizes make an RSA-16384 "key" without minutes of key generation. */
    BIGNUM *n = BN_new(), *e = BN_new(), *d = BN_new(), *p = BN_new(),
           *q = BN_new();
    assert_true(BN_rand(n, bits, BN_RAND_TOP_ONE, BN_RAND_BOTTOM_ODD));
    assert_true(BN_set_word(e, 65537));
    assert_true(BN_rand(d, bits - 8, BN_RAND_TOP_ONE, BN_RAND_BOTTOM_ODD));
    assert_true(BN_rand(p, bits / 2, BN_RAND_TOP_ONE, BN_RAND_BOTTOM_ODD));
    assert_true(BN_rand(q, bits / 2, BN_RAND_TOP_ONE, BN_RAND_BOTTOM_ODD));
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, n);
    OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, e);
    OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_D, d);
    OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_FACTOR1, p);
    OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_FACTOR2, q);
    OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_EXPONENT1, p);
    OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_EXPONENT2, q);
    OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_COEFFICIENT1, p);
    OSSL_PARAM *params = OSSL_PARAM_BLD_to_param(bld);
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, "RSA", NULL);
    EVP_PKEY *k = NULL;
    assert_int_equal(EVP_PKEY_fromdata_init(ctx), 1);
    assert_int_equal(EVP_PKEY_fromdata(ctx, &k, EVP_PKEY_KEYPAIR, params), 1);
    EVP_PKEY_CTX_free(ctx);
    OSSL_PARAM_free(params);
    OSSL_PARAM_BLD_free(bld);
    BN_free(n), BN_free(e), BN_free(d), BN_free(p), BN_free(q);
    return k;
}

static void test_refuses_unsupported_keys(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);

    EVP_PKEY *k = EVP_EC_gen("secp256k1");
    tk_expect_form_refused(ks, &r, dir, k, TK_PEM_PKCS8,
                           "EC curve secp256k1 is not supported");
    tk_expect_form_refused(ks, &r, dir, k, TK_DER_TRAD,
                           "EC curve secp256k1 is not supported");
    EVP_PKEY_free(k);
    k = EVP_EC_gen("brainpoolP256r1");
    tk_expect_form_refused(ks, &r, dir, k, TK_PEM_TRAD,
                           "EC curve brainpoolP256r1 is not supported");
    EVP_PKEY_free(k);

    k = EVP_RSA_gen(512);
    assert_non_null(k);
    tk_expect_form_refused(ks, &r, dir, k, TK_PEM_TRAD, "RSA-512 keys");
    tk_expect_form_refused(ks, &r, dir, k, TK_DER_PKCS8, "RSA-512 keys");
    EVP_PKEY_free(k);
    k = fake_rsa(16384);
    tk_expect_form_refused(ks, &r, dir, k, TK_PEM_PKCS8, "RSA-16384 keys");
    tk_expect_form_refused(ks, &r, dir, k, TK_DER_TRAD, "RSA-16384 keys");
    EVP_PKEY_free(k);

    static const struct {
        const char *alg, *why;
    } others[] = {{"ED448", "Ed448 keys are not supported"},
                  {"X25519", "X25519 keys are not supported"},
                  {"X448", "X448 keys are not supported"}};
    for (size_t i = 0; i < 3; i++) {
        k = EVP_PKEY_Q_keygen(NULL, NULL, others[i].alg);
        assert_non_null(k);
        tk_expect_form_refused(ks, &r, dir, k, TK_PEM_PKCS8, others[i].why);
        tk_expect_form_refused(ks, &r, dir, k, TK_DER_PKCS8, others[i].why);
        EVP_PKEY_free(k);
    }
    /* type checks also guard keys handed over already decoded */
    k = EVP_PKEY_Q_keygen(NULL, NULL, "X25519");
    r.n = 0;
    assert_int_equal(kl_keystore_add_pkey(ks, k, "x25519-label"), KL_E_KEY);
    assert_true(tk_find(&r, "x25519-label", "not supported") >= 0);
    EVP_PKEY_free(k);

    static const char dsa[] = "-----BEGIN DSA PRIVATE KEY-----\nMAA=\n"
                              "-----END DSA PRIVATE KEY-----\n";
    tk_expect_refused(ks, &r, dir, dsa, strlen(dsa),
                      "\"DSA PRIVATE KEY\" keys are not supported");
    static const char ssh[] = "-----BEGIN OPENSSH PRIVATE KEY-----\nMAA=\n"
                              "-----END OPENSSH PRIVATE KEY-----\n";
    tk_expect_refused(ks, &r, dir, ssh, strlen(ssh), "OpenSSH-format");
    assert_int_equal(kl_keystore_count(ks), 0);
    kl_keystore_free(ks);
    tk_rmrf(dir);
}

static void test_refuses_garbage(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);
    tk_expect_refused(ks, &r, dir, "", 0, "file is empty");
    uint8_t junk[300];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 7 + 3);
    tk_expect_refused(ks, &r, dir, junk, sizeof junk, "not a PEM or DER");
    tk_expect_refused(ks, &r, dir, "hello\n", 6, "not a PEM or DER");
    static const char nopem[] = "-----BEGIN PRIVATE KEY-----\nMIIB\n";
    tk_expect_refused(ks, &r, dir, nopem, strlen(nopem), "no complete PEM");
    static const char b64[] = "-----BEGIN PRIVATE KEY-----\n!!!!\n"
                              "-----END PRIVATE KEY-----\n";
    tk_expect_refused(ks, &r, dir, b64, strlen(b64), "not valid base64");
    /* valid base64 of a PKCS#8-shaped but broken key */
    static const char p8[] = "-----BEGIN PRIVATE KEY-----\n"
                             "MBICAQAwDQYJKoZIhvcNAQEBBQA=\n"
                             "-----END PRIVATE KEY-----\n";
    tk_expect_refused(ks, &r, dir, p8, strlen(p8),
                      "cannot decode the PKCS#8 RSA private key");
    static const char other[] = "-----BEGIN X509 CRL-----\nMAA=\n"
                                "-----END X509 CRL-----\n";
    tk_expect_refused(ks, &r, dir, other, strlen(other), "no private key");

    /* every truncation of real keys fails cleanly */
    EVP_PKEY *k = tk_vector_pkey("keys/ecdsa-p256.key");
    static const tk_form forms[] = {TK_DER_PKCS8, TK_DER_TRAD};
    for (size_t f = 0; f < 2; f++) {
        size_t n;
        uint8_t *der = tk_encode(k, forms[f], &n);
        for (size_t cut = 1; cut < n; cut += 7) {
            r.n = 0;
            const char *p = tk_write(dir, "cut.key", der, n - cut, 0600);
            assert_int_equal(kl_keystore_add_file(ks, p), KL_E_KEY);
            assert_int_equal(r.n, 1);
        }
        free(der);
    }
    EVP_PKEY_free(k);
    assert_int_equal(kl_keystore_count(ks), 0);
    kl_keystore_free(ks);
    tk_rmrf(dir);
}

/* ---- pair consistency, one key per file (docs/OPERATIONS.md "Key
 * files") ------------------------------------------------------------------ */

/* ---- files, permissions, directories ------------------------------------ */

static void test_permissions(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    EVP_PKEY *k = tk_vector_pkey("keys/ecdsa-p256.key");
    size_t n;
    uint8_t *pem = tk_encode(k, TK_PEM_PKCS8, &n);
    static const mode_t bad[] = {0644, 0640, 0604, 0440};
    for (size_t i = 0; i < 4; i++) {
        tk_reports r;
        kl_keystore *ks = tk_store(&r, false, false);
        const char *p = tk_write(dir, "perm.key", pem, n, bad[i]);
        assert_int_equal(kl_keystore_add_file(ks, p), KL_E_KEY);
        assert_true(tk_find(&r, p, "chmod 600") >= 0);
        assert_true(tk_find(&r, "readable by", NULL) >= 0);
        kl_keystore_free(ks);
        /* allowed with the option */
        ks = tk_store(&r, true, false);
        assert_int_equal(kl_keystore_add_file(ks, p), KL_OK);
        assert_int_equal(kl_keystore_count(ks), 1);
        kl_keystore_free(ks);
    }
    static const mode_t good[] = {0600, 0400, 0700};
    for (size_t i = 0; i < 3; i++) {
        tk_reports r;
        kl_keystore *ks = tk_store(&r, false, false);
        const char *p = tk_write(dir, "perm.key", pem, n, good[i]);
        assert_int_equal(kl_keystore_add_file(ks, p), KL_OK);
        kl_keystore_free(ks);
    }
    free(pem);
    EVP_PKEY_free(k);
    tk_rmrf(dir);
}

/* A key directory (or one below it) that group or others can write is
 * refused like a key file they can read; at reload (skip_bad_keys) only
 * that directory is skipped. */
static void test_writable_key_dirs(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    char sub[4200], ok[4200];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(ok, sizeof ok, "%s/tidy", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    assert_int_equal(mkdir(ok, 0700), 0);
    EVP_PKEY *a = tk_vector_pkey("keys/ecdsa-p256.key");
    EVP_PKEY *b = tk_vector_pkey("keys/ed25519.key");
    tk_write_key(sub, "a.key", a, TK_PEM_PKCS8);
    tk_write_key(ok, "b.key", b, TK_PEM_PKCS8);
    static const struct {
        mode_t mode;
        const char *who;
    } bad[] = {{0777, "others"},
               {0770, "its group"},
               {0720, "its group"},
               {01777, "others"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int top = 0; top < 2; top++) {
            const char *d = top ? dir : sub;
            assert_int_equal(chmod(d, bad[i].mode), 0);
            tk_reports r;
            kl_keystore *ks = tk_store(&r, true, false);
            assert_int_equal(kl_keystore_add_dir(ks, dir), KL_E_KEY);
            char want[4400];
            snprintf(want, sizeof want,
                     "%s: key directory is writable by %s (mode %03o)", d,
                     bad[i].who, (unsigned)(bad[i].mode & 0777));
            if (tk_find(&r, want, "chmod 700") < 0)
                fail_msg("expected \"%s\", got %d: %s", want, r.n,
                         r.n ? r.line[0] : "");
            kl_keystore_free(ks);
            /* tolerant (reload, --check): the other directory loads */
            kl_keystore_opts o = {
                .skip_bad_keys = true, .report = tk_report, .report_arg = &r};
            memset(&r, 0, sizeof r);
            ks = kl_keystore_new(&o);
            kl_status s = kl_keystore_add_dir(ks, dir);
            assert_int_equal(s, top ? KL_E_KEY : KL_OK);
            assert_int_equal(kl_keystore_count(ks), top ? 0 : 1);
            assert_true(tk_find(&r, want, NULL) >= 0);
            kl_keystore_free(ks);
            assert_int_equal(chmod(d, 0700), 0);
        }
    }
    static const mode_t good[] = {0700, 0750, 0755, 0500};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(chmod(dir, good[i]), 0);
        tk_reports r;
        kl_keystore *ks = tk_store(&r, false, false);
        assert_int_equal(kl_keystore_add_dir(ks, dir), KL_OK);
        assert_int_equal(kl_keystore_count(ks), 2);
        assert_int_equal(r.n, 0);
        kl_keystore_free(ks);
    }
    assert_int_equal(chmod(dir, 0700), 0);
    EVP_PKEY_free(a);
    EVP_PKEY_free(b);
    tk_rmrf(dir);
}

static void test_missing_and_special_files(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);
    char p[4200];
    snprintf(p, sizeof p, "%s/nope.key", dir);
    assert_int_equal(kl_keystore_add_file(ks, p), KL_E_KEY);
    assert_true(tk_find(&r, p, "cannot open") >= 0);
    r.n = 0;
    snprintf(p, sizeof p, "%s/nodir", dir);
    assert_int_equal(kl_keystore_add_dir(ks, p), KL_E_IO);
    assert_true(tk_find(&r, p, "cannot open directory") >= 0);
    /* a FIFO must not hang the load */
    r.n = 0;
    snprintf(p, sizeof p, "%s/fifo.key", dir);
    assert_int_equal(mkfifo(p, 0600), 0);
    assert_int_equal(kl_keystore_add_file(ks, p), KL_E_KEY);
    assert_true(tk_find(&r, p, "not a regular file") >= 0);
    /* a directory given as a file */
    r.n = 0;
    assert_int_equal(kl_keystore_add_file(ks, dir), KL_E_KEY);
    assert_true(tk_find(&r, dir, "not a regular file") >= 0);
    kl_keystore_free(ks);
    tk_rmrf(dir);
}

static void test_duplicate_ski(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    EVP_PKEY *k = tk_vector_pkey("keys/ecdsa-p256.key");
    tk_write_key(dir, "a.key", k, TK_PEM_PKCS8);
    tk_write_key(dir, "b.key", k, TK_DER_TRAD);
    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);
    assert_int_equal(kl_keystore_add_dir(ks, dir), KL_OK);
    assert_int_equal(kl_keystore_count(ks), 1);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.level[0], 2 /* warning */);
    assert_true(tk_find(&r, "b.key: duplicate key", "a.key") >= 0);
    /* names both files and which one wins */
    char want[4300];
    snprintf(want, sizeof want,
             "is also in %s/a.key, which is loaded first "
             "and wins; this file is ignored",
             dir);
    assert_true(tk_find(&r, "/b.key: duplicate key", want) >= 0);
    assert_true(tk_find(&r, "069386e232beb421876020fe1cf6f810a37b4ef8", NULL) >=
                0);
    uint8_t ski[KL_SKI_LEN];
    assert_int_equal(
        kl_ski_parse("069386e232beb421876020fe1cf6f810a37b4ef8", ski), KL_OK);
    const char *kept = kl_key_path(kl_keystore_find(ks, ski));
    assert_string_equal(kept + strlen(kept) - 5, "a.key");
    /* two key directories (two dir: access rules): the store listed
     * first wins, whatever the names */
    char *d2 = tk_tmpdir(), *d3 = tk_tmpdir();
    tk_write_key(d2, "z.key", k, TK_PEM_PKCS8);
    tk_write_key(d3, "a.key", k, TK_PEM_PKCS8);
    tk_reports r2;
    kl_keystore *ks2 = tk_store(&r2, false, false);
    assert_int_equal(kl_keystore_add_dir(ks2, d2), KL_OK);
    assert_int_equal(kl_keystore_add_dir(ks2, d3), KL_OK);
    assert_int_equal(r2.n, 1);
    snprintf(want, sizeof want, "%s/a.key: duplicate key", d3);
    char wins[4300];
    snprintf(wins, sizeof wins, "also in %s/z.key, which is loaded first", d2);
    assert_true(tk_find(&r2, want, wins) >= 0);
    kept = kl_key_path(kl_keystore_find(ks2, ski));
    assert_string_equal(kept + strlen(kept) - 5, "z.key");
    kl_keystore_free(ks2);
    tk_rmrf(d2);
    tk_rmrf(d3);
    /* add_pkey of the same key: also a duplicate, also kept once */
    assert_int_equal(kl_keystore_add_pkey(ks, k, "again"), KL_OK);
    assert_int_equal(kl_keystore_count(ks), 1);
    kl_keystore_free(ks);
    EVP_PKEY_free(k);
    tk_rmrf(dir);
}

static void test_recursive_dirs_and_check_mode(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    char sub[4100], deep[4200], link[4200];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(deep, sizeof deep, "%s/deeper", sub);
    assert_int_equal(mkdir(sub, 0700), 0);
    assert_int_equal(mkdir(deep, 0700), 0);
    EVP_PKEY *a = tk_vector_pkey("keys/ecdsa-p256.key");
    EVP_PKEY *b = tk_vector_pkey("keys/rsa-2048.key");
    EVP_PKEY *c = tk_vector_pkey("keys/ed25519.key");
    EVP_PKEY *d = tk_vector_pkey("keys/ecdsa-p384.key");
    tk_write_key(dir, "a.key", a, TK_PEM_PKCS8);
    tk_write_key(sub, "b.key", b, TK_PEM_TRAD);
    tk_write_key(deep, "c.key", c, TK_DER_PKCS8);
    /* not loaded: wrong suffixes (warned about in check mode only) */
    tk_write_key(dir, "d.key.bak", d, TK_PEM_PKCS8);
    tk_write_key(dir, "d.key~", d, TK_PEM_PKCS8);
    tk_write_key(sub, "d.key.old", d, TK_PEM_PKCS8);
    tk_write(dir, "README.txt", "hi", 2, 0644);
    /* a symlinked directory is not followed (loops) */
    snprintf(link, sizeof link, "%s/loop", sub);
    assert_int_equal(symlink(dir, link), 0);

    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);
    assert_int_equal(kl_keystore_add_dir(ks, dir), KL_OK);
    assert_int_equal(kl_keystore_count(ks), 3);
    assert_int_equal(r.n, 0);
    expect_ski(ks, "069386e232beb421876020fe1cf6f810a37b4ef8", NULL);
    expect_ski(ks, "3d47b731991ed4a0e281cdc8349c14ec537d220c", NULL);
    expect_ski(ks, "16913a8bfd34883606daf05bb9cb8b3e25160c81", NULL);
    kl_keystore_free(ks);

    ks = tk_store(&r, false, true);
    assert_int_equal(kl_keystore_add_dir(ks, dir), KL_OK);
    assert_int_equal(kl_keystore_count(ks), 3);
    assert_int_equal(r.n, 3);
    assert_true(tk_find(&r, "d.key.bak: not loaded", "ends in \".key\"") >= 0);
    assert_true(tk_find(&r, "d.key~: not loaded", NULL) >= 0);
    assert_true(tk_find(&r, "sub/d.key.old: not loaded", NULL) >= 0);
    kl_keystore_free(ks);

    /* a bad key below stops the load, named by path */
    tk_write(deep, "zz.key", "junk", 4, 0600);
    ks = tk_store(&r, false, false);
    assert_int_equal(kl_keystore_add_dir(ks, dir), KL_E_KEY);
    assert_true(tk_find(&r, "deeper/zz.key", "not a PEM or DER") >= 0);
    kl_keystore_free(ks);

    /* a symlink to a key file is loaded */
    ks = tk_store(&r, false, false);
    char target[4400], lnk[4400];
    snprintf(target, sizeof target, "%s/d.key.bak", dir);
    snprintf(lnk, sizeof lnk, "%s/zz.key", deep);
    assert_int_equal(unlink(lnk), 0);
    assert_int_equal(symlink(target, lnk), 0);
    assert_int_equal(kl_keystore_add_dir(ks, dir), KL_OK);
    assert_int_equal(kl_keystore_count(ks), 4);
    kl_keystore_free(ks);

    EVP_PKEY_free(a);
    EVP_PKEY_free(b);
    EVP_PKEY_free(c);
    EVP_PKEY_free(d);
    tk_rmrf(dir);
}

/* ---- the index ---------------------------------------------------------- */

static void collect(void *arg, const kl_key *k)
{
    size_t *next = arg;
    assert_int_equal(kl_key_index(k), *next);
    (*next)++;
}

static void test_many_keys_index(void **state)
{
    (void)state;
    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);
    enum { N = 1500 };
    static uint8_t skis[N][KL_SKI_LEN];
    for (int i = 0; i < N; i++) {
        EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
        assert_int_equal(kl_keystore_add_pkey(ks, k, "gen"), KL_OK);
        assert_int_equal(kl_ski_from_pkey(k, skis[i]), KL_OK);
        EVP_PKEY_free(k); /* the store holds its own reference */
    }
    assert_int_equal(kl_keystore_count(ks), N);
    for (int i = 0; i < N; i++) {
        const kl_key *k = kl_keystore_find(ks, skis[i]);
        assert_non_null(k);
        assert_int_equal(kl_key_index(k), i);
        assert_memory_equal(kl_key_ski(k), skis[i], KL_SKI_LEN);
        assert_string_equal(kl_key_path(k), "gen");
    }
    uint8_t none[KL_SKI_LEN] = {1, 2, 3};
    assert_null(kl_keystore_find(ks, none));
    size_t next = 0;
    kl_keystore_foreach(ks, collect, &next);
    assert_int_equal(next, N);
    kl_keystore_free(ks);
}

static void test_weak_rsa_warns(void **state)
{
    (void)state;
    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);
    EVP_PKEY *k = EVP_RSA_gen(1024);
    assert_int_equal(kl_keystore_add_pkey(ks, k, "weak"), KL_OK);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.level[0], 2);
    assert_true(tk_find(&r, "weak: RSA-1024", "2048") >= 0);
    EVP_PKEY_free(k);
    k = EVP_RSA_gen(512);
    r.n = 0;
    assert_int_equal(kl_keystore_add_pkey(ks, k, "tiny"), KL_E_KEY);
    assert_true(tk_find(&r, "tiny: RSA-512", NULL) >= 0);
    EVP_PKEY_free(k);
    assert_int_equal(kl_keystore_count(ks), 1);
    kl_keystore_free(ks);
}

static void test_ski_hex_and_parse(void **state)
{
    (void)state;
    uint8_t s[KL_SKI_LEN], t[KL_SKI_LEN];
    char hex[41];
    assert_int_equal(
        kl_ski_parse("D9C69B8E23ABBA7C26FD5D0E282F3DD679741036", s), KL_OK);
    kl_ski_hex(s, hex);
    assert_string_equal(hex, "d9c69b8e23abba7c26fd5d0e282f3dd679741036");
    assert_int_equal(kl_ski_parse("d9:c6:9b:8e:23:ab:ba:7c:26:fd:5d:0e:28:2f:"
                                  "3d:d6:79:74:10:36",
                                  t),
                     KL_OK);
    assert_memory_equal(s, t, KL_SKI_LEN);
    static const char *bad[] = {
        "",
        "d9c69b8e23abba7c26fd5d0e282f3dd67974103",   /* 39 digits */
        "d9c69b8e23abba7c26fd5d0e282f3dd6797410366", /* 41 */
        "d9c69b8e23abba7c26fd5d0e282f3dd67974103600",
        "g9c69b8e23abba7c26fd5d0e282f3dd679741036",
        ":d9c69b8e23abba7c26fd5d0e282f3dd679741036",
        "d9c69b8e23abba7c26fd5d0e282f3dd679741036:",
        "d:9c69b8e23abba7c26fd5d0e282f3dd679741036",
        "d9::c69b8e23abba7c26fd5d0e282f3dd679741036",
        "d9c69b8e23abba7c26fd5d0e282f3dd6797410 6",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (kl_ski_parse(bad[i], t) != KL_E_BAD_VALUE)
            fail_msg("accepted \"%s\"", bad[i]);
    assert_int_equal(kl_ski_parse(NULL, t), KL_E_BAD_VALUE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_key_skis),
        cmocka_unit_test(test_vector_key_skis),
        cmocka_unit_test(test_every_private_encoding),
        cmocka_unit_test(test_pem_labels),
        cmocka_unit_test(test_all_curves_and_compressed_points),
        cmocka_unit_test(test_pem_with_other_blocks),
        cmocka_unit_test(test_pem_crlf),
        cmocka_unit_test(test_refuses_encrypted_public_and_certificates),
        cmocka_unit_test(test_refuses_unsupported_keys),
        cmocka_unit_test(test_refuses_garbage),
        cmocka_unit_test(test_permissions),
        cmocka_unit_test(test_writable_key_dirs),
        cmocka_unit_test(test_missing_and_special_files),
        cmocka_unit_test(test_duplicate_ski),
        cmocka_unit_test(test_recursive_dirs_and_check_mode),
        cmocka_unit_test(test_many_keys_index),
        cmocka_unit_test(test_weak_rsa_warns),
        cmocka_unit_test(test_ski_hex_and_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
