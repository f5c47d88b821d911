/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-cli fleet (docs/FLEET.md "keyless-cli fleet") against a real
 * etcd on loopback: publish-set from a public key file and an SKI list
 * (the set in etcd checks against its meta; a bad list line is refused
 * with file:line), a second publish makes generation 2 and removes
 * generation 1's chunks; the listing as JSON and as a table shows the
 * registered server and the set. With --router, the listing joins a
 * router keylessd's own view (its /remotes): a real key server up with
 * its measured latency, a record whose server does not answer down, the
 * router itself not a remote; each lease's time left; `fleet regions`
 * lists the region codes. */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "etcd_common.h"
#include "fleet/member.h"
#include "net.h"
#include "test_router_server_common.h"

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

/* A keylessd in the fleet under /c/ (set web). */
static void start_member(td_daemon *d, const char *name, const char *kdir,
                         const char *role, const char *more)
{
    static char a_ep[4][128], a_name[4][96], a_role[4][96], a_cert[4][1300],
        a_key[4][1300];
    static int slot;
    int i = slot++ % 4;
    snprintf(a_ep[i], sizeof a_ep[i], "--fleet-etcd-endpoints=%s",
             cluster.m[0].url);
    snprintf(a_name[i], sizeof a_name[i], "--fleet-name=%s", name);
    snprintf(a_role[i], sizeof a_role[i], "--fleet-role=%s", role);
    snprintf(a_cert[i], sizeof a_cert[i], "--router-cert=%s",
             tp_path("client.crt"));
    snprintf(a_key[i], sizeof a_key[i], "--router-key=%s",
             tp_path("client.key"));
    const char *extra[] = {a_ep[i],
                           "--fleet-prefix=/c/",
                           "--fleet-region=eu",
                           "--fleet-lease-ttl=2",
                           "--fleet-key-sets=web",
                           a_name[i],
                           a_role[i],
                           a_cert[i],
                           a_key[i],
                           "--router-ping-interval=100ms",
                           more,
                           NULL};
    rs_start(d, name, kdir, NULL, extra);
}

/* True once something listens on 127.0.0.1:port (the metrics endpoint
 * opens just after the key server's listener). */
static bool port_open(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static json_t *server_named(json_t *doc, const char *name)
{
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(doc, "servers"), i, s)
    {
        if (!strcmp(json_string_value(json_object_get(s, "name")), name))
            return s;
    }
    fail_msg("no server %s in the listing", name);
    return NULL;
}

