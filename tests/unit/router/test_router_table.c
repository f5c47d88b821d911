/* SPDX-License-Identifier: Apache-2.0 */
/* The routing table parser and lookups (src/router/table*.c):
 * a complete table, key sets and policies intersected, compliance bytes
 * mapped (0x01 = fedramp-high by default, protocol P9), dns: entries
 * expanded through the resolver, and every malformed input rejected with
 * "file:line: what; fix". */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/table.h"

#define SKI_A "406550D87609ECAE021A83EF2C1F372C08F42699"
#define SKI_B "D9C69B8E23ABBA7C26FD5D0E282F3DD679741036"
#define SKI_C "1B5E422431D15E92E88312C04807591D62C2B687"

static void ski(const char *hex, uint8_t out[20])
{
    size_t n;
    uint8_t *b = tu_unhex(hex, &n);
    assert_int_equal(n, 20);
    memcpy(out, b, 20);
    free(b);
}

static kl_rt_table *parse_ok(const char *text)
{
    kl_rt_table *t = NULL;
    char err[512];
    kl_status st =
        kl_rt_table_parse("routes.yaml", (const uint8_t *)text, strlen(text),
                          NULL, NULL, &t, err, sizeof err);
    if (st != KL_OK)
        fail_msg("parse failed: %s", err);
    return t;
}

/* The error for text must start with "routes.yaml:LINE: " and contain
 * what. */
static void parse_bad(const char *text, int line, const char *what)
{
    kl_rt_table *t = NULL;
    char err[512] = "";
    kl_status st =
        kl_rt_table_parse("routes.yaml", (const uint8_t *)text, strlen(text),
                          NULL, NULL, &t, err, sizeof err);
    if (st != KL_E_CONFIG)
        fail_msg("accepted (%d): %s", st, text);
    assert_null(t);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "routes.yaml:%d: ", line);
    if (line > 0 && strncmp(err, prefix, strlen(prefix)) != 0)
        fail_msg("error \"%s\" does not start with \"%s\"", err, prefix);
    if (!strstr(err, what))
        fail_msg("error \"%s\" does not mention \"%s\"", err, what);
}

static const char *full = "region_codes:\n"
                          "  2: eu\n"
                          "  0x03: us-east\n"
                          "key_sets:\n"
                          "  payments:\n"
                          "    skis: [" SKI_A ", " SKI_B "]\n"
                          "    regions: [eu, fedramp-high]\n"
                          "keys:\n"
                          "  " SKI_B ": {regions: [eu]}\n"
                          "servers:\n"
                          "  - name: dc-eu\n"
                          "    address: 127.0.0.1:3001\n"
                          "    region: eu\n"
                          "    priority: 10\n"
                          "    serves: [payments]\n"
                          "  - name: dc-fed\n"
                          "    address: \"[::1]:3002\"\n"
                          "    region: fedramp-high\n"
                          "    serves: [payments, " SKI_C "]\n"
                          "  - name: dc-us\n"
                          "    address: localhost\n"
                          "    region: us-east\n"
                          "    serves: [" SKI_C "]\n";

static void test_full_table(void **state)
{
    kl_rt_table *t = parse_ok(full);
    assert_int_equal(t->nservers, 3);
    assert_string_equal(t->servers[0].name, "dc-eu");
    assert_string_equal(t->servers[0].host, "127.0.0.1");
    assert_int_equal(t->servers[0].port, 3001);
    assert_int_equal(t->servers[0].priority, 10);
    assert_string_equal(t->servers[1].host, "::1");
    assert_int_equal(t->servers[1].port, 3002);
    assert_int_equal(t->servers[1].priority, 100);        /* default */
    assert_int_equal(t->servers[2].port, 2407);           /* default port */
    assert_string_equal(t->region_of[1], "fedramp-high"); /* P9 default */
    assert_string_equal(t->region_of[2], "eu");
    assert_string_equal(t->region_of[3], "us-east");
    assert_string_equal(t->region_of[4], "");
    assert_int_equal(t->nkeys, 3);

    uint8_t a[20], b[20], c[20], z[20];
    ski(SKI_A, a);
    ski(SKI_B, b);
    ski(SKI_C, c);
    ski("0102030405060708090A0B0C0D0E0F1011121314", z);
    const kl_rt_key *ka = kl_rt_find(t, a), *kb = kl_rt_find(t, b),
                    *kc = kl_rt_find(t, c);
    assert_non_null(ka);
    assert_non_null(kb);
    assert_non_null(kc);
    assert_null(kl_rt_find(t, z));
    assert_int_equal(ka->nservers, 2); /* dc-eu, dc-fed via the set */
    assert_int_equal(kc->nservers, 2); /* dc-fed, dc-us */
    /* A: the set's policy; B: the set's and its own, intersected */
    assert_false(ka->any_region);
    assert_int_equal(ka->nregions, 2);
    assert_int_equal(kb->nregions, 1);
    assert_string_equal(kb->regions[0], "eu");
    assert_true(kc->any_region);

    const kl_rt_server *eu = &t->servers[0], *fed = &t->servers[1],
                       *us = &t->servers[2];
    /* no compliance byte: the key's policy alone */
    assert_true(kl_rt_allowed(t, ka, eu, false, 0));
    assert_true(kl_rt_allowed(t, ka, fed, false, 0));
    assert_true(kl_rt_allowed(t, kb, eu, false, 0));
    assert_false(kl_rt_allowed(t, kb, fed, false, 0));
    /* 0x01 = fedramp-high: only the FedRAMP server */
    assert_false(kl_rt_allowed(t, ka, eu, true, 0x01));
    assert_true(kl_rt_allowed(t, ka, fed, true, 0x01));
    /* B may not be served from fedramp-high at all */
    assert_false(kl_rt_allowed(t, kb, fed, true, 0x01));
    /* C has no policy: the request's region decides */
    assert_true(kl_rt_allowed(t, kc, us, true, 0x03));
    assert_false(kl_rt_allowed(t, kc, fed, true, 0x03));
    /* an unmapped byte names no region: nothing satisfies it */
    assert_false(kl_rt_allowed(t, kc, us, true, 0x09));
    assert_false(kl_rt_allowed(t, kc, fed, true, 0x09));
    kl_rt_table_free(t);
}

