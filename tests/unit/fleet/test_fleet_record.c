/* SPDX-License-Identifier: Apache-2.0 */
/* The fleet directory's records (src/fleet/record.h, docs/FLEET.md "The
 * etcd layout"): a server record and a set meta written and read back
 * field by field, every way a record read from etcd can be wrong (each
 * refused with the field named, nothing kept), a set's SKIs checked
 * against its meta (count, order, digest), and the key names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "fleet/etcd.h"
#include "fleet/record.h"
#include "seal/policy.h"
#include "testutil.h"

static void expect(const char *text, const char *want)
{
    if (!strstr(text, want))
        fail_msg("expected \"%s\" in: %s", want, text);
}

static void sample(kl_fleet_server *s)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "sfo-01");
    snprintf(s->region, sizeof s->region, "us-west");
    snprintf(s->host, sizeof s->host, "10.1.2.3");
    s->port = 2407;
    s->role = KL_FLEET_ROLE_KEYS;
    s->priority = 20;
    s->health = KL_FLEET_HEALTH_DEGRADED;
    s->started = 1764800000;
    snprintf(s->version, sizeof s->version, "keylessd 0.9");
    snprintf(s->attrs[0].key, sizeof s->attrs[0].key, "country");
    snprintf(s->attrs[0].value, sizeof s->attrs[0].value, "US");
    snprintf(s->attrs[1].key, sizeof s->attrs[1].key, "dc");
    snprintf(s->attrs[1].value, sizeof s->attrs[1].value, "sfo");
    s->nattrs = 2;
    char err[256];
    assert_int_equal(kl_fleet_server_add_set(s, "payments", err, sizeof err),
                     KL_OK);
    assert_int_equal(kl_fleet_server_add_set(s, "web.eu", err, sizeof err),
                     KL_OK);
}

static void test_server_roundtrip(void **state)
{
    (void)state;
    kl_fleet_server s, r;
    sample(&s);
    char err[256] = "";
    assert_int_equal(kl_fleet_server_check(&s, err, sizeof err), KL_OK);
    char *json;
    size_t len;
    assert_int_equal(kl_fleet_server_encode(&s, &json, &len), KL_OK);
    expect(json, "\"role\":\"keys\"");
    expect(json, "\"v\":1");
    assert_int_equal(
        kl_fleet_server_parse((const uint8_t *)json, len, &r, err, sizeof err),
        KL_OK);
    assert_string_equal(r.name, "sfo-01");
    assert_string_equal(r.region, "us-west");
    assert_string_equal(r.host, "10.1.2.3");
    assert_int_equal(r.port, 2407);
    assert_int_equal(r.role, KL_FLEET_ROLE_KEYS);
    assert_int_equal(r.priority, 20);
    assert_int_equal(r.health, KL_FLEET_HEALTH_DEGRADED);
    assert_int_equal(r.started, 1764800000);
    assert_string_equal(r.version, "keylessd 0.9");
    assert_int_equal(r.nattrs, 2);
    assert_int_equal(r.nsets, 2);
    assert_string_equal(r.sets[0], "payments");
    assert_string_equal(r.sets[1], "web.eu");
    /* attributes come back sorted by name (JSON_SORT_KEYS) */
    assert_string_equal(r.attrs[0].key, "country");
    assert_string_equal(r.attrs[1].value, "sfo");
    free(json);
    kl_fleet_server_clear(&r);
    kl_fleet_server_clear(&s);

    /* optional fields take their defaults; unknown ones are ignored */
    static const char min[] =
        "{\"v\":1,\"name\":\"a\",\"region\":\"eu\",\"host\":\"::1\","
        "\"port\":1,\"role\":\"router\",\"future\":{\"x\":[1]}}";
    assert_int_equal(kl_fleet_server_parse((const uint8_t *)min, sizeof min - 1,
                                           &r, err, sizeof err),
                     KL_OK);
    assert_int_equal(r.priority, 100);
    assert_int_equal(r.health, KL_FLEET_HEALTH_OK);
    assert_int_equal(r.nsets, 0);
    assert_int_equal(r.role, KL_FLEET_ROLE_ROUTER);
    kl_fleet_server_clear(&r);
}

