/* SPDX-License-Identifier: Apache-2.0 */
/* A server's record (record.h, docs/FLEET.md "The server record"): JSON
 * written by the server itself, read by every router. Known fields are
 * strictly typed; unknown fields are ignored so that a newer keylessd can
 * add one during a rolling upgrade without the older routers dropping its
 * record; a change of meaning raises "v", which older readers refuse. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fleet/record.h"
#include "fleet/record_int.h"

bool kl_fleet_name_ok(const char *s, size_t len)
{
    if (len == 0 || len > KL_FLEET_NAME_MAX || s[0] == '.')
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

static const char *const role_names[] = {"keys", "egress", "router"};
static const char *const health_names[] = {"ok", "degraded", "draining"};

const char *kl_fleet_role_name(kl_fleet_role r)
{
    return (unsigned)r < 3 ? role_names[r] : "?";
}

const char *kl_fleet_health_name(kl_fleet_health h)
{
    return (unsigned)h < 3 ? health_names[h] : "?";
}

bool kl_fleet_role_parse(const char *s, kl_fleet_role *out)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, role_names[i])) {
            *out = (kl_fleet_role)i;
            return true;
        }
    return false;
}

static bool health_parse(const char *s, kl_fleet_health *out)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, health_names[i])) {
            *out = (kl_fleet_health)i;
            return true;
        }
    return false;
}

void kl_fleet_server_clear(kl_fleet_server *s)
{
    free(s->sets);
    memset(s, 0, sizeof *s);
}

kl_status kl_fleet_server_add_set(kl_fleet_server *s, const char *name,
                                  char *err, size_t errlen)
{
    if (!kl_fleet_name_ok(name, strlen(name))) {
        kl_errf(err, errlen,
                "key set name \"%.80s\" is not 1-64 letters, digits, '.', "
                "'_' or '-'",
                name);
        return KL_E_BAD_VALUE;
    }
    if (s->nsets >= KL_FLEET_MAX_SETS) {
        kl_errf(err, errlen, "more than %d key sets", KL_FLEET_MAX_SETS);
        return KL_E_BAD_VALUE;
    }
    for (size_t i = 0; i < s->nsets; i++)
        if (!strcmp(s->sets[i], name)) {
            kl_errf(err, errlen, "key set \"%s\" named twice", name);
            return KL_E_BAD_VALUE;
        }
    if ((s->nsets & (s->nsets - 1)) == 0) { /* 0, 1, 2, 4...: grow */
        size_t cap = s->nsets ? s->nsets * 2 : 1;
        void *p = realloc(s->sets, cap * sizeof *s->sets);
        if (!p)
            return KL_E_NOMEM;
        s->sets = p;
    }
    snprintf(s->sets[s->nsets++], sizeof *s->sets, "%s", name);
    return KL_OK;
}

static bool host_ok(const char *h)
{
    size_t n = strlen(h);
    if (n == 0 || n > KL_FLEET_HOST_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '.' || c == '-' || c == ':' ||
                  c == '_' || c == '%';
        if (!ok)
            return false;
    }
    return true;
}

/* Attribute names are lower case: they are matched by policies. */
static bool attr_key_ok(const char *k, size_t n)
{
    if (n == 0 || n > KL_FLEET_ATTR_KEY)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((k[i] >= 'a' && k[i] <= 'z') || (k[i] >= '0' && k[i] <= '9') ||
              k[i] == '_' || k[i] == '-'))
            return false;
    return true;
}

static bool attr_val_ok(const char *v, size_t n)
{
    if (n > KL_FLEET_ATTR_VAL)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
            return false;
    return true;
}

