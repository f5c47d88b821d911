/* SPDX-License-Identifier: Apache-2.0 */
/* keylessd serving sealed keys (docs/SEALING.md "keylessd and sealed
 * keys"), with files made by the real keyless-seal: two servers' sealing
 * keys in two regions; an ECDSA key sealed to eu-west is opened at start
 * and signs (keyless-cli verifies with the original public key); an RSA
 * key sealed to us-east is held elsewhere - logged, not an error, and,
 * with no router to forward it (test_sealed_routing.c has one), answered
 * `key not found` and counted in keylessd_sealed_keys_unroutable_total; a
 * tampered file
 * stops --check and is refused at a reload with a message naming it and
 * counted in keylessd_sealed_keys_refused_total, while the other keys
 * stay; a sealing key that cannot be opened at a reload keeps every key
 * loaded before; a re-wrap that revokes this server makes the key held
 * elsewhere at the next reload; a sealed file copied into a watched directory
 * is served without a signal. */
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

#include <openssl/pem.h>

static td_daemon d;
static char *dir;
static char keys[1100], server[64], seal[1100], pub_ec[1100], pub_rsa[1100];
static uint16_t mport;
static tt_tool cli;

/* dir/rel in one of four rotating buffers. */
static const char *at(const char *rel)
{
    static char buf[4][1200];
    static int i;
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof buf[i], "%s/%s", dir, rel);
    return buf[i];
}

/* Runs keyless-seal; fails the test unless it exits with want. */
static char *seal_run(int want, const char *const *args)
{
    const char *argv[16] = {seal};
    size_t n = 1;
    for (; args[n - 1] && n < 15; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    char *out = NULL;
    int st = td_run(argv, &out, 60000);
    if (st != want)
        fail_msg("keyless-seal %s: exit %d, not %d:\n%s", args[0], st, want,
                 out);
    return out;
}

static void write_pub(EVP_PKEY *k, const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_PUBKEY(f, k), 1);
    fclose(f);
}

/* The fleet: node "in" (X25519) in eu-west, "out" (P-256) in us-east;
 * revoked: "in" is revoked. */
