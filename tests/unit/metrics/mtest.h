/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers for the metrics tests: scrape to a string, find exact lines. */
#ifndef KL_MTEST_H
#define KL_MTEST_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metrics.h"

/* The whole scrape, NUL-terminated; the caller frees it. */
static inline char *mt_scrape(kl_metrics *m)
{
    size_t len = 0;
    char *s = kl_metrics_render(m, &len);
    assert_non_null(s);
    assert_int_equal(strlen(s), len);
    return s;
}

/* Whether text holds exactly this line (between line feeds). */
static inline bool mt_has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)); p++)
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return true;
    return false;
}

#define mt_assert_line(text, ...)                                              \
    do {                                                                       \
        char mt_l_[1024];                                                      \
        snprintf(mt_l_, sizeof mt_l_, __VA_ARGS__);                            \
        if (!mt_has_line((text), mt_l_))                                       \
            fail_msg("missing line: %s", mt_l_);                               \
    } while (0)

#define mt_assert_no_line(text, ...)                                           \
    do {                                                                       \
        char mt_l_[1024];                                                      \
        snprintf(mt_l_, sizeof mt_l_, __VA_ARGS__);                            \
        if (mt_has_line((text), mt_l_))                                        \
            fail_msg("unexpected line: %s", mt_l_);                            \
    } while (0)

/* The value of the sample line that starts with prefix ("name{...} "). */
static inline double mt_value(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = text; (p = strstr(p, prefix)); p++)
        if (p == text || p[-1] == '\n')
            return strtod(p + n, NULL);
    fail_msg("no sample %s", prefix);
    return -1;
}

/* The reference's bucket boundaries, written out independently of the
 * module's own table (protocol P6). */
static const char *const mt_le[16] = {
    "0.0001", "0.0002", "0.0004", "0.0008", "0.0016", "0.0032",
    "0.0064", "0.0128", "0.0256", "0.0512", "0.1024", "0.2048",
    "0.4096", "0.8192", "1.6384", "+Inf",
};

/* Checks a whole histogram child: cumulative counts per le, _sum, _count.
 * labels: `a="b",` pairs with the trailing comma, or "". */
static inline void mt_assert_hist(const char *text, const char *name,
                                  const char *labels, const unsigned cum[16],
                                  const char *sum)
{
    for (int i = 0; i < 16; i++)
        mt_assert_line(text, "%s_bucket{%sle=\"%s\"} %u", name, labels,
                       mt_le[i], cum[i]);
    size_t n = strlen(labels);
    if (n) {
        mt_assert_line(text, "%s_sum{%.*s} %s", name, (int)n - 1, labels, sum);
        mt_assert_line(text, "%s_count{%.*s} %u", name, (int)n - 1, labels,
                       cum[15]);
    } else {
        mt_assert_line(text, "%s_sum %s", name, sum);
        mt_assert_line(text, "%s_count %u", name, cum[15]);
    }
}

#endif
