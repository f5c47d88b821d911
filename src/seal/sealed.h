/* SPDX-License-Identifier: Apache-2.0 */
/* Sealed key files: a private key encrypted under a fresh data key, the
 * data key wrapped with HPKE (seal/hpke.h) to every server the key's
 * policy (seal/policy.h) selects and to optional escrow recipients.
 * docs/SEALING.md "The file, byte by byte" is the format; in short:
 *
 *   header  magic "KLSEALED", version 1, the body's AEAD (AES-256-GCM),
 *           the policy (canonical form), the key's SKI, its
 *           SubjectPublicKeyInfo, and the recipients: kind (node or
 *           escrow), name, KEM, public key, HPKE enc, wrapped data key;
 *   body    nonce and AES-256-GCM(data key, PKCS#8 DER) with the whole
 *           header as additional data.
 *
 * Each data-key wrap uses HPKE base mode with info = "keylessd sealed key
 * v1" || SHA-256(the header without the enc and wrapped fields): a wrap
 * opens only under the policy, key and recipient list it was made for,
 * and the body opens only under the header as written - so any byte
 * changed anywhere makes the file fail to parse or to open.
 *
 * This layer does not know what an SKI is (keys/ski.c does): the sealer
 * passes it in and the opener checks it against the key it got back.
 *
 * Errors: KL_E_BAD_VALUE (malformed file or argument, with a message
 * naming the field and offset), KL_E_TRUNCATED (the file ends inside a
 * field), KL_E_TOO_LARGE (a limit passed),
 * KL_E_NOT_FOUND (no recipient entry for this key), KL_E_KEY (an entry
 * or the body failed to decrypt, or the key inside does not match the
 * public key outside), KL_E_NOMEM, KL_E_INTERNAL. */
#ifndef KL_SEAL_SEALED_H
#define KL_SEAL_SEALED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <openssl/evp.h>

#include "core/status.h"
#include "seal/hpke.h"
#include "seal/policy.h"

#define KL_SEALED_MAGIC "KLSEALED"
#define KL_SEALED_MAGIC_LEN 8
#define KL_SEALED_VERSION 1
#define KL_SEALED_SKI_LEN 20
#define KL_SEALED_DK_LEN 32 /* the data key: AES-256 */
#define KL_SEALED_WRAPPED_LEN (KL_SEALED_DK_LEN + KL_HPKE_TAG_LEN)

/* Limits, each checked by the parser and the sealer. */
#define KL_SEALED_MAX_NAME 64          /* a recipient's name */
#define KL_SEALED_MAX_SPKI 4096        /* RSA-8192 takes ~1.1 KiB */
#define KL_SEALED_MAX_RECIPIENTS 4096  /* ~1 MiB of recipient entries */
#define KL_SEALED_MAX_BODY (16 * 1024) /* PKCS#8 RSA-8192 is ~4.8 KiB */
#define KL_SEALED_MAX_FILE (2u << 20)  /* a bound for whoever reads one */

/* The HPKE suite of every wrap but the KEM, and the info prefix. */
#define KL_SEALED_INFO_LABEL "keylessd sealed key v1"

typedef enum kl_sealed_kind {
    KL_SEALED_NODE = 1,   /* a server the policy selected */
    KL_SEALED_ESCROW = 2, /* an offline recipient outside the policy */
} kl_sealed_kind;

typedef struct kl_sealed_recipient {
    uint8_t kind;                           /* kl_sealed_kind */
    char name[KL_SEALED_MAX_NAME + 1];      /* NUL-terminated */
    uint16_t kem;                           /* KL_HPKE_KEM_X25519 or _P256 */
    size_t pk_len;                          /* kl_hpke_pk_len(kem) */
    uint8_t pk[KL_HPKE_MAX_ENC];            /* SerializePublicKey(pkR) */
    uint8_t enc[KL_HPKE_MAX_ENC];           /* pk_len bytes as well */
    uint8_t wrapped[KL_SEALED_WRAPPED_LEN]; /* HPKE ciphertext of the key */
} kl_sealed_recipient;

/* A parsed file. Every field was checked by kl_sealed_parse; nothing in
 * it is secret. */
typedef struct kl_sealed {
    char *policy_text; /* canonical form, NUL-terminated */
    size_t policy_len;
    kl_policy *policy; /* the same, parsed */
    uint8_t ski[KL_SEALED_SKI_LEN];
    uint8_t *spki; /* DER SubjectPublicKeyInfo */
    size_t spki_len;
    kl_sealed_recipient *rcpt;
    size_t n_rcpt;
    uint8_t nonce[KL_HPKE_NONCE_LEN];
    uint8_t *ct; /* the encrypted PKCS#8 DER || tag */
    size_t ct_len;
    uint8_t *header; /* the header's bytes as read: the body's aad */
    size_t header_len;
    uint8_t bind[KL_HPKE_HASH_LEN]; /* the digest in every wrap's info */
} kl_sealed;

