/* SPDX-License-Identifier: Apache-2.0 */
/* Crypto execution (protocol P4): the reference's captured responses byte
 * for byte where they are deterministic, signatures verified with the
 * independent public keys where they are not, and every refusal. */
#include "cryptotest.h"

#include <jansson.h>
#include <pthread.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>

static kl_keystore *ks;

static int setup(void **state)
{
    (void)state;
    ks = ct_vector_store();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kl_crypto_thread_cleanup();
    kl_keystore_free(ks);
    return 0;
}

/* Finds tag in a whole message (8-byte header, then tag/len/value items). */
static int find_item(const uint8_t *msg, size_t len, uint8_t tag,
                     const uint8_t **val, size_t *vlen)
{
    assert_true(len >= 8);
    size_t body = (size_t)msg[2] << 8 | msg[3];
    assert_int_equal(body + 8, len);
    size_t i = 8;
    while (i + 3 <= len) {
        size_t l = (size_t)msg[i + 1] << 8 | msg[i + 2];
        assert_true(i + 3 + l <= len);
        if (msg[i] == tag) {
            *val = msg + i + 3;
            *vlen = l;
            return 1;
        }
        i += 3 + l;
    }
    return 0;
}

static int is_quirk(const char *name)
{
    /* The reference signs whatever the key is; protocol P4 makes these a
     * crypto error. */
    static const char *q[] = {
        "rsa-sign-opcode-on-ecdsa-key", "ecdsa-sign-opcode-on-rsa-key",
        "ed25519-opcode-on-ecdsa-key", "rsa-pss-on-ecdsa-key"};
    for (size_t i = 0; i < 4; i++)
        if (!strcmp(name, q[i]))
            return 1;
    return 0;
}

static void test_reference_vectors(void **state)
{
    (void)state;
    json_error_t jerr;
    json_t *root = json_load_file(tu_vector_path("vectors.json"), 0, &jerr);
    assert_non_null(root);
    json_t *vs = json_object_get(root, "vectors");
    size_t i;
    json_t *v;
    int exact = 0, verified = 0, errors = 0, quirks = 0;
    uint8_t out[1024];
    json_array_foreach(vs, i, v)
    {
        const char *name = json_string_value(json_object_get(v, "name"));
        const char *key = json_string_value(json_object_get(v, "key"));
        const char *req_hex =
            json_string_value(json_object_get(v, "request_hex"));
        const char *resp_hex =
            json_string_value(json_object_get(v, "response_hex"));
        if (!key || !req_hex || !resp_hex || !*resp_hex)
            continue;
        size_t rlen, slen, plen = 0, olen, elen = 0;
        uint8_t *req = tu_unhex(req_hex, &rlen);
        uint8_t *resp = tu_unhex(resp_hex, &slen);
        const uint8_t *op, *payload = NULL, *rop, *expect = NULL;
        assert_true(find_item(req, rlen, 0x11, &op, &olen));
        assert_int_equal(olen, 1);
        find_item(req, rlen, 0x12, &payload, &plen);
        assert_true(find_item(resp, slen, 0x11, &rop, &olen));
        find_item(resp, slen, 0x12, &expect, &elen);
        if (op[0] >= 0xF0) {
            free(req), free(resp);
            continue; /* answered before any key operation */
        }
        const kl_key *k = ct_key(ks, key);
        size_t n = 0;
        kl_status err =
            kl_crypto_exec(k, op[0], payload, plen, out, sizeof out, &n);
        if (is_quirk(name)) {
            if (err != KL_E_CRYPTO)
                fail_msg("%s: got %s, want crypto error", name,
                         kl_status_str(err));
            quirks++;
        } else if (rop[0] == 0xFF) {
            assert_int_equal(elen, 1);
            /* the vector's answer is a wire byte */
            if (kl_status_to_p6(err) != expect[0])
                fail_msg("%s: got %s, want %u", name, kl_status_str(err),
                         expect[0]);
            errors++;
        } else if (json_is_true(json_object_get(v, "deterministic"))) {
            if (err != KL_OK)
                fail_msg("%s: error %s", name, kl_status_str(err));
            assert_int_equal(n, elen);
            assert_memory_equal(out, expect, elen);
            exact++;
        } else {
            if (err != KL_OK)
                fail_msg("%s: error %s", name, kl_status_str(err));
            EVP_PKEY *pub = ct_pubkey(key);
            if (!ct_verify(pub, op[0], payload, plen, out, n))
                fail_msg("%s: signature does not verify", name);
            /* and the reference's own signature verifies the same way */
            assert_true(ct_verify(pub, op[0], payload, plen, expect, elen));
            EVP_PKEY_free(pub);
            verified++;
        }
        free(req);
        free(resp);
    }
    print_message("vectors: %d byte-exact, %d verified, %d errors, %d quirks\n",
                  exact, verified, errors, quirks);
    /* decrypt, md5sha1, sha1, sha256, sha384, sha512, rsa3072-sha256,
     * ed25519 */
    assert_int_equal(exact, 8);
    /* 3 PSS, 3 ECDSA, ecdsa-with-all-optional-items,
     * raw-ecdsa-sign-minimal */
    assert_int_equal(verified, 8);
    /* wrong digest len, decrypt on EC, too large, 0x99, 0x08 */
    assert_int_equal(errors, 5);
    assert_int_equal(quirks, 4);
    json_decref(root);
}

