/* SPDX-License-Identifier: Apache-2.0 */
/* The routing table's YAML form (docs/ROUTING.md has the full format):
 *
 *   region_codes: {1: fedramp-high, 0x02: eu}   # tag 0x17 -> region
 *   key_sets:
 *     payments: {skis: [<40 hex>, ...], regions: [eu]}
 *   keys:
 *     <40 hex>: {regions: [fedramp-high]}
 *   servers:
 *     - {name: dc1, address: 10.0.0.1:2407, region: eu, priority: 10,
 *        serves: [payments, <40 hex>]}
 *     - {name: pool, dns: keyless.eu.internal:2407, region: eu,
 *        serves: [payments]}
 *     - {name: dub, address: 10.0.0.9:2407, region: eu-west, serves: [],
 *        attributes: {country: ie, tier: [edge, core]}}  # sealed keys
 *
 * Every error names the file, the line of the offending node, what is
 * wrong and the fix. Unknown keys are errors, not warnings: a misspelt
 * `serves` would silently remove routes. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/suggest.h"
#include "fleet/record.h"
#include "router/table_int.h"

#define LINE(n) ((unsigned long)(n)->start_mark.line + 1)

static kl_status fail(kl_rt_build *b, const yaml_node_t *n, const char *fmt,
                      ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n)
        snprintf(b->err, b->errlen, "%s:%lu: %s", b->path, LINE(n), msg);
    else
        snprintf(b->err, b->errlen, "%s: %s", b->path, msg);
    return KL_E_CONFIG;
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value
                                            : NULL;
}

static yaml_node_t *node(kl_rt_build *b, int id)
{
    return yaml_document_get_node(b->doc, id);
}

/* A region or key-set name: 1..64 of [A-Za-z0-9._-]. */
static bool good_name(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > KL_RT_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))
            return false;
    return true;
}

/* The loops every section shares: the pairs of a map, the items of a
 * list. */
#define FOR_PAIRS(p, m)                                                        \
    for (yaml_node_pair_t *p = (m)->data.mapping.pairs.start;                  \
         p < (m)->data.mapping.pairs.top; p++)
#define FOR_ITEMS(i, l)                                                        \
    for (yaml_node_item_t *i = (l)->data.sequence.items.start;                 \
         i < (l)->data.sequence.items.top; i++)

/* A name (region, set, server) in node n, or the one error for a bad one:
 * "<where>"<value>" is not a <kind> name; use ...". */
static kl_status check_name(kl_rt_build *b, yaml_node_t *n, const char *s,
                            const char *where, const char *kind)
{
    if (good_name(s))
        return KL_OK;
    return fail(b, n,
                "%s\"%s\" is not a %s name; use 1 to 64 letters, digits, "
                "'.', '_' or '-'",
                where, s ? s : "(not a scalar)", kind);
}

/* An unknown field or section name: says so, with the nearest known one
 * when it looks like a typing mistake (core/suggest.h). known is
 * NULL-terminated; hint lists them in words. */
static kl_status unknown(kl_rt_build *b, const yaml_node_t *n,
                         const char *where, const char *kind, const char *name,
                         const char *const *known, const char *hint)
{
    kl_suggest sg;
    kl_suggest_init(&sg, name);
    for (size_t i = 0; name && known[i]; i++)
        kl_suggest_add(&sg, known[i]);
    const char *near = kl_suggest_best(&sg);
    char mean[KL_RT_NAME_MAX + 32] = "";
    if (near)
        snprintf(mean, sizeof mean, " did you mean \"%s\"?", near);
    return fail(b, n, "%sunknown %s \"%s\";%s %s", where, kind,
                name ? name : "(not a scalar)", mean, hint);
}

/* Calls fn for every item of list l with its scalar text (NULL for an
 * item that is not a scalar: fn reports it). */
typedef kl_status (*item_fn)(kl_rt_build *b, yaml_node_t *item, const char *s,
                             void *arg);
static kl_status each_item(kl_rt_build *b, yaml_node_t *l, item_fn fn,
                           void *arg)
{
    FOR_ITEMS(i, l)
    {
        yaml_node_t *it = node(b, *i);
        KL_GUARD(fn(b, it, scalar(it), arg));
    }
    return KL_OK;
}

