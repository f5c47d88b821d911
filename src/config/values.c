/* SPDX-License-Identifier: Apache-2.0 */
/* Value parsers shared by the file, the environment and the flags: one
 * definition of what "10s" or "yes" means, and one wording of each error. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/internal.h"
#include "core/time.h"

kl_status kl_cfg_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kl_verrf(err, errlen, fmt, ap);
    va_end(ap);
    return KL_E_CONFIG;
}

void kl_cfg_warn(kl_config *cfg, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    char **w = realloc(cfg->warnings, (cfg->nwarnings + 1) * sizeof *w);
    if (!w)
        return;
    cfg->warnings = w;
    if ((w[cfg->nwarnings] = strdup(line)) != NULL)
        cfg->nwarnings++;
}

kl_status kl_cfg_collect(kl_config *cfg, kl_status st, const char *err)
{
    if (st != KL_E_CONFIG || !cfg->collect_errors)
        return st;
    char **e = realloc(cfg->errors, (cfg->nerrors + 1) * sizeof *e);
    if (!e)
        return KL_E_NOMEM;
    cfg->errors = e;
    if ((e[cfg->nerrors] = strdup(err)) == NULL)
        return KL_E_NOMEM;
    cfg->nerrors++;
    return KL_OK;
}

kl_status kl_cfg_add_store(kl_config *cfg, kl_store_kind kind, const char *path)
{
    kl_store_cfg *s = realloc(cfg->stores, (cfg->nstores + 1) * sizeof *s);
    KL_ENSURE(s != NULL, KL_E_NOMEM);
    cfg->stores = s;
    s[cfg->nstores].kind = kind;
    s[cfg->nstores].path = strdup(path);
    KL_ENSURE(s[cfg->nstores].path != NULL, KL_E_NOMEM);
    cfg->nstores++;
    return KL_OK;
}

void kl_cfg_clear_stores(kl_config *cfg)
{
    for (size_t i = 0; i < cfg->nstores; i++)
        free(cfg->stores[i].path);
    free(cfg->stores);
    cfg->stores = NULL;
    cfg->nstores = 0;
}

kl_status kl_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return KL_OK;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return KL_OK;
        }
    }
    return KL_E_CONFIG;
}

/* Go-style durations ("300ms", "1.5h", "2h45m"): a sequence of decimal
 * numbers each with a unit. A bare "0" is allowed; any other bare number is
 * refused because its unit would be a guess. */
kl_status kl_parse_duration(const char *s, uint64_t *ns)
{
    static const struct {
        const char *unit;
        uint64_t ns;
    } units[] = {
        {"ns", 1},          {"us", KL_NS_PER_US},    {"ms", KL_NS_PER_MS},
        {"s", KL_NS_PER_S}, {"m", 60 * KL_NS_PER_S}, {"h", 3600 * KL_NS_PER_S}};
    if (strcmp(s, "0") == 0) {
        *ns = 0;
        return KL_OK;
    }
    KL_ENSURE(*s != 0, KL_E_CONFIG);
    long double total = 0;
    while (*s) {
        KL_ENSURE(isdigit((unsigned char)*s) || *s == '.', KL_E_CONFIG);
        long double whole = 0, frac = 0, scale = 1;
        int digits = 0;
        while (isdigit((unsigned char)*s)) {
            whole = whole * 10 + (*s++ - '0');
            digits++;
        }
        if (*s == '.') {
            s++;
            while (isdigit((unsigned char)*s)) {
                scale /= 10;
                frac += (*s++ - '0') * scale;
                digits++;
            }
        }
        KL_ENSURE(digits > 0, KL_E_CONFIG);
        size_t best = SIZE_MAX, best_len = 0;
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
            size_t n = strlen(units[i].unit);
            /* longest match so that "ms" is not read as "m" + "s" */
            if (strncmp(s, units[i].unit, n) == 0 && n > best_len) {
                best = i;
                best_len = n;
            }
        }
        KL_ENSURE(best != SIZE_MAX, KL_E_CONFIG);
        s += best_len;
        total += (whole + frac) * (long double)units[best].ns;
        KL_ENSURE(total < 1.0e19L, KL_E_CONFIG);
    }
    *ns = (uint64_t)total;
    return KL_OK;
}

