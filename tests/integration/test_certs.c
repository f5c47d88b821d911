/* SPDX-License-Identifier: Apache-2.0 */
/* Certificates, the most common setup error
 * (docs/OPERATIONS.md "Certificates"): keylessd --check and
 * keylessd itself explain, naming the files, each confusion between the
 * key server's identity, its CA and the keys it serves. Times are moved
 * with --current-time (the reference's option) instead of minting expired
 * certificates. */
#include "daemon.h"
#include "pki.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/pem.h>
#include <openssl/x509.h>

static char *keydir;

static int setup(void **state)
{
    keydir = tp_tempdir("certs");
    tp_copy_key(keydir, tp_path("keys/ecdsa-p256.key"));
    return 0;
}

static int teardown(void **state)
{
    tp_rmtree(keydir);
    return 0;
}

/* Runs keylessd with the test PKI's files, overridden by extra flags
 * (later flags win); returns the exit status, *out the output. */
static int run(bool check, const char *const *extra, char **out)
{
    char bin[1024], a_cert[1100], a_key[1100], a_ca[1100], a_kd[1100];
    snprintf(bin, sizeof bin, "%s/keylessd", tu_bin_dir());
    snprintf(a_cert, sizeof a_cert, "--auth-cert=%s", tp_path("server.crt"));
    snprintf(a_key, sizeof a_key, "--auth-key=%s", tp_path("server.key"));
    snprintf(a_ca, sizeof a_ca, "--cloudflare-ca-cert=%s", tp_path("ca.crt"));
    snprintf(a_kd, sizeof a_kd, "--private-key-dirs=%s", keydir);
    const char *argv[32] = {bin,        a_cert,
                            a_key,      a_ca,
                            a_kd,       "--listen-address=127.0.0.1",
                            "--port=1", "--metrics-port=0"};
    int n = 8;
    if (check)
        argv[n++] = "--check";
    for (; extra && *extra; extra++)
        argv[n++] = *extra;
    argv[n] = NULL;
    return td_run(argv, out, 30000);
}

static void expect(const char *out, const char *want)
{
    if (!strstr(out, want))
        fail_msg("expected in the output:\n  %s\ngot:\n%s", want, out);
}

/* The problem is reported by --check (exit 1) and stops the server the
 * same way. */
static void expect_problem(const char *const *extra, const char *msg)
{
    char *out;
    assert_int_equal(run(true, extra, &out), 1);
    expect(out, msg);
    expect(out, "[error]");
    expect(out, "configuration has ");
    free(out);
    assert_int_equal(run(false, extra, &out), 1);
    expect(out, msg);
    expect(out, "not starting: fix the certificate problems above");
    free(out);
}

static long long not_after(const char *cert)
{
    FILE *f = fopen(cert, "r");
    assert_non_null(f);
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(x);
    struct tm tm;
    assert_int_equal(ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm), 1);
    X509_free(x);
    return (long long)timegm(&tm);
}

static void test_good_files_pass(void **state)
{
    char *out;
    int rc = run(true, NULL, &out);
    if (rc != 0)
        fail_msg("--check failed on the test PKI:\n%s", out);
    expect(out, "configuration OK: 1 keys, auth_cert ");
    assert_null(strstr(out, "[warning]"));
    free(out);
}

static void test_cert_key_mismatch(void **state)
{
    char k[1100], want[2400];
    snprintf(k, sizeof k, "--auth-key=%s", tp_path("client.key"));
    snprintf(want, sizeof want,
             "auth_cert %s (O = keylessd development, CN = localhost) does "
             "not match auth_key %s: the certificate was issued for another "
             "key. Use the key the certificate was issued for",
             tp_path("server.crt"), tp_path("client.key"));
    expect_problem((const char *[]){k, NULL}, want);
}

static void test_swapped_cert_and_key(void **state)
{
    char c[1100], k[1100], w1[2400], w2[2400];
    snprintf(c, sizeof c, "--auth-cert=%s", tp_path("server.key"));
    snprintf(k, sizeof k, "--auth-key=%s", tp_path("server.crt"));
    snprintf(w1, sizeof w1,
             "auth_cert %s holds a private key, not a certificate. auth_cert "
             "is the key server's certificate and auth_key %s its private "
             "key: are the two swapped?",
             tp_path("server.key"), tp_path("server.crt"));
    snprintf(w2, sizeof w2,
             "auth_key %s holds a certificate, not a private key. auth_key is "
             "the private key of auth_cert %s: are the two swapped?",
             tp_path("server.crt"), tp_path("server.key"));
    expect_problem((const char *[]){c, k, NULL}, w1);
    expect_problem((const char *[]){c, k, NULL}, w2);
}