static void test_rsa_sign_all_hashes_verify(void **state)
{
    (void)state;
    static const uint8_t ops[] = {0x02, 0x03, 0x04, 0x05, 0x06,
                                  0x07, 0x35, 0x36, 0x37};
    static const char *keys[] = {"rsa-2048", "rsa-3072"};
    uint8_t in[64], out[512];
    for (size_t ki = 0; ki < 2; ki++) {
        const kl_key *k = ct_key(ks, keys[ki]);
        EVP_PKEY *pub = ct_pubkey(keys[ki]);
        for (size_t i = 0; i < sizeof ops; i++) {
            size_t dlen =
                ops[i] == 0x02 ? 36 : (size_t)EVP_MD_get_size(ct_md(ops[i]));
            ct_fill(in, dlen, ops[i]);
            size_t n = 0;
            /* twice: the second call reuses the cached context */
            for (int rep = 0; rep < 2; rep++) {
                assert_int_equal(
                    kl_crypto_exec(k, ops[i], in, dlen, out, sizeof out, &n),
                    KL_OK);
                assert_int_equal(n, kl_crypto_max_output(k));
                if (!ct_verify(pub, ops[i], in, dlen, out, n))
                    fail_msg("%s op 0x%02x does not verify", keys[ki], ops[i]);
            }
        }
        EVP_PKEY_free(pub);
    }
}

/* MD5SHA1 has no DigestInfo: the signature opens to exactly
 * 00 01 FF.. 00 || 36 bytes. */
static void test_md5sha1_has_no_digestinfo(void **state)
{
    (void)state;
    const kl_key *k = ct_key(ks, "rsa-2048");
    EVP_PKEY *pub = ct_pubkey("rsa-2048");
    uint8_t in[36], sig[256], m[256];
    ct_fill(in, sizeof in, 9);
    size_t n, mlen = sizeof m;
    assert_int_equal(kl_crypto_exec(k, 0x02, in, 36, sig, sizeof sig, &n),
                     KL_OK);
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_pkey(NULL, pub, NULL);
    assert_int_equal(EVP_PKEY_verify_recover_init(c), 1);
    assert_int_equal(EVP_PKEY_CTX_set_rsa_padding(c, RSA_NO_PADDING), 1);
    assert_int_equal(EVP_PKEY_verify_recover(c, m, &mlen, sig, n), 1);
    assert_int_equal(mlen, 256);
    assert_int_equal(m[0], 0x00);
    assert_int_equal(m[1], 0x01);
    for (size_t i = 2; i < 256 - 37; i++)
        assert_int_equal(m[i], 0xFF);
    assert_int_equal(m[256 - 37], 0x00);
    assert_memory_equal(m + 256 - 36, in, 36);
    EVP_PKEY_CTX_free(c);
    EVP_PKEY_free(pub);
}

