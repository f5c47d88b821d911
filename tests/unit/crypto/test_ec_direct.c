/* SPDX-License-Identifier: Apache-2.0 */
/* ECDSA from the key's bare scalar (crypto/ec_direct.h, docs/DESIGN.md
 * "Many keys: the scalar next to the SKI"): every EC file key of every
 * curve keeps its scalar and signs through it, every signature verifies
 * with OpenSSL, threads that switch keys on every request never sign with
 * the wrong one, and a FIPS configuration keeps EVP. */
#include <pthread.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>

#include "cryptotest.h"

static kl_keystore *store(void)
{
    kl_keystore *ks = kl_keystore_new(NULL);
    assert_non_null(ks);
    return ks;
}

static const kl_key *add(kl_keystore *ks, EVP_PKEY *pk, const char *label)
{
    assert_int_equal(kl_keystore_add_pkey(ks, pk, label), KL_OK);
    uint8_t ski[KL_SKI_LEN];
    assert_int_equal(kl_ski_from_pkey(pk, ski), KL_OK);
    const kl_key *k = kl_keystore_find(ks, ski);
    assert_non_null(k);
    return k;
}

/* Signs dg with k through kl_crypto_exec and verifies with pk. */
static int signs(const kl_key *k, EVP_PKEY *pk, uint8_t op, const uint8_t *dg,
                 size_t dlen)
{
    uint8_t sig[256];
    size_t n = 0;
    if (kl_crypto_exec(k, op, dg, dlen, sig, sizeof sig, &n) != KL_OK)
        return 0;
    return ct_verify(pk, op, dg, dlen, sig, n);
}

static const char *const curves[] = {"P-224", "P-256", "P-384", "P-521"};
static const size_t scalar_len[] = {28, 32, 48, 66};

static void test_every_curve_keeps_its_scalar(void **state)
{
    (void)state;
    kl_keystore *ks = store();
    for (size_t i = 0; i < 4; i++) {
        EVP_PKEY *pk = EVP_PKEY_Q_keygen(NULL, NULL, "EC", curves[i]);
        assert_non_null(pk);
        const kl_key *k = add(ks, pk, curves[i]);
        size_t len = 0;
        const uint8_t *d = kl_key_ec_scalar(k, &len);
        assert_non_null(d);
        assert_int_equal(len, scalar_len[i]);
        /* the very scalar of the key, padded to the order's length */
        BIGNUM *want = NULL;
        assert_true(EVP_PKEY_get_bn_param(pk, OSSL_PKEY_PARAM_PRIV_KEY, &want));
        uint8_t buf[KL_EC_SCALAR_MAX];
        assert_int_equal(BN_bn2binpad(want, buf, (int)len), (int)len);
        assert_memory_equal(d, buf, len);
        BN_clear_free(want);
        assert_int_equal(kl_key_max_output(k), EVP_PKEY_get_size(pk));
        /* digests of every length a client may send: ECDSA truncates to
         * the order, as EVP_PKEY_sign and verify do */
        static const size_t lens[] = {0, 1, 20, 28, 32, 36, 48, 64, 200};
        for (size_t j = 0; j < sizeof lens / sizeof lens[0]; j++) {
            uint8_t dg[200];
            ct_fill(dg, lens[j], (uint8_t)(i * 16 + j));
            assert_true(signs(k, pk, KL_OP_ECDSA_SIGN_SHA256, dg, lens[j]));
        }
        EVP_PKEY_free(pk);
    }
    kl_keystore_free(ks);
}

static void test_other_types_have_none(void **state)
{
    (void)state;
    kl_keystore *ks = store();
    EVP_PKEY *ed = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    EVP_PKEY *rsa = EVP_RSA_gen(2048);
    const kl_key *ked = add(ks, ed, "ed"), *krsa = add(ks, rsa, "rsa");
    size_t len = 1;
    assert_null(kl_key_ec_scalar(ked, &len));
    assert_int_equal(len, 0);
    assert_null(kl_key_ec_scalar(krsa, &len));
    assert_int_equal(kl_key_max_output(ked), 64);
    assert_int_equal(kl_key_max_output(krsa), 256);
    kl_keystore_free(ks);
    EVP_PKEY_free(ed);
    EVP_PKEY_free(rsa);
}

/* the load path: the vector key files (SEC1/PKCS#8 as the reference test
 * keys come), and every ECDSA opcode */