/* A served key given as the server's certificate: the most common mix-up. */
static void test_served_key_as_cert(void **state)
{
    char c[1100], want[2400];
    snprintf(c, sizeof c, "--auth-cert=%s", tp_path("keys/ecdsa-p256.key"));
    snprintf(want, sizeof want,
             "auth_cert %s holds a private key, not a certificate.",
             tp_path("keys/ecdsa-p256.key"));
    expect_problem((const char *[]){c, NULL}, want);
}

static void test_expired_and_not_yet_valid(void **state)
{
    char want[2400];
    snprintf(want, sizeof want, "auth_cert %s expired on ",
             tp_path("server.crt"));
    expect_problem(
        (const char *[]){"--current-time=2045-01-01T00:00:00Z", NULL}, want);
    snprintf(want, sizeof want, "auth_cert %s is not valid yet: valid from ",
             tp_path("server.crt"));
    expect_problem(
        (const char *[]){"--current-time=2001-01-01T00:00:00Z", NULL}, want);
}

/* 30 days ahead: a warning, and the server still starts. */
static void test_expiring_soon_warns(void **state)
{
    long long t = not_after(tp_path("server.crt")) - 10 * 86400LL;
    char flag[64], want[2400];
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(flag, sizeof flag, "--current-time=%Y-%m-%dT%H:%M:%SZ", &tm);
    char *out;
    assert_int_equal(run(true, (const char *[]){flag, NULL}, &out), 0);
    snprintf(want, sizeof want, "[warning] auth_cert %s expires on ",
             tp_path("server.crt"));
    expect(out, want);
    expect(out, ", in 10 day(s): renew it soon");
    expect(out, "configuration OK: 1 keys");
    free(out);
}

static void test_client_cert_lacks_server_auth(void **state)
{
    char c[1100], k[1100], want[2400];
    snprintf(c, sizeof c, "--auth-cert=%s", tp_path("client.crt"));
    snprintf(k, sizeof k, "--auth-key=%s", tp_path("client.key"));
    snprintf(want, sizeof want,
             "auth_cert %s lacks the serverAuth extended key usage (it is a "
             "client certificate: clientAuth), so clients will refuse it.",
             tp_path("client.crt"));
    expect_problem((const char *[]){c, k, NULL}, want);
}

static void test_ca_file_without_ca(void **state)
{
    char a[1100], want[2400];
    snprintf(a, sizeof a, "--cloudflare-ca-cert=%s", tp_path("server.crt"));
    snprintf(want, sizeof want,
             "cloudflare_ca_cert %s holds no CA certificate: \"O = keylessd "
             "development, CN = localhost\" is not a CA (no basicConstraints "
             "CA:TRUE).",
             tp_path("server.crt"));
    expect_problem((const char *[]){a, NULL}, want);
    /* a key instead of a CA */
    snprintf(a, sizeof a, "--cloudflare-ca-cert=%s", tp_path("ca.key"));
    snprintf(want, sizeof want,
             "cloudflare_ca_cert %s holds a private key: the CA file needs "
             "only CA certificates",
             tp_path("ca.key"));
    expect_problem((const char *[]){a, NULL}, want);
}

static void test_missing_files(void **state)
{
    expect_problem(
        (const char *[]){"--auth-cert=/nonexistent/server.pem", NULL},
        "auth_cert /nonexistent/server.pem: cannot read: No such "
        "file or directory. Put the key server's own certificate "
        "(PEM) there, or set auth_cert to its path");
    expect_problem(
        (const char *[]){"--cloudflare-ca-cert=/nonexistent/ca.pem", NULL},
        "cloudflare_ca_cert /nonexistent/ca.pem: cannot read: No "
        "such file or directory.");
}

/* Certificates in a key directory: a warning naming the file; keys still
 * load and the server starts. */
