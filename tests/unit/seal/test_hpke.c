/* SPDX-License-Identifier: Apache-2.0 */
/* HPKE (seal/hpke.h) against RFC 9180's published test vectors
 * (tests/vectors/hpke/, Appendix A base mode): DeriveKeyPair, Encap and
 * Decap, the key schedule, every listed encryption sealed and opened in
 * sequence, and the exports; then round trips for every suite. Bad input
 * is test_hpke_bad.c. */
#include "hpketest.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/rand.h>

#include "seal/hpke_int.h"

/* ---- the vector file ---------------------------------------------------- */

#define MAX_VECTORS 8
#define MAX_ITEMS 16

typedef struct hv_enc {
    unsigned long long seq;
    const char *pt, *aad, *nonce, *ct;
} hv_enc;

typedef struct hv_exp {
    const char *ctx, *value;
    size_t len;
} hv_exp;

typedef struct hv {
    const char *title;
    int mode;
    kl_hpke_suite suite;
    const char *info, *ikmE, *pkEm, *skEm, *ikmR, *pkRm, *skRm, *enc,
        *shared_secret, *key, *base_nonce, *exporter_secret;
    hv_enc encs[MAX_ITEMS];
    size_t n_enc;
    hv_exp exps[MAX_ITEMS];
    size_t n_exp;
} hv;

static hv vectors[MAX_VECTORS];
static size_t n_vectors;
static char *vector_text;

/* Where each "name = hex" line of a vector goes. */
#define F(s, f)                                                                \
    {                                                                          \
#f, offsetof(s, f)                                                     \
    }
static const struct field {
    const char *name;
    size_t off;
} vector_fields[] =
    {
        F(hv, info), F(hv, ikmE),       F(hv, pkEm),
        F(hv, skEm), F(hv, ikmR),       F(hv, pkRm),
        F(hv, skRm), F(hv, enc),        F(hv, shared_secret),
        F(hv, key),  F(hv, base_nonce), F(hv, exporter_secret),
},
  enc_fields[] = {
      F(hv_enc, pt),
      F(hv_enc, aad),
      F(hv_enc, nonce),
      F(hv_enc, ct),
};
#undef F

static int set_field(void *obj, const struct field *fields, size_t n,
                     const char *name, const char *val)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(fields[i].name, name) == 0) {
            *(const char **)((char *)obj + fields[i].off) = val;
            return 1;
        }
    return 0;
}

/* Splits the file in place: "[title]" starts a vector, "seq" an
 * encryption, "exporter_context" an export; "name = value" lines fill
 * them. key_schedule_context and secret stay inside the key schedule:
 * key, base_nonce and exporter_secret check them. */
static void load_vectors(void)
{
    size_t len;
    vector_text = tu_read_file(tu_vector_path("hpke/rfc9180-base.txt"), &len);
    hv *v = NULL;
    for (char *line = strtok(vector_text, "\n"); line;
         line = strtok(NULL, "\n")) {
        if (line[0] == '#')
            continue;
        if (line[0] == '[') {
            assert_true(n_vectors < MAX_VECTORS);
            v = &vectors[n_vectors++];
            v->title = line;
            continue;
        }
        char *eq = strstr(line, " =");
        assert_non_null(eq);
        assert_non_null(v);
        *eq = 0;
        const char *name = line, *val = eq[2] == ' ' ? eq + 3 : "";
        hv_enc *e = v->n_enc ? &v->encs[v->n_enc - 1] : NULL;
        hv_exp *x = v->n_exp ? &v->exps[v->n_exp - 1] : NULL;
        if (strcmp(name, "mode") == 0) {
            v->mode = atoi(val);
        } else if (strcmp(name, "kem_id") == 0) {
            v->suite.kem = (uint16_t)atoi(val);
        } else if (strcmp(name, "kdf_id") == 0) {
            v->suite.kdf = (uint16_t)atoi(val);
        } else if (strcmp(name, "aead_id") == 0) {
            v->suite.aead = (uint16_t)atoi(val);
        } else if (strcmp(name, "seq") == 0) {
            assert_true(v->n_enc < MAX_ITEMS);
            v->encs[v->n_enc++].seq = strtoull(val, NULL, 10);
        } else if (strcmp(name, "exporter_context") == 0) {
            assert_true(v->n_exp < MAX_ITEMS);
            v->exps[v->n_exp++].ctx = val;
        } else if (strcmp(name, "L") == 0 && x) {
            x->len = (size_t)atoi(val);
        } else if (strcmp(name, "exported_value") == 0 && x) {
            x->value = val;
        } else if (e && !x &&
                   set_field(e, enc_fields,
                             sizeof enc_fields / sizeof enc_fields[0], name,
                             val)) {
        } else if (!set_field(v, vector_fields,
                              sizeof vector_fields / sizeof vector_fields[0],
                              name, val) &&
                   strcmp(name, "key_schedule_context") != 0 &&
                   strcmp(name, "secret") != 0) {
            fail_msg("unknown line in the vector file: %s", name);
        }
    }
}

