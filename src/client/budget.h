/* SPDX-License-Identifier: Apache-2.0 */
/* The two pieces of arithmetic that keep a client from making an outage
 * worse (client issue: "the retry storm"), pure so they can be tested
 * without a clock or sockets:
 * - the retry budget: retries may add at most a fraction (10%) of the
 *   requests callers made over a sliding window (10 s, in 1 s buckets);
 * - reconnect backoff: exponential, capped, with jitter so that clients
 *   cut off together do not all come back in the same millisecond. */
#ifndef KL_CLIENT_BUDGET_H
#define KL_CLIENT_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

#include "core/time.h"

#define KL_BUDGET_BUCKETS 10u
#define KL_BUDGET_BUCKET_NS KL_NS_PER_S /* 10 x 1 s = the 10 s window */

typedef struct kl_retry_budget {
    uint64_t epoch[KL_BUDGET_BUCKETS]; /* which second a bucket counts */
    uint32_t requests[KL_BUDGET_BUCKETS];
    uint32_t retries[KL_BUDGET_BUCKETS];
    uint32_t ratio_pct; /* retries allowed per 100 requests */
} kl_retry_budget;

/* ratio_pct: 10 for the "at most 10% extra requests". */
void kl_budget_init(kl_retry_budget *b, uint32_t ratio_pct);
/* A caller's request (first attempt) at time now_ns. */
void kl_budget_request(kl_retry_budget *b, uint64_t now_ns);
/* Asks to retry once at now_ns: true (and counted) when the retries in the
 * window, this one included, stay within ratio_pct of the requests. */
bool kl_budget_try_retry(kl_retry_budget *b, uint64_t now_ns);
/* Sums over the window ending at now_ns (tests, stats). */
void kl_budget_window(const kl_retry_budget *b, uint64_t now_ns,
                      uint64_t *requests, uint64_t *retries);

/* Delay before reconnect attempt number `failures` (1 = after the first
 * failure): base * 2^(failures-1) capped at max, then "equal jitter" -
 * half of it fixed, half uniformly random from rnd (any 64-bit value), so
 * the result is in [d/2, d]. */
uint64_t kl_backoff_ns(unsigned failures, uint64_t base_ns, uint64_t max_ns,
                       uint64_t rnd);

#endif
