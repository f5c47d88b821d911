/* SPDX-License-Identifier: Apache-2.0 */
/* src/config: defaults, the three sources and their precedence, both flag
 * spellings, durations, and the negative cases with their exact messages
 * (file and line, option, fix). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "config/internal.h"
#include "cfgtest.h"
#include "testutil.h"
#include "core/time.h"

#define SEC 1000000000ull

static char tmpdir[64];
static char errbuf[512];

static const char *write_tmp(const char *name, const char *text)
{
    return tc_write(tmpdir, name, text);
}

static int setup(void **state)
{
    tc_setup_dir(tmpdir, sizeof tmpdir, "config");
    return 0;
}

static int teardown(void **state)
{
    return tc_teardown_dir(tmpdir);
}

/* Loads with argv given as a NULL-terminated list after the program name
 * (tests/support/cfgtest.h). */
#define load_args(cfg, env, ...)                                               \
    tc_load(cfg, env, TC_ARGS(__VA_ARGS__), errbuf, sizeof errbuf)

static void test_defaults(void **state)
{
    kl_config *cfg = kl_daemon_config_new();
    assert_non_null(cfg);
    assert_int_equal(load_args(cfg, tc_no_env, NULL), KL_OK);
    assert_int_equal(cfg->loglevel, 1);
    assert_int_equal(kl_settings_of(cfg)->server.port, 2407);
    assert_string_equal(kl_settings_of(cfg)->server.listen_address, "0.0.0.0");
    assert_string_equal(cfg->auth_cert, "server.pem");
    assert_string_equal(cfg->auth_key, "server-key.pem");
    assert_string_equal(cfg->cloudflare_ca_cert, "keyless_cacert.pem");
    assert_int_equal(kl_settings_of(cfg)->server.shards, 0);
    assert_int_equal(kl_settings_of(cfg)->pool.workers, 0);
    assert_int_equal(kl_settings_of(cfg)->server.max_inflight_per_conn, 1024);
    assert_int_equal(kl_settings_of(cfg)->server.max_inflight, 65536);
    assert_true(kl_settings_of(cfg)->server.idle_timeout_ns == 30 * SEC);
    assert_true(kl_settings_of(cfg)->server.handshake_timeout_ns == 10 * SEC);
    assert_true(kl_settings_of(cfg)->server.drain_timeout_ns == 5 * SEC);
    assert_true(kl_settings_of(cfg)->server.max_queue_time_ns == 0);
    assert_true(cfg->tls13);
    assert_false(cfg->allow_group_readable_keys);
    assert_int_equal(cfg->nstores, 0);
    assert_int_equal(cfg->nwarnings, 0);
    assert_null(cfg->loaded_file);
    kl_config_free(cfg);
}

static void test_yaml_file(void **state)
{
    const char *path =
        write_tmp("full.yaml", "# comment\n"
                               "loglevel: 0\n"
                               "port: 3407\n"
                               "listen_address: 127.0.0.1\n"
                               "auth_cert: /etc/keyless/server.pem\n"
                               "auth_key: \"/etc/keyless/server-key.pem\"\n"
                               "cloudflare_ca_cert: ca.pem\n"
                               "private_key_stores:\n"
                               "  - dir: /etc/keyless/keys\n"
                               "  - file: /tmp/one.key\n"
                               "  - uri: pkcs11:token=t?module-path=/m.so\n"
                               "shards: 3\n"
                               "idle_timeout: 1m30s\n"
                               "handshake_timeout: 500ms\n"
                               "tls13: false\n"
                               "max_queue_time: 250ms\n");
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, tc_no_env, "-c", path, NULL), KL_OK);
    assert_string_equal(cfg->loaded_file, path);
    assert_int_equal(cfg->loglevel, 0);
    assert_int_equal(kl_settings_of(cfg)->server.port, 3407);
    assert_string_equal(kl_settings_of(cfg)->server.listen_address,
                        "127.0.0.1");
    assert_string_equal(cfg->auth_cert, "/etc/keyless/server.pem");
    assert_string_equal(cfg->auth_key, "/etc/keyless/server-key.pem");
    assert_string_equal(cfg->cloudflare_ca_cert, "ca.pem");
    assert_int_equal(cfg->nstores, 3);
    assert_int_equal(cfg->stores[2].kind, KL_STORE_URI);
    assert_string_equal(cfg->stores[2].path,
                        "pkcs11:token=t?module-path=/m.so");
    assert_int_equal(cfg->stores[0].kind, KL_STORE_DIR);
    assert_string_equal(cfg->stores[0].path, "/etc/keyless/keys");
    assert_int_equal(cfg->stores[1].kind, KL_STORE_FILE);
    assert_string_equal(cfg->stores[1].path, "/tmp/one.key");
    assert_int_equal(kl_settings_of(cfg)->server.shards, 3);
    assert_true(kl_settings_of(cfg)->server.idle_timeout_ns == 90 * SEC);
    assert_true(kl_settings_of(cfg)->server.handshake_timeout_ns ==
                500 * KL_NS_PER_MS);
    assert_true(kl_settings_of(cfg)->server.max_queue_time_ns ==
                250 * KL_NS_PER_MS);
    assert_false(cfg->tls13);
    assert_int_equal(cfg->nwarnings, 0);
    kl_config_free(cfg);
}

