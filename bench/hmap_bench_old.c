/* SPDX-License-Identifier: Apache-2.0 */
/* The maps the shared hash map replaced, as they were before it (but for
 * names and out-of-memory handling), for bench/hmap_bench.c - and the key
 * store's index and the request-id table as the shared map would make
 * them (not adopted: see bench/RESULTS.md "Shared hash map"). A file of their
 * own, as in the tree: the bench calls them across a compilation unit, as it
 * calls the tree's code, so neither side gets inlined into the timing loops or
 * specialised for them. */
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "hmap_bench_old.h"

/* ---- src/client/reqtable.c ---- */

static size_t ort_home(const old_reqtable *t, uint32_t id)
{
    return (size_t)((id * 2654435769u) & (uint32_t)(t->cap - 1));
}

static old_reqslot *ort_find(const old_reqtable *t, uint32_t id)
{
    if (!t->cap)
        return NULL;
    for (size_t i = ort_home(t, id);; i = (i + 1) & (t->cap - 1)) {
        old_reqslot *s = &t->slots[i];
        if (!s->pending)
            return NULL;
        if (s->id == id)
            return s;
    }
}

static old_reqslot *ort_insert_slot(old_reqslot *slots, size_t cap, uint32_t id)
{
    old_reqtable tmp = {.slots = slots, .cap = cap};
    size_t i = ort_home(&tmp, id);
    while (slots[i].pending)
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

static void ort_grow(old_reqtable *t)
{
    size_t ncap = t->cap ? t->cap * 2 : 64;
    old_reqslot *ns = calloc(ncap, sizeof *ns);
    if (!ns)
        abort();
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].pending)
            *ort_insert_slot(ns, ncap, t->slots[i].id) = t->slots[i];
    free(t->slots);
    t->slots = ns;
    t->cap = ncap;
}

void ort_add(old_reqtable *t, uint32_t id, uint64_t now)
{
    old_reqslot *s = ort_find(t, id);
    if (s) {
        s->pending++;
        s->sent_ns = now;
        t->total++;
        return;
    }
    if ((t->used + 1) * 2 > t->cap)
        ort_grow(t);
    s = ort_insert_slot(t->slots, t->cap, id);
    s->id = id;
    s->pending = 1;
    s->cancelled = 0;
    s->sent_ns = now;
    t->used++;
    t->total++;
}

static void ort_remove(old_reqtable *t, old_reqslot *s)
{
    size_t mask = t->cap - 1;
    size_t hole = (size_t)(s - t->slots);
    size_t i = hole;
    for (;;) {
        i = (i + 1) & mask;
        old_reqslot *n = &t->slots[i];
        if (!n->pending)
            break;
        size_t h = ort_home(t, n->id);
        bool in_range = hole <= i ? (h > hole && h <= i) : (h > hole || h <= i);
        if (!in_range) {
            t->slots[hole] = *n;
            hole = i;
        }
    }
    memset(&t->slots[hole], 0, sizeof t->slots[hole]);
    t->used--;
}

int ort_complete(old_reqtable *t, uint32_t id, uint64_t *sent)
{
    old_reqslot *s = ort_find(t, id);
    *sent = 0;
    if (!s)
        return 0;
    int m = 1;
    if (s->cancelled) {
        s->cancelled--;
        m = 2;
    } else {
        *sent = s->sent_ns;
    }
    s->pending--;
    t->total--;
    if (!s->pending)
        ort_remove(t, s);
    return m;
}

bool ort_contains(const old_reqtable *t, uint32_t id)
{
    return ort_find(t, id) != NULL;
}

/* ---- src/client/u64map.c ---- */

