/* SPDX-License-Identifier: Apache-2.0 */
/* keylessd in a fleet (docs/FLEET.md "Options"), real daemons and a real
 * etcd on loopback: the fleet_* options make a keylessd register itself
 * and route from the directory, with no routing table file.
 *
 * - join: router A runs; key server B starts and registers: a client's
 *   signature through A for B's key arrives (and verifies) within 2 s of
 *   B's registration;
 * - death: B and C serve the key; B is killed with SIGKILL under load
 *   through A: A drops B within the lease TTL (+ 1 s), and not one client
 *   request fails (C remains);
 * - a clean stop (SIGTERM) marks the record draining, serves on for
 *   fleet_drain_delay, then removes the record at once (the lease
 *   revoked); a second SIGTERM cuts the delay short;
 * - only the router (role router) routes: the key servers open no remote
 *   connections;
 * - --check names each bad fleet option with its fix, and a router's
 *   certificate that remotes would refuse. */
#include "fleet_common.h"
#include "test_router_server_common.h"

#include <signal.h>

#include "net.h"

static te_cluster cluster;
static kl_etcd *cl;
static char *keydir, *emptydir;
static uint8_t ski[20];
static char endpoints[128];

static int setup(void **state)
{
    (void)state;
    te_start(&cluster, 1, false);
    cl = ec_client(&cluster, 3000);
    snprintf(endpoints, sizeof endpoints, "--fleet-etcd-endpoints=%s",
             cluster.m[0].url);
    keydir = rs_keydir("fleetd-keys", "ecdsa-p256", ski);
    emptydir = tp_tempdir("fleetd-empty");
    fc_publish(cl, "web", ski);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tp_rmtree(keydir);
    tp_rmtree(emptydir);
    kl_etcd_free(cl);
    te_stop(&cluster);
    return 0;
}

/* A keylessd in the fleet: name, role, key sets (NULL: none), one more
 * flag (NULL: none). */
static void start(td_daemon *d, const char *name, const char *kdir,
                  const char *role, const char *sets, const char *more)
{
    static char a_name[8][96], a_role[8][96], a_sets[8][96], a_cert[8][4400],
        a_key[8][4400];
    static int slot;
    int i = slot++ % 8;
    snprintf(a_name[i], sizeof a_name[i], "--fleet-name=%s", name);
    snprintf(a_role[i], sizeof a_role[i], "--fleet-role=%s", role);
    snprintf(a_sets[i], sizeof a_sets[i], "--fleet-key-sets=%s",
             sets ? sets : "");
    snprintf(a_cert[i], sizeof a_cert[i], "--router-cert=%s",
             tp_path("client.crt"));
    snprintf(a_key[i], sizeof a_key[i], "--router-key=%s",
             tp_path("client.key"));
    const char *extra[] = {endpoints,
                           "--fleet-prefix=" FC_PREFIX,
                           "--fleet-region=us",
                           "--fleet-lease-ttl=2",
                           a_name[i],
                           a_role[i],
                           a_sets[i],
                           a_cert[i],
                           a_key[i],
                           "--router-ping-interval=100ms",
                           "--router-timeout-floor=400ms",
                           more,
                           NULL};
    rs_start(d, name, kdir, NULL, extra);
}

/* The health in name's record (the test fails when it is absent). */
static kl_fleet_health health_of(const char *name)
{
    char key[128], err[512] = "";
    assert_int_equal(kl_fleet_key_server(FC_PREFIX, name, key, sizeof key),
                     KL_OK);
    kl_etcd_kv kv;
    ec_ok(kl_etcd_get(cl, key, strlen(key), &kv, NULL, err, sizeof err), err);
    kl_fleet_server s;
    ec_ok(kl_fleet_server_parse(kv.value, kv.value_len, &s, err, sizeof err),
          err);
    kl_etcd_kv_clear(&kv);
    kl_fleet_health h = s.health;
    kl_fleet_server_clear(&s);
    return h;
}