static void test_precedence(void **state)
{
    const char *path = write_tmp("prec.yaml", "port: 1000\nloglevel: 4\n");
    char *env[] = {"KEYLESS_PORT=2000", "KEYLESS_SHARDS=7", NULL};
    kl_config *cfg = kl_daemon_config_new();
    /* file only */
    assert_int_equal(load_args(cfg, tc_no_env, "--config-file", path, NULL),
                     KL_OK);
    assert_int_equal(kl_settings_of(cfg)->server.port, 1000);
    kl_config_free(cfg);
    /* env over file */
    cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, env, "--config-file", path, NULL), KL_OK);
    assert_int_equal(kl_settings_of(cfg)->server.port, 2000);
    assert_int_equal(kl_settings_of(cfg)->server.shards, 7);
    assert_int_equal(cfg->loglevel, 4);
    kl_config_free(cfg);
    /* flag over env over file */
    cfg = kl_daemon_config_new();
    assert_int_equal(
        load_args(cfg, env, "--port=3000", "--config-file", path, NULL), KL_OK);
    assert_int_equal(kl_settings_of(cfg)->server.port, 3000);
    assert_int_equal(kl_settings_of(cfg)->server.shards, 7);
    kl_config_free(cfg);
    /* the file can come from the environment */
    char *env2[] = {NULL, NULL};
    char v[200];
    snprintf(v, sizeof v, "KEYLESS_CONFIG_FILE=%s", path);
    env2[0] = v;
    cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, env2, NULL), KL_OK);
    assert_int_equal(kl_settings_of(cfg)->server.port, 1000);
    kl_config_free(cfg);
}

static void test_flag_spellings(void **state)
{
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, tc_no_env, "--auth-cert", "a.pem",
                               "--auth_key=b.pem", "--cloudflare_ca_cert",
                               "c.pem", "--tls13=false", "--handshake-timeout",
                               "2s", NULL),
                     KL_OK);
    assert_string_equal(cfg->auth_cert, "a.pem");
    assert_string_equal(cfg->auth_key, "b.pem");
    assert_string_equal(cfg->cloudflare_ca_cert, "c.pem");
    assert_false(cfg->tls13);
    assert_true(kl_settings_of(cfg)->server.handshake_timeout_ns == 2 * SEC);
    kl_config_free(cfg);

    cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, tc_no_env, "--tls13", "--check", NULL),
                     KL_OK);
    assert_true(cfg->tls13);
    assert_true(cfg->check);
    kl_config_free(cfg);
}

/* As in the reference, --private-key-dirs/-files (any source) replace
 * private_key_stores, with a warning saying so. */
static void test_key_dirs_and_files(void **state)
{
    const char *path = write_tmp("stores.yaml", "private_key_stores:\n"
                                                "  - dir: /a\n");
    char *env[] = {"KEYLESS_PRIVATE_KEY_FILES=/f1.key", NULL};
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(
        load_args(cfg, env, "-c", path, "--private-key-dirs", "/b, /c ", NULL),
        KL_OK);
    assert_int_equal(cfg->nstores, 3);
    assert_int_equal(cfg->stores[0].kind, KL_STORE_DIR);
    assert_string_equal(cfg->stores[0].path, "/b");
    assert_string_equal(cfg->stores[1].path, "/c");
    assert_int_equal(cfg->stores[2].kind, KL_STORE_FILE);
    assert_string_equal(cfg->stores[2].path, "/f1.key");
    assert_int_equal(cfg->nwarnings, 1);
    assert_string_equal(cfg->warnings[0],
                        "private_key_dirs/private_key_files replace the 1 "
                        "private_key_stores entries (as in the reference)");
    kl_config_free(cfg);

    /* without the lists the file's stores stand */
    cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, tc_no_env, "-c", path, NULL), KL_OK);
    assert_int_equal(cfg->nstores, 1);
    assert_string_equal(cfg->stores[0].path, "/a");
    assert_int_equal(cfg->nwarnings, 0);
    kl_config_free(cfg);
}

