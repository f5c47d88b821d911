/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-cli fleet (docs/FLEET.md "keyless-cli fleet") against a real
 * etcd on loopback: publish-set from a public key file and an SKI list
 * (the set in etcd checks against its meta; a bad list line is refused
 * with file:line), a second publish makes generation 2 and removes
 * generation 1's chunks; the listing as JSON and as a table shows the
 * registered server and the set. */
#include <jansson.h>

#include "etcd_common.h"
#include "fleet/member.h"

static te_cluster cluster;
static kl_etcd *cl;
static char *dir;
static char bin[1100], etcd_flag[128];

static int setup(void **state)
{
    (void)state;
    te_start(&cluster, 1, false);
    cl = ec_client(&cluster, 3000);
    dir = tp_tempdir("fleet-cli");
    snprintf(bin, sizeof bin, "%s/keyless-cli", tu_bin_dir());
    snprintf(etcd_flag, sizeof etcd_flag, "--etcd=%s", cluster.m[0].url);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tp_rmtree(dir);
    kl_etcd_free(cl);
    te_stop(&cluster);
    return 0;
}

static const char *write_list(const char *name, const char *text)
{
    static char path[4][1200];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return p;
}

static int run(const char *const *args, char **out)
{
    const char *argv[16] = {bin, "fleet", etcd_flag, "--prefix=/c/"};
    size_t n = 4;
    for (size_t i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return td_run(argv, out, 20000);
}

static size_t chunk_keys(int64_t gen)
{
    char pfx[128], err[512] = "";
    assert_int_equal(kl_fleet_key_chunks("/c/", "web", gen, pfx, sizeof pfx),
                     KL_OK);
    kl_etcd_page pg;
    ec_ok(kl_etcd_range(cl, pfx, strlen(pfx), NULL, 0, 0, 0, &pg, err,
                        sizeof err),
          err);
    size_t n = pg.n;
    kl_etcd_page_clear(&pg);
    return n;
}

static void test_publish_and_list(void **state)
{
    (void)state;
    char skiarg[1300], bad[1300], *out = NULL;
    snprintf(bad, sizeof bad, "--skis=%s",
             write_list("bad.txt", "# three\n00112233445566778899aabbccddeeff"
                                   "00112233\nnot-an-ski\n"));
    const char *b[] = {"publish-set", bad, "web", NULL};
    assert_int_equal(run(b, &out), 2);
    ec_expect(out, "bad.txt:3: \"not-an-ski\" is not an SKI");
    free(out);

    snprintf(skiarg, sizeof skiarg, "--skis=%s",
             write_list("skis.txt",
                        "00112233445566778899aabbccddeeff00112233\n"
                        "ffeeddccbbaa99887766554433221100ffeeddcc  # x\n"
                        "\n"
                        "0000000000000000000000000000000000000001\n"));
    const char *p[] = {"publish-set",
                       skiarg,
                       "--regions=eu,us",
                       "web",
                       tp_path("pubkeys/ecdsa-p256.pem"),
                       NULL};
    assert_int_equal(run(p, &out), 0);
    ec_expect(out, "OK: key set web generation 1: 4 keys in 1 chunks");
    free(out);
    /* what a directory reader checks: the chunks against the meta */
    char key[128], err[512] = "";
    assert_int_equal(kl_fleet_key_set("/c/", "web", key, sizeof key), KL_OK);
    kl_etcd_kv kv;
    ec_ok(kl_etcd_get(cl, key, strlen(key), &kv, NULL, err, sizeof err), err);
    kl_fleet_set_meta m;
    ec_ok(kl_fleet_set_meta_parse(kv.value, kv.value_len, &m, err, sizeof err),
          err);
    kl_etcd_kv_clear(&kv);
    assert_int_equal(m.nregions, 2);
    assert_int_equal(kl_fleet_key_chunk("/c/", "web", 1, 0, key, sizeof key),
                     KL_OK);
    ec_ok(kl_etcd_get(cl, key, strlen(key), &kv, NULL, err, sizeof err), err);
    ec_ok(kl_fleet_set_verify(&m, kv.value, kv.value_len / 20, err, sizeof err),
          err);
    kl_etcd_kv_clear(&kv);
    kl_fleet_set_meta_clear(&m);

    /* again: generation 2, generation 1's chunks gone */
    assert_int_equal(run(p, &out), 0);
    ec_expect(out, "generation 2");
    free(out);
    assert_int_equal(chunk_keys(1), 0);
    assert_int_equal(chunk_keys(2), 1);

    /* a server, then the listing */
    kl_fleet_server s;
    memset(&s, 0, sizeof s);
    snprintf(s.name, sizeof s.name, "sfo-01");
    snprintf(s.region, sizeof s.region, "us");
    snprintf(s.host, sizeof s.host, "127.0.0.1");
    s.port = 2407;
    s.started = 1;
    ec_ok(kl_fleet_server_add_set(&s, "web", err, sizeof err), err);
    const char *urls[TE_MAX_MEMBERS];
    te_endpoints(&cluster, urls);
    kl_fleet_member_opts mo = {.etcd = {.endpoints = urls, .n_endpoints = 1},
                               .prefix = "/c/",
                               .ttl_s = 5,
                               .record = &s};
    kl_fleet_member *mem;
    ec_ok(kl_fleet_member_start(&mo, &mem, err, sizeof err), err);
    kl_fleet_server_clear(&s);
    kl_fleet_member_status ms;
    double until = td_now_ms() + 3000;
    do
        kl_fleet_member_status_get(mem, &ms);
    while (ms.state != KL_FLEET_MEMBER_REGISTERED && td_now_ms() < until);

    char rkey[64];
    assert_int_equal(kl_fleet_key_regions("/c/", rkey, sizeof rkey), KL_OK);
    static const char codes[] = "{\"v\":1,\"codes\":{\"2\":\"eu\"}}";
    ec_ok(kl_etcd_put(cl, rkey, strlen(rkey), codes, sizeof codes - 1, 0, NULL,
                      err, sizeof err),
          err);

    const char *j[] = {"-json", NULL};
    assert_int_equal(run(j, &out), 0);
    json_error_t je;
    json_t *doc = json_loads(out, 0, &je);
    if (!doc)
        fail_msg("not JSON: %s\n%s", je.text, out);
    json_t *srv = json_array_get(json_object_get(doc, "servers"), 0);
    assert_string_equal(json_string_value(json_object_get(srv, "name")),
                        "sfo-01");
    assert_string_equal(json_string_value(json_object_get(srv, "address")),
                        "127.0.0.1:2407");
    json_t *set = json_array_get(json_object_get(doc, "sets"), 0);
    assert_int_equal(json_integer_value(json_object_get(set, "keys")), 4);
    assert_int_equal(json_integer_value(json_object_get(set, "generation")), 2);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(doc, "region_codes"), "2")),
                        "eu");
    json_decref(doc);
    free(out);
    const char *t[] = {NULL};
    assert_int_equal(run(t, &out), 0);
    ec_expect(out, "sfo-01");
    ec_expect(out, "eu,us");
    ec_expect(out, "2 = eu");
    free(out);
    kl_fleet_member_stop(mem);

    const char *badpre[] = {"--prefix=/x", NULL};
    assert_int_equal(run(badpre, &out), 2);
    ec_expect(out, "must end with '/'");
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_publish_and_list),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
