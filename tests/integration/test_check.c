/* SPDX-License-Identifier: Apache-2.0 */
/* keylessd --check reports everything a start would refuse or warn about,
 * all in one run, and its summary counts exactly the problem lines it
 * printed (docs/OPERATIONS.md, Modes): a missing or broken router_table,
 * a store with no key, a broken access_file, and - when the table names
 * remotes - a router certificate that cannot be a TLS client certificate
 * (docs/ROUTING.md, "The router's certificate"), which a start refuses
 * too. */
#include "daemon.h"
#include "net.h"
#include "pki.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char *dir, *keydir, *emptydir;

static int setup(void **state)
{
    (void)state;
    dir = tp_tempdir("check");
    keydir = tp_tempdir("check-keys");
    emptydir = tp_tempdir("check-empty");
    tp_copy_key(keydir, tp_path("keys/ecdsa-p256.key"));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tp_rmtree(dir);
    tp_rmtree(keydir);
    tp_rmtree(emptydir);
    return 0;
}

static const char *write_file(const char *name, const char *text)
{
    static char path[8][1100];
    static int next;
    char *p = path[next++ % 8];
    snprintf(p, 1100, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    return p;
}

/* A routing table whose one remote serves a key at a closed port. */
static const char *remote_table(void)
{
    return write_file("routes.yaml",
                      "servers:\n  - {name: far, address: \"127.0.0.1:1\", "
                      "region: eu, serves: "
                      "[0101010101010101010101010101010101010101]}\n");
}

/* keylessd with the test PKI, keys from kdir, and the extra flags (later
 * flags win); --check when check. Returns the exit status; *out the
 * output. */
static int run(bool check, const char *kdir, const char *const *extra,
               char **out)
{
    char bin[1024], a_cert[1100], a_key[1100], a_ca[1100], a_kd[1100],
        a_port[32];
    snprintf(bin, sizeof bin, "%s/keylessd", tu_bin_dir());
    snprintf(a_cert, sizeof a_cert, "--auth-cert=%s", tp_path("server.crt"));
    snprintf(a_key, sizeof a_key, "--auth-key=%s", tp_path("server.key"));
    snprintf(a_ca, sizeof a_ca, "--cloudflare-ca-cert=%s", tp_path("ca.crt"));
    snprintf(a_kd, sizeof a_kd, "--private-key-dirs=%s", kdir);
    snprintf(a_port, sizeof a_port, "--port=%u", tn_free_port());
    const char *argv[32] = {bin,          a_cert,
                            a_key,        a_ca,
                            a_kd,         "--listen-address=127.0.0.1",
                            a_port,       "--metrics-port=0",
                            "--shards=1", "--workers=1"};
    int n = 10;
    if (check)
        argv[n++] = "--check";
    for (; extra && *extra && n < 31; extra++)
        argv[n++] = *extra;
    argv[n] = NULL;
    return td_run(argv, out, 20000);
}

static void expect(const char *out, const char *want)
{
    if (!strstr(out, want))
        fail_msg("expected in the output:\n  %s\ngot:\n%s", want, out);
}

/* Lines of the output at this level ("[error]", "[warning]"), the
 * summary line left out. */
static size_t lines(const char *out, const char *level)
{
    size_t n = 0;
    for (const char *l = out; l && *l;) {
        const char *end = strchr(l, '\n');
        size_t len = end ? (size_t)(end - l) : strlen(l);
        char *line = strndup(l, len);
        if (strstr(line, level) && !strstr(line, "configuration has ") &&
            !strstr(line, "configuration OK"))
            n++;
        free(line);
        l = end ? end + 1 : NULL;
    }
    return n;
}

/* The summary names as many problems and warnings as lines above it. */
static void expect_counts_match(const char *out, int rc)
{
    size_t errors = lines(out, "[error]"), warnings = lines(out, "[warning]");
    char want[128];
    if (rc != 0)
        snprintf(want, sizeof want,
                 "configuration has %zu problem(s) and %zu warning(s)", errors,
                 warnings);
    else if (warnings)
        snprintf(want, sizeof want, "; %zu warning(s) above", warnings);
    else
        snprintf(want, sizeof want, "configuration OK: ");
    expect(out, want);
}

/* --check fails (exit 1) naming msg, with a matching summary. */
static void expect_check_fails(const char *kdir, const char *const *extra,
                               const char *msg)
{
    char *out;
    int rc = run(true, kdir, extra, &out);
    if (rc != 1)
        fail_msg("--check: status %d, want 1:\n%s", rc, out);
    expect(out, msg);
    expect_counts_match(out, rc);
    free(out);
}

static void test_good_configuration_passes(void **state)
{
    (void)state;
    char *out;
    int rc = run(true, keydir, NULL, &out);
    if (rc != 0)
        fail_msg("--check failed:\n%s", out);
    expect(out, "configuration OK: 1 keys");
    expect_counts_match(out, rc);
    free(out);
}

static void test_missing_router_table(void **state)
{
    (void)state;
    char a[1200];
    snprintf(a, sizeof a, "--router-table=%s/no-such-table.yaml", dir);
    expect_check_fails(keydir, (const char *[]){a, NULL}, "router_table: ");
    expect_check_fails(keydir, (const char *[]){a, NULL},
                       "no-such-table.yaml: cannot open the routing table");
}

static void test_broken_router_table(void **state)
{
    (void)state;
    char a[1200];
    snprintf(a, sizeof a, "--router-table=%s",
             write_file("broken.yaml", "servers:\n  - {name: x, region: eu, "
                                       "serves: [nothing-like-a-ski]}\n"));
    expect_check_fails(keydir, (const char *[]){a, NULL},
                       "broken.yaml:2: servers: x needs exactly one of");
    snprintf(a, sizeof a, "--router-table=%s",
             write_file("syntax.yaml", "servers: [ {name: x\n"));
    expect_check_fails(keydir, (const char *[]){a, NULL},
                       "syntax.yaml:2: YAML syntax");
}

/* A store that yields no key: /ready would stay 503 for ever. */
static void test_zero_keys(void **state)
{
    (void)state;
    expect_check_fails(emptydir, NULL,
                       "no private key loads from private_key_stores: "
                       "keylessd would answer every key operation `key not "
                       "found` and /ready would answer 503");
    /* a keylessd that only routes needs no key */
    char a_table[1200], a_cert[1200], a_key[1200];
    snprintf(a_table, sizeof a_table, "--router-table=%s", remote_table());
    snprintf(a_cert, sizeof a_cert, "--router-cert=%s", tp_path("client.crt"));
    snprintf(a_key, sizeof a_key, "--router-key=%s", tp_path("client.key"));
    char *out;
    int rc = run(true, emptydir, (const char *[]){a_table, a_cert, a_key, NULL},
                 &out);
    if (rc != 0)
        fail_msg("--check of a routing-only keylessd: status %d:\n%s", rc, out);
    expect(out, "no keys: this keylessd only forwards");
    expect_counts_match(out, rc);
    free(out);
}

static void test_broken_access_file(void **state)
{
    (void)state;
    char a[1200];
    snprintf(a, sizeof a, "--access-file=%s",
             write_file("access.yaml", "this is: [not an access list\n"));
    expect_check_fails(keydir, (const char *[]){a, NULL}, "access_file: ");
}

/* pid_file in a directory that does not exist (yet: systemd makes
 * RuntimeDirectory= while the service runs) is a warning, counted. */
static void test_pid_file_directory(void **state)
{
    (void)state;
    char a[1200];
    snprintf(a, sizeof a, "--pid-file=%s/no-such-dir/keylessd.pid", dir);
    char *out;
    int rc = run(true, keydir, (const char *[]){a, NULL}, &out);
    if (rc != 0)
        fail_msg("--check: status %d:\n%s", rc, out);
    expect(out, "no-such-dir/keylessd.pid: its directory ");
    expect(out, "does not exist");
    expect_counts_match(out, rc);
    assert_true(lines(out, "[warning]") >= 1);
    free(out);
}

/* Several problems at once: every one is printed in the same run, and the
 * summary counts each line (warnings of the configuration file
 * included). */
static void test_every_problem_at_once(void **state)
{
    (void)state;
    /* a bad key next to a good one, a backup file that is not loaded */
    char *kd = tp_tempdir("check-many");
    tp_copy_key(kd, tp_path("keys/ecdsa-p256.key"));
    char path[1200];
    snprintf(path, sizeof path, "%s/bad.key", kd);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("not a key\n", f);
    fclose(f);
    chmod(path, 0600);
    snprintf(path, sizeof path, "%s/old.key.bak", kd);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("backup\n", f);
    fclose(f);
    char a_cfg[1200], a_table[1200], a_acl[1200];
    snprintf(a_cfg, sizeof a_cfg, "--config-file=%s",
             write_file("keylessd.yaml", "portt: 5\nloglevell: 1\n"
                                         "idle_timeout: forever\n"
                                         "max_connections: 0\n"));
    snprintf(a_table, sizeof a_table, "--router-table=%s/missing.yaml", dir);
    snprintf(a_acl, sizeof a_acl, "--access-file=%s",
             write_file("acl.yaml", "[1, 2\n"));
    char *out;
    int rc = run(true, kd,
                 (const char *[]){a_cfg, a_table, a_acl, "--workers=-5", NULL},
                 &out);
    fprintf(stderr, "%s", out);
    assert_int_equal(rc, 1);
    expect(out, "unknown option \"portt\" ignored (did you mean \"port\"?)");
    expect(out, "keylessd.yaml:3: idle_timeout: \"forever\" is not a duration");
    expect(out, "keylessd.yaml:4: max_connections: 0 is out of range");
    expect(out, "flag --workers=-5: workers: -5 is out of range");
    expect(out, "unknown option \"loglevell\" ignored");
    expect(out, "bad.key: ");
    expect(out, "old.key.bak: not loaded");
    expect(out, "missing.yaml: cannot open the routing table");
    expect(out, "access_file: ");
    expect_counts_match(out, rc);
    assert_true(lines(out, "[error]") >= 6);
    assert_true(lines(out, "[warning]") >= 3);
    free(out);
    tp_rmtree(kd);
}

/* The default identity toward remotes is auth_cert, serverAuth only in
 * the test PKI (as an Origin CA certificate is): a remote would refuse
 * it. --check says so, and a start refuses. */
static void test_router_cert_without_client_auth(void **state)
{
    (void)state;
    char a_table[1200];
    snprintf(a_table, sizeof a_table, "--router-table=%s", remote_table());
    const char *want = "(what the router presents to remote key servers "
                       "while router_cert is unset) cannot be used as a TLS "
                       "client certificate: its extendedKeyUsage is "
                       "serverAuth without clientAuth";
    expect_check_fails(keydir, (const char *[]){a_table, NULL}, want);
    expect_check_fails(keydir, (const char *[]){a_table, NULL},
                       "reissue auth_cert with both serverAuth and "
                       "clientAuth");
    char *out;
    int rc = run(false, keydir, (const char *[]){a_table, NULL}, &out);
    if (rc != 1)
        fail_msg("start: status %d, want 1:\n%s", rc, out);
    expect(out, want);
    expect(out, "not starting: fix the routing problems above");
    free(out);

    /* router_cert set to another serverAuth-only certificate */
    char a_cert[1200], a_key[1200];
    snprintf(a_cert, sizeof a_cert, "--router-cert=%s",
             tp_path("client-serverauth.crt"));
    snprintf(a_key, sizeof a_key, "--router-key=%s",
             tp_path("client-serverauth.key"));
    const char *const own[] = {a_table, a_cert, a_key, NULL};
    expect_check_fails(keydir, own, "router_cert " /* then the file */);
    expect_check_fails(keydir, own,
                       "cannot be used as a TLS client certificate");
    rc = run(false, keydir, own, &out);
    assert_int_equal(rc, 1);
    expect(out, "set router_cert and router_key to it");
    free(out);

    /* a key that is not router_cert's */
    snprintf(a_cert, sizeof a_cert, "--router-cert=%s", tp_path("client.crt"));
    expect_check_fails(keydir, own, "does not match router_key");

    /* without remotes the router presents nothing: no complaint */
    char a_empty[1200];
    snprintf(a_empty, sizeof a_empty, "--router-table=%s",
             write_file("empty.yaml", "servers: []\n"));
    rc = run(true, keydir, (const char *[]){a_empty, NULL}, &out);
    if (rc != 0)
        fail_msg("--check with a table without remotes: %d:\n%s", rc, out);
    free(out);
}

/* A client certificate (clientAuth) as router_cert passes --check. */
static void test_router_client_cert_passes(void **state)
{
    (void)state;
    char a_table[1200], a_cert[1200], a_key[1200];
    snprintf(a_table, sizeof a_table, "--router-table=%s", remote_table());
    snprintf(a_cert, sizeof a_cert, "--router-cert=%s", tp_path("client.crt"));
    snprintf(a_key, sizeof a_key, "--router-key=%s", tp_path("client.key"));
    char *out;
    int rc =
        run(true, keydir, (const char *[]){a_table, a_cert, a_key, NULL}, &out);
    if (rc != 0)
        fail_msg("--check: status %d:\n%s", rc, out);
    expect(out, "configuration OK: 1 keys");
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_configuration_passes),
        cmocka_unit_test(test_missing_router_table),
        cmocka_unit_test(test_broken_router_table),
        cmocka_unit_test(test_zero_keys),
        cmocka_unit_test(test_broken_access_file),
        cmocka_unit_test(test_pid_file_directory),
        cmocka_unit_test(test_every_problem_at_once),
        cmocka_unit_test(test_router_cert_without_client_auth),
        cmocka_unit_test(test_router_client_cert_passes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
