/* SPDX-License-Identifier: Apache-2.0 */
/* The gateway's JSON answers (etcd.h, docs/DESIGN.md "etcd client
 * (src/fleet)"): pure functions over untrusted bytes, fuzzed by
 * fuzz/fuzz_etcd_json.c. The gateway writes int64s as strings and leaves
 * out every field that holds its zero value (a PUT event has no "type", a
 * gone lease no "TTL", an empty range no "kvs"), so an absent field reads
 * as zero; a field of the wrong JSON type is an error. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fleet/etcd.h"

/* ---- fields ---------------------------------------------------------- */

static kl_status load(const char *body, size_t len, json_t **root, char *err,
                      size_t errlen)
{
    json_error_t je;
    *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!*root) {
        bool trunc = json_error_code(&je) == json_error_premature_end_of_input;
        kl_errf(err, errlen, "%s JSON from etcd at byte %d: %s",
                trunc ? "truncated" : "malformed", je.position, je.text);
        return trunc ? KL_E_TRUNCATED : KL_E_KEY;
    }
    if (!json_is_object(*root)) {
        kl_errf(err, errlen, "the answer from etcd is not a JSON object");
        json_decref(*root);
        *root = NULL;
        return KL_E_KEY;
    }
    return KL_OK;
}

/* An int64 field: absent is 0; a string of digits (the gateway's form) or
 * a JSON integer. */
static kl_status get_i64(const json_t *obj, const char *name, int64_t *v,
                         char *err, size_t errlen)
{
    *v = 0;
    json_t *f = json_object_get(obj, name);
    if (!f)
        return KL_OK;
    if (json_is_integer(f)) {
        *v = (int64_t)json_integer_value(f);
        return KL_OK;
    }
    if (json_is_string(f)) {
        const char *s = json_string_value(f);
        size_t n = json_string_length(f);
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (n > 0 && n < 21 && end == s + n && errno == 0 &&
            (s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))) {
            *v = x;
            return KL_OK;
        }
    }
    kl_errf(err, errlen, "etcd's answer has a \"%s\" that is not an int64",
            name);
    return KL_E_KEY;
}

static kl_status get_bool(const json_t *obj, const char *name, bool *v,
                          char *err, size_t errlen)
{
    *v = false;
    json_t *f = json_object_get(obj, name);
    if (!f)
        return KL_OK;
    if (!json_is_boolean(f)) {
        kl_errf(err, errlen, "etcd's answer has a \"%s\" that is not a bool",
                name);
        return KL_E_KEY;
    }
    *v = json_is_true(f);
    return KL_OK;
}

/* A base64 field into a malloc'd buffer (empty when absent). */
static kl_status get_bytes(const json_t *obj, const char *name, uint8_t **b,
                           size_t *n, char *err, size_t errlen)
{
    json_t *f = json_object_get(obj, name);
    if (!f)
        return kl_etcd_unb64("", 0, b, n);
    if (!json_is_string(f) ||
        kl_etcd_unb64(json_string_value(f), json_string_length(f), b, n) !=
            KL_OK) {
        kl_errf(err, errlen, "etcd's answer has a \"%s\" that is not base64",
                name);
        return KL_E_KEY;
    }
    return KL_OK;
}

static kl_status get_object(const json_t *obj, const char *name, json_t **o,
                            bool required, char *err, size_t errlen)
{
    *o = json_object_get(obj, name);
    if (*o && json_is_object(*o))
        return KL_OK;
    if (!*o && !required)
        return KL_OK;
    kl_errf(err, errlen, "etcd's answer has %s \"%s\" object",
            *o ? "a wrong" : "no", name);
    *o = NULL;
    return KL_E_KEY;
}

static kl_status header_revision(const json_t *obj, int64_t *rev, char *err,
                                 size_t errlen)
{
    json_t *h;
    *rev = 0;
    KL_GUARD(get_object(obj, "header", &h, true, err, errlen));
    return get_i64(h, "revision", rev, err, errlen);
}

/* Copies a JSON string into buf, replacing control characters (it ends
 * up in a log line). */
