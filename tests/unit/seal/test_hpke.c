/* SPDX-License-Identifier: Apache-2.0 */
/* HPKE (seal/hpke.h) against RFC 9180's published test vectors
 * (tests/vectors/hpke/, Appendix A base mode): DeriveKeyPair, Encap and
 * Decap, the key schedule, every listed encryption sealed and opened in
 * sequence, and the exports. Then round trips for every suite, and each
 * kind of bad input answered with its status (seal/hpke.h lists them). */
#include "testutil.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/rand.h>

#include "seal/hpke.h"
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
    int kems = 0;
    for (size_t i = 0; i < n_vectors; i++) {
        print_message("  %s\n", vectors[i].title);
        check_vector(&vectors[i]);
        kems |= vectors[i].suite.kem;
    }
    /* both KEMs are proven */
    assert_int_equal(kems, KL_HPKE_KEM_X25519 | KL_HPKE_KEM_P256);
    free(vector_text);
}

/* ---- round trips ----------------------------------------------------------
 */

static const uint16_t kems[] = {KL_HPKE_KEM_X25519, KL_HPKE_KEM_P256};
static const uint16_t aeads[] = {KL_HPKE_AEAD_AES128GCM, KL_HPKE_AEAD_AES256GCM,
                                 KL_HPKE_AEAD_CHACHA20};

static kl_hpke_suite suite_of(uint16_t kem, uint16_t aead)
{
    return (kl_hpke_suite){kem, KL_HPKE_KDF_SHA256, aead};
}

/* A fresh recipient key and its serialised public key. */
static EVP_PKEY *recipient(uint16_t kem, uint8_t *pk, size_t *pk_len)
{
    EVP_PKEY *k = NULL;
    assert_int_equal(kl_hpke_generate(kem, &k), KL_OK);
    assert_int_equal(kl_hpke_public(kem, k, pk, KL_HPKE_MAX_ENC, pk_len),
                     KL_OK);
    assert_int_equal(*pk_len, kl_hpke_pk_len(kem));
    return k;
}

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

/* ---- bad input --------------------------------------------------------------
 */

/* A sealed message to a fresh key, for the tests below to spoil. */
typedef struct sealed {
    kl_hpke_suite suite;
    EVP_PKEY *sk;
    uint8_t pk[KL_HPKE_MAX_ENC], enc[KL_HPKE_MAX_ENC], ct[64];
    size_t pk_len, enc_len, ct_len;
} sealed;

static const uint8_t msg[] = "private key bytes", info_s[] = "info",
                     aad_s[] = "aad";

static void seal_one(sealed *x, uint16_t kem, uint16_t aead)
{
    memset(x, 0, sizeof *x);
    x->suite = suite_of(kem, aead);
    x->sk = recipient(kem, x->pk, &x->pk_len);
    assert_int_equal(kl_hpke_seal_once(x->suite, x->pk, x->pk_len, info_s,
                                       sizeof info_s, aad_s, sizeof aad_s, msg,
                                       sizeof msg, x->enc, sizeof x->enc,
                                       &x->enc_len, x->ct, sizeof x->ct,
                                       &x->ct_len),
                     KL_OK);
}

/* Opens x with its key, with the given changes; returns the status and
 * checks nothing of the plaintext is left on failure. */
static kl_status open_with(const sealed *x, EVP_PKEY *sk, const uint8_t *enc,
                           size_t enc_len, const uint8_t *info, size_t info_len,
                           const uint8_t *aad, size_t aad_len,
                           const uint8_t *ct, size_t ct_len)
{
    uint8_t pt[64];
    size_t pt_len = 99;
    memset(pt, 0xaa, sizeof pt);
    kl_status s =
        kl_hpke_open_once(x->suite, enc, enc_len, sk, info, info_len, aad,
                          aad_len, ct, ct_len, pt, sizeof pt, &pt_len);
    if (s != KL_OK) {
        assert_int_equal(pt_len, 0);
        for (size_t i = 0; i < sizeof msg; i++)
            assert_true(pt[i] == 0 || pt[i] == 0xaa);
    } else {
        assert_int_equal(pt_len, sizeof msg);
        assert_memory_equal(pt, msg, sizeof msg);
    }
    return s;
}

