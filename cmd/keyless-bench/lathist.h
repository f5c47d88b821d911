/* SPDX-License-Identifier: Apache-2.0 */
/* A latency histogram for the bench and for anyone who needs percentiles
 * of many samples cheaply: log-linear buckets (64 per power of two, so a
 * percentile is off by at most 1/64 = 1.6%), fixed size, no allocation,
 * O(1) to record, mergeable across threads. Values are nanoseconds. */
#ifndef KL_BENCH_LATHIST_H
#define KL_BENCH_LATHIST_H

#include <stdint.h>

#define KL_LATHIST_SUB_BITS 6u
#define KL_LATHIST_SUB (1u << KL_LATHIST_SUB_BITS)
/* values up to 2^44 ns (about 4.9 hours) are told apart; larger ones
 * land in the last bucket */
#define KL_LATHIST_BUCKETS ((44u - KL_LATHIST_SUB_BITS + 1u) * KL_LATHIST_SUB)

typedef struct kl_lathist {
    uint64_t count;
    uint64_t sum; /* of the values, for the mean */
    uint64_t min, max;
    uint64_t b[KL_LATHIST_BUCKETS];
} kl_lathist;

void kl_lathist_init(kl_lathist *h);
void kl_lathist_record(kl_lathist *h, uint64_t ns);
/* Adds every sample of src into dst. */
void kl_lathist_merge(kl_lathist *dst, const kl_lathist *src);
/* The value below which a fraction q (0..1) of the samples lie: the upper
 * edge of the bucket holding it, never above the largest sample. 0 when
 * empty. */
uint64_t kl_lathist_quantile(const kl_lathist *h, double q);
uint64_t kl_lathist_mean(const kl_lathist *h);
/* The smallest and largest value bucket idx holds (b[idx]). */
void kl_lathist_bucket_bounds(unsigned idx, uint64_t *lo, uint64_t *hi);

#endif