static void ecdsa_all_ops(const kl_key *k, EVP_PKEY *pub)
{
    static const size_t lens[] = {0, 1, 20, 28, 32, 36, 48, 64, 100};
    uint8_t in[100], out[160];
    for (uint8_t op = 0x12; op <= 0x17; op++) {
        for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
            ct_fill(in, lens[i], (uint8_t)(op + i));
            size_t n = 0;
            assert_int_equal(
                kl_crypto_exec(k, op, in, lens[i], out, sizeof out, &n), KL_OK);
            assert_true(n <= kl_crypto_max_output(k));
            assert_int_equal(out[0], 0x30); /* DER SEQUENCE { r, s } */
            if (!ct_verify(pub, op, in, lens[i], out, n))
                fail_msg("op 0x%02x len %zu does not verify", op, lens[i]);
        }
    }
}

static void test_ecdsa_every_curve_and_length(void **state)
{
    (void)state;
    ecdsa_all_ops(ct_key(ks, "ecdsa-p256"),
                  kl_key_pkey(ct_key(ks, "ecdsa-p256")));
    EVP_PKEY *pub = ct_pubkey("ecdsa-p384");
    ecdsa_all_ops(ct_key(ks, "ecdsa-p384"), pub);
    EVP_PKEY_free(pub);
    static const char *curves[] = {"P-224", "P-521"};
    static const size_t maxes[] = {64, 139};
    for (int i = 0; i < 2; i++) {
        kl_keystore *gs = kl_keystore_new(NULL);
        EVP_PKEY *k = EVP_EC_gen(curves[i]);
        assert_int_equal(kl_keystore_add_pkey(gs, k, curves[i]), KL_OK);
        uint8_t ski[KL_SKI_LEN];
        assert_int_equal(kl_ski_from_pkey(k, ski), KL_OK);
        const kl_key *key = kl_keystore_find(gs, ski);
        assert_int_equal(kl_crypto_max_output(key), maxes[i]);
        assert_int_equal(kl_crypto_cost_class(key), KL_COST_FAST);
        ecdsa_all_ops(key, k);
        EVP_PKEY_free(k);
        kl_keystore_free(gs); /* cache entries keep their own references */
    }
}

static void test_ed25519(void **state)
{
    (void)state;
    const kl_key *k = ct_key(ks, "ed25519");
    EVP_PKEY *pub = ct_pubkey("ed25519");
    uint8_t in[300], out[64];
    static const size_t lens[] = {0, 1, 32, 130, 300};
    for (size_t i = 0; i < 5; i++) {
        ct_fill(in, lens[i], (uint8_t)i);
        size_t n = 0;
        assert_int_equal(
            kl_crypto_exec(k, 0x18, in, lens[i], out, sizeof out, &n), KL_OK);
        assert_int_equal(n, 64);
        assert_true(ct_verify(pub, 0x18, in, lens[i], out, n));
    }
    assert_int_equal(kl_crypto_max_output(k), 64);
    EVP_PKEY_free(pub);
}

/* ---- RSA decrypt edges (protocol P4) ------------------------------------ */

static void modulus(const kl_key *k, uint8_t *n, size_t len)
{
    BIGNUM *bn = NULL;
    assert_int_equal(
        EVP_PKEY_get_bn_param(kl_key_pkey(k), OSSL_PKEY_PARAM_RSA_N, &bn), 1);
    assert_int_equal(BN_bn2binpad(bn, n, (int)len), (int)len);
    BN_free(bn);
}

/* m^e mod n with the public key alone. */
static void raw_encrypt(EVP_PKEY *pub, const uint8_t *m, uint8_t *c, size_t k)
{
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_pkey(NULL, pub, NULL);
    size_t n = k;
    assert_int_equal(EVP_PKEY_encrypt_init(ctx), 1);
    assert_int_equal(EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_NO_PADDING), 1);
    assert_int_equal(EVP_PKEY_encrypt(ctx, c, &n, m, k), 1);
    assert_int_equal(n, k);
    EVP_PKEY_CTX_free(ctx);
}

