/* SPDX-License-Identifier: Apache-2.0 */
/* keylessd's modes and the drop-in behaviours of its configuration,
 * run as the operator would: --version, --help, --output-config
 * (secrets redacted), the file search in the working directory, relative
 * paths, --check printing every problem, --keystore-debug, --config-only,
 * --manual-activation, pid_file, and the committed option reference in
 * docs/OPERATIONS.md matching the table. */
#include "daemon.h"
#include "pki.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *dir;
static char bin[1024];

static int setup(void **state)
{
    dir = tp_tempdir("modes");
    snprintf(bin, sizeof bin, "%s/keylessd", tu_bin_dir());
    (void)tp_dir();
    return 0;
}

static int teardown(void **state)
{
    tp_rmtree(dir);
    return 0;
}

static void expect(const char *out, const char *want)
{
    if (!strstr(out, want))
        fail_msg("expected in the output:\n  %s\ngot:\n%s", want, out);
}

/* Runs a shell command line; returns the status, *out the output. */
static int shell(const char *script, char **out)
{
    return td_run((const char *[]){"/bin/sh", "-c", script, NULL}, out, 30000);
}

static void test_version_and_help(void **state)
{
    char *out;
    assert_int_equal(
        td_run((const char *[]){bin, "--version", NULL}, &out, 10000), 0);
    assert_string_equal(out, "keylessd 0.1.0 (protocol 1.0)\n");
    free(out);
    assert_int_equal(td_run((const char *[]){bin, "-v", NULL}, &out, 10000), 0);
    expect(out, "keylessd 0.1.0");
    free(out);
    assert_int_equal(td_run((const char *[]){bin, "-h", NULL}, &out, 10000), 0);
    expect(out, "Usage: keylessd [flags]");
    expect(out, "  -l, --loglevel N");
    expect(out, "  -c, --config-file PATH");
    expect(out, "  -d, --keystore-debug");
    expect(out, "  -o, --output-config");
    expect(out, "[env: KEYLESS_PRIVATE_KEY_DIRS]");
    free(out);
}

/* The file is found in the working directory (JSON too), the environment
 * wins over it, and secrets never reach the output. */
static void test_output_config_and_search(void **state)
{
    char path[1200], script[4096];
    snprintf(path, sizeof path, "%s/gokeyless.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"port\": 3999, \"origin_ca_api_key\": \"v1.0-hush\",\n"
          " \"private_key_stores\": [{\"uri\": "
          "\"pkcs11:token=t?module-path=/m.so&pin-value=4321\"}]}\n",
          f);
    fclose(f);
    snprintf(script, sizeof script,
             "cd %s && KEYLESS_METRICS_PORT=7 exec %s --output-config", dir,
             bin);
    char *out;
    assert_int_equal(shell(script, &out), 0);
    expect(out, "port: 3999\n");
    expect(out, "metrics_port: 7\n");
    expect(out, "origin_ca_api_key: \"REDACTED\"\n");
    expect(out, "  - uri: \"pkcs11:token=t?module-path=/m.so&pin-value="
                "REDACTED\"\n");
    assert_null(strstr(out, "hush"));
    assert_null(strstr(out, "4321"));
    free(out);
    unlink(path);
}

/* Relative names resolve against the working directory, as in the
 * reference (under systemd: /etc/keyless). */
static void test_relative_paths(void **state)
{
    char script[4096], *out;
    snprintf(script, sizeof script,
             "cd %s && exec %s --check --auth-cert=server.crt "
             "--auth-key=server.key --cloudflare-ca-cert=ca.crt "
             "--private-key-dirs=keys",
             tp_dir(), bin);
    int rc = shell(script, &out);
    if (rc != 0)
        fail_msg("--check with relative paths: %d\n%s", rc, out);
    expect(out, "configuration OK: 4 keys, auth_cert server.crt, CA ca.crt");
    free(out);
}

/* --check reports every problem, not the first, and still counts what
 * loads. */
static void test_check_lists_every_problem(void **state)
{
    char keys[1200], path[1300], script[4096], *out;
    snprintf(keys, sizeof keys, "%s/keys", dir);
    mkdir(keys, 0700);
    tp_copy_key(keys, tp_path("keys/ecdsa-p256.key"));
    tp_copy_key(keys, tp_path("keys/rsa-2048.key"));
    snprintf(path, sizeof path, "%s/rsa-2048.key", keys);
    chmod(path, 0644);
    snprintf(path, sizeof path, "%s/broken.key", keys);
    FILE *f = fopen(path, "w");
    fputs("garbage\n", f);
    fclose(f);
    chmod(path, 0600);
    snprintf(path, sizeof path, "%s/old.key.bak", keys);
    f = fopen(path, "w");
    fclose(f);
    snprintf(script, sizeof script,
             "exec %s --check --auth-cert=%s --auth-key=%s "
             "--cloudflare-ca-cert=%s --private-key-dirs=%s",
             bin, tp_path("server.crt"), tp_path("client.key"),
             tp_path("ca.crt"), keys);
    assert_int_equal(shell(script, &out), 1);
    char want[1400];
    snprintf(want, sizeof want, "[error] %s/broken.key: ", keys);
    expect(out, want);
    snprintf(want, sizeof want,
             "[error] %s/rsa-2048.key: key file is readable by others (mode "
             "644)",
             keys);
    expect(out, want);
    snprintf(want, sizeof want,
             "[warning] %s/old.key.bak: not loaded: keylessd loads only "
             "files whose name ends in \".key\"",
             keys);
    expect(out, want);
    expect(out, "does not match auth_key");
    expect(out, "configuration has 3 problem(s) and 1 warning(s); 1 keys "
                "loaded");
    free(out);

    /* --keystore-debug lists what loads: SKI, type, back end, file */
    snprintf(script, sizeof script, "exec %s -d --private-key-dirs=%s", bin,
             keys);
    assert_int_equal(shell(script, &out), 1);
    EVP_PKEY *pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    uint8_t ski[20];
    tp_ski(pub, ski);
    EVP_PKEY_free(pub);
    snprintf(want, sizeof want, "%s  ECDSA-P-256    file   %s/ecdsa-p256.key\n",
             tp_ski_hex(ski), keys);
    expect(out, want);
    expect(out, "# 1 keys from 1 store(s)");
    expect(out, "2 key(s) or store(s) could not be loaded");
    free(out);
}

