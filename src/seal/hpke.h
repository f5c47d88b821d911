/* SPDX-License-Identifier: Apache-2.0 */
/* HPKE (RFC 9180), base mode only, built from OpenSSL 3 EVP primitives
 * (OpenSSL 3.0 has no HPKE API). docs/DESIGN.md "HPKE (src/seal)" maps
 * each function to the RFC's and says how it is proven (the RFC's test
 * vectors, tests/vectors/hpke/).
 *
 * Suites: KEM DHKEM(X25519, HKDF-SHA256) and DHKEM(P-256, HKDF-SHA256),
 * KDF HKDF-SHA256, AEAD AES-128-GCM, AES-256-GCM or ChaCha20-Poly1305.
 *
 * Keys are EVP_PKEYs: a recipient's private key may live in a PKCS#11
 * token or any provider, since the one operation done with it is
 * EVP_PKEY_derive (or a DH hook: kl_hpke_key_set_dh). Public keys cross the API
 * as the RFC's serialisation (SerializePublicKey, RFC 9180 section 7.1.1): 32
 * raw bytes for X25519, the 65-byte uncompressed point for P-256.
 *
 * Every function returns a kl_status, and never crashes on bad input:
 *   KL_E_BAD_VALUE  an unknown suite, a key or enc of the wrong length or
 *                   type, a point not on the curve, a DH result that is
 *                   all zero (a low-order X25519 point), a context used in
 *                   the wrong role;
 *   KL_E_KEY        authenticated decryption failed: the wrong recipient
 *                   key, or enc, ciphertext, tag, aad or info altered;
 *   KL_E_TRUNCATED  a ciphertext shorter than the AEAD tag;
 *   KL_E_TOO_LARGE  an output buffer too small, an input past the limits
 *                   (RFC 9180 section 7.2.1), the sequence counter spent;
 *   KL_E_NOMEM, KL_E_INTERNAL  OpenSSL could not do its part.
 * Secrets held on the way (DH results, PRKs, keys) are wiped on every
 * path; a context is wiped by kl_hpke_ctx_clear. */
#ifndef KL_SEAL_HPKE_H
#define KL_SEAL_HPKE_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "core/status.h"

/* Algorithm identifiers (RFC 9180 section 7). */
enum {
    KL_HPKE_KEM_P256 = 0x0010,   /* DHKEM(P-256, HKDF-SHA256) */
    KL_HPKE_KEM_X25519 = 0x0020, /* DHKEM(X25519, HKDF-SHA256) */
    KL_HPKE_KDF_SHA256 = 0x0001, /* HKDF-SHA256 */
    KL_HPKE_AEAD_AES128GCM = 0x0001,
    KL_HPKE_AEAD_AES256GCM = 0x0002,
    KL_HPKE_AEAD_CHACHA20 = 0x0003, /* ChaCha20-Poly1305 */
};

/* Sizes: enc and public keys at most 65 bytes (Npk, Nenc of P-256), AEAD
 * keys at most 32 (Nk), nonces 12 (Nn), tags 16 (Nt), the hash 32 (Nh). */
#define KL_HPKE_MAX_ENC 65
#define KL_HPKE_MAX_KEY 32
#define KL_HPKE_NONCE_LEN 12
#define KL_HPKE_TAG_LEN 16
#define KL_HPKE_HASH_LEN 32

typedef struct kl_hpke_suite {
    uint16_t kem, kdf, aead;
} kl_hpke_suite;

typedef enum kl_hpke_role {
    KL_HPKE_NONE = 0,
    KL_HPKE_SENDER = 1,   /* seals (ContextS) */
    KL_HPKE_RECEIVER = 2, /* opens (ContextR) */
} kl_hpke_role;