#define REC(fields)                                                            \
    "{\"v\":1,\"name\":\"a\",\"region\":\"eu\",\"host\":\"h\",\"port\":2407,"  \
    "\"role\":\"keys\"" fields "}"

static void test_server_bad(void **state)
{
    (void)state;
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"", "not JSON"},
        {"{\"v\":1,", "not JSON"},
        {"[1]", "not a JSON object"},
        {"{\"name\":\"a\"}", "format \"v\""},
        {"{\"v\":2,\"name\":\"a\"}", "format \"v\""},
        {"{\"v\":\"1\"}", "format \"v\""},
        {"{\"v\":1,\"region\":\"eu\",\"host\":\"h\",\"port\":1,\"role\":"
         "\"keys\"}",
         "\"name\""},
        {"{\"v\":1,\"name\":\"../x\",\"region\":\"eu\",\"host\":\"h\","
         "\"port\":1,\"role\":\"keys\"}",
         "\"name\""},
        {"{\"v\":1,\"name\":\"a/b\",\"region\":\"eu\",\"host\":\"h\","
         "\"port\":1,\"role\":\"keys\"}",
         "\"name\""},
        {"{\"v\":1,\"name\":\"a\\u0000b\",\"region\":\"eu\",\"host\":\"h\","
         "\"port\":1,\"role\":\"keys\"}",
         "not JSON"}, /* jansson refuses \u0000 */
        {"{\"v\":1,\"name\":\"a\",\"region\":7,\"host\":\"h\",\"port\":1,"
         "\"role\":\"keys\"}",
         "\"region\""},
        {"{\"v\":1,\"name\":\"a\",\"region\":\"eu\",\"host\":\"h h\","
         "\"port\":1,\"role\":\"keys\"}",
         "\"host\""},
        {"{\"v\":1,\"name\":\"a\",\"region\":\"eu\",\"host\":\"h\","
         "\"port\":0,\"role\":\"keys\"}",
         "\"port\""},
        {"{\"v\":1,\"name\":\"a\",\"region\":\"eu\",\"host\":\"h\","
         "\"port\":65536,\"role\":\"keys\"}",
         "\"port\""},
        {"{\"v\":1,\"name\":\"a\",\"region\":\"eu\",\"host\":\"h\","
         "\"port\":\"2407\",\"role\":\"keys\"}",
         "\"port\""},
        {"{\"v\":1,\"name\":\"a\",\"region\":\"eu\",\"host\":\"h\","
         "\"port\":1,\"role\":\"king\"}",
         "\"role\""},
        {REC(",\"priority\":-1"), "\"priority\""},
        {REC(",\"health\":\"sick\""), "\"health\""},
        {REC(",\"started\":-5"), "\"started\""},
        {REC(",\"version\":\"a\\nb\""), "\"version\""},
        {REC(",\"attrs\":[]"), "\"attrs\""},
        {REC(",\"attrs\":{\"Country\":\"US\"}"), "\"attrs\""},
        {REC(",\"attrs\":{\"dc\":1}"), "\"attrs\""},
        {REC(",\"sets\":\"payments\""), "\"sets\""},
        {REC(",\"sets\":[\"a\",\"a\"]"), "\"sets\""},
        {REC(",\"sets\":[\"\"]"), "\"sets\""},
        {REC(",\"sets\":[1]"), "\"sets\""},
        {"{\"v\":1,\"name\":\"a\",\"name\":\"b\"}", "not JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kl_fleet_server r;
        char err[256] = "";
        kl_status st =
            kl_fleet_server_parse((const uint8_t *)bad[i].json,
                                  strlen(bad[i].json), &r, err, sizeof err);
        if (st != KL_E_BAD_VALUE)
            fail_msg("%zu: status %d for %s", i, st, bad[i].json);
        expect(err, bad[i].want);
        assert_null(r.sets);
        assert_int_equal(r.nsets, 0);
    }
    /* too many attributes */
    char many[2048] = REC(",\"attrs\":{");
    many[strlen(many) - 1] = 0; /* drop the closing brace */
    for (int i = 0; i < KL_FLEET_ATTR_MAX + 1; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many),
                 "%s\"k%d\":\"v\"", i ? "," : "", i);
    strcat(many, "}}");
    kl_fleet_server r;
    char err[256] = "";
    assert_int_equal(kl_fleet_server_parse((const uint8_t *)many, strlen(many),
                                           &r, err, sizeof err),
                     KL_E_BAD_VALUE);
    expect(err, "\"attrs\"");
}