/* Compares bytes with a hex string of the vector file. */
static void assert_hex(const uint8_t *got, size_t got_len, const char *hex,
                       const char *what)
{
    size_t len;
    uint8_t *want = tu_unhex(hex, &len);
    if (got_len != len || memcmp(got, want, len) != 0)
        fail_msg("%s: %zu bytes differ from the vector's %zu", what, got_len,
                 len);
    free(want);
}

/* SerializePrivateKey: X25519's raw bytes, P-256's 32-byte scalar. */
static void private_bytes(const EVP_PKEY *k, uint8_t *out, size_t *len)
{
    if (EVP_PKEY_is_a(k, "X25519")) {
        *len = 32;
        assert_int_equal(EVP_PKEY_get_raw_private_key(k, out, len), 1);
        return;
    }
    BIGNUM *d = NULL;
    assert_int_equal(EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_PRIV_KEY, &d), 1);
    assert_int_equal(BN_bn2binpad(d, out, 32), 32);
    *len = 32;
    BN_clear_free(d);
}

static EVP_PKEY *derive_and_check(const hv *v, const char *ikm_hex,
                                  const char *sk_hex, const char *pk_hex)
{
    size_t ikm_len, n;
    uint8_t *ikm = tu_unhex(ikm_hex, &ikm_len), buf[KL_HPKE_MAX_ENC];
    EVP_PKEY *k = NULL;
    assert_int_equal(kl_hpke_derive(v->suite.kem, ikm, ikm_len, &k), KL_OK);
    free(ikm);
    private_bytes(k, buf, &n);
    assert_hex(buf, n, sk_hex, "DeriveKeyPair sk");
    assert_int_equal(kl_hpke_public(v->suite.kem, k, buf, sizeof buf, &n),
                     KL_OK);
    assert_hex(buf, n, pk_hex, "DeriveKeyPair pk");
    return k;
}