static kl_status open_ct(const sealed *x, const uint8_t *ct, size_t ct_len)
{
    return open_with(x, x->sk, x->enc, x->enc_len, info_s, sizeof info_s, aad_s,
                     sizeof aad_s, ct, ct_len);
}

static void test_tampering(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof kems / sizeof kems[0]; k++)
        for (size_t a = 0; a < sizeof aeads / sizeof aeads[0]; a++) {
            sealed x;
            seal_one(&x, kems[k], aeads[a]);
            assert_int_equal(open_ct(&x, x.ct, x.ct_len), KL_OK);
            /* every byte of ciphertext and tag */
            for (size_t i = 0; i < x.ct_len; i++) {
                uint8_t bad[64];
                memcpy(bad, x.ct, x.ct_len);
                bad[i] ^= 0x01;
                assert_int_equal(open_ct(&x, bad, x.ct_len), KL_E_KEY);
            }
            /* the tag cut short, or gone */
            assert_int_equal(open_ct(&x, x.ct, x.ct_len - 1), KL_E_KEY);
            assert_int_equal(open_ct(&x, x.ct, KL_HPKE_TAG_LEN - 1),
                             KL_E_TRUNCATED);
            assert_int_equal(open_ct(&x, x.ct, 0), KL_E_TRUNCATED);
            /* aad and info altered, or left out */
            uint8_t other[] = "aae";
            assert_int_equal(open_with(&x, x.sk, x.enc, x.enc_len, info_s,
                                       sizeof info_s, other, sizeof other, x.ct,
                                       x.ct_len),
                             KL_E_KEY);
            assert_int_equal(open_with(&x, x.sk, x.enc, x.enc_len, info_s,
                                       sizeof info_s, NULL, 0, x.ct, x.ct_len),
                             KL_E_KEY);
            assert_int_equal(open_with(&x, x.sk, x.enc, x.enc_len, other,
                                       sizeof other, aad_s, sizeof aad_s, x.ct,
                                       x.ct_len),
                             KL_E_KEY);
            /* another recipient's key */
            uint8_t pk2[KL_HPKE_MAX_ENC];
            size_t pk2_len;
            EVP_PKEY *sk2 = recipient(kems[k], pk2, &pk2_len);
            assert_int_equal(open_with(&x, sk2, x.enc, x.enc_len, info_s,
                                       sizeof info_s, aad_s, sizeof aad_s, x.ct,
                                       x.ct_len),
                             KL_E_KEY);
            EVP_PKEY_free(sk2);
            /* another suite for the same message */
            sealed y = x;
            y.suite.aead = aeads[(a + 1) % 3];
            assert_int_equal(open_ct(&y, x.ct, x.ct_len), KL_E_KEY);
            EVP_PKEY_free(x.sk);
        }
}

