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

#include "fleet/etcd.h"
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
    free(s->seal_attrs);
    memset(s, 0, sizeof *s);
}

kl_status kl_fleet_server_copy(kl_fleet_server *dst, const kl_fleet_server *src)
{
    kl_fleet_server tmp = *src;
    tmp.sets = NULL;
    tmp.nsets = 0;
    tmp.seal_attrs = NULL;
    tmp.n_seal_attrs = 0;
    for (size_t i = 0; i < src->nsets; i++)
        if (kl_fleet_server_add_set(&tmp, src->sets[i], NULL, 0) != KL_OK)
            goto fail;
    if (src->n_seal_attrs) {
        tmp.seal_attrs = malloc(src->n_seal_attrs * sizeof *tmp.seal_attrs);
        if (!tmp.seal_attrs)
            goto fail;
        memcpy(tmp.seal_attrs, src->seal_attrs,
               src->n_seal_attrs * sizeof *tmp.seal_attrs);
        tmp.n_seal_attrs = src->n_seal_attrs;
    }
    kl_fleet_server_clear(dst);
    *dst = tmp;
    return KL_OK;
fail:
    kl_fleet_server_clear(&tmp);
    return KL_E_NOMEM;
}

/* ---- sealed keys: the key and the attributes ------------------------ */

static bool seal_lower(char c)
{
    return c >= 'a' && c <= 'z';
}

static bool seal_name_char(char c)
{
    return seal_lower(c) || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* and, or, not, in: the policy language's keywords */
static bool seal_keyword(const char *s, size_t len)
{
    static const char *const kw[] = {"and", "or", "not", "in"};
    for (size_t i = 0; i < 4; i++)
        if (strlen(kw[i]) == len && !memcmp(s, kw[i], len))
            return true;
    return false;
}

bool kl_fleet_seal_name_ok(const char *s, size_t len)
{
    if (!s || len == 0 || len > KL_FLEET_SEAL_WORD || !seal_lower(s[0]))
        return false;
    for (size_t i = 1; i < len; i++)
        if (!seal_name_char(s[i]))
            return false;
    return !seal_keyword(s, len);
}

bool kl_fleet_seal_value_ok(const char *s, size_t len)
{
    if (!s || len == 0 || len > KL_FLEET_SEAL_WORD)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!seal_name_char(s[i]) && s[i] != '.' && s[i] != ':')
            return false;
    return !seal_keyword(s, len);
}

static bool seal_key_ok(uint16_t kem, const uint8_t *pk, size_t len)
{
    if (kem == KL_FLEET_KEM_X25519)
        return len == 32;
    /* SerializePublicKey of P-256 (RFC 9180 7.1.1): 04 || X || Y; whether
     * the point is on the curve is the sealer's check (seal/hpke.c) */
    return kem == KL_FLEET_KEM_P256 && len == 65 && pk[0] == 0x04;
}

kl_status kl_fleet_server_set_sealing(kl_fleet_server *s, uint16_t kem,
                                      const uint8_t *pk, size_t len, char *err,
                                      size_t errlen)
{
    if (!pk || !seal_key_ok(kem, pk, len)) {
        kl_errf(err, errlen,
                "sealing key: not an X25519 (32 bytes) or uncompressed "
                "P-256 (65 bytes) public key");
        return KL_E_BAD_VALUE;
    }
    s->seal_kem = kem;
    memcpy(s->seal_pk, pk, len);
    s->seal_pk_len = len;
    return KL_OK;
}

kl_status kl_fleet_server_add_seal_attr(kl_fleet_server *s, const char *name,
                                        const char *value, char *err,
                                        size_t errlen)
{
    if (!kl_fleet_seal_name_ok(name, strlen(name)) ||
        !kl_fleet_seal_value_ok(value, strlen(value))) {
        kl_errf(err, errlen,
                "sealing attribute \"%.70s=%.70s\": names are lower-case "
                "letters, digits, '-' and '_' starting with a letter, values "
                "those and '.' ':' (at most 64 bytes each, not and/or/not/in)",
                name, value);
        return KL_E_BAD_VALUE;
    }
    if (s->n_seal_attrs >= KL_FLEET_SEAL_ATTRS) {
        kl_errf(err, errlen, "more than %d sealing attribute values",
                KL_FLEET_SEAL_ATTRS);
        return KL_E_BAD_VALUE;
    }
    for (size_t i = 0; i < s->n_seal_attrs; i++)
        if (!strcmp(s->seal_attrs[i].name, name) &&
            !strcmp(s->seal_attrs[i].value, value)) {
            kl_errf(err, errlen, "sealing attribute %s=%s given twice", name,
                    value);
            return KL_E_BAD_VALUE;
        }
    if ((s->n_seal_attrs & (s->n_seal_attrs - 1)) == 0) { /* 0, 1, 2, 4.. */
        size_t cap = s->n_seal_attrs ? s->n_seal_attrs * 2 : 1;
        void *p = realloc(s->seal_attrs, cap * sizeof *s->seal_attrs);
        if (!p)
            return KL_E_NOMEM;
        s->seal_attrs = p;
    }
    kl_fleet_sattr *a = &s->seal_attrs[s->n_seal_attrs++];
    snprintf(a->name, sizeof a->name, "%s", name);
    snprintf(a->value, sizeof a->value, "%s", value);
    return KL_OK;
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
    if (!bad && (s->seal_kem || s->n_seal_attrs) &&
        !seal_key_ok(s->seal_kem, s->seal_pk, s->seal_pk_len))
        bad = "sealing"; /* attributes without a key: nothing to open with */
    for (size_t i = 0; !bad && i < s->n_seal_attrs; i++)
        if (!kl_fleet_seal_name_ok(s->seal_attrs[i].name,
                                   strlen(s->seal_attrs[i].name)) ||
            !kl_fleet_seal_value_ok(s->seal_attrs[i].value,
                                    strlen(s->seal_attrs[i].value)))
            bad = "sealing";
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
    if (!strcmp(field, "sealing"))
        return "an object: \"kem\" x25519 or p256, \"key\" the base64 of its "
               "32- or 65-byte public key, \"attrs\" names of the sealing "
               "policy grammar to a value or a list of values (at most 64)";
    if (!strcmp(field, "started") || !strcmp(field, "v"))
        return "an integer";
    return "1-64 letters, digits, '.', '_' or '-'";
}