/* The sealing key and attributes (docs/FLEET.md "The server record"):
 * written and read back, X25519 and P-256, several values of one name;
 * a record without them (every older one) still reads, with none. */
static void test_server_sealing(void **state)
{
    (void)state;
    kl_fleet_server s, r, c;
    char err[256] = "";
    uint8_t x[32], p[65];
    for (int i = 0; i < 32; i++)
        x[i] = (uint8_t)(i * 7 + 1);
    memset(p, 0x11, sizeof p);
    p[0] = 0x04;
    for (int kem = 0; kem < 2; kem++) {
        sample(&s);
        if (kem == 0)
            assert_int_equal(kl_fleet_server_set_sealing(&s,
                                                         KL_FLEET_KEM_X25519, x,
                                                         32, err, sizeof err),
                             KL_OK);
        else
            assert_int_equal(kl_fleet_server_set_sealing(
                                 &s, KL_FLEET_KEM_P256, p, 65, err, sizeof err),
                             KL_OK);
        assert_int_equal(kl_fleet_server_add_seal_attr(&s, "region", "us-west",
                                                       err, sizeof err),
                         KL_OK);
        assert_int_equal(
            kl_fleet_server_add_seal_attr(&s, "tier", "edge", err, sizeof err),
            KL_OK);
        assert_int_equal(
            kl_fleet_server_add_seal_attr(&s, "tier", "core", err, sizeof err),
            KL_OK);
        assert_int_equal(kl_fleet_server_check(&s, err, sizeof err), KL_OK);
        char *json;
        size_t len;
        assert_int_equal(kl_fleet_server_encode(&s, &json, &len), KL_OK);
        expect(json, kem ? "\"kem\":\"p256\"" : "\"kem\":\"x25519\"");
        expect(json, "\"tier\":[\"edge\",\"core\"]");
        expect(json, "\"region\":\"us-west\"");
        assert_int_equal(kl_fleet_server_parse((const uint8_t *)json, len, &r,
                                               err, sizeof err),
                         KL_OK);
        assert_int_equal(r.seal_kem, s.seal_kem);
        assert_int_equal(r.seal_pk_len, kem ? 65 : 32);
        assert_memory_equal(r.seal_pk, kem ? p : x, r.seal_pk_len);
        assert_int_equal(r.n_seal_attrs, 3);
        /* the order within the object is JSON's (sorted); a name's values
         * keep theirs */
        assert_string_equal(r.seal_attrs[0].name, "region");
        assert_string_equal(r.seal_attrs[1].value, "edge");
        assert_string_equal(r.seal_attrs[2].value, "core");
        memset(&c, 0, sizeof c);
        assert_int_equal(kl_fleet_server_copy(&c, &r), KL_OK);
        assert_ptr_not_equal(c.seal_attrs, r.seal_attrs);
        assert_int_equal(c.n_seal_attrs, 3);
        assert_int_equal(c.nsets, 2);
        assert_string_equal(c.seal_attrs[2].value, "core");
        kl_fleet_server_clear(&c);
        free(json);
        kl_fleet_server_clear(&r);
        kl_fleet_server_clear(&s);
    }
    /* an old record: no "sealing" */
    static const char old[] = REC("");
    assert_int_equal(kl_fleet_server_parse((const uint8_t *)old, strlen(old),
                                           &r, err, sizeof err),
                     KL_OK);
    assert_int_equal(r.seal_kem, 0);
    assert_int_equal(r.n_seal_attrs, 0);
    char *json;
    size_t len;
    assert_int_equal(kl_fleet_server_encode(&r, &json, &len), KL_OK);
    assert_null(strstr(json, "sealing")); /* nothing written either */
    free(json);
    kl_fleet_server_clear(&r);
    /* a key alone, no attributes; unknown members ignored */
    char *b64 = kl_etcd_b64(x, 32);
    char rec[512];
    snprintf(rec, sizeof rec,
             REC(",\"sealing\":{\"kem\":\"x25519\",\"key\":\"%s\","
                 "\"later\":1}"),
             b64);
    free(b64);
    assert_int_equal(kl_fleet_server_parse((const uint8_t *)rec, strlen(rec),
                                           &r, err, sizeof err),
                     KL_OK);
    assert_int_equal(r.seal_kem, KL_FLEET_KEM_X25519);
    assert_int_equal(r.n_seal_attrs, 0);
    kl_fleet_server_clear(&r);
    /* the setters refuse what the record could not carry */
    sample(&s);
    assert_int_equal(kl_fleet_server_set_sealing(&s, KL_FLEET_KEM_X25519, x, 31,
                                                 err, sizeof err),
                     KL_E_BAD_VALUE);
    expect(err, "X25519 (32 bytes)");
    p[0] = 0x02;
    assert_int_equal(kl_fleet_server_set_sealing(&s, KL_FLEET_KEM_P256, p, 65,
                                                 err, sizeof err),
                     KL_E_BAD_VALUE);
    assert_int_equal(
        kl_fleet_server_set_sealing(&s, 0x0012, x, 32, err, sizeof err),
        KL_E_BAD_VALUE);
    assert_int_equal(
        kl_fleet_server_add_seal_attr(&s, "Region", "eu", err, sizeof err),
        KL_E_BAD_VALUE);
    expect(err, "Region=eu");
    assert_int_equal(
        kl_fleet_server_add_seal_attr(&s, "region", "EU", err, sizeof err),
        KL_E_BAD_VALUE);
    assert_int_equal(
        kl_fleet_server_add_seal_attr(&s, "and", "x", err, sizeof err),
        KL_E_BAD_VALUE);
    assert_int_equal(
        kl_fleet_server_add_seal_attr(&s, "tier", "edge", err, sizeof err),
        KL_OK);
    assert_int_equal(
        kl_fleet_server_add_seal_attr(&s, "tier", "edge", err, sizeof err),
        KL_E_BAD_VALUE);
    expect(err, "twice");
    /* attributes without a key: check refuses the record */
    assert_int_equal(kl_fleet_server_check(&s, err, sizeof err),
                     KL_E_BAD_VALUE);
    expect(err, "\"sealing\"");
    for (int i = 1; i < KL_FLEET_SEAL_ATTRS; i++) {
        char v[16];
        snprintf(v, sizeof v, "v%d", i);
        assert_int_equal(
            kl_fleet_server_add_seal_attr(&s, "n", v, err, sizeof err), KL_OK);
    }
    assert_int_equal(
        kl_fleet_server_add_seal_attr(&s, "n", "last", err, sizeof err),
        KL_E_BAD_VALUE);
    expect(err, "more than 64");
    kl_fleet_server_clear(&s);
}

