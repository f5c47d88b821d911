/* SPDX-License-Identifier: Apache-2.0 */
/* A routing table from the fleet directory (table_fleet.h, docs/FLEET.md
 * "What a router holds"): two layers. The key index (SKI -> key sets, with
 * the sets' region policies intersected per key) is built with the file
 * table's builder, each set standing in for a server, and is kept in the
 * cache while no set's meta changes; the membership layer
 * (set -> servers) is rebuilt from the records each time. A server change
 * therefore costs servers x sets, never keys. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/table_fleet.h"
#include "router/table_int.h"

void kl_rt_fleet_cache_clear(kl_rt_fleet_cache *c)
{
    kl_rt_table_free(c->idx);
    free(c->revs);
    memset(c, 0, sizeof *c);
}

/* Same sets, same generations, same order: the index still holds. */
static bool cache_fresh(const kl_rt_fleet_cache *c, const kl_fleet_view *v)
{
    if (!c->idx || c->idx->nservers != v->nsets)
        return false;
    for (size_t i = 0; i < v->nsets; i++)
        if (strcmp(c->idx->servers[i].name, v->sets[i].name) != 0 ||
            c->revs[i] != v->sets[i].mod_revision)
            return false;
    return true;
}

static kl_status add_set(kl_rt_build *b, const kl_fleet_set *fs, size_t i)
{
    kl_rt_server s;
    memset(&s, 0, sizeof s);
    snprintf(s.name, sizeof s.name, "%s", fs->name);
    snprintf(s.host, sizeof s.host, "-");
    KL_GUARD(kl_rt_build_add_server(b, &s));
    kl_rt_set *set;
    KL_GUARD(kl_rt_build_add_set(b, fs->name, &set));
    for (int64_t k = 0; k < fs->meta.keys; k++)
        KL_GUARD(kl_rt_build_set_ski(b, set, fs->skis + k * KL_FLEET_SKI_LEN));
    set->regions.set = !fs->meta.any_region;
    if (set->regions.set && fs->meta.nregions) {
        set->regions.names =
            calloc(fs->meta.nregions, sizeof *set->regions.names);
        if (!set->regions.names)
            return KL_E_NOMEM;
        for (size_t r = 0; r < fs->meta.nregions; r++)
            snprintf(set->regions.names[r], sizeof *set->regions.names, "%s",
                     fs->meta.regions[r]);
        set->regions.n = fs->meta.nregions;
    }
    return kl_rt_build_serve_set(b, i, 1, set);
}

static kl_status build_index(kl_rt_fleet_cache *c, const kl_fleet_view *v,
                             char *err, size_t errlen)
{
    kl_rt_build b;
    KL_GUARD(
        kl_rt_build_init(&b, "(fleet directory)", err, errlen, NULL, NULL));
    for (size_t i = 0; i < v->nsets; i++) {
        kl_status s = add_set(&b, &v->sets[i], i);
        if (s != KL_OK) {
            kl_rt_build_abort(&b);
            if (s == KL_E_NOMEM)
                kl_errf(err, errlen, "fleet directory: out of memory");
            return s;
        }
    }
    kl_rt_table *idx;
    int64_t *revs = malloc((v->nsets ? v->nsets : 1) * sizeof *revs);
    if (!revs) {
        kl_rt_build_abort(&b);
        return KL_E_NOMEM;
    }
    kl_status s = kl_rt_build_finish(&b, &idx);
    if (s != KL_OK) {
        free(revs);
        return s;
    }
    for (size_t i = 0; i < v->nsets; i++)
        revs[i] = v->sets[i].mod_revision;
    kl_rt_fleet_cache_clear(c);
    idx->refs = 1; /* the cache's */
    c->idx = idx;
    c->revs = revs;
    return KL_OK;
}