/* An encryption context (RFC 9180 section 5.2). Caller-owned; filled by a
 * setup function, wiped by kl_hpke_ctx_clear. seq counts the messages
 * sealed or opened; it is 64 bits, so a context takes at most 2^64 - 1
 * messages (the RFC's limit for a 12-byte nonce is 2^96 - 1), and the
 * next one is refused with KL_E_TOO_LARGE. */
typedef struct kl_hpke_ctx {
    kl_hpke_suite suite;
    kl_hpke_role role;
    uint8_t key[KL_HPKE_MAX_KEY];
    size_t key_len;
    uint8_t base_nonce[KL_HPKE_NONCE_LEN];
    uint8_t exporter_secret[KL_HPKE_HASH_LEN];
    uint64_t seq;
} kl_hpke_ctx;

/* KL_OK when every part of suite is one this module implements. */
KL_WUR kl_status kl_hpke_suite_check(kl_hpke_suite suite);
/* Npk = Nenc of a KEM (32 or 65), 0 for an unknown one. */
size_t kl_hpke_pk_len(uint16_t kem);

/* GenerateKeyPair() and DeriveKeyPair(ikm) (RFC 9180 section 7.1.3): a
 * new key pair of the KEM into *out (the caller frees it). Derivation is
 * deterministic: the test vectors' key pairs, or a key from a seed. */
KL_WUR kl_status kl_hpke_generate(uint16_t kem, EVP_PKEY **out);
KL_WUR kl_status kl_hpke_derive(uint16_t kem, const uint8_t *ikm,
                                size_t ikm_len, EVP_PKEY **out);
/* SerializePublicKey(pk(key)) into out (cap >= kl_hpke_pk_len(kem)). key
 * may be a private key of any provider whose public half is readable. */
KL_WUR kl_status kl_hpke_public(uint16_t kem, const EVP_PKEY *key, uint8_t *out,
                                size_t cap, size_t *len);

/* DeserializePublicKey(pk) with the checks of RFC 9180 section 7.1.4
 * (P-256: an uncompressed point on the curve): a public key into *out
 * (the caller frees it), KL_E_BAD_VALUE for bytes that are not one. */
KL_WUR kl_status kl_hpke_public_key(uint16_t kem, const uint8_t *pk, size_t len,
                                    EVP_PKEY **out);
/* The same checks without making a key: KL_OK when pk is a valid public
 * key of the KEM (a parser's check, cheaper than an import). */
KL_WUR kl_status kl_hpke_public_check(uint16_t kem, const uint8_t *pk,
                                      size_t len);

/* A recipient key whose DH is computed outside OpenSSL - a PKCS#11
 * token's P-256 key that only C_DeriveKey can use (keys/p11_seal.c) - is
 * the key's public EVP_PKEY carrying a DH hook: every function above and
 * below takes it where it takes a private key, reads its public half as
 * usual, and Decap calls the hook for DH(skR, pkE) instead of
 * EVP_PKEY_derive (docs/DESIGN.md "HPKE (src/seal)"). The hook lives in
 * the EVP_PKEY's ex_data, so src/seal needs nothing of the layer that
 * supplies it. */
typedef struct kl_hpke_dh_hook {
    /* DH(skR, pkE) into out (32 bytes: P-256's x-coordinate) for the KEM
     * kem; pke is SerializePublicKey(pkE), already validated (RFC 9180
     * section 7.1.4). KL_OK, or a status of the list above (KL_E_KEY:
     * the device could not do it). */
    kl_status (*dh)(void *arg, uint16_t kem, const uint8_t *pke, size_t pke_len,
                    uint8_t *out);
    /* Called once with arg when the EVP_PKEY is freed; may be NULL. */
    void (*free)(void *arg);
} kl_hpke_dh_hook;

/* Attaches hook and arg to pub (a public key of the KEM the hook
 * serves); the EVP_PKEY then owns arg (hook->free when it is freed; also
 * when this fails). KL_E_BAD_VALUE if pub has a hook already. */
KL_WUR kl_status kl_hpke_key_set_dh(EVP_PKEY *pub, const kl_hpke_dh_hook *hook,
                                    void *arg);

