/* SPDX-License-Identifier: Apache-2.0 */
/* A key set's meta and chunks, and the key names of the layout (record.h,
 * docs/FLEET.md "The etcd layout"). A set is published once, whoever
 * serves it: its SKIs sorted, in chunks of at most KL_FLEET_CHUNK_SKIS
 * under skis/<set>/<generation>/<chunk>, then the meta naming that
 * generation, its count and its digest. A reader that sees a meta reads
 * that generation's chunks and checks them against it, so a half-written
 * or stale generation is never taken for the set. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "fleet/record.h"
#include "fleet/record_int.h"

void kl_fleet_set_meta_clear(kl_fleet_set_meta *m)
{
    free(m->regions);
    memset(m, 0, sizeof *m);
}

static void hex(const uint8_t *b, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = 0;
}

static bool unhex(const char *s, size_t len, uint8_t *out, size_t n)
{
    if (len != 2 * n)
        return false;
    for (size_t i = 0; i < 2 * n; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                       : -1; /* lower case only: one form */
        if (v < 0)
            return false;
        out[i / 2] = (uint8_t)(i % 2 ? (out[i / 2] | v) : v << 4);
    }
    return true;
}

kl_status kl_fleet_set_meta_encode(const kl_fleet_set_meta *m, char **out,
                                   size_t *len)
{
    char digest[65];
    hex(m->sha256, sizeof m->sha256, digest);
    json_t *o = json_object();
    bool ok =
        o && !json_object_set_new(o, "v", json_integer(KL_FLEET_FORMAT)) &&
        !json_object_set_new(o, "generation", json_integer(m->generation)) &&
        !json_object_set_new(o, "keys", json_integer(m->keys)) &&
        !json_object_set_new(o, "chunk_skis", json_integer(m->chunk_skis)) &&
        !json_object_set_new(o, "chunks", json_integer(m->chunks)) &&
        !json_object_set_new(o, "sha256", json_string(digest));
    if (ok && !m->any_region) {
        json_t *r = json_array();
        ok = r && !json_object_set_new(o, "regions", r);
        for (size_t i = 0; ok && i < m->nregions; i++)
            ok = !json_array_append_new(r, json_string(m->regions[i]));
    }
    char *text = ok ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    if (!text)
        return KL_E_NOMEM;
    *out = text;
    *len = strlen(text);
    return KL_OK;
}

static bool get_regions(const json_t *o, kl_fleet_set_meta *m)
{
    json_t *a = json_object_get(o, "regions");
    m->any_region = a == NULL;
    if (!a)
        return true;
    if (!json_is_array(a) || json_array_size(a) > KL_FLEET_MAX_REGIONS)
        return false;
    m->regions = calloc(json_array_size(a) + 1, sizeof *m->regions);
    if (!m->regions)
        return false;
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (!json_is_string(v) ||
            !kl_fleet_name_ok(json_string_value(v), json_string_length(v)))
            return false;
        memcpy(m->regions[m->nregions++], json_string_value(v),
               json_string_length(v));
    }
    return true;
}

/* The first bad field's name, or NULL. */
static const char *read_meta(const json_t *o, kl_fleet_set_meta *m)
{
    int64_t gen = 0, keys = -1, per = 0, chunks = -1;
    if (!kl_fleet_json_int(o, "generation", true, 1, INT64_MAX / 2, &gen))
        return "generation";
    if (!kl_fleet_json_int(o, "keys", true, 0, INT32_MAX, &keys))
        return "keys";
    if (!kl_fleet_json_int(o, "chunk_skis", true, 1, KL_FLEET_CHUNK_SKIS * 2,
                           &per))
        return "chunk_skis";
    if (!kl_fleet_json_int(o, "chunks", true, 0, INT32_MAX, &chunks) ||
        chunks != (keys + per - 1) / per)
        return "chunks";
    json_t *d = json_object_get(o, "sha256");
    if (!json_is_string(d) ||
        !unhex(json_string_value(d), json_string_length(d), m->sha256, 32))
        return "sha256";
    if (!get_regions(o, m))
        return "regions";
    m->generation = gen;
    m->keys = keys;
    m->chunk_skis = (uint32_t)per;
    m->chunks = (uint32_t)chunks;
    return NULL;
}