/* A "sealing" member that is wrong in any way refuses the record, with
 * the field named, nothing kept. */
static void test_server_sealing_bad(void **state)
{
    (void)state;
    uint8_t x[32] = {1}, p[65] = {4}, p2[65] = {2};
    char *kx = kl_etcd_b64(x, 32), *kp = kl_etcd_b64(p, 65),
         *kp2 = kl_etcd_b64(p2, 65), *k31 = kl_etcd_b64(x, 31);
    char bad[][400] = {
        REC(",\"sealing\":1"),
        REC(",\"sealing\":[]"),
        REC(",\"sealing\":{}"),
        REC(",\"sealing\":{\"kem\":\"x25519\"}"),
        REC(",\"sealing\":{\"key\":\"KX\"}"),
        REC(",\"sealing\":{\"kem\":\"x448\",\"key\":\"KX\"}"),
        REC(",\"sealing\":{\"kem\":32,\"key\":\"KX\"}"),
        REC(",\"sealing\":{\"kem\":\"x25519\",\"key\":\"K31\"}"),
        REC(",\"sealing\":{\"kem\":\"p256\",\"key\":\"KX\"}"),
        REC(",\"sealing\":{\"kem\":\"x25519\",\"key\":\"KP\"}"),
        REC(",\"sealing\":{\"kem\":\"p256\",\"key\":\"KP2\"}"),
        REC(",\"sealing\":{\"kem\":\"x25519\",\"key\":\"not base64!\"}"),
        REC(",\"sealing\":{\"kem\":\"x25519\",\"key\":\"KX\","
            "\"attrs\":[]}"),
        REC(",\"sealing\":{\"kem\":\"x25519\",\"key\":\"KX\","
            "\"attrs\":{\"region\":1}}"),
        REC(",\"sealing\":{\"kem\":\"x25519\",\"key\":\"KX\","
            "\"attrs\":{\"region\":[]}}"),
        REC(",\"sealing\":{\"kem\":\"x25519\",\"key\":\"KX\","
            "\"attrs\":{\"region\":[\"eu\",\"eu\"]}}"),
        REC(",\"sealing\":{\"kem\":\"x25519\",\"key\":\"KX\","
            "\"attrs\":{\"region\":[\"eu\",[\"x\"]]}}"),
        REC(",\"sealing\":{\"kem\":\"x25519\",\"key\":\"KX\","
            "\"attrs\":{\"Region\":\"eu\"}}"),
        REC(",\"sealing\":{\"kem\":\"x25519\",\"key\":\"KX\","
            "\"attrs\":{\"region\":\"EU\"}}"),
        REC(",\"sealing\":{\"kem\":\"x25519\",\"key\":\"KX\","
            "\"attrs\":{\"region\":\"\"}}"),
        REC(",\"sealing\":{\"kem\":\"x25519\",\"key\":\"KX\","
            "\"attrs\":{\"in\":\"eu\"}}"),
        REC(",\"sealing\":{\"kem\":\"x25519\",\"key\":\"KX\","
            "\"attrs\":{\"region\":\"or\"}}"),
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        /* put the keys in */
        char json[600];
        const char *src = bad[i];
        size_t o = 0;
        while (*src && o < sizeof json - 100) {
            if (!strncmp(src, "\"KX\"", 4)) {
                o += (size_t)snprintf(json + o, sizeof json - o, "\"%s\"", kx);
                src += 4;
            } else if (!strncmp(src, "\"KP\"", 4)) {
                o += (size_t)snprintf(json + o, sizeof json - o, "\"%s\"", kp);
                src += 4;
            } else if (!strncmp(src, "\"KP2\"", 5)) {
                o += (size_t)snprintf(json + o, sizeof json - o, "\"%s\"", kp2);
                src += 5;
            } else if (!strncmp(src, "\"K31\"", 5)) {
                o += (size_t)snprintf(json + o, sizeof json - o, "\"%s\"", k31);
                src += 5;
            } else {
                json[o++] = *src++;
            }
        }
        json[o] = 0;
        kl_fleet_server r;
        char err[512] = "";
        kl_status st = kl_fleet_server_parse((const uint8_t *)json,
                                             strlen(json), &r, err, sizeof err);
        if (st != KL_E_BAD_VALUE)
            fail_msg("%zu: status %d for %s", i, st, json);
        expect(err, "\"sealing\"");
        expect(err, "x25519 or p256");
        assert_null(r.seal_attrs);
        assert_int_equal(r.n_seal_attrs, 0);
        assert_int_equal(r.seal_kem, 0);
        assert_null(r.sets);
    }
    free(kx);
    free(kp);
    free(kp2);
    free(k31);
}

