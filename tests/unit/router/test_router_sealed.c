/* SPDX-License-Identifier: Apache-2.0 */
/* Which remotes may serve a sealed key held elsewhere (router/sealed.c,
 * docs/SEALING.md "keylessd and sealed keys"): the servers' sealing
 * attributes from a table file (`attributes:`, the region counting as
 * `region`) and from fleet records (the published "sealing" member), and
 * the eligible servers of a policy - judged with keylessd's own policy
 * functions (daemon/daemon_seal.h, over seal/policy.h): only servers that
 * open sealed keys, only "keys" servers of the directory, never self.
 * Also the cost of a table install at 1,000 servers and 100 policies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/time.h"
#include "daemon/daemon_seal.h"
#include "router/router_int.h"
#include "router/table_fleet.h"
#include "router/table_int.h"
#include "testutil.h"

static kl_rt_table *parse(const char *yaml)
{
    kl_rt_table *t = NULL;
    char err[512] = "";
    kl_status st =
        kl_rt_table_parse("t.yaml", (const uint8_t *)yaml, strlen(yaml), NULL,
                          NULL, &t, err, sizeof err);
    if (st != KL_OK)
        fail_msg("parse: %s", err);
    return t;
}

static void parse_bad(const char *yaml, const char *want)
{
    kl_rt_table *t = NULL;
    char err[512] = "";
    kl_status st =
        kl_rt_table_parse("t.yaml", (const uint8_t *)yaml, strlen(yaml), NULL,
                          NULL, &t, err, sizeof err);
    if (st != KL_E_CONFIG || !strstr(err, want))
        fail_msg("expected \"%s\", got status %d: %s", want, st, err);
    assert_null(t);
}

/* The names of the servers a policy selects, space-separated. */
static const char *eligible(const kl_rt_table *t, const char *policy, char *buf,
                            size_t cap)
{
    const kl_rt_policy_ops *ops = &kl_daemon_policy_ops;
    void *p = ops->parse(policy, strlen(policy));
    assert_non_null(p);
    uint32_t *idx = calloc(t->nservers + 1, sizeof *idx);
    size_t n = kl_rt_eligible(t, ops, p, idx);
    buf[0] = 0;
    for (size_t i = 0; i < n; i++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? " " : "",
                 t->servers[idx[i]].name);
    free(idx);
    ops->free(p);
    return buf;
}

static const char table_yaml[] =
    "servers:\n"
    "  - {name: dub, address: 127.0.0.1:1, region: eu-west, serves: [],\n"
    "     attributes: {country: ie, tier: [edge, core]}}\n"
    "  - {name: fra, address: 127.0.0.1:2, region: eu-central, serves: []}\n"
    "  - {name: iad, address: 127.0.0.1:3, region: us-east, serves: [],\n"
    "     attributes: {region: us, tier: edge}}\n"
    "  - {name: Odd, address: 127.0.0.1:4, region: EU, serves: []}\n";

static void test_table_attributes(void **state)
{
    (void)state;
    kl_rt_table *t = parse(table_yaml);
    assert_int_equal(t->nservers, 4);
    /* dub: its three values and its region */
    const kl_rt_server *d = &t->servers[0];
    assert_true(d->sealing);
    assert_int_equal(d->nattrs, 4);
    assert_string_equal(t->sattrs[d->attr_first].name, "country");
    assert_string_equal(t->sattrs[d->attr_first + 2].value, "core");
    assert_string_equal(t->sattrs[d->attr_first + 3].name, "region");
    assert_string_equal(t->sattrs[d->attr_first + 3].value, "eu-west");
    /* fra: the region alone */
    assert_int_equal(t->servers[1].nattrs, 1);
    /* iad: its own region attribute wins over the routing region */
    assert_int_equal(t->servers[2].nattrs, 2);
    assert_string_equal(t->sattrs[t->servers[2].attr_first].value, "us");
    /* a region no policy can name is no attribute */
    assert_int_equal(t->servers[3].nattrs, 0);
    char buf[256];
    assert_string_equal(eligible(t, "region=eu-west", buf, sizeof buf), "dub");
    assert_string_equal(
        eligible(t, "region in (eu-west, eu-central)", buf, sizeof buf),
        "dub fra");
    assert_string_equal(eligible(t, "tier=edge", buf, sizeof buf), "dub iad");
    assert_string_equal(eligible(t, "region=us-east", buf, sizeof buf), "");
    assert_string_equal(eligible(t, "not country=ie", buf, sizeof buf),
                        "fra iad Odd");
    assert_string_equal(
        eligible(t, "tier=core and country=ie", buf, sizeof buf), "dub");
    kl_rt_table_free(t);
    /* the most values a server may have, and its region still counts */
    char full[4096] = "servers:\n  - {name: full, address: a, region: eu, "
                      "serves: [], attributes: {n: [";
    for (int i = 0; i < KL_RT_MAX_ATTRS; i++)
        snprintf(full + strlen(full), sizeof full - strlen(full), "%sv%d",
                 i ? ", " : "", i);
    strcat(full, "]}}\n");
    t = parse(full);
    assert_int_equal(t->servers[0].nattrs, KL_RT_MAX_ATTRS + 1);
    assert_string_equal(eligible(t, "region=eu and n=v63", buf, sizeof buf),
                        "full");
    kl_rt_table_free(t);
}