static void test_rsa_decrypt_edges(void **state)
{
    (void)state;
    const kl_key *k = ct_key(ks, "rsa-2048");
    EVP_PKEY *pub = ct_pubkey("rsa-2048");
    enum { K = 256 };
    uint8_t n[K], c[K + 4], out[K], m[K], back[K];
    size_t len;
    modulus(k, n, K);

    /* a round trip: raw m -> c -> m, no padding checked or removed */
    ct_fill(m, K, 5);
    m[0] = 0x00;
    m[1] = 0x17; /* not a PKCS#1 type 2 block: returned anyway */
    raw_encrypt(pub, m, c, K);
    assert_int_equal(kl_crypto_exec(k, 0x01, c, K, out, sizeof out, &len),
                     KL_OK);
    assert_int_equal(len, K);
    assert_memory_equal(out, m, K);

    /* leading zero bytes beyond k are allowed */
    uint8_t c2[K + 3] = {0};
    memcpy(c2 + 3, c, K);
    assert_int_equal(
        kl_crypto_exec(k, 0x01, c2, sizeof c2, out, sizeof out, &len), KL_OK);
    assert_memory_equal(out, m, K);
    /* but not a non-zero extra byte */
    c2[0] = 1;
    assert_int_equal(
        kl_crypto_exec(k, 0x01, c2, sizeof c2, out, sizeof out, &len),
        KL_E_CRYPTO);

    /* a short ciphertext is left-padded: c = 2 gives m with m^e = 2 */
    const uint8_t two = 2;
    assert_int_equal(kl_crypto_exec(k, 0x01, &two, 1, out, sizeof out, &len),
                     KL_OK);
    assert_int_equal(len, K);
    raw_encrypt(pub, out, back, K);
    uint8_t want[K] = {0};
    want[K - 1] = 2;
    assert_memory_equal(back, want, K);

    /* c == n: all zeros, as the reference answers */
    memset(out, 0xAA, sizeof out);
    assert_int_equal(kl_crypto_exec(k, 0x01, n, K, out, sizeof out, &len),
                     KL_OK);
    assert_int_equal(len, K);
    uint8_t zeros[K] = {0};
    assert_memory_equal(out, zeros, K);
    /* c == n with leading zeros: the same */
    uint8_t nz[K + 1] = {0};
    memcpy(nz + 1, n, K);
    assert_int_equal(
        kl_crypto_exec(k, 0x01, nz, sizeof nz, out, sizeof out, &len), KL_OK);
    assert_memory_equal(out, zeros, K);

    /* c == n + 1 and c == n - 1 */
    uint8_t np1[K], nm1[K];
    memcpy(np1, n, K);
    memcpy(nm1, n, K);
    np1[K - 1]++; /* n is odd: no carry */
    nm1[K - 1]--;
    assert_int_equal(kl_crypto_exec(k, 0x01, np1, K, out, sizeof out, &len),
                     KL_E_CRYPTO);
    assert_int_equal(kl_crypto_exec(k, 0x01, nm1, K, out, sizeof out, &len),
                     KL_OK);
    /* all 0xFF > n */
    memset(c, 0xFF, K);
    assert_int_equal(kl_crypto_exec(k, 0x01, c, K, out, sizeof out, &len),
                     KL_E_CRYPTO);
    /* the empty ciphertext is c = 0 */
    assert_int_equal(kl_crypto_exec(k, 0x01, NULL, 0, out, sizeof out, &len),
                     KL_OK);
    assert_memory_equal(out, zeros, K);
    /* output buffer too small: internal, never an overflow */
    assert_int_equal(kl_crypto_exec(k, 0x01, nm1, K, out, K - 1, &len),
                     KL_E_INTERNAL);
    EVP_PKEY_free(pub);
}

/* ---- refusals ----------------------------------------------------------- */

