/* SPDX-License-Identifier: Apache-2.0 */
/* After the sources: which file to read, and the fields derived from the
 * options (key stores from the comma lists, current_time, the tracing
 * endpoint) with the checks that need more than one option. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "config/internal.h"
#include "core/log.h"

static const char *const default_dirs[] = {".", "/etc/keyless", NULL};
static const char *const *search_dirs = default_dirs;

/* The reference reads gokeyless.{yaml,yml,json} (viper); keylessd.* is
 * accepted for installs that name the file after the daemon. JSON is YAML
 * (flow style), so one parser reads all of them. */
static const char *const names[] = {"gokeyless.yaml", "gokeyless.yml",
                                    "gokeyless.json", "keylessd.yaml",
                                    "keylessd.yml",   "keylessd.json"};

void kl_config_set_search_dirs(const char *const *dirs)
{
    search_dirs = dirs ? dirs : default_dirs;
}

kl_status kl_cfg_find_file(kl_config *cfg, const char *named, char **out,
                           char *err, size_t errlen)
{
    *out = NULL;
    if (named) {
        if (!*named)
            return kl_cfg_fail(err, errlen,
                               "config_file: empty file name; name the YAML "
                               "file or leave the option out");
        *out = strdup(named);
        KL_ENSURE(*out != NULL, KL_E_NOMEM);
        return KL_OK;
    }
    for (size_t d = 0; search_dirs[d] && !*out; d++) {
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            char path[4096];
            struct stat sb;
            if (strcmp(search_dirs[d], ".") == 0)
                snprintf(path, sizeof path, "%s", names[i]);
            else
                snprintf(path, sizeof path, "%s/%s", search_dirs[d], names[i]);
            if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
                continue;
            if (*out) {
                kl_cfg_warn(cfg,
                            "%s: ignored: %s is read instead (keep one "
                            "configuration file, or name it with -c)",
                            path, *out);
                continue;
            }
            *out = strdup(path);
            KL_ENSURE(*out != NULL, KL_E_NOMEM);
        }
    }
    return KL_OK;
}

/* The reference replaces private_key_stores by these lists when either is
 * given. */
static kl_status split_stores(kl_config *cfg, const char *list,
                              kl_store_kind kind)
{
    if (!list)
        return KL_OK;
    char *copy = strdup(list), *save = NULL;
    KL_ENSURE(copy != NULL, KL_E_NOMEM);
    kl_status st = KL_OK;
    for (char *p = strtok_r(copy, ",", &save); p && st == KL_OK;
         p = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*p))
            p++;
        size_t n = strlen(p);
        while (n && isspace((unsigned char)p[n - 1]))
            p[--n] = 0;
        if (*p)
            st = kl_cfg_add_store(cfg, kind, p);
    }
    free(copy);
    return st;
}

static bool digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* RFC 3339 as Go's time.RFC3339 reads it: 2006-01-02T15:04:05Z07:00, with
 * optional fractional seconds (ignored). */
static bool parse_rfc3339(const char *s, int64_t *unix_out)
{
    struct tm tm = {0};
    int y, mo, d, h, mi, se;
    if (strlen(s) < 20 || !digits(s, 4, &y) || s[4] != '-' ||
        !digits(s + 5, 2, &mo) || s[7] != '-' || !digits(s + 8, 2, &d) ||
        (s[10] != 'T' && s[10] != 't') || !digits(s + 11, 2, &h) ||
        s[13] != ':' || !digits(s + 14, 2, &mi) || s[16] != ':' ||
        !digits(s + 17, 2, &se))
        return false;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60)
        return false;
    const char *p = s + 19;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return false;
        while (isdigit((unsigned char)*p))
            p++;
    }
    long off = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om;
        if (!digits(p + 1, 2, &oh) || p[3] != ':' || !digits(p + 4, 2, &om) ||
            oh > 23 || om > 59)
            return false;
        off = (oh * 3600L + om * 60L) * (*p == '-' ? -1 : 1);
        p += 6;
    } else {
        return false;
    }
    if (*p)
        return false;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = se;
    time_t t = timegm(&tm);
    /* timegm normalises 31 February into March: refuse what moved */
    if (tm.tm_mday != d || tm.tm_mon != mo - 1)
        return false;
    *unix_out = (int64_t)t - off;
    return true;
}