static void test_table_attributes_bad(void **state)
{
    (void)state;
#define SRV "servers:\n  - {name: x, address: a, region: eu, serves: [], "
    parse_bad(SRV "attributes: [a]}\n", "attributes must be a map");
    parse_bad(SRV "attributes: {Country: ie}}\n",
              "attribute name \"Country\" is not one a sealing policy");
    parse_bad(SRV "attributes: {and: ie}}\n", "attribute name \"and\"");
    parse_bad(SRV "attributes: {country: IE}}\n",
              "attribute country: \"IE\" is not a value");
    parse_bad(SRV "attributes: {country: or}}\n", "\"or\" is not a value");
    parse_bad(SRV "attributes: {country: []}}\n", "an empty list");
    parse_bad(SRV "attributes: {country: [ie, ie]}}\n",
              "attribute country=ie given twice");
    parse_bad(SRV "attributes: {country: {a: b}}}\n",
              "\"(not a scalar)\" is not a value");
    parse_bad(SRV "attributes: {country: [[ie]]}}\n", "(not a scalar)");
    parse_bad(SRV "attribute: {country: ie}}\n",
              "unknown field \"attribute\"; did you mean \"attributes\"?");
    char many[4096] = SRV "attributes: {n: [";
    for (int i = 0; i <= KL_RT_MAX_ATTRS; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%sv%d",
                 i ? ", " : "", i);
    strcat(many, "]}}\n");
    parse_bad(many, "more than 64 attribute values");
#undef SRV
}

/* Fleet records: only "keys" servers, only those publishing a sealing
 * key, with the attributes they published; never self. */
static void fleet_server(kl_fleet_server *s, const char *name,
                         kl_fleet_role role, bool key, const char *attrs)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->region, sizeof s->region, "r");
    snprintf(s->host, sizeof s->host, "127.0.0.1");
    s->port = 2407;
    s->role = role;
    s->priority = 100;
    char err[128];
    if (!key)
        return;
    uint8_t pk[32];
    memset(pk, name[0], sizeof pk);
    assert_int_equal(kl_fleet_server_set_sealing(s, KL_FLEET_KEM_X25519, pk, 32,
                                                 err, sizeof err),
                     KL_OK);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", attrs);
    char *save = NULL;
    for (char *p = strtok_r(buf, ",", &save); p;
         p = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(p, '=');
        *eq = 0;
        assert_int_equal(
            kl_fleet_server_add_seal_attr(s, p, eq + 1, err, sizeof err),
            KL_OK);
    }
}

static void test_fleet_attributes(void **state)
{
    (void)state;
    kl_fleet_server srv[6];
    fleet_server(&srv[0], "a-eu", KL_FLEET_ROLE_KEYS, true, "region=eu");
    fleet_server(&srv[1], "b-eu-nokey", KL_FLEET_ROLE_KEYS, false, "");
    fleet_server(&srv[2], "c-eu-router", KL_FLEET_ROLE_ROUTER, true,
                 "region=eu");
    fleet_server(&srv[3], "d-us", KL_FLEET_ROLE_KEYS, true,
                 "region=us,tier=edge,tier=core");
    fleet_server(&srv[4], "e-self", KL_FLEET_ROLE_KEYS, true, "region=eu");
    fleet_server(&srv[5], "f-eu", KL_FLEET_ROLE_KEYS, true,
                 "region=eu,tier=core");
    kl_fleet_view v = {.servers = srv, .nservers = 6};
    kl_rt_fleet_cache cache;
    memset(&cache, 0, sizeof cache);
    kl_rt_table *t = NULL;
    char err[256];
    assert_int_equal(
        kl_rt_table_from_fleet(&v, "e-self", &cache, &t, err, sizeof err),
        KL_OK);
    char buf[256];
    assert_string_equal(eligible(t, "region=eu", buf, sizeof buf), "a-eu f-eu");
    assert_string_equal(eligible(t, "tier=core", buf, sizeof buf), "d-us f-eu");
    assert_string_equal(eligible(t, "region!=eu", buf, sizeof buf), "d-us");
    /* a server with no sealing key is a remote, never for a sealed key */
    bool listed = false;
    for (size_t i = 0; i < t->nservers; i++)
        listed |= !strcmp(t->servers[i].name, "b-eu-nokey") &&
                  !t->servers[i].sealing && !t->servers[i].nattrs;
    assert_true(listed);
    kl_rt_table_free(t);
    kl_rt_fleet_cache_clear(&cache);
    for (int i = 0; i < 6; i++)
        kl_fleet_server_clear(&srv[i]);
}