/* "sealing": {"kem", "key", "attrs": {name: value or [values]}} */
static json_t *sealing_json(const kl_fleet_server *s)
{
    json_t *o = json_object(), *attrs = json_object();
    char *b64 = kl_etcd_b64(s->seal_pk, s->seal_pk_len);
    bool ok = o && attrs && b64;
    for (size_t i = 0; ok && i < s->n_seal_attrs; i++) {
        const kl_fleet_sattr *a = &s->seal_attrs[i];
        json_t *have = json_object_get(attrs, a->name);
        if (!have) {
            ok = !json_object_set_new(attrs, a->name, json_string(a->value));
        } else if (json_is_string(have)) { /* a second value: a list */
            json_t *l = json_array();
            ok = l && !json_array_append(l, have) &&
                 !json_array_append_new(l, json_string(a->value)) &&
                 !json_object_set_new(attrs, a->name, l);
        } else {
            ok = !json_array_append_new(have, json_string(a->value));
        }
    }
    ok = ok &&
         !json_object_set_new(o, "kem",
                              json_string(s->seal_kem == KL_FLEET_KEM_P256
                                              ? "p256"
                                              : "x25519")) &&
         !json_object_set_new(o, "key", json_string(b64)) &&
         !json_object_set(o, "attrs", attrs);
    free(b64);
    json_decref(attrs);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
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
    if (ok && s->seal_kem) { /* absent without a sealing key: old readers
                                and old records are the same */
        json_t *sj = sealing_json(s);
        ok = sj && !json_object_set_new(o, "sealing", sj);
    }
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

static bool seal_attr_add(kl_fleet_server *s, const char *k, const json_t *v)
{
    return json_is_string(v) &&
           !memchr(json_string_value(v), 0, json_string_length(v)) &&
           kl_fleet_server_add_seal_attr(s, k, json_string_value(v), NULL, 0) ==
               KL_OK;
}

/* "sealing" (absent: no sealing key). Unknown members are ignored, as in
 * the record. */
static bool get_sealing(const json_t *o, kl_fleet_server *s)
{
    json_t *sj = json_object_get(o, "sealing");
    if (!sj)
        return true;
    if (!json_is_object(sj))
        return false;
    char kem[16] = "", b64[128] = "";
    if (!get_str(sj, "kem", true, kem, sizeof kem) ||
        !get_str(sj, "key", true, b64, sizeof b64))
        return false;
    uint16_t id = !strcmp(kem, "x25519") ? KL_FLEET_KEM_X25519
                  : !strcmp(kem, "p256") ? KL_FLEET_KEM_P256
                                         : 0;
    uint8_t *pk = NULL;
    size_t pk_len = 0;
    if (!id || kl_etcd_unb64(b64, strlen(b64), &pk, &pk_len) != KL_OK)
        return false;
    kl_status st = kl_fleet_server_set_sealing(s, id, pk, pk_len, NULL, 0);
    free(pk);
    if (st != KL_OK)
        return false;
    json_t *a = json_object_get(sj, "attrs");
    if (!a)
        return true;
    if (!json_is_object(a))
        return false;
    const char *k;
    json_t *v;
    json_object_foreach(a, k, v)
    {
        if (json_is_array(v)) {
            size_t i;
            json_t *e;
            if (!json_array_size(v))
                return false;
            json_array_foreach(v, i, e)
            {
                if (!seal_attr_add(s, k, e))
                    return false;
            }
        } else if (!seal_attr_add(s, k, v)) {
            return false;
        }
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
    if (!get_sealing(o, s))
        return "sealing";
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
