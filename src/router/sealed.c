/* SPDX-License-Identifier: Apache-2.0 */
/* Sealed keys held elsewhere (docs/SEALING.md "keylessd and sealed
 * keys"; docs/ROUTING.md "Sealed keys"): which remotes may serve a sealed
 * key this server cannot open. The key's policy - its canonical text, as
 * the key store records it - names a class; per class the router keeps
 * the current table's servers that open sealed keys and whose attributes
 * satisfy the policy. A class is computed when first asked for and again,
 * with every other, when a table is installed: one evaluation per server
 * and class. So a request costs a hash of its policy text and one probe,
 * and a membership change (a new table) costs classes x servers, never
 * keys. The policy language is src/seal's, which the router may not
 * include: keylessd passes its parser and evaluator (kl_rt_policy_ops).
 * Everything here runs on the router thread. */
#include <stdlib.h>
#include <string.h>

#include "router/router_int.h"

/* At most this many policies are kept; past it the cache starts again
 * (a fleet has a handful of policies; this bounds a store of odd ones). */
#define KL_RT_MAX_PCLASSES 4096u

typedef struct pc_slot {
    kl_hslot h;
    kl_rt_pclass *c;
} pc_slot;

typedef struct pc_key {
    const char *text;
    size_t len;
} pc_key;

static uint64_t text_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static bool pc_eq(const void *slot, const void *key)
{
    const kl_rt_pclass *c = ((const pc_slot *)slot)->c;
    const pc_key *k = key;
    return c->len == k->len && !memcmp(c->text, k->text, k->len);
}

size_t kl_rt_eligible(const kl_rt_table *t, const kl_rt_policy_ops *ops,
                      const void *policy, uint32_t *out)
{
    size_t n = 0;
    if (!ops || !policy || !t)
        return 0;
    kl_rt_attr attrs[KL_RT_MAX_ATTRS + 1]; /* + the region (table_yaml.c) */
    for (size_t i = 0; i < t->nservers; i++) {
        const kl_rt_server *s = &t->servers[i];
        if (!s->sealing)
            continue; /* publishes no sealing key: opens nothing */
        size_t na = 0;
        for (uint32_t a = 0; a < s->nattrs && na < KL_RT_MAX_ATTRS + 1; a++) {
            const kl_rt_sattr *sa = &t->sattrs[s->attr_first + a];
            attrs[na++] = (kl_rt_attr){sa->name, sa->value};
        }
        if (ops->eval(policy, attrs, na))
            out[n++] = (uint32_t)i;
    }
    return n;
}

static kl_status compute(kl_router *r, kl_rt_pclass *c)
{
    const kl_rt_table *t = r->table;
    size_t ns = t ? t->nservers : 0;
    uint32_t *v = malloc((ns ? ns : 1) * sizeof *v);
    KL_ENSURE(v != NULL, KL_E_NOMEM);
    size_t n = kl_rt_eligible(t, r->o.policy_ops, c->policy, v);
    free(c->servers);
    c->servers = v;
    c->n = n;
    c->gen = r->table_gen;
    return KL_OK;
}

static void pclass_free(kl_router *r, kl_rt_pclass *c)
{
    if (c->policy && r->o.policy_ops)
        r->o.policy_ops->free(c->policy);
    free(c->servers);
    free(c->text);
    free(c);
}

void kl_rt_pclass_init(kl_router *r)
{
    kl_hmap_init(&r->pclasses, sizeof(pc_slot));
}

void kl_rt_pclass_free_all(kl_router *r)
{
    size_t it = 0;
    pc_slot *s;
    while ((s = kl_hmap_next(&r->pclasses, &it)))
        pclass_free(r, s->c);
    kl_hmap_free(&r->pclasses);
    kl_hmap_init(&r->pclasses, sizeof(pc_slot));
    atomic_store(&r->st.sealed_policies, 0);
}

kl_rt_pclass *kl_rt_pclass_get(kl_router *r, const char *text)
{
    pc_key k = {text, strlen(text)};
    uint64_t h = text_hash(text, k.len);
    pc_slot *s = kl_hmap_get_h(&r->pclasses, h, pc_eq, &k);
    if (s) {
        if (s->c->gen != r->table_gen && compute(r, s->c) != KL_OK)
            return NULL;
        return s->c;
    }
    if (kl_hmap_count(&r->pclasses) >= KL_RT_MAX_PCLASSES)
        kl_rt_pclass_free_all(r);
    kl_rt_pclass *c = calloc(1, sizeof *c);
    if (!c || !(c->text = malloc(k.len + 1))) {
        free(c);
        return NULL;
    }
    memcpy(c->text, text, k.len + 1);
    c->len = k.len;
    c->hash = h;
    if (r->o.policy_ops)
        c->policy = r->o.policy_ops->parse(text, k.len);
    bool found;
    if (compute(r, c) != KL_OK ||
        !(s = kl_hmap_put_h(&r->pclasses, h, pc_eq, &k, &found))) {
        pclass_free(r, c);
        return NULL;
    }
    s->c = c;
    atomic_store(&r->st.sealed_policies, (unsigned)kl_hmap_count(&r->pclasses));
    return c;
}

void kl_rt_pclass_refresh(kl_router *r)
{
    size_t it = 0;
    pc_slot *s;
    while ((s = kl_hmap_next(&r->pclasses, &it)))
        if (compute(r, s->c) != KL_OK)
            s->c->gen = r->table_gen - 1; /* stale: retried when asked */
}
