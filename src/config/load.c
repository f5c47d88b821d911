/* SPDX-License-Identifier: Apache-2.0 */
/* Putting the sources together: defaults, then the file, then the
 * environment, then the flags (flag > environment > file > default), then
 * the derived fields (derive.c). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/internal.h"
#include "core/suggest.h"

extern char **environ;

#define MAX_CONFIG_FILE (1u << 20)

const kl_option *kl_config_find(const kl_opt_table *t, const char *name)
{
    for (size_t i = 0; i < t->count; i++)
        if (strcmp(t->rows[i].name, name) == 0)
            return &t->rows[i];
    return NULL;
}

kl_config *kl_config_new(const kl_opt_table *t)
{
    kl_config *cfg = calloc(1, t->size);
    if (!cfg)
        return NULL;
    cfg->table = t;
    /* The defaults are the modules' own values (their defaults structs);
     * --help prints them from a config made here, so what it says is
     * exactly what is applied. Strings come as literals: own them. */
    t->defaults(cfg);
    bool ok = true;
    for (size_t i = 0; i < t->count; i++) {
        if (t->rows[i].type != KL_OPT_STRING)
            continue;
        char **slot = (char **)((char *)cfg + t->rows[i].offset);
        if (*slot && !(*slot = strdup(*slot)))
            ok = false;
    }
    if (!ok) {
        kl_config_free(cfg);
        return NULL;
    }
    return cfg;
}

void kl_config_free(kl_config *cfg)
{
    if (!cfg)
        return;
    size_t n = cfg->table->count;
    const kl_option *opts = cfg->table->rows;
    for (size_t i = 0; i < n; i++)
        if (opts[i].type == KL_OPT_STRING)
            free(*(char **)((char *)cfg + opts[i].offset));
    for (size_t i = 0; i < cfg->nstores; i++)
        free(cfg->stores[i].path);
    free(cfg->stores);
    for (size_t i = 0; i < cfg->nwarnings; i++)
        free(cfg->warnings[i]);
    free(cfg->warnings);
    for (size_t i = 0; i < cfg->nerrors; i++)
        free(cfg->errors[i]);
    free(cfg->errors);
    free((char *)cfg->loaded_file);
    free(cfg->tracing_endpoint);
    free(cfg);
}

/* "--auth-cert" and "--auth_cert" name the same option. */
static bool flag_matches(const char *given, size_t len, const char *flag)
{
    if (strlen(flag) != len)
        return false;
    for (size_t i = 0; i < len; i++) {
        char a = given[i] == '-' ? '_' : given[i];
        char b = flag[i] == '-' ? '_' : flag[i];
        if (a != b)
            return false;
    }
    return true;
}

typedef struct flag_value {
    const kl_option *opt;
    const char *value;
    const char *spelled; /* argv text, for errors */
} flag_value;

static kl_status scan_flags(const kl_opt_table *t, int argc, char *const *argv,
                            flag_value *out, size_t *nout, char *err,
                            size_t errlen)
{
    size_t n = t->count;
    const kl_option *opts = t->rows;
    *nout = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const kl_option *o = NULL;
        const char *value = NULL;
        if (a[0] == '-' && a[1] == '-' && a[2]) {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            for (size_t j = 0; j < n && !o; j++)
                if (opts[j].flag && flag_matches(name, len, opts[j].flag))
                    o = &opts[j];
            if (!o) {
                /* the nearest flag, if the name looks misspelt */
                char given[KL_SUGGEST_MAX_LEN + 1] = "";
                if (len <= KL_SUGGEST_MAX_LEN)
                    memcpy(given, name, len);
                kl_suggest sg;
                kl_suggest_init(&sg, given);
                for (size_t j = 0; j < n && len <= KL_SUGGEST_MAX_LEN; j++)
                    kl_suggest_add(&sg, opts[j].flag);
                const char *near = kl_suggest_best(&sg);
                return kl_cfg_fail(
                    err, errlen, "unknown flag %.*s;%s%s%s see --help",
                    (int)len + 2, a, near ? " did you mean --" : "",
                    near ? near : "", near ? "?" : "");
            }
            if (eq)
                value = eq + 1;
        } else if (a[0] == '-' && a[1] && a[1] != '-') {
            for (size_t j = 0; j < n && !o; j++)
                if (opts[j].short_flag == a[1])
                    o = &opts[j];
            if (!o)
                return kl_cfg_fail(err, errlen, "unknown flag -%c; see --help",
                                   a[1]);
            if (a[2])
                value = a + 2;
        } else {
            return kl_cfg_fail(err, errlen,
                               "unexpected argument \"%s\"; options are given "
                               "as flags (see --help)",
                               a);
        }
        if (o->type == KL_OPT_MODE || o->type == KL_OPT_BOOL) {
            if (!value)
                value = "true"; /* "--tls13" alone; "--tls13=false" */
        } else if (!value) {
            if (i + 1 >= argc)
                return kl_cfg_fail(err, errlen, "flag %s: needs a value (%s)",
                                   a, o->metavar ? o->metavar : "VALUE");
            value = argv[++i];
        }
        out[(*nout)++] = (flag_value){o, value, a};
    }
    return KL_OK;
}