/* The reference sends spans to a Jaeger agent over UDP (host:6831);
 * keylessd speaks OTLP/HTTP, whose collectors listen on 4318 of the same
 * host in the usual deployments. */
static kl_status tracing_endpoint(kl_config *cfg)
{
    free(cfg->tracing_endpoint);
    cfg->tracing_endpoint = NULL;
    const char *a = cfg->tracing_address;
    if (!a || !*a)
        return KL_OK;
    char buf[512];
    if (strncmp(a, "http://", 7) == 0 || strncmp(a, "https://", 8) == 0) {
        snprintf(buf, sizeof buf, "%s", a);
    } else {
        /* host:port, [v6]:port or a bare host */
        char host[300];
        const char *colon = a[0] == '[' ? strchr(a, ']') : strrchr(a, ':');
        size_t hl = strlen(a);
        if (a[0] == '[' && colon)
            hl = (size_t)(colon - a) + 1;
        else if (colon && a[0] != '[')
            hl = (size_t)(colon - a);
        snprintf(host, sizeof host, "%.*s", (int)hl, a);
        if (!*host)
            snprintf(host, sizeof host, "localhost");
        snprintf(buf, sizeof buf, "http://%s:4318/v1/traces", host);
        if (cfg->tracing_enabled)
            kl_cfg_warn(cfg,
                        "tracing_address: \"%s\" is a Jaeger agent address "
                        "(the reference's); keylessd exports OTLP/HTTP and "
                        "uses %s instead (set tracing_address to an http:// "
                        "URL to choose)",
                        a, buf);
    }
    cfg->tracing_endpoint = strdup(buf);
    KL_ENSURE(cfg->tracing_endpoint != NULL, KL_E_NOMEM);
    return KL_OK;
}

kl_status kl_cfg_derive(kl_config *cfg, char *err, size_t errlen)
{
    bool lists = (cfg->private_key_dirs && *cfg->private_key_dirs) ||
                 (cfg->private_key_files && *cfg->private_key_files);
    if (lists) {
        if (cfg->nstores)
            kl_cfg_warn(cfg,
                        "private_key_dirs/private_key_files replace the "
                        "%zu private_key_stores entries (as in the "
                        "reference)",
                        cfg->nstores);
        kl_cfg_clear_stores(cfg);
        KL_GUARD(split_stores(cfg, cfg->private_key_dirs, KL_STORE_DIR));
        KL_GUARD(split_stores(cfg, cfg->private_key_files, KL_STORE_FILE));
    }
    cfg->has_current_time = false;
    if (cfg->current_time && *cfg->current_time) {
        if (!parse_rfc3339(cfg->current_time, &cfg->current_time_unix))
            return kl_cfg_fail(err, errlen,
                               "current_time: \"%s\" is not an RFC 3339 time; "
                               "write e.g. 2030-01-02T15:04:05Z",
                               cfg->current_time);
        cfg->has_current_time = true;
    }
    if (!kl_log_format_known(cfg->log_format))
        return kl_cfg_fail(err, errlen,
                           "log_format: \"%s\" is not a log format; write "
                           "log_format: text or log_format: json",
                           cfg->log_format);
    KL_GUARD(tracing_endpoint(cfg));
    if (cfg->sign_retry_count > 0)
        kl_cfg_warn(cfg,
                    "sign_retry_count: %d has no effect in keylessd "
                    "(see --help)",
                    cfg->sign_retry_count);
    /* the program's checks (for keylessd: daemon/options.c) */
    if (cfg->table->check)
        KL_GUARD(cfg->table->check(cfg, err, errlen));
    if (cfg->manual_activation && cfg->config_only)
        return kl_cfg_fail(err, errlen,
                           "--manual-activation and --config-only exclude "
                           "each other; give one");
    return KL_OK;
}