static void test_durations(void **state)
{
    static const struct {
        const char *in;
        uint64_t ns;
    } ok[] = {{"10s", 10 * SEC},
              {"500ms", 500 * KL_NS_PER_MS},
              {"2m", 120 * SEC},
              {"1h30m", 5400 * SEC},
              {"1.5s", 1500 * KL_NS_PER_MS},
              {"0", 0},
              {"0s", 0},
              {"250us", 250000},
              {"7ns", 7},
              {"1m0.5s", 60 * SEC + 500 * KL_NS_PER_MS}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t ns = 1;
        assert_int_equal(kl_parse_duration(ok[i].in, &ns), KL_OK);
        assert_true(ns == ok[i].ns);
    }
    static const char *const bad[] = {"",
                                      "10",
                                      "s",
                                      "5x",
                                      "-1s",
                                      "1 s",
                                      "1.s5",
                                      "ms",
                                      ".s",
                                      "10S",
                                      "99999999999999999999h"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t ns;
        assert_int_equal(kl_parse_duration(bad[i], &ns), KL_E_CONFIG);
    }
    char buf[32];
    kl_format_duration(90 * SEC, buf, sizeof buf);
    assert_string_equal(buf, "1m30s");
    kl_format_duration(500 * KL_NS_PER_MS, buf, sizeof buf);
    assert_string_equal(buf, "500ms");
    kl_format_duration(0, buf, sizeof buf);
    assert_string_equal(buf, "0s");
    kl_format_duration(3600 * SEC, buf, sizeof buf);
    assert_string_equal(buf, "1h");
}

static void test_bools(void **state)
{
    bool b;
    assert_int_equal(kl_parse_bool("YES", &b), KL_OK);
    assert_true(b);
    assert_int_equal(kl_parse_bool("off", &b), KL_OK);
    assert_false(b);
    assert_int_equal(kl_parse_bool("2", &b), KL_E_CONFIG);
    assert_int_equal(kl_parse_bool("", &b), KL_E_CONFIG);
    assert_int_equal(kl_parse_bool("truee", &b), KL_E_CONFIG);
}

/* A YAML document that must fail, with the exact message. */
static void expect_yaml_error(const char *text, const char *msg)
{
    kl_config *cfg = kl_daemon_config_new();
    errbuf[0] = 0;
    assert_int_equal(kl_config_apply_yaml(cfg, "gokeyless.yaml",
                                          (const uint8_t *)text, strlen(text),
                                          errbuf, sizeof errbuf),
                     KL_E_CONFIG);
    assert_string_equal(errbuf, msg);
    kl_config_free(cfg);
}

