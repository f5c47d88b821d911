/* SPDX-License-Identifier: Apache-2.0 */
/* Sealed key files in the key store (keys/sealed_load.c, docs/SEALING.md
 * "keylessd and sealed keys"): opened with the sealing key of either KEM
 * and found by SKI; held elsewhere without a sealing key, when not wrapped
 * to it, or when the server's attributes do not satisfy the policy;
 * refused and counted when altered, when the entry for this key does not
 * open, or when the SKI the file names is not its public key's; a sealed file
 * readable by others is accepted (it is ciphertext); a key present both
 * as a key file and sealed is loaded once. */
#include "keytest.h"

#include "seal/sealed.h"

typedef struct node {
    EVP_PKEY *sk;
    uint8_t pk[KL_HPKE_MAX_ENC];
    size_t pk_len;
    uint16_t kem;
} node;

static void make_node(node *n, uint16_t kem)
{
    n->kem = kem;
    assert_int_equal(kl_hpke_generate(kem, &n->sk), KL_OK);
    assert_int_equal(
        kl_hpke_public(kem, n->sk, n->pk, sizeof n->pk, &n->pk_len), KL_OK);
}

/* Seals key to the nodes under policy, with the SKI given (NULL: the
 * key's own), into dir/name (mode 0644); returns the path. */
static const char *seal_file(const char *dir, const char *name, EVP_PKEY *key,
                             const char *policy, const node *nodes, size_t n,
                             const uint8_t *ski_override)
{
    kl_sealed_to to[4];
    char names[4][24];
    for (size_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof names[i], "n%zu", i);
        to[i] = (kl_sealed_to){KL_SEALED_NODE, names[i], nodes[i].kem,
                               nodes[i].pk, nodes[i].pk_len};
    }
    uint8_t ski[KL_SKI_LEN];
    assert_int_equal(kl_ski_from_pkey(key, ski), KL_OK);
    uint8_t *out = NULL;
    size_t len = 0;
    char err[256];
    assert_int_equal(kl_sealed_seal(policy, key,
                                    ski_override ? ski_override : ski, to, n,
                                    &out, &len, err, sizeof err),
                     KL_OK);
    const char *path = tk_write(dir, name, out, len, 0644);
    free(out);
    return path;
}

static kl_keystore *store(tk_reports *r, EVP_PKEY *sealing,
                          const kl_policy_attr *attrs, size_t n)
{
    memset(r, 0, sizeof *r);
    kl_keystore_opts o = {.report = tk_report,
                          .report_arg = r,
                          .sealing_key = sealing,
                          .sealing_attrs = attrs,
                          .n_sealing_attrs = n};
    kl_keystore *ks = kl_keystore_new(&o);
    assert_non_null(ks);
    return ks;
}

