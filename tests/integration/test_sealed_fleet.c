/* SPDX-License-Identifier: Apache-2.0 */
/* Sealed keys held elsewhere, routed from the fleet directory
 * (docs/FLEET.md "Sealed keys"): a real etcd and real keylessd on
 * 127.0.0.1, configured by options only (no routing table). Node A
 * (eu-west) and node B (us-east) are "keys" servers with sealing keys
 * made by keyless-seal keygen; node C (ap-south) is in the fleet file
 * only. Both servers hold an ECDSA key sealed to region=eu-west and an RSA
 * key sealed to region=ap-south.
 *
 * - Each record carries its sealing key (the raw public key keygen made)
 *   and sealing attributes ("sealing").
 * - B, a keys server, routes its sealed keys held elsewhere from the
 *   directory's records: B's table lists A (on demand), and a signature
 *   asked of B for the ECDSA key is made by A (keyless-cli verifies it
 *   with the original public key, through OpenSSL).
 * - The RSA key: no record's attributes satisfy region=ap-south: `key
 *   not found`, counted in keylessd_sealed_keys_unroutable_total.
 * - keyless-seal seal --etcd takes its recipients from the directory (the
 *   records' keys and attributes, no fleet file): a P-384 key sealed so
 *   to region=eu-west names A alone, A opens it after a reload, and B
 *   forwards it to A.
 * - A dies (SIGKILL); its lease expires, B's table drops it, and the ECDSA
 *   key is answered `key not found` and counted too. */
#include "etcd_common.h"
#include "test_router_server_common.h"
#include "sealed_common.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <openssl/pem.h>

#include "fleet/record.h"
#include "net.h"
#include "seal/hpke.h"
#include "tool.h"

#define PREFIX "/sealed-fleet/"

static te_cluster cluster;
static kl_etcd *cl;
static td_daemon a, b;
static char *dir;
static char seal[1100], pub_ec[1100], pub_rsa[1100], pub_p384[1100],
    endpoints[160];
static char server_b[64];
static uint16_t mport_b;
static tt_tool cli;

static const char *at(const char *rel)
{
    static char buf[6][1200];
    static int i;
    i = (i + 1) % 6;
    snprintf(buf[i], sizeof buf[i], "%s/%s", dir, rel);
    return buf[i];
}

static void seal_run(const char *const *args)
{
    const char *argv[16] = {seal};
    size_t n = 1;
    for (; args[n - 1] && n < 15; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    char *out = NULL;
    int st = td_run(argv, &out, 60000);
    if (st != 0)
        fail_msg("keyless-seal %s: exit %d:\n%s", args[0], st, out);
    free(out);
}

static const char *const nodes[3][3] = {{"a", "eu-west", "x25519"},
                                        {"b", "us-east", "p256"},
                                        {"c", "ap-south", "x25519"}};

static void make_fleet(void)
{
    FILE *fleet = fopen(at("fleet.yaml"), "w");
    assert_non_null(fleet);
    fputs("nodes:\n", fleet);
    for (size_t i = 0; i < 3; i++) {
        char key[32], pub[32];
        snprintf(key, sizeof key, "%s.key", nodes[i][0]);
        snprintf(pub, sizeof pub, "%s.pub", nodes[i][0]);
        const char *argv[] = {seal,    "keygen",    "--out", at(key),
                              "--kem", nodes[i][2], NULL};
        char *out = NULL;
        assert_int_equal(td_run(argv, &out, 30000), 0);
        char *pb = strstr(out, "-----BEGIN PUBLIC KEY-----");
        char *pe = pb ? strstr(pb, "-----END PUBLIC KEY-----") : NULL;
        assert_non_null(pe);
        *pe = 0;
        FILE *pf = fopen(at(pub), "w");
        fprintf(pf, "%s-----END PUBLIC KEY-----\n", pb);
        fclose(pf);
        fprintf(fleet,
                "  - name: %s\n    attributes: {region: %s}\n"
                "    sealing_key: |\n",
                nodes[i][0], nodes[i][1]);
        for (char *line = strtok(pb, "\n"); line; line = strtok(NULL, "\n"))
            fprintf(fleet, "      %s\n", line);
        fputs("      -----END PUBLIC KEY-----\n", fleet);
        free(out);
    }
    fclose(fleet);
}

static void write_pub(EVP_PKEY *k, const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_PUBKEY(f, k), 1);
    fclose(f);
}

