/* SPDX-License-Identifier: Apache-2.0 */
/* Per-thread context cache (see ctx_cache.h), in the shared map
 * (core/hmap.h) keyed by (key, opcode). */
#include <stdlib.h>

#include <openssl/crypto.h>

#include "core/hmap.h"
#include "crypto/ctx_cache.h"

/* Enough for the keys a server actually signs with at one time. A thread
 * whose lookups keep evicting (far more keys in rotation than room) doubles
 * its table, up to MAX_SLOTS: a miss costs a fresh EVP_PKEY_CTX plus its
 * provider fetches (about 3-5 us on an ECDSA signature of ~16 us, see
 * docs/DESIGN.md), a context about 0.6 KiB. At MAX_SLOTS a table is 16 MiB
 * of slots (64 bytes each) holding up to 128Ki contexts; beyond that a
 * million-key store degrades to a fresh context per call, which is what no
 * cache costs anyway. */
#define MIN_SLOTS 512u
#define MAX_SLOTS (256u * 1024u)
/* Grow when more than a quarter of the last WINDOW lookups had to evict
 * an entry (the map was full): a handful of new keys after a reload fills
 * free room without growing, while 100,000 keys in even rotation end at
 * the ceiling, where every key has its entry. */
#define WINDOW 4096u
#define GROW_EVICTIONS (WINDOW / 4u)

typedef struct ctx_slot {
    kl_hslot h; /* the key's address and the opcode */
    kl_ctx_entry e;
} ctx_slot;

typedef struct cache {
    kl_hmap map;   /* of ctx_slot; cap 0 before the first lookup */
    size_t victim; /* where the next eviction looks first */
    unsigned lookups, evictions;
    bool grow_failed; /* the last doubling ran out of memory: kept as was */
} cache;

static __thread cache tc;

/* Keys allocated one after another sit a fixed stride apart, and the map's
 * Fibonacci step alone would lay such runs of addresses side by side into
 * long probe runs: one multiply-xorshift round scatters them first. */
static uint64_t key_hash(const EVP_PKEY *pkey, uint8_t opcode)
{
    uint64_t h = (uint64_t)(uintptr_t)pkey ^ ((uint64_t)opcode << 56);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

typedef struct ctx_key {
    const EVP_PKEY *pkey;
    uint8_t opcode;
} ctx_key;

static bool same_key(const void *slot, const void *key)
{
    const kl_ctx_entry *e = &((const ctx_slot *)slot)->e;
    const ctx_key *k = key;
    return e->pkey == k->pkey && e->opcode == k->opcode;
}

static void release(kl_ctx_entry *e)
{
    EVP_PKEY_CTX_free(e->pctx);
    EVP_MD_CTX_free(e->mctx);
    OPENSSL_free(e->modulus); /* public, no wipe needed */
    EVP_PKEY_free(e->pkey);
}

void kl_ctx_cache_drop(kl_ctx_entry *e)
{
    if (!e->pkey)
        return;
    release(e);
    kl_hmap_remove(&tc.map,
                   (ctx_slot *)((unsigned char *)e - offsetof(ctx_slot, e)));
}

/* Frees one entry to make room: the next one from a cursor that goes
 * round the table, so every entry's turn comes (a reload's stale keys
 * too). */
static void evict_one(cache *c)
{
    ctx_slot *s = kl_hmap_next(&c->map, &c->victim);
    if (!s) {
        c->victim = 0;
        s = kl_hmap_next(&c->map, &c->victim);
    }
    /* the removal may pull a later entry into this slot: look here again
     * next time */
    c->victim--;
    kl_ctx_cache_drop(&s->e);
}

kl_ctx_entry *kl_ctx_cache_get(EVP_PKEY *pkey, uint8_t opcode,
                               const char *propq, kl_ctx_setup_fn setup)
{
    /* In a position-independent library each use of a thread-local costs
     * a call to find it, and the compiler takes it anew for every use:
     * take its address once and hide where it came from. */
    cache *c = &tc;
    __asm__("" : "+r"(c));
    if (!c->map.cap) {
        kl_hmap_init(&c->map, sizeof(ctx_slot));
        if (kl_hmap_reserve(&c->map, MIN_SLOTS / 2) != KL_OK)
            return NULL;
    }
    if (++c->lookups == WINDOW) {
        /* doubles (out of memory keeps the old table) */
        if (c->evictions > GROW_EVICTIONS && c->map.cap < MAX_SLOTS)
            c->grow_failed = kl_hmap_reserve(&c->map, c->map.cap) != KL_OK;
        c->lookups = c->evictions = 0;
    }
    ctx_key k = {pkey, opcode};
    uint64_t h = key_hash(pkey, opcode);
    ctx_slot *s = kl_hmap_get_h(&c->map, h, same_key, &k);
    if (s)
        return &s->e;
    if (kl_hmap_full(&c->map)) {
        evict_one(c);
        c->evictions++;
    }
    if (EVP_PKEY_up_ref(pkey) != 1)
        return NULL;
    bool found;
    s = kl_hmap_put_h(&c->map, h, same_key, &k, &found); /* room made */
    if (!s) {
        EVP_PKEY_free(pkey);
        return NULL;
    }
    s->e.pkey = pkey;
    s->e.opcode = opcode;
    s->e.propq = propq;
    if (!setup(&s->e)) {
        kl_ctx_cache_drop(&s->e);
        return NULL;
    }
    return &s->e;
}

size_t kl_ctx_cache_slots(void)
{
    return tc.map.cap;
}

void kl_ctx_cache_thread_free(void)
{
    ctx_slot *s;
    for (size_t i = 0; (s = kl_hmap_next(&tc.map, &i));)
        release(&s->e);
    kl_hmap_free(&tc.map);
    tc = (cache){0};
}
