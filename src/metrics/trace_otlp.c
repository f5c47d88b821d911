/* SPDX-License-Identifier: Apache-2.0 */
/* Spans on the wire: the OTLP/HTTP JSON encoding of a batch (what the
 * exporter POSTs to /v1/traces) and the tag-0x15 span context (protocol
 * P3) that keylessd reads from clients and writes to upstreams. Pure
 * functions, no thread state: the unit tests and the fuzz target call them
 * directly.
 *
 * OTLP JSON rules followed here (the OTLP specification's "JSON Protobuf
 * Encoding"): trace and span ids are lower-case hex strings (not base64),
 * 64-bit integers (the Unix-nanosecond times, intValue attributes) are
 * decimal strings, enum fields (kind, status code) are numbers, field
 * names are lowerCamelCase. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "metrics/trace.h"

void kl_trace_hex(const uint8_t *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = 0;
}

/* ---- attributes ---------------------------------------------------------- */

static kl_span_attr *attr_slot(kl_span *sp, const char *key, kl_attr_type t)
{
    if (sp->nattrs >= KL_SPAN_ATTRS)
        return NULL;
    kl_span_attr *a = &sp->attrs[sp->nattrs++];
    a->key = key;
    a->type = (uint8_t)t;
    a->i = 0;
    a->s[0] = 0;
    return a;
}

void kl_span_attr_strn(kl_span *sp, const char *key, const char *val,
                       size_t len)
{
    kl_span_attr *a = attr_slot(sp, key, KL_ATTR_STR);
    if (!a)
        return;
    if (!val)
        len = 0;
    if (len > sizeof a->s - 1) {
        len = sizeof a->s - 1;
        /* do not cut a UTF-8 sequence: back off continuation bytes */
        while (len > 0 && ((unsigned char)val[len] & 0xC0) == 0x80)
            len--;
    }
    if (len)
        memcpy(a->s, val, len);
    a->s[len] = 0;
}

void kl_span_attr_str(kl_span *sp, const char *key, const char *val)
{
    kl_span_attr_strn(sp, key, val, val ? strlen(val) : 0);
}

void kl_span_attr_int(kl_span *sp, const char *key, int64_t val)
{
    kl_span_attr *a = attr_slot(sp, key, KL_ATTR_INT);
    if (a)
        a->i = val;
}

void kl_span_attr_bool(kl_span *sp, const char *key, bool val)
{
    kl_span_attr *a = attr_slot(sp, key, KL_ATTR_BOOL);
    if (a)
        a->i = val;
}

/* ---- OTLP JSON --------------------------------------------------------- */

static int put(json_t *obj, const char *key, json_t *val)
{
    /* json_object_set_new frees val on failure */
    return val ? json_object_set_new(obj, key, val) : -1;
}

static json_t *u64_string(uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    return json_string(buf);
}

/* A JSON string of s. JSON needs valid UTF-8 and a client's text (request
 * id, certificate name) may not be: then every byte outside ASCII becomes
 * '?', rather than losing the span. */
static json_t *json_text(const char *s)
{
    json_t *j = json_string(s);
    if (j)
        return j;
    char buf[KL_SPAN_STR];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p >= 0x80)
            *p = '?';
    return json_string(buf);
}

static json_t *any_value(const kl_span_attr *a)
{
    json_t *v = json_object();
    if (!v)
        return NULL;
    int rc;
    switch (a->type) {
    case KL_ATTR_INT: {
        char buf[24];
        snprintf(buf, sizeof buf, "%lld", (long long)a->i);
        rc = put(v, "intValue", json_string(buf));
        break;
    }
    case KL_ATTR_BOOL: rc = put(v, "boolValue", json_boolean(a->i != 0)); break;
    default: rc = put(v, "stringValue", json_text(a->s)); break;
    }
    if (rc) {
        json_decref(v);
        return NULL;
    }
    return v;
}

/* {"key": k, "value": {...}}; takes value, also when it fails */
static json_t *key_value(const char *key, json_t *value)
{
    json_t *kv = json_object();
    if (!kv || put(kv, "key", json_string(key))) {
        json_decref(kv);
        json_decref(value);
        return NULL;
    }
    if (put(kv, "value", value)) { /* put took value */
        json_decref(kv);
        return NULL;
    }
    return kv;
}