/* Whether a name is one a recipient may have: 1..64 bytes of
 * [A-Za-z0-9._:-]. */
bool kl_sealed_name_ok(const char *s, size_t len);

/* Parses a whole file. Strict: every length bounded, every field checked
 * (magic, version, AEAD, canonical policy, SPKI that decodes, KEM ids,
 * public keys valid for their KEM, names, no recipient twice, no byte
 * after the body). On failure *out is NULL and err says which field and
 * at which offset. */
KL_WUR kl_status kl_sealed_parse(const uint8_t *buf, size_t len,
                                 kl_sealed **out, char *err, size_t errlen);
void kl_sealed_free(kl_sealed *s);

/* Writes s as a file (the header from its fields, then the body) into a
 * malloc'd buffer; also sets s->header, s->header_len and s->bind. For
 * the sealer, and for tests that build altered files. */
KL_WUR kl_status kl_sealed_encode(kl_sealed *s, uint8_t **out, size_t *len);
/* SHA-256 over the header with every enc and wrapped field left out (the
 * digest the wraps bind): into s->bind. */
KL_WUR kl_status kl_sealed_bind_digest(kl_sealed *s);
/* The header's bytes from s's fields into s->header (the body's aad). */
KL_WUR kl_status kl_sealed_make_header(kl_sealed *s);

/* Whom to wrap to. pk is SerializePublicKey (32 or 65 bytes). */
typedef struct kl_sealed_to {
    kl_sealed_kind kind;
    const char *name;
    uint16_t kem;
    const uint8_t *pk;
    size_t pk_len;
} kl_sealed_to;

/* Seals key (a private key OpenSSL can write as PKCS#8) to the
 * recipients, under the policy (any spelling; the canonical form is
 * stored) and the SKI the caller computed for it. A fresh data key and
 * nonce each call; every secret wiped. The file goes into a malloc'd
 * buffer. Deciding who the recipients are (the policy's servers) is the
 * caller's business: this writes what it is given. */
KL_WUR kl_status kl_sealed_seal(const char *policy, EVP_PKEY *key,
                                const uint8_t ski[KL_SEALED_SKI_LEN],
                                const kl_sealed_to *to, size_t n_to,
                                uint8_t **out, size_t *out_len, char *err,
                                size_t errlen);

/* The SKI (protocol P7: SHA-1 over the subjectPublicKey BIT STRING
 * contents) of a DER SubjectPublicKeyInfo, after checking its framing
 * (spki.c); KL_E_BAD_VALUE for bytes that are not one. A file's SKI must
 * be its public key's, checked by the parser and the sealer. */
KL_WUR kl_status kl_sealed_spki_ski(const uint8_t *der, size_t len,
                                    uint8_t ski[KL_SEALED_SKI_LEN]);

/* The recipient entry whose KEM and public key are those of node_key (a
 * private key of any provider; only its public half is read here), or
 * KL_E_NOT_FOUND. */
KL_WUR kl_status kl_sealed_find(const kl_sealed *s, const EVP_PKEY *node_key,
                                size_t *index);

/* Opens entry index with node_key: unwraps the data key and decrypts the
 * body into *der (OPENSSL_malloc'd PKCS#8 DER, *der_len bytes, which the
 * caller wipes and frees with OPENSSL_clear_free). KL_E_KEY when either
 * step fails (err says which). For a caller with its own key decoder
 * (the key store), which then checks the key's SKI against s->ski. */
KL_WUR kl_status kl_sealed_open_der(const kl_sealed *s, size_t index,
                                    EVP_PKEY *node_key, uint8_t **der,
                                    size_t *der_len, char *err, size_t errlen);
/* kl_sealed_open_der, then decodes the PKCS#8 key and checks that it is
 * the key of the SPKI. The plaintext DER is wiped before return; *key is
 * the caller's. */
KL_WUR kl_status kl_sealed_open(const kl_sealed *s, size_t index,
                                EVP_PKEY *node_key, EVP_PKEY **key, char *err,
                                size_t errlen);

/* "SHA256:" and the first 16 bytes of SHA-256(pk) in hex: how inspect and
 * logs name a recipient key (buf >= KL_SEALED_FP_LEN). */
#define KL_SEALED_FP_LEN 40
void kl_sealed_fingerprint(const uint8_t *pk, size_t pk_len, char *buf);

/* The sealed key's type from its public key: "RSA-2048", "ECDSA-P-256",
 * "Ed25519", or "unknown". */
void kl_sealed_key_desc(const kl_sealed *s, char *buf, size_t len);

/* What `keyless-seal inspect` shows, opening nothing: version, policy,
 * SKI, key type, and each recipient's kind, name, KEM and key
 * fingerprint - as text lines, or as one JSON object. */
void kl_sealed_print(const kl_sealed *s, bool json, FILE *out);

#endif
