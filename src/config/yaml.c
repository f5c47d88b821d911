/* SPDX-License-Identifier: Apache-2.0 */
/* The YAML file (libyaml's document API). Every error names the file, the
 * line libyaml reports for the offending node, the option and the fix, e.g.
 * "gokeyless.yaml:7: port: 70000 is out of range 1..65535". Unknown keys are
 * warnings, not errors: the reference ignores them, and a drop-in replacement
 * must start with the reference's files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "config/internal.h"
#include "core/suggest.h"

#define LINE(node) ((unsigned long)(node)->start_mark.line + 1)

/* " (did you mean \"port\"?)" for a misspelt option name, or "" when no
 * option of the file is near it (core/suggest.h). */
static const char *did_you_mean(const kl_opt_table *t, const char *name,
                                char *buf, size_t cap)
{
    size_t n = t->count;
    const kl_option *opts = t->rows;
    kl_suggest sg;
    kl_suggest_init(&sg, name);
    for (size_t i = 0; i < n; i++)
        if (!(opts[i].flags & KL_OPTF_NO_YAML))
            kl_suggest_add(&sg, opts[i].name);
    const char *near = kl_suggest_best(&sg);
    buf[0] = 0;
    if (near)
        snprintf(buf, cap, " (did you mean \"%s\"?)", near);
    return buf;
}

/* "file:line: " for a file, nothing for a value from the environment or a
 * flag (the caller names those). */
typedef struct where {
    const char *file; /* NULL: not from a file */
    char text[320];
} where;

static const char *at(where *w, const yaml_node_t *n)
{
    if (!w->file)
        w->text[0] = 0;
    else
        snprintf(w->text, sizeof w->text, "%s:%lu: ", w->file, LINE(n));
    return w->text;
}

static const char *scalar(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

static bool is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE ||
        n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *s = scalar(n);
    return !*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

static kl_status store_entry(kl_config *cfg, where *w, yaml_document_t *doc,
                             yaml_node_t *entry, char *err, size_t errlen)
{
    if (entry->type != YAML_MAPPING_NODE)
        return kl_cfg_fail(err, errlen,
                           "%sprivate_key_stores: each entry must be a "
                           "map like \"- dir: /etc/keyless/keys\" or \"- "
                           "file: /path/key.pem\"",
                           at(w, entry));
    const char *kind_name = NULL, *path = NULL;
    kl_store_kind kind = 0;
    for (yaml_node_pair_t *p = entry->data.mapping.pairs.start;
         p < entry->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || !v || k->type != YAML_SCALAR_NODE)
            return kl_cfg_fail(err, errlen,
                               "%sprivate_key_stores: entry keys must "
                               "be dir, file or uri",
                               at(w, entry));
        const char *name = scalar(k);
        kl_store_kind this_kind;
        if (strcmp(name, "dir") == 0) {
            this_kind = KL_STORE_DIR;
        } else if (strcmp(name, "file") == 0) {
            this_kind = KL_STORE_FILE;
        } else if (strcmp(name, "uri") == 0) {
            this_kind = KL_STORE_URI;
        } else {
            kl_suggest sg;
            kl_suggest_init(&sg, name);
            kl_suggest_add(&sg, "dir");
            kl_suggest_add(&sg, "file");
            kl_suggest_add(&sg, "uri");
            const char *near = kl_suggest_best(&sg);
            kl_cfg_warn(cfg,
                        "%sprivate_key_stores: unknown entry key "
                        "\"%s\" ignored%s%s%s",
                        at(w, k), name, near ? " (did you mean \"" : "",
                        near ? near : "", near ? "\"?)" : "");
            continue;
        }
        if (kind_name)
            return kl_cfg_fail(err, errlen,
                               "%sprivate_key_stores: an entry has both "
                               "%s and %s; give exactly one per entry (use "
                               "one \"- \" entry each)",
                               at(w, k), kind_name, name);
        if (v->type != YAML_SCALAR_NODE || is_null(v) || !*scalar(v))
            return kl_cfg_fail(err, errlen,
                               "%sprivate_key_stores: %s: needs a path",
                               at(w, v), name);
        kind_name = name;
        kind = this_kind;
        path = scalar(v);
    }
    if (!kind_name)
        return kl_cfg_fail(err, errlen,
                           "%sprivate_key_stores: an entry has none "
                           "of dir:, file: or uri:",
                           at(w, entry));
    return kl_cfg_add_store(cfg, kind, path);
}

/* A new list replaces the stores set so far: a later source (environment,
 * flag) overrides the file as it does for every other option. */