static void test_vector_keys(void **state)
{
    (void)state;
    kl_keystore *ks = ct_vector_store();
    static const char *const names[] = {"ecdsa-p256", "ecdsa-p384"};
    for (size_t i = 0; i < 2; i++) {
        const kl_key *k = ct_key(ks, names[i]);
        size_t len;
        assert_non_null(kl_key_ec_scalar(k, &len));
        EVP_PKEY *pub = ct_pubkey(names[i]);
        for (uint8_t op = KL_OP_ECDSA_SIGN_MD5SHA1;
             op <= KL_OP_ECDSA_SIGN_SHA512; op++) {
            uint8_t dg[64];
            size_t dlen = kl_op_digest_len(op);
            ct_fill(dg, dlen, op);
            assert_true(signs(k, pub, op, dg, dlen));
        }
        /* an ECDSA opcode on an RSA key is still refused (P4) */
        uint8_t sig[512], dg[32] = {1};
        size_t n;
        assert_int_equal(kl_crypto_exec(ct_key(ks, "rsa-2048"),
                                        KL_OP_ECDSA_SIGN_SHA256, dg, 32, sig,
                                        sizeof sig, &n),
                         KL_E_CRYPTO);
        EVP_PKEY_free(pub);
    }
    kl_keystore_free(ks);
}

/* ---- threads ------------------------------------------------------------ */

/* Two keys per curve: a thread that signs A then B on the same curve's
 * EC_KEY must sign B with B's scalar. */
enum { NKEYS = 6, THREADS = 4, ROUNDS = 300 };

typedef struct shared {
    EVP_PKEY *pk[NKEYS];
    const kl_key *key[NKEYS];
} shared;

typedef struct worker {
    shared *sh;
    unsigned seed;
    int bad;
} worker;

static void *sign_loop(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < ROUNDS; i++) {
        int which = (int)(rand_r(&w->seed) % NKEYS);
        uint8_t dg[32];
        for (size_t b = 0; b < sizeof dg; b++)
            dg[b] = (uint8_t)rand_r(&w->seed);
        if (!signs(w->sh->key[which], w->sh->pk[which], KL_OP_ECDSA_SIGN_SHA256,
                   dg, sizeof dg))
            w->bad++;
    }
    kl_crypto_thread_cleanup();
    return NULL;
}

static void test_threads_switch_keys(void **state)
{
    (void)state;
    kl_keystore *ks = store();
    shared sh;
    for (int i = 0; i < NKEYS; i++) {
        sh.pk[i] = EVP_PKEY_Q_keygen(NULL, NULL, "EC", curves[1 + i % 3]);
        assert_non_null(sh.pk[i]);
        sh.key[i] = add(ks, sh.pk[i], "ec");
    }
    pthread_t t[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.sh = &sh, .seed = 17u * (unsigned)i + 1u};
        assert_int_equal(pthread_create(&t[i], NULL, sign_loop, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(w[i].bad, 0);
    }
    kl_keystore_free(ks);
    for (int i = 0; i < NKEYS; i++)
        EVP_PKEY_free(sh.pk[i]);
}

/* A store made while default properties say fips=yes would have EVP run
 * the FIPS provider's ECDSA: it keeps no scalar, and its EC keys sign
 * through EVP (here with the properties back to normal, since no FIPS
 * provider is installed to sign with). */
static void test_fips_properties_keep_evp(void **state)
{
    (void)state;
    assert_int_equal(EVP_set_default_properties(NULL, "fips=yes"), 1);
    kl_keystore *ks = store();
    assert_int_equal(EVP_set_default_properties(NULL, ""), 1);
    EVP_PKEY *pk = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    const kl_key *k = add(ks, pk, "ec");
    size_t len;
    assert_null(kl_key_ec_scalar(k, &len));
    uint8_t dg[32] = {7};
    assert_true(signs(k, pk, KL_OP_ECDSA_SIGN_SHA256, dg, sizeof dg));
    kl_keystore_free(ks);
    /* the next store decides again */
    ks = store();
    assert_non_null(kl_key_ec_scalar(add(ks, pk, "ec"), &len));
    kl_keystore_free(ks);
    EVP_PKEY_free(pk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_curve_keeps_its_scalar),
        cmocka_unit_test(test_other_types_have_none),
        cmocka_unit_test(test_vector_keys),
        cmocka_unit_test(test_threads_switch_keys),
        cmocka_unit_test(test_fips_properties_keep_evp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
