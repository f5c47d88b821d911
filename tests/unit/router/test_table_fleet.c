/* SPDX-License-Identifier: Apache-2.0 */
/* A routing table from the fleet directory's view (router/table_fleet.h):
 * SKI -> sets -> servers, the sets' region policies, only "keys" servers
 * and never this server itself; and the property the two layers exist
 * for: a membership change reuses the key index (the same object, not a
 * rebuild), while a set's new meta rebuilds it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/table_fleet.h"
#include "testutil.h"

static kl_fleet_server srv[4];
static kl_fleet_set sets[2];
static uint8_t skis_a[3][20], skis_b[2][20];

static void server(kl_fleet_server *s, const char *name, const char *region,
                   kl_fleet_role role, const char *set1, const char *set2)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->region, sizeof s->region, "%s", region);
    snprintf(s->host, sizeof s->host, "127.0.0.1");
    s->port = 2407;
    s->role = role;
    s->priority = 100;
    char err[128];
    if (set1)
        assert_int_equal(kl_fleet_server_add_set(s, set1, err, sizeof err),
                         KL_OK);
    if (set2)
        assert_int_equal(kl_fleet_server_add_set(s, set2, err, sizeof err),
                         KL_OK);
}

static void make_view(kl_fleet_view *v, size_t nservers)
{
    for (int i = 0; i < 3; i++) {
        memset(skis_a[i], 0, 20);
        skis_a[i][0] = (uint8_t)(0x10 + i); /* 10.., 11.., 12.. */
    }
    memcpy(skis_b[0], skis_a[1], 20); /* 11.. is in both sets */
    memset(skis_b[1], 0x77, 20);
    memset(sets, 0, sizeof sets);
    snprintf(sets[0].name, sizeof sets[0].name, "a");
    sets[0].meta.keys = 3;
    sets[0].meta.any_region = true;
    sets[0].skis = &skis_a[0][0];
    sets[0].mod_revision = 5;
    snprintf(sets[1].name, sizeof sets[1].name, "b");
    sets[1].meta.keys = 2;
    sets[1].meta.any_region = false;
    sets[1].meta.regions = calloc(1, sizeof *sets[1].meta.regions);
    snprintf(sets[1].meta.regions[0], sizeof sets[1].meta.regions[0], "eu");
    sets[1].meta.nregions = 1;
    sets[1].skis = &skis_b[0][0];
    sets[1].mod_revision = 6;
    *v = (kl_fleet_view){
        .servers = srv, .nservers = nservers, .sets = sets, .nsets = 2};
}

typedef struct names {
    char s[256];
} names;

static bool collect(void *arg, const kl_rt_server *s)
{
    names *n = arg;
    snprintf(n->s + strlen(n->s), sizeof n->s - strlen(n->s), "%s%s",
             n->s[0] ? " " : "", s->name);
    return true;
}

static const char *servers_of(const kl_rt_table *t, uint8_t first, names *n)
{
    uint8_t ski[20];
    memset(ski, first, 20);
    if (first < 0x77)
        memset(ski + 1, 0, 19);
    n->s[0] = 0;
    const kl_rt_key *k = kl_rt_find(t, ski);
    if (k)
        kl_rt_each_server(t, k, collect, n);
    return k ? n->s : "(none)";
}

static void test_two_layers(void **state)
{
    (void)state;
    server(&srv[0], "eu-1", "eu", KL_FLEET_ROLE_KEYS, "a", "b");
    server(&srv[1], "us-1", "us", KL_FLEET_ROLE_KEYS, "a", NULL);
    server(&srv[2], "router-1", "us", KL_FLEET_ROLE_ROUTER, "a", NULL);
    server(&srv[3], "self", "us", KL_FLEET_ROLE_KEYS, "a", "b");
    kl_fleet_view v;
    make_view(&v, 4);
    kl_rt_fleet_cache cache = {0};
    kl_rt_table *t1, *t2, *t3;
    char err[256] = "";
    assert_int_equal(
        kl_rt_table_from_fleet(&v, "self", &cache, &t1, err, sizeof err),
        KL_OK);
    assert_int_equal(t1->nservers, 2); /* no router, not itself */
    assert_int_equal(kl_rt_nkeys(t1), 4);
    names n;
    assert_string_equal(servers_of(t1, 0x10, &n), "eu-1 us-1");
    /* in both sets: eu-1 comes through each */
    assert_string_equal(servers_of(t1, 0x11, &n), "eu-1 us-1 eu-1");
    assert_string_equal(servers_of(t1, 0x77, &n), "eu-1");
    assert_string_equal(servers_of(t1, 0x13, &n), "(none)");
    /* the key in set b carries b's policy: eu only; 11.. is in a and b,
     * so the intersection applies to it too */
    uint8_t ski[20];
    memset(ski, 0, 20);
    ski[0] = 0x11;
    const kl_rt_key *k = kl_rt_find(t1, ski);
    assert_false(k->any_region);
    assert_true(kl_rt_allowed(t1, k, &t1->servers[0], false, 0));
    assert_false(kl_rt_allowed(t1, k, &t1->servers[1], false, 0));
    ski[0] = 0x10;
    k = kl_rt_find(t1, ski);
    assert_true(kl_rt_allowed(t1, k, &t1->servers[1], false, 0));

    /* compliance byte 2 maps to no region yet: nothing satisfies it */
    assert_false(kl_rt_allowed(t1, k, &t1->servers[1], true, 2));
    assert_true(kl_rt_allowed(t1, k, &t1->servers[1], false, 0));

    /* a server leaves: the key index is the same object */
    v.nservers = 1;
    assert_int_equal(
        kl_rt_table_from_fleet(&v, "self", &cache, &t2, err, sizeof err),
        KL_OK);
    assert_ptr_equal(t2->idx, t1->idx);
    assert_int_equal(t2->nservers, 1);
    kl_fleet_regions rc;
    memset(&rc, 0, sizeof rc);
    snprintf(rc.name[2], sizeof rc.name[2], "eu");
    v.regions = &rc;
    kl_rt_table *t4;
    assert_int_equal(
        kl_rt_table_from_fleet(&v, "self", &cache, &t4, err, sizeof err),
        KL_OK);
    /* dir/regions: byte 2 is eu, so the eu server satisfies it; byte 1
     * stays fedramp-high */
    assert_true(kl_rt_allowed(t4, k, &t4->servers[0], true, 2));
    assert_string_equal(t4->region_of[1], "fedramp-high");
    kl_rt_table_free(t4);
    v.regions = NULL;
    assert_string_equal(servers_of(t2, 0x10, &n), "eu-1");
    /* a set's meta changes: a new index */
    sets[0].mod_revision = 9;
    assert_int_equal(
        kl_rt_table_from_fleet(&v, "self", &cache, &t3, err, sizeof err),
        KL_OK);
    assert_ptr_not_equal(t3->idx, t1->idx);
    /* the old index lives while a table uses it */
    kl_rt_table_free(t1);
    assert_string_equal(servers_of(t2, 0x77, &n), "eu-1");
    kl_rt_table_free(t2);
    kl_rt_fleet_cache_clear(&cache);
    assert_string_equal(servers_of(t3, 0x12, &n), "eu-1");
    kl_rt_table_free(t3);
    free(sets[1].meta.regions);
    for (int i = 0; i < 4; i++)
        kl_fleet_server_clear(&srv[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_layers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