static kl_status stores(kl_config *cfg, where *w, yaml_document_t *doc,
                        yaml_node_t *v, char *err, size_t errlen)
{
    kl_cfg_clear_stores(cfg);
    if (is_null(v))
        return KL_OK;
    if (v->type != YAML_SEQUENCE_NODE)
        return kl_cfg_fail(err, errlen,
                           "%sprivate_key_stores: must be a list, e.g. "
                           "\"private_key_stores:\\n  - dir: /etc/keyless/"
                           "keys\"%s",
                           at(w, v),
                           w->file ? "" : " or [{dir: /etc/keyless/keys}]");
    for (yaml_node_item_t *it = v->data.sequence.items.start;
         it < v->data.sequence.items.top; it++) {
        yaml_node_t *entry = yaml_document_get_node(doc, *it);
        if (!entry)
            continue;
        KL_GUARD(store_entry(cfg, w, doc, entry, err, errlen));
    }
    return KL_OK;
}

static kl_status apply_pair(kl_config *cfg, const char *file,
                            yaml_document_t *doc, yaml_node_t *root,
                            yaml_node_pair_t *pair, char *err, size_t errlen)
{
    yaml_node_t *k = yaml_document_get_node(doc, pair->key);
    yaml_node_t *v = yaml_document_get_node(doc, pair->value);
    if (!k || !v)
        return KL_OK;
    if (k->type != YAML_SCALAR_NODE)
        return kl_cfg_fail(err, errlen,
                           "%s:%lu: option names must be plain words like "
                           "\"port\"",
                           file, LINE(k));
    const char *name = scalar(k);
    /* A key given twice is almost always an edit that went wrong; refuse
     * rather than silently keep one of them. */
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < pair; p++) {
        yaml_node_t *pk = yaml_document_get_node(doc, p->key);
        if (pk && pk->type == YAML_SCALAR_NODE && strcmp(scalar(pk), name) == 0)
            return kl_cfg_fail(err, errlen,
                               "%s:%lu: %s: given twice (first on line %lu); "
                               "keep one",
                               file, LINE(k), name, LINE(pk));
    }
    const kl_option *o = kl_config_find(cfg->table, name);
    if (!o || (o->flags & KL_OPTF_NO_YAML)) {
        char mean[96];
        kl_cfg_warn(cfg, "%s:%lu: unknown option \"%s\" ignored%s", file,
                    LINE(k), name,
                    did_you_mean(cfg->table, name, mean, sizeof mean));
        return KL_OK;
    }
    if (o->type == KL_OPT_STORES) {
        where w = {.file = file};
        return stores(cfg, &w, doc, v, err, errlen);
    }
    if (v->type != YAML_SCALAR_NODE)
        return kl_cfg_fail(
            err, errlen, "%s:%lu: %s: expects a single value, not a %s", file,
            LINE(v), name, v->type == YAML_SEQUENCE_NODE ? "list" : "map");
    if (is_null(v))
        return KL_OK; /* "port:" with nothing: keep the default */
    char msg[384];
    if (kl_opt_set(cfg, o, scalar(v), msg, sizeof msg) != KL_OK)
        return kl_cfg_fail(err, errlen, "%s:%lu: %s", file, LINE(v), msg);
    return KL_OK;
}

kl_status kl_config_apply_yaml(kl_config *cfg, const char *name,
                               const uint8_t *text, size_t len, char *err,
                               size_t errlen)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return KL_E_NOMEM;
    yaml_parser_set_input_string(&parser, text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        kl_status st = kl_cfg_fail(
            err, errlen, "%s:%lu: not valid YAML: %s%s%s", name,
            (unsigned long)parser.problem_mark.line + 1,
            parser.problem ? parser.problem : "syntax error",
            parser.context ? " " : "", parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        return st;
    }
    kl_status st = KL_OK;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && !is_null(root)) {
        if (root->type != YAML_MAPPING_NODE) {
            st = kl_cfg_fail(err, errlen,
                             "%s:%lu: the file must be a map of options "
                             "(\"key: value\" lines)",
                             name, LINE(root));
        } else {
            /* --check goes on past a bad value (kl_cfg_collect) */
            for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
                 st == KL_OK && p < root->data.mapping.pairs.top; p++)
                st = kl_cfg_collect(
                    cfg, apply_pair(cfg, name, &doc, root, p, err, errlen),
                    err);
        }
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return st;
}

kl_status kl_cfg_set_stores_text(kl_config *cfg, const char *text, char *err,
                                 size_t errlen)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return KL_E_NOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text,
                                 strlen(text));
    if (!yaml_parser_load(&parser, &doc)) {
        kl_status st = kl_cfg_fail(
            err, errlen,
            "private_key_stores: not valid YAML (%s); write e.g. "
            "[{dir: /etc/keyless/keys}, {file: /etc/keyless/one.key}]",
            parser.problem ? parser.problem : "syntax error");
        yaml_parser_delete(&parser);
        return st;
    }
    where w = {.file = NULL};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    kl_status st = KL_OK;
    if (root)
        st = stores(cfg, &w, &doc, root, err, errlen);
    else
        kl_cfg_clear_stores(cfg);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return st;
}