/* One vector, whole. */
static void check_vector(const hv *v)
{
    assert_int_equal(v->mode, 0);
    assert_int_equal(kl_hpke_suite_check(v->suite), KL_OK);
    EVP_PKEY *sk_e = derive_and_check(v, v->ikmE, v->skEm, v->pkEm);
    EVP_PKEY *sk_r = derive_and_check(v, v->ikmR, v->skRm, v->pkRm);
    size_t pkr_len, info_len, enc_len, n;
    uint8_t *pkr = tu_unhex(v->pkRm, &pkr_len),
            *info = tu_unhex(v->info, &info_len);
    uint8_t enc[KL_HPKE_MAX_ENC], ss[KL_HPKE_HASH_LEN];

    /* Encap and Decap */
    assert_int_equal(kl_hpke_encap(v->suite.kem, sk_e, pkr, pkr_len, ss, enc,
                                   sizeof enc, &enc_len),
                     KL_OK);
    assert_hex(enc, enc_len, v->enc, "enc");
    assert_hex(ss, sizeof ss, v->shared_secret, "Encap shared_secret");
    memset(ss, 0, sizeof ss);
    assert_int_equal(kl_hpke_decap(v->suite.kem, enc, enc_len, sk_r, ss),
                     KL_OK);
    assert_hex(ss, sizeof ss, v->shared_secret, "Decap shared_secret");

    /* the key schedule, both sides */
    kl_hpke_ctx s, r;
    assert_int_equal(kl_hpke_setup_sender_eph(&s, v->suite, sk_e, pkr, pkr_len,
                                              info, info_len, enc, sizeof enc,
                                              &enc_len),
                     KL_OK);
    assert_hex(enc, enc_len, v->enc, "SetupBaseS enc");
    assert_int_equal(kl_hpke_setup_receiver(&r, v->suite, enc, enc_len, sk_r,
                                            info, info_len),
                     KL_OK);
    const kl_hpke_ctx *both[] = {&s, &r};
    for (int i = 0; i < 2; i++) {
        assert_hex(both[i]->key, both[i]->key_len, v->key, "key");
        assert_hex(both[i]->base_nonce, KL_HPKE_NONCE_LEN, v->base_nonce,
                   "base_nonce");
        assert_hex(both[i]->exporter_secret, KL_HPKE_HASH_LEN,
                   v->exporter_secret, "exporter_secret");
    }

    /* Encryptions in sequence: the sender seals and the receiver opens
     * each message of the vector; the sequence numbers the vector skips
     * are used by a filler message on both sides, so the counters advance
     * only by sealing and opening. */
    uint8_t ct[256], pt[256];
    for (size_t i = 0; i < v->n_enc; i++) {
        const hv_enc *e = &v->encs[i];
        while (s.seq < e->seq) {
            uint8_t fill[1] = {0}, fct[1 + KL_HPKE_TAG_LEN], fpt[1];
            size_t fn;
            assert_int_equal(
                kl_hpke_seal(&s, NULL, 0, fill, 1, fct, sizeof fct, &fn),
                KL_OK);
            assert_int_equal(
                kl_hpke_open(&r, NULL, 0, fct, fn, fpt, sizeof fpt, &fn),
                KL_OK);
        }
        assert_true(s.seq == e->seq && r.seq == e->seq);
        /* the vector's nonce is base_nonce XOR seq (section 5.2) */
        uint8_t nonce[KL_HPKE_NONCE_LEN];
        memcpy(nonce, s.base_nonce, sizeof nonce);
        for (int b = 0; b < 8; b++)
            nonce[KL_HPKE_NONCE_LEN - 1 - b] ^= (uint8_t)(e->seq >> (8 * b));
        assert_hex(nonce, sizeof nonce, e->nonce, "nonce");
        size_t pt_len, aad_len;
        uint8_t *ptv = tu_unhex(e->pt, &pt_len),
                *aad = tu_unhex(e->aad, &aad_len);
        assert_int_equal(
            kl_hpke_seal(&s, aad, aad_len, ptv, pt_len, ct, sizeof ct, &n),
            KL_OK);
        assert_hex(ct, n, e->ct, "ct");
        assert_int_equal(
            kl_hpke_open(&r, aad, aad_len, ct, n, pt, sizeof pt, &n), KL_OK);
        assert_hex(pt, n, e->pt, "pt");
        /* the single-shot form opens the first message too (6.1) */
        if (e->seq == 0) {
            size_t ct_len;
            uint8_t *ctv = tu_unhex(e->ct, &ct_len);
            assert_int_equal(kl_hpke_open_once(v->suite, enc, enc_len, sk_r,
                                               info, info_len, aad, aad_len,
                                               ctv, ct_len, pt, sizeof pt, &n),
                             KL_OK);
            assert_hex(pt, n, e->pt, "OpenBase pt");
            free(ctv);
        }
        free(ptv);
        free(aad);
    }
    assert_true(v->n_enc >= 6);

    /* exports, both sides */
    for (size_t i = 0; i < v->n_exp; i++) {
        const hv_exp *x = &v->exps[i];
        size_t clen;
        uint8_t *c = tu_unhex(x->ctx, &clen), out[64];
        assert_true(x->len <= sizeof out);
        for (int j = 0; j < 2; j++) {
            assert_int_equal(kl_hpke_export(both[j], c, clen, out, x->len),
                             KL_OK);
            assert_hex(out, x->len, x->value, "exported_value");
        }
        free(c);
    }
    assert_true(v->n_exp >= 3);

    kl_hpke_ctx_clear(&s);
    kl_hpke_ctx_clear(&r);
    free(pkr);
    free(info);
    EVP_PKEY_free(sk_e);
    EVP_PKEY_free(sk_r);
}

static void test_rfc9180_vectors(void **state)
{
    (void)state;
    load_vectors();
    assert_true(n_vectors >= 3);
    int kems_seen = 0;
    for (size_t i = 0; i < n_vectors; i++) {
        print_message("  %s\n", vectors[i].title);
        check_vector(&vectors[i]);
        kems_seen |= vectors[i].suite.kem;
    }
    /* both KEMs are proven */
    assert_int_equal(kems_seen, KL_HPKE_KEM_X25519 | KL_HPKE_KEM_P256);
    free(vector_text);
}

/* ---- round trips -------------------------------------------------------- */

