/* SPDX-License-Identifier: Apache-2.0 */
/* Key-value and lease calls (etcd.h): each builds the gateway's JSON
 * request, POSTs it (etcd.c) and parses the answer (etcd_json.c).
 * docs/DESIGN.md "etcd client (src/fleet)" lists the endpoints. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fleet/etcd_int.h"

/* Request building: a NULL anywhere (out of memory) makes the whole
 * request NULL, checked once in call(). */
static json_t *jbytes(const void *p, size_t n)
{
    char *s = kl_etcd_b64(p, n);
    json_t *j = s ? json_string(s) : NULL;
    free(s);
    return j;
}

static json_t *ji64(int64_t v)
{
    char s[24];
    snprintf(s, sizeof s, "%" PRId64, v);
    return json_string(s);
}

static bool set(json_t *o, const char *name, json_t *v)
{
    if (!o || !v) {
        json_decref(v);
        return false;
    }
    return json_object_set_new(o, name, v) == 0; /* takes v either way */
}

/* POSTs req (consumed) to path; the answer in *body. */
static kl_status call(kl_etcd *c, const char *path, json_t *req, bool ok,
                      char **body, size_t *len, char *err, size_t errlen)
{
    *body = NULL;
    char *json = ok && req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!json)
        return KL_E_NOMEM;
    kl_status st = etcd_post(c, path, json, body, len, err, errlen);
    free(json);
    return st;
}

static kl_status check_size(size_t key_len, size_t value_len, char *err,
                            size_t errlen)
{
    if (key_len == 0) {
        kl_errf(err, errlen, "an etcd key must not be empty");
        return KL_E_BAD_VALUE;
    }
    if (key_len > KL_ETCD_MAX_VALUE ||
        value_len > KL_ETCD_MAX_VALUE - key_len) {
        kl_errf(err, errlen,
                "etcd key and value of %zu bytes: more than the %u "
                "a request may carry",
                key_len + value_len, KL_ETCD_MAX_VALUE);
        return KL_E_TOO_LARGE;
    }
    return KL_OK;
}

kl_status kl_etcd_put(kl_etcd *c, const void *key, size_t key_len,
                      const void *value, size_t value_len, int64_t lease,
                      int64_t *revision, char *err, size_t errlen)
{
    if (revision)
        *revision = 0;
    KL_GUARD(check_size(key_len, value_len, err, errlen));
    json_t *req = json_object();
    bool ok = set(req, "key", jbytes(key, key_len)) &&
              set(req, "value", jbytes(value, value_len)) &&
              (lease == 0 || set(req, "lease", ji64(lease)));
    char *body;
    size_t len;
    KL_GUARD(call(c, "/v3/kv/put", req, ok, &body, &len, err, errlen));
    kl_status st = kl_etcd_parse_write(body, len, revision, NULL, err, errlen);
    free(body);
    return st;
}

/* The range request for [key, end) (end NULL: the one key). */
static kl_status range_call(kl_etcd *c, const void *key, size_t key_len,
                            const void *end, size_t end_len, size_t limit,
                            int64_t at_rev, kl_etcd_page *r, char *err,
                            size_t errlen)
{
    json_t *req = json_object();
    bool ok = set(req, "key", jbytes(key, key_len)) &&
              (!end || set(req, "range_end", jbytes(end, end_len))) &&
              (limit == 0 || set(req, "limit", ji64((int64_t)limit))) &&
              (at_rev == 0 || set(req, "revision", ji64(at_rev)));
    char *body;
    size_t len;
    KL_GUARD(call(c, "/v3/kv/range", req, ok, &body, &len, err, errlen));
    kl_status st = kl_etcd_parse_range(body, len, r, err, errlen);
    free(body);
    return st;
}

kl_status kl_etcd_get(kl_etcd *c, const void *key, size_t key_len,
                      kl_etcd_kv *kv, int64_t *revision, char *err,
                      size_t errlen)
{
    memset(kv, 0, sizeof *kv);
    if (revision)
        *revision = 0;
    KL_GUARD(check_size(key_len, 0, err, errlen));
    kl_etcd_page r;
    KL_GUARD(range_call(c, key, key_len, NULL, 0, 0, 0, &r, err, errlen));
    if (revision)
        *revision = r.revision;
    if (r.n == 0) {
        kl_etcd_page_clear(&r);
        kl_errf(err, errlen, "etcd: no such key");
        return KL_E_NOT_FOUND;
    }
    *kv = r.kvs[0];
    memset(&r.kvs[0], 0, sizeof r.kvs[0]);
    kl_etcd_page_clear(&r);
    return KL_OK;
}

kl_status kl_etcd_range(kl_etcd *c, const void *prefix, size_t prefix_len,
                        const void *after, size_t after_len, size_t limit,
                        int64_t at_rev, kl_etcd_page *r, char *err,
                        size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (prefix_len > KL_ETCD_MAX_VALUE || after_len > KL_ETCD_MAX_VALUE) {
        kl_errf(err, errlen, "etcd range: key too long");
        return KL_E_TOO_LARGE;
    }
    size_t end_len, start_len;
    uint8_t *end = etcd_prefix_end(prefix, prefix_len, &end_len);
    /* from the prefix, or from just after `after` (after + "\0"); "\0"
     * for every key */
    uint8_t *start;
    if (after) {
        start_len = after_len + 1;
        start = malloc(start_len);
        if (start) {
            memcpy(start, after, after_len);
            start[after_len] = 0;
        }
    } else {
        start_len = prefix_len ? prefix_len : 1;
        start = calloc(1, start_len);
        if (start && prefix_len)
            memcpy(start, prefix, prefix_len);
    }
    kl_status st = KL_E_NOMEM;
    if (end && start)
        st = range_call(c, start, start_len, end, end_len, limit, at_rev, r,
                        err, errlen);
    free(end);
    free(start);
    return st;
}