static void test_open_and_elsewhere(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    node nx, np, other;
    make_node(&nx, KL_HPKE_KEM_X25519);
    make_node(&np, KL_HPKE_KEM_P256);
    make_node(&other, KL_HPKE_KEM_X25519);
    EVP_PKEY *ec = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    EVP_PKEY *rsa = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
    uint8_t ec_ski[KL_SKI_LEN], rsa_ski[KL_SKI_LEN];
    assert_int_equal(kl_ski_from_pkey(ec, ec_ski), KL_OK);
    assert_int_equal(kl_ski_from_pkey(rsa, rsa_ski), KL_OK);
    node both[2] = {nx, np};
    seal_file(dir, "ec.sealed", ec, "region=eu-west", both, 2, NULL);
    seal_file(dir, "rsa.sealed", rsa, "region=us-east", &other, 1, NULL);

    /* each KEM's node opens ec.sealed; rsa.sealed is elsewhere */
    const kl_policy_attr eu[] = {{"region", "eu-west"}};
    for (size_t k = 0; k < 2; k++) {
        tk_reports r;
        kl_keystore *ks = store(&r, k ? np.sk : nx.sk, eu, 1);
        assert_int_equal(kl_keystore_add_dir(ks, dir), KL_OK);
        assert_int_equal(kl_keystore_count(ks), 1);
        const kl_key *key = kl_keystore_find(ks, ec_ski);
        assert_non_null(key);
        assert_int_equal(EVP_PKEY_eq(kl_key_pkey(key), ec), 1);
        assert_null(kl_keystore_held_elsewhere(ks, ec_ski));
        assert_string_equal(kl_keystore_held_elsewhere(ks, rsa_ski),
                            "region=us-east");
        assert_int_equal(kl_keystore_held_elsewhere_count(ks), 1);
        assert_true(tk_find(&r, "rsa.sealed",
                            "held elsewhere (not wrapped "
                            "to this server") >= 0);
        kl_keystore_free(ks);
    }
    /* no sealing key: both elsewhere */
    tk_reports r;
    kl_keystore *ks = store(&r, NULL, NULL, 0);
    assert_int_equal(kl_keystore_add_dir(ks, dir), KL_OK);
    assert_int_equal(kl_keystore_count(ks), 0);
    assert_int_equal(kl_keystore_held_elsewhere_count(ks), 2);
    assert_true(tk_find(&r, "ec.sealed", "no sealing_key configured") >= 0);
    kl_keystore_free(ks);
    /* attributes outside the policy: elsewhere though wrapped here */
    const kl_policy_attr us[] = {{"region", "us-east"}, {"tier", "edge"}};
    ks = store(&r, nx.sk, us, 2);
    assert_int_equal(kl_keystore_add_dir(ks, dir), KL_OK);
    assert_int_equal(kl_keystore_count(ks), 0);
    assert_string_equal(kl_keystore_held_elsewhere(ks, ec_ski),
                        "region=eu-west");
    assert_true(tk_find(&r, "ec.sealed", "do not satisfy its policy") >= 0);
    kl_keystore_free(ks);
    /* the same key as a key file too: loaded once, the first by name */
    tk_write_key(dir, "a-ec.key", ec, TK_PEM_PKCS8);
    ks = store(&r, nx.sk, eu, 1);
    assert_int_equal(kl_keystore_add_dir(ks, dir), KL_OK);
    assert_int_equal(kl_keystore_count(ks), 1);
    assert_non_null(
        strstr(kl_key_path(kl_keystore_find(ks, ec_ski)), "a-ec.key"));
    kl_keystore_free(ks);
    EVP_PKEY_free(ec);
    EVP_PKEY_free(rsa);
    EVP_PKEY_free(nx.sk);
    EVP_PKEY_free(np.sk);
    EVP_PKEY_free(other.sk);
    tk_rmrf(dir);
}

/* Many keys held elsewhere: each found by SKI with its own policy (the
 * map a request's miss asks, one probe), a second file for one key makes
 * one record, an SKI not held anywhere is NULL, and the records enumerate
 * in load order (kl_keystore_elsewhere_policy, what the router prepares). */
static void test_many_elsewhere(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    node other;
    make_node(&other, KL_HPKE_KEM_X25519);
    enum { N = 300 };
    static uint8_t skis[N][KL_SKI_LEN];
    char name[32], policy[32];
    EVP_PKEY *first = NULL;
    for (int i = 0; i < N; i++) {
        EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
        assert_int_equal(kl_ski_from_pkey(k, skis[i]), KL_OK);
        snprintf(name, sizeof name, "k%03d.sealed", i);
        snprintf(policy, sizeof policy, "region=r%d", i % 7);
        seal_file(dir, name, k, policy, &other, 1, NULL);
        if (i == 0)
            first = k;
        else
            EVP_PKEY_free(k);
    }
    seal_file(dir, "zz-again.sealed", first, "region=r0", &other, 1, NULL);
    EVP_PKEY_free(first);
    tk_reports r;
    kl_keystore *ks = store(&r, NULL, NULL, 0);
    assert_int_equal(kl_keystore_add_dir(ks, dir), KL_OK);
    assert_int_equal(kl_keystore_held_elsewhere_count(ks), N);
    for (int i = 0; i < N; i++) {
        snprintf(policy, sizeof policy, "region=r%d", i % 7);
        const char *p = kl_keystore_held_elsewhere(ks, skis[i]);
        assert_non_null(p);
        assert_string_equal(p, policy);
        assert_string_equal(kl_keystore_elsewhere_policy(ks, (size_t)i),
                            policy); /* k000..k299 load in name order */
    }
    uint8_t none[KL_SKI_LEN];
    memcpy(none, skis[0], sizeof none);
    none[KL_SKI_LEN - 1] ^= 1;
    assert_null(kl_keystore_held_elsewhere(ks, none));
    assert_null(kl_keystore_elsewhere_policy(ks, N));
    assert_null(kl_keystore_held_elsewhere(NULL, skis[0]));
    kl_keystore_free(ks);
    EVP_PKEY_free(other.sk);
    tk_rmrf(dir);
}