static bool present(const char *name)
{
    char key[128], err[512] = "";
    assert_int_equal(kl_fleet_key_server(FC_PREFIX, name, key, sizeof key),
                     KL_OK);
    kl_etcd_kv kv;
    kl_status st =
        kl_etcd_get(cl, key, strlen(key), &kv, NULL, err, sizeof err);
    if (st == KL_OK)
        kl_etcd_kv_clear(&kv);
    else if (st != KL_E_NOT_FOUND)
        fail_msg("etcd: %s", err);
    return st == KL_OK;
}

static void wait_present(const char *name, bool want, int ms)
{
    double until = td_now_ms() + ms;
    while (present(name) != want && td_now_ms() < until)
        ec_sleep_ms(10);
    if (present(name) != want)
        fail_msg("record %s still %s after %d ms", name,
                 want ? "absent" : "present", ms);
}

/* One signature through d; true when it came back and verifies. */
static bool sign_ok(kl_client *c)
{
    kl_request_spec s = rs_sign_spec(ski);
    kl_client_result r;
    if (kl_client_call(c, &s, 3000, &r) != KL_OK)
        return false;
    bool ok = r.opcode == KL_OP_RESPONSE &&
              rs_verify("ecdsa-p256", r.payload, r.payload_len);
    kl_client_result_free(&r);
    return ok;
}

typedef struct load {
    td_daemon *a;
    atomic_bool stop;
    unsigned done, failed;
    pthread_t th;
} load;

static void *load_main(void *arg)
{
    load *l = arg;
    kl_client *c = td_connect(l->a);
    while (!atomic_load(&l->stop)) {
        l->done++;
        l->failed += !sign_ok(c);
    }
    kl_client_close(c);
    return NULL;
}

/* The value of series name in A's /metrics (-1: absent). */
static double metric(uint16_t port, const char *name)
{
    char *body = NULL;
    assert_int_equal(tn_http_get(port, "/metrics", &body), 200);
    char needle[128];
    snprintf(needle, sizeof needle, "\n%s ", name);
    const char *at = strstr(body, needle);
    double v = at ? strtod(at + strlen(needle), NULL) : -1;
    free(body);
    return v;
}

