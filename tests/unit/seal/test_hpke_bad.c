/* SPDX-License-Identifier: Apache-2.0 */
/* HPKE (seal/hpke.h) given bad input: tampered ciphertext, tag, aad, info
 * and enc, the wrong key, points off the curve or of low order, wrong
 * lengths, unknown suites, contexts in the wrong role and a spent
 * sequence counter - each answered with its status, never a crash, and
 * never a plaintext left behind. */
#include "hpketest.h"

#include <stdlib.h>
#include <string.h>

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
    /* the parser's check without an import: the same answers */
    assert_int_equal(kl_hpke_public_check(KL_HPKE_KEM_P256, x.enc, 65), KL_OK);
    assert_int_equal(kl_hpke_public_check(KL_HPKE_KEM_P256, x.enc, 64),
                     KL_E_BAD_VALUE);
    memcpy(bad, x.enc, 65);
    bad[64] ^= 0x01;
    assert_int_equal(kl_hpke_public_check(KL_HPKE_KEM_P256, bad, 65),
                     KL_E_BAD_VALUE);
    memcpy(bad, x.enc, 65);
    memset(bad + 1, 0xff, 32);
    assert_int_equal(kl_hpke_public_check(KL_HPKE_KEM_P256, bad, 65),
                     KL_E_BAD_VALUE);
    memcpy(bad, x.enc, 65);
    bad[0] = 0x02;
    assert_int_equal(kl_hpke_public_check(KL_HPKE_KEM_P256, bad, 65),
                     KL_E_BAD_VALUE);
    memset(bad, 0, 65);
    assert_int_equal(kl_hpke_public_check(KL_HPKE_KEM_P256, bad, 65),
                     KL_E_BAD_VALUE);
    assert_int_equal(kl_hpke_public_check(KL_HPKE_KEM_P256, bad, 1),
                     KL_E_BAD_VALUE);
    assert_int_equal(kl_hpke_public_check(KL_HPKE_KEM_X25519, x.enc, 32),
                     KL_OK);
    assert_int_equal(kl_hpke_public_check(0x0011, x.enc, 65), KL_E_BAD_VALUE);
    /* a valid point that is not the sender's: nothing decrypts */
    assert_int_equal(open_with(&x, x.sk, x.pk, x.pk_len, info_s, sizeof info_s,
                               aad_s, sizeof aad_s, x.ct, x.ct_len),
                     KL_E_KEY);
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
        cmocka_unit_test(test_tampering),
        cmocka_unit_test(test_bad_enc),
        cmocka_unit_test(test_bad_keys_and_suites),
        cmocka_unit_test(test_context_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
