/* SPDX-License-Identifier: Apache-2.0 */
/* Private to src/crypto: per-thread cache of prepared OpenSSL contexts.
 * Setting up an EVP_PKEY_CTX for a signature costs ~11% of an ECDSA P-256
 * signature, so each worker thread keeps the contexts it made, by (key,
 * opcode), and reuses them.
 *
 * Entries are keyed by the EVP_PKEY pointer and hold their own reference to
 * it, so a key freed by a reload stays valid for its cached contexts and its
 * address cannot be reused by a new key while an entry names it: a stale
 * entry can never be taken for another key. The cache is bounded (a full
 * table evicts an entry for each new one) and starts small; a thread whose
 * lookups keep evicting doubles it, up to a fixed ceiling (ctx_cache.c).
 * An entry stays where it is until the next kl_ctx_cache_get or
 * kl_ctx_cache_drop on the same thread. */
#ifndef KL_CRYPTO_CTX_CACHE_H
#define KL_CRYPTO_CTX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

typedef struct kl_ctx_entry {
    EVP_PKEY *pkey; /* referenced; NULL = empty slot */
    uint8_t opcode;
    const char *propq;  /* property query for its fetches, or NULL */
    EVP_PKEY_CTX *pctx; /* RSA, PSS, ECDSA: initialised for the opcode */
    EVP_MD_CTX *mctx;   /* Ed25519: initialised for signing */
    uint8_t *modulus;   /* RSA decrypt: n as k big-endian bytes */
    size_t k;
} kl_ctx_entry;

/* Sets up e for (pkey, opcode); on failure e stays empty. */
typedef int (*kl_ctx_setup_fn)(kl_ctx_entry *e);

/* The entry for (pkey, opcode) on this thread, set up by setup on a miss
 * (with e->propq = propq: a key's property query does not change while the
 * key lives). NULL on failure (out of memory, OpenSSL refused the setup). */
kl_ctx_entry *kl_ctx_cache_get(EVP_PKEY *pkey, uint8_t opcode,
                               const char *propq, kl_ctx_setup_fn setup);
/* Drops an entry whose context may be in a bad state after a failure. */
void kl_ctx_cache_drop(kl_ctx_entry *e);
/* This thread's current number of slots (0 before its first lookup); for
 * tests. */
size_t kl_ctx_cache_slots(void);
/* Frees this thread's cache. */
void kl_ctx_cache_thread_free(void);

#endif