static void test_key_dir_with_certificates(void **state)
{
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "cp %s %s/edge.pem && cp %s %s/ca.crt",
             tp_path("server.crt"), keydir, tp_path("ca.crt"), keydir);
    assert_int_equal(system(cmd), 0);
    char *out, want[2400];
    assert_int_equal(run(true, NULL, &out), 0);
    snprintf(want, sizeof want,
             "[warning] %s/edge.pem: a certificate in the key directory %s: "
             "keylessd serves only private keys (*.key)",
             keydir, keydir);
    expect(out, want);
    snprintf(want, sizeof want, "%s/ca.crt: a certificate in the key", keydir);
    expect(out, want);
    expect(out, "configuration OK: 1 keys");
    free(out);

    /* and at startup, with the server running */
    td_daemon d;
    td_opts o = {.name = "certs-warn", .key_dirs = keydir};
    td_start(&d, &o);
    kl_client *c = td_connect(&d);
    td_expect_ping(&d, c);
    kl_client_close(c);
    assert_int_equal(td_stop(&d, 0), 0);
    char *log = td_read_log(&d);
    snprintf(want, sizeof want, "%s/edge.pem: a certificate in the key",
             keydir);
    expect(log, want);
    free(log);
    snprintf(cmd, sizeof cmd, "rm -f %s/edge.pem %s/ca.crt", keydir, keydir);
    assert_int_equal(system(cmd), 0);

    /* A *.sealed file is the key store's to explain (it is not one), not
     * scanned for certificates like other files (docs/SEALING.md "Cost,
     * measured"). */
    snprintf(cmd, sizeof cmd, "cp %s %s/edge.sealed", tp_path("server.crt"),
             keydir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(run(true, NULL, &out), 1);
    snprintf(want, sizeof want,
             "%s/edge.sealed: sealed key refused: not a valid sealed key file",
             keydir);
    expect(out, want);
    assert_null(strstr(out, "a certificate in the key directory"));
    free(out);
    snprintf(cmd, sizeof cmd, "rm -f %s/edge.sealed", keydir);
    assert_int_equal(system(cmd), 0);
}

/* auth_key follows the rule of the keys served: readable by group or
 * others is refused, by --check and at startup, unless
 * allow_group_readable_keys; a key directory that group or others can
 * write is refused too (docs/OPERATIONS.md "Key files"). */
static void test_open_auth_key_and_key_dir(void **state)
{
    char *dir = tp_tempdir("certs-perm");
    char cmd[2400], key[1100], arg[1200], want[2400];
    snprintf(key, sizeof key, "%s/server-key.pem", dir);
    snprintf(cmd, sizeof cmd, "cp %s %s", tp_path("server.key"), key);
    assert_int_equal(system(cmd), 0);
    snprintf(arg, sizeof arg, "--auth-key=%s", key);
    static const struct {
        mode_t mode;
        const char *who;
    } open_modes[] = {{0644, "others"}, {0640, "its group"}};
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(chmod(key, open_modes[i].mode), 0);
        snprintf(want, sizeof want,
                 "auth_key %s is readable by %s (mode %03o): run chmod 600 on "
                 "it, or allow group-readable key files in the configuration",
                 key, open_modes[i].who, (unsigned)open_modes[i].mode);
        expect_problem((const char *[]){arg, NULL}, want);
        /* the opt-in covers auth_key too */
        char *out;
        int rc =
            run(true,
                (const char *[]){arg, "--allow-group-readable-keys=true", NULL},
                &out);
        if (rc != 0)
            fail_msg("--check with the opt-in failed:\n%s", out);
        free(out);
    }
    assert_int_equal(chmod(key, 0600), 0);
    char *out;
    assert_int_equal(run(true, (const char *[]){arg, NULL}, &out), 0);
    free(out);

    /* key directories writable by group or others */
    static const struct {
        mode_t mode;
        const char *who;
    } dir_modes[] = {{0777, "others"}, {0770, "its group"}, {0702, "others"}};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(chmod(keydir, dir_modes[i].mode), 0);
        snprintf(want, sizeof want,
                 "%s: key directory is writable by %s (mode %03o), who could "
                 "add or replace keys: run chmod 700 on it (750 to let a "
                 "group read it)",
                 keydir, dir_modes[i].who, (unsigned)dir_modes[i].mode);
        assert_int_equal(run(true, NULL, &out), 1);
        expect(out, want);
        expect(out, "configuration has ");
        free(out);
        assert_int_equal(run(false, NULL, &out), 1);
        expect(out, want);
        expect(out, "not starting");
        free(out);
    }
    /* 0750 and 0755 are fine */
    assert_int_equal(chmod(keydir, 0750), 0);
    assert_int_equal(run(true, NULL, &out), 0);
    expect(out, "configuration OK: 1 keys");
    free(out);
    assert_int_equal(chmod(keydir, 0700), 0);
    tp_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_files_pass),
        cmocka_unit_test(test_cert_key_mismatch),
        cmocka_unit_test(test_swapped_cert_and_key),
        cmocka_unit_test(test_served_key_as_cert),
        cmocka_unit_test(test_expired_and_not_yet_valid),
        cmocka_unit_test(test_expiring_soon_warns),
        cmocka_unit_test(test_client_cert_lacks_server_auth),
        cmocka_unit_test(test_ca_file_without_ca),
        cmocka_unit_test(test_missing_files),
        cmocka_unit_test(test_key_dir_with_certificates),
        cmocka_unit_test(test_open_auth_key_and_key_dir),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