kl_status kl_etcd_delete(kl_etcd *c, const void *key, size_t key_len,
                         bool prefix, int64_t *deleted, int64_t *revision,
                         char *err, size_t errlen)
{
    if (deleted)
        *deleted = 0;
    if (revision)
        *revision = 0;
    KL_GUARD(check_size(key_len, 0, err, errlen));
    size_t end_len = 0;
    uint8_t *end = prefix ? etcd_prefix_end(key, key_len, &end_len) : NULL;
    json_t *req = json_object();
    bool ok = (!prefix || end) && set(req, "key", jbytes(key, key_len)) &&
              (!prefix || set(req, "range_end", jbytes(end, end_len)));
    free(end);
    char *body;
    size_t len;
    KL_GUARD(call(c, "/v3/kv/deleterange", req, ok, &body, &len, err, errlen));
    kl_status st =
        kl_etcd_parse_write(body, len, revision, deleted, err, errlen);
    free(body);
    return st;
}

kl_status kl_etcd_compact(kl_etcd *c, int64_t revision, char *err,
                          size_t errlen)
{
    json_t *req = json_object();
    /* physical: the answer comes once the history is gone, so what
     * follows sees the compaction */
    bool ok = set(req, "revision", ji64(revision)) &&
              set(req, "physical", json_true());
    char *body;
    size_t len;
    KL_GUARD(call(c, "/v3/kv/compaction", req, ok, &body, &len, err, errlen));
    kl_status st = kl_etcd_parse_write(body, len, NULL, NULL, err, errlen);
    free(body);
    return st;
}

kl_status kl_etcd_lease_grant(kl_etcd *c, int64_t ttl, int64_t *id,
                              int64_t *granted, char *err, size_t errlen)
{
    *id = 0;
    if (granted)
        *granted = 0;
    if (ttl <= 0) {
        kl_errf(err, errlen, "an etcd lease needs a TTL of 1 s or more");
        return KL_E_BAD_VALUE;
    }
    json_t *req = json_object();
    bool ok = set(req, "TTL", ji64(ttl));
    char *body;
    size_t len;
    KL_GUARD(call(c, "/v3/lease/grant", req, ok, &body, &len, err, errlen));
    int64_t t;
    kl_status st = kl_etcd_parse_lease(body, len, false, id, &t, err, errlen);
    free(body);
    if (st == KL_OK && (*id == 0 || t <= 0)) {
        kl_errf(err, errlen,
                "etcd granted no lease (ID %" PRId64 ", TTL %" PRId64 ")", *id,
                t);
        *id = 0;
        return KL_E_KEY;
    }
    if (granted)
        *granted = t;
    return st;
}

kl_status kl_etcd_lease_keepalive(kl_etcd *c, int64_t id, int64_t *ttl,
                                  char *err, size_t errlen)
{
    *ttl = 0;
    json_t *req = json_object();
    bool ok = set(req, "ID", ji64(id));
    char *body;
    size_t len;
    KL_GUARD(call(c, "/v3/lease/keepalive", req, ok, &body, &len, err, errlen));
    int64_t got;
    kl_status st = kl_etcd_parse_lease(body, len, true, &got, ttl, err, errlen);
    free(body);
    /* a lease that is gone comes back with no TTL */
    if (st == KL_OK && *ttl <= 0) {
        *ttl = 0;
        kl_errf(err, errlen,
                "etcd lease %" PRId64 " is gone (expired or "
                "revoked)",
                id);
        return KL_E_NOT_FOUND;
    }
    return st;
}

kl_status kl_etcd_lease_revoke(kl_etcd *c, int64_t id, char *err, size_t errlen)
{
    json_t *req = json_object();
    bool ok = set(req, "ID", ji64(id));
    char *body;
    size_t len;
    KL_GUARD(call(c, "/v3/lease/revoke", req, ok, &body, &len, err, errlen));
    kl_status st = kl_etcd_parse_write(body, len, NULL, NULL, err, errlen);
    free(body);
    return st;
}

kl_status kl_etcd_lease_ttl(kl_etcd *c, int64_t id, int64_t *ttl,
                            int64_t *granted, char *err, size_t errlen)
{
    *ttl = 0;
    if (granted)
        *granted = 0;
    json_t *req = json_object();
    bool ok = set(req, "ID", ji64(id));
    char *body;
    size_t len;
    KL_GUARD(
        call(c, "/v3/lease/timetolive", req, ok, &body, &len, err, errlen));
    kl_status st =
        kl_etcd_parse_timetolive(body, len, ttl, granted, err, errlen);
    free(body);
    /* a lease that is gone has TTL -1 */
    if (st == KL_OK && *ttl < 0) {
        *ttl = 0;
        if (granted)
            *granted = 0;
        kl_errf(err, errlen, "etcd lease %" PRId64 " is gone", id);
        return KL_E_NOT_FOUND;
    }
    return st;
}
