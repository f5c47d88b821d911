/* SPDX-License-Identifier: Apache-2.0 */
#ifndef KL_CORE_TIME_H
#define KL_CORE_TIME_H

#include <stdint.h>
#include <time.h>

/* Monotonic clock in nanoseconds. */
static inline uint64_t kl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t kl_now_ms(void)
{
    return kl_now_ns() / 1000000ull;
}

#endif
