/* SPDX-License-Identifier: Apache-2.0 */
/* Keys on PKCS#11 tokens, against SoftHSM2 tokens made by the
 * test: SKIs equal the same keys' from files; every operation checked with
 * OpenSSL, deterministic ones byte for byte against the file key; two
 * tokens at once; and load errors that name the URI without its PIN. */
#include "hsmtest.h"

#include "keys/p11.h"

static kl_keystore *files, *hsm;

typedef struct reports {
    int n;
    char line[16][1024];
} reports;

static void on_report(void *arg, int level, const char *path, const char *msg)
{
    reports *r = arg;
    (void)level;
    if (r->n < 16)
        snprintf(r->line[r->n++], sizeof r->line[0], "%s: %s", path, msg);
}

static kl_keystore *new_store(reports *r)
{
    memset(r, 0, sizeof *r);
    kl_keystore_opts o = {.report = on_report, .report_arg = r};
    kl_keystore *ks = kl_keystore_new(&o);
    assert_non_null(ks);
    return ks;
}

static int setup(void **state)
{
    (void)state;
    files = ct_vector_store();
    ht_setup(files);
    char pinfile[128];
    snprintf(pinfile, sizeof pinfile, "%s/pin-b", ht_dir);
    FILE *f = fopen(pinfile, "w");
    assert_non_null(f);
    fputs(HT_PIN_B "\n", f);
    fclose(f);

    reports r;
    hsm = new_store(&r);
    const char *pa = "pin-value=" HT_PIN_A;
    assert_int_equal(
        kl_keystore_add_uri(hsm, ht_uri("token=kl-a;object=rsa", pa)), KL_OK);
    assert_int_equal(kl_keystore_add_uri(hsm, ht_uri("token=kl-a;id=%02", pa)),
                     KL_OK);
    assert_int_equal(
        kl_keystore_add_uri(hsm, ht_uri("token=kl-a;object=ed;id=%03", pa)),
        KL_OK);
    assert_int_equal(
        kl_keystore_add_uri(hsm, ht_uri("token=kl-a;object=ec384", pa)), KL_OK);
    char q[256];
    snprintf(q, sizeof q, "pin-source=%s&max-sessions=2", pinfile);
    assert_int_equal(
        kl_keystore_add_uri(hsm, ht_uri("token=kl-b;object=rsa3072", q)),
        KL_OK);
    assert_int_equal(kl_keystore_count(hsm), 5);
    assert_int_equal(r.n, 0);
    /* kl-a sized by its first URI (default 1), kl-b by max-sessions=2 */
    assert_int_equal(kl_keystore_token_sessions(hsm), 3);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kl_keystore_free(hsm);
    kl_keystore_free(files);
    ht_teardown();
    return 0;
}

/* The token key with the file key's SKI: found at all means equal SKIs. */
static const kl_key *token_key(const char *name)
{
    const kl_key *k = kl_keystore_find(hsm, kl_key_ski(ct_key(files, name)));
    if (!k)
        fail_msg("no token key with the SKI of %s", name);
    return k;
}

static void test_ski_and_backend(void **state)
{
    (void)state;
    const char *names[] = {"rsa-2048", "ecdsa-p256", "ed25519", "ecdsa-p384",
                           "rsa-3072"};
    for (size_t i = 0; i < 5; i++) {
        const kl_key *fk = ct_key(files, names[i]);
        const kl_key *hk = token_key(names[i]);
        assert_int_equal(kl_key_get_backend(fk), KL_BACKEND_FILE);
        assert_int_equal(kl_key_get_backend(hk), KL_BACKEND_PKCS11);
        assert_int_equal(kl_key_get_type(hk), kl_key_get_type(fk));
        assert_int_equal(kl_key_bits(hk), kl_key_bits(fk));
        assert_int_equal(kl_key_curve(hk), kl_key_curve(fk));
        assert_int_equal(kl_crypto_max_output(hk), kl_crypto_max_output(fk));
        assert_int_equal(kl_crypto_cost_class(hk), KL_COST_BLOCKING);
        /* the path is the URI, PIN redacted */
        assert_non_null(strstr(kl_key_path(hk), "pkcs11:token=kl-"));
        assert_null(strstr(kl_key_path(hk), HT_PIN_A));
    }
    assert_non_null(
        strstr(kl_key_path(token_key("rsa-2048")), "pin-value=***"));
}

static void exec_both(const char *name, uint8_t op, const uint8_t *in,
                      size_t inlen, uint8_t *fo, size_t *fl, uint8_t *ho,
                      size_t *hl, kl_status *ferr, kl_status *herr)
{
    *ferr = kl_crypto_exec(ct_key(files, name), op, in, inlen, fo, 1024, fl);
    *herr = kl_crypto_exec(token_key(name), op, in, inlen, ho, 1024, hl);
}