static void test_yaml_errors(void **state)
{
    expect_yaml_error("loglevel: 1\n\n\n\n\n\nport: 70000\n",
                      "gokeyless.yaml:7: port: 70000 is out of range "
                      "1..65535");
    expect_yaml_error("port: abc\n",
                      "gokeyless.yaml:1: port: \"abc\" is not an integer; "
                      "use a number in 1..65535");
    expect_yaml_error("loglevel: 6\n",
                      "gokeyless.yaml:1: loglevel: 6 is out of range 0..5");
    expect_yaml_error("tls13: maybe\n",
                      "gokeyless.yaml:1: tls13: \"maybe\" is not a boolean; "
                      "use true or false");
    expect_yaml_error("idle_timeout: 30\n",
                      "gokeyless.yaml:1: idle_timeout: \"30\" is not a "
                      "duration; write it with a unit, e.g. 10s, 500ms or 2m");
    expect_yaml_error("idle_timeout: 0s\n",
                      "gokeyless.yaml:1: idle_timeout: 0s is out of range "
                      "1ms..24h");
    expect_yaml_error("port: [1, 2]\n",
                      "gokeyless.yaml:1: port: expects a single value, not a "
                      "list");
    expect_yaml_error("port: 1\nloglevel: 2\nport: 3\n",
                      "gokeyless.yaml:3: port: given twice (first on line "
                      "1); keep one");
    expect_yaml_error("- port\n", "gokeyless.yaml:1: the file must be a map "
                                  "of options (\"key: value\" lines)");
    expect_yaml_error("private_key_stores:\n"
                      "  - dir: /a\n"
                      "    file: /b\n",
                      "gokeyless.yaml:3: private_key_stores: an entry has "
                      "both dir and file; give exactly one per entry (use "
                      "one \"- \" entry each)");
    expect_yaml_error("private_key_stores:\n"
                      "  - uri: pkcs11:token=x\n"
                      "    dir: /a\n",
                      "gokeyless.yaml:3: private_key_stores: an entry has "
                      "both uri and dir; give exactly one per entry (use "
                      "one \"- \" entry each)");
    expect_yaml_error("private_key_stores:\n"
                      "  - other: x\n",
                      "gokeyless.yaml:2: private_key_stores: an entry has "
                      "none of dir:, file: or uri:");
    expect_yaml_error("private_key_stores: /etc/keys\n",
                      "gokeyless.yaml:1: private_key_stores: must be a list, "
                      "e.g. \"private_key_stores:\\n  - dir: "
                      "/etc/keyless/keys\"");
    expect_yaml_error("private_key_stores:\n  - /etc/keys\n",
                      "gokeyless.yaml:2: private_key_stores: each entry must "
                      "be a map like \"- dir: /etc/keyless/keys\" or \"- "
                      "file: /path/key.pem\"");
    expect_yaml_error("private_key_stores:\n  - dir:\n",
                      "gokeyless.yaml:2: private_key_stores: dir: needs a "
                      "path");
}

static void test_malformed_yaml_line(void **state)
{
    kl_config *cfg = kl_daemon_config_new();
    const char *text = "port: 1\nloglevel: 1\nauth_cert: [a, b\n";
    assert_int_equal(kl_config_apply_yaml(cfg, "x.yaml", (const uint8_t *)text,
                                          strlen(text), errbuf, sizeof errbuf),
                     KL_E_CONFIG);
    /* libyaml notices at end of input (line 4) */
    assert_non_null(strstr(errbuf, "x.yaml:4: not valid YAML: "));
    kl_config_free(cfg);

    cfg = kl_daemon_config_new();
    text = "port: 1\n  bad indent: : :\n";
    assert_int_equal(kl_config_apply_yaml(cfg, "y.yaml", (const uint8_t *)text,
                                          strlen(text), errbuf, sizeof errbuf),
                     KL_E_CONFIG);
    assert_non_null(strstr(errbuf, "y.yaml:2: not valid YAML: "));
    kl_config_free(cfg);
}

static void test_unknown_key_is_warning(void **state)
{
    kl_config *cfg = kl_daemon_config_new();
    const char *text = "port: 1234\nhostnme: example.com\n"
                       "private_key_stores:\n  - dir: /k\n    weird: 1\n"
                       "config_file: x\n";
    assert_int_equal(kl_config_apply_yaml(cfg, "g.yaml", (const uint8_t *)text,
                                          strlen(text), errbuf, sizeof errbuf),
                     KL_OK);
    assert_int_equal(kl_settings_of(cfg)->server.port, 1234);
    assert_int_equal(cfg->nwarnings, 3);
    assert_string_equal(cfg->warnings[0],
                        "g.yaml:2: unknown option \"hostnme\" ignored (did "
                        "you mean \"hostname\"?)");
    assert_string_equal(cfg->warnings[1], "g.yaml:5: private_key_stores: "
                                          "unknown entry key \"weird\" "
                                          "ignored");
    /* flag-only options cannot be set from the file */
    assert_string_equal(cfg->warnings[2],
                        "g.yaml:6: unknown option \"config_file\" ignored");
    assert_null(cfg->config_file);
    kl_config_free(cfg);

    /* a misspelt entry key: the nearest of dir, file, uri */
    cfg = kl_daemon_config_new();
    text = "private_key_stores:\n  - dir: /k\n    fiel: /x\n";
    assert_int_equal(kl_config_apply_yaml(cfg, "g.yaml", (const uint8_t *)text,
                                          strlen(text), errbuf, sizeof errbuf),
                     KL_OK);
    assert_int_equal(cfg->nwarnings, 1);
    assert_string_equal(cfg->warnings[0],
                        "g.yaml:3: private_key_stores: unknown entry key "
                        "\"fiel\" ignored (did you mean \"file\"?)");
    kl_config_free(cfg);
}

