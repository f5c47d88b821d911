/* The per-key ECDSA signing context (keys/keystore.h, docs/DESIGN.md "Many
 * keys"): made at load for EC file keys only, lent to one thread at a time,
 * given back, freed with the store; threads that share a few keys sign with
 * it and every signature verifies. */
#include <pthread.h>

#include "keytest.h"

static kl_keystore *ec_store(tk_reports *r, int n, EVP_PKEY **keys)
{
    kl_keystore *ks = tk_store(r, false, false);
    for (int i = 0; i < n; i++) {
        keys[i] = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
        assert_non_null(keys[i]);
        assert_int_equal(kl_keystore_add_pkey(ks, keys[i], "ec"), KL_OK);
    }
    return ks;
}

static const kl_key *find(const kl_keystore *ks, EVP_PKEY *pk)
{
    uint8_t ski[KL_SKI_LEN];
    assert_int_equal(kl_ski_from_pkey(pk, ski), KL_OK);
    const kl_key *k = kl_keystore_find(ks, ski);
    assert_non_null(k);
    return k;
}

static int verifies(EVP_PKEY *pk, const uint8_t *sig, size_t siglen,
                    const uint8_t *dg, size_t dlen)
{
    EVP_PKEY_CTX *v = EVP_PKEY_CTX_new_from_pkey(NULL, pk, NULL);
    int ok = v && EVP_PKEY_verify_init(v) == 1 &&
             EVP_PKEY_verify(v, sig, siglen, dg, dlen) == 1;
    EVP_PKEY_CTX_free(v);
    return ok;
}

static void test_lent_once_and_given_back(void **state)
{
    (void)state;
    tk_reports r;
    EVP_PKEY *pk[1];
    kl_keystore *ks = ec_store(&r, 1, pk);
    const kl_key *k = find(ks, pk[0]);
    EVP_PKEY_CTX *c = kl_key_take_sign_ctx(k);
    assert_non_null(c);
    assert_null(kl_key_take_sign_ctx(k)); /* lent out */
    uint8_t dg[32] = {1, 2, 3}, sig[80];
    size_t n = sizeof sig;
    assert_int_equal(EVP_PKEY_sign(c, sig, &n, dg, sizeof dg), 1);
    assert_true(verifies(pk[0], sig, n, dg, sizeof dg));
    kl_key_give_sign_ctx(k, c);
    assert_ptr_equal(kl_key_take_sign_ctx(k), c); /* the same one again */
    /* a second context given back while one is there: the one there is
     * freed (ASan/LSan would see a leak or a double free) */
    kl_key_give_sign_ctx(k, c);
    EVP_PKEY_CTX *c2 = EVP_PKEY_CTX_new_from_pkey(NULL, pk[0], NULL);
    assert_int_equal(EVP_PKEY_sign_init(c2), 1);
    kl_key_give_sign_ctx(k, c2);
    assert_ptr_equal(kl_key_take_sign_ctx(k), c2);
    kl_key_give_sign_ctx(k, c2);
    kl_keystore_free(ks); /* frees the context held */
    EVP_PKEY_free(pk[0]);
}

static void test_only_ec_keys_have_one(void **state)
{
    (void)state;
    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);
    EVP_PKEY *ed = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    EVP_PKEY *rsa = EVP_RSA_gen(2048);
    assert_int_equal(kl_keystore_add_pkey(ks, ed, "ed"), KL_OK);
    assert_int_equal(kl_keystore_add_pkey(ks, rsa, "rsa"), KL_OK);
    assert_null(kl_key_take_sign_ctx(find(ks, ed)));
    assert_null(kl_key_take_sign_ctx(find(ks, rsa)));
    kl_keystore_free(ks);
    EVP_PKEY_free(ed);
    EVP_PKEY_free(rsa);
}