static int find_set(const kl_fleet_view *v, const char *name)
{
    size_t lo = 0, hi = v->nsets;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int cmp = strcmp(v->sets[mid].name, name);
        if (!cmp)
            return (int)mid;
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* Only servers that hold keys are remotes. */
static bool eligible(const kl_fleet_server *s, const char *self)
{
    return s->role == KL_FLEET_ROLE_KEYS && !(self && !strcmp(self, s->name));
}

/* The next server of t from the record fs. */
static kl_status fill_server(kl_rt_table *t, const kl_fleet_server *fs)
{
    kl_rt_server *s = &t->servers[t->nservers];
    snprintf(s->name, sizeof s->name, "%s", fs->name);
    snprintf(s->host, sizeof s->host, "%s", fs->host);
    snprintf(s->region, sizeof s->region, "%s", fs->region);
    s->port = fs->port;
    /* sealed keys: a server that publishes a sealing key opens those
     * whose policy its published attributes satisfy (docs/FLEET.md
     * "The server record") */
    s->sealing = fs->seal_kem != 0;
    s->attr_first = (uint32_t)t->nsattrs;
    for (size_t a = 0; s->sealing && a < fs->n_seal_attrs; a++)
        KL_GUARD(kl_rt_table_add_sattr(t, fs->seal_attrs[a].name,
                                       fs->seal_attrs[a].value));
    s->nattrs = (uint32_t)(t->nsattrs - s->attr_first);
    /* draining, then degraded, come last when latencies tie */
    s->priority =
        fs->priority + (fs->health == KL_FLEET_HEALTH_DRAINING   ? 2000000
                        : fs->health == KL_FLEET_HEALTH_DEGRADED ? 1000000
                                                                 : 0);
    return KL_OK;
}

static kl_status build_members(kl_rt_table *t, const kl_fleet_view *v,
                               const char *self)
{
    t->nsets = v->nsets;
    t->set_servers = calloc(v->nsets ? v->nsets : 1, sizeof *t->set_servers);
    t->set_nservers = calloc(v->nsets ? v->nsets : 1, sizeof *t->set_nservers);
    t->servers = calloc(v->nservers ? v->nservers : 1, sizeof *t->servers);
    KL_ENSURE(t->set_servers && t->set_nservers && t->servers, KL_E_NOMEM);
    for (size_t i = 0; i < v->nservers; i++) {
        const kl_fleet_server *fs = &v->servers[i];
        if (!eligible(fs, self))
            continue;
        KL_GUARD(fill_server(t, fs));
        for (size_t k = 0; k < fs->nsets; k++) {
            int si = find_set(v, fs->sets[k]);
            if (si < 0)
                continue; /* a set not published (yet): nothing to route */
            uint32_t n = t->set_nservers[si];
            uint32_t *p = realloc(t->set_servers[si], (n + 1) * sizeof *p);
            KL_ENSURE(p != NULL, KL_E_NOMEM);
            p[n] = (uint32_t)t->nservers;
            t->set_servers[si] = p;
            t->set_nservers[si] = n + 1;
        }
        t->nservers++;
    }
    return KL_OK;
}

kl_status kl_rt_table_from_fleet(const kl_fleet_view *v, const char *self,
                                 kl_rt_fleet_cache *cache, kl_rt_table **out,
                                 char *err, size_t errlen)
{
    *out = NULL;
    if (!cache_fresh(cache, v))
        KL_GUARD(build_index(cache, v, err, errlen));
    kl_rt_table *t = calloc(1, sizeof *t);
    KL_ENSURE(t != NULL, KL_E_NOMEM);
    /* protocol P9: 0x01 is FedRAMP High unless dir/regions says otherwise,
     * as in the table file's region_codes */
    snprintf(t->region_of[1], KL_RT_NAME_MAX + 1, "fedramp-high");
    for (int b = 1; v->regions && b < 256; b++)
        if (v->regions->name[b][0])
            snprintf(t->region_of[b], KL_RT_NAME_MAX + 1, "%s",
                     v->regions->name[b]);
    __atomic_add_fetch(&cache->idx->refs, 1, __ATOMIC_ACQ_REL);
    t->idx = cache->idx;
    if (build_members(t, v, self) != KL_OK) {
        kl_rt_table_free(t);
        kl_errf(err, errlen, "fleet directory: out of memory");
        return KL_E_NOMEM;
    }
    *out = t;
    return KL_OK;
}

kl_status kl_rt_table_from_fleet_sealed(const kl_fleet_view *v,
                                        const char *self, kl_rt_table **out,
                                        char *err, size_t errlen)
{
    *out = NULL;
    kl_rt_table *t = calloc(1, sizeof *t);
    KL_ENSURE(t != NULL, KL_E_NOMEM);
    snprintf(t->region_of[1], KL_RT_NAME_MAX + 1, "fedramp-high");
    for (int b = 1; v->regions && b < 256; b++)
        if (v->regions->name[b][0])
            snprintf(t->region_of[b], KL_RT_NAME_MAX + 1, "%s",
                     v->regions->name[b]);
    t->servers = calloc(v->nservers ? v->nservers : 1, sizeof *t->servers);
    kl_status st = t->servers ? KL_OK : KL_E_NOMEM;
    for (size_t i = 0; i < v->nservers && st == KL_OK; i++) {
        const kl_fleet_server *fs = &v->servers[i];
        if (!eligible(fs, self) || !fs->seal_kem)
            continue; /* opens no sealed key */
        st = fill_server(t, fs);
        if (st == KL_OK)
            t->servers[t->nservers++].on_demand = true;
    }
    if (st != KL_OK) {
        kl_rt_table_free(t);
        kl_errf(err, errlen, "fleet directory: out of memory");
        return st;
    }
    *out = t;
    return KL_OK;
}