kl_status kl_fleet_set_meta_parse(const uint8_t *json, size_t len,
                                  kl_fleet_set_meta *out, char *err,
                                  size_t errlen)
{
    memset(out, 0, sizeof *out);
    json_t *o;
    KL_GUARD(kl_fleet_json_load(json, len, "key set meta", &o, err, errlen));
    const char *bad = read_meta(o, out);
    json_decref(o);
    if (!bad)
        return KL_OK;
    static const char *const rules[][2] = {
        {"generation", "an integer >= 1"},
        {"keys", "an integer >= 0"},
        {"chunk_skis", "an integer 1-100000"},
        {"chunks", "ceil(keys / chunk_skis)"},
        {"sha256", "64 lower-case hex digits"},
        {"regions", "at most 64 region names"},
    };
    const char *rule = "";
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (!strcmp(rules[i][0], bad))
            rule = rules[i][1];
    kl_errf(err, errlen, "key set meta: bad \"%s\" (%s)", bad, rule);
    kl_fleet_set_meta_clear(out);
    return KL_E_BAD_VALUE;
}

kl_status kl_fleet_set_verify(const kl_fleet_set_meta *m, const uint8_t *skis,
                              size_t n, char *err, size_t errlen)
{
    if ((int64_t)n != m->keys) {
        kl_errf(err, errlen,
                "key set generation %" PRId64
                ": %zu SKIs in its chunks, its meta says %" PRId64,
                m->generation, n, m->keys);
        return KL_E_BAD_VALUE;
    }
    for (size_t i = 1; i < n; i++)
        if (memcmp(skis + (i - 1) * KL_FLEET_SKI_LEN,
                   skis + i * KL_FLEET_SKI_LEN, KL_FLEET_SKI_LEN) >= 0) {
            kl_errf(err, errlen,
                    "key set generation %" PRId64
                    ": SKI %zu is not above the one before (the chunks "
                    "must hold the SKIs sorted, without repeats)",
                    m->generation, i);
            return KL_E_BAD_VALUE;
        }
    uint8_t d[32];
    unsigned dl = 0;
    if (EVP_Digest(skis, n * KL_FLEET_SKI_LEN, d, &dl, EVP_sha256(), NULL) !=
            1 ||
        dl != 32)
        return KL_E_NOMEM;
    if (memcmp(d, m->sha256, 32) != 0) {
        kl_errf(err, errlen,
                "key set generation %" PRId64
                ": the SKIs do not match the meta's sha256 (a generation "
                "being rewritten, or a damaged chunk)",
                m->generation);
        return KL_E_BAD_VALUE;
    }
    return KL_OK;
}

/* ---- compliance-region codes ----------------------------------------- */

kl_status kl_fleet_regions_encode(const kl_fleet_regions *r, char **out,
                                  size_t *len)
{
    json_t *o = json_object(), *codes = json_object();
    bool ok = o && codes &&
              !json_object_set_new(o, "v", json_integer(KL_FLEET_FORMAT));
    for (int b = 1; ok && b < 256; b++) {
        if (!r->name[b][0])
            continue;
        char k[4];
        snprintf(k, sizeof k, "%d", b);
        ok = !json_object_set_new(codes, k, json_string(r->name[b]));
    }
    ok = ok && !json_object_set(o, "codes", codes);
    char *text = ok ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(codes);
    json_decref(o);
    if (!text)
        return KL_E_NOMEM;
    *out = text;
    *len = strlen(text);
    return KL_OK;
}

/* "1".."255" in decimal, no sign or leading zero: one spelling a byte. */
static int code_byte(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > 3 || k[0] == '0')
        return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (k[i] < '0' || k[i] > '9')
            return -1;
        v = v * 10 + (k[i] - '0');
    }
    return v <= 255 ? v : -1;
}

kl_status kl_fleet_regions_parse(const uint8_t *json, size_t len,
                                 kl_fleet_regions *out, char *err,
                                 size_t errlen)
{
    memset(out, 0, sizeof *out);
    json_t *o;
    KL_GUARD(kl_fleet_json_load(json, len, "region codes", &o, err, errlen));
    json_t *codes = json_object_get(o, "codes");
    const char *k;
    json_t *v;
    const char *bad = json_is_object(codes) ? NULL : "codes";
    if (!bad)
        json_object_foreach(codes, k, v)
        {
            int b = code_byte(k);
            if (b < 0 || !json_is_string(v) ||
                !kl_fleet_name_ok(json_string_value(v),
                                  json_string_length(v))) {
                bad = k;
                break;
            }
            memcpy(out->name[b], json_string_value(v), json_string_length(v));
        }
    if (bad)
        kl_errf(err, errlen,
                "region codes: bad \"%.40s\" (\"codes\" maps bytes 1-255, "
                "in decimal, to region names)",
                bad);
    json_decref(o);
    if (bad) {
        memset(out, 0, sizeof *out);
        return KL_E_BAD_VALUE;
    }
    return KL_OK;
}

