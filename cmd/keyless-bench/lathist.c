/* SPDX-License-Identifier: Apache-2.0 */
/* Log-linear latency histogram: see lathist.h. */
#include "lathist.h"

#include <string.h>

void kl_lathist_init(kl_lathist *h)
{
    memset(h, 0, sizeof *h);
    h->min = UINT64_MAX;
}

/* Values below 2 * SUB have a bucket each; above, the exponent picks a
 * group of SUB buckets and the next SUB_BITS bits below the top one pick
 * the bucket within it. */
static unsigned bucket_of(uint64_t v)
{
    if (v < 2 * KL_LATHIST_SUB)
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= SUB_BITS + 1 */
    unsigned sub =
        (unsigned)(v >> (e - KL_LATHIST_SUB_BITS)) & (KL_LATHIST_SUB - 1);
    unsigned idx = (e - KL_LATHIST_SUB_BITS + 1) * KL_LATHIST_SUB + sub;
    return idx < KL_LATHIST_BUCKETS ? idx : KL_LATHIST_BUCKETS - 1;
}

/* The largest value that falls in bucket idx. */
static uint64_t bucket_top(unsigned idx)
{
    if (idx < 2 * KL_LATHIST_SUB)
        return idx;
    unsigned e = idx / KL_LATHIST_SUB + KL_LATHIST_SUB_BITS - 1;
    uint64_t sub = idx % KL_LATHIST_SUB;
    uint64_t lo = (1ull << e) | (sub << (e - KL_LATHIST_SUB_BITS));
    return lo + (1ull << (e - KL_LATHIST_SUB_BITS)) - 1;
}

void kl_lathist_record(kl_lathist *h, uint64_t ns)
{
    h->b[bucket_of(ns)]++;
    h->count++;
    h->sum += ns;
    if (ns < h->min)
        h->min = ns;
    if (ns > h->max)
        h->max = ns;
}

void kl_lathist_merge(kl_lathist *dst, const kl_lathist *src)
{
    for (unsigned i = 0; i < KL_LATHIST_BUCKETS; i++)
        dst->b[i] += src->b[i];
    dst->count += src->count;
    dst->sum += src->sum;
    if (src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
}

uint64_t kl_lathist_quantile(const kl_lathist *h, double q)
{
    if (!h->count)
        return 0;
    if (q <= 0)
        return h->min;
    uint64_t rank = (uint64_t)(q * (double)h->count + 0.5);
    if (rank < 1)
        rank = 1;
    if (rank >= h->count)
        return h->max;
    uint64_t seen = 0;
    for (unsigned i = 0; i < KL_LATHIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            uint64_t top = bucket_top(i);
            return top < h->max ? top : h->max;
        }
    }
    return h->max;
}

uint64_t kl_lathist_mean(const kl_lathist *h)
{
    return h->count ? h->sum / h->count : 0;
}

void kl_lathist_bucket_bounds(unsigned idx, uint64_t *lo, uint64_t *hi)
{
    *hi = bucket_top(idx);
    *lo = idx < 2 * KL_LATHIST_SUB
              ? idx
              : *hi + 1 - (1ull << (idx / KL_LATHIST_SUB - 1));
}