bool kl_rt_parse_ski(const char *s, uint8_t ski[KL_SKI_LEN])
{
    if (!s || strlen(s) != 2 * KL_SKI_LEN)
        return false;
    bool nonzero = false;
    for (size_t i = 0; i < KL_SKI_LEN; i++) {
        unsigned v = 0;
        for (int k = 0; k < 2; k++) {
            char c = s[2 * i + (size_t)k];
            v <<= 4;
            if (c >= '0' && c <= '9')
                v |= (unsigned)(c - '0');
            else if (c >= 'a' && c <= 'f')
                v |= (unsigned)(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F')
                v |= (unsigned)(c - 'A' + 10);
            else
                return false;
        }
        ski[i] = (uint8_t)v;
        nonzero |= v != 0;
    }
    return nonzero; /* an all-zero SKI is invalid (protocol P7) */
}

struct region_item_arg {
    const char *what;
    kl_rt_regions *out;
};

static kl_status region_item(kl_rt_build *b, yaml_node_t *it, const char *s,
                             void *arg)
{
    struct region_item_arg *a = arg;
    char where[KL_RT_NAME_MAX + 8 + 2 * KL_SKI_LEN];
    snprintf(where, sizeof where, "%s: ", a->what);
    KL_GUARD(check_name(b, it, s, where, "region"));
    snprintf(a->out->names[a->out->n++], KL_RT_NAME_MAX + 1, "%s", s);
    return KL_OK;
}

/* A list of region names (a sequence of scalars) into *out. */
static kl_status region_list(kl_rt_build *b, yaml_node_t *v, const char *what,
                             kl_rt_regions *out)
{
    if (v->type != YAML_SEQUENCE_NODE)
        return fail(b, v,
                    "%s: regions must be a list of region names, e.g. "
                    "\"regions: [fedramp-high, eu]\"",
                    what);
    if (out->set)
        return fail(b, v, "%s: regions is given twice; merge the lists", what);
    size_t n =
        (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    out->names = calloc(n ? n : 1, sizeof *out->names);
    if (!out->names)
        return KL_E_NOMEM;
    out->n = 0;
    out->set = true;
    struct region_item_arg a = {what, out};
    return each_item(b, v, region_item, &a);
}

static kl_status parse_region_codes(kl_rt_build *b, yaml_node_t *m)
{
    if (m->type != YAML_MAPPING_NODE)
        return fail(b, m,
                    "region_codes must be a map of compliance-region bytes "
                    "to names, e.g. \"region_codes: {1: fedramp-high}\"");
    FOR_PAIRS(p, m)
    {
        yaml_node_t *k = node(b, p->key), *v = node(b, p->value);
        const char *ks = scalar(k), *vs = scalar(v);
        char *end = NULL;
        unsigned long code = ks && *ks ? strtoul(ks, &end, 0) : 256;
        if (!ks || !*ks || *end || code > 255)
            return fail(b, k,
                        "region_codes: \"%s\" is not a byte; use 0..255 "
                        "(or 0x00..0xff), the value of tag 0x17",
                        ks ? ks : "(not a scalar)");
        char where[40];
        snprintf(where, sizeof where, "region_codes: %lu: ", code);
        KL_GUARD(check_name(b, v, vs, where, "region"));
        snprintf(b->t->region_of[code], KL_RT_NAME_MAX + 1, "%s", vs);
    }
    return KL_OK;
}

static kl_status set_ski_item(kl_rt_build *b, yaml_node_t *it, const char *hex,
                              void *arg)
{
    kl_rt_set *s = arg;
    uint8_t ski[KL_SKI_LEN];
    if (!kl_rt_parse_ski(hex, ski))
        return fail(b, it,
                    "key_sets: %s: \"%s\" is not an SKI; write the key's SKI "
                    "as 40 hex digits, not all zero (protocol P7)",
                    s->name, hex ? hex : "(not a scalar)");
    return kl_rt_build_set_ski(b, s, ski);
}

static kl_status parse_sets(kl_rt_build *b, yaml_node_t *m)
{
    if (m->type != YAML_MAPPING_NODE)
        return fail(b, m,
                    "key_sets must be a map of set names to "
                    "{skis: [...], regions: [...]}");
    FOR_PAIRS(p, m)
    {
        yaml_node_t *k = node(b, p->key), *v = node(b, p->value);
        const char *name = scalar(k);
        KL_GUARD(check_name(b, k, name, "key_sets: ", "set"));
        if (kl_rt_build_find_set(b, name))
            return fail(b, k, "key_sets: %s is defined twice; merge them",
                        name);
        if (v->type != YAML_MAPPING_NODE)
            return fail(b, v,
                        "key_sets: %s must be a map like {skis: [<40 hex "
                        "digits>], regions: [eu]}",
                        name);
        kl_rt_set *s;
        KL_GUARD(kl_rt_build_add_set(b, name, &s));
        bool have_skis = false;
        FOR_PAIRS(q, v)
        {
            yaml_node_t *qk = node(b, q->key), *qv = node(b, q->value);
            const char *field = scalar(qk);
            if (field && !strcmp(field, "regions")) {
                KL_GUARD(region_list(b, qv, name, &s->regions));
            } else if (field && !strcmp(field, "skis")) {
                have_skis = true;
                if (qv->type != YAML_SEQUENCE_NODE)
                    return fail(b, qv,
                                "key_sets: %s: skis must be a list of SKIs "
                                "(40 hex digits each)",
                                name);
                KL_GUARD(each_item(b, qv, set_ski_item, s));
            } else {
                static const char *const set_fields[] = {"skis", "regions",
                                                         NULL};
                char where[KL_RT_NAME_MAX + 16];
                snprintf(where, sizeof where, "key_sets: %s: ", name);
                return unknown(b, qk, where, "field", field, set_fields,
                               "a key set has skis and regions");
            }
        }
        if (!have_skis)
            return fail(b, v, "key_sets: %s has no skis; list its SKIs", name);
    }
    return KL_OK;
}

static kl_status parse_keys(kl_rt_build *b, yaml_node_t *m)
{
    if (m->type != YAML_MAPPING_NODE)
        return fail(b, m,
                    "keys must be a map of SKIs to {regions: [...]}, the "
                    "regions each key may be served from");
    FOR_PAIRS(p, m)
    {
        yaml_node_t *k = node(b, p->key), *v = node(b, p->value);
        uint8_t ski[KL_SKI_LEN];
        const char *hex = scalar(k);
        if (!kl_rt_parse_ski(hex, ski))
            return fail(b, k,
                        "keys: \"%s\" is not an SKI; write it as 40 hex "
                        "digits, not all zero (protocol P7)",
                        hex ? hex : "(not a scalar)");
        yaml_node_t *regions = NULL;
        if (v->type == YAML_MAPPING_NODE) {
            FOR_PAIRS(q, v)
            {
                const char *field = scalar(node(b, q->key));
                static const char *const key_fields[] = {"regions", NULL};
                char where[2 * KL_SKI_LEN + 16];
                snprintf(where, sizeof where, "keys: %s: ", hex);
                if (!field || strcmp(field, "regions"))
                    return unknown(b, node(b, q->key), where, "field", field,
                                   key_fields, "a key has regions");
                regions = node(b, q->value);
            }
        }
        if (!regions)
            return fail(b, v,
                        "keys: %s must be a map like {regions: "
                        "[fedramp-high]}",
                        hex);
        kl_rt_regions r = {0};
        kl_status st = region_list(b, regions, hex, &r);
        if (st == KL_OK)
            st = kl_rt_build_key_policy(b, ski, &r);
        free(r.names);
        if (st != KL_OK)
            return st;
    }
    return KL_OK;
}

/* "host:port", "[v6]:port" or "host" (port 2407). */
static bool split_address(const char *s, char *host, size_t hcap,
                          uint16_t *port)
{
    const char *colon;
    size_t hlen;
    if (!s || !*s)
        return false;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close)
            return false;
        hlen = (size_t)(close - s - 1);
        s++;
        colon = close[1] == ':' ? close + 1 : NULL;
        if (!colon && close[1])
            return false;
    } else {
        colon = strrchr(s, ':');
        if (colon && strchr(s, ':') != colon)
            return false; /* bare IPv6 needs brackets */
        hlen = colon ? (size_t)(colon - s) : strlen(s);
    }
    if (hlen == 0 || hlen >= hcap)
        return false;
    memcpy(host, s, hlen);
    host[hlen] = 0;
    *port = KL_DEFAULT_PORT;
    if (colon) {
        char *end;
        unsigned long p = strtoul(colon + 1, &end, 10);
        if (!colon[1] || *end || p == 0 || p > 65535)
            return false;
        *port = (uint16_t)p;
    }
    return true;
}