/* ---- key names ------------------------------------------------------ */

static kl_status fmt(char *buf, size_t cap, int n)
{
    return n >= 0 && (size_t)n < cap ? KL_OK : KL_E_TOO_LARGE;
}

kl_status kl_fleet_key_server(const char *prefix, const char *name, char *buf,
                              size_t cap)
{
    return fmt(buf, cap, snprintf(buf, cap, "%sdir/servers/%s", prefix, name));
}

kl_status kl_fleet_key_set(const char *prefix, const char *set, char *buf,
                           size_t cap)
{
    return fmt(buf, cap, snprintf(buf, cap, "%sdir/sets/%s", prefix, set));
}

kl_status kl_fleet_key_chunk(const char *prefix, const char *set, int64_t gen,
                             uint32_t chunk, char *buf, size_t cap)
{
    /* fixed width: the chunks of a generation come back from a range in
     * their order */
    return fmt(buf, cap,
               snprintf(buf, cap, "%sskis/%s/%" PRId64 "/%08" PRIu32, prefix,
                        set, gen, chunk));
}

kl_status kl_fleet_key_regions(const char *prefix, char *buf, size_t cap)
{
    return fmt(buf, cap, snprintf(buf, cap, "%sdir/regions", prefix));
}

kl_status kl_fleet_key_dir(const char *prefix, char *buf, size_t cap)
{
    return fmt(buf, cap, snprintf(buf, cap, "%sdir/", prefix));
}

kl_status kl_fleet_key_chunks(const char *prefix, const char *set, int64_t gen,
                              char *buf, size_t cap)
{
    if (gen > 0)
        return fmt(
            buf, cap,
            snprintf(buf, cap, "%sskis/%s/%" PRId64 "/", prefix, set, gen));
    return fmt(buf, cap, snprintf(buf, cap, "%sskis/%s/", prefix, set));
}

/* The name after head in key, if it is one valid path element. */
static bool tail_name(const uint8_t *key, size_t len, const char *head,
                      size_t hl, char name[KL_FLEET_NAME_MAX + 1])
{
    if (len <= hl || memcmp(key, head, hl) != 0)
        return false;
    const char *s = (const char *)key + hl;
    size_t n = len - hl;
    if (!kl_fleet_name_ok(s, n))
        return false;
    memcpy(name, s, n);
    name[n] = 0;
    return true;
}

kl_fleet_key_kind kl_fleet_key_parse(const char *prefix, const uint8_t *key,
                                     size_t len,
                                     char name[KL_FLEET_NAME_MAX + 1])
{
    char head[512];
    name[0] = 0;
    if (kl_fleet_key_regions(prefix, head, sizeof head) == KL_OK &&
        len == strlen(head) && !memcmp(key, head, len))
        return KL_FLEET_KEY_REGIONS;
    if (kl_fleet_key_server(prefix, "", head, sizeof head) == KL_OK &&
        tail_name(key, len, head, strlen(head), name))
        return KL_FLEET_KEY_SERVER;
    if (kl_fleet_key_set(prefix, "", head, sizeof head) == KL_OK &&
        tail_name(key, len, head, strlen(head), name))
        return KL_FLEET_KEY_SET;
    size_t pl = strlen(prefix);
    if (len > pl + 5 && !memcmp(key, prefix, pl) &&
        !memcmp(key + pl, "skis/", 5)) {
        const uint8_t *s = key + pl + 5, *slash = memchr(s, '/', len - pl - 5);
        if (slash && kl_fleet_name_ok((const char *)s, (size_t)(slash - s))) {
            memcpy(name, s, (size_t)(slash - s));
            name[slash - s] = 0;
            return KL_FLEET_KEY_CHUNK;
        }
    }
    return KL_FLEET_KEY_OTHER;
}