static void test_bad_enc(void **state)
{
    (void)state;
    sealed x;
    /* X25519: another valid point as enc decrypts nothing */
    seal_one(&x, KL_HPKE_KEM_X25519, KL_HPKE_AEAD_AES256GCM);
    uint8_t bad[KL_HPKE_MAX_ENC + 1];
    memcpy(bad, x.enc, x.enc_len);
    bad[5] ^= 0x40;
    assert_int_equal(open_with(&x, x.sk, bad, x.enc_len, info_s, sizeof info_s,
                               aad_s, sizeof aad_s, x.ct, x.ct_len),
                     KL_E_KEY);
    /* wrong lengths */
    assert_int_equal(open_with(&x, x.sk, x.enc, 31, info_s, sizeof info_s,
                               aad_s, sizeof aad_s, x.ct, x.ct_len),
                     KL_E_BAD_VALUE);
    memcpy(bad, x.enc, x.enc_len);
    assert_int_equal(open_with(&x, x.sk, bad, 33, info_s, sizeof info_s, aad_s,
                               sizeof aad_s, x.ct, x.ct_len),
                     KL_E_BAD_VALUE);
    assert_int_equal(open_with(&x, x.sk, NULL, 0, info_s, sizeof info_s, aad_s,
                               sizeof aad_s, x.ct, x.ct_len),
                     KL_E_BAD_VALUE);
    /* low-order points: u = 0 and u = 1 give an all-zero shared secret
     * (RFC 7748 section 6.1), refused by the recipient and the sender */
    uint8_t low[2][32] = {{0}, {1}};
    kl_hpke_ctx ctx;
    uint8_t enc[KL_HPKE_MAX_ENC];
    size_t enc_len;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(open_with(&x, x.sk, low[i], 32, info_s, sizeof info_s,
                                   aad_s, sizeof aad_s, x.ct, x.ct_len),
                         KL_E_BAD_VALUE);
        assert_int_equal(kl_hpke_setup_sender(&ctx, x.suite, low[i], 32, NULL,
                                              0, enc, sizeof enc, &enc_len),
                         KL_E_BAD_VALUE);
        assert_int_equal(enc_len, 0);
        assert_int_equal(ctx.role, KL_HPKE_NONE);
    }
    EVP_PKEY_free(x.sk);

    /* P-256: points not on the curve, other encodings, wrong lengths */
    seal_one(&x, KL_HPKE_KEM_P256, KL_HPKE_AEAD_AES256GCM);
    assert_int_equal(x.enc_len, 65);
    memcpy(bad, x.enc, 65);
    bad[64] ^= 0x01; /* y + 1: off the curve */
    assert_int_equal(open_with(&x, x.sk, bad, 65, info_s, sizeof info_s, aad_s,
                               sizeof aad_s, x.ct, x.ct_len),
                     KL_E_BAD_VALUE);
    assert_int_equal(kl_hpke_setup_sender(&ctx, x.suite, bad, 65, NULL, 0, enc,
                                          sizeof enc, &enc_len),
                     KL_E_BAD_VALUE);
    memcpy(bad, x.enc, 65);
    memset(bad + 1, 0xff, 32); /* x >= p */
    assert_int_equal(open_with(&x, x.sk, bad, 65, info_s, sizeof info_s, aad_s,
                               sizeof aad_s, x.ct, x.ct_len),
                     KL_E_BAD_VALUE);
    memcpy(bad, x.enc, 65);
    bad[0] = 0x02; /* a compressed point's prefix on 65 bytes */
    assert_int_equal(open_with(&x, x.sk, bad, 65, info_s, sizeof info_s, aad_s,
                               sizeof aad_s, x.ct, x.ct_len),
                     KL_E_BAD_VALUE);
    memset(bad, 0, 65); /* not a point at all */
    assert_int_equal(open_with(&x, x.sk, bad, 65, info_s, sizeof info_s, aad_s,
                               sizeof aad_s, x.ct, x.ct_len),
                     KL_E_BAD_VALUE);
    bad[0] = 0x00; /* the point at infinity's encoding */
    assert_int_equal(open_with(&x, x.sk, bad, 1, info_s, sizeof info_s, aad_s,
                               sizeof aad_s, x.ct, x.ct_len),
                     KL_E_BAD_VALUE);
    /* the compressed form of the real point (33 bytes): not Npk */
    memcpy(bad, x.enc, 33);
    bad[0] = 0x02 | (x.enc[64] & 1);
    assert_int_equal(open_with(&x, x.sk, bad, 33, info_s, sizeof info_s, aad_s,
                               sizeof aad_s, x.ct, x.ct_len),
                     KL_E_BAD_VALUE);
    assert_int_equal(open_with(&x, x.sk, x.enc, 64, info_s, sizeof info_s,
                               aad_s, sizeof aad_s, x.ct, x.ct_len),
                     KL_E_BAD_VALUE);
    assert_int_equal(kl_hpke_setup_sender(&ctx, x.suite, x.pk, 64, NULL, 0, enc,
                                          sizeof enc, &enc_len),
                     KL_E_BAD_VALUE);
    /* and still the real one opens */
    assert_int_equal(open_ct(&x, x.ct, x.ct_len), KL_OK);
    EVP_PKEY_free(x.sk);
}