static void test_refused(void **state)
{
    (void)state;
    char *dir = tk_tmpdir();
    node nx;
    make_node(&nx, KL_HPKE_KEM_X25519);
    EVP_PKEY *ec = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    const char *p = seal_file(dir, "ec.sealed", ec, "a=1", &nx, 1, NULL);
    size_t len = 0;
    uint8_t *b = (uint8_t *)tu_read_file(p, &len);
    uint64_t before = kl_keys_sealed_refused_total();
    tk_reports r;
    /* one byte changed in the body, then in the header */
    for (size_t i = 0; i < 2; i++) {
        b[i ? 40 : len - 3] ^= 1;
        tk_write(dir, "ec.sealed", b, len, 0600);
        b[i ? 40 : len - 3] ^= 1;
        kl_keystore *ks = store(&r, nx.sk, NULL, 0);
        assert_int_equal(kl_keystore_add_file(ks, p), KL_E_KEY);
        assert_true(tk_find(&r, "ec.sealed: sealed key refused: ", NULL) >= 0);
        assert_int_equal(kl_keystore_count(ks), 0);
        kl_keystore_free(ks);
    }
    assert_int_equal(kl_keys_sealed_refused_total(), before + 2);
    /* truncated: does not parse */
    tk_write(dir, "ec.sealed", b, len - 1, 0600);
    kl_keystore *ks = store(&r, nx.sk, NULL, 0);
    assert_int_equal(kl_keystore_add_file(ks, p), KL_E_KEY);
    assert_true(tk_find(&r, "not a valid sealed key file (at ", NULL) >= 0);
    kl_keystore_free(ks);
    /* a public key that does not hash to the SKI beside it */
    b[20] ^= 1;
    tk_write(dir, "ec.sealed", b, len, 0600);
    b[20] ^= 1;
    ks = store(&r, nx.sk, NULL, 0);
    assert_int_equal(kl_keystore_add_file(ks, p), KL_E_KEY);
    assert_true(tk_find(&r, "ski: not the SKI of the public key", NULL) >= 0);
    kl_keystore_free(ks);
    /* a directory walk with skip_bad_keys goes on past it */
    kl_keystore_opts o = {.report = tk_report,
                          .report_arg = &r,
                          .sealing_key = nx.sk,
                          .skip_bad_keys = true};
    tk_write_key(dir, "good.key", ec, TK_PEM_PKCS8);
    ks = kl_keystore_new(&o);
    assert_int_equal(kl_keystore_add_dir(ks, dir), KL_OK);
    assert_int_equal(kl_keystore_count(ks), 1);
    kl_keystore_free(ks);
    assert_int_equal(kl_keys_sealed_refused_total(), before + 5);
    free(b);
    EVP_PKEY_free(ec);
    EVP_PKEY_free(nx.sk);
    tk_rmrf(dir);
}

int main(void)
{
    (void)tk_vector_pkey; /* keytest.h's, for the other key tests */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_and_elsewhere),
        cmocka_unit_test(test_many_elsewhere),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
