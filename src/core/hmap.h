/* SPDX-License-Identifier: Apache-2.0 */
/* The shared hash map (docs/DESIGN.md "The shared hash map"): open
 * addressing with linear probing, a power-of-two number of slots kept at
 * most half full, and backward-shift deletion - no tombstones, so a map
 * that sees inserts and deletes for ever (a client's request handles)
 * never degrades. Pure, no I/O, no locking: a user that shares one between
 * threads holds its own lock.
 *
 * The caller owns the slot layout: a struct whose first member is a
 * kl_hslot, followed by whatever the entry holds (a counter, a pointer, a
 * whole cache entry), so an insert allocates nothing and a lookup touches
 * one slot's line. The map only reads and moves slots; free slots are all
 * zero bytes.
 *
 * Keys come two ways; one map uses one of them:
 * - a 64-bit key (kl_hmap_get/put): the map compares keys itself. Any key
 *   but KL_HMAP_KEY_NONE (UINT64_MAX) can be stored.
 * - a key the caller hashes to 64 bits (kl_hmap_get_h/put_h): the map
 *   compares hashes, and on equal hashes asks the caller's eq function.
 *   The map spreads the hash by Fibonacci hashing, which suits counters
 *   and uniform hashes; mix structured values (pointers) first.
 *
 * Pointers to slots stay valid until the next put or remove on the map
 * (growth moves every slot; a removal may move later slots of its probe
 * run). Iteration (kl_hmap_next) must not be mixed with puts or removes:
 * collect first. */
#ifndef KL_CORE_HMAP_H
#define KL_CORE_HMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/status.h"

/* The first member of every slot. tag: 0 for a free slot; else the key
 * plus one (64-bit keys) or the caller's hash, 0 made 1 (hashed keys). */
typedef struct kl_hslot {
    uint64_t tag;
} kl_hslot;

typedef struct kl_hmap {
    unsigned char *slots; /* cap slots, each 1 << lg bytes; NULL when cap 0 */
    size_t size;          /* bytes of the caller's slot struct */
    size_t cap;           /* a power of two, 0 before the first put */
    size_t count;         /* occupied slots */
    size_t stride;        /* 1 << lg */
    size_t omask;         /* (cap - 1) << lg: probes step by byte offset */
    unsigned lg;          /* log2 of the slot stride (size rounded up) */
    unsigned shift;       /* 64 - log2(cap): the home is the top bits */
} kl_hmap;

/* The one 64-bit key a map cannot hold. */
#define KL_HMAP_KEY_NONE UINT64_MAX

/* For hashed keys: does the slot hold this key? */
typedef bool (*kl_hmap_eq_fn)(const void *slot, const void *key);

/* slot_size: sizeof the caller's slot struct (which starts with a
 * kl_hslot). Allocates nothing. */
void kl_hmap_init(kl_hmap *m, size_t slot_size);
/* Frees the slots (not what they point to) and empties the map. */
void kl_hmap_free(kl_hmap *m);
/* Makes room for n entries without further growth: a put up to that count
 * cannot fail. KL_E_NOMEM leaves the map as it was. */
KL_WUR kl_status kl_hmap_reserve(kl_hmap *m, size_t n);
/* Doubles the slots (the inline puts below call it when full). */
KL_WUR kl_status kl_hmap_grow_(kl_hmap *m);

static inline size_t kl_hmap_count(const kl_hmap *m)
{
    return m->count;
}

/* Would one more entry make the map grow? (A bounded cache evicts
 * instead.) */
static inline bool kl_hmap_full(const kl_hmap *m)
{
    return (m->count + 1) * 2 > m->cap;
}

/* The slot's 64-bit key (maps keyed that way). */
static inline uint64_t kl_hmap_key(const void *slot)
{
    return ((const kl_hslot *)slot)->tag - 1;
}

/* ---- internals of the inline functions -------------------------------- */

static inline void *kl_hmap_at_(const kl_hmap *m, size_t i)
{
    return m->slots + (i << m->lg);
}

/* Fibonacci hashing: the multiply spreads sequential ids and mixes a
 * caller's hash; its top bits are the best mixed, so they pick the slot. */
static inline size_t kl_hmap_home_(const kl_hmap *m, uint64_t tag)
{
    return (size_t)((tag * 0x9E3779B97F4A7C15ull) >> m->shift);
}

/* The home's byte offset: the same top bits, shifted into place at once
 * (the probe loops below add and mask offsets, with no shift per step). */
static inline size_t kl_hmap_off_(const kl_hmap *m, uint64_t tag)
{
    return (size_t)((tag * 0x9E3779B97F4A7C15ull) >> (m->shift - m->lg)) &
           m->omask;
}

static inline kl_hslot *kl_hmap_at_off_(const kl_hmap *m, size_t off)
{
    return (kl_hslot *)(m->slots + off);
}

static inline uint64_t kl_hmap_tag_h_(uint64_t hash)
{
    return hash ? hash : 1;
}

/* The slot holding tag (and, with eq, key), or NULL. */
static inline void *kl_hmap_find_(const kl_hmap *m, uint64_t tag,
                                  kl_hmap_eq_fn eq, const void *key)
{
    if (!m->count)
        return NULL;
    for (size_t o = kl_hmap_off_(m, tag);; o = (o + m->stride) & m->omask) {
        kl_hslot *s = kl_hmap_at_off_(m, o);
        if (s->tag == tag && (!eq || eq(s, key)))
            return s;
        if (!s->tag)
            return NULL;
    }
}