/* The router's classes (sealed.c): one per policy text, recomputed for a
 * new table; and the cost of recomputing 100 policies over 1,000
 * servers, which a table install pays once. */
static void test_classes_and_cost(void **state)
{
    (void)state;
    kl_router r;
    memset(&r, 0, sizeof r);
    r.o.policy_ops = &kl_daemon_policy_ops;
    kl_rt_pclass_init(&r);
    r.table = parse(table_yaml);
    r.table_gen = 1;
    kl_rt_pclass *c = kl_rt_pclass_get(&r, "tier=edge");
    assert_non_null(c);
    assert_int_equal(c->n, 2);
    assert_ptr_equal(kl_rt_pclass_get(&r, "tier=edge"), c); /* same class */
    kl_rt_pclass *bad = kl_rt_pclass_get(&r, "tier=");      /* no parse */
    assert_non_null(bad);
    assert_int_equal(bad->n, 0);
    /* a new table: the class follows it */
    kl_rt_table_free(r.table);
    r.table = parse("servers:\n  - {name: z, address: a, region: x, "
                    "serves: [], attributes: {tier: edge}}\n");
    r.table_gen++;
    kl_rt_pclass_refresh(&r);
    assert_int_equal(c->n, 1);
    assert_int_equal(c->gen, r.table_gen);
    kl_rt_table_free(r.table);

    /* 1,000 servers in 10 regions and 3 tiers; 100 policies */
    char *y = malloc(1 << 20);
    size_t at = (size_t)snprintf(y, 1 << 20, "servers:\n");
    for (int i = 0; i < 1000; i++)
        at += (size_t)snprintf(y + at, (1 << 20) - at,
                               "  - {name: s%d, address: 127.0.0.1:%d, "
                               "region: r%d, serves: [], attributes: {tier: "
                               "t%d, dc: d%d}}\n",
                               i, 1000 + i, i % 10, i % 3, i);
    r.table = parse(y);
    free(y);
    r.table_gen++;
    char pol[100][64];
    for (int i = 0; i < 100; i++) {
        snprintf(pol[i], sizeof pol[i], "region in (r%d, r%d) and tier!=t%d",
                 i % 10, (i + 3) % 10, i % 3);
        assert_non_null(kl_rt_pclass_get(&r, pol[i]));
    }
    uint64_t t0 = kl_now_ns();
    r.table_gen++;
    kl_rt_pclass_refresh(&r);
    uint64_t refresh_ns = kl_now_ns() - t0;
    /* each policy selects 2 regions x 2 of 3 tiers: 1000 * 2/10 * 2/3 */
    kl_rt_pclass *p0 = kl_rt_pclass_get(&r, pol[0]);
    assert_true(p0->n >= 120 && p0->n <= 140);
    /* a request's lookup: a hash of the text and one probe */
    t0 = kl_now_ns();
    size_t sum = 0;
    for (int i = 0; i < 100000; i++)
        sum += kl_rt_pclass_get(&r, pol[i % 100])->n;
    uint64_t lookup_ns = (kl_now_ns() - t0) / 100000;
    print_message("table install with 1,000 servers and 100 policies: %.2f "
                  "ms; a request's lookup: %llu ns (sum %zu)\n",
                  (double)refresh_ns / 1e6, (unsigned long long)lookup_ns, sum);
    assert_true(refresh_ns < 2000000000ull); /* a bound, not a benchmark */
    kl_rt_table_free(r.table);
    kl_rt_pclass_free_all(&r);
    kl_hmap_free(&r.pclasses);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_attributes),
        cmocka_unit_test(test_table_attributes_bad),
        cmocka_unit_test(test_fleet_attributes),
        cmocka_unit_test(test_classes_and_cost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