static void copy_text(char *buf, size_t cap, const char *s, size_t n)
{
    size_t i = 0;
    for (; i < n && i + 1 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        buf[i] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
    }
    buf[i] = '\0';
}

/* {"error":"..","code":N,"message":".."} (unary) or {"error":{"grpc_code":
 * N,"message":".."}} (a stream's). */
static bool error_of(const json_t *root, kl_etcd_error *e)
{
    e->code = -1;
    e->message[0] = '\0';
    json_t *er = json_object_get(root, "error");
    if (!er)
        return false;
    json_t *code = json_object_get(root, "code");
    json_t *msg = json_object_get(root, "message");
    if (json_is_object(er)) {
        code = json_object_get(er, "grpc_code");
        msg = json_object_get(er, "message");
    } else if (!msg || !json_is_string(msg)) {
        msg = er;
    }
    e->code =
        json_is_integer(code) ? (int)(json_integer_value(code) & 0xff) : 0;
    if (json_is_string(msg))
        copy_text(e->message, sizeof e->message, json_string_value(msg),
                  json_string_length(msg));
    else
        snprintf(e->message, sizeof e->message, "(no message)");
    return true;
}

bool kl_etcd_parse_error(const char *body, size_t len, kl_etcd_error *e)
{
    e->code = -1;
    e->message[0] = '\0';
    json_t *root = json_loadb(body, len, 0, NULL);
    bool is = root && json_is_object(root) && error_of(root, e);
    json_decref(root);
    return is;
}

static kl_status check_error(const json_t *root, char *err, size_t errlen)
{
    kl_etcd_error e;
    if (!error_of(root, &e))
        return KL_OK;
    kl_errf(err, errlen, "etcd: %s (code %d)", e.message, e.code);
    return KL_E_BAD_VALUE;
}

/* ---- answers --------------------------------------------------------- */

void kl_etcd_kv_clear(kl_etcd_kv *kv)
{
    free(kv->key);
    free(kv->value);
    memset(kv, 0, sizeof *kv);
}

void kl_etcd_page_clear(kl_etcd_page *r)
{
    for (size_t i = 0; i < r->n; i++)
        kl_etcd_kv_clear(&r->kvs[i]);
    free(r->kvs);
    memset(r, 0, sizeof *r);
}

static kl_status parse_kv(const json_t *o, kl_etcd_kv *kv, char *err,
                          size_t errlen)
{
    memset(kv, 0, sizeof *kv);
    kl_status st;
    if (!json_is_object(o)) {
        kl_errf(err, errlen,
                "etcd's answer has a key-value that is not an "
                "object");
        return KL_E_KEY;
    }
    if ((st = get_bytes(o, "key", &kv->key, &kv->key_len, err, errlen)) ||
        (st = get_bytes(o, "value", &kv->value, &kv->value_len, err, errlen)) ||
        (st = get_i64(o, "create_revision", &kv->create_revision, err,
                      errlen)) ||
        (st = get_i64(o, "mod_revision", &kv->mod_revision, err, errlen)) ||
        (st = get_i64(o, "version", &kv->version, err, errlen)) ||
        (st = get_i64(o, "lease", &kv->lease, err, errlen))) {
        kl_etcd_kv_clear(kv);
        return st;
    }
    return KL_OK;
}