struct serve_arg {
    const char *name;
    size_t first, count; /* the servers the entry became */
};

static kl_status serve_item(kl_rt_build *b, yaml_node_t *it, const char *v,
                            void *arg)
{
    struct serve_arg *a = arg;
    uint8_t ski[KL_SKI_LEN];
    if (v && strlen(v) == 2 * KL_SKI_LEN && kl_rt_parse_ski(v, ski))
        return kl_rt_build_serve_ski(b, a->first, a->count, ski);
    if (v && kl_rt_build_find_set(b, v))
        return kl_rt_build_serve_set(b, a->first, a->count,
                                     kl_rt_build_find_set(b, v));
    return fail(b, it,
                "servers: %s serves \"%s\", which is neither an SKI (40 hex "
                "digits, not all zero) nor a key set defined under key_sets "
                "(define sets before servers)",
                a->name, v ? v : "(not a scalar)");
}

/* One attribute value (docs/ROUTING.md "Sealed keys"): the sealing
 * policy grammar's names and values, so that a policy can name it. */
static kl_status add_attr(kl_rt_build *b, yaml_node_t *v, const char *server,
                          const char *name, const char *value, uint32_t first)
{
    if (!value || !kl_fleet_seal_value_ok(value, strlen(value)))
        return fail(b, v,
                    "servers: %s: attribute %s: \"%s\" is not a value a "
                    "sealing policy can name; use lower-case letters, digits, "
                    "'-', '_', '.' and ':' (at most 64)",
                    server, name, value ? value : "(not a scalar)");
    if (b->t->nsattrs - first >= KL_RT_MAX_ATTRS)
        return fail(b, v, "servers: %s: more than %d attribute values", server,
                    KL_RT_MAX_ATTRS);
    for (size_t i = first; i < b->t->nsattrs; i++)
        if (!strcmp(b->t->sattrs[i].name, name) &&
            !strcmp(b->t->sattrs[i].value, value))
            return fail(b, v, "servers: %s: attribute %s=%s given twice",
                        server, name, value);
    return kl_rt_table_add_sattr(b->t, name, value);
}