static void test_router_view_and_regions(void **state)
{
    (void)state;
    uint8_t ski[20];
    char *keydir = rs_keydir("fleet-cli-keys", "ecdsa-p256", ski);
    char *emptydir = tp_tempdir("fleet-cli-empty");
    uint16_t mport = tn_free_port();
    char mflag[64], rflag[128];
    snprintf(mflag, sizeof mflag, "--metrics-port=%u", mport);
    snprintf(rflag, sizeof rflag, "--router=http://127.0.0.1:%u", mport);
    td_daemon k, r;
    start_member(&k, "k1", keydir, "keys", NULL);
    start_member(&r, "r1", emptydir, "router", mflag);
    /* a record whose server does not answer */
    const char *urls[TE_MAX_MEMBERS];
    te_endpoints(&cluster, urls);
    kl_fleet_server g;
    memset(&g, 0, sizeof g);
    snprintf(g.name, sizeof g.name, "ghost");
    snprintf(g.region, sizeof g.region, "eu");
    snprintf(g.host, sizeof g.host, "127.0.0.1");
    g.port = tn_free_port();
    g.role = KL_FLEET_ROLE_KEYS;
    g.priority = 100;
    char err[512] = "";
    ec_ok(kl_fleet_server_add_set(&g, "web", err, sizeof err), err);
    kl_fleet_member_opts mo = {.etcd = {.endpoints = urls, .n_endpoints = 1},
                               .prefix = "/c/",
                               .ttl_s = 2,
                               .record = &g};
    kl_fleet_member *ghost;
    ec_ok(kl_fleet_member_start(&mo, &ghost, err, sizeof err), err);
    kl_fleet_server_clear(&g);

    /* the router measures k1 and finds ghost down */
    double until = td_now_ms() + 10000;
    while (!port_open(mport) && td_now_ms() < until)
        ec_sleep_ms(20);
    char *body = NULL;
    bool seen = false;
    while (!seen && td_now_ms() < until) {
        free(body);
        body = NULL;
        int st = tn_http_get(mport, "/remotes", &body);
        seen = (st == 200 || st == 503) && body && strstr(body, "k1 eu up ") &&
               !strstr(body, "k1 eu up -") && strstr(body, "ghost eu down");
        if (!seen)
            ec_sleep_ms(50);
    }
    fprintf(stderr, "/remotes: %s", body ? body : "(none)");
    assert_true(seen);
    free(body);

    char *out = NULL;
    const char *j[] = {rflag, "-json", NULL};
    assert_int_equal(run(j, &out), 0);
    json_error_t je;
    json_t *doc = json_loads(out, 0, &je);
    if (!doc)
        fail_msg("not JSON (%s): %s", je.text, out);
    json_t *k1 = server_named(doc, "k1"), *route = json_object_get(k1, "route");
    assert_string_equal(json_string_value(json_object_get(route, "state")),
                        "up");
    double ms = json_real_value(json_object_get(route, "latency_ms"));
    fprintf(stderr, "k1 latency as the router measures it: %.3f ms\n", ms);
    assert_true(ms > 0 && ms < 1000);
    assert_int_equal(
        json_integer_value(json_object_get(k1, "lease_granted_ttl")), 2);
    json_int_t left = json_integer_value(json_object_get(k1, "lease_ttl"));
    assert_true(left >= 0 && left <= 2);
    route = json_object_get(server_named(doc, "ghost"), "route");
    assert_string_equal(json_string_value(json_object_get(route, "state")),
                        "down");
    assert_true(json_is_null(json_object_get(route, "latency_ms")));
    /* the router is no remote of its own */
    assert_true(
        json_is_null(json_object_get(server_named(doc, "r1"), "route")));
    assert_int_equal(json_array_size(json_object_get(doc, "router_only")), 0);
    json_decref(doc);
    free(out);

    const char *t[] = {rflag, NULL};
    assert_int_equal(run(t, &out), 0);
    fprintf(stderr, "%s", out);
    ec_expect(out, "LATENCY");
    ec_expect(out, "/2s");
    ec_expect(out, " up ");
    ec_expect(out, " down ");
    free(out);

    /* a --router that does not answer, and one that routes nothing */
    char dead[128], notr[128];
    snprintf(dead, sizeof dead, "--router=http://127.0.0.1:%u", tn_free_port());
    const char *d[] = {dead, NULL};
    assert_int_equal(run(d, &out), 3);
    ec_expect(out, "--router http://127.0.0.1:");
    free(out);
    snprintf(notr, sizeof notr, "--router=http://127.0.0.1:%u/remotes/", mport);
    const char *nr[] = {notr, NULL};
    assert_int_equal(run(nr, &out), 0); /* the path may be given */
    free(out);

    /* the region codes */
    const char *rg[] = {"regions", NULL};
    assert_int_equal(run(rg, &out), 0);
    fprintf(stderr, "%s", out);
    ec_expect(out, "CODE");
    ec_expect(out, "fedramp-high (the default)");
    ec_expect(out, "eu");
    free(out);
    const char *rgj[] = {"regions", "-json", NULL};
    assert_int_equal(run(rgj, &out), 0);
    doc = json_loads(out, 0, &je);
    assert_non_null(doc);
    json_t *codes = json_object_get(doc, "codes");
    assert_string_equal(json_string_value(json_object_get(codes, "1")),
                        "fedramp-high");
    assert_string_equal(json_string_value(json_object_get(codes, "2")), "eu");
    assert_true(json_is_true(json_object_get(doc, "present")));
    json_decref(doc);
    free(out);
    const char *rgo[] = {"regions", "--prefix=/none/", NULL};
    assert_int_equal(run(rgo, &out), 0);
    ec_expect(out, "/none/dir/regions is absent");
    free(out);

    kl_fleet_member_stop(ghost);
    assert_int_equal(td_stop(&r, 0), 0);
    assert_int_equal(td_stop(&k, 0), 0);
    tp_rmtree(keydir);
    tp_rmtree(emptydir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_publish_and_list),
        cmocka_unit_test(test_router_view_and_regions),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
