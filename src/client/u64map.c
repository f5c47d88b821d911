/* SPDX-License-Identifier: Apache-2.0 */
/* 64-bit key to pointer map: see u64map.h. */
#include "client/u64map.h"

#include <stdbool.h>

void kl_u64map_init(kl_u64map *m)
{
    kl_hmap_init(&m->m, sizeof(kl_u64slot));
}

void kl_u64map_free(kl_u64map *m)
{
    kl_hmap_free(&m->m);
}

kl_status kl_u64map_put(kl_u64map *m, uint64_t key, void *val)
{
    KL_ENSURE(val != NULL && key != KL_HMAP_KEY_NONE, KL_E_BAD_VALUE);
    bool found;
    kl_u64slot *s = kl_hmap_put(&m->m, key, &found);
    KL_ENSURE(s != NULL, KL_E_NOMEM);
    s->val = val;
    return KL_OK;
}

void *kl_u64map_get(const kl_u64map *m, uint64_t key)
{
    kl_u64slot *s = kl_hmap_get(&m->m, key);
    return s ? s->val : NULL;
}

void *kl_u64map_del(kl_u64map *m, uint64_t key)
{
    kl_u64slot *s = kl_hmap_get(&m->m, key);
    if (!s)
        return NULL;
    void *val = s->val;
    kl_hmap_remove(&m->m, s);
    return val;
}
