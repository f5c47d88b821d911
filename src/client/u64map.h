/* SPDX-License-Identifier: Apache-2.0 */
/* A map from 64-bit keys to pointers, over the shared map (core/hmap.h:
 * open addressing, backward-shift deletion, so a long-lived target never
 * degrades). The asynchronous client keeps its requests in two of them: by
 * handle (for cancel) and, per connection, by wire id (for responses).
 * Pure, no I/O. A NULL value cannot be stored (it means "absent"), nor the
 * key UINT64_MAX (KL_HMAP_KEY_NONE). */
#ifndef KL_CLIENT_U64MAP_H
#define KL_CLIENT_U64MAP_H

#include <stddef.h>
#include <stdint.h>

#include "core/hmap.h"
#include "core/status.h"

typedef struct kl_u64slot {
    kl_hslot h; /* the key */
    void *val;
} kl_u64slot;

typedef struct kl_u64map {
    kl_hmap m; /* of kl_u64slot */
} kl_u64map;

void kl_u64map_init(kl_u64map *m);
void kl_u64map_free(kl_u64map *m);
/* Inserts or replaces. val must not be NULL; key must not be UINT64_MAX
 * (KL_E_BAD_VALUE for either). */
KL_WUR kl_status kl_u64map_put(kl_u64map *m, uint64_t key, void *val);
void *kl_u64map_get(const kl_u64map *m, uint64_t key);
/* Removes and returns the value (NULL when absent). */
void *kl_u64map_del(kl_u64map *m, uint64_t key);

static inline size_t kl_u64map_count(const kl_u64map *m)
{
    return kl_hmap_count(&m->m);
}

/* The next value from cursor *i (start at 0), NULL at the end. Deleting
 * during iteration may move a later entry behind the cursor, so callers
 * that delete collect first. */
static inline void *kl_u64map_next(const kl_u64map *m, size_t *i)
{
    kl_u64slot *s = kl_hmap_next(&m->m, i);
    return s ? s->val : NULL;
}
#endif