/* The record's attribute rules are the policy grammar's (src/fleet may
 * not include src/seal, so it has its own copy): the same verdict on
 * every string of a random walk over the interesting bytes. */
static void test_seal_grammar(void **state)
{
    (void)state;
    static const char alpha[] = "abz09AZ-_.:/ \x01\xff";
    static const char *const words[] = {"and", "or", "not", "in", "AND",
                                        "a",   "x",  "in1", "",   "-a"};
    srand(7);
    for (int round = 0; round < 200000; round++) {
        char s[80];
        size_t n;
        if (round < (int)(sizeof words / sizeof words[0])) {
            n = strlen(words[round]);
            memcpy(s, words[round], n);
        } else {
            n = (size_t)(rand() % (round % 100 == 0 ? 70 : 6));
            for (size_t i = 0; i < n; i++)
                s[i] = alpha[rand() % (int)(sizeof alpha - 1)];
        }
        s[n] = 0;
        if (kl_fleet_seal_name_ok(s, n) != kl_policy_name_ok(s, n) ||
            kl_fleet_seal_value_ok(s, n) != kl_policy_value_ok(s, n))
            fail_msg("fleet and seal disagree on \"%s\"", s);
    }
}

static void test_server_check(void **state)
{
    (void)state;
    kl_fleet_server s;
    char err[256] = "";
    sample(&s);
    s.port = 0;
    assert_int_equal(kl_fleet_server_check(&s, err, sizeof err),
                     KL_E_BAD_VALUE);
    expect(err, "\"port\" (1-65535)");
    s.port = 1;
    snprintf(s.region, sizeof s.region, "eu west");
    assert_int_equal(kl_fleet_server_check(&s, err, sizeof err),
                     KL_E_BAD_VALUE);
    expect(err, "\"region\"");
    assert_int_equal(kl_fleet_server_add_set(&s, "payments", err, sizeof err),
                     KL_E_BAD_VALUE);
    expect(err, "named twice");
    assert_int_equal(kl_fleet_server_add_set(&s, ".hidden", err, sizeof err),
                     KL_E_BAD_VALUE);
    kl_fleet_server_clear(&s);
    kl_fleet_role role;
    assert_true(kl_fleet_role_parse("egress", &role));
    assert_int_equal(role, KL_FLEET_ROLE_EGRESS);
    assert_false(kl_fleet_role_parse("Egress", &role));
}