static void start_node(td_daemon *d, size_t i, uint16_t mport)
{
    static char f[2][8][1200];
    char rel[32];
    snprintf(f[i][0], sizeof f[i][0], "--fleet-name=%s", nodes[i][0]);
    snprintf(f[i][1], sizeof f[i][1], "--fleet-region=%s", nodes[i][1]);
    snprintf(rel, sizeof rel, "%s.key", nodes[i][0]);
    snprintf(f[i][2], sizeof f[i][2], "--sealing-key=%s", at(rel));
    snprintf(f[i][3], sizeof f[i][3], "--sealing-attributes=region=%s",
             nodes[i][1]);
    snprintf(f[i][4], sizeof f[i][4], "--router-cert=%s",
             tp_path("client.crt"));
    snprintf(f[i][5], sizeof f[i][5], "--router-key=%s", tp_path("client.key"));
    snprintf(f[i][6], sizeof f[i][6], "--metrics-port=%u", mport);
    snprintf(rel, sizeof rel, "keys-%s", nodes[i][0]);
    const char *extra[] = {endpoints,
                           "--fleet-prefix=" PREFIX,
                           "--fleet-lease-ttl=2",
                           "--fleet-role=keys",
                           f[i][0],
                           f[i][1],
                           f[i][2],
                           f[i][3],
                           f[i][4],
                           f[i][5],
                           "--metrics-address=127.0.0.1",
                           f[i][6],
                           "--watch-key-dirs=false",
                           NULL};
    rs_start(d, nodes[i][0], at(rel), NULL, extra);
}

/* Whether something listens on 127.0.0.1:port (B's metrics endpoint
 * starts after the key server's port, which is all td_start waits for). */