static void test_bad_keys_and_suites(void **state)
{
    (void)state;
    sealed x;
    seal_one(&x, KL_HPKE_KEM_X25519, KL_HPKE_AEAD_AES256GCM);
    /* a key of the other KEM, or of no KEM */
    uint8_t pk[KL_HPKE_MAX_ENC];
    size_t pk_len;
    EVP_PKEY *p256 = recipient(KL_HPKE_KEM_P256, pk, &pk_len);
    EVP_PKEY *ed = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    EVP_PKEY *p384 = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-384");
    assert_non_null(ed);
    assert_non_null(p384);
    EVP_PKEY *wrong[] = {p256, ed, p384};
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(open_with(&x, wrong[i], x.enc, x.enc_len, info_s,
                                   sizeof info_s, aad_s, sizeof aad_s, x.ct,
                                   x.ct_len),
                         KL_E_BAD_VALUE);
    sealed y = x;
    y.suite.kem = KL_HPKE_KEM_P256;
    assert_int_equal(open_with(&y, p384, x.enc, 65, info_s, sizeof info_s,
                               aad_s, sizeof aad_s, x.ct, x.ct_len),
                     KL_E_BAD_VALUE);
    assert_int_equal(
        kl_hpke_public(KL_HPKE_KEM_X25519, p256, pk, sizeof pk, &pk_len),
        KL_E_BAD_VALUE);
    assert_int_equal(kl_hpke_public(KL_HPKE_KEM_P256, x.sk, pk, 64, &pk_len),
                     KL_E_BAD_VALUE);
    assert_int_equal(kl_hpke_public(KL_HPKE_KEM_X25519, x.sk, pk, 31, &pk_len),
                     KL_E_TOO_LARGE);
    assert_int_equal(kl_hpke_public(KL_HPKE_KEM_X25519, NULL, pk, 32, &pk_len),
                     KL_E_BAD_VALUE);
    /* an ephemeral key of the wrong KEM */
    kl_hpke_ctx ctx;
    uint8_t enc[KL_HPKE_MAX_ENC];
    size_t enc_len;
    assert_int_equal(kl_hpke_setup_sender_eph(&ctx, x.suite, p256, x.pk,
                                              x.pk_len, NULL, 0, enc,
                                              sizeof enc, &enc_len),
                     KL_E_BAD_VALUE);
    /* suites not implemented */
    static const kl_hpke_suite unknown[] = {
        {0x0011, 1, 1}, {0x0021, 1, 1}, {0, 1, 1},         {0x20, 2, 1},
        {0x20, 3, 1},   {0x20, 1, 0},   {0x20, 1, 0xffff}, {0x10, 0, 2},
    };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        assert_int_equal(kl_hpke_suite_check(unknown[i]), KL_E_BAD_VALUE);
        assert_int_equal(kl_hpke_setup_sender(&ctx, unknown[i], x.pk, x.pk_len,
                                              NULL, 0, enc, sizeof enc,
                                              &enc_len),
                         KL_E_BAD_VALUE);
        assert_int_equal(kl_hpke_setup_receiver(&ctx, unknown[i], x.enc,
                                                x.enc_len, x.sk, NULL, 0),
                         KL_E_BAD_VALUE);
    }
    EVP_PKEY *k = NULL;
    assert_int_equal(kl_hpke_generate(0x0011, &k), KL_E_BAD_VALUE);
    assert_int_equal(kl_hpke_derive(0x0011, (const uint8_t *)"ikm", 3, &k),
                     KL_E_BAD_VALUE);
    assert_null(k);
    assert_int_equal(kl_hpke_pk_len(0x0011), 0);
    /* buffers too small */
    assert_int_equal(kl_hpke_setup_sender(&ctx, x.suite, x.pk, x.pk_len, NULL,
                                          0, enc, 31, &enc_len),
                     KL_E_TOO_LARGE);
    uint8_t ct[64], pt[64];
    size_t n;
    assert_int_equal(kl_hpke_seal_once(x.suite, x.pk, x.pk_len, NULL, 0, NULL,
                                       0, msg, sizeof msg, enc, sizeof enc,
                                       &enc_len, ct,
                                       sizeof msg + KL_HPKE_TAG_LEN - 1, &n),
                     KL_E_TOO_LARGE);
    assert_int_equal(enc_len, 0);
    assert_int_equal(kl_hpke_open_once(x.suite, x.enc, x.enc_len, x.sk, info_s,
                                       sizeof info_s, aad_s, sizeof aad_s, x.ct,
                                       x.ct_len, pt, sizeof msg - 1, &n),
                     KL_E_TOO_LARGE);
    /* the same key derived twice is the same key; other ikm, other key */
    EVP_PKEY *d1 = NULL, *d2 = NULL, *d3 = NULL;
    uint8_t b1[65], b2[65], b3[65];
    size_t l1, l2, l3;
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(
            kl_hpke_derive(kems[i], (const uint8_t *)"seed", 4, &d1), KL_OK);
        assert_int_equal(
            kl_hpke_derive(kems[i], (const uint8_t *)"seed", 4, &d2), KL_OK);
        assert_int_equal(
            kl_hpke_derive(kems[i], (const uint8_t *)"seeD", 4, &d3), KL_OK);
        assert_int_equal(kl_hpke_public(kems[i], d1, b1, 65, &l1), KL_OK);
        assert_int_equal(kl_hpke_public(kems[i], d2, b2, 65, &l2), KL_OK);
        assert_int_equal(kl_hpke_public(kems[i], d3, b3, 65, &l3), KL_OK);
        assert_memory_equal(b1, b2, l1);
        assert_memory_not_equal(b1, b3, l1);
        EVP_PKEY_free(d1);
        EVP_PKEY_free(d2);
        EVP_PKEY_free(d3);
    }
    EVP_PKEY_free(p256);
    EVP_PKEY_free(ed);
    EVP_PKEY_free(p384);
    EVP_PKEY_free(x.sk);
}

