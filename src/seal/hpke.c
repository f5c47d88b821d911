/* SPDX-License-Identifier: Apache-2.0 */
/* HPKE base mode (RFC 9180 section 5): the key schedule, the sender's and
 * the receiver's contexts, Seal / Open with a sequence of nonces, secret
 * export, and the single-shot forms of section 6. The KEM is kem.c, the
 * labelled KDF kdf.c; the AEADs are OpenSSL's EVP_CIPHERs. */
#include "seal/hpke_int.h"

#include <limits.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/params.h>

/* The mode byte of the key schedule context (RFC 9180 Table 1). */
#define MODE_BASE 0x00

/* Nk of an AEAD and its OpenSSL name; 0 / NULL when unknown. */
static size_t aead_key_len(uint16_t aead)
{
    switch (aead) {
    case KL_HPKE_AEAD_AES128GCM: return 16;
    case KL_HPKE_AEAD_AES256GCM:
    case KL_HPKE_AEAD_CHACHA20: return 32;
    default: return 0;
    }
}

static const char *aead_name(uint16_t aead)
{
    switch (aead) {
    case KL_HPKE_AEAD_AES128GCM: return "AES-128-GCM";
    case KL_HPKE_AEAD_AES256GCM: return "AES-256-GCM";
    case KL_HPKE_AEAD_CHACHA20: return "ChaCha20-Poly1305";
    default: return NULL;
    }
}

kl_status kl_hpke_suite_check(kl_hpke_suite suite)
{
    if (!kl_hpke_pk_len(suite.kem) || suite.kdf != KL_HPKE_KDF_SHA256 ||
        !aead_key_len(suite.aead))
        return KL_E_BAD_VALUE;
    return KL_OK;
}

void kl_hpke_ctx_clear(kl_hpke_ctx *ctx)
{
    if (ctx)
        OPENSSL_cleanse(ctx, sizeof *ctx);
}

/* KeySchedule<ROLE>(mode_base, shared_secret, info, "", "") (RFC 9180
 * section 5.1): key, base_nonce and exporter_secret into ctx. */
static kl_status key_schedule(kl_hpke_ctx *ctx, kl_hpke_suite suite,
                              kl_hpke_role role, const uint8_t *shared_secret,
                              const uint8_t *info, size_t info_len)
{
    uint8_t sid[KL_HPKE_SUITE_ID_MAX], secret[KL_HPKE_HASH_LEN];
    uint8_t ksc[1 + 2 * KL_HPKE_HASH_LEN]; /* key_schedule_context */
    size_t sid_len = kl_hpke_suite_id(suite, sid);
    memset(ctx, 0, sizeof *ctx);
    ctx->suite = suite;
    ctx->key_len = aead_key_len(suite.aead);
    ksc[0] = MODE_BASE;
    /* Base mode: psk and psk_id are empty (RFC 9180 section 5.1.1). */
    kl_status s = kl_hpke_labeled_extract(sid, sid_len, NULL, 0, "psk_id_hash",
                                          NULL, 0, ksc + 1);
    if (s == KL_OK)
        s = kl_hpke_labeled_extract(sid, sid_len, NULL, 0, "info_hash", info,
                                    info_len, ksc + 1 + KL_HPKE_HASH_LEN);
    if (s == KL_OK)
        s = kl_hpke_labeled_extract(sid, sid_len, shared_secret,
                                    KL_HPKE_HASH_LEN, "secret", NULL, 0,
                                    secret);
    if (s == KL_OK)
        s = kl_hpke_labeled_expand(sid, sid_len, secret, "key", ksc, sizeof ksc,
                                   ctx->key, ctx->key_len);
    if (s == KL_OK)
        s = kl_hpke_labeled_expand(sid, sid_len, secret, "base_nonce", ksc,
                                   sizeof ksc, ctx->base_nonce,
                                   KL_HPKE_NONCE_LEN);
    if (s == KL_OK)
        s = kl_hpke_labeled_expand(sid, sid_len, secret, "exp", ksc, sizeof ksc,
                                   ctx->exporter_secret, KL_HPKE_HASH_LEN);
    OPENSSL_cleanse(secret, sizeof secret);
    if (s == KL_OK)
        ctx->role = role;
    else
        kl_hpke_ctx_clear(ctx);
    return s;
}