/* the load path of key files: SEC1 and PKCS#8 EC keys get one too */
static void test_file_keys_have_one(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    EVP_PKEY *a = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-384");
    EVP_PKEY *b = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    tk_write_key(dir, "a.key", a, TK_PEM_TRAD);
    tk_write_key(dir, "b.key", b, TK_DER_PKCS8);
    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);
    assert_int_equal(kl_keystore_add_dir(ks, dir), KL_OK);
    EVP_PKEY *pk[] = {a, b};
    for (int i = 0; i < 2; i++) {
        const kl_key *k = find(ks, pk[i]);
        EVP_PKEY_CTX *c = kl_key_take_sign_ctx(k);
        assert_non_null(c);
        uint8_t dg[48] = {9}, sig[120];
        size_t n = sizeof sig;
        assert_int_equal(EVP_PKEY_sign(c, sig, &n, dg, sizeof dg), 1);
        assert_true(verifies(pk[i], sig, n, dg, sizeof dg));
        kl_key_give_sign_ctx(k, c);
    }
    kl_keystore_free(ks);
    EVP_PKEY_free(a);
    EVP_PKEY_free(b);
    tk_rmrf(dir);
}

/* ---- threads ------------------------------------------------------------ */

enum { NKEYS = 3, THREADS = 4, ROUNDS = 400 };

typedef struct shared {
    kl_keystore *ks;
    EVP_PKEY *pk[NKEYS];
    const kl_key *key[NKEYS];
} shared;

typedef struct worker {
    shared *sh;
    unsigned seed;
    int bad, lent, busy;
} worker;

static void *sign_loop(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < ROUNDS; i++) {
        int which = (int)(rand_r(&w->seed) % NKEYS);
        const kl_key *k = w->sh->key[which];
        uint8_t dg[32], sig[80];
        for (size_t b = 0; b < sizeof dg; b++)
            dg[b] = (uint8_t)rand_r(&w->seed);
        size_t n = sizeof sig;
        EVP_PKEY_CTX *c = kl_key_take_sign_ctx(k);
        int ok;
        if (c) {
            w->lent++;
            ok = EVP_PKEY_sign(c, sig, &n, dg, sizeof dg) == 1;
            kl_key_give_sign_ctx(k, c);
        } else {
            /* lent to another thread: what ops.c does, a context of its
             * own */
            w->busy++;
            c = EVP_PKEY_CTX_new_from_pkey(NULL, kl_key_pkey(k), NULL);
            ok = c && EVP_PKEY_sign_init(c) == 1 &&
                 EVP_PKEY_sign(c, sig, &n, dg, sizeof dg) == 1;
            EVP_PKEY_CTX_free(c);
        }
        if (!ok || !verifies(w->sh->pk[which], sig, n, dg, sizeof dg))
            w->bad++;
    }
    return NULL;
}

static void test_threads_share_keys(void **state)
{
    (void)state;
    tk_reports r;
    shared sh;
    sh.ks = ec_store(&r, NKEYS, sh.pk);
    for (int i = 0; i < NKEYS; i++)
        sh.key[i] = find(sh.ks, sh.pk[i]);
    pthread_t t[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.sh = &sh, .seed = 17u * (unsigned)i + 1u};
        assert_int_equal(pthread_create(&t[i], NULL, sign_loop, &w[i]), 0);
    }
    int lent = 0;
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(w[i].bad, 0);
        assert_int_equal(w[i].lent + w[i].busy, ROUNDS);
        lent += w[i].lent;
    }
    assert_true(lent > 0);
    /* every key's context is back */
    for (int i = 0; i < NKEYS; i++) {
        EVP_PKEY_CTX *c = kl_key_take_sign_ctx(sh.key[i]);
        assert_non_null(c);
        kl_key_give_sign_ctx(sh.key[i], c);
    }
    kl_keystore_free(sh.ks);
    for (int i = 0; i < NKEYS; i++)
        EVP_PKEY_free(sh.pk[i]);
}

int main(void)
{
    (void)tk_vector_pkey; /* keytest.h helper this file does not need */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lent_once_and_given_back),
        cmocka_unit_test(test_only_ec_keys_have_one),
        cmocka_unit_test(test_file_keys_have_one),
        cmocka_unit_test(test_threads_share_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
