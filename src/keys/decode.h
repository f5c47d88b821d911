/* SPDX-License-Identifier: Apache-2.0 */
/* Private to src/keys: turning the bytes of one key file into a checked
 * EVP_PKEY. The loader and the fuzz target (fuzz/fuzz_keyfile.c) share this
 * one path, so what the fuzzer hammers is what keylessd runs. */
#ifndef KL_KEYS_DECODE_H
#define KL_KEYS_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/evp.h>

#include "core/status.h"
#include "keys/keystore.h"

/* Room for any reason text the decoder writes. */
#define KL_KEY_WHY_LEN 256

/* What the key store keeps about a key besides the EVP_PKEY. */
typedef struct kl_key_info {
    kl_key_type type;
    int bits;  /* RSA modulus bits, EC field bits, 253 for Ed25519 */
    int curve; /* EC curve NID, else 0 */
} kl_key_info;

/* Holds the OpenSSL decoder contexts, created on first use and reused for
 * every file: building one costs ~270 us, decoding with a ready one ~15 us
 * (an EC key), so a fresh context per file would dominate the load of
 * 100,000 keys. Not thread-safe: one decoder per loading thread. */
typedef struct kl_key_decoder kl_key_decoder;

kl_key_decoder *kl_key_decoder_new(void);
void kl_key_decoder_free(kl_key_decoder *d);

/* Decodes one private key from a whole file's bytes: PEM (exactly one
 * private key block; certificates and parameters beside it are skipped, a
 * second private key refuses the file) or DER (likewise one key: keys
 * written one after the other refuse the file); PKCS#8, PKCS#1 or SEC1.
 * The result is checked with kl_key_check_pkey, then kl_key_check_pair
 * (docs/OPERATIONS.md "Key files"). On failure returns KL_E_KEY
 * (or KL_E_NOMEM) and writes a one-line reason into why (never key bytes). */
KL_WUR kl_status kl_key_decode_buffer(kl_key_decoder *d, const uint8_t *buf,
                                      size_t len, EVP_PKEY **out,
                                      kl_key_info *info, char *why,
                                      size_t whylen);

/* The key policy of protocol P4: RSA 1024..8192 bits (not RSA-PSS
 * restricted), EC on P-224/P-256/P-384/P-521, Ed25519; the key must hold its
 * private part. KL_E_KEY with a reason otherwise. */
KL_WUR kl_status kl_key_check_pkey(EVP_PKEY *pkey, kl_key_info *info, char *why,
                                   size_t whylen);

/* The same policy for a key whose private part lives elsewhere (a PKCS#11
 * token): pkey holds only the public key. */
KL_WUR kl_status kl_key_check_public(EVP_PKEY *pkey, kl_key_info *info,
                                     char *why, size_t whylen);

/* ---- internals shared by decode.c, pair.c, pem.c and der.c -------------- */

/* What the pair check keeps between keys: the EC groups (building one per
 * key would cost more than the check) and a BN_CTX. Part of the decoder. */
#define KL_PAIR_CURVES 4
typedef struct kl_pair_cache {
    EC_GROUP *group[KL_PAIR_CURVES]; /* made on first use */
    BN_CTX *bn;
} kl_pair_cache;

void kl_pair_cache_free(kl_pair_cache *c);

/* Whether the public part of a key checked by kl_key_check_pkey belongs to
 * its private part (pair.c says how, cheaply). KL_E_KEY with "the private
 * and public parts of the key do not match (...)" in why otherwise; an EC
 * scalar of zero or not below the order is refused as not a valid key. */
KL_WUR kl_status kl_key_check_pair(kl_pair_cache *c, EVP_PKEY *pkey,
                                   const kl_key_info *info, char *why,
                                   size_t whylen);

/* What the outer DER structure of a buffer looks like. */
/* DER length octets (short or long form) for n into p; returns how many
 * were written (at most 9). der.c; ski.c builds SubjectPublicKeyInfo with
 * it. */
size_t kl_der_put_len(uint8_t *p, size_t n);

typedef enum kl_der_kind {
    KL_DER_UNKNOWN = 0,
    KL_DER_PKCS8,           /* PrivateKeyInfo / OneAsymmetricKey */
    KL_DER_PKCS8_ENCRYPTED, /* EncryptedPrivateKeyInfo */
    KL_DER_PKCS1_PRIVATE,   /* RSAPrivateKey */
    KL_DER_SEC1_PRIVATE,    /* ECPrivateKey */
    KL_DER_SPKI,            /* SubjectPublicKeyInfo */
    KL_DER_PKCS1_PUBLIC,    /* RSAPublicKey */
    KL_DER_CERTIFICATE,     /* X.509 Certificate */
} kl_der_kind;

/* Classifies a DER buffer by its outer shape without decoding any key.
 * For KL_DER_PKCS8 the algorithm OID's content bytes are returned in
 * oid and oid_len (pointing into der). */
kl_der_kind kl_der_classify(const uint8_t *der, size_t len, const uint8_t **oid,
                            size_t *oid_len);

/* A PKCS#8 v2 key (RFC 5958 OneAsymmetricKey: version 1, with its [1]
 * publicKey, as some Ed25519 tools write it), which OpenSSL 3.0 does not
 * decode: writes the same key as v1 (version 0, no publicKey) into out,
 * which has room for len bytes, and points pub at the public key the file
 * carries, for the pair check. KL_E_NOT_FOUND when der is not such a key. */
KL_WUR kl_status kl_der_p8_v2_split(const uint8_t *der, size_t len,
                                    uint8_t *out, size_t *out_len,
                                    const uint8_t **pub, size_t *pub_len);

/* One PEM block found in a buffer. */
typedef struct kl_pem_block {
    char label[64];      /* "PRIVATE KEY", "EC PRIVATE KEY", ... */
    const uint8_t *body; /* from after the BEGIN line to the END line */
    size_t body_len;
    int encrypted_header; /* legacy "Proc-Type: 4,ENCRYPTED" */
} kl_pem_block;

/* Finds the next "-----BEGIN X-----" ... "-----END X-----" block at or after
 * *pos. KL_E_NOT_FOUND when there is none; KL_E_BAD_VALUE for a BEGIN line
 * without its END line. Advances *pos past the block. */
KL_WUR kl_status kl_pem_next(const uint8_t *buf, size_t len, size_t *pos,
                             kl_pem_block *blk);
/* Base64-decodes a block body (headers skipped) into a malloc'd buffer the
 * caller wipes and frees. */
KL_WUR kl_status kl_pem_decode_body(const kl_pem_block *blk, uint8_t **out,
                                    size_t *out_len);

#endif