/* attributes: {name: value or [values]} into the table's attribute pool;
 * s->attr_first and s->nattrs name them. The server's region counts as
 * its `region` attribute unless the map names one. */
static kl_status parse_attrs(kl_rt_build *b, yaml_node_t *m, kl_rt_server *s)
{
    uint32_t first = (uint32_t)b->t->nsattrs;
    bool has_region = false;
    if (m && m->type != YAML_MAPPING_NODE)
        return fail(b, m,
                    "servers: %s: attributes must be a map like {country: ie, "
                    "tier: [edge, core]}",
                    s->name);
    if (m)
        FOR_PAIRS(p, m)
        {
            yaml_node_t *k = node(b, p->key), *v = node(b, p->value);
            const char *name = scalar(k);
            if (!name || !kl_fleet_seal_name_ok(name, strlen(name)))
                return fail(b, k,
                            "servers: %s: attribute name \"%s\" is not one a "
                            "sealing policy can name; use a lower-case letter "
                            "then letters, digits, '-' and '_' (at most 64)",
                            s->name, name ? name : "(not a scalar)");
            has_region |= !strcmp(name, "region");
            if (v->type == YAML_SEQUENCE_NODE) {
                if (v->data.sequence.items.start == v->data.sequence.items.top)
                    return fail(b, v,
                                "servers: %s: attribute %s: an empty "
                                "list; give at least one value",
                                s->name, name);
                FOR_ITEMS(i, v)
                {
                    yaml_node_t *it = node(b, *i);
                    KL_GUARD(add_attr(b, it, s->name, name, scalar(it), first));
                }
            } else {
                KL_GUARD(add_attr(b, v, s->name, name, scalar(v), first));
            }
        }
    if (!has_region && kl_fleet_seal_value_ok(s->region, strlen(s->region)))
        KL_GUARD(kl_rt_table_add_sattr(b->t, "region", s->region));
    s->attr_first = first;
    s->nattrs = (uint32_t)(b->t->nsattrs - first);
    return KL_OK;
}

