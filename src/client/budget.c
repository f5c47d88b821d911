/* SPDX-License-Identifier: Apache-2.0 */
/* Retry budget and reconnect backoff: see budget.h. */
#include "client/budget.h"

#include <string.h>

void kl_budget_init(kl_retry_budget *b, uint32_t ratio_pct)
{
    memset(b, 0, sizeof *b);
    b->ratio_pct = ratio_pct;
}

/* The bucket for now, emptied first when it last counted an older second.
 * Epochs are stored +1 so that a zeroed bucket never looks current. */
static unsigned bucket(kl_retry_budget *b, uint64_t now_ns)
{
    uint64_t sec = now_ns / KL_BUDGET_BUCKET_NS + 1;
    unsigned i = (unsigned)(sec % KL_BUDGET_BUCKETS);
    if (b->epoch[i] != sec) {
        b->epoch[i] = sec;
        b->requests[i] = 0;
        b->retries[i] = 0;
    }
    return i;
}

void kl_budget_request(kl_retry_budget *b, uint64_t now_ns)
{
    unsigned i = bucket(b, now_ns);
    if (b->requests[i] < UINT32_MAX)
        b->requests[i]++;
}

void kl_budget_window(const kl_retry_budget *b, uint64_t now_ns,
                      uint64_t *requests, uint64_t *retries)
{
    uint64_t sec = now_ns / KL_BUDGET_BUCKET_NS + 1;
    *requests = *retries = 0;
    for (unsigned i = 0; i < KL_BUDGET_BUCKETS; i++) {
        /* only buckets of the last 10 seconds count */
        if (b->epoch[i] && b->epoch[i] + KL_BUDGET_BUCKETS > sec) {
            *requests += b->requests[i];
            *retries += b->retries[i];
        }
    }
}

bool kl_budget_try_retry(kl_retry_budget *b, uint64_t now_ns)
{
    uint64_t req, ret;
    kl_budget_window(b, now_ns, &req, &ret);
    /* (ret + 1) / req <= ratio/100, in integers */
    if ((ret + 1) * 100 > req * b->ratio_pct)
        return false;
    unsigned i = bucket(b, now_ns);
    if (b->retries[i] < UINT32_MAX)
        b->retries[i]++;
    return true;
}

uint64_t kl_backoff_ns(unsigned failures, uint64_t base_ns, uint64_t max_ns,
                       uint64_t rnd)
{
    uint64_t d = base_ns ? base_ns : 1;
    for (unsigned i = 1; i < failures && d < max_ns; i++)
        d *= 2;
    if (d > max_ns)
        d = max_ns;
    uint64_t half = d / 2;
    return d - half + (half ? rnd % (half + 1) : 0);
}