static json_t *attributes(const kl_span *sp)
{
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    for (size_t i = 0; i < sp->nattrs && i < KL_SPAN_ATTRS; i++) {
        kl_span_attr a = sp->attrs[i];
        a.s[sizeof a.s - 1] = 0;
        json_t *kv = key_value(a.key, any_value(&a));
        if (!kv || json_array_append_new(arr, kv)) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

static json_t *span_json(const kl_span *sp, int64_t off)
{
    char trace[33], id[17], parent[17];
    uint8_t b[8];
    json_t *o = json_object();
    if (!o)
        return NULL;
    kl_trace_hex(sp->trace_id, 16, trace);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(sp->span_id >> (56 - 8 * i));
    kl_trace_hex(b, 8, id);
    int rc = put(o, "traceId", json_string(trace)) ||
             put(o, "spanId", json_string(id));
    if (!rc && sp->parent_id) {
        for (int i = 0; i < 8; i++)
            b[i] = (uint8_t)(sp->parent_id >> (56 - 8 * i));
        kl_trace_hex(b, 8, parent);
        rc = put(o, "parentSpanId", json_string(parent));
    }
    uint64_t end = sp->end_ns >= sp->start_ns ? sp->end_ns : sp->start_ns;
    char msg[KL_SPAN_STR];
    snprintf(msg, sizeof msg, "%s", sp->status_msg);
    json_t *status = json_object();
    rc =
        rc || put(o, "name", json_string(sp->name ? sp->name : "span")) ||
        put(o, "kind", json_integer(sp->kind)) ||
        put(o, "startTimeUnixNano", u64_string(sp->start_ns + (uint64_t)off)) ||
        put(o, "endTimeUnixNano", u64_string(end + (uint64_t)off)) ||
        put(o, "attributes", attributes(sp)) || !status ||
        put(status, "code", json_integer(sp->error ? 2 : 0)) ||
        (sp->error && msg[0] && put(status, "message", json_text(msg)));
    if (!rc) {
        rc = put(o, "status", status);
        status = NULL;
    }
    json_decref(status);
    if (rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *kl_otlp_encode(const kl_span *spans, size_t n, const char *service,
                     int64_t mono_to_unix_ns, size_t *len)
{
    json_t *span_arr = json_array(), *svc = json_object(), *kv = NULL;
    char *out = NULL;
    if (!span_arr || !svc ||
        put(svc, "stringValue", json_string(service ? service : "keylessd")))
        goto fail;
    kv = key_value("service.name", svc);
    svc = NULL; /* key_value took it, whatever it returned */
    if (!kv)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        json_t *s = span_json(&spans[i], mono_to_unix_ns);
        if (!s || json_array_append_new(span_arr, s))
            goto fail;
    }
    /* json_pack's "o" takes kv and span_arr, also when it fails (jansson
     * >= 2.11; Debian 12 has 2.14) */
    json_t *root =
        json_pack("{s:[{s:{s:[o]}, s:[{s:{s:s}, s:o}]}]}", "resourceSpans",
                  "resource", "attributes", kv, "scopeSpans", "scope", "name",
                  "keylessd", "spans", span_arr);
    if (!root)
        return NULL;
    out = json_dumps(root, JSON_COMPACT);
    if (out && len)
        *len = strlen(out);
    json_decref(root);
    return out;
fail:
    json_decref(span_arr);
    json_decref(svc);
    json_decref(kv);
    return NULL;
}

/* ---- tag 0x15 ---------------------------------------------------------- */

static void be64_put(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

void kl_spanctx_write_binary(uint8_t out[KL_SPANCTX_BINARY_LEN],
                             const uint8_t trace_id[16], uint64_t span_id,
                             uint64_t parent_id, uint8_t flags)
{
    /* protocol P3: trace id (16), span id (8), parent id (8), flags (1),
     * baggage count (4, zero), all big-endian */
    memcpy(out, trace_id, 16);
    be64_put(out + 16, span_id);
    be64_put(out + 24, parent_id);
    out[32] = flags;
    memset(out + 33, 0, 4);
}