static void test_config_only_and_manual_activation(void **state)
{
    char script[4096], *out;
    snprintf(script, sizeof script,
             "exec %s --config-only --auth-cert=%s --auth-key=%s "
             "--cloudflare-ca-cert=%s",
             bin, tp_path("server.crt"), tp_path("server.key"),
             tp_path("ca.crt"));
    assert_int_equal(shell(script, &out), 0);
    expect(out, "already configured: auth_cert ");
    free(out);
    snprintf(script, sizeof script,
             "exec %s --config-only --auth-cert=%s/none.pem "
             "--cloudflare-ca-cert=%s",
             bin, dir, tp_path("ca.crt"));
    assert_int_equal(shell(script, &out), 1);
    expect(out, "none.pem: cannot read: No such file or directory");
    expect(out, "--config-only: the key server's identity is not ready");
    free(out);
    assert_int_equal(
        td_run((const char *[]){bin, "--manual-activation", NULL}, &out, 10000),
        1);
    expect(out, "--manual-activation needs hostname");
    free(out);
}

static void test_pid_file(void **state)
{
    char pid_path[1200], flag[1300];
    snprintf(pid_path, sizeof pid_path, "%s/keylessd.pid", dir);
    snprintf(flag, sizeof flag, "--pid-file=%s", pid_path);
    td_daemon d;
    td_opts o = {.name = "modes-pid", .extra = (const char *[]){flag, NULL}};
    td_start(&d, &o);
    size_t len;
    char *text = tu_read_file(pid_path, &len);
    char want[32];
    snprintf(want, sizeof want, "%ld\n", (long)d.pid);
    assert_string_equal(text, want);
    free(text);
    assert_int_equal(td_stop(&d, 0), 0);
    assert_int_equal(access(pid_path, F_OK), -1);
}

/* docs/OPERATIONS.md holds `keylessd --help-markdown` verbatim between its
 * markers: the table and the guide cannot drift apart. */
static void test_operations_doc_matches_table(void **state)
{
    char *out;
    assert_int_equal(
        td_run((const char *[]){bin, "--help-markdown", NULL}, &out, 10000), 0);
    char doc[1200];
    snprintf(doc, sizeof doc, "%s/docs/OPERATIONS.md", tu_src_dir());
    size_t len;
    char *text = tu_read_file(doc, &len);
    const char *begin = "<!-- BEGIN OPTIONS -->\n";
    const char *b = strstr(text, begin), *e = strstr(text, "<!-- END OPTIONS");
    assert_non_null(b);
    assert_non_null(e);
    b += strlen(begin);
    if ((size_t)(e - b) != strlen(out) || memcmp(b, out, strlen(out)) != 0)
        fail_msg("docs/OPERATIONS.md is out of date: run "
                 "scripts/regen-options.sh (it writes `keylessd "
                 "--help-markdown` between the markers)");
    free(text);
    free(out);
}

/* The same for the OPTIONS section of keylessd(8). */
static void test_man_page_matches_table(void **state)
{
    char *out;
    assert_int_equal(
        td_run((const char *[]){bin, "--help-man", NULL}, &out, 10000), 0);
    char page[1200];
    snprintf(page, sizeof page, "%s/packaging/man/keylessd.8", tu_src_dir());
    size_t len;
    char *text = tu_read_file(page, &len);
    const char *begin = ".\\\" BEGIN OPTIONS\n";
    const char *b = strstr(text, begin), *e = strstr(text, ".\\\" END OPTIONS");
    assert_non_null(b);
    assert_non_null(e);
    b += strlen(begin);
    if ((size_t)(e - b) != strlen(out) || memcmp(b, out, strlen(out)) != 0)
        fail_msg("packaging/man/keylessd.8 is out of date: run "
                 "scripts/regen-options.sh (it writes `keylessd --help-man` "
                 "between the markers)");
    free(text);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_and_help),
        cmocka_unit_test(test_output_config_and_search),
        cmocka_unit_test(test_relative_paths),
        cmocka_unit_test(test_check_lists_every_problem),
        cmocka_unit_test(test_config_only_and_manual_activation),
        cmocka_unit_test(test_pid_file),
        cmocka_unit_test(test_operations_doc_matches_table),
        cmocka_unit_test(test_man_page_matches_table),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