static void test_wrong_digest_lengths(void **state)
{
    (void)state;
    const kl_key *k = ct_key(ks, "rsa-2048");
    static const struct {
        uint8_t op;
        size_t len;
    } ok[] = {{0x02, 36}, {0x03, 20}, {0x04, 28}, {0x05, 32}, {0x06, 48},
              {0x07, 64}, {0x35, 32}, {0x36, 48}, {0x37, 64}};
    static const size_t tries[] = {0,  1,  19, 20, 21, 28, 32,
                                   33, 36, 47, 48, 64, 65, 100};
    uint8_t in[100] = {0}, out[256];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        for (size_t t = 0; t < sizeof tries / sizeof tries[0]; t++) {
            if (tries[t] == ok[i].len)
                continue;
            size_t n = 99;
            kl_status err =
                kl_crypto_exec(k, ok[i].op, in, tries[t], out, sizeof out, &n);
            if (err != KL_E_CRYPTO)
                fail_msg("op 0x%02x len %zu: %s", ok[i].op, tries[t],
                         kl_status_str(err));
            assert_int_equal(n, 0);
        }
    }
}

static void test_opcode_key_mismatch(void **state)
{
    (void)state;
    static const char *keys[] = {"rsa-2048", "ecdsa-p256", "ecdsa-p384",
                                 "ed25519"};
    static const uint8_t rsa_ops[] = {0x01, 0x02, 0x03, 0x04, 0x05,
                                      0x06, 0x07, 0x35, 0x36, 0x37};
    static const uint8_t ec_ops[] = {0x12, 0x13, 0x14, 0x15, 0x16, 0x17};
    uint8_t in[256] = {0}, out[512];
    for (size_t ki = 0; ki < 4; ki++) {
        const kl_key *k = ct_key(ks, keys[ki]);
        kl_key_type t = kl_key_get_type(k);
        for (int op = 0; op < 256; op++) {
            int is_rsa = memchr(rsa_ops, op, sizeof rsa_ops) != NULL;
            int is_ec = memchr(ec_ops, op, sizeof ec_ops) != NULL;
            int is_ed = op == 0x18;
            size_t len =
                op == 0x01 ? 256
                : op == 0x02
                    ? 36
                    : (is_rsa ? (size_t)EVP_MD_get_size(ct_md((uint8_t)op))
                              : 32);
            size_t n;
            kl_status err =
                kl_crypto_exec(k, (uint8_t)op, in, len, out, sizeof out, &n);
            kl_status want;
            if (!is_rsa && !is_ec && !is_ed)
                want = KL_E_BAD_OPCODE;
            else if ((is_rsa && t == KL_KEY_RSA) || (is_ec && t == KL_KEY_EC) ||
                     (is_ed && t == KL_KEY_ED25519))
                want = KL_OK;
            else
                want = KL_E_CRYPTO;
            if (err != want)
                fail_msg("%s op 0x%02x: got %d want %d", keys[ki], op, err,
                         want);
        }
    }
}

static void test_small_output_buffer_and_classes(void **state)
{
    (void)state;
    const kl_key *ec = ct_key(ks, "ecdsa-p256");
    const kl_key *rsa = ct_key(ks, "rsa-3072");
    uint8_t in[32] = {1}, out[512];
    size_t n;
    assert_int_equal(kl_crypto_max_output(ec), 72);
    assert_int_equal(kl_crypto_max_output(ct_key(ks, "ecdsa-p384")), 104);
    assert_int_equal(kl_crypto_max_output(rsa), 384);
    assert_int_equal(kl_crypto_max_output(ct_key(ks, "rsa-2048")), 256);
    assert_int_equal(kl_crypto_exec(ec, 0x15, in, 32, out, 71, &n),
                     KL_E_INTERNAL);
    assert_int_equal(kl_crypto_exec(rsa, 0x05, in, 32, out, 383, &n),
                     KL_E_INTERNAL);
    assert_int_equal(kl_crypto_exec(NULL, 0x05, in, 32, out, 383, &n),
                     KL_E_INTERNAL);
    assert_int_equal(kl_crypto_cost_class(ec), KL_COST_FAST);
    assert_int_equal(kl_crypto_cost_class(ct_key(ks, "ed25519")), KL_COST_FAST);
    assert_int_equal(kl_crypto_cost_class(rsa), KL_COST_SLOW);
}

/* More keys than cache slots, several rounds, and a store freed while its
 * contexts are cached (a reload): every signature still verifies. */