kl_status kl_hpke_setup_sender_eph(kl_hpke_ctx *ctx, kl_hpke_suite suite,
                                   EVP_PKEY *eph, const uint8_t *pkr,
                                   size_t pkr_len, const uint8_t *info,
                                   size_t info_len, uint8_t *enc,
                                   size_t enc_cap, size_t *enc_len)
{
    memset(ctx, 0, sizeof *ctx);
    *enc_len = 0;
    KL_GUARD(kl_hpke_suite_check(suite));
    uint8_t ss[KL_HPKE_HASH_LEN];
    kl_status s =
        kl_hpke_encap(suite.kem, eph, pkr, pkr_len, ss, enc, enc_cap, enc_len);
    if (s == KL_OK)
        s = key_schedule(ctx, suite, KL_HPKE_SENDER, ss, info, info_len);
    OPENSSL_cleanse(ss, sizeof ss);
    if (s != KL_OK)
        *enc_len = 0;
    return s;
}

kl_status kl_hpke_setup_sender(kl_hpke_ctx *ctx, kl_hpke_suite suite,
                               const uint8_t *pkr, size_t pkr_len,
                               const uint8_t *info, size_t info_len,
                               uint8_t *enc, size_t enc_cap, size_t *enc_len)
{
    return kl_hpke_setup_sender_eph(ctx, suite, NULL, pkr, pkr_len, info,
                                    info_len, enc, enc_cap, enc_len);
}

kl_status kl_hpke_setup_receiver(kl_hpke_ctx *ctx, kl_hpke_suite suite,
                                 const uint8_t *enc, size_t enc_len,
                                 EVP_PKEY *skr, const uint8_t *info,
                                 size_t info_len)
{
    memset(ctx, 0, sizeof *ctx);
    KL_GUARD(kl_hpke_suite_check(suite));
    uint8_t ss[KL_HPKE_HASH_LEN];
    kl_status s = kl_hpke_decap(suite.kem, enc, enc_len, skr, ss);
    if (s == KL_OK)
        s = key_schedule(ctx, suite, KL_HPKE_RECEIVER, ss, info, info_len);
    OPENSSL_cleanse(ss, sizeof ss);
    return s;
}

/* ComputeNonce(seq) = base_nonce XOR I2OSP(seq, Nn) (RFC 9180 section
 * 5.2); seq has 8 bytes, the top 4 of the 12 are base_nonce's own. */
static void compute_nonce(const kl_hpke_ctx *ctx, uint8_t *nonce)
{
    memcpy(nonce, ctx->base_nonce, KL_HPKE_NONCE_LEN);
    for (int i = 0; i < 8; i++)
        nonce[KL_HPKE_NONCE_LEN - 1 - i] ^= (uint8_t)(ctx->seq >> (8 * i));
}

/* One AEAD operation: seal (in -> out, tag written) or open (tag checked);
 * in_len bytes both ways. */
static kl_status aead(const kl_hpke_ctx *ctx, int seal, const uint8_t *aad,
                      size_t aad_len, const uint8_t *in, size_t in_len,
                      uint8_t *out, uint8_t *tag)
{
    if (aad_len > INT_MAX || in_len > INT_MAX)
        return KL_E_TOO_LARGE;
    EVP_CIPHER *cipher =
        EVP_CIPHER_fetch(NULL, aead_name(ctx->suite.aead), NULL);
    EVP_CIPHER_CTX *c = cipher ? EVP_CIPHER_CTX_new() : NULL;
    uint8_t nonce[KL_HPKE_NONCE_LEN];
    compute_nonce(ctx, nonce);
    OSSL_PARAM tagp[] = {
        OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, tag,
                                          KL_HPKE_TAG_LEN),
        OSSL_PARAM_construct_end(),
    };
    /* All three AEADs take a 12-byte nonce (Nn) by default, and all are
     * stream modes: Final writes no byte, it only ends the tag (fin_out
     * is never written). */
    uint8_t fin_out[KL_HPKE_TAG_LEN];
    int n = 0;
    kl_status s = !cipher ? KL_E_INTERNAL : !c ? KL_E_NOMEM : KL_E_INTERNAL;
    if (!c || EVP_CipherInit_ex2(c, cipher, ctx->key, nonce, seal, NULL) != 1 ||
        (aad_len && EVP_CipherUpdate(c, NULL, &n, aad, (int)aad_len) != 1) ||
        (in_len && EVP_CipherUpdate(c, out, &n, in, (int)in_len) != 1))
        goto done;
    if (!seal && EVP_CIPHER_CTX_set_params(c, tagp) != 1)
        goto done;
    if (EVP_CipherFinal_ex(c, fin_out, &n) != 1 || n != 0) {
        /* Open: the tag does not match (RFC 9180's OpenError). */
        s = seal ? KL_E_INTERNAL : KL_E_KEY;
        goto done;
    }
    if (seal && EVP_CIPHER_CTX_get_params(c, tagp) != 1)
        goto done;
    s = KL_OK;
