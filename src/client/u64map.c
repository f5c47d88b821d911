/* SPDX-License-Identifier: Apache-2.0 */
/* 64-bit key to pointer map: see u64map.h. */
#include "client/u64map.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MIN_CAP 16u

static size_t home(size_t cap, uint64_t key)
{
    /* Fibonacci hashing: sequential ids and handles spread out. */
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

void kl_u64map_init(kl_u64map *m)
{
    memset(m, 0, sizeof *m);
}

void kl_u64map_free(kl_u64map *m)
{
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static kl_u64slot *find(const kl_u64map *m, uint64_t key)
{
    if (!m->cap)
        return NULL;
    for (size_t i = home(m->cap, key);; i = (i + 1) & (m->cap - 1)) {
        kl_u64slot *s = &m->slots[i];
        if (!s->val)
            return NULL;
        if (s->key == key)
            return s;
    }
}

static void place(kl_u64slot *slots, size_t cap, uint64_t key, void *val)
{
    size_t i = home(cap, key);
    while (slots[i].val)
        i = (i + 1) & (cap - 1);
    slots[i].key = key;
    slots[i].val = val;
}

kl_status kl_u64map_put(kl_u64map *m, uint64_t key, void *val)
{
    KL_ENSURE(val != NULL, KL_E_BAD_VALUE);
    kl_u64slot *s = find(m, key);
    if (s) {
        s->val = val;
        return KL_OK;
    }
    /* Load at most one half keeps probe runs short. */
    if ((m->count + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : MIN_CAP;
        kl_u64slot *ns = calloc(ncap, sizeof *ns);
        KL_ENSURE(ns != NULL, KL_E_NOMEM);
        for (size_t i = 0; i < m->cap; i++)
            if (m->slots[i].val)
                place(ns, ncap, m->slots[i].key, m->slots[i].val);
        free(m->slots);
        m->slots = ns;
        m->cap = ncap;
    }
    place(m->slots, m->cap, key, val);
    m->count++;
    return KL_OK;
}

void *kl_u64map_get(const kl_u64map *m, uint64_t key)
{
    kl_u64slot *s = find(m, key);
    return s ? s->val : NULL;
}

void *kl_u64map_del(kl_u64map *m, uint64_t key)
{
    kl_u64slot *s = find(m, key);
    if (!s)
        return NULL;
    void *val = s->val;
    size_t mask = m->cap - 1;
    size_t hole = (size_t)(s - m->slots);
    /* Backward shift: later members of the run move into the hole unless
     * their home lies cyclically in (hole, i]. */
    for (size_t i = (hole + 1) & mask; m->slots[i].val; i = (i + 1) & mask) {
        size_t h = home(m->cap, m->slots[i].key);
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
