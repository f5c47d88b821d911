/* Per-thread context cache (see ctx_cache.h). */
#include <stdlib.h>

#include <openssl/crypto.h>

#include "crypto/ctx_cache.h"

/* Enough for the keys a server actually signs with at one time; with a
 * million keys in rotation it degrades to a fresh context per call, which
 * is what no cache costs anyway. */
#define SLOTS 512u

static __thread kl_ctx_entry *slots;

static size_t slot_of(const EVP_PKEY *pkey, uint8_t opcode)
{
    uint64_t h = (uint64_t)(uintptr_t)pkey ^ ((uint64_t)opcode << 56);
    h *= 0x9E3779B97F4A7C15ull; /* Fibonacci hashing: mixes the high bits */
    return (size_t)(h >> 32) % SLOTS;
}

void kl_ctx_cache_drop(kl_ctx_entry *e)
{
    if (!e->pkey)
        return;
    EVP_PKEY_CTX_free(e->pctx);
    EVP_MD_CTX_free(e->mctx);
    OPENSSL_free(e->modulus); /* public, no wipe needed */
    EVP_PKEY_free(e->pkey);
    *e = (kl_ctx_entry){0};
}

kl_ctx_entry *kl_ctx_cache_get(EVP_PKEY *pkey, uint8_t opcode,
                               kl_ctx_setup_fn setup)
{
    if (!slots && !(slots = calloc(SLOTS, sizeof *slots)))
        return NULL;
    kl_ctx_entry *e = &slots[slot_of(pkey, opcode)];
    if (e->pkey == pkey && e->opcode == opcode)
        return e;
    kl_ctx_cache_drop(e);
    if (EVP_PKEY_up_ref(pkey) != 1)
        return NULL;
    e->pkey = pkey;
    e->opcode = opcode;
    if (!setup(e)) {
        kl_ctx_cache_drop(e);
        return NULL;
    }
    return e;
}

void kl_ctx_cache_thread_free(void)
{
    if (!slots)
        return;
    for (size_t i = 0; i < SLOTS; i++)
        kl_ctx_cache_drop(&slots[i]);
    free(slots);
    slots = NULL;
}
