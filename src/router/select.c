/* SPDX-License-Identifier: Apache-2.0 */
/* Which remotes may serve a request, best first. Order:
 * 1. healthy before unhealthy (a remote whose last probe or request
 *    failed is tried only after every healthy one);
 * 2. measured latency (EWMA of pings and live requests): two latencies
 *    within latency_tolerance_pct of each other tie, so jitter does not
 *    flap traffic between equal remotes; a remote not measured yet comes
 *    after measured ones;
 * 3. priority (lower first), then name, so the order is deterministic.
 * The reference client sorted by latency with a comparator that never
 * reordered anything; kl_rt_order is unit-tested on exactly that. */
#include <string.h>

#include "router/router_int.h"

/* < 0 when a goes before b. */
static int compare(const kl_remote *a, const kl_remote *b, int tol_pct)
{
    if (a->up != b->up)
        return a->up ? -1 : 1;
    if (a->measured != b->measured)
        return a->measured ? -1 : 1;
    if (a->measured) {
        double lo = a->ewma_ns < b->ewma_ns ? a->ewma_ns : b->ewma_ns;
        double diff = a->ewma_ns - b->ewma_ns;
        double tie = lo * tol_pct / 100.0;
        if (tie < 100000.0)
            tie = 100000.0; /* 0.1 ms: below that, priority decides */
        if (diff > tie || diff < -tie)
            return diff < 0 ? -1 : 1;
    }
    if (a->priority != b->priority)
        return a->priority < b->priority ? -1 : 1;
    return strcmp(a->name, b->name);
}

void kl_rt_order(kl_remote **rms, size_t n, int tolerance_pct)
{
    /* insertion sort: a handful of candidates, and it is stable */
    for (size_t i = 1; i < n; i++) {
        kl_remote *x = rms[i];
        size_t j = i;
        while (j > 0 && compare(x, rms[j - 1], tolerance_pct) < 0) {
            rms[j] = rms[j - 1];
            j--;
        }
        rms[j] = x;
    }
}

typedef struct cand {
    const kl_rt_table *t;
    const kl_rt_key *k;
    bool has_compliance;
    uint8_t compliance;
    kl_remote *const *tried;
    size_t ntried;
    kl_remote *all[256];
    size_t n;
} cand;

static bool add_candidate(void *arg, const kl_rt_server *s)
{
    cand *c = arg;
    kl_remote *rm = s->remote;
    if (!rm || !kl_rt_allowed(c->t, c->k, s, c->has_compliance, c->compliance))
        return true;
    bool seen = false;
    for (size_t j = 0; j < c->ntried; j++)
        seen |= c->tried[j] == rm;
    for (size_t j = 0; j < c->n; j++) /* two of its sets hold the key */
        seen |= c->all[j] == rm;
    if (!seen)
        c->all[c->n++] = rm;
    return c->n < 256;
}

size_t kl_rt_candidates(const kl_router *r, const kl_rt_table *t,
                        const kl_rt_key *k, bool has_compliance,
                        uint8_t compliance, kl_remote *const *tried,
                        size_t ntried, kl_remote **out, size_t max)
{
    /* all of them first, then the order, then the best max */
    cand c = {.t = t,
              .k = k,
              .has_compliance = has_compliance,
              .compliance = compliance,
              .tried = tried,
              .ntried = ntried};
    kl_rt_each_server(t, k, add_candidate, &c);
    kl_rt_order(c.all, c.n, r ? r->o.latency_tolerance_pct : 10);
    size_t n = c.n > max ? max : c.n;
    memcpy(out, c.all, n * sizeof *out);
    return n;
}

size_t kl_rt_candidates_sealed(const kl_router *r, const kl_rt_table *t,
                               const uint32_t *servers, size_t nservers,
                               bool has_compliance, uint8_t compliance,
                               kl_remote *const *tried, size_t ntried,
                               kl_remote **out, size_t max)
{
    /* the policy is the key's only constraint besides the request's
     * compliance region: judged already, so the key admits any region */
    static const kl_rt_key any = {.any_region = true};
    cand c = {.t = t,
              .k = &any,
              .has_compliance = has_compliance,
              .compliance = compliance,
              .tried = tried,
              .ntried = ntried};
    for (size_t i = 0; i < nservers && servers[i] < t->nservers; i++)
        if (!add_candidate(&c, &t->servers[servers[i]]))
            break;
    kl_rt_order(c.all, c.n, r ? r->o.latency_tolerance_pct : 10);
    size_t n = c.n > max ? max : c.n;
    memcpy(out, c.all, n * sizeof *out);
    return n;
}