/* --check collects every value that does not parse (file, environment,
 * flags) and goes on; a start stops at the first. */
static void test_check_collects_every_error(void **state)
{
    const char *path = write_tmp("many.yaml", "port: 99999\n"
                                              "idle_timeout: forever\n"
                                              "loglevel: 2\n");
    char *const env[] = {"KEYLESS_SHARDS=abc", NULL};
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(
        load_args(cfg, env, "-c", path, "--workers=-5", "--check", NULL),
        KL_OK);
    assert_int_equal(cfg->nerrors, 4);
    assert_non_null(strstr(cfg->errors[0], "many.yaml:1: port: 99999 is out "
                                           "of range 1..65535"));
    assert_non_null(strstr(cfg->errors[1], "many.yaml:2: idle_timeout: "));
    assert_non_null(strstr(cfg->errors[2], "environment KEYLESS_SHARDS: "));
    assert_non_null(strstr(cfg->errors[3], "flag --workers=-5: "));
    /* the good values still apply; the bad ones keep their defaults */
    assert_int_equal(cfg->loglevel, 2);
    assert_int_equal(kl_settings_of(cfg)->server.port, 2407);
    kl_config_free(cfg);

    cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, env, "-c", path, "--workers=-5", NULL),
                     KL_E_CONFIG);
    assert_non_null(strstr(errbuf, "many.yaml:1: port: 99999"));
    assert_int_equal(cfg->nerrors, 0);
    kl_config_free(cfg);
}

static void test_empty_and_null(void **state)
{
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(kl_config_apply_yaml(cfg, "e.yaml", (const uint8_t *)"", 0,
                                          errbuf, sizeof errbuf),
                     KL_OK);
    const char *text = "port:\nauth_cert: ~\n";
    assert_int_equal(kl_config_apply_yaml(cfg, "e.yaml", (const uint8_t *)text,
                                          strlen(text), errbuf, sizeof errbuf),
                     KL_OK);
    assert_int_equal(kl_settings_of(cfg)->server.port, 2407);
    assert_string_equal(cfg->auth_cert, "server.pem");
    kl_config_free(cfg);
}

static void test_flag_and_env_errors(void **state)
{
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, tc_no_env, "--bogus", NULL), KL_E_CONFIG);
    assert_string_equal(errbuf, "unknown flag --bogus; see --help");
    kl_config_free(cfg);

    /* a misspelt flag: the nearest one (core/suggest.h) */
    cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, tc_no_env, "--listen-adress=::", NULL),
                     KL_E_CONFIG);
    assert_string_equal(errbuf, "unknown flag --listen-adress; did you mean "
                                "--listen-address? see --help");
    kl_config_free(cfg);

    cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, tc_no_env, "--bogus=1", NULL), KL_E_CONFIG);
    assert_string_equal(errbuf, "unknown flag --bogus; see --help");
    kl_config_free(cfg);

    cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, tc_no_env, "--port", NULL), KL_E_CONFIG);
    assert_string_equal(errbuf, "flag --port: needs a value (PORT)");
    kl_config_free(cfg);

    cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, tc_no_env, "--port", "0", NULL),
                     KL_E_CONFIG);
    assert_string_equal(errbuf,
                        "flag --port: port: 0 is out of range 1..65535");
    kl_config_free(cfg);

    cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, tc_no_env, "serve", NULL), KL_E_CONFIG);
    assert_string_equal(errbuf, "unexpected argument \"serve\"; options are "
                                "given as flags (see --help)");
    kl_config_free(cfg);

    char *env[] = {"KEYLESS_PORT=x1", NULL};
    cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, env, NULL), KL_E_CONFIG);
    assert_string_equal(errbuf, "environment KEYLESS_PORT: port: \"x1\" is "
                                "not an integer; use a number in 1..65535");
    kl_config_free(cfg);

    cfg = kl_daemon_config_new();
    assert_int_equal(
        load_args(cfg, tc_no_env, "-c", "/nonexistent/k.yaml", NULL),
        KL_E_CONFIG);
    assert_string_equal(errbuf, "/nonexistent/k.yaml: cannot open the "
                                "configuration file: No such file or "
                                "directory");
    kl_config_free(cfg);

    /* a bad file value is reported even if a flag would override it: the
     * file is wrong and the operator should know */
    const char *path = write_tmp("bad.yaml", "port: 99999\n");
    cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, tc_no_env, "-c", path, "--port", "5", NULL),
                     KL_E_CONFIG);
    char want[256];
    snprintf(want, sizeof want, "%s:1: port: 99999 is out of range 1..65535",
             path);
    assert_string_equal(errbuf, want);
    kl_config_free(cfg);
}