static void test_context_rules(void **state)
{
    (void)state;
    uint8_t pk[KL_HPKE_MAX_ENC], enc[KL_HPKE_MAX_ENC], ct[64], pt[64];
    size_t pk_len, enc_len, n;
    kl_hpke_suite su = suite_of(KL_HPKE_KEM_P256, KL_HPKE_AEAD_CHACHA20);
    EVP_PKEY *sk = recipient(su.kem, pk, &pk_len);
    kl_hpke_ctx s, r;
    assert_int_equal(kl_hpke_setup_sender(&s, su, pk, pk_len, NULL, 0, enc,
                                          sizeof enc, &enc_len),
                     KL_OK);
    assert_int_equal(kl_hpke_setup_receiver(&r, su, enc, enc_len, sk, NULL, 0),
                     KL_OK);
    /* each context in its own role only (section 5.2) */
    assert_int_equal(
        kl_hpke_seal(&r, NULL, 0, msg, sizeof msg, ct, sizeof ct, &n),
        KL_E_BAD_VALUE);
    assert_int_equal(
        kl_hpke_seal(&s, NULL, 0, msg, sizeof msg, ct, sizeof ct, &n), KL_OK);
    assert_int_equal(kl_hpke_open(&s, NULL, 0, ct, n, pt, sizeof pt, &n),
                     KL_E_BAD_VALUE);
    /* a failed open leaves the sequence where it was: the right message
     * still opens after a spoilt one */
    size_t ct_len = sizeof msg + KL_HPKE_TAG_LEN;
    ct[0] ^= 1;
    assert_int_equal(kl_hpke_open(&r, NULL, 0, ct, ct_len, pt, sizeof pt, &n),
                     KL_E_KEY);
    assert_true(r.seq == 0);
    ct[0] ^= 1;
    assert_int_equal(kl_hpke_open(&r, NULL, 0, ct, ct_len, pt, sizeof pt, &n),
                     KL_OK);
    assert_true(r.seq == 1);
    /* a message opened out of order fails: its nonce is another */
    assert_int_equal(
        kl_hpke_seal(&s, NULL, 0, msg, sizeof msg, ct, sizeof ct, &n), KL_OK);
    assert_int_equal(
        kl_hpke_seal(&s, NULL, 0, msg, sizeof msg, ct, sizeof ct, &n), KL_OK);
    assert_int_equal(kl_hpke_open(&r, NULL, 0, ct, n, pt, sizeof pt, &n),
                     KL_E_KEY);
    /* the last sequence number, then the counter is spent
     * (MessageLimitReachedError) on both sides */
    s.seq = r.seq = UINT64_MAX - 1;
    assert_int_equal(
        kl_hpke_seal(&s, NULL, 0, msg, sizeof msg, ct, sizeof ct, &n), KL_OK);
    assert_int_equal(kl_hpke_open(&r, NULL, 0, ct, n, pt, sizeof pt, &n),
                     KL_OK);
    assert_true(s.seq == UINT64_MAX && r.seq == UINT64_MAX);
    assert_int_equal(
        kl_hpke_seal(&s, NULL, 0, msg, sizeof msg, ct, sizeof ct, &n),
        KL_E_TOO_LARGE);
    assert_int_equal(kl_hpke_open(&r, NULL, 0, ct, ct_len, pt, sizeof pt, &n),
                     KL_E_TOO_LARGE);
    /* export lengths: 1 .. 255 * Nh */
    uint8_t *big = malloc(255 * 32 + 1);
    assert_non_null(big);
    assert_int_equal(kl_hpke_export(&s, NULL, 0, big, 255 * 32), KL_OK);
    assert_int_equal(kl_hpke_export(&s, NULL, 0, big, 255 * 32 + 1),
                     KL_E_TOO_LARGE);
    assert_int_equal(kl_hpke_export(&s, NULL, 0, big, 0), KL_E_TOO_LARGE);
    /* an exporter_context fits the 1024-byte Expand info (kdf.c) up to
     * 1024 - 2 - "HPKE-v1" - suite_id - "sec" = 1002 bytes */
    memset(big, 0x5a, 1003);
    uint8_t x[32];
    assert_int_equal(kl_hpke_export(&s, big, 1002, x, sizeof x), KL_OK);
    assert_int_equal(kl_hpke_export(&s, big, 1003, x, sizeof x),
                     KL_E_TOO_LARGE);
    free(big);
    /* a cleared context is no context */
    kl_hpke_ctx_clear(&s);
    kl_hpke_ctx_clear(&r);
    static const uint8_t zero[sizeof s];
    assert_memory_equal(&s, zero, sizeof s);
    assert_int_equal(
        kl_hpke_seal(&s, NULL, 0, msg, sizeof msg, ct, sizeof ct, &n),
        KL_E_BAD_VALUE);
    assert_int_equal(kl_hpke_export(&r, NULL, 0, pt, 32), KL_E_BAD_VALUE);
    EVP_PKEY_free(sk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc9180_vectors),
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_tampering),
        cmocka_unit_test(test_bad_enc),
        cmocka_unit_test(test_bad_keys_and_suites),
        cmocka_unit_test(test_context_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
