/* SPDX-License-Identifier: Apache-2.0 */
/* Go-style durations: see godur.h. */
#include "godur.h"
#include "core/time.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct unit {
    const char *name;
    uint64_t ns;
} unit;

/* longest names first, so "ms" is not read as "m" followed by "s" */
static const unit units[] = {
    {"ns", 1ull},
    {"us", 1000ull},
    {"\xc2\xb5s", 1000ull}, /* U+00B5 micro sign */
    {"\xce\xbcs", 1000ull}, /* U+03BC Greek mu */
    {"ms", KL_NS_PER_MS},
    {"s", KL_NS_PER_S},
    {"m", 60 * KL_NS_PER_S},
    {"h", 3600 * KL_NS_PER_S},
};

static const unit *unit_at(const char *s, size_t *len)
{
    const unit *best = NULL;
    size_t bl = 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        size_t l = strlen(units[i].name);
        if (l > bl && !strncmp(s, units[i].name, l)) {
            best = &units[i];
            bl = l;
        }
    }
    *len = bl;
    return best;
}

kl_status kl_dur_parse(const char *s, uint64_t *ns)
{
    KL_ENSURE(s && *s, KL_E_BAD_VALUE);
    if (!strcmp(s, "0")) {
        *ns = 0;
        return KL_OK;
    }
    long double total = 0;
    while (*s) {
        uint64_t whole = 0;
        long double frac = 0, scale = 1;
        bool digits = false;
        while (*s >= '0' && *s <= '9') {
            KL_ENSURE(whole < UINT64_MAX / 10 - 10, KL_E_BAD_VALUE);
            whole = whole * 10 + (uint64_t)(*s++ - '0');
            digits = true;
        }
        if (*s == '.') {
            s++;
            while (*s >= '0' && *s <= '9') {
                scale /= 10;
                frac += scale * (*s++ - '0');
                digits = true;
            }
        }
        KL_ENSURE(digits, KL_E_BAD_VALUE);
        size_t ul;
        const unit *u = unit_at(s, &ul);
        KL_ENSURE(u != NULL, KL_E_BAD_VALUE); /* a unit is required */
        s += ul;
        total += ((long double)whole + frac) * (long double)u->ns;
        KL_ENSURE(total < 9.2e18L, KL_E_BAD_VALUE);
    }
    *ns = (uint64_t)(total + 0.5L);
    return KL_OK;
}

/* v / div with up to `digits` decimals, trailing zeros trimmed. */
static int put_fixed(char *out, size_t cap, uint64_t v, uint64_t div,
                     int digits)
{
    uint64_t ip = v / div, fp = v % div;
    if (!fp)
        return snprintf(out, cap, "%llu", (unsigned long long)ip);
    char f[24];
    snprintf(f, sizeof f, "%0*llu", digits, (unsigned long long)fp);
    size_t n = strlen(f);
    while (n && f[n - 1] == '0')
        f[--n] = 0;
    return snprintf(out, cap, "%llu.%s", (unsigned long long)ip, f);
}

char *kl_dur_format(uint64_t ns, char *out, size_t cap)
{
    char num[48];
    if (!cap)
        return out;
    if (ns == 0) {
        snprintf(out, cap, "0s");
    } else if (ns < KL_NS_PER_US) {
        snprintf(out, cap, "%lluns", (unsigned long long)ns);
    } else if (ns < KL_NS_PER_MS) {
        put_fixed(num, sizeof num, ns, KL_NS_PER_US, 3);
        snprintf(out, cap, "%s\xc2\xb5s", num);
    } else if (ns < KL_NS_PER_S) {
        put_fixed(num, sizeof num, ns, KL_NS_PER_MS, 6);
        snprintf(out, cap, "%sms", num);
    } else {
        uint64_t h = ns / (3600 * KL_NS_PER_S);
        uint64_t m = ns / (60 * KL_NS_PER_S) % 60;
        put_fixed(num, sizeof num, ns % (60 * KL_NS_PER_S), KL_NS_PER_S, 9);
        if (h)
            snprintf(out, cap, "%lluh%llum%ss", (unsigned long long)h,
                     (unsigned long long)m, num);
        else if (m)
            snprintf(out, cap, "%llum%ss", (unsigned long long)m, num);
        else
            snprintf(out, cap, "%ss", num);
    }
    return out;
}
