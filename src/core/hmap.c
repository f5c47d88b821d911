/* SPDX-License-Identifier: Apache-2.0 */
/* The shared hash map: growth and placement (see hmap.h; the lookups and
 * the removal are inline there). */
#include "core/hmap.h"

#include <assert.h>
#include <stdlib.h>

/* The first allocation: small, for a connection with a few requests. */
#define MIN_CAP 16u

void kl_hmap_init(kl_hmap *m, size_t slot_size)
{
    assert(slot_size >= sizeof(kl_hslot) && slot_size % 8 == 0);
    memset(m, 0, sizeof *m);
    m->size = slot_size;
    /* A power-of-two stride: a slot's index is a shift away from its
     * address (no division in kl_hmap_remove), and small slots never
     * straddle a cache line. */
    while (((size_t)1 << m->lg) < slot_size)
        m->lg++;
    m->stride = (size_t)1 << m->lg;
}

void kl_hmap_free(kl_hmap *m)
{
    free(m->slots);
    size_t size = m->size, stride = m->stride;
    unsigned lg = m->lg;
    memset(m, 0, sizeof *m);
    m->size = size;
    m->stride = stride;
    m->lg = lg;
}

/* The first free slot of tag's probe run (the map has one: it is at most
 * half full). */
static void *free_slot(const kl_hmap *m, uint64_t tag)
{
    size_t mask = m->cap - 1;
    size_t i = kl_hmap_home_(m, tag);
    while (((kl_hslot *)kl_hmap_at_(m, i))->tag)
        i = (i + 1) & mask;
    return kl_hmap_at_(m, i);
}

static kl_status resize(kl_hmap *m, size_t cap)
{
    unsigned char *slots = calloc(cap, (size_t)1 << m->lg);
    KL_ENSURE(slots != NULL, KL_E_NOMEM);
    kl_hmap old = *m;
    m->slots = slots;
    m->cap = cap;
    m->omask = (cap - 1) << m->lg;
    m->shift = 64;
    for (size_t c = cap; c > 1; c >>= 1)
        m->shift--;
    size_t i = 0;
    kl_hslot *s;
    while ((s = kl_hmap_next(&old, &i)))
        memcpy(free_slot(m, s->tag), s, m->size);
    free(old.slots);
    return KL_OK;
}

kl_status kl_hmap_reserve(kl_hmap *m, size_t n)
{
    KL_ENSURE(n <= SIZE_MAX / 4 >> m->lg, KL_E_NOMEM);
    size_t cap = m->cap ? m->cap : MIN_CAP;
    while (n * 2 > cap)
        cap *= 2;
    return cap == m->cap ? KL_OK : resize(m, cap);
}

kl_status kl_hmap_grow_(kl_hmap *m)
{
    assert(m->size != 0); /* kl_hmap_init was called */
    return kl_hmap_reserve(m, m->count + 1);
}
