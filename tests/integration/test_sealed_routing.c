/* SPDX-License-Identifier: Apache-2.0 */
/* Sealed keys held elsewhere, routed (docs/SEALING.md "keylessd and
 * sealed keys", docs/ROUTING.md "Sealed keys"), with real keylessd
 * processes on 127.0.0.1 and files made by the real keyless-seal: node A
 * in eu-west, node B in us-east, node C in ap-south (a sealing key in the
 * fleet file, no server running). Both servers hold the same two sealed
 * files: an ECDSA key sealed to region=eu-west (A opens it, B holds it
 * elsewhere) and an RSA key sealed to region=ap-south (both hold it
 * elsewhere). B has a routing table naming A (region eu-west; no SKI).
 *
 * - A signature asked of B for the ECDSA key is made by A (keyless-cli
 *   verifies it with the original public key, through OpenSSL) and B's
 *   route to A counts the request.
 * - The RSA key: no remote of B's table satisfies region=ap-south, so B
 *   answers `key not found` and keylessd_sealed_keys_unroutable_total
 *   counts it; nothing is sent to A.
 * - The table changed (A's attributes say tier=edge, region=us-west) and
 *   re-read at SIGHUP: the ECDSA key has no eligible remote any more
 *   (`key not found`, counted); given back eu-west, it signs again. */
#include "../tools/rtharness.h"
#include "daemon.h"
#include "sealed_common.h"
#include "net.h"
#include "pki.h"
#include "testutil.h"
#include "tool.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <openssl/pem.h>

static td_daemon a, b;
static char *dir;
static char seal[1100], pub_ec[1100], pub_rsa[1100], table[1100];
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

static char *seal_run(const char *const *args)
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
    return out;
}

static void write_pub(EVP_PKEY *k, const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_PUBKEY(f, k), 1);
    fclose(f);
}

static const char *const nodes[3][3] = {{"a", "eu-west", "x25519"},
                                        {"b", "us-east", "p256"},
                                        {"c", "ap-south", "x25519"}};

/* Each node's sealing key (keygen), and the fleet file listing them. */
static void make_fleet(void)
{
    FILE *fleet = fopen(at("fleet.yaml"), "w");
    assert_non_null(fleet);
    fputs("nodes:\n", fleet);
    for (size_t i = 0; i < 3; i++) {
        char key[32];
        snprintf(key, sizeof key, "%s.key", nodes[i][0]);
        const char *argv[] = {seal,    "keygen",    "--out", at(key),
                              "--kem", nodes[i][2], NULL};
        char *out = NULL;
        assert_int_equal(td_run(argv, &out, 30000), 0);
        char *pb = strstr(out, "-----BEGIN PUBLIC KEY-----");
        char *pe = pb ? strstr(pb, "-----END PUBLIC KEY-----") : NULL;
        assert_non_null(pe);
        fprintf(fleet,
                "  - name: %s\n    attributes: {region: %s}\n"
                "    sealing_key: |\n",
                nodes[i][0], nodes[i][1]);
        *pe = 0;
        for (char *line = strtok(pb, "\n"); line; line = strtok(NULL, "\n"))
            fprintf(fleet, "      %s\n", line);
        fputs("      -----END PUBLIC KEY-----\n", fleet);
        free(out);
    }
    fclose(fleet);
}

/* B's routing table: A, with these extra lines under its entry. */
static void write_table(const char *region, const char *attrs)
{
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", table);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fprintf(f,
            "servers:\n  - name: dc-a\n    address: 127.0.0.1:%u\n"
            "    region: %s\n    serves: []\n%s",
            a.port, region, attrs);
    fclose(f);
    assert_int_equal(rename(tmp, table), 0);
}