static const char *env_get(char *const *envp, const char *name)
{
    if (!envp)
        return getenv(name);
    size_t len = strlen(name);
    for (; *envp; envp++)
        if (strncmp(*envp, name, len) == 0 && (*envp)[len] == '=')
            return *envp + len + 1;
    return NULL;
}

static kl_status read_file(const char *path, uint8_t **buf, size_t *len,
                           char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return kl_cfg_fail(err, errlen,
                           "%s: cannot open the configuration file: %s", path,
                           strerror(errno));
    uint8_t *b = malloc(MAX_CONFIG_FILE + 1);
    size_t n = b ? fread(b, 1, MAX_CONFIG_FILE + 1, f) : 0;
    bool bad = ferror(f);
    fclose(f);
    if (!b)
        return KL_E_NOMEM;
    if (bad || n > MAX_CONFIG_FILE) {
        free(b);
        return kl_cfg_fail(err, errlen, "%s: %s", path,
                           bad ? "read error" : "larger than 1 MiB");
    }
    *buf = b;
    *len = n;
    return KL_OK;
}

static kl_status apply_file(kl_config *cfg, const char *path, char *err,
                            size_t errlen)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    KL_GUARD(read_file(path, &buf, &len, err, errlen));
    kl_status st = kl_config_apply_yaml(cfg, path, buf, len, err, errlen);
    free(buf);
    if (st == KL_OK) {
        free((char *)cfg->loaded_file);
        cfg->loaded_file = strdup(path);
    }
    return st;
}

kl_status kl_config_load(kl_config *cfg, int argc, char *const *argv,
                         char *const *envp, char *err, size_t errlen)
{
    size_t n = cfg->table->count;
    const kl_option *opts = cfg->table->rows;
    char msg[384];
    flag_value *flags = calloc((size_t)(argc > 0 ? argc : 1), sizeof *flags);
    KL_ENSURE(flags != NULL, KL_E_NOMEM);
    size_t nflags = 0;
    char *file = NULL;
    kl_status st =
        scan_flags(cfg->table, argc, argv, flags, &nflags, err, errlen);
    if (st != KL_OK)
        goto out;
    /* --check reports every value that does not parse, not the first */
    for (size_t i = 0; i < nflags; i++) {
        bool on = false;
        if (!strcmp(flags[i].opt->name, "check") &&
            kl_parse_bool(flags[i].value, &on) == KL_OK && on)
            cfg->collect_errors = true;
    }

    /* The file: its name can only come from a flag or the environment. */
    const char *named = env_get(envp, "KEYLESS_CONFIG_FILE");
    for (size_t i = 0; i < nflags; i++)
        if (strcmp(flags[i].opt->name, "config_file") == 0)
            named = flags[i].value;
    if ((st = kl_cfg_find_file(cfg, named, &file, err, errlen)) != KL_OK)
        goto out;
    if (file && (st = apply_file(cfg, file, err, errlen)) != KL_OK)
        goto out;

    for (size_t i = 0; i < n; i++) {
        const char *v = opts[i].env ? env_get(envp, opts[i].env) : NULL;
        if (!v)
            continue;
        if ((st = kl_opt_set(cfg, &opts[i], v, msg, sizeof msg)) != KL_OK) {
            kl_cfg_fail(err, errlen, "environment %s: %s", opts[i].env, msg);
            if ((st = kl_cfg_collect(cfg, st, err)) != KL_OK)
                goto out;
        }
    }
    for (size_t i = 0; i < nflags; i++) {
        st = kl_opt_set(cfg, flags[i].opt, flags[i].value, msg, sizeof msg);
        if (st != KL_OK) {
            kl_cfg_fail(err, errlen, "flag %s: %s", flags[i].spelled, msg);
            if ((st = kl_cfg_collect(cfg, st, err)) != KL_OK)
                goto out;
        }
    }
    if (cfg->help || cfg->help_markdown || cfg->help_man || cfg->version)
        goto out;
    st = kl_cfg_derive(cfg, err, errlen);
out:
    free(file);
    free(flags);
    return st;
}