static void check_rsa(const char *name)
{
    static const uint8_t ops[] = {0x02, 0x03, 0x04, 0x05, 0x06, 0x07};
    static const size_t lens[] = {36, 20, 28, 32, 48, 64};
    EVP_PKEY *pub = ct_pubkey(name);
    uint8_t in[64], fo[1024], ho[1024];
    size_t fl, hl;
    kl_status fe, he;
    for (size_t i = 0; i < sizeof ops; i++) {
        ct_fill(in, lens[i], (uint8_t)i);
        exec_both(name, ops[i], in, lens[i], fo, &fl, ho, &hl, &fe, &he);
        assert_int_equal(fe, KL_OK);
        assert_int_equal(he, KL_OK);
        assert_int_equal(hl, fl);
        assert_memory_equal(ho, fo, fl); /* PKCS#1 v1.5 is deterministic */
        assert_true(ct_verify(pub, ops[i], in, lens[i], ho, hl));
    }
    for (uint8_t op = 0x35; op <= 0x37; op++) {
        size_t n = (size_t)EVP_MD_get_size(ct_md(op));
        ct_fill(in, n, op);
        size_t out_len = 0;
        assert_int_equal(
            kl_crypto_exec(token_key(name), op, in, n, ho, sizeof ho, &out_len),
            KL_OK);
        assert_int_equal(out_len, (size_t)EVP_PKEY_get_size(pub));
        assert_true(ct_verify(pub, op, in, n, ho, out_len));
    }
    /* a digest of the wrong length, an opcode of another key type */
    assert_int_equal(
        kl_crypto_exec(token_key(name), 0x05, in, 31, ho, sizeof ho, &hl),
        KL_E_CRYPTO);
    assert_int_equal(
        kl_crypto_exec(token_key(name), 0x15, in, 32, ho, sizeof ho, &hl),
        KL_E_CRYPTO);
    EVP_PKEY_free(pub);
}

static void check_decrypt(const char *name)
{
    const kl_key *fk = ct_key(files, name);
    size_t k = kl_crypto_max_output(fk);
    uint8_t c[1024 + 3], fo[1024], ho[1024], d[32];
    size_t fl, hl, cl;
    kl_status fe, he;
    /* a signature is some number below n: use it as a ciphertext */
    ct_fill(d, 32, 7);
    assert_int_equal(kl_crypto_exec(fk, 0x05, d, 32, c + 3, 1024, &cl), KL_OK);
    exec_both(name, 0x01, c + 3, cl, fo, &fl, ho, &hl, &fe, &he);
    assert_int_equal(fe, KL_OK);
    assert_int_equal(he, KL_OK);
    assert_int_equal(hl, k);
    assert_memory_equal(ho, fo, k);
    /* leading zero bytes are allowed (P4) */
    memset(c, 0, 3);
    exec_both(name, 0x01, c, cl + 3, fo, &fl, ho, &hl, &fe, &he);
    assert_int_equal(he, KL_OK);
    assert_memory_equal(ho, fo, k);
    /* a short input is a small number: its raw block is left-padded */
    exec_both(name, 0x01, d, 8, fo, &fl, ho, &hl, &fe, &he);
    assert_int_equal(he, KL_OK);
    assert_int_equal(hl, k);
    assert_memory_equal(ho, fo, k);
    /* c == n: zeros as the reference; c > n: crypto error */
    kl_p11_key *pk = kl_key_p11(token_key(name));
    assert_int_equal(pk->k, k);
    exec_both(name, 0x01, pk->modulus, k, fo, &fl, ho, &hl, &fe, &he);
    assert_int_equal(fe, KL_OK);
    assert_int_equal(he, KL_OK);
    assert_memory_equal(ho, fo, k);
    memset(c, 0xff, k);
    exec_both(name, 0x01, c, k, fo, &fl, ho, &hl, &fe, &he);
    assert_int_equal(fe, KL_E_CRYPTO);
    assert_int_equal(he, KL_E_CRYPTO);
    exec_both(name, 0x01, c, k + 1, fo, &fl, ho, &hl, &fe, &he);
    assert_int_equal(he, KL_E_CRYPTO);
}

static void test_rsa_2048(void **state)
{
    (void)state;
    check_rsa("rsa-2048");
    check_decrypt("rsa-2048");
}

/* the second token, with its own module configuration (PIN from a file,
 * two sessions), in the same store */
static void test_rsa_3072_second_token(void **state)
{
    (void)state;
    check_rsa("rsa-3072");
    check_decrypt("rsa-3072");
}

static void check_ecdsa(const char *name)
{
    static const uint8_t ops[] = {0x12, 0x13, 0x14, 0x15, 0x16, 0x17};
    static const size_t lens[] = {36, 20, 28, 32, 48, 64};
    EVP_PKEY *pub = ct_pubkey(name);
    uint8_t in[64], out[256];
    for (size_t i = 0; i < sizeof ops; i++) {
        ct_fill(in, lens[i], (uint8_t)(i + 40));
        size_t n = 0;
        assert_int_equal(kl_crypto_exec(token_key(name), ops[i], in, lens[i],
                                        out, sizeof out, &n),
                         KL_OK);
        assert_true(n > 8 && n <= kl_crypto_max_output(token_key(name)));
        assert_int_equal(out[0], 0x30); /* DER, not the token's r || s */
        assert_true(ct_verify(pub, ops[i], in, lens[i], out, n));
    }
    size_t n;
    assert_int_equal(
        kl_crypto_exec(token_key(name), 0x05, in, 32, out, sizeof out, &n),
        KL_E_CRYPTO);
    EVP_PKEY_free(pub);
}