/* n sorted SKIs and their meta. */
static uint8_t *make_set(size_t n, kl_fleet_set_meta *m)
{
    uint8_t *skis = calloc(n ? n : 1, KL_FLEET_SKI_LEN);
    for (size_t i = 0; i < n; i++) {
        skis[i * 20] = (uint8_t)(i >> 16);
        skis[i * 20 + 1] = (uint8_t)(i >> 8);
        skis[i * 20 + 2] = (uint8_t)i;
        skis[i * 20 + 19] = 0x5a;
    }
    memset(m, 0, sizeof *m);
    m->generation = 3;
    m->keys = (int64_t)n;
    m->chunk_skis = 1000;
    m->chunks = (uint32_t)((n + 999) / 1000);
    unsigned dl;
    assert_int_equal(
        EVP_Digest(skis, n * 20, m->sha256, &dl, EVP_sha256(), NULL), 1);
    m->any_region = true;
    return skis;
}

static void test_set_meta(void **state)
{
    (void)state;
    kl_fleet_set_meta m, r;
    uint8_t *skis = make_set(2500, &m);
    m.any_region = false;
    m.regions = calloc(2, sizeof *m.regions);
    snprintf(m.regions[0], sizeof m.regions[0], "eu");
    snprintf(m.regions[1], sizeof m.regions[1], "fedramp-high");
    m.nregions = 2;
    char *json, err[256] = "";
    size_t len;
    assert_int_equal(kl_fleet_set_meta_encode(&m, &json, &len), KL_OK);
    assert_int_equal(kl_fleet_set_meta_parse((const uint8_t *)json, len, &r,
                                             err, sizeof err),
                     KL_OK);
    assert_int_equal(r.generation, 3);
    assert_int_equal(r.keys, 2500);
    assert_int_equal(r.chunks, 3);
    assert_int_equal(r.chunk_skis, 1000);
    assert_memory_equal(r.sha256, m.sha256, 32);
    assert_false(r.any_region);
    assert_int_equal(r.nregions, 2);
    assert_string_equal(r.regions[1], "fedramp-high");
    assert_int_equal(kl_fleet_set_verify(&r, skis, 2500, err, sizeof err),
                     KL_OK);
    /* wrong count, order, content */
    assert_int_equal(kl_fleet_set_verify(&r, skis, 2499, err, sizeof err),
                     KL_E_BAD_VALUE);
    expect(err, "2499 SKIs");
    uint8_t save[20];
    memcpy(save, skis + 20, 20);
    memcpy(skis + 20, skis, 20); /* a repeat */
    assert_int_equal(kl_fleet_set_verify(&r, skis, 2500, err, sizeof err),
                     KL_E_BAD_VALUE);
    expect(err, "SKI 1 is not above");
    memcpy(skis + 20, save, 20);
    skis[2499 * 20 + 19] ^= 1;
    assert_int_equal(kl_fleet_set_verify(&r, skis, 2500, err, sizeof err),
                     KL_E_BAD_VALUE);
    expect(err, "sha256");
    free(json);
    free(skis);
    kl_fleet_set_meta_clear(&m);
    kl_fleet_set_meta_clear(&r);

    /* an empty set is a set */
    skis = make_set(0, &m);
    assert_int_equal(kl_fleet_set_meta_encode(&m, &json, &len), KL_OK);
    assert_int_equal(kl_fleet_set_meta_parse((const uint8_t *)json, len, &r,
                                             err, sizeof err),
                     KL_OK);
    assert_true(r.any_region);
    assert_int_equal(r.chunks, 0);
    assert_int_equal(kl_fleet_set_verify(&r, skis, 0, err, sizeof err), KL_OK);
    free(json);
    free(skis);
    kl_fleet_set_meta_clear(&r);
}

