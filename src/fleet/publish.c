/* SPDX-License-Identifier: Apache-2.0 */
/* Publishing a key set (publish.h, docs/FLEET.md "Key sets: published
 * once, in chunks"): the next generation's chunks, then the meta naming
 * it (the switch is that one write), then the previous generation's
 * chunks deleted. Each write is idempotent, so a publish that failed half
 * way is run again. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "fleet/publish.h"

static int cmp_ski(const void *a, const void *b)
{
    return memcmp(a, b, KL_FLEET_SKI_LEN);
}

/* Sorts and drops repeats; returns the count kept. */
static size_t sort_unique(uint8_t *skis, size_t n)
{
    if (n == 0)
        return 0;
    qsort(skis, n, KL_FLEET_SKI_LEN, cmp_ski);
    size_t k = 1;
    for (size_t i = 1; i < n; i++)
        if (memcmp(skis + i * KL_FLEET_SKI_LEN,
                   skis + (k - 1) * KL_FLEET_SKI_LEN, KL_FLEET_SKI_LEN) != 0)
            memmove(skis + k++ * KL_FLEET_SKI_LEN, skis + i * KL_FLEET_SKI_LEN,
                    KL_FLEET_SKI_LEN);
    return k;
}

/* The generation now current (0: none). */
static kl_status current_gen(kl_etcd *c, const char *key, int64_t *gen,
                             char *err, size_t errlen)
{
    kl_etcd_kv kv;
    *gen = 0;
    kl_status st = kl_etcd_get(c, key, strlen(key), &kv, NULL, err, errlen);
    if (st == KL_E_NOT_FOUND)
        return KL_OK;
    KL_GUARD(st);
    kl_fleet_set_meta m;
    st = kl_fleet_set_meta_parse(kv.value, kv.value_len, &m, err, errlen);
    kl_etcd_kv_clear(&kv);
    if (st == KL_OK)
        *gen = m.generation;
    kl_fleet_set_meta_clear(&m);
    return st == KL_OK ? KL_OK : KL_E_BAD_VALUE;
}

static kl_status write_chunks(kl_etcd *c, const kl_fleet_publish *p,
                              const uint8_t *skis, const kl_fleet_set_meta *m,
                              char *err, size_t errlen)
{
    char key[512];
    for (uint32_t i = 0; i < m->chunks; i++) {
        size_t first = (size_t)i * m->chunk_skis;
        size_t n = (size_t)m->keys - first;
        if (n > m->chunk_skis)
            n = m->chunk_skis;
        KL_GUARD(kl_fleet_key_chunk(p->prefix, p->set, m->generation, i, key,
                                    sizeof key));
        KL_GUARD(kl_etcd_put(c, key, strlen(key),
                             skis + first * KL_FLEET_SKI_LEN,
                             n * KL_FLEET_SKI_LEN, 0, NULL, err, errlen));
    }
    return KL_OK;
}

kl_status kl_fleet_publish_set(kl_etcd *c, const kl_fleet_publish *p,
                               kl_fleet_publish_result *res, char *err,
                               size_t errlen)
{
    memset(res, 0, sizeof *res);
    if (!kl_fleet_name_ok(p->set, strlen(p->set))) {
        kl_errf(err, errlen,
                "key set name \"%.80s\" is not 1-64 letters, "
                "digits, '.', '_' or '-'",
                p->set);
        return KL_E_BAD_VALUE;
    }
    char meta_key[512];
    KL_GUARD(kl_fleet_key_set(p->prefix, p->set, meta_key, sizeof meta_key));
    int64_t old = 0;
    KL_GUARD(current_gen(c, meta_key, &old, err, errlen));
    uint8_t *skis = malloc(p->n ? p->n * KL_FLEET_SKI_LEN : 1);
    KL_ENSURE(skis != NULL, KL_E_NOMEM);
    if (p->n)
        memcpy(skis, p->skis, p->n * KL_FLEET_SKI_LEN);
    kl_fleet_set_meta m = {.generation = old + 1,
                           .chunk_skis = p->chunk_skis ? p->chunk_skis
                                                       : KL_FLEET_CHUNK_SKIS,
                           .any_region = p->nregions == 0,
                           .nregions = p->nregions};
    m.keys = (int64_t)sort_unique(skis, p->n);
    m.chunks = (uint32_t)((m.keys + m.chunk_skis - 1) / m.chunk_skis);
    unsigned dl = 0;
    kl_status st = EVP_Digest(skis, (size_t)m.keys * KL_FLEET_SKI_LEN, m.sha256,
                              &dl, EVP_sha256(), NULL) == 1
                       ? KL_OK
                       : KL_E_NOMEM;
    m.regions = (char(*)[KL_FLEET_NAME_MAX + 1]) p->regions;
    char *json = NULL;
    size_t len = 0;
    if (st == KL_OK)
        st = write_chunks(c, p, skis, &m, err, errlen);
    if (st == KL_OK)
        st = kl_fleet_set_meta_encode(&m, &json, &len);
    if (st == KL_OK)
        st = kl_etcd_put(c, meta_key, strlen(meta_key), json, len, 0, NULL, err,
                         errlen);
    free(json);
    free(skis);
    KL_GUARD(st);
    res->generation = m.generation;
    res->keys = m.keys;
    res->chunks = m.chunks;
    if (old > 0) { /* readers moved on with the meta; a reader that read
                      the old meta just before keeps its SKIs in memory */
        char pfx[512];
        KL_GUARD(kl_fleet_key_chunks(p->prefix, p->set, old, pfx, sizeof pfx));
        KL_GUARD(
            kl_etcd_delete(c, pfx, strlen(pfx), true, NULL, NULL, err, errlen));
    }
    return KL_OK;
}