static void test_override_code_one_and_empty(void **state)
{
    kl_rt_table *t = parse_ok("region_codes: {1: gov-cloud}\n");
    assert_string_equal(t->region_of[1], "gov-cloud");
    assert_int_equal(t->nservers, 0);
    kl_rt_table_free(t);
    t = parse_ok(""); /* an empty file: no routes */
    assert_int_equal(t->nkeys, 0);
    kl_rt_table_free(t);
    t = parse_ok("keys:\nservers:\n");
    kl_rt_table_free(t);
}

static size_t stub_resolve(const char *host, char (*out)[64], size_t max,
                           void *arg)
{
    (void)arg;
    if (strcmp(host, "pool.example") != 0 || max < 2)
        return 0;
    snprintf(out[0], 64, "10.0.0.1");
    snprintf(out[1], 64, "10.0.0.2");
    return 2;
}

static void test_dns_entries(void **state)
{
    const char *text = "servers:\n"
                       "  - {name: pool, dns: \"pool.example:4000\", region: "
                       "eu, serves: [" SKI_A "]}\n";
    kl_rt_table *t = NULL;
    char err[512];
    assert_int_equal(kl_rt_table_parse("routes.yaml", (const uint8_t *)text,
                                       strlen(text), stub_resolve, NULL, &t,
                                       err, sizeof err),
                     KL_OK);
    assert_int_equal(t->nservers, 2);
    assert_int_equal(t->ndns, 2);
    assert_string_equal(t->servers[0].name, "pool#1");
    assert_string_equal(t->servers[1].host, "10.0.0.2");
    assert_int_equal(t->servers[1].port, 4000);
    uint8_t a[20];
    ski(SKI_A, a);
    assert_int_equal(kl_rt_find(t, a)->nservers, 2);
    kl_rt_table_free(t);
    /* a name that does not resolve fails the table (the previous stays) */
    text = "servers:\n"
           "  - {name: pool, dns: \"nowhere.example:4000\", region: eu, "
           "serves: [" SKI_A "]}\n";
    assert_int_equal(kl_rt_table_parse("routes.yaml", (const uint8_t *)text,
                                       strlen(text), stub_resolve, NULL, &t,
                                       err, sizeof err),
                     KL_E_CONFIG);
    assert_non_null(strstr(err, "routes.yaml:2: "));
    assert_non_null(strstr(err, "did not resolve"));
}