kl_status kl_fleet_server_check(const kl_fleet_server *s, char *err,
                                size_t errlen)
{
    const char *bad = NULL;
    if (!kl_fleet_name_ok(s->name, strlen(s->name)))
        bad = "name";
    else if (!kl_fleet_name_ok(s->region, strlen(s->region)))
        bad = "region";
    else if (!host_ok(s->host))
        bad = "host";
    else if (s->port == 0)
        bad = "port";
    else if ((unsigned)s->role > KL_FLEET_ROLE_ROUTER)
        bad = "role";
    else if ((unsigned)s->health > KL_FLEET_HEALTH_DRAINING)
        bad = "health";
    else if (s->priority < 0 || s->priority > 1000000)
        bad = "priority";
    else if (s->nattrs > KL_FLEET_ATTR_MAX)
        bad = "attrs";
    for (size_t i = 0; !bad && i < s->nattrs; i++)
        if (!attr_key_ok(s->attrs[i].key, strlen(s->attrs[i].key)) ||
            !attr_val_ok(s->attrs[i].value, strlen(s->attrs[i].value)))
            bad = "attrs";
    for (size_t i = 0; !bad && i < s->nsets; i++)
        if (!kl_fleet_name_ok(s->sets[i], strlen(s->sets[i])))
            bad = "sets";
    if (!bad && !attr_val_ok(s->version, strlen(s->version)))
        bad = "version";
    if (bad) {
        kl_errf(err, errlen, "server record: bad \"%s\" (%s)", bad,
                kl_fleet_field_rule(bad));
        return KL_E_BAD_VALUE;
    }
    return KL_OK;
}

const char *kl_fleet_field_rule(const char *field)
{
    if (!strcmp(field, "host"))
        return "a DNS name or an IP address literal, at most 255 characters";
    if (!strcmp(field, "port"))
        return "1-65535";
    if (!strcmp(field, "role"))
        return "keys, egress or router";
    if (!strcmp(field, "health"))
        return "ok, degraded or draining";
    if (!strcmp(field, "priority"))
        return "0-1000000";
    if (!strcmp(field, "attrs"))
        return "at most 16 names of 1-32 a-z 0-9 _ - with printable values of "
               "at most 64 bytes";
    if (!strcmp(field, "version"))
        return "printable, at most 64 bytes";
    if (!strcmp(field, "started") || !strcmp(field, "v"))
        return "an integer";
    return "1-64 letters, digits, '.', '_' or '-'";
}

kl_status kl_fleet_server_encode(const kl_fleet_server *s, char **out,
                                 size_t *len)
{
    json_t *o = json_object(), *attrs = json_object(), *sets = json_array();
    bool ok = o && attrs && sets;
    for (size_t i = 0; ok && i < s->nattrs; i++)
        ok = json_object_set_new(attrs, s->attrs[i].key,
                                 json_string(s->attrs[i].value)) == 0;
    for (size_t i = 0; ok && i < s->nsets; i++)
        ok = json_array_append_new(sets, json_string(s->sets[i])) == 0;
    ok = ok && !json_object_set_new(o, "v", json_integer(KL_FLEET_FORMAT)) &&
         !json_object_set_new(o, "name", json_string(s->name)) &&
         !json_object_set_new(o, "region", json_string(s->region)) &&
         !json_object_set(o, "attrs", attrs) &&
         !json_object_set_new(o, "host", json_string(s->host)) &&
         !json_object_set_new(o, "port", json_integer(s->port)) &&
         !json_object_set_new(o, "role",
                              json_string(kl_fleet_role_name(s->role))) &&
         !json_object_set_new(o, "priority", json_integer(s->priority)) &&
         !json_object_set(o, "sets", sets) &&
         !json_object_set_new(o, "health",
                              json_string(kl_fleet_health_name(s->health))) &&
         !json_object_set_new(o, "started", json_integer(s->started)) &&
         !json_object_set_new(o, "version", json_string(s->version));
    char *text = ok ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(attrs);
    json_decref(sets);
    json_decref(o);
    if (!text)
        return KL_E_NOMEM;
    *out = text;
    *len = strlen(text);
    return KL_OK;
}

/* ---- parsing -------------------------------------------------------- */

kl_status kl_fleet_json_load(const uint8_t *json, size_t len, const char *what,
                             json_t **root, char *err, size_t errlen)
{
    json_error_t je;
    *root = json_loadb((const char *)json, len, JSON_REJECT_DUPLICATES, &je);
    if (!*root) {
        kl_errf(err, errlen, "%s: not JSON (byte %d: %s)", what, je.position,
                je.text);
        return KL_E_BAD_VALUE;
    }
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        kl_errf(err, errlen, "%s: not a JSON object", what);
        return KL_E_BAD_VALUE;
    }
    json_t *v = json_object_get(*root, "v");
    if (!json_is_integer(v) || json_integer_value(v) != KL_FLEET_FORMAT) {
        json_decref(*root);
        *root = NULL;
        kl_errf(err, errlen,
                "%s: format \"v\" is not %d (written by a newer keylessd, or "
                "not a fleet record)",
                what, KL_FLEET_FORMAT);
        return KL_E_BAD_VALUE;
    }
    return KL_OK;
}

