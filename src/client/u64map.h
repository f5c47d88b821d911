/* SPDX-License-Identifier: Apache-2.0 */
/* A map from 64-bit keys to pointers: open addressing with linear probing
 * and backward-shift deletion (no tombstones, so a long-lived target never
 * degrades). The asynchronous client keeps its requests in two of them: by
 * handle (for cancel) and, per connection, by wire id (for responses).
 * Pure, no I/O. A NULL value cannot be stored (it means "absent"). */
#ifndef KL_CLIENT_U64MAP_H
#define KL_CLIENT_U64MAP_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct kl_u64slot {
    uint64_t key;
    void *val; /* NULL: slot unused */
} kl_u64slot;

typedef struct kl_u64map {
    kl_u64slot *slots;
    size_t cap; /* power of two (0 before the first put) */
    size_t count;
} kl_u64map;

void kl_u64map_init(kl_u64map *m);
void kl_u64map_free(kl_u64map *m);
/* Inserts or replaces. val must not be NULL. */
KL_WUR kl_status kl_u64map_put(kl_u64map *m, uint64_t key, void *val);
void *kl_u64map_get(const kl_u64map *m, uint64_t key);
/* Removes and returns the value (NULL when absent). */
void *kl_u64map_del(kl_u64map *m, uint64_t key);

/* Iteration over slots: for (i = 0; i < m->cap; i++) if slots[i].val ...
 * Deleting during iteration may move a later entry into slot i, so callers
 * that delete collect first. */
#endif
