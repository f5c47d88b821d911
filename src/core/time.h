/* SPDX-License-Identifier: Apache-2.0 */
/* Clocks and time units. Times inside keylessd are uint64_t nanoseconds
 * of CLOCK_MONOTONIC unless a name says otherwise; the constants and
 * conversions below replace bare 1000000 / 1e9 literals, so that a reader
 * sees which unit a number is in. */
#ifndef KL_CORE_TIME_H
#define KL_CORE_TIME_H

#include <stdint.h>
#include <time.h>

#define KL_NS_PER_US 1000ull
#define KL_NS_PER_MS 1000000ull
#define KL_NS_PER_S 1000000000ull
#define KL_US_PER_S 1000000ull
#define KL_MS_PER_S 1000ull

static inline uint64_t kl_ms_to_ns(uint64_t ms)
{
    return ms * KL_NS_PER_MS;
}

static inline uint64_t kl_s_to_ns(uint64_t s)
{
    return s * KL_NS_PER_S;
}

/* For reports: nanoseconds as fractional milliseconds or seconds. */
static inline double kl_ns_to_ms_f(uint64_t ns)
{
    return (double)ns / (double)KL_NS_PER_MS;
}

static inline double kl_ns_to_s_f(uint64_t ns)
{
    return (double)ns / (double)KL_NS_PER_S;
}

static inline uint64_t kl_timespec_to_ns(const struct timespec *ts)
{
    return (uint64_t)ts->tv_sec * KL_NS_PER_S + (uint64_t)ts->tv_nsec;
}

static inline struct timespec kl_ns_to_timespec(uint64_t ns)
{
    return (struct timespec){.tv_sec = (time_t)(ns / KL_NS_PER_S),
                             .tv_nsec = (long)(ns % KL_NS_PER_S)};
}

/* Monotonic clock in nanoseconds. */
static inline uint64_t kl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return kl_timespec_to_ns(&ts);
}

static inline uint64_t kl_now_ms(void)
{
    return kl_now_ns() / KL_NS_PER_MS;
}

#endif