/* The test hook --test-delay is gone (tests get slow keys from test-only
 * code: tests/support/slowkey.h): the flag is unknown like any other. */
static void test_no_test_delay(void **state)
{
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(
        load_args(cfg, tc_no_env,
                  "--test-delay=D9C69B8E23ABBA7C26FD5D0E282F3DD679741036:250",
                  NULL),
        KL_E_CONFIG);
    assert_non_null(strstr(errbuf, "--test-delay"));
    assert_null(kl_config_find(&kl_daemon_options, "test_delay"));
    kl_config_free(cfg);
}

static void test_help_generated(void **state)
{
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, tc_no_env, "--help", NULL), KL_OK);
    assert_true(cfg->help);
    kl_config_free(cfg);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    kl_config_usage(&kl_daemon_options, f, "keylessd");
    fclose(f);
    /* every option with a flag and every variable appears */
    size_t n;
    const kl_option *o = kl_daemon_options.rows;
    n = kl_daemon_options.count;
    for (size_t i = 0; i < n; i++) {
        char want[96];
        if (o[i].flag) {
            snprintf(want, sizeof want, "--%s", o[i].flag);
            assert_non_null(strstr(text, want));
        }
        if (o[i].env)
            assert_non_null(strstr(text, o[i].env));
    }
    assert_non_null(strstr(text, "(default: 2407)"));
    assert_non_null(strstr(text, "TEST ONLY"));
    free(text);
}

/* The defaults come from the modules' structs (docs/DESIGN.md, "The
 * map"), not from text in the rows: each one, as --help prints it, must
 * be a value the option accepts (within its bounds) and read back the
 * same - a module default outside the table's bounds fails here. */
static void test_defaults_are_valid_values(void **state)
{
    const kl_opt_table *t = &kl_daemon_options;
    kl_config *def = kl_daemon_config_new(), *back = kl_daemon_config_new();
    assert_non_null(def);
    assert_non_null(back);
    size_t shown = 0;
    for (size_t i = 0; i < t->count; i++) {
        const kl_option *o = &t->rows[i];
        char text[256], a[256], b[256];
        if (!kl_config_default_text(t, o, text, sizeof text))
            continue;
        shown++;
        if (kl_opt_set(back, o, text, errbuf, sizeof errbuf) != KL_OK)
            fail_msg("default of %s: %s", o->name, errbuf);
        kl_config_value_text(def, o, a, sizeof a);
        kl_config_value_text(back, o, b, sizeof b);
        if (strcmp(a, b) != 0)
            fail_msg("default of %s: \"%s\" reads back as %s, not %s", o->name,
                     text, b, a);
    }
    /* every option but the modes, the stores and unset strings */
    assert_true(shown > 60);
    /* one from each module's struct, as documented */
    char text[64];
    assert_true(kl_config_default_text(
        t, kl_config_find(t, "router_conn_idle_timeout"), text, sizeof text));
    assert_string_equal(text, "60s");
    assert_true(kl_config_default_text(t, kl_config_find(t, "max_inflight"),
                                       text, sizeof text));
    assert_string_equal(text, "65536");
    assert_true(kl_config_default_text(t, kl_config_find(t, "metrics_address"),
                                       text, sizeof text));
    assert_string_equal(text, "127.0.0.1");
    assert_false(kl_config_default_text(t, kl_config_find(t, "router_table"),
                                        text, sizeof text));
    kl_config_free(def);
    kl_config_free(back);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_yaml_file),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_flag_spellings),
        cmocka_unit_test(test_key_dirs_and_files),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_bools),
        cmocka_unit_test(test_yaml_errors),
        cmocka_unit_test(test_malformed_yaml_line),
        cmocka_unit_test(test_unknown_key_is_warning),
        cmocka_unit_test(test_check_collects_every_error),
        cmocka_unit_test(test_empty_and_null),
        cmocka_unit_test(test_flag_and_env_errors),
        cmocka_unit_test(test_no_test_delay),
        cmocka_unit_test(test_help_generated),
        cmocka_unit_test(test_defaults_are_valid_values),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