static void write_fleet(const char *name, bool revoke_in)
{
    FILE *f = fopen(at(name), "w");
    assert_non_null(f);
    fputs("nodes:\n", f);
    static const char *const nodes[2][2] = {{"in", "eu-west"},
                                            {"out", "us-east"}};
    for (size_t i = 0; i < 2; i++) {
        char rel[32];
        snprintf(rel, sizeof rel, "%s.pub", nodes[i][0]);
        size_t len = 0;
        char *pem = tu_read_file(at(rel), &len);
        fprintf(f, "  - name: %s\n    attributes: {region: %s}\n", nodes[i][0],
                nodes[i][1]);
        fputs("    sealing_key: |\n", f);
        for (char *line = strtok(pem, "\n"); line; line = strtok(NULL, "\n"))
            fprintf(f, "      %s\n", line);
        if (i == 0 && revoke_in)
            fputs("    revoked: true\n", f);
        free(pem);
    }
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    dir = tp_tempdir("sealed");
    snprintf(keys, sizeof keys, "%s/keys", dir);
    assert_int_equal(mkdir(keys, 0700), 0);
    snprintf(seal, sizeof seal, "%s/keyless-seal", tu_bin_dir());
    /* the servers' sealing keys; keygen prints the public half */
    static const char *const kem[2][2] = {{"in", "x25519"}, {"out", "p256"}};
    for (size_t i = 0; i < 2; i++) {
        char key[32], pub[32];
        snprintf(key, sizeof key, "%s.key", kem[i][0]);
        snprintf(pub, sizeof pub, "%s.pub", kem[i][0]);
        const char *argv[] = {seal,    "keygen",  "--out", at(key),
                              "--kem", kem[i][1], NULL};
        char *out = NULL;
        /* stdout and stderr together: keep the PEM lines only */
        assert_int_equal(td_run(argv, &out, 30000), 0);
        char *b = strstr(out, "-----BEGIN PUBLIC KEY-----");
        char *e = b ? strstr(b, "-----END PUBLIC KEY-----") : NULL;
        assert_non_null(e);
        FILE *f = fopen(at(pub), "w");
        fprintf(f, "%.*s-----END PUBLIC KEY-----\n", (int)(e - b), b);
        fclose(f);
        free(out);
    }
    write_fleet("fleet.yaml", false);
    EVP_PKEY *ec = tp_genkey(dir, "ec.pem", "EC", "P-256", 0);
    EVP_PKEY *rsa = tp_genkey(dir, "rsa.pem", "RSA", NULL, 2048);
    tt_keep(pub_ec, at("ec.pub.pem"));
    tt_keep(pub_rsa, at("rsa.pub.pem"));
    write_pub(ec, pub_ec);
    write_pub(rsa, pub_rsa);
    EVP_PKEY_free(ec);
    EVP_PKEY_free(rsa);
    free(seal_run(0, (const char *[]){"seal", "--policy", "region=eu-west",
                                      "--fleet", at("fleet.yaml"), at("ec.pem"),
                                      "-o", at("keys/ec.sealed"), NULL}));
    free(
        seal_run(0, (const char *[]){"seal", "--policy", "region=us-east",
                                     "--fleet", at("fleet.yaml"), at("rsa.pem"),
                                     "-o", at("keys/rsa.sealed"), NULL}));
    mport = tn_free_port();
    static char a_key[1200], a_port[64];
    snprintf(a_key, sizeof a_key, "--sealing-key=%s", at("in.key"));
    snprintf(a_port, sizeof a_port, "--metrics-port=%u", mport);
    td_opts o = {.name = "sealed",
                 .key_dirs = keys,
                 .extra = (const char *[]){
                     a_key, "--sealing-attributes=region=eu-west, tier=edge",
                     "--watch-key-dirs=false", "--metrics-address=127.0.0.1",
                     a_port, NULL}};
    td_start(&d, &o);
    snprintf(server, sizeof server, "127.0.0.1:%u", d.port);
    tt_tool_init(&cli, "keyless-cli", "--");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int st = td_stop(&d, 0);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

static const td_daemon *const logs[] = {&d, NULL};

static void expect_signs(const char *pub, const char *what)
{
    sc_expect_signs(&cli, server, pub, what, logs);
}

static void expect_not_found(const char *pub)
{
    sc_expect_not_found(&cli, server, pub, logs);
}

static double metric(const char *series)
{
    return sc_metric(mport, series);
}

static bool log_has(const char *needle)
{
    char *log = td_read_log(&d);
    bool yes = strstr(log, needle) != NULL;
    free(log);
    return yes;
}

static void wait_log(const char *needle)
{
    for (int i = 0; i < 500 && !log_has(needle); i++)
        usleep(20000);
    if (!log_has(needle)) {
        td_dump_log(&d);
        fail_msg("not logged: %s", needle);
    }
}

static void test_opened_and_elsewhere(void **state)
{
    (void)state;
    expect_signs(pub_ec, "ECDSA-P-256 signature");
    expect_not_found(pub_rsa);
    assert_int_equal(metric("keylessd_sealed_keys_unroutable_total"), 1);
    assert_true(log_has("rsa.sealed: sealed key "));
    assert_true(log_has("held elsewhere (not wrapped to this server; "
                        "policy: region=us-east)"));
    assert_false(log_has("sealed key refused"));
    assert_int_equal(metric("keylessd_sealed_keys_refused_total"), 0);
}

static void tamper(const char *from, const char *to)
{
    size_t len = 0;
    char *b = tu_read_file(from, &len);
    b[len / 2] ^= 0x20;
    FILE *f = fopen(to, "wb");
    fwrite(b, 1, len, f);
    fclose(f);
    chmod(to, 0600);
    free(b);
}

static void test_tampered(void **state)
{
    (void)state;
    /* --check with the tampered file: a problem naming it */
    char *cdir = tp_tempdir("sealed-check");
    char bad[1200];
    snprintf(bad, sizeof bad, "%s/bad.sealed", cdir);
    tamper(at("keys/ec.sealed"), bad);
    char a_dirs[1200], a_key[1200];
    snprintf(a_dirs, sizeof a_dirs, "--private-key-dirs=%s", cdir);
    snprintf(a_key, sizeof a_key, "--sealing-key=%s", at("in.key"));
    char kd[1100];
    snprintf(kd, sizeof kd, "%s/keylessd", tu_bin_dir());
    const char *argv[] = {kd,
                          "--check",
                          a_dirs,
                          a_key,
                          "--auth-cert",
                          tp_path("server.crt"),
                          "--auth-key",
                          tp_path("server.key"),
                          "--cloudflare-ca-cert",
                          tp_path("ca.crt"),
                          "--metrics-port=0",
                          NULL};
    char *out = NULL;
    int st = td_run(argv, &out, 60000);
    if (st != 1 || !strstr(out, "bad.sealed: sealed key refused: "))
        fail_msg("keylessd --check: exit %d:\n%s", st, out);
    free(out);
    tp_rmtree(cdir);

    /* at a reload: refused, named, counted; the other keys stay */
    tamper(at("keys/ec.sealed"), at("keys/bad.sealed"));
    td_signal(&d, SIGHUP);
    wait_log("reloaded: ");
    assert_true(log_has("bad.sealed: sealed key refused: "));
    expect_signs(pub_ec, "ECDSA-P-256 signature");
    assert_int_equal(metric("keylessd_sealed_keys_refused_total"), 1);
    unlink(at("keys/bad.sealed"));
}

/* The sealing key unreadable at a reload (here: group- and world-readable,
 * which keylessd refuses): the reload is refused and every key loaded
 * before - the sealed one included - is still served, not dropped as if
 * every sealed file were held elsewhere. */
static void test_sealing_key_lost(void **state)
{
    (void)state;
    assert_int_equal(chmod(at("in.key"), 0644), 0);
    td_signal(&d, SIGHUP);
    wait_log("reload: sealing_key cannot be opened");
    assert_true(log_has("in.key is readable by"));
    expect_signs(pub_ec, "ECDSA-P-256 signature");
    assert_int_equal(chmod(at("in.key"), 0600), 0);
}

/* This server revoked in the fleet: a rewrap to eu-west is refused (no
 * server left there), and a file sealed to the fleet without it is held
 * elsewhere at the next reload - the key it served is gone. */
static void test_revoked(void **state)
{
    (void)state;
    write_fleet("fleet2.yaml", true);
    /* eu-west has no server left: sealing there is refused */
    char *out = seal_run(1, (const char *[]){"rewrap", "--fleet",
                                             at("fleet2.yaml"), "--key",
                                             at("in.key"), at("keys/ec.sealed"),
                                             "-o", at("ec2.sealed"), NULL});
    assert_non_null(strstr(out, "selects no server"));
    free(out);
    /* a policy that now names us-east: this server is not a recipient */
    free(seal_run(0, (const char *[]){
                         "seal", "--policy", "region=eu-west or region=us-east",
                         "--fleet", at("fleet2.yaml"), at("ec.pem"), "-o",
                         at("ec2.sealed"), NULL}));
    assert_int_equal(rename(at("ec2.sealed"), at("keys/ec.sealed")), 0);
    td_signal(&d, SIGHUP);
    wait_log("reloaded: 0 keys");
    expect_not_found(pub_ec);
    assert_true(log_has("ec.sealed: sealed key "));
}

/* With the key directory watched, a sealed file copied in is opened and
 * served without a signal (the watcher's reload). Runs last: it re-seals
 * ec.pem to this server for a second daemon. */
static void test_watched(void **state)
{
    (void)state;
    char *wdir = tp_tempdir("sealed-watch");
    static char a_key[1200];
    snprintf(a_key, sizeof a_key, "--sealing-key=%s", at("in.key"));
    td_daemon w;
    td_opts o = {.name = "sealed-watch",
                 .key_dirs = wdir,
                 .extra = (const char *[]){a_key, "--watch-key-dirs=true",
                                           "--watch-delay=50ms", NULL}};
    td_start(&w, &o);
    char dst[1200];
    snprintf(dst, sizeof dst, "%s/ec.sealed", wdir);
    free(seal_run(0, (const char *[]){"seal", "--policy", "region=eu-west",
                                      "--fleet", at("fleet.yaml"), at("ec.pem"),
                                      "-o", dst, NULL}));
    char *log = NULL;
    for (int i = 0; i < 500; i++) {
        free(log);
        log = td_read_log(&w);
        if (strstr(log, "reloaded: 1 keys"))
            break;
        usleep(20000);
    }
    if (!strstr(log, "reloaded: 1 keys")) {
        td_dump_log(&w);
        fail_msg("the watched directory's sealed file was not loaded");
    }
    free(log);
    char ws[64], *out = NULL;
    snprintf(ws, sizeof ws, "127.0.0.1:%u", w.port);
    const char *lead[] = {"sign", "--server", ws, NULL};
    const char *args[] = {"--pubkey", pub_ec, "--message", "watched", NULL};
    int st = tt_tool_run(&cli, lead, args, &out, 60000);
    if (st != 0 || !strstr(out, "OK: ECDSA-P-256 signature"))
        fail_msg("keyless-cli sign: exit %d:\n%s", st, out);
    free(out);
    assert_int_equal(td_stop(&w, 0), 0);
    tp_rmtree(wdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_opened_and_elsewhere),
        cmocka_unit_test(test_tampered),
        cmocka_unit_test(test_sealing_key_lost),
        cmocka_unit_test(test_revoked),
        cmocka_unit_test(test_watched),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