#define META(f)                                                                \
    "{\"v\":1,\"generation\":1,\"keys\":3,\"chunk_skis\":2,\"chunks\":2,"      \
    "\"sha256\":\"" f "\"}"
#define D64 "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static void test_set_meta_bad(void **state)
{
    (void)state;
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"v\":1}", "\"generation\""},
        {"{\"v\":1,\"generation\":0,\"keys\":0,\"chunk_skis\":1,\"chunks\":0,"
         "\"sha256\":\"" D64 "\"}",
         "\"generation\""},
        {"{\"v\":1,\"generation\":1,\"keys\":-1,\"chunk_skis\":1,\"chunks\":0,"
         "\"sha256\":\"" D64 "\"}",
         "\"keys\""},
        {"{\"v\":1,\"generation\":1,\"keys\":3,\"chunk_skis\":0,\"chunks\":0,"
         "\"sha256\":\"" D64 "\"}",
         "\"chunk_skis\""},
        {"{\"v\":1,\"generation\":1,\"keys\":3,\"chunk_skis\":2,\"chunks\":1,"
         "\"sha256\":\"" D64 "\"}",
         "\"chunks\""},
        {META("00"), "\"sha256\""},
        {META("00112233445566778899AABBCCDDEEFF00112233445566778899aabbccddeef"
              "f"),
         "\"sha256\""},
        {"{\"v\":1,\"generation\":1,\"keys\":3,\"chunk_skis\":2,\"chunks\":2,"
         "\"sha256\":\"" D64 "\",\"regions\":[\"eu\",\"a b\"]}",
         "\"regions\""},
        {"{\"v\":1,\"generation\":1,\"keys\":3,\"chunk_skis\":2,\"chunks\":2,"
         "\"sha256\":\"" D64 "\",\"regions\":\"eu\"}",
         "\"regions\""},
        {"{\"v\":3}", "format"},
        {"nope", "not JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kl_fleet_set_meta r;
        char err[256] = "";
        if (kl_fleet_set_meta_parse((const uint8_t *)bad[i].json,
                                    strlen(bad[i].json), &r, err,
                                    sizeof err) != KL_E_BAD_VALUE)
            fail_msg("%zu accepted: %s", i, bad[i].json);
        expect(err, bad[i].want);
        assert_null(r.regions);
    }
}