static void test_malformed(void **state)
{
    parse_bad("servers: [\n", 2, "YAML syntax");
    parse_bad("- a\n- b\n", 1, "a routing table is a map");
    parse_bad("routes: {}\n", 1, "unknown section \"routes\"");
    parse_bad("region_codes: [1]\n", 1, "region_codes must be a map");
    parse_bad("region_codes: {256: eu}\n", 1, "is not a byte");
    parse_bad("region_codes: {x1: eu}\n", 1, "is not a byte");
    parse_bad("region_codes: {1: \"e u\"}\n", 1, "is not a region name");
    parse_bad("key_sets: {p: {regions: [eu]}}\n", 1, "p has no skis");
    parse_bad("key_sets:\n  p:\n    skis: [abc]\n", 3, "\"abc\" is not an SKI");
    parse_bad("key_sets:\n  p:\n    skis: "
              "[0000000000000000000000000000000000000000]\n",
              3, "not all zero");
    parse_bad("key_sets:\n  p: {skis: [" SKI_A "], color: red}\n", 2,
              "unknown field \"color\"");
    parse_bad("key_sets:\n  p: {skis: [" SKI_A "], regions: eu}\n", 2,
              "regions must be a list");
    parse_bad("keys:\n  " SKI_A ": [eu]\n", 2, "must be a map like");
    parse_bad("key_sets:\n  p:\n    skis: [" SKI_A "]\n    regions: [eu]\n"
              "    regions: [us]\n",
              5, "regions is given twice");
    parse_bad("keys:\n  nothex: {regions: [eu]}\n", 2, "is not an SKI");
    parse_bad("servers: {name: x}\n", 1, "servers must be a list");
    parse_bad("servers:\n  - name: x\n    region: eu\n    serves: []\n", 2,
              "exactly one of");
    parse_bad("servers:\n  - {name: x, address: a:1, serves: []}\n", 2,
              "x has no region");
    parse_bad("servers:\n  - {address: a:1, region: eu, serves: []}\n", 2,
              "has no name");
    parse_bad("servers:\n  - {name: x, address: \"a:99999\", region: eu, "
              "serves: []}\n",
              2, "is not an address");
    parse_bad("servers:\n  - {name: x, address: \"::1:80\", region: eu, "
              "serves: []}\n",
              2, "is not an address");
    parse_bad("servers:\n  - {name: x, address: a, dns: b, region: eu, "
              "serves: []}\n",
              2, "exactly one of");
    parse_bad("servers:\n  - {name: x, address: a, region: eu, priority: -1, "
              "serves: []}\n",
              2, "priority");
    parse_bad("servers:\n  - {name: x, address: a, region: eu}\n", 2,
              "serves must be a list");
    parse_bad("servers:\n  - {name: x, address: a, region: eu, serves: "
              "[nosuchset]}\n",
              2, "neither an SKI");
    parse_bad("servers:\n  - {name: x, address: a, region: eu, serves: []}\n"
              "  - {name: x, address: b, region: eu, serves: []}\n",
              3, "used twice");
    parse_bad("servers:\n  - {name: x, adress: a, region: eu, serves: []}\n", 2,
              "unknown field \"adress\"");
    parse_bad("servers:\n  - {name: x, address: a, region: eu, serves: []}\n"
              "servers: []\n",
              3, "appears twice");
    parse_bad("key_sets:\n  p: {skis: [" SKI_A "]}\n  p: {skis: [" SKI_B "]}\n",
              3, "defined twice");
    /* a dns: entry with no resolver */
    parse_bad("servers:\n  - {name: x, dns: a, region: eu, serves: []}\n", 2,
              "did not resolve");
}

static void test_load_file(void **state)
{
    kl_rt_table *t = NULL;
    char err[512];
    assert_int_equal(kl_rt_table_load("/nonexistent/routes.yaml", NULL, NULL,
                                      &t, err, sizeof err),
                     KL_E_CONFIG);
    assert_non_null(strstr(err, "/nonexistent/routes.yaml: cannot open"));
}

/* Unknown names are named as unknown, with the nearest valid one when the
 * name looks misspelt - never as a complaint about their value (a
 * misspelt `serves:` holds a list: it was reported as "servers: serve must
 * be a single value"). */
static void test_unknown_names(void **state)
{
    (void)state;
    parse_bad("servers:\n  - {name: x, address: a, region: eu, serve: [" SKI_A
              "]}\n",
              2,
              "servers: unknown field \"serve\"; did you mean \"serves\"? a "
              "server has name, address or dns, region, priority, serves and "
              "attributes");
    parse_bad("servers:\n  - name: x\n    address: a\n    region: eu\n"
              "    serve:\n      - " SKI_A "\n",
              5, "unknown field \"serve\"; did you mean \"serves\"?");
    parse_bad("servers:\n  - {name: x, adress: a, region: eu, serves: []}\n", 2,
              "unknown field \"adress\"; did you mean \"address\"?");
    parse_bad("servers:\n  - {name: x, address: a, Region: eu, serves: []}\n",
              2, "unknown field \"Region\"; did you mean \"region\"?");
    parse_bad("server:\n  - {name: x, address: a, region: eu, serves: []}\n", 1,
              "unknown section \"server\"; did you mean \"servers\"? a "
              "routing table has");
    parse_bad("key_sets:\n  p: {ski: [" SKI_A "]}\n", 2,
              "key_sets: p: unknown field \"ski\"; did you mean \"skis\"?");
    parse_bad("keys:\n  " SKI_A ": {region: [eu]}\n", 2,
              "unknown field \"region\"; did you mean \"regions\"?");
    /* nothing near: no guess */
    const char *text = "servers:\n  - {name: x, color: red, address: a, "
                       "region: eu, serves: []}\n";
    parse_bad(text, 2, "servers: unknown field \"color\"; a server has");
    kl_rt_table *t = NULL;
    char err[512] = "";
    assert_int_equal(kl_rt_table_parse("routes.yaml", (const uint8_t *)text,
                                       strlen(text), NULL, NULL, &t, err,
                                       sizeof err),
                     KL_E_CONFIG);
    assert_null(strstr(err, "did you mean"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_table),
        cmocka_unit_test(test_override_code_one_and_empty),
        cmocka_unit_test(test_dns_entries),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_unknown_names),
        cmocka_unit_test(test_load_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