/* SetupBaseS(pkR, info) (RFC 9180 section 5.1.1): a fresh ephemeral key,
 * enc (cap >= kl_hpke_pk_len) and a sender context. */
KL_WUR kl_status kl_hpke_setup_sender(kl_hpke_ctx *ctx, kl_hpke_suite suite,
                                      const uint8_t *pkr, size_t pkr_len,
                                      const uint8_t *info, size_t info_len,
                                      uint8_t *enc, size_t enc_cap,
                                      size_t *enc_len);
/* The same with a given ephemeral private key: deterministic, for the test
 * vectors (RFC 9180 Appendix A) only. A key used twice gives the same
 * AEAD key and nonce twice - never do that outside a test. */
KL_WUR kl_status kl_hpke_setup_sender_eph(kl_hpke_ctx *ctx, kl_hpke_suite suite,
                                          EVP_PKEY *eph, const uint8_t *pkr,
                                          size_t pkr_len, const uint8_t *info,
                                          size_t info_len, uint8_t *enc,
                                          size_t enc_cap, size_t *enc_len);
/* SetupBaseR(enc, skR, info) (RFC 9180 section 5.1.1): a receiver context.
 * skr is the recipient's private key, any provider's. */
KL_WUR kl_status kl_hpke_setup_receiver(kl_hpke_ctx *ctx, kl_hpke_suite suite,
                                        const uint8_t *enc, size_t enc_len,
                                        EVP_PKEY *skr, const uint8_t *info,
                                        size_t info_len);

/* ContextS.Seal(aad, pt) (RFC 9180 section 5.2): ct = ciphertext || tag,
 * pt_len + KL_HPKE_TAG_LEN bytes (ct_cap at least that). */
KL_WUR kl_status kl_hpke_seal(kl_hpke_ctx *ctx, const uint8_t *aad,
                              size_t aad_len, const uint8_t *pt, size_t pt_len,
                              uint8_t *ct, size_t ct_cap, size_t *ct_len);
/* ContextR.Open(aad, ct): pt is ct_len - KL_HPKE_TAG_LEN bytes. On failure
 * nothing of pt is left and seq does not move (the RFC's OpenError). */
KL_WUR kl_status kl_hpke_open(kl_hpke_ctx *ctx, const uint8_t *aad,
                              size_t aad_len, const uint8_t *ct, size_t ct_len,
                              uint8_t *pt, size_t pt_cap, size_t *pt_len);
/* Context.Export(exporter_context, L) (RFC 9180 section 5.3), L <= 255*32. */
KL_WUR kl_status kl_hpke_export(const kl_hpke_ctx *ctx, const uint8_t *exp_ctx,
                                size_t exp_ctx_len, uint8_t *out, size_t len);
/* Wipes the context's secrets. */
void kl_hpke_ctx_clear(kl_hpke_ctx *ctx);

/* SealBase and OpenBase (RFC 9180 section 6.1): one message to one
 * recipient, the context made and wiped inside. */
KL_WUR kl_status kl_hpke_seal_once(kl_hpke_suite suite, const uint8_t *pkr,
                                   size_t pkr_len, const uint8_t *info,
                                   size_t info_len, const uint8_t *aad,
                                   size_t aad_len, const uint8_t *pt,
                                   size_t pt_len, uint8_t *enc, size_t enc_cap,
                                   size_t *enc_len, uint8_t *ct, size_t ct_cap,
                                   size_t *ct_len);
KL_WUR kl_status kl_hpke_open_once(kl_hpke_suite suite, const uint8_t *enc,
                                   size_t enc_len, EVP_PKEY *skr,
                                   const uint8_t *info, size_t info_len,
                                   const uint8_t *aad, size_t aad_len,
                                   const uint8_t *ct, size_t ct_len,
                                   uint8_t *pt, size_t pt_cap, size_t *pt_len);

#endif