static void test_ecdsa(void **state)
{
    (void)state;
    check_ecdsa("ecdsa-p256");
    check_ecdsa("ecdsa-p384");
}

static void test_ed25519(void **state)
{
    (void)state;
    EVP_PKEY *pub = ct_pubkey("ed25519");
    const uint8_t msg[] = "the message of a TLS 1.3 CertificateVerify";
    uint8_t fo[1024], ho[1024];
    kl_status fe, he;
    size_t fl, hl;
    exec_both("ed25519", 0x18, msg, sizeof msg, fo, &fl, ho, &hl, &fe, &he);
    assert_int_equal(fe, KL_OK);
    assert_int_equal(he, KL_OK);
    assert_int_equal(hl, 64);
    assert_memory_equal(ho, fo, 64); /* Ed25519 is deterministic */
    assert_true(ct_verify(pub, 0x18, msg, sizeof msg, ho, hl));
    EVP_PKEY_free(pub);
}

/* ---- load errors ---------------------------------------------------- */

static void bad_uri(const char *uri, kl_status want, const char *why,
                    const char *secret)
{
    reports r;
    kl_keystore *ks = new_store(&r);
    kl_status got = kl_keystore_add_uri(ks, uri);
    if (got != want)
        fail_msg("%s: status %d, want %d (%s)", uri, got, want,
                 r.n ? r.line[0] : "no report");
    assert_int_equal(kl_keystore_count(ks), 0);
    assert_int_equal(r.n, 1);
    if (!strstr(r.line[0], why))
        fail_msg("report \"%s\" lacks \"%s\"", r.line[0], why);
    assert_non_null(strstr(r.line[0], "pkcs11:")); /* names the URI */
    if (secret && strstr(r.line[0], secret))
        fail_msg("report \"%s\" shows the PIN", r.line[0]);
    kl_keystore_free(ks);
}

static void test_bad_uris(void **state)
{
    (void)state;
    char uri[1024];
    bad_uri("pkcs11:token=kl-a;object=rsa?pin-value=7531", KL_E_CONFIG,
            "no module-path", "7531");
    bad_uri(ht_uri("serial=abc;slot-id=1;object=rsa", "pin-value=7531"),
            KL_E_CONFIG, "exactly one of token=, serial= or slot-id=", "7531");
    bad_uri(ht_uri("object=rsa", "pin-value=7531"), KL_E_CONFIG, "no token",
            "7531");
    bad_uri(ht_uri("token=kl-a", "pin-value=7531"), KL_E_CONFIG, "no key named",
            "7531");
    bad_uri(ht_uri("token=nosuch;object=rsa", "pin-value=7531"), KL_E_CONFIG,
            "no token with label \"nosuch\"", "7531");
    bad_uri(ht_uri("slot-id=4242;object=rsa", "pin-value=7531"), KL_E_CONFIG,
            "no token in slot-id 4242", "7531");
    bad_uri(ht_uri("token=kl-a;object=rsa", "pin-value=7531"), KL_E_CONFIG,
            "CKR_PIN_INCORRECT", "7531");
    bad_uri(ht_uri("token=kl-a;object=nosuch", "pin-value=" HT_PIN_A), KL_E_KEY,
            "no private key with this object label", HT_PIN_A);
    bad_uri(ht_uri("token=kl-a;object=rsa",
                   "pin-value=" HT_PIN_A "&max-sessions=0"),
            KL_E_CONFIG, "max-sessions must be", HT_PIN_A);
    bad_uri(ht_uri("token=kl-a;object=rsa", "pin-source=/nonexistent/pin"),
            KL_E_CONFIG, "cannot read pin-source /nonexistent/pin", NULL);
    bad_uri("pkcs11:token=kl-a;object=rsa?module-path=/nonexistent/m.so"
            "&pin-value=7531",
            KL_E_CONFIG, "cannot load PKCS#11 module /nonexistent/m.so",
            "7531");
    bad_uri("pkcs11:token=kl-a;object=rsa;bogus=1?pin-value=7531", KL_E_CONFIG,
            "attribute keylessd does not know", "7531");
    snprintf(uri, sizeof uri, "http://example/?pin-value=7531");
    bad_uri(uri, KL_E_CONFIG, "not a valid PKCS#11 URI", "7531");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ski_and_backend),
        cmocka_unit_test(test_rsa_2048),
        cmocka_unit_test(test_rsa_3072_second_token),
        cmocka_unit_test(test_ecdsa),
        cmocka_unit_test(test_ed25519),
        cmocka_unit_test(test_bad_uris),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