static void test_join_death_stop(void **state)
{
    (void)state;
    td_daemon a, b, c;
    uint16_t mport = tn_free_port();
    char a_metrics[64];
    snprintf(a_metrics, sizeof a_metrics, "--metrics-port=%u", mport);
    start(&a, "fa", emptydir, "router", NULL, a_metrics);
    wait_present("fa", true, 3000);
    kl_client *ca = td_connect(&a);
    assert_false(sign_ok(ca)); /* nobody serves the key yet */

    /* join */
    start(&b, "fb", keydir, "keys", "web", NULL);
    wait_present("fb", true, 3000);
    double t0 = td_now_ms(), joined = -1;
    while (td_now_ms() - t0 < 5000) {
        if (sign_ok(ca)) {
            joined = td_now_ms() - t0;
            break;
        }
        ec_sleep_ms(5);
    }
    fprintf(stderr,
            "join: signed through the router %.0f ms after fb "
            "registered\n",
            joined);
    assert_true(joined >= 0 && joined <= 2000);

    /* SIGHUP: nothing to re-read, the directory's table stays */
    td_signal(&a, SIGHUP);
    rs_wait_log(&a, "reloaded:", 1, 5000);
    assert_int_equal(rs_log_count(&a, "routing table re-read"), 0);
    assert_true(sign_ok(ca));

    /* death under load */
    start(&c, "fc", keydir, "keys", "web", NULL);
    wait_present("fc", true, 3000);
    rs_wait_log(&a, "router: routing table installed: 2 servers", 1, 3000);
    load l = {.a = &a};
    assert_int_equal(pthread_create(&l.th, NULL, load_main, &l), 0);
    ec_sleep_ms(500);
    td_signal(&b, SIGKILL);
    t0 = td_now_ms();
    rs_wait_log(&a, "router: remote fb removed", 1, FC_TTL_S * 1000 + 3000);
    double gone = td_now_ms() - t0;
    ec_sleep_ms(300);
    atomic_store(&l.stop, true);
    pthread_join(l.th, NULL);
    fprintf(stderr,
            "death: fb dropped %.0f ms after SIGKILL (TTL %d s); %u "
            "requests, %u failed\n",
            gone, FC_TTL_S, l.done, l.failed);
    assert_true(gone <= FC_TTL_S * 1000 + 1000);
    assert_true(l.done > 50);
    assert_int_equal(l.failed, 0);
    assert_true(sign_ok(ca));
    (void)td_wait(&b, 2000);
    assert_int_equal(metric(mport, "keylessd_fleet_directory_in_sync"), 1);
    assert_int_equal(metric(mport, "keylessd_fleet_directory_sync_age_seconds"),
                     0);
    assert_int_equal(metric(mport, "keylessd_fleet_directory_servers"), 2);
    assert_int_equal(metric(mport, "keylessd_fleet_registered"), 1);

    /* etcd down for 4 s under load: every request answered (the table
     * kept), the sync age grows; back: in sync, records renewed */
    load l2 = {.a = &a};
    assert_int_equal(pthread_create(&l2.th, NULL, load_main, &l2), 0);
    te_kill(&cluster, 0, SIGKILL);
    ec_sleep_ms(4000);
    double age = metric(mport, "keylessd_fleet_directory_sync_age_seconds");
    assert_int_equal(metric(mport, "keylessd_fleet_directory_in_sync"), 0);
    te_restart(&cluster, 0);
    kl_etcd_free(cl);
    cl = ec_client(&cluster, 3000);
    double until = td_now_ms() + 8000;
    while (metric(mport, "keylessd_fleet_directory_in_sync") != 1 &&
           td_now_ms() < until)
        ec_sleep_ms(50);
    atomic_store(&l2.stop, true);
    pthread_join(l2.th, NULL);
    fprintf(stderr,
            "outage: sync age %.1f s after 4 s; %u requests, %u failed\n", age,
            l2.done, l2.failed);
    assert_true(age >= 3);
    assert_int_equal(metric(mport, "keylessd_fleet_directory_in_sync"), 1);
    assert_true(l2.done > 50);
    assert_int_equal(l2.failed, 0);
    wait_present("fa", true, 3000);
    wait_present("fc", true, 3000);

    /* the health summary: a keys server without a key is degraded */
    td_daemon e;
    start(&e, "fe", emptydir, "keys", "web", NULL);
    wait_present("fe", true, 3000);
    double hu = td_now_ms() + 3000;
    while (health_of("fe") != KL_FLEET_HEALTH_DEGRADED && td_now_ms() < hu)
        ec_sleep_ms(20);
    assert_int_equal(health_of("fe"), KL_FLEET_HEALTH_DEGRADED);
    assert_int_equal(health_of("fc"), KL_FLEET_HEALTH_OK);
    assert_int_equal(td_stop(&e, 0), 0);

    /* remote connections only where the role says so */
    assert_int_equal(rs_log_count(&a, "routing from the directory"), 1);
    assert_int_equal(rs_log_count(&c, "routing from the directory"), 0);

    /* a clean stop: the record says draining while the server still
     * serves for fleet_drain_delay (1 s by default), then the record goes
     * at once (the lease revoked) */
    double ts = td_now_ms();
    td_signal(&c, SIGTERM);
    while (health_of("fc") != KL_FLEET_HEALTH_DRAINING &&
           td_now_ms() - ts < 700)
        ec_sleep_ms(10);
    assert_int_equal(health_of("fc"), KL_FLEET_HEALTH_DRAINING);
    assert_true(sign_ok(ca)); /* fc, the only server of the key, answers */
    assert_int_equal(td_wait(&c, 10000), 0);
    double drained = td_now_ms() - ts;
    fprintf(stderr, "drain: fc exited %.0f ms after SIGTERM\n", drained);
    assert_true(drained >= 1000);
    assert_false(present("fc"));
    kl_client_close(ca);
    /* a second SIGTERM cuts the drain delay short */
    td_signal(&a, SIGTERM);
    ec_sleep_ms(100);
    ts = td_now_ms();
    assert_int_equal(td_stop(&a, 0), 0);
    fprintf(stderr, "drain: fa exited %.0f ms after its second SIGTERM\n",
            td_now_ms() - ts);
    assert_true(td_now_ms() - ts < 800);
    assert_false(present("fa"));
}