static void test_cache_eviction_and_freed_keys(void **state)
{
    (void)state;
    enum { N = 700 };
    static EVP_PKEY *gen[N];
    static const kl_key *keys[N];
    kl_keystore *gs = kl_keystore_new(NULL);
    for (int i = 0; i < N; i++) {
        gen[i] = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
        assert_int_equal(kl_keystore_add_pkey(gs, gen[i], "g"), KL_OK);
        uint8_t ski[KL_SKI_LEN];
        assert_int_equal(kl_ski_from_pkey(gen[i], ski), KL_OK);
        keys[i] = kl_keystore_find(gs, ski);
    }
    uint8_t msg[16], sig[64];
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < N; i++) {
            size_t n;
            ct_fill(msg, sizeof msg, (uint8_t)(i + round));
            assert_int_equal(kl_crypto_exec(keys[i], 0x18, msg, sizeof msg, sig,
                                            sizeof sig, &n),
                             KL_OK);
            assert_true(ct_verify(gen[i], 0x18, msg, sizeof msg, sig, n));
        }
    kl_keystore_free(gs);
    /* the cached contexts outlive the store; new keys are never confused
     * with them */
    gs = kl_keystore_new(NULL);
    EVP_PKEY *fresh = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    assert_int_equal(kl_keystore_add_pkey(gs, fresh, "fresh"), KL_OK);
    uint8_t ski[KL_SKI_LEN];
    assert_int_equal(kl_ski_from_pkey(fresh, ski), KL_OK);
    size_t n;
    assert_int_equal(kl_crypto_exec(kl_keystore_find(gs, ski), 0x18, msg,
                                    sizeof msg, sig, sizeof sig, &n),
                     KL_OK);
    assert_true(ct_verify(fresh, 0x18, msg, sizeof msg, sig, n));
    kl_keystore_free(gs);
    EVP_PKEY_free(fresh);
    for (int i = 0; i < N; i++)
        EVP_PKEY_free(gen[i]);
    kl_crypto_thread_cleanup();
}

/* ---- threads ------------------------------------------------------------ */

enum { THREADS = 4, SIGNS = 2000 };

static void *signer(void *arg)
{
    long t = (long)arg;
    const kl_key *k = ct_key(ks, "ecdsa-p256");
    EVP_PKEY *pkey = kl_key_pkey(k);
    const kl_key *ed = ct_key(ks, "ed25519");
    long bad = 0;
    uint8_t d[32], sig[72];
    for (int i = 0; i < SIGNS; i++) {
        size_t n;
        memcpy(d, &i, sizeof i);
        memcpy(d + 8, &t, sizeof t);
        if (kl_crypto_exec(k, 0x15, d, 32, sig, sizeof sig, &n) != 0 ||
            !ct_verify(pkey, 0x15, d, 32, sig, n))
            bad++;
        if (i % 50 == 0 &&
            (kl_crypto_exec(ed, 0x18, d, 32, sig, sizeof sig, &n) != 0 ||
             !ct_verify(kl_key_pkey(ed), 0x18, d, 32, sig, n)))
            bad++;
    }
    kl_crypto_thread_cleanup();
    return (void *)bad;
}

static void test_threads_share_keys(void **state)
{
    (void)state;
    pthread_t th[THREADS];
    for (long i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, signer, (void *)i), 0);
    long bad = 0;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        assert_int_equal(pthread_join(th[i], &r), 0);
        bad += (long)r;
    }
    assert_int_equal(bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_vectors),
        cmocka_unit_test(test_rsa_sign_all_hashes_verify),
        cmocka_unit_test(test_md5sha1_has_no_digestinfo),
        cmocka_unit_test(test_ecdsa_every_curve_and_length),
        cmocka_unit_test(test_ed25519),
        cmocka_unit_test(test_rsa_decrypt_edges),
        cmocka_unit_test(test_wrong_digest_lengths),
        cmocka_unit_test(test_opcode_key_mismatch),
        cmocka_unit_test(test_small_output_buffer_and_classes),
        cmocka_unit_test(test_cache_eviction_and_freed_keys),
        cmocka_unit_test(test_threads_share_keys),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
