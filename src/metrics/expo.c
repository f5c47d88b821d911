/* SPDX-License-Identifier: Apache-2.0 */
/* The Prometheus text exposition format 0.0.4: a growable buffer, escaping,
 * float formatting and the histogram lines. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/time.h"
#include "metrics/internal.h"

static bool reserve(mx_buf *b, size_t more)
{
    if (b->oom)
        return false;
    if (b->len + more + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 16384;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true; /* reported once, by kl_metrics_render */
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

static void put_mem(mx_buf *b, const char *s, size_t n)
{
    if (!reserve(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void mx_puts(mx_buf *b, const char *s)
{
    put_mem(b, s, strlen(s));
}

void mx_printf(mx_buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        put_mem(b, small, (size_t)n);
        return;
    }
    if (!reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Text format 0.0.4: in label values \, " and line feed are escaped; in
 * HELP text only \ and line feed. */
static void put_escaped(mx_buf *b, const char *v, bool quote)
{
    for (const char *p = v; *p; p++) {
        if (*p == '\\')
            mx_puts(b, "\\\\");
        else if (*p == '\n')
            mx_puts(b, "\\n");
        else if (*p == '"' && quote)
            mx_puts(b, "\\\"");
        else
            put_mem(b, p, 1);
    }
}

void mx_put_label_value(mx_buf *b, const char *v)
{
    put_escaped(b, v, true);
}

void mx_family(mx_buf *b, const char *name, const char *type, const char *help)
{
    mx_printf(b, "# HELP %s ", name);
    put_escaped(b, help, false);
    mx_printf(b, "\n# TYPE %s %s\n", name, type);
}

void mx_put_double(mx_buf *b, double v)
{
    if (isnan(v)) {
        mx_puts(b, "NaN");
        return;
    }
    if (isinf(v)) {
        mx_puts(b, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    char s[40];
    /* Whole numbers (byte counts, timestamps) in plain digits. */
    if (v > -1e15 && v < 1e15 && v == (double)(long long)v) {
        snprintf(s, sizeof s, "%.0f", v);
        mx_puts(b, s);
        return;
    }
    /* Otherwise the fewest digits that read back as the same double, as
     * the reference's client library prints it ("0.25", not
     * "0.25000000000000000"). */
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, v);
        if (strtod(s, NULL) == v)
            break;
    }
    mx_puts(b, s);
}

void mx_hist_add(mx_hist_sum *dst, const mx_hist *src)
{
    for (int i = 0; i < MX_SLOTS; i++)
        dst->bucket[i] +=
            atomic_load_explicit(&src->bucket[i], memory_order_relaxed);
    dst->sum_ns += atomic_load_explicit(&src->sum_ns, memory_order_relaxed);
}

uint64_t mx_hist_count(const mx_hist_sum *h)
{
    uint64_t n = 0;
    for (int i = 0; i < MX_SLOTS; i++)
        n += h->bucket[i];
    return n;
}

void mx_put_hist(mx_buf *b, const char *name, const char *labels,
                 const mx_hist_sum *h)
{
    /* Buckets are cumulative: le="x" counts every observation <= x. */
    uint64_t cum = 0;
    for (int i = 0; i < KL_METRICS_BUCKETS; i++) {
        cum += h->bucket[i];
        mx_printf(b, "%s_bucket{%sle=\"%s\"} %llu\n", name, labels,
                  mx_le_texts[i], (unsigned long long)cum);
    }
    cum += h->bucket[KL_METRICS_BUCKETS];
    mx_printf(b, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels,
              (unsigned long long)cum);
    size_t n = strlen(labels);
    /* The same labels without the trailing comma, or none at all. */
    if (n)
        mx_printf(b, "%s_sum{%.*s} ", name, (int)(n - 1), labels);
    else
        mx_printf(b, "%s_sum ", name);
    mx_put_double(b, kl_ns_to_s_f(h->sum_ns));
    if (n)
        mx_printf(b, "\n%s_count{%.*s} %llu\n", name, (int)(n - 1), labels,
                  (unsigned long long)cum);
    else
        mx_printf(b, "\n%s_count %llu\n", name, (unsigned long long)cum);
}
