/* SPDX-License-Identifier: Apache-2.0 */
/* Load speed of the key store: 2,000 EC P-256 keys from a directory must
 * take well under a second (100,000 keys in seconds). Prints
 * keys/second next to OpenSSL's one-call-per-file PEM_read_bio_PrivateKey,
 * which builds a fresh decoder context per file. */
#include "keytest.h"

#include <time.h>

#include <openssl/err.h>

enum { N_EC = 2000, N_RSA = 200, N_BASELINE = 200 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double baseline_per_key(const char *dir, int n)
{
    char p[4200];
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/k%05d.key", dir, i);
        FILE *f = fopen(p, "rb");
        assert_non_null(f);
        EVP_PKEY *k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
        assert_non_null(k);
        EVP_PKEY_free(k);
        fclose(f);
    }
    return (now_s() - t0) / n;
}

static void test_load_many_ec_keys(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    char name[32];
    for (int i = 0; i < N_EC; i++) {
        EVP_PKEY *k = EVP_EC_gen("P-256");
        assert_non_null(k);
        snprintf(name, sizeof name, "k%05d.key", i);
        /* mostly PKCS#8 PEM, as openssl genpkey writes, some SEC1 */
        tk_write_key(dir, name, k, i % 4 == 3 ? TK_PEM_TRAD : TK_PEM_PKCS8);
        EVP_PKEY_free(k);
    }
    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);
    double t0 = now_s();
    assert_int_equal(kl_keystore_add_dir(ks, dir), KL_OK);
    double dt = now_s() - t0;
    assert_int_equal(kl_keystore_count(ks), N_EC);
    assert_int_equal(r.n, 0);
    double base = baseline_per_key(dir, N_BASELINE);
    print_message("key store: %d EC P-256 keys in %.3f s = %.0f keys/s "
                  "(%.1f us/key; PEM_read_PrivateKey per file: %.1f us/key)\n",
                  N_EC, dt, N_EC / dt, dt / N_EC * 1e6, base * 1e6);
    /* generous even under sanitizers; ~40 ms in a release build */
    assert_true(dt < 20.0);
    kl_keystore_free(ks);
    tk_rmrf(dir);
}

static void test_load_many_rsa_keys(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    char name[32];
    EVP_PKEY *k = tk_vector_pkey("keys/rsa-2048.key");
    size_t n;
    uint8_t *pem = tk_encode(k, TK_PEM_PKCS8, &n);
    for (int i = 0; i < N_RSA; i++) {
        snprintf(name, sizeof name, "k%05d.key", i);
        tk_write(dir, name, pem, n, 0600);
    }
    tk_reports r;
    kl_keystore *ks = tk_store(&r, false, false);
    double t0 = now_s();
    assert_int_equal(kl_keystore_add_dir(ks, dir), KL_OK);
    double dt = now_s() - t0;
    /* the same key each time: one kept, the rest reported as duplicates */
    assert_int_equal(kl_keystore_count(ks), 1);
    print_message("key store: %d RSA-2048 key files in %.3f s = %.0f keys/s\n",
                  N_RSA, dt, N_RSA / dt);
    kl_keystore_free(ks);
    free(pem);
    EVP_PKEY_free(k);
    tk_rmrf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_many_ec_keys),
        cmocka_unit_test(test_load_many_rsa_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
