/* SPDX-License-Identifier: Apache-2.0 */
/* What the option table prints for the operator: --help and the effective
 * configuration as YAML (--output-config), secrets redacted. The reference
 * pages are generated in docgen.c. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/internal.h"
#include "core/time.h"

/* Prints text from column `col`, wrapped at 79 columns. */
static void wrap(FILE *out, const char *text, int col)
{
    int x = col;
    while (*text) {
        const char *sp = strchr(text, ' ');
        int w = sp ? (int)(sp - text) : (int)strlen(text);
        if (x > col && x + 1 + w > 79) {
            fprintf(out, "\n%*s", col, "");
            x = col;
        }
        if (x > col) {
            fputc(' ', out);
            x++;
        }
        /* '\x01' is a space that does not break: "[env:\x01KEYLESS_X]" */
        for (int i = 0; i < w; i++)
            fputc(text[i] == '\x01' ? ' ' : text[i], out);
        x += w;
        text += w;
        while (*text == ' ')
            text++;
    }
}

bool kl_cfg_new_group(const kl_option *opts, size_t i)
{
    return i == 0 || strcmp(opts[i].group, opts[i - 1].group) != 0;
}

void kl_config_usage(const kl_opt_table *t, FILE *out, const char *prog)
{
    size_t n = t->count;
    const kl_option *opts = t->rows;
    fprintf(out,
            "Usage: %s [flags]\n"
            "The Keyless SSL key server. Every option can also be set in the "
            "YAML file\n(under its name) and in the environment (KEYLESS_*); "
            "flags win over the\nenvironment, which wins over the file. "
            "Flags take '-' or '_' (--auth-cert,\n--auth_cert). SIGHUP "
            "reloads the [reloadable] options, keys and certificates.\n",
            prog);
    for (size_t i = 0; i < n; i++) {
        const kl_option *o = &opts[i];
        if (kl_cfg_new_group(opts, i))
            fprintf(out, "\n%s:\n", o->group);
        char left[96];
        const char *mv = o->metavar ? o->metavar : "";
        const char *sp = o->metavar ? " " : "";
        if (o->flag && o->short_flag)
            snprintf(left, sizeof left, "  -%c, --%s%s%s", o->short_flag,
                     o->flag, sp, mv);
        else if (o->flag)
            snprintf(left, sizeof left, "      --%s%s%s", o->flag, sp, mv);
        else
            snprintf(left, sizeof left, "      %s: (file only)", o->name);
        char text[768];
        size_t k = (size_t)snprintf(text, sizeof text, "%s", o->help);
        char def[256];
        if (kl_config_default_text(t, o, def, sizeof def) && k < sizeof text)
            k += (size_t)snprintf(text + k, sizeof text - k,
                                  " (default:\x01%s)", def);
        if ((o->flags & KL_OPTF_NO_YAML) == 0 && k < sizeof text)
            k += (size_t)snprintf(text + k, sizeof text - k, " [file:\x01%s]",
                                  o->name);
        if (o->env && k < sizeof text)
            k += (size_t)snprintf(text + k, sizeof text - k, " [env:\x01%s]",
                                  o->env);
        if ((o->flags & KL_OPTF_RELOADABLE) && k < sizeof text)
            snprintf(text + k, sizeof text - k, " [reloadable]");
        if (strlen(left) >= 32)
            fprintf(out, "%s\n%-32s", left, "");
        else
            fprintf(out, "%-32s", left);
        wrap(out, text, 32);
        fputc('\n', out);
    }
}

char *kl_config_redact_uri(const char *uri)
{
    /* pkcs11:...?module-path=/m.so&pin-value=SECRET&max-sessions=2 */
    const char *p = strstr(uri, "pin-value=");
    if (!p)
        return strdup(uri);
    const char *end = p + strlen("pin-value=");
    while (*end && *end != '&' && *end != ';')
        end++;
    size_t head = (size_t)(p - uri) + strlen("pin-value=");
    size_t len = head + strlen("REDACTED") + strlen(end) + 1;
    char *r = malloc(len);
    if (r)
        snprintf(r, len, "%.*sREDACTED%s", (int)head, uri, end);
    return r;
}

