/* SPDX-License-Identifier: Apache-2.0 */
/* Per-thread context cache (see ctx_cache.h). */
#include <stdlib.h>

#include <openssl/crypto.h>

#include "crypto/ctx_cache.h"

/* Enough for the keys a server actually signs with at one time. A thread
 * whose lookups keep missing (far more keys in rotation than slots) doubles
 * its table, up to MAX_SLOTS: a miss costs a fresh EVP_PKEY_CTX plus its
 * provider fetches (about 3-5 us on an ECDSA signature of ~16 us, see
 * docs/DESIGN.md), a context about 0.6 KiB. At MAX_SLOTS a table is 12 MiB
 * of slots plus the contexts of the keys actually used; beyond that a
 * million-key store degrades to a fresh context per call, which is what no
 * cache costs anyway. */
#define MIN_SLOTS 512u
#define MAX_SLOTS (256u * 1024u)
/* Grow when more than a quarter of the last WINDOW lookups missed: a
 * handful of new keys after a reload fills in without growing, while
 * 100,000 keys in even rotation end at the ceiling (a miss rate of ~17%
 * there; half-full direct-mapped tables still miss about a third). */
#define WINDOW 4096u
#define GROW_MISSES (WINDOW / 4u)

typedef struct cache {
    kl_ctx_entry *slots;
    size_t n; /* a power of two */
    unsigned lookups, misses;
} cache;

static __thread cache tc;

static size_t slot_of(const EVP_PKEY *pkey, uint8_t opcode, size_t n)
{
    uint64_t h = (uint64_t)(uintptr_t)pkey ^ ((uint64_t)opcode << 56);
    h *= 0x9E3779B97F4A7C15ull; /* Fibonacci hashing: mixes the high bits */
    return (size_t)(h >> 32) & (n - 1);
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

/* Moves every entry into a table of n slots (an entry that collides there
 * is dropped, as on any miss). Out of memory keeps the old table. */
static void resize(size_t n)
{
    kl_ctx_entry *s = calloc(n, sizeof *s);
    if (!s)
        return;
    for (size_t i = 0; i < tc.n; i++) {
        kl_ctx_entry *old = &tc.slots[i];
        if (!old->pkey)
            continue;
        kl_ctx_entry *e = &s[slot_of(old->pkey, old->opcode, n)];
        kl_ctx_cache_drop(e);
        *e = *old;
    }
    free(tc.slots);
    tc.slots = s;
    tc.n = n;
}

kl_ctx_entry *kl_ctx_cache_get(EVP_PKEY *pkey, uint8_t opcode,
                               kl_ctx_setup_fn setup)
{
    if (!tc.slots) {
        if (!(tc.slots = calloc(MIN_SLOTS, sizeof *tc.slots)))
            return NULL;
        tc.n = MIN_SLOTS;
    }
    if (++tc.lookups == WINDOW) {
        if (tc.misses > GROW_MISSES && tc.n < MAX_SLOTS)
            resize(tc.n * 2);
        tc.lookups = tc.misses = 0;
    }
    kl_ctx_entry *e = &tc.slots[slot_of(pkey, opcode, tc.n)];
    if (e->pkey == pkey && e->opcode == opcode)
        return e;
    tc.misses++;
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

size_t kl_ctx_cache_slots(void)
{
    return tc.n;
}

void kl_ctx_cache_thread_free(void)
{
    if (!tc.slots)
        return;
    for (size_t i = 0; i < tc.n; i++)
        kl_ctx_cache_drop(&tc.slots[i]);
    free(tc.slots);
    tc = (cache){0};
}