done:
    EVP_CIPHER_CTX_free(c); /* cleanses the key schedule */
    EVP_CIPHER_free(cipher);
    OPENSSL_cleanse(nonce, sizeof nonce);
    if (s != KL_OK && in_len)
        OPENSSL_cleanse(out, in_len);
    return s;
}

kl_status kl_hpke_seal(kl_hpke_ctx *ctx, const uint8_t *aad, size_t aad_len,
                       const uint8_t *pt, size_t pt_len, uint8_t *ct,
                       size_t ct_cap, size_t *ct_len)
{
    *ct_len = 0;
    if (ctx->role != KL_HPKE_SENDER)
        return KL_E_BAD_VALUE; /* a receiver's context never seals (5.2) */
    /* IncrementSeq's MessageLimitReachedError, for a 64-bit counter. */
    if (ctx->seq == UINT64_MAX)
        return KL_E_TOO_LARGE;
    if (pt_len > SIZE_MAX - KL_HPKE_TAG_LEN ||
        ct_cap < pt_len + KL_HPKE_TAG_LEN)
        return KL_E_TOO_LARGE;
    KL_GUARD(aead(ctx, 1, aad, aad_len, pt, pt_len, ct, ct + pt_len));
    ctx->seq++;
    *ct_len = pt_len + KL_HPKE_TAG_LEN;
    return KL_OK;
}

kl_status kl_hpke_open(kl_hpke_ctx *ctx, const uint8_t *aad, size_t aad_len,
                       const uint8_t *ct, size_t ct_len, uint8_t *pt,
                       size_t pt_cap, size_t *pt_len)
{
    *pt_len = 0;
    if (ctx->role != KL_HPKE_RECEIVER)
        return KL_E_BAD_VALUE; /* a sender's context never opens (5.2) */
    if (ctx->seq == UINT64_MAX)
        return KL_E_TOO_LARGE;
    if (ct_len < KL_HPKE_TAG_LEN)
        return KL_E_TRUNCATED;
    size_t n = ct_len - KL_HPKE_TAG_LEN;
    if (pt_cap < n)
        return KL_E_TOO_LARGE;
    /* The tag is copied: EVP takes a writable buffer for it. */
    uint8_t tag[KL_HPKE_TAG_LEN];
    memcpy(tag, ct + n, sizeof tag);
    KL_GUARD(aead(ctx, 0, aad, aad_len, ct, n, pt, tag));
    ctx->seq++;
    *pt_len = n;
    return KL_OK;
}

kl_status kl_hpke_export(const kl_hpke_ctx *ctx, const uint8_t *exp_ctx,
                         size_t exp_ctx_len, uint8_t *out, size_t len)
{
    if (ctx->role == KL_HPKE_NONE)
        return KL_E_BAD_VALUE;
    uint8_t sid[KL_HPKE_SUITE_ID_MAX];
    size_t sid_len = kl_hpke_suite_id(ctx->suite, sid);
    return kl_hpke_labeled_expand(sid, sid_len, ctx->exporter_secret, "sec",
                                  exp_ctx, exp_ctx_len, out, len);
}

kl_status kl_hpke_seal_once(kl_hpke_suite suite, const uint8_t *pkr,
                            size_t pkr_len, const uint8_t *info,
                            size_t info_len, const uint8_t *aad, size_t aad_len,
                            const uint8_t *pt, size_t pt_len, uint8_t *enc,
                            size_t enc_cap, size_t *enc_len, uint8_t *ct,
                            size_t ct_cap, size_t *ct_len)
{
    kl_hpke_ctx ctx;
    *ct_len = 0;
    kl_status s = kl_hpke_setup_sender(&ctx, suite, pkr, pkr_len, info,
                                       info_len, enc, enc_cap, enc_len);
    if (s == KL_OK)
        s = kl_hpke_seal(&ctx, aad, aad_len, pt, pt_len, ct, ct_cap, ct_len);
    if (s != KL_OK)
        *enc_len = 0;
    kl_hpke_ctx_clear(&ctx);
    return s;
}

kl_status kl_hpke_open_once(kl_hpke_suite suite, const uint8_t *enc,
                            size_t enc_len, EVP_PKEY *skr, const uint8_t *info,
                            size_t info_len, const uint8_t *aad, size_t aad_len,
                            const uint8_t *ct, size_t ct_len, uint8_t *pt,
                            size_t pt_cap, size_t *pt_len)
{
    kl_hpke_ctx ctx;
    *pt_len = 0;
    kl_status s =
        kl_hpke_setup_receiver(&ctx, suite, enc, enc_len, skr, info, info_len);
    if (s == KL_OK)
        s = kl_hpke_open(&ctx, aad, aad_len, ct, ct_len, pt, pt_cap, pt_len);
    kl_hpke_ctx_clear(&ctx);
    return s;
}