/* A YAML double-quoted scalar. */
static void yaml_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(out, "\\x%02x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

static void write_stores(const kl_config *cfg, FILE *out)
{
    if (cfg->nstores == 0) {
        fputs("private_key_stores: []\n", out);
        return;
    }
    fputs("private_key_stores:\n", out);
    for (size_t i = 0; i < cfg->nstores; i++) {
        const kl_store_cfg *s = &cfg->stores[i];
        fprintf(out, "  - %s: ",
                s->kind == KL_STORE_DIR    ? "dir"
                : s->kind == KL_STORE_FILE ? "file"
                                           : "uri");
        char *red =
            s->kind == KL_STORE_URI ? kl_config_redact_uri(s->path) : NULL;
        yaml_str(out, red ? red : s->path);
        free(red);
        fputc('\n', out);
    }
}

void kl_config_value_text(const kl_config *cfg, const kl_option *o, char *out,
                          size_t cap)
{
    const void *field = (const char *)cfg + o->offset;
    out[0] = 0;
    switch (o->type) {
    case KL_OPT_INT: snprintf(out, cap, "%d", *(const int *)field); break;
    case KL_OPT_U16:
        snprintf(out, cap, "%u", (unsigned)*(const uint16_t *)field);
        break;
    case KL_OPT_U32:
        snprintf(out, cap, "%" PRIu32, *(const uint32_t *)field);
        break;
    case KL_OPT_SIZE: snprintf(out, cap, "%zu", *(const size_t *)field); break;
    case KL_OPT_BOOL:
    case KL_OPT_MODE:
        snprintf(out, cap, "%s", *(const bool *)field ? "true" : "false");
        break;
    case KL_OPT_FLOAT:
        snprintf(out, cap, "%.17g", *(const double *)field);
        break;
    case KL_OPT_DURATION:
        kl_format_duration(*(const uint64_t *)field, out, cap);
        break;
    case KL_OPT_STRING: {
        const char *s = *(char *const *)field;
        /* a PKCS#11 URI (sealing_key) may carry its PIN */
        char *red =
            s && !strncmp(s, "pkcs11:", 7) ? kl_config_redact_uri(s) : NULL;
        snprintf(out, cap, "%s",
                 !s                                    ? ""
                 : ((o->flags & KL_OPTF_SECRET) && *s) ? "REDACTED"
                 : red                                 ? red
                                                       : s);
        free(red);
        break;
    }
    case KL_OPT_STORES: {
        size_t n = (size_t)snprintf(out, cap, "[");
        for (size_t i = 0; i < cfg->nstores && n < cap; i++) {
            const kl_store_cfg *st = &cfg->stores[i];
            char *red = st->kind == KL_STORE_URI
                            ? kl_config_redact_uri(st->path)
                            : NULL;
            n += (size_t)snprintf(out + n, cap - n, "%s{%s: \"%s\"}",
                                  i ? ", " : "",
                                  st->kind == KL_STORE_DIR    ? "dir"
                                  : st->kind == KL_STORE_FILE ? "file"
                                                              : "uri",
                                  red ? red : st->path);
            free(red);
        }
        if (n < cap)
            snprintf(out + n, cap - n, "]");
        break;
    }
    }
}

/* A default duration in the one largest unit that divides it ("500ms",
 * "60s", "1h"), as the option reference has always written them;
 * kl_format_duration, for values, would write "1m". */
static void default_duration(uint64_t ns, char *out, size_t cap)
{
    static const struct {
        const char *unit;
        uint64_t ns;
    } units[] = {{"h", 3600 * KL_NS_PER_S},
                 {"s", KL_NS_PER_S},
                 {"ms", KL_NS_PER_MS},
                 {"us", KL_NS_PER_US},
                 {"ns", 1}};
    size_t i = 0;
    while (ns && ns % units[i].ns)
        i++;
    snprintf(out, cap, "%" PRIu64 "%s", ns / units[i].ns,
             ns ? units[i].unit : "s");
}

bool kl_config_default_text(const kl_opt_table *t, const kl_option *o,
                            char *out, size_t cap)
{
    out[0] = 0;
    if (o->type == KL_OPT_MODE || o->type == KL_OPT_STORES)
        return false;
    /* the defaults alone: literals, nothing to free but the struct */
    kl_config *d = calloc(1, t->size);
    if (!d)
        return false;
    d->table = t;
    t->defaults(d);
    const void *field = (const char *)d + o->offset;
    bool has = true;
    if (o->type == KL_OPT_STRING)
        has = *(char *const *)field != NULL;
    if (o->type == KL_OPT_DURATION)
        default_duration(*(const uint64_t *)field, out, cap);
    else if (has)
        kl_config_value_text(d, o, out, cap);
    free(d);
    return has;
}

void kl_config_write_yaml(const kl_config *cfg, FILE *out)
{
    size_t n = cfg->table->count;
    const kl_option *opts = cfg->table->rows;
    fputs("# keylessd effective configuration (--output-config); secrets "
          "are redacted\n",
          out);
    for (size_t i = 0; i < n; i++) {
        const kl_option *o = &opts[i];
        if (o->flags & KL_OPTF_NO_YAML)
            continue;
        /* folded into private_key_stores by kl_config_load */
        if (!strcmp(o->name, "private_key_dirs") ||
            !strcmp(o->name, "private_key_files"))
            continue;
        if (o->type == KL_OPT_STORES) {
            write_stores(cfg, out);
            continue;
        }
        char buf[1024];
        kl_config_value_text(cfg, o, buf, sizeof buf);
        fprintf(out, "%s: ", o->name);
        if (o->type != KL_OPT_STRING)
            fputs(buf, out);
        else if (!*(char *const *)((const char *)cfg + o->offset))
            fputc('~', out);
        else
            yaml_str(out, buf);
        fputc('\n', out);
    }
}
