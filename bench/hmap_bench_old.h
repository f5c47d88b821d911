/* SPDX-License-Identifier: Apache-2.0 */
/* The old maps for bench/hmap_bench.c, and the key store's index and the
 * request-id table on the shared map (hmap_bench_old.c). */
#ifndef KL_BENCH_HMAP_BENCH_OLD_H
#define KL_BENCH_HMAP_BENCH_OLD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "core/hmap.h"
#include "crypto/ctx_cache.h"
#include "keys/store.h"

typedef struct old_reqslot {
    uint32_t id, pending, cancelled;
    uint64_t sent_ns;
} old_reqslot;

typedef struct old_reqtable {
    old_reqslot *slots;
    size_t cap, used, total;
} old_reqtable;

typedef struct old_u64slot {
    uint64_t key;
    void *val;
} old_u64slot;

typedef struct old_u64map {
    old_u64slot *slots;
    size_t cap, count;
} old_u64map;

typedef struct old_src_entry {
    uint8_t addr[16];
    uint32_t n;
} old_src_entry;

typedef struct old_src_table {
    pthread_mutex_t mu;
    uint32_t per_source;
    size_t mask;
    uint64_t k0, k1;
    old_src_entry e[];
} old_src_table;

typedef struct old_index {
    kl_key **table;
    size_t mask;
} old_index;

void ort_add(old_reqtable *t, uint32_t id, uint64_t now);
int ort_complete(old_reqtable *t, uint32_t id, uint64_t *sent);
bool ort_contains(const old_reqtable *t, uint32_t id);
void ou_put(old_u64map *m, uint64_t key, void *val);
void *ou_get(const old_u64map *m, uint64_t key);
void *ou_del(old_u64map *m, uint64_t key);
old_src_table *os_new(uint32_t max_handshaking, uint32_t per_source,
                      uint64_t k0, uint64_t k1);
bool os_take(old_src_table *t, const uint8_t addr[16]);
void os_put(old_src_table *t, const uint8_t addr[16]);
uint32_t os_count(old_src_table *t, const uint8_t addr[16]);
kl_ctx_entry *oc_get(EVP_PKEY *pkey, uint8_t opcode, kl_ctx_setup_fn setup);
void oc_free(void);
void oi_insert(old_index *x, kl_key *const *keys, size_t count);
const kl_key *oi_find(const old_index *x, const uint8_t ski[KL_SKI_LEN]);

/* The key store's index on the shared map (not adopted). */
void hi_init(kl_hmap *m);
void hi_insert(kl_hmap *m, kl_key *k);
const kl_key *hi_find(const kl_hmap *m, const uint8_t ski[KL_SKI_LEN]);

/* The request-id table on the shared map (not adopted). */
void hr_init(kl_hmap *m);
int hr_add(kl_hmap *m, uint32_t id, uint64_t now);
int hr_complete(kl_hmap *m, uint32_t id, uint64_t *sent);
bool hr_contains(const kl_hmap *m, uint32_t id);

#endif