static void test_round_trips(void **state)
{
    (void)state;
    static const uint8_t info[] = "keylessd sealed key", aad[] = "ski";
    size_t big_len = 100000;
    uint8_t *big = malloc(big_len), *ct = malloc(big_len + KL_HPKE_TAG_LEN),
            *pt = malloc(big_len);
    assert_true(big && ct && pt);
    assert_int_equal(RAND_bytes(big, (int)big_len), 1);
    for (size_t k = 0; k < sizeof kems / sizeof kems[0]; k++)
        for (size_t a = 0; a < sizeof aeads / sizeof aeads[0]; a++) {
            kl_hpke_suite su = suite_of(kems[k], aeads[a]);
            uint8_t pk[KL_HPKE_MAX_ENC], enc[KL_HPKE_MAX_ENC];
            size_t pk_len, enc_len, ct_len, pt_len;
            EVP_PKEY *sk = recipient(su.kem, pk, &pk_len);
            /* single shot: a 100 kB message, then an empty one */
            assert_int_equal(
                kl_hpke_seal_once(su, pk, pk_len, info, sizeof info, aad,
                                  sizeof aad, big, big_len, enc, sizeof enc,
                                  &enc_len, ct, big_len + KL_HPKE_TAG_LEN,
                                  &ct_len),
                KL_OK);
            assert_int_equal(enc_len, pk_len);
            assert_int_equal(ct_len, big_len + KL_HPKE_TAG_LEN);
            assert_int_equal(kl_hpke_open_once(su, enc, enc_len, sk, info,
                                               sizeof info, aad, sizeof aad, ct,
                                               ct_len, pt, big_len, &pt_len),
                             KL_OK);
            assert_int_equal(pt_len, big_len);
            assert_memory_equal(pt, big, big_len);
            assert_int_equal(kl_hpke_seal_once(su, pk, pk_len, NULL, 0, NULL, 0,
                                               NULL, 0, enc, sizeof enc,
                                               &enc_len, ct, KL_HPKE_TAG_LEN,
                                               &ct_len),
                             KL_OK);
            assert_int_equal(kl_hpke_open_once(su, enc, enc_len, sk, NULL, 0,
                                               NULL, 0, ct, ct_len, NULL, 0,
                                               &pt_len),
                             KL_OK);
            assert_int_equal(pt_len, 0);
            /* a context: several messages, each its own nonce */
            kl_hpke_ctx s, r;
            assert_int_equal(kl_hpke_setup_sender(&s, su, pk, pk_len, info,
                                                  sizeof info, enc, sizeof enc,
                                                  &enc_len),
                             KL_OK);
            assert_int_equal(kl_hpke_setup_receiver(&r, su, enc, enc_len, sk,
                                                    info, sizeof info),
                             KL_OK);
            uint8_t first[64];
            for (int m = 0; m < 3; m++) {
                assert_int_equal(
                    kl_hpke_seal(&s, aad, sizeof aad, big, 48, ct, 64, &ct_len),
                    KL_OK);
                if (m == 0)
                    memcpy(first, ct, 64);
                else /* same plaintext, another nonce */
                    assert_memory_not_equal(first, ct, 64);
                assert_int_equal(kl_hpke_open(&r, aad, sizeof aad, ct, ct_len,
                                              pt, 48, &pt_len),
                                 KL_OK);
                assert_memory_equal(pt, big, 48);
            }
            /* sender and receiver export the same secret */
            uint8_t xs[32], xr[32];
            assert_int_equal(kl_hpke_export(&s, aad, sizeof aad, xs, 32),
                             KL_OK);
            assert_int_equal(kl_hpke_export(&r, aad, sizeof aad, xr, 32),
                             KL_OK);
            assert_memory_equal(xs, xr, 32);
            /* a second sender to the same key: another enc, another key */
            kl_hpke_ctx s2;
            uint8_t enc2[KL_HPKE_MAX_ENC];
            size_t enc2_len;
            assert_int_equal(kl_hpke_setup_sender(&s2, su, pk, pk_len, info,
                                                  sizeof info, enc2,
                                                  sizeof enc2, &enc2_len),
                             KL_OK);
            assert_memory_not_equal(enc, enc2, enc_len);
            assert_memory_not_equal(s.key, s2.key, s.key_len);
            kl_hpke_ctx_clear(&s);
            kl_hpke_ctx_clear(&s2);
            kl_hpke_ctx_clear(&r);
            EVP_PKEY_free(sk);
        }
    free(big);
    free(ct);
    free(pt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc9180_vectors),
        cmocka_unit_test(test_round_trips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
