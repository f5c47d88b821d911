/* SPDX-License-Identifier: Apache-2.0 */
/* Building and querying a routing table (table.h). The YAML reader adds
 * servers, key sets, (server, SKI) pairs and key policies in any order;
 * kl_rt_build_finish sorts the pairs by SKI and folds them into one entry
 * per key with its servers and the intersection of every policy that
 * names it (the key's own and those of the sets it belongs to), so a
 * lookup is one binary search. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/table_int.h"

/* Grows *arr (of elem-byte items) to hold at least n + 1. */
static kl_status grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return KL_OK;
    size_t nc = *cap ? *cap * 2 : 8;
    void *p = realloc(*arr, nc * elem);
    KL_ENSURE(p != NULL, KL_E_NOMEM);
    *arr = p;
    *cap = nc;
    return KL_OK;
}

kl_status kl_rt_build_init(kl_rt_build *b, const char *path, char *err,
                           size_t errlen, kl_rt_resolve_fn resolve,
                           void *resolve_arg)
{
    memset(b, 0, sizeof *b);
    b->path = path ? path : "(routing table)";
    b->err = err;
    b->errlen = errlen;
    b->resolve = resolve;
    b->resolve_arg = resolve_arg;
    b->t = calloc(1, sizeof *b->t);
    KL_ENSURE(b->t != NULL, KL_E_NOMEM);
    /* protocol P9: 0x01 is FedRAMP High unless the table says otherwise */
    snprintf(b->t->region_of[1], KL_RT_NAME_MAX + 1, "fedramp-high");
    return KL_OK;
}

static void free_state(kl_rt_build *b)
{
    for (size_t i = 0; i < b->nsets; i++) {
        free(b->sets[i].skis);
        free(b->sets[i].regions.names);
    }
    free(b->sets);
    for (size_t i = 0; i < b->npolicies; i++)
        free(b->policies[i].regions.names);
    free(b->policies);
    free(b->pairs);
    b->sets = NULL;
    b->policies = NULL;
    b->pairs = NULL;
}

void kl_rt_build_abort(kl_rt_build *b)
{
    free_state(b);
    kl_rt_table_free(b->t);
    b->t = NULL;
}