static void start_node(td_daemon *d, const char *name, const char *region,
                       const char *keydir, bool router, uint16_t mport)
{
    static char f_key[2][1200], f_attrs[2][200], f_table[2][1200],
        f_cert[2][1200], f_rkey[2][1200], f_mport[2][64];
    int i = router ? 1 : 0;
    char rel[32];
    snprintf(rel, sizeof rel, "%s.key", name);
    snprintf(f_key[i], sizeof f_key[i], "--sealing-key=%s", at(rel));
    snprintf(f_attrs[i], sizeof f_attrs[i], "--sealing-attributes=region=%s",
             region);
    snprintf(f_mport[i], sizeof f_mport[i], "--metrics-port=%u", mport);
    const char *flags[16] = {f_key[i], f_attrs[i], "--watch-key-dirs=false",
                             "--metrics-address=127.0.0.1", f_mport[i]};
    size_t n = 5;
    if (router) {
        snprintf(f_table[i], sizeof f_table[i], "--router-table=%s", table);
        snprintf(f_cert[i], sizeof f_cert[i], "--router-cert=%s",
                 tp_path("client.crt"));
        snprintf(f_rkey[i], sizeof f_rkey[i], "--router-key=%s",
                 tp_path("client.key"));
        flags[n++] = f_table[i];
        flags[n++] = f_cert[i];
        flags[n++] = f_rkey[i];
        flags[n++] = "--router-reload-poll=0s"; /* SIGHUP only */
    }
    flags[n] = NULL;
    td_opts o = {.name = name, .key_dirs = keydir, .extra = flags};
    td_start(d, &o);
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

/* B's metrics endpoint answers (it starts after the key server's port). */
static void wait_metrics(void)
{
    for (int i = 0; i < 500; i++) {
        if (port_open(mport_b))
            return;
        usleep(20000);
    }
    td_dump_log(&b);
    fail_msg("B's metrics endpoint does not answer");
}

static int setup(void **state)
{
    (void)state;
    dir = tp_tempdir("sealroute");
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
    free(seal_run((const char *[]){"seal", "--policy", "region=eu-west",
                                   "--fleet", at("fleet.yaml"), at("ec.pem"),
                                   "-o", at("ec.sealed"), NULL}));
    free(seal_run((const char *[]){"seal", "--policy", "region=ap-south",
                                   "--fleet", at("fleet.yaml"), at("rsa.pem"),
                                   "-o", at("rsa.sealed"), NULL}));
    /* the same two files in both servers' key directories */
    for (size_t i = 0; i < 2; i++) {
        char d[32], f[64];
        snprintf(d, sizeof d, "keys-%s", nodes[i][0]);
        assert_int_equal(mkdir(at(d), 0700), 0);
        for (size_t k = 0; k < 2; k++) {
            const char *name = k ? "rsa.sealed" : "ec.sealed";
            snprintf(f, sizeof f, "%s/%s", d, name);
            size_t len = 0;
            char *bytes = tu_read_file(at(name), &len);
            FILE *o = fopen(at(f), "wb");
            assert_non_null(o);
            fwrite(bytes, 1, len, o);
            fclose(o);
            free(bytes);
        }
    }
    start_node(&a, "a", "eu-west", at("keys-a"), false, tn_free_port());
    tt_keep(table, at("routes.yaml"));
    write_table("eu-west", "");
    mport_b = tn_free_port();
    start_node(&b, "b", "us-east", at("keys-b"), true, mport_b);
    snprintf(server_b, sizeof server_b, "127.0.0.1:%u", b.port);
    tt_tool_init(&cli, "keyless-cli", "--");
    wait_metrics(); /* td_start waits for the key server's port only */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int sb = td_stop(&b, 0), sa = td_stop(&a, 0);
    tp_rmtree(dir);
    return sa == 0 && sb == 0 ? 0 : -1;
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

/* A series' value on B's /metrics (the whole line's name and labels). */
static double metric(const char *series)
{
    return sc_metric(mport_b, series);
}

static bool log_has(const td_daemon *d, const char *needle)
{
    char *log = td_read_log(d);
    bool yes = strstr(log, needle) != NULL;
    free(log);
    return yes;
}

#define ROUTE "{region=\"eu-west\",route=\"dc-a\"}"

static void test_routed_to_its_region(void **state)
{
    (void)state;
    /* both hold the files; only A opened the ECDSA key */
    assert_true(log_has(&b, "held elsewhere (not wrapped to this server; "
                            "policy: region=eu-west)"));
    assert_false(log_has(&a, "policy: region=eu-west)"));
    /* their policies' remotes computed at start, not at a request (logged
     * once B serves: wait for it) */
    for (int i = 0; i < 250 && !log_has(&b, "router: sealed keys held "
                                            "elsewhere: 2 key(s), 2 policies");
         i++)
        usleep(20000);
    assert_true(log_has(&b, "router: sealed keys held elsewhere: 2 key(s), "
                            "2 policies"));
    double before = metric("keylessd_route_requests_total" ROUTE);
    expect_signs(pub_ec, "ECDSA-P-256 signature");
    expect_signs(pub_ec, "ECDSA-P-256 signature");
    assert_int_equal(metric("keylessd_route_requests_total" ROUTE) - before, 2);
    assert_int_equal(metric("keylessd_sealed_keys_unroutable_total"), 0);
}

static void test_no_eligible_remote(void **state)
{
    (void)state;
    double before = metric("keylessd_route_requests_total" ROUTE);
    double unroutable = metric("keylessd_sealed_keys_unroutable_total");
    expect_not_found(pub_rsa);
    expect_not_found(pub_rsa);
    assert_int_equal(
        metric("keylessd_sealed_keys_unroutable_total") - unroutable, 2);
    /* nothing went to A */
    assert_int_equal(metric("keylessd_route_requests_total" ROUTE), before);
    /* the log line says why */
    assert_true(log_has(&b, "key not found due to no matching SKI/SNI/"
                            "ServerIP: forwarding: a sealed key held "
                            "elsewhere that no remote took (none satisfies "
                            "its policy"));
}

static void reload_table(unsigned gen)
{
    char want[64];
    snprintf(want, sizeof want, "routing table re-read (generation %u)", gen);
    td_signal(&b, SIGHUP);
    for (int i = 0; i < 500 && !log_has(&b, want); i++)
        usleep(20000);
    if (!log_has(&b, want)) {
        td_dump_log(&b);
        fail_msg("B did not re-read its table: %s", want);
    }
}

static void test_table_change(void **state)
{
    (void)state;
    /* A's attributes in the table now say another region: the policy
     * region=eu-west has no remote */
    write_table("eu-west", "    attributes: {region: us-west, tier: edge}\n");
    reload_table(2);
    double unroutable = metric("keylessd_sealed_keys_unroutable_total");
    expect_not_found(pub_ec);
    assert_int_equal(
        metric("keylessd_sealed_keys_unroutable_total") - unroutable, 1);
    /* given eu-west back (as an attribute, with another routing region),
     * the same remote takes it again */
    write_table("emea", "    attributes: {region: eu-west, tier: edge}\n");
    reload_table(3);
    expect_signs(pub_ec, "ECDSA-P-256 signature");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routed_to_its_region),
        cmocka_unit_test(test_no_eligible_remote),
        cmocka_unit_test(test_table_change),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