kl_status kl_etcd_parse_range(const char *body, size_t len, kl_etcd_page *r,
                              char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    json_t *root;
    KL_GUARD(load(body, len, &root, err, errlen));
    kl_status st;
    json_t *kvs = json_object_get(root, "kvs");
    if ((st = check_error(root, err, errlen)) ||
        (st = header_revision(root, &r->revision, err, errlen)) ||
        (st = get_i64(root, "count", &r->count, err, errlen)) ||
        (st = get_bool(root, "more", &r->more, err, errlen)))
        goto out;
    if (kvs && !json_is_array(kvs)) {
        kl_errf(err, errlen,
                "etcd's answer has a \"kvs\" that is not an "
                "array");
        st = KL_E_KEY;
        goto out;
    }
    size_t n = kvs ? json_array_size(kvs) : 0;
    if (n) {
        r->kvs = calloc(n, sizeof *r->kvs);
        if (!r->kvs) {
            st = KL_E_NOMEM;
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if ((st = parse_kv(json_array_get(kvs, i), &r->kvs[i], err, errlen)))
            goto out;
        r->n++;
    }
out:
    json_decref(root);
    if (st != KL_OK)
        kl_etcd_page_clear(r);
    return st;
}

kl_status kl_etcd_parse_write(const char *body, size_t len, int64_t *revision,
                              int64_t *deleted, char *err, size_t errlen)
{
    int64_t rev = 0, del = 0;
    if (revision)
        *revision = 0;
    if (deleted)
        *deleted = 0;
    json_t *root;
    KL_GUARD(load(body, len, &root, err, errlen));
    kl_status st;
    if (!(st = check_error(root, err, errlen)) &&
        !(st = header_revision(root, &rev, err, errlen)))
        st = get_i64(root, "deleted", &del, err, errlen);
    json_decref(root);
    if (revision)
        *revision = st == KL_OK ? rev : 0;
    if (deleted)
        *deleted = st == KL_OK ? del : 0;
    return st;
}

kl_status kl_etcd_parse_lease(const char *body, size_t len, bool keepalive,
                              int64_t *id, int64_t *ttl, char *err,
                              size_t errlen)
{
    *id = 0;
    *ttl = 0;
    json_t *root, *res;
    KL_GUARD(load(body, len, &root, err, errlen));
    kl_status st;
    if ((st = check_error(root, err, errlen)))
        goto out;
    /* a keepalive is a stream: its one answer comes as {"result":{..}} */
    res = root;
    if (keepalive && (st = get_object(root, "result", &res, true, err, errlen)))
        goto out;
    int64_t rev;
    if ((st = header_revision(res, &rev, err, errlen)) ||
        (st = get_i64(res, "ID", id, err, errlen)) ||
        (st = get_i64(res, "TTL", ttl, err, errlen)))
        goto out;
    json_t *e = json_object_get(res, "error");
    if (json_is_string(e) && json_string_length(e) > 0) {
        char m[200];
        copy_text(m, sizeof m, json_string_value(e), json_string_length(e));
        kl_errf(err, errlen, "etcd: lease: %s", m);
        st = KL_E_BAD_VALUE;
    }
out:
    json_decref(root);
    if (st != KL_OK) {
        *id = 0;
        *ttl = 0;
    }
    return st;
}

kl_status kl_etcd_parse_timetolive(const char *body, size_t len, int64_t *ttl,
                                   int64_t *granted, char *err, size_t errlen)
{
    int64_t t = 0, g = 0, rev;
    *ttl = 0;
    if (granted)
        *granted = 0;
    json_t *root;
    KL_GUARD(load(body, len, &root, err, errlen));
    kl_status st;
    if (!(st = check_error(root, err, errlen)) &&
        !(st = header_revision(root, &rev, err, errlen)) &&
        !(st = get_i64(root, "TTL", &t, err, errlen)))
        st = get_i64(root, "grantedTTL", &g, err, errlen);
    json_decref(root);
    if (st == KL_OK) {
        *ttl = t;
        if (granted)
            *granted = g;
    }
    return st;
}

kl_status kl_etcd_parse_auth(const char *body, size_t len, char *token,
                             size_t cap, char *err, size_t errlen)
{
    if (cap)
        token[0] = '\0';
    json_t *root;
    KL_GUARD(load(body, len, &root, err, errlen));
    kl_status st = check_error(root, err, errlen);
    json_t *t = json_object_get(root, "token");
    if (st == KL_OK) {
        /* it goes into a header line: no space, no control byte */
        const char *s = json_is_string(t) ? json_string_value(t) : NULL;
        size_t n = s ? json_string_length(t) : 0;
        bool ok = n > 0 && n < cap && n < KL_ETCD_TOKEN_MAX;
        for (size_t i = 0; ok && i < n; i++)
            ok = s[i] > 0x20 && s[i] < 0x7f;
        if (ok) {
            memcpy(token, s, n);
            token[n] = '\0';
        } else {
            kl_errf(err, errlen,
                    "etcd's authenticate answer has no usable \"token\" "
                    "(printable, 1 to %d bytes)",
                    KL_ETCD_TOKEN_MAX - 1);
            st = KL_E_KEY;
        }
    }
    json_decref(root);
    return st;
}

/* One event of a watch answer, delivered to cb. */
static kl_status watch_event(const json_t *ev, kl_etcd_watch_cb cb, void *arg,
                             char *err, size_t errlen)
{
    if (!json_is_object(ev)) {
        kl_errf(err, errlen, "a watch event from etcd is not an object");
        return KL_E_KEY;
    }
    kl_etcd_event e = {.type = KL_ETCD_PUT};
    json_t *type = json_object_get(ev, "type");
    if (type) {
        const char *t = json_string_value(type);
        if (t && strcmp(t, "PUT") == 0) {
            e.type = KL_ETCD_PUT;
        } else if (t && strcmp(t, "DELETE") == 0) {
            e.type = KL_ETCD_DELETE;
        } else {
            kl_errf(err, errlen,
                    "a watch event from etcd has an unknown "
                    "type");
            return KL_E_KEY;
        }
    }
    json_t *kvj;
    KL_GUARD(get_object(ev, "kv", &kvj, true, err, errlen));
    kl_etcd_kv kv;
    KL_GUARD(parse_kv(kvj, &kv, err, errlen));
    if (kv.mod_revision <= 0) {
        kl_etcd_kv_clear(&kv);
        kl_errf(err, errlen, "a watch event from etcd has no mod_revision");
        return KL_E_KEY;
    }
    e.key = kv.key;
    e.key_len = kv.key_len;
    e.value = kv.value;
    e.value_len = kv.value_len;
    e.mod_revision = kv.mod_revision;
    if (cb)
        cb(arg, &e);
    kl_etcd_kv_clear(&kv);
    return KL_OK;
}

kl_status kl_etcd_parse_watch(const char *body, size_t len,
                              kl_etcd_watch_msg *m, kl_etcd_watch_cb cb,
                              void *arg, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->error.code = -1;
    json_t *root, *res;
    KL_GUARD(load(body, len, &root, err, errlen));
    kl_status st = KL_OK;
    if (error_of(root, &m->error))
        goto out; /* the caller reports it and reconnects */
    json_t *evs;
    if ((st = get_object(root, "result", &res, true, err, errlen)) ||
        (st = header_revision(res, &m->revision, err, errlen)) ||
        (st = get_bool(res, "created", &m->created, err, errlen)) ||
        (st = get_bool(res, "canceled", &m->canceled, err, errlen)) ||
        (st = get_i64(res, "compact_revision", &m->compact_revision, err,
                      errlen)))
        goto out;
    /* why etcd canceled it (auth: an expired token, permission denied) */
    json_t *why = json_object_get(res, "cancel_reason");
    if (json_is_string(why))
        copy_text(m->cancel_reason, sizeof m->cancel_reason,
                  json_string_value(why), json_string_length(why));
    evs = json_object_get(res, "events");
    if (evs && !json_is_array(evs)) {
        kl_errf(err, errlen,
                "a watch answer from etcd has \"events\" that "
                "is not an array");
        st = KL_E_KEY;
        goto out;
    }
    /* check them all before delivering any: a bad message delivers none */
    size_t n = evs ? json_array_size(evs) : 0;
    for (size_t i = 0; i < n && st == KL_OK; i++)
        st = watch_event(json_array_get(evs, i), NULL, NULL, err, errlen);
    for (size_t i = 0; i < n && st == KL_OK; i++)
        st = watch_event(json_array_get(evs, i), cb, arg, err, errlen);
    if (st == KL_OK)
        m->n_events = n;
out:
    json_decref(root);
    return st;
}