void kl_rt_table_free(kl_rt_table *t)
{
    if (!t)
        return;
    /* a shared key index goes with the last table using it */
    if (t->refs && __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    kl_rt_table_free(t->idx);
    for (size_t i = 0; i < t->nsets; i++)
        free(t->set_servers[i]);
    free(t->set_servers);
    free(t->set_nservers);
    for (size_t i = 0; i < t->nkeys; i++) {
        free(t->keys[i].servers);
        free(t->keys[i].regions);
    }
    free(t->keys);
    free(t->servers);
    free(t->sattrs);
    free(t);
}

kl_status kl_rt_table_add_sattr(kl_rt_table *t, const char *name,
                                const char *value)
{
    KL_GUARD(grow((void **)&t->sattrs, &t->sattrs_cap, t->nsattrs,
                  sizeof *t->sattrs));
    kl_rt_sattr *a = &t->sattrs[t->nsattrs++];
    snprintf(a->name, sizeof a->name, "%s", name);
    snprintf(a->value, sizeof a->value, "%s", value);
    return KL_OK;
}

kl_rt_set *kl_rt_build_find_set(kl_rt_build *b, const char *name)
{
    for (size_t i = 0; name && i < b->nsets; i++)
        if (!strcmp(b->sets[i].name, name))
            return &b->sets[i];
    return NULL;
}

kl_status kl_rt_build_add_set(kl_rt_build *b, const char *name, kl_rt_set **out)
{
    KL_GUARD(grow((void **)&b->sets, &b->sets_cap, b->nsets, sizeof *b->sets));
    kl_rt_set *s = &b->sets[b->nsets++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    *out = s;
    return KL_OK;
}

kl_status kl_rt_build_set_ski(kl_rt_build *b, kl_rt_set *s,
                              const uint8_t ski[KL_SKI_LEN])
{
    (void)b;
    KL_GUARD(grow((void **)&s->skis, &s->cap, s->nskis, sizeof *s->skis));
    memcpy(s->skis[s->nskis++], ski, KL_SKI_LEN);
    return KL_OK;
}

static kl_status copy_regions(kl_rt_regions *dst, const kl_rt_regions *src)
{
    *dst = *src;
    dst->names = NULL;
    if (!src->n)
        return KL_OK;
    dst->names = malloc(src->n * sizeof *dst->names);
    KL_ENSURE(dst->names != NULL, KL_E_NOMEM);
    memcpy(dst->names, src->names, src->n * sizeof *dst->names);
    return KL_OK;
}

kl_status kl_rt_build_key_policy(kl_rt_build *b, const uint8_t ski[KL_SKI_LEN],
                                 const kl_rt_regions *r)
{
    KL_GUARD(grow((void **)&b->policies, &b->policies_cap, b->npolicies,
                  sizeof *b->policies));
    kl_rt_policy *p = &b->policies[b->npolicies];
    memcpy(p->ski, ski, KL_SKI_LEN);
    KL_GUARD(copy_regions(&p->regions, r));
    b->npolicies++;
    return KL_OK;
}

bool kl_rt_build_find_server_name(kl_rt_build *b, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < b->t->nservers; i++) {
        const char *s = b->t->servers[i].name;
        /* dns: expansions are "name#1", "name#2"... */
        if (!strncmp(s, name, n) && (s[n] == 0 || s[n] == '#'))
            return true;
    }
    return false;
}

kl_status kl_rt_build_add_server(kl_rt_build *b, const kl_rt_server *s)
{
    if (b->t->nservers >= KL_RT_MAX_SERVERS) {
        snprintf(b->err, b->errlen,
                 "%s: more than %u servers; split the fleet behind shared "
                 "egress routers",
                 b->path, KL_RT_MAX_SERVERS);
        return KL_E_CONFIG;
    }
    KL_GUARD(grow((void **)&b->t->servers, &b->server_cap, b->t->nservers,
                  sizeof *b->t->servers));
    b->t->servers[b->t->nservers++] = *s;
    return KL_OK;
}

kl_status kl_rt_build_add_dns(kl_rt_build *b, const kl_rt_server *s,
                              size_t *count)
{
    char addrs[KL_RT_MAX_DNS_ADDRS][64];
    *count = 0;
    if (!b->resolve)
        return KL_OK;
    size_t n = b->resolve(s->host, addrs, KL_RT_MAX_DNS_ADDRS, b->resolve_arg);
    for (size_t i = 0; i < n && i < KL_RT_MAX_DNS_ADDRS; i++) {
        kl_rt_server e = *s;
        snprintf(e.name, sizeof e.name, "%.*s#%zu", KL_RT_NAME_MAX, s->name,
                 i + 1);
        size_t hl = strnlen(addrs[i], sizeof addrs[i] - 1);
        memcpy(e.host, addrs[i], hl);
        e.host[hl] = 0;
        KL_GUARD(kl_rt_build_add_server(b, &e));
        b->t->ndns++;
        (*count)++;
    }
    return KL_OK;
}

kl_status kl_rt_build_serve_ski(kl_rt_build *b, size_t first, size_t count,
                                const uint8_t ski[KL_SKI_LEN])
{
    for (size_t i = first; i < first + count; i++) {
        KL_GUARD(grow((void **)&b->pairs, &b->pairs_cap, b->npairs,
                      sizeof *b->pairs));
        memcpy(b->pairs[b->npairs].ski, ski, KL_SKI_LEN);
        b->pairs[b->npairs++].server = (uint32_t)i;
    }
    return KL_OK;
}

kl_status kl_rt_build_serve_set(kl_rt_build *b, size_t first, size_t count,
                                const kl_rt_set *s)
{
    for (size_t k = 0; k < s->nskis; k++)
        KL_GUARD(kl_rt_build_serve_ski(b, first, count, s->skis[k]));
    return KL_OK;
}

static int cmp_pair(const void *a, const void *b)
{
    const kl_rt_pair *x = a, *y = b;
    int c = memcmp(x->ski, y->ski, KL_SKI_LEN);
    if (c)
        return c;
    return x->server < y->server ? -1 : x->server > y->server;
}

static int cmp_key(const void *a, const void *b)
{
    return memcmp(((const kl_rt_key *)a)->ski, ((const kl_rt_key *)b)->ski,
                  KL_SKI_LEN);
}

/* Narrows k's allowed regions to those also in r. */
static kl_status intersect(kl_rt_key *k, const kl_rt_regions *r)
{
    if (!r->set)
        return KL_OK;
    if (k->any_region) {
        k->any_region = false;
        k->regions = malloc((r->n ? r->n : 1) * sizeof *k->regions);
        KL_ENSURE(k->regions != NULL, KL_E_NOMEM);
        for (size_t i = 0; i < r->n; i++) {
            bool dup = false;
            for (size_t j = 0; j < k->nregions; j++)
                dup |= !strcmp(k->regions[j], r->names[i]);
            if (!dup)
                memcpy(k->regions[k->nregions++], r->names[i],
                       sizeof *k->regions);
        }
        return KL_OK;
    }
    size_t keep = 0;
    for (size_t i = 0; i < k->nregions; i++) {
        bool in = false;
        for (size_t j = 0; j < r->n; j++)
            in |= !strcmp(k->regions[i], r->names[j]);
        if (in)
            memmove(k->regions[keep++], k->regions[i], sizeof *k->regions);
    }
    k->nregions = keep;
    return KL_OK;
}

static kl_rt_key *find_mut(kl_rt_table *t, const uint8_t ski[KL_SKI_LEN])
{
    kl_rt_key probe;
    memcpy(probe.ski, ski, KL_SKI_LEN);
    return bsearch(&probe, t->keys, t->nkeys, sizeof *t->keys, cmp_key);
}

kl_status kl_rt_build_finish(kl_rt_build *b, kl_rt_table **out)
{
    kl_rt_table *t = b->t;
    kl_status st = KL_OK;
    *out = NULL;
    if (b->npairs) /* qsort on a NULL array is undefined, even empty */
        qsort(b->pairs, b->npairs, sizeof *b->pairs, cmp_pair);
    /* one key per distinct SKI that some server serves */
    size_t nkeys = 0;
    for (size_t i = 0; i < b->npairs; i++)
        nkeys += i == 0 ||
                 memcmp(b->pairs[i].ski, b->pairs[i - 1].ski, KL_SKI_LEN) != 0;
    t->keys = calloc(nkeys ? nkeys : 1, sizeof *t->keys);
    if (!t->keys) {
        st = KL_E_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < b->npairs;) {
        size_t j = i;
        while (j < b->npairs &&
               !memcmp(b->pairs[j].ski, b->pairs[i].ski, KL_SKI_LEN))
            j++;
        kl_rt_key *k = &t->keys[t->nkeys++];
        memcpy(k->ski, b->pairs[i].ski, KL_SKI_LEN);
        k->any_region = true;
        k->servers = malloc((j - i) * sizeof *k->servers);
        if (!k->servers) {
            st = KL_E_NOMEM;
            goto out;
        }
        for (size_t m = i; m < j; m++) /* sorted: drop repeats */
            if (m == i || b->pairs[m].server != b->pairs[m - 1].server)
                k->servers[k->nservers++] = b->pairs[m].server;
        i = j;
    }
    /* policies of the sets a key belongs to, then the key's own */
    for (size_t s = 0; s < b->nsets && st == KL_OK; s++)
        for (size_t i = 0; i < b->sets[s].nskis && st == KL_OK; i++) {
            kl_rt_key *k = find_mut(t, b->sets[s].skis[i]);
            if (k)
                st = intersect(k, &b->sets[s].regions);
        }
    for (size_t p = 0; p < b->npolicies && st == KL_OK; p++) {
        kl_rt_key *k = find_mut(t, b->policies[p].ski);
        if (k)
            st = intersect(k, &b->policies[p].regions);
    }
out:
    free_state(b);
    if (st != KL_OK) {
        if (st == KL_E_NOMEM)
            snprintf(b->err, b->errlen, "%s: out of memory", b->path);
        kl_rt_table_free(t);
        b->t = NULL;
        return st;
    }
    b->t = NULL;
    *out = t;
    return KL_OK;
}

const kl_rt_key *kl_rt_find(const kl_rt_table *t, const uint8_t ski[KL_SKI_LEN])
{
    if (t && t->idx)
        t = t->idx;
    if (!t || !t->nkeys)
        return NULL;
    return find_mut((kl_rt_table *)t, ski);
}

bool kl_rt_allowed(const kl_rt_table *t, const kl_rt_key *k,
                   const kl_rt_server *s, bool has_compliance,
                   uint8_t compliance)
{
    if (has_compliance) {
        /* protocol P9: an unmapped byte names no region, so nothing
         * satisfies it */
        const char *want = t->region_of[compliance];
        if (!want[0] || strcmp(want, s->region) != 0)
            return false;
    }
    if (k->any_region)
        return true;
    for (size_t i = 0; i < k->nregions; i++)
        if (!strcmp(k->regions[i], s->region))
            return true;
    return false;
}

void kl_rt_each_server(const kl_rt_table *t, const kl_rt_key *k,
                       bool (*fn)(void *arg, const kl_rt_server *s), void *arg)
{
    for (size_t i = 0; i < k->nservers; i++) {
        uint32_t x = k->servers[i];
        if (!t->idx) {
            if (!fn(arg, &t->servers[x]))
                return;
            continue;
        }
        for (uint32_t j = 0; x < t->nsets && j < t->set_nservers[x]; j++)
            if (!fn(arg, &t->servers[t->set_servers[x][j]]))
                return;
    }
}

size_t kl_rt_nkeys(const kl_rt_table *t)
{
    return t->idx ? t->idx->nkeys : t->nkeys;
}

bool kl_rt_same_servers(const kl_rt_table *a, const kl_rt_table *b)
{
    if (!a || !b || a->nservers != b->nservers)
        return false;
    for (size_t i = 0; i < a->nservers; i++) {
        const kl_rt_server *x = &a->servers[i], *y = &b->servers[i];
        if (strcmp(x->name, y->name) || strcmp(x->host, y->host) ||
            x->port != y->port)
            return false;
    }
    return true;
}