static size_t ou_home(size_t cap, uint64_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

static old_u64slot *ou_find(const old_u64map *m, uint64_t key)
{
    if (!m->cap)
        return NULL;
    for (size_t i = ou_home(m->cap, key);; i = (i + 1) & (m->cap - 1)) {
        old_u64slot *s = &m->slots[i];
        if (!s->val)
            return NULL;
        if (s->key == key)
            return s;
    }
}

static void ou_place(old_u64slot *slots, size_t cap, uint64_t key, void *val)
{
    size_t i = ou_home(cap, key);
    while (slots[i].val)
        i = (i + 1) & (cap - 1);
    slots[i].key = key;
    slots[i].val = val;
}

void ou_put(old_u64map *m, uint64_t key, void *val)
{
    old_u64slot *s = ou_find(m, key);
    if (s) {
        s->val = val;
        return;
    }
    if ((m->count + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 16;
        old_u64slot *ns = calloc(ncap, sizeof *ns);
        if (!ns)
            abort();
        for (size_t i = 0; i < m->cap; i++)
            if (m->slots[i].val)
                ou_place(ns, ncap, m->slots[i].key, m->slots[i].val);
        free(m->slots);
        m->slots = ns;
        m->cap = ncap;
    }
    ou_place(m->slots, m->cap, key, val);
    m->count++;
}

void *ou_get(const old_u64map *m, uint64_t key)
{
    old_u64slot *s = ou_find(m, key);
    return s ? s->val : NULL;
}

void *ou_del(old_u64map *m, uint64_t key)
{
    old_u64slot *s = ou_find(m, key);
    if (!s)
        return NULL;
    void *val = s->val;
    size_t mask = m->cap - 1;
    size_t hole = (size_t)(s - m->slots);
    for (size_t i = (hole + 1) & mask; m->slots[i].val; i = (i + 1) & mask) {
        size_t h = ou_home(m->cap, m->slots[i].key);
        bool stays = hole <= i ? (h > hole && h <= i) : (h > hole || h <= i);
        if (!stays) {
            m->slots[hole] = m->slots[i];
            hole = i;
        }
    }
    m->slots[hole].key = 0;
    m->slots[hole].val = NULL;
    m->count--;
    return val;
}

/* ---- src/engine/limits.c before the shared map (the per-source table) ---- */

old_src_table *os_new(uint32_t max_handshaking, uint32_t per_source,
                      uint64_t k0, uint64_t k1)
{
    size_t slots = 16;
    while (slots < 2 * (size_t)max_handshaking)
        slots *= 2;
    old_src_table *t = calloc(1, sizeof *t + slots * sizeof(old_src_entry));
    if (!t)
        abort();
    pthread_mutex_init(&t->mu, NULL);
    t->per_source = per_source;
    t->mask = slots - 1;
    t->k0 = k0;
    t->k1 = k1;
    return t;
}

static uint64_t os_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static size_t os_home(const old_src_table *t, const uint8_t addr[16])
{
    uint64_t a, b;
    memcpy(&a, addr, 8);
    memcpy(&b, addr + 8, 8);
    return (size_t)(os_mix(os_mix(a ^ t->k0) ^ b ^ t->k1)) & t->mask;
}

static size_t os_find(const old_src_table *t, const uint8_t addr[16])
{
    size_t i = os_home(t, addr);
    while (t->e[i].n && memcmp(t->e[i].addr, addr, 16) != 0)
        i = (i + 1) & t->mask;
    return i;
}

bool os_take(old_src_table *t, const uint8_t addr[16])
{
    pthread_mutex_lock(&t->mu);
    old_src_entry *e = &t->e[os_find(t, addr)];
    bool ok = e->n < t->per_source;
    if (ok && e->n++ == 0)
        memcpy(e->addr, addr, 16);
    pthread_mutex_unlock(&t->mu);
    return ok;
}

void os_put(old_src_table *t, const uint8_t addr[16])
{
    pthread_mutex_lock(&t->mu);
    size_t i = os_find(t, addr);
    if (t->e[i].n && --t->e[i].n == 0) {
        for (size_t j = (i + 1) & t->mask; t->e[j].n; j = (j + 1) & t->mask) {
            size_t k = os_home(t, t->e[j].addr);
            bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
            if (!stays) {
                t->e[i] = t->e[j];
                t->e[j].n = 0;
                i = j;
            }
        }
    }
    pthread_mutex_unlock(&t->mu);
}

uint32_t os_count(old_src_table *t, const uint8_t addr[16])
{
    pthread_mutex_lock(&t->mu);
    uint32_t n = t->e[os_find(t, addr)].n;
    pthread_mutex_unlock(&t->mu);
    return n;
}

/* ---- src/crypto/ctx_cache.c (direct-mapped, grows on misses) ---- */
#define OC_MIN_SLOTS 512u
#define OC_MAX_SLOTS (256u * 1024u)
#define OC_WINDOW 4096u
#define OC_GROW_MISSES (OC_WINDOW / 4u)

typedef struct old_cache {
    kl_ctx_entry *slots;
    size_t n;
    unsigned lookups, misses;
} old_cache;

static __thread old_cache otc;

static size_t oc_slot_of(const EVP_PKEY *pkey, uint8_t opcode, size_t n)
{
    uint64_t h = (uint64_t)(uintptr_t)pkey ^ ((uint64_t)opcode << 56);
    h *= 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (n - 1);
}

static void oc_drop(kl_ctx_entry *e)
{
    if (!e->pkey)
        return;
    EVP_PKEY_CTX_free(e->pctx);
    EVP_MD_CTX_free(e->mctx);
    OPENSSL_free(e->modulus);
    EVP_PKEY_free(e->pkey);
    *e = (kl_ctx_entry){0};
}

static void oc_resize(size_t n)
{
    kl_ctx_entry *s = calloc(n, sizeof *s);
    if (!s)
        return;
    for (size_t i = 0; i < otc.n; i++) {
        kl_ctx_entry *old = &otc.slots[i];
        if (!old->pkey)
            continue;
        kl_ctx_entry *e = &s[oc_slot_of(old->pkey, old->opcode, n)];
        oc_drop(e);
        *e = *old;
    }
    free(otc.slots);
    otc.slots = s;
    otc.n = n;
}

kl_ctx_entry *oc_get(EVP_PKEY *pkey, uint8_t opcode, kl_ctx_setup_fn setup)
{
    if (!otc.slots) {
        if (!(otc.slots = calloc(OC_MIN_SLOTS, sizeof *otc.slots)))
            return NULL;
        otc.n = OC_MIN_SLOTS;
    }
    if (++otc.lookups == OC_WINDOW) {
        if (otc.misses > OC_GROW_MISSES && otc.n < OC_MAX_SLOTS)
            oc_resize(otc.n * 2);
        otc.lookups = otc.misses = 0;
    }
    kl_ctx_entry *e = &otc.slots[oc_slot_of(pkey, opcode, otc.n)];
    if (e->pkey == pkey && e->opcode == opcode)
        return e;
    otc.misses++;
    oc_drop(e);
    if (EVP_PKEY_up_ref(pkey) != 1)
        return NULL;
    e->pkey = pkey;
    e->opcode = opcode;
    if (!setup(e)) {
        oc_drop(e);
        return NULL;
    }
    return e;
}

void oc_free(void)
{
    for (size_t i = 0; i < otc.n; i++)
        oc_drop(&otc.slots[i]);
    free(otc.slots);
    otc = (old_cache){0};
}

/* ---- src/keys/keystore.c (the index) ---- */

static kl_key **oi_probe(kl_key **table, size_t mask,
                         const uint8_t ski[KL_SKI_LEN])
{
    uint64_t h;
    memcpy(&h, ski, sizeof h);
    size_t i = (size_t)h & mask;
    while (table[i] && memcmp(table[i]->ski, ski, KL_SKI_LEN) != 0)
        i = (i + 1) & mask;
    return &table[i];
}

void oi_insert(old_index *x, kl_key *const *keys, size_t count)
{
    /* the old grow(): double while more than half full, then place */
    if ((count + 1) * 2 > x->mask + 1) {
        size_t size = (x->mask + 1) * 2;
        kl_key **t = calloc(size, sizeof *t);
        if (!t)
            abort();
        for (size_t i = 0; i < count; i++)
            *oi_probe(t, size - 1, keys[i]->ski) = keys[i];
        free(x->table);
        x->table = t;
        x->mask = size - 1;
    }
    *oi_probe(x->table, x->mask, keys[count]->ski) = keys[count];
}

const kl_key *oi_find(const old_index *x, const uint8_t ski[KL_SKI_LEN])
{
    return *oi_probe(x->table, x->mask, ski);
}

/* ---- the key store's index on the shared map (not adopted) ---- */
typedef struct hi_slot {
    kl_hslot h; /* the SKI's first 8 bytes */
    kl_key *key;
} hi_slot;

static bool hi_same(const void *slot, const void *ski)
{
    return memcmp(((const hi_slot *)slot)->key->ski, ski, KL_SKI_LEN) == 0;
}

static uint64_t hi_hash(const uint8_t ski[KL_SKI_LEN])
{
    uint64_t h;
    memcpy(&h, ski, sizeof h);
    return h;
}

void hi_init(kl_hmap *m)
{
    kl_hmap_init(m, sizeof(hi_slot));
    if (kl_hmap_reserve(m, 32) != KL_OK)
        abort();
}

/* As kl_keystore_insert would: a duplicate check, room, then the put. */
void hi_insert(kl_hmap *m, kl_key *k)
{
    if (hi_find(m, k->ski) || kl_hmap_reserve(m, kl_hmap_count(m) + 1))
        abort();
    bool found;
    hi_slot *s = kl_hmap_put_h(m, hi_hash(k->ski), hi_same, k->ski, &found);
    s->key = k;
}

const kl_key *hi_find(const kl_hmap *m, const uint8_t ski[KL_SKI_LEN])
{
    hi_slot *s = kl_hmap_get_h(m, hi_hash(ski), hi_same, ski);
    return s ? s->key : NULL;
}

/* ---- the request-id table on the shared map (not adopted) ---- */
typedef struct hr_slot {
    kl_hslot h; /* the id */
    uint32_t pending, cancelled;
    uint64_t sent_ns;
} hr_slot;

void hr_init(kl_hmap *m)
{
    kl_hmap_init(m, sizeof(hr_slot));
}

/* kl_reqtable_add as it was on the shared map. */
int hr_add(kl_hmap *m, uint32_t id, uint64_t now)
{
    bool found;
    hr_slot *s = kl_hmap_put(m, id, &found);
    if (!s || (found && s->pending == UINT32_MAX))
        return -1;
    s->pending++;
    s->sent_ns = now;
    return 0;
}

int hr_complete(kl_hmap *m, uint32_t id, uint64_t *sent)
{
    hr_slot *s = kl_hmap_get(m, id);
    *sent = 0;
    if (!s)
        return 0;
    int r = 1;
    if (s->cancelled) {
        s->cancelled--;
        r = 2;
    } else {
        *sent = s->sent_ns;
    }
    if (!--s->pending)
        kl_hmap_remove(m, s);
    return r;
}

bool hr_contains(const kl_hmap *m, uint32_t id)
{
    return kl_hmap_get(m, id) != NULL;
}