/* Where a new tag goes: the first free slot of its probe run, after
 * growing when full. The slot is zero but for its tag (free slots are all
 * zero bytes). NULL when out of memory. */
static inline void *kl_hmap_place_(kl_hmap *m, uint64_t tag)
{
    if (kl_hmap_full(m) && kl_hmap_grow_(m) != KL_OK)
        return NULL;
    size_t o = kl_hmap_off_(m, tag);
    kl_hslot *s;
    while ((s = kl_hmap_at_off_(m, o))->tag)
        o = (o + m->stride) & m->omask;
    s->tag = tag;
    m->count++;
    return s;
}

/* The slot holding tag (and key): *found; else a new slot for it - in one
 * pass, since the first free slot of the probe run is where it goes
 * unless the map must grow first. */
static inline void *kl_hmap_put_tag_(kl_hmap *m, uint64_t tag, kl_hmap_eq_fn eq,
                                     const void *key, bool *found)
{
    *found = false;
    if (m->cap) {
        for (size_t o = kl_hmap_off_(m, tag);; o = (o + m->stride) & m->omask) {
            kl_hslot *s = kl_hmap_at_off_(m, o);
            if (s->tag == tag && (!eq || eq(s, key))) {
                *found = true;
                return s;
            }
            if (!s->tag) {
                if (kl_hmap_full(m))
                    break; /* grows, then places anew */
                s->tag = tag;
                m->count++;
                return s;
            }
        }
    }
    return kl_hmap_place_(m, tag);
}

/* ---- 64-bit keys ------------------------------------------------------ */

static inline void *kl_hmap_get(const kl_hmap *m, uint64_t key)
{
    return key == KL_HMAP_KEY_NONE ? NULL
                                   : kl_hmap_find_(m, key + 1, NULL, NULL);
}

/* The slot for key: the existing one (*found true) or a new one, zeroed
 * but for its key (*found false). NULL when out of memory, or for
 * KL_HMAP_KEY_NONE. */
static inline void *kl_hmap_put(kl_hmap *m, uint64_t key, bool *found)
{
    if (key == KL_HMAP_KEY_NONE) {
        *found = false;
        return NULL;
    }
    return kl_hmap_put_tag_(m, key + 1, NULL, NULL, found);
}

/* ---- hashed keys ------------------------------------------------------ */

static inline void *kl_hmap_get_h(const kl_hmap *m, uint64_t hash,
                                  kl_hmap_eq_fn eq, const void *key)
{
    return kl_hmap_find_(m, kl_hmap_tag_h_(hash), eq, key);
}

/* As kl_hmap_put; the new slot holds only the hash: the caller stores the
 * key in it before the next lookup. */
static inline void *kl_hmap_put_h(kl_hmap *m, uint64_t hash, kl_hmap_eq_fn eq,
                                  const void *key, bool *found)
{
    return kl_hmap_put_tag_(m, kl_hmap_tag_h_(hash), eq, key, found);
}

/* ---- removal and iteration -------------------------------------------- */

/* Removes the entry in slot (from a get, put or kl_hmap_next on this map;
 * a pointer to the caller's slot type, whose size the removal copies by).
 * Backward shift: each later member of the probe run moves into the hole
 * unless the hole lies before its home, so every lookup still reaches
 * every entry without tombstones. */
#define kl_hmap_remove(m, slot)                                                \
    kl_hmap_remove_((m), (slot), kl_hmap_slot_size_(sizeof *(slot)))

/* A slot type has a kl_hslot first: anything smaller is a void pointer
 * (sizeof 1 to GCC), which would copy by the wrong size. */
#define kl_hmap_slot_size_(n)                                                  \
    (sizeof(struct {                                                           \
         _Static_assert((n) >= sizeof(kl_hslot),                               \
                        "kl_hmap_remove needs a pointer to the slot type");    \
         char c;                                                               \
     }) * 0 +                                                                  \
     (n))

/* size is a constant where it is inlined: the moves are plain stores. */
static inline void kl_hmap_remove_(kl_hmap *m, void *slot, size_t size)
{
    size_t step = m->stride, omask = m->omask;
    size_t hole = (size_t)((unsigned char *)slot - m->slots);
    for (size_t j = (hole + step) & omask;; j = (j + step) & omask) {
        kl_hslot *s = kl_hmap_at_off_(m, j);
        if (!s->tag)
            break;
        /* s's probe ran from its home to j; the hole is on that path when
         * it is no nearer j than the home is (byte offsets, all multiples
         * of the stride) */
        size_t dist = (j - kl_hmap_off_(m, s->tag)) & omask;
        if (dist >= ((j - hole) & omask)) {
            memcpy(kl_hmap_at_off_(m, hole), s, size);
            hole = j;
        }
    }
    memset(kl_hmap_at_off_(m, hole), 0, size);
    m->count--;
}

/* The first occupied slot at index *i or after, *i moved past it; NULL
 * at the end. for (size_t i = 0; (s = kl_hmap_next(m, &i));) ... */
static inline void *kl_hmap_next(const kl_hmap *m, size_t *i)
{
    for (; *i < m->cap; (*i)++) {
        kl_hslot *s = kl_hmap_at_(m, *i);
        if (s->tag) {
            (*i)++;
            return s;
        }
    }
    return NULL;
}

#endif