void kl_format_duration(uint64_t ns, char *out, size_t cap)
{
    static const struct {
        const char *unit;
        uint64_t ns;
    } units[] = {{"h", 3600 * KL_NS_PER_S}, {"m", 60 * KL_NS_PER_S},
                 {"s", KL_NS_PER_S},        {"ms", KL_NS_PER_MS},
                 {"us", KL_NS_PER_US},      {"ns", 1}};
    if (ns == 0) {
        snprintf(out, cap, "0s");
        return;
    }
    /* Below one second use the largest unit that divides exactly. */
    if (ns < KL_NS_PER_S) {
        for (size_t i = 3; i < 6; i++)
            if (ns % units[i].ns == 0) {
                snprintf(out, cap, "%" PRIu64 "%s", ns / units[i].ns,
                         units[i].unit);
                return;
            }
    }
    size_t n = 0;
    out[0] = 0;
    for (size_t i = 0; i < 6 && ns && n < cap; i++) {
        uint64_t q = ns / units[i].ns;
        if (q == 0)
            continue;
        n += (size_t)snprintf(out + n, cap - n, "%" PRIu64 "%s", q,
                              units[i].unit);
        ns -= q * units[i].ns;
    }
}

static char *field_str(kl_config *cfg, const kl_option *o, char ***slot)
{
    *slot = (char **)((char *)cfg + o->offset);
    return **slot;
}

kl_status kl_opt_set(kl_config *cfg, const kl_option *o, const char *text,
                     char *err, size_t errlen)
{
    void *field = (char *)cfg + o->offset;
    switch (o->type) {
    case KL_OPT_INT:
    case KL_OPT_U16:
    case KL_OPT_U32:
    case KL_OPT_SIZE: {
        char *end;
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (end == text || *end != 0 || errno == ERANGE)
            return kl_cfg_fail(err, errlen,
                               "%s: \"%s\" is not an integer; use a number "
                               "in %" PRId64 "..%" PRId64,
                               o->name, text, o->min, o->max);
        if (v < o->min || v > o->max)
            return kl_cfg_fail(err, errlen,
                               "%s: %lld is out of range %" PRId64 "..%" PRId64,
                               o->name, v, o->min, o->max);
        /* the bounds keep v within the field's type (a row's min is >= 0
         * for the unsigned ones) */
        if (o->type == KL_OPT_U16)
            *(uint16_t *)field = (uint16_t)v;
        else if (o->type == KL_OPT_U32)
            *(uint32_t *)field = (uint32_t)v;
        else if (o->type == KL_OPT_SIZE)
            *(size_t *)field = (size_t)v;
        else
            *(int *)field = (int)v;
        return KL_OK;
    }
    case KL_OPT_BOOL:
    case KL_OPT_MODE:
        if (kl_parse_bool(text, (bool *)field) != KL_OK)
            return kl_cfg_fail(err, errlen,
                               "%s: \"%s\" is not a boolean; use true or "
                               "false",
                               o->name, text);
        return KL_OK;
    case KL_OPT_DURATION: {
        uint64_t ns;
        if (kl_parse_duration(text, &ns) != KL_OK)
            return kl_cfg_fail(err, errlen,
                               "%s: \"%s\" is not a duration; write it with "
                               "a unit, e.g. 10s, 500ms or 2m",
                               o->name, text);
        uint64_t min = kl_ms_to_ns((uint64_t)o->min),
                 max = kl_ms_to_ns((uint64_t)o->max);
        if (ns < min || ns > max) {
            char a[32], b[32];
            kl_format_duration(min, a, sizeof a);
            kl_format_duration(max, b, sizeof b);
            return kl_cfg_fail(err, errlen, "%s: %s is out of range %s..%s",
                               o->name, text, a, b);
        }
        *(uint64_t *)field = ns;
        return KL_OK;
    }
    case KL_OPT_STRING: {
        char **slot;
        char *old = field_str(cfg, o, &slot);
        char *copy = strdup(text);
        KL_ENSURE(copy != NULL, KL_E_NOMEM);
        free(old);
        *slot = copy;
        return KL_OK;
    }
    case KL_OPT_FLOAT: {
        char *end;
        errno = 0;
        double v = strtod(text, &end);
        if (end == text || *end != 0 || errno == ERANGE || v != v)
            return kl_cfg_fail(err, errlen,
                               "%s: \"%s\" is not a number; use a decimal "
                               "number in %" PRId64 "..%" PRId64 ", e.g. 0.01",
                               o->name, text, o->min, o->max);
        if (v < (double)o->min || v > (double)o->max)
            return kl_cfg_fail(err, errlen,
                               "%s: %s is out of range %" PRId64 "..%" PRId64,
                               o->name, text, o->min, o->max);
        *(double *)field = v;
        return KL_OK;
    }
    case KL_OPT_STORES: return kl_cfg_set_stores_text(cfg, text, err, errlen);
    }
    return KL_E_INTERNAL;
}