/* A string field into buf (absent: buf untouched); no NUL inside. */
static bool get_str(const json_t *o, const char *field, bool required,
                    char *buf, size_t cap)
{
    json_t *f = json_object_get(o, field);
    if (!f)
        return !required;
    if (!json_is_string(f))
        return false;
    size_t n = json_string_length(f);
    const char *s = json_string_value(f);
    if (n >= cap || memchr(s, 0, n))
        return false;
    memcpy(buf, s, n);
    buf[n] = 0;
    return true;
}

bool kl_fleet_json_int(const json_t *o, const char *field, bool required,
                       int64_t lo, int64_t hi, int64_t *out)
{
    json_t *f = json_object_get(o, field);
    if (!f)
        return !required;
    if (!json_is_integer(f))
        return false;
    json_int_t v = json_integer_value(f);
    if (v < lo || v > hi)
        return false;
    *out = (int64_t)v;
    return true;
}

static bool get_attrs(const json_t *o, kl_fleet_server *s)
{
    json_t *a = json_object_get(o, "attrs");
    if (!a)
        return true;
    if (!json_is_object(a) || json_object_size(a) > KL_FLEET_ATTR_MAX)
        return false;
    const char *k;
    json_t *v;
    json_object_foreach(a, k, v)
    {
        if (!json_is_string(v) || !attr_key_ok(k, strlen(k)) ||
            !attr_val_ok(json_string_value(v), json_string_length(v)) ||
            memchr(json_string_value(v), 0, json_string_length(v)))
            return false;
        kl_fleet_attr *at = &s->attrs[s->nattrs++];
        snprintf(at->key, sizeof at->key, "%s", k);
        snprintf(at->value, sizeof at->value, "%s", json_string_value(v));
    }
    return true;
}

static bool get_sets(const json_t *o, kl_fleet_server *s)
{
    json_t *a = json_object_get(o, "sets");
    if (!a)
        return true;
    if (!json_is_array(a) || json_array_size(a) > KL_FLEET_MAX_SETS)
        return false;
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (!json_is_string(v) ||
            memchr(json_string_value(v), 0, json_string_length(v)) ||
            kl_fleet_server_add_set(s, json_string_value(v), NULL, 0) != KL_OK)
            return false;
    }
    return true;
}

/* The first bad field's name, or NULL. */
static const char *read_fields(const json_t *o, kl_fleet_server *s)
{
    char role[16] = "", health[16] = "ok";
    int64_t port = 0, prio = 100, started = 0;
    if (!get_str(o, "name", true, s->name, sizeof s->name) ||
        !kl_fleet_name_ok(s->name, strlen(s->name)))
        return "name";
    if (!get_str(o, "region", true, s->region, sizeof s->region) ||
        !kl_fleet_name_ok(s->region, strlen(s->region)))
        return "region";
    if (!get_str(o, "host", true, s->host, sizeof s->host) || !host_ok(s->host))
        return "host";
    if (!kl_fleet_json_int(o, "port", true, 1, 65535, &port))
        return "port";
    s->port = (uint16_t)port;
    if (!get_str(o, "role", true, role, sizeof role) ||
        !kl_fleet_role_parse(role, &s->role))
        return "role";
    if (!kl_fleet_json_int(o, "priority", false, 0, 1000000, &prio))
        return "priority";
    s->priority = (int)prio;
    if (!get_str(o, "health", false, health, sizeof health) ||
        !health_parse(health, &s->health))
        return "health";
    if (!kl_fleet_json_int(o, "started", false, 0, INT64_MAX, &started))
        return "started";
    s->started = started;
    if (!get_str(o, "version", false, s->version, sizeof s->version) ||
        !attr_val_ok(s->version, strlen(s->version)))
        return "version";
    if (!get_attrs(o, s))
        return "attrs";
    if (!get_sets(o, s))
        return "sets";
    return NULL;
}

kl_status kl_fleet_server_parse(const uint8_t *json, size_t len,
                                kl_fleet_server *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    json_t *o;
    KL_GUARD(kl_fleet_json_load(json, len, "server record", &o, err, errlen));
    const char *bad = read_fields(o, out);
    json_decref(o);
    if (bad) {
        kl_errf(err, errlen, "server record: bad \"%s\" (%s)", bad,
                kl_fleet_field_rule(bad));
        kl_fleet_server_clear(out);
        return KL_E_BAD_VALUE;
    }
    return KL_OK;
}