static bool port_open(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static int setup(void **state)
{
    (void)state;
    te_start(&cluster, 1, false);
    cl = ec_client(&cluster, 3000);
    snprintf(endpoints, sizeof endpoints, "--fleet-etcd-endpoints=%s",
             cluster.m[0].url);
    dir = tp_tempdir("sealfleet");
    snprintf(seal, sizeof seal, "%s/keyless-seal", tu_bin_dir());
    make_fleet();
    EVP_PKEY *ec = tp_genkey(dir, "ec.pem", "EC", "P-256", 0);
    EVP_PKEY *rsa = tp_genkey(dir, "rsa.pem", "RSA", NULL, 2048);
    tt_keep(pub_ec, at("ec.pub.pem"));
    tt_keep(pub_rsa, at("rsa.pub.pem"));
    write_pub(ec, pub_ec);
    write_pub(rsa, pub_rsa);
    EVP_PKEY_free(ec);
    EVP_PKEY_free(rsa);
    for (size_t i = 0; i < 2; i++) {
        char d[32], out_ec[64], out_rsa[64];
        snprintf(d, sizeof d, "keys-%s", nodes[i][0]);
        assert_int_equal(mkdir(at(d), 0700), 0);
        snprintf(out_ec, sizeof out_ec, "%s/ec.sealed", d);
        snprintf(out_rsa, sizeof out_rsa, "%s/rsa.sealed", d);
        seal_run((const char *[]){"seal", "--policy", "region=eu-west",
                                  "--fleet", at("fleet.yaml"), at("ec.pem"),
                                  "-o", at(out_ec), NULL});
        seal_run((const char *[]){"seal", "--policy", "region=ap-south",
                                  "--fleet", at("fleet.yaml"), at("rsa.pem"),
                                  "-o", at(out_rsa), NULL});
    }
    start_node(&a, 0, tn_free_port());
    mport_b = tn_free_port();
    start_node(&b, 1, mport_b);
    snprintf(server_b, sizeof server_b, "127.0.0.1:%u", b.port);
    tt_tool_init(&cli, "keyless-cli", "--");
    /* td_start waits for the key server's port only: B's metrics too */
    for (int i = 0; i < 500; i++) {
        if (port_open(mport_b))
            break;
        usleep(20000);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int sb = td_stop(&b, 0);
    if (a.pid)
        (void)td_stop(&a, 0);
    tp_rmtree(dir);
    kl_etcd_free(cl);
    te_stop(&cluster);
    return sb == 0 ? 0 : -1;
}

/* B is asked; A holds the key */
static const td_daemon *const logs[] = {&b, &a, NULL};

static void expect_signs(const char *pub, const char *what)
{
    sc_expect_signs(&cli, server_b, pub, what, logs);
}

static void expect_not_found(const char *pub)
{
    sc_expect_not_found(&cli, server_b, pub, logs);
}

static double metric(const char *series)
{
    return sc_metric(mport_b, series);
}

/* The record of node i as etcd holds it. */
static void record(size_t i, kl_fleet_server *s)
{
    char key[128], err[512] = "";
    assert_int_equal(kl_fleet_key_server(PREFIX, nodes[i][0], key, sizeof key),
                     KL_OK);
    kl_etcd_kv kv;
    for (int t = 0; t < 250; t++) {
        kl_status st =
            kl_etcd_get(cl, key, strlen(key), &kv, NULL, err, sizeof err);
        if (st == KL_OK)
            break;
        if (st != KL_E_NOT_FOUND || t == 249)
            fail_msg("record %s: %s", nodes[i][0], err);
        ec_sleep_ms(20);
    }
    ec_ok(kl_fleet_server_parse(kv.value, kv.value_len, s, err, sizeof err),
          err);
    kl_etcd_kv_clear(&kv);
}

static void test_records(void **state)
{
    (void)state;
    for (size_t i = 0; i < 2; i++) {
        kl_fleet_server s;
        record(i, &s);
        /* the public key keygen printed, as the record carries it */
        char rel[32];
        snprintf(rel, sizeof rel, "%s.pub", nodes[i][0]);
        FILE *f = fopen(at(rel), "r");
        EVP_PKEY *pub = PEM_read_PUBKEY(f, NULL, NULL, NULL);
        fclose(f);
        assert_non_null(pub);
        uint16_t kem = i == 1 ? KL_HPKE_KEM_P256 : KL_HPKE_KEM_X25519;
        uint8_t pk[KL_HPKE_MAX_ENC];
        size_t n = 0;
        assert_int_equal(kl_hpke_public(kem, pub, pk, sizeof pk, &n), KL_OK);
        EVP_PKEY_free(pub);
        assert_int_equal(s.seal_kem, kem);
        assert_int_equal(s.seal_pk_len, n);
        assert_memory_equal(s.seal_pk, pk, n);
        assert_int_equal(s.n_seal_attrs, 1);
        assert_string_equal(s.seal_attrs[0].name, "region");
        assert_string_equal(s.seal_attrs[0].value, nodes[i][1]);
        kl_fleet_server_clear(&s);
    }
}

static void test_routed_from_directory(void **state)
{
    (void)state;
    /* B's table: A only (itself left out), from the records */
    rs_wait_log(&b, "routing table installed: 1 servers, 0 keys", 1, 10000);
    char *log = td_read_log(&b);
    assert_non_null(strstr(log, "routing its sealed keys held elsewhere"));
    free(log);
    /* on demand: no connection to A before a key needs it */
    fp_sleep_ms(300);
    assert_int_equal(rs_log_count(&b, "remote a measured"), 0);
    expect_signs(pub_ec, "ECDSA-P-256 signature");
    expect_signs(pub_ec, "ECDSA-P-256 signature");
    assert_int_equal(
        metric("keylessd_route_requests_total{region=\"eu-west\",route=\"a\"}"),
        2);
    assert_int_equal(metric("keylessd_sealed_keys_unroutable_total"), 0);
    expect_not_found(pub_rsa);
    assert_int_equal(metric("keylessd_sealed_keys_unroutable_total"), 1);
}

static bool log_has(const td_daemon *d, const char *needle)
{
    return rs_log_count(d, needle) > 0;
}

static void test_seal_from_directory(void **state)
{
    (void)state;
    EVP_PKEY *k = tp_genkey(dir, "p384.pem", "EC", "P-384", 0);
    tt_keep(pub_p384, at("p384.pub.pem"));
    write_pub(k, pub_p384);
    EVP_PKEY_free(k);
    const char *argv[] = {seal,
                          "seal",
                          "--policy",
                          "region=eu-west",
                          "--etcd",
                          cluster.m[0].url,
                          "--prefix",
                          PREFIX,
                          at("p384.pem"),
                          "-o",
                          at("p384.sealed"),
                          NULL};
    char *out = NULL;
    int st = td_run(argv, &out, 60000);
    if (st != 0)
        fail_msg("keyless-seal seal --etcd: exit %d:\n%s", st, out);
    assert_non_null(strstr(out, "2 server(s) with a sealing key"));
    assert_non_null(strstr(out, "recipient node   a\n"));
    assert_null(strstr(out, "recipient node   b"));
    free(out);
    /* a policy no record satisfies is refused */
    const char *none[] = {seal,          "seal",         "--policy",
                          "region=mars", "--etcd",       cluster.m[0].url,
                          "--prefix",    PREFIX,         at("p384.pem"),
                          "-o",          at("x.sealed"), NULL};
    st = td_run(none, &out, 60000);
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, "selects no server of the fleet directory"));
    free(out);
    /* both servers get the file; A opens it, B holds it elsewhere */
    for (size_t i = 0; i < 2; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "keys-%s/p384.sealed", nodes[i][0]);
        size_t len = 0;
        char *bytes = tu_read_file(at("p384.sealed"), &len);
        FILE *f = fopen(at(rel), "wb");
        assert_non_null(f);
        fwrite(bytes, 1, len, f);
        fclose(f);
        free(bytes);
    }
    td_signal(&a, SIGHUP);
    td_signal(&b, SIGHUP);
    rs_wait_log(&a, "reloaded: 2 keys", 1, 10000);
    rs_wait_log(&b, "reloaded: 0 keys", 1, 10000);
    /* three keys held elsewhere under two policies, prepared at reload */
    rs_wait_log(&b, "sealed keys held elsewhere: 3 key(s), 2 policies", 1,
                5000);
    assert_true(log_has(&b, "policy: region=eu-west)"));
    expect_signs(pub_p384, "ECDSA-P-384 signature");
}

static void test_remote_gone(void **state)
{
    (void)state;
    double t0 = td_now_ms();
    td_signal(&a, SIGKILL);
    (void)td_wait(&a, 5000);
    a.pid = 0;
    /* the lease (2 s) expires, the directory drops A (the first such line
     * is the router's empty table at start) */
    rs_wait_log(&b, "routing table installed: 0 servers, 0 keys", 2, 10000);
    print_message("A dropped from B's table %.0f ms after the kill\n",
                  td_now_ms() - t0);
    double before = metric("keylessd_sealed_keys_unroutable_total");
    expect_not_found(pub_ec);
    assert_int_equal(metric("keylessd_sealed_keys_unroutable_total") - before,
                     1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_records),
        cmocka_unit_test(test_routed_from_directory),
        cmocka_unit_test(test_seal_from_directory),
        cmocka_unit_test(test_remote_gone),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