static kl_status parse_server(kl_rt_build *b, yaml_node_t *e)
{
    if (e->type != YAML_MAPPING_NODE)
        return fail(b, e,
                    "servers: each entry must be a map like {name: dc1, "
                    "address: host:2407, region: eu, serves: [...]}");
    kl_rt_server s;
    memset(&s, 0, sizeof s);
    s.priority = 100;
    s.sealing = true; /* a key server of the table may hold sealed keys */
    const char *addr = NULL, *dns = NULL;
    yaml_node_t *serves = NULL, *addr_node = NULL, *attrs = NULL;
    FOR_PAIRS(p, e)
    {
        yaml_node_t *k = node(b, p->key), *v = node(b, p->value);
        const char *f = scalar(k), *vs = scalar(v);
        if (!f)
            return fail(b, k, "servers: a field name must be a scalar");
        /* an unknown field is named as such before its value is looked at
         * (a misspelt `serves:` holds a list) */
        static const char *const server_fields[] = {
            "name",     "address", "dns",        "region",
            "priority", "serves",  "attributes", NULL};
        bool known = false;
        for (size_t i = 0; server_fields[i]; i++)
            known |= !strcmp(f, server_fields[i]);
        if (!known)
            return unknown(b, k, "servers: ", "field", f, server_fields,
                           "a server has name, address or dns, region, "
                           "priority, serves and attributes");
        if (!strcmp(f, "serves")) {
            serves = v;
            continue;
        }
        if (!strcmp(f, "attributes")) {
            attrs = v;
            continue;
        }
        if (!vs)
            return fail(b, v, "servers: %s must be a single value", f);
        if (!strcmp(f, "name")) {
            KL_GUARD(check_name(b, v, vs, "servers: ", "server"));
            snprintf(s.name, sizeof s.name, "%s", vs);
        } else if (!strcmp(f, "address")) {
            addr = vs;
            addr_node = v;
        } else if (!strcmp(f, "dns")) {
            dns = vs;
            addr_node = v;
        } else if (!strcmp(f, "region")) {
            KL_GUARD(check_name(b, v, vs, "servers: ", "region"));
            snprintf(s.region, sizeof s.region, "%s", vs);
        } else if (!strcmp(f, "priority")) {
            char *end;
            long pr = strtol(vs, &end, 10);
            if (!*vs || *end || pr < 0 || pr > 1000000)
                return fail(b, v,
                            "servers: priority \"%s\" is not a number in "
                            "0..1000000 (lower is preferred)",
                            vs);
            s.priority = (int)pr;
        }
    }
    if (!s.name[0])
        return fail(b, e, "servers: an entry has no name; add \"name: ...\"");
    if (!s.region[0])
        return fail(b, e,
                    "servers: %s has no region; add \"region: ...\" (the "
                    "region it serves keys from)",
                    s.name);
    if (!!addr == !!dns)
        return fail(b, e,
                    "servers: %s needs exactly one of \"address: host:port\" "
                    "or \"dns: name:port\"",
                    s.name);
    if (kl_rt_build_find_server_name(b, s.name))
        return fail(b, e,
                    "servers: the name %s is used twice; names must be "
                    "unique",
                    s.name);
    if (!split_address(addr ? addr : dns, s.host, sizeof s.host, &s.port))
        return fail(b, addr_node,
                    "servers: %s: \"%s\" is not an address; write host:port, "
                    "[v6]:port or host (port 2407)",
                    s.name, addr ? addr : dns);
    if (!serves || serves->type != YAML_SEQUENCE_NODE)
        return fail(b, serves ? serves : e,
                    "servers: %s: serves must be a list of SKIs (40 hex "
                    "digits) and key-set names",
                    s.name);
    KL_GUARD(parse_attrs(b, attrs, &s)); /* dns: expansions share them */
    size_t first = b->t->nservers, count = 1;
    if (dns) {
        KL_GUARD(kl_rt_build_add_dns(b, &s, &count));
        if (count == 0)
            return fail(b, addr_node,
                        "servers: %s: dns name %s did not resolve; check the "
                        "name (the previous table stays in use)",
                        s.name, s.host);
    } else {
        KL_GUARD(kl_rt_build_add_server(b, &s));
    }
    struct serve_arg a = {s.name, first, count};
    return each_item(b, serves, serve_item, &a);
}