static void test_check(void **state)
{
    (void)state;
    static char cert[4400], key[4400], ca[4400], kd[4400];
    snprintf(cert, sizeof cert, "--auth-cert=%s", tp_path("server.crt"));
    snprintf(key, sizeof key, "--auth-key=%s", tp_path("server.key"));
    snprintf(ca, sizeof ca, "--cloudflare-ca-cert=%s", tp_path("ca.crt"));
    snprintf(kd, sizeof kd, "--private-key-dirs=%s", keydir);
    char bin[1100];
    snprintf(bin, sizeof bin, "%s/keylessd", tu_bin_dir());
    const char *argv[] = {bin,
                          "--check",
                          cert,
                          key,
                          ca,
                          kd,
                          "--metrics-port=0",
                          "--listen-address=0.0.0.0",
                          "--fleet-etcd-endpoints=ftp://x",
                          "--fleet-prefix=/nope",
                          "--fleet-name=a",
                          "--fleet-region=e u",
                          "--fleet-role=king",
                          NULL};
    char *out = NULL;
    int rc = td_run(argv, &out, 20000);
    fprintf(stderr, "%s", out);
    assert_int_not_equal(rc, 0);
    ec_expect(out, "fleet_etcd_endpoints:");
    ec_expect(out, "fleet_prefix: \"/nope\" must end with '/'");
    /* the record's first problem: the wildcard listen address */
    ec_expect(out, "fleet_advertise_host: unset while listen_address");
    free(out);
    const char *argv2[] = {bin,
                           "--check",
                           cert,
                           key,
                           ca,
                           kd,
                           "--metrics-port=0",
                           endpoints,
                           "--fleet-name=a",
                           "--fleet-advertise-host=127.0.0.1",
                           "--fleet-region=e u",
                           NULL};
    rc = td_run(argv2, &out, 20000);
    fprintf(stderr, "%s", out);
    assert_int_not_equal(rc, 0);
    ec_expect(out, "fleet_region:");
    free(out);
    const char *argv3[] = {bin,
                           "--check",
                           cert,
                           key,
                           ca,
                           kd,
                           "--metrics-port=0",
                           endpoints,
                           "--fleet-name=a",
                           "--fleet-advertise-host=127.0.0.1",
                           "--fleet-region=eu",
                           "--fleet-role=king",
                           NULL};
    rc = td_run(argv3, &out, 20000);
    assert_int_not_equal(rc, 0);
    ec_expect(out, "fleet_role: \"king\" is not a role");
    free(out);
    /* a router's client certificate is checked before any remote is
     * known: auth_cert (serverAuth only) would be refused by them */
    const char *argv4[] = {bin,
                           "--check",
                           cert,
                           key,
                           ca,
                           kd,
                           "--metrics-port=0",
                           endpoints,
                           "--fleet-name=a",
                           "--fleet-advertise-host=127.0.0.1",
                           "--fleet-region=eu",
                           "--fleet-role=router",
                           NULL};
    rc = td_run(argv4, &out, 20000);
    fprintf(stderr, "%s", out);
    assert_int_not_equal(rc, 0);
    ec_expect(out, "clientAuth");
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_join_death_stop),
        cmocka_unit_test(test_check),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