static void test_keys(void **state)
{
    (void)state;
    char k[128], name[KL_FLEET_NAME_MAX + 1];
    assert_int_equal(kl_fleet_key_server("/keyless/", "sfo-01", k, sizeof k),
                     KL_OK);
    assert_string_equal(k, "/keyless/dir/servers/sfo-01");
    assert_int_equal(
        kl_fleet_key_parse("/keyless/", (const uint8_t *)k, strlen(k), name),
        KL_FLEET_KEY_SERVER);
    assert_string_equal(name, "sfo-01");
    assert_int_equal(kl_fleet_key_set("/keyless/", "payments", k, sizeof k),
                     KL_OK);
    assert_string_equal(k, "/keyless/dir/sets/payments");
    assert_int_equal(
        kl_fleet_key_parse("/keyless/", (const uint8_t *)k, strlen(k), name),
        KL_FLEET_KEY_SET);
    assert_string_equal(name, "payments");
    assert_int_equal(
        kl_fleet_key_chunk("/keyless/", "payments", 7, 12, k, sizeof k), KL_OK);
    assert_string_equal(k, "/keyless/skis/payments/7/00000012");
    assert_int_equal(
        kl_fleet_key_parse("/keyless/", (const uint8_t *)k, strlen(k), name),
        KL_FLEET_KEY_CHUNK);
    assert_int_equal(kl_fleet_key_dir("/keyless/", k, sizeof k), KL_OK);
    assert_string_equal(k, "/keyless/dir/");
    assert_int_equal(kl_fleet_key_chunks("/k/", "s", 7, k, sizeof k), KL_OK);
    assert_string_equal(k, "/k/skis/s/7/");
    assert_int_equal(kl_fleet_key_server("/keyless/", "x", k, 10),
                     KL_E_TOO_LARGE);
    static const char *const other[] = {
        "/keyless/dir/servers/",   "/keyless/dir/servers/a/b",
        "/keyless/dir/servers/..", "/other/dir/servers/a",
        "/keyless/dir/sets/a b",   "/keyless/skis/noslash"};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        if (kl_fleet_key_parse("/keyless/", (const uint8_t *)other[i],
                               strlen(other[i]), name) != KL_FLEET_KEY_OTHER)
            fail_msg("%s taken for a fleet key", other[i]);
}

static void test_regions(void **state)
{
    (void)state;
    kl_fleet_regions r, back;
    memset(&r, 0, sizeof r);
    snprintf(r.name[2], sizeof r.name[2], "eu");
    snprintf(r.name[255], sizeof r.name[255], "us-east");
    char *json, err[256] = "";
    size_t len;
    assert_int_equal(kl_fleet_regions_encode(&r, &json, &len), KL_OK);
    assert_int_equal(kl_fleet_regions_parse((const uint8_t *)json, len, &back,
                                            err, sizeof err),
                     KL_OK);
    assert_string_equal(back.name[2], "eu");
    assert_string_equal(back.name[255], "us-east");
    assert_string_equal(back.name[1], "");
    free(json);
    static const char *const bad[] = {
        "{\"v\":1}",
        "{\"v\":1,\"codes\":[]}",
        "{\"v\":1,\"codes\":{\"0\":\"eu\"}}",
        "{\"v\":1,\"codes\":{\"256\":\"eu\"}}",
        "{\"v\":1,\"codes\":{\"02\":\"eu\"}}",
        "{\"v\":1,\"codes\":{\"0x2\":\"eu\"}}",
        "{\"v\":1,\"codes\":{\"2\":\"e u\"}}",
        "{\"v\":1,\"codes\":{\"2\":7}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        if (kl_fleet_regions_parse((const uint8_t *)bad[i], strlen(bad[i]),
                                   &back, err, sizeof err) != KL_E_BAD_VALUE)
            fail_msg("accepted: %s", bad[i]);
        expect(err, "region codes");
        assert_string_equal(back.name[2], "");
    }
    char k[64], name[KL_FLEET_NAME_MAX + 1];
    assert_int_equal(kl_fleet_key_regions("/keyless/", k, sizeof k), KL_OK);
    assert_string_equal(k, "/keyless/dir/regions");
    assert_int_equal(
        kl_fleet_key_parse("/keyless/", (const uint8_t *)k, strlen(k), name),
        KL_FLEET_KEY_REGIONS);
    assert_int_equal(
        kl_fleet_key_parse("/keyless/",
                           (const uint8_t *)"/keyless/dir/regionsX", 21, name),
        KL_FLEET_KEY_OTHER);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_roundtrip),
        cmocka_unit_test(test_server_bad),
        cmocka_unit_test(test_server_check),
        cmocka_unit_test(test_server_sealing),
        cmocka_unit_test(test_server_sealing_bad),
        cmocka_unit_test(test_seal_grammar),
        cmocka_unit_test(test_set_meta),
        cmocka_unit_test(test_set_meta_bad),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_regions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