static kl_status parse_root(kl_rt_build *b, yaml_node_t *root)
{
    if (!root) /* an empty file: no routes */
        return KL_OK;
    if (root->type != YAML_MAPPING_NODE)
        return fail(b, root,
                    "a routing table is a map with region_codes, key_sets, "
                    "keys and servers");
    /* sections in dependency order, wherever they are in the file */
    static const char *const order[] = {"region_codes", "key_sets", "keys",
                                        "servers", NULL};
    FOR_PAIRS(p, root)
    {
        const char *k = scalar(node(b, p->key));
        bool known = false;
        for (size_t i = 0; i < 4; i++)
            known |= k && !strcmp(k, order[i]);
        if (!known)
            return unknown(b, node(b, p->key), "", "section", k, order,
                           "a routing table has region_codes, key_sets, "
                           "keys and servers");
    }
    for (size_t i = 0; i < 4; i++) {
        int seen = 0;
        FOR_PAIRS(p, root)
        {
            const char *k = scalar(node(b, p->key));
            if (strcmp(k, order[i]))
                continue;
            yaml_node_t *v = node(b, p->value);
            if (seen++)
                return fail(b, node(b, p->key),
                            "section %s appears twice; merge them", k);
            if (v->type == YAML_SCALAR_NODE && !*scalar(v))
                continue; /* "keys:" with nothing under it */
            switch (i) {
            case 0: KL_GUARD(parse_region_codes(b, v)); break;
            case 1: KL_GUARD(parse_sets(b, v)); break;
            case 2: KL_GUARD(parse_keys(b, v)); break;
            default:
                if (v->type != YAML_SEQUENCE_NODE)
                    return fail(b, v,
                                "servers must be a list of entries starting "
                                "with \"- name: ...\"");
                FOR_ITEMS(it, v)
                KL_GUARD(parse_server(b, node(b, *it)));
            }
        }
    }
    return KL_OK;
}

kl_status kl_rt_table_parse(const char *path, const uint8_t *text, size_t len,
                            kl_rt_resolve_fn resolve, void *resolve_arg,
                            kl_rt_table **out, char *err, size_t errlen)
{
    *out = NULL;
    if (errlen)
        err[0] = 0;
    kl_rt_build b;
    KL_GUARD(kl_rt_build_init(&b, path, err, errlen, resolve, resolve_arg));
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        kl_rt_build_abort(&b);
        return KL_E_NOMEM;
    }
    yaml_parser_set_input_string(&parser, text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, errlen,
                 "%s:%lu: YAML syntax: %s; fix the indentation "
                 "or quoting there",
                 path, (unsigned long)parser.problem_mark.line + 1,
                 parser.problem ? parser.problem : "invalid");
        yaml_parser_delete(&parser);
        kl_rt_build_abort(&b);
        return KL_E_CONFIG;
    }
    b.doc = &doc;
    kl_status st = parse_root(&b, yaml_document_get_root_node(&doc));
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (st != KL_OK) {
        if (st == KL_E_NOMEM && errlen)
            snprintf(err, errlen, "%s: out of memory", path);
        kl_rt_build_abort(&b);
        return st;
    }
    return kl_rt_build_finish(&b, out);
}

kl_status kl_rt_table_load(const char *path, kl_rt_resolve_fn resolve,
                           void *resolve_arg, kl_rt_table **out, char *err,
                           size_t errlen)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen,
                 "%s: cannot open the routing table: %m; check "
                 "the path (router_table)",
                 path);
        return KL_E_CONFIG;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (len < cap)
            break;
        if (cap >= 64u * 1024u * 1024u) {
            free(buf);
            fclose(f);
            snprintf(err, errlen, "%s: larger than 64 MiB; split it", path);
            return KL_E_CONFIG;
        }
        uint8_t *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    fclose(f);
    if (!buf)
        return KL_E_NOMEM;
    kl_status st = kl_rt_table_parse(path, buf, len, resolve, resolve_arg, out,
                                     err, errlen);
    free(buf);
    return st;
}
