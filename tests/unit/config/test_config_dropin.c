/* SPDX-License-Identifier: Apache-2.0 */
/* src/config as a drop-in for the reference: every key of the
 * reference's gokeyless.yaml with its default, KEYLESS_* for every option,
 * both flag spellings and the reference's short flags, the file search
 * (.yaml/.yml/.json, then /etc/keyless), key stores from the environment,
 * current_time, tracing_address mapping, sign_timeout, --output-config with
 * secrets redacted, and the generated option reference. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "cfgtest.h"
#include "testutil.h"
#include "core/time.h"

#define SEC 1000000000ull

static char tmpdir[64], dir_a[96], dir_b[96];
static char errbuf[1024];
static char *const no_env[] = {NULL};

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void remove_file(const char *dir, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

static int setup(void **state)
{
    strcpy(tmpdir, "/tmp/kl-dropin-XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    snprintf(dir_a, sizeof dir_a, "%s/a", tmpdir);
    snprintf(dir_b, sizeof dir_b, "%s/b", tmpdir);
    assert_int_equal(mkdir(dir_a, 0700), 0);
    assert_int_equal(mkdir(dir_b, 0700), 0);
    static const char *dirs[3];
    dirs[0] = dir_a;
    dirs[1] = dir_b;
    kl_config_set_search_dirs(dirs);
    return 0;
}

static int teardown(void **state)
{
    kl_config_set_search_dirs(NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd);
}

static kl_status load_v(kl_config *cfg, char *const *env, char **args)
{
    return tc_load(cfg, env, (const char *const *)args, errbuf, sizeof errbuf);
}

#define LOAD(cfg, env, ...) load_v(cfg, env, (char *[]){__VA_ARGS__, NULL})

/* The reference's defaults for every key of its gokeyless.yaml. */
static void test_reference_defaults(void **state)
{
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(load_v(cfg, no_env, NULL), KL_OK);
    assert_int_equal(cfg->loglevel, 1);
    assert_null(cfg->hostname);
    assert_null(cfg->zone_id);
    assert_null(cfg->origin_ca_api_key);
    assert_string_equal(cfg->init_endpoint,
                        "https://api.cloudflare.com/client/v4/certificates/");
    assert_string_equal(cfg->auth_cert, "server.pem");
    assert_string_equal(cfg->auth_key, "server-key.pem");
    assert_string_equal(cfg->auth_csr, "server.csr");
    assert_string_equal(cfg->cloudflare_ca_cert, "keyless_cacert.pem");
    assert_int_equal(cfg->nstores, 0);
    assert_int_equal(kl_settings_of(cfg)->server.port, 2407);
    assert_int_equal(kl_settings_of(cfg)->metrics_http.port, 2406);
    assert_null(cfg->pid_file);
    assert_false(cfg->has_current_time);
    assert_false(cfg->tracing_enabled);
    assert_string_equal(cfg->tracing_address, "localhost:6831");
    assert_true(kl_settings_of(cfg)->tracing.sample_rate == 0.0);
    assert_true(cfg->sign_timeout_ns == 0);
    assert_int_equal(cfg->sign_retry_count, 0);
    assert_true(cfg->watch_key_dirs);
    assert_true(cfg->watch_delay_ns == 500 * KL_NS_PER_MS);
    assert_false(cfg->auto_renew);
    assert_null(cfg->loaded_file);
    assert_int_equal(cfg->nwarnings, 0);
    kl_config_free(cfg);
}

/* A full reference file loads without a single warning. */
static void test_reference_file(void **state)
{
    write_file(dir_a, "gokeyless.yaml",
               "loglevel: 2\n"
               "hostname: keyserver.example.com\n"
               "zone_id: 0123456789abcdef0123456789abcdef\n"
               "origin_ca_api_key: v1.0-secret\n"
               "init_endpoint: http://127.0.0.1:9/certs/\n"
               "auth_cert: a.pem\n"
               "auth_key: a-key.pem\n"
               "auth_csr: a.csr\n"
               "cloudflare_ca_cert: ca.pem\n"
               "private_key_stores:\n"
               "  - dir: /etc/keyless/keys\n"
               "  - file: /etc/keyless/one.key\n"
               "  - uri: pkcs11:token=t;object=k?module-path=/m.so\n"
               "port: 3407\n"
               "metrics_port: 3406\n"
               "pid_file: /run/keyless.pid\n"
               "current_time: 2030-01-02T15:04:05Z\n"
               "tracing_enabled: false\n"
               "tracing_address: jaeger:6831\n"
               "tracing_sample_rate: 0.25\n"
               "sign_timeout: 2s\n"
               "sign_retry_count: 0\n");
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(load_v(cfg, no_env, NULL), KL_OK);
    char want[256];
    snprintf(want, sizeof want, "%s/gokeyless.yaml", dir_a);
    assert_string_equal(cfg->loaded_file, want);
    assert_int_equal(cfg->nwarnings, 0);
    assert_int_equal(cfg->loglevel, 2);
    assert_string_equal(cfg->hostname, "keyserver.example.com");
    assert_string_equal(cfg->zone_id, "0123456789abcdef0123456789abcdef");
    assert_string_equal(cfg->origin_ca_api_key, "v1.0-secret");
    assert_string_equal(cfg->init_endpoint, "http://127.0.0.1:9/certs/");
    assert_string_equal(cfg->auth_csr, "a.csr");
    assert_int_equal(cfg->nstores, 3);
    assert_int_equal(kl_settings_of(cfg)->server.port, 3407);
    assert_int_equal(kl_settings_of(cfg)->metrics_http.port, 3406);
    assert_string_equal(cfg->pid_file, "/run/keyless.pid");
    assert_true(cfg->has_current_time);
    assert_true(cfg->current_time_unix == 1893596645);
    assert_true(kl_settings_of(cfg)->tracing.sample_rate == 0.25);
    assert_string_equal(cfg->tracing_endpoint, "http://jaeger:4318/v1/traces");
    assert_true(cfg->sign_timeout_ns == 2 * SEC);
    kl_config_free(cfg);
    remove_file(dir_a, "gokeyless.yaml");
}

/* Every option: KEYLESS_<NAME> (modes excepted) and --<name> with '-'. */
static void test_every_option_everywhere(void **state)
{
    size_t n;
    const kl_option *o = kl_daemon_options.rows;
    n = kl_daemon_options.count;
    for (size_t i = 0; i < n; i++) {
        char env[96] = "KEYLESS_", flag[96];
        size_t k = strlen(env);
        for (const char *p = o[i].name; *p; p++)
            env[k++] = (char)toupper((unsigned char)*p);
        env[k] = 0;
        snprintf(flag, sizeof flag, "%s", o[i].name);
        for (char *p = flag; *p; p++)
            if (*p == '_')
                *p = '-';
        assert_non_null(o[i].flag);
        assert_string_equal(o[i].flag, flag);
        assert_non_null(o[i].help);
        assert_non_null(o[i].group);
        if (o[i].type == KL_OPT_MODE)
            assert_null(o[i].env);
        else
            assert_string_equal(o[i].env, env);
    }
    /* the reference's keys are all there */
    static const char *const ref[] = {"loglevel",
                                      "hostname",
                                      "zone_id",
                                      "origin_ca_api_key",
                                      "init_endpoint",
                                      "auth_cert",
                                      "auth_key",
                                      "auth_csr",
                                      "cloudflare_ca_cert",
                                      "private_key_stores",
                                      "port",
                                      "metrics_port",
                                      "pid_file",
                                      "current_time",
                                      "tracing_enabled",
                                      "tracing_address",
                                      "tracing_sample_rate",
                                      "sign_timeout",
                                      "sign_retry_count"};
    for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
        const kl_option *r = kl_config_find(&kl_daemon_options, ref[i]);
        assert_non_null(r);
        assert_int_equal(r->flags & KL_OPTF_NO_YAML, 0);
    }
}

static void test_env_for_new_options(void **state)
{
    char *env[] = {"KEYLESS_HOSTNAME=h.example",
                   "KEYLESS_METRICS_PORT=0",
                   "KEYLESS_TRACING_SAMPLE_RATE=1",
                   "KEYLESS_SIGN_TIMEOUT=750ms",
                   "KEYLESS_CURRENT_TIME=2001-02-03T04:05:06+01:00",
                   "KEYLESS_PRIVATE_KEY_STORES=[{dir: /k1}, {file: /k2.key}]",
                   NULL};
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(load_v(cfg, env, NULL), KL_OK);
    assert_string_equal(cfg->hostname, "h.example");
    assert_int_equal(kl_settings_of(cfg)->metrics_http.port, 0);
    assert_true(kl_settings_of(cfg)->tracing.sample_rate == 1.0);
    assert_true(cfg->sign_timeout_ns == 750 * KL_NS_PER_MS);
    assert_true(cfg->current_time_unix == 981169506);
    assert_int_equal(cfg->nstores, 2);
    assert_int_equal(cfg->stores[0].kind, KL_STORE_DIR);
    assert_string_equal(cfg->stores[0].path, "/k1");
    assert_int_equal(cfg->stores[1].kind, KL_STORE_FILE);
    kl_config_free(cfg);
}

/* Flags over the environment over the file, for the store list too. */
static void test_stores_precedence(void **state)
{
    write_file(dir_a, "gokeyless.yml", "private_key_stores:\n  - dir: /f\n");
    char *env[] = {"KEYLESS_PRIVATE_KEY_STORES=[{dir: /e}]", NULL};
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(load_v(cfg, env, NULL), KL_OK);
    assert_int_equal(cfg->nstores, 1);
    assert_string_equal(cfg->stores[0].path, "/e");
    kl_config_free(cfg);
    cfg = kl_daemon_config_new();
    assert_int_equal(
        LOAD(cfg, env, "--private_key_stores", "[{uri: 'pkcs11:token=x'}]"),
        KL_OK);
    assert_int_equal(cfg->nstores, 1);
    assert_int_equal(cfg->stores[0].kind, KL_STORE_URI);
    kl_config_free(cfg);
    /* errors name the variable, then the option and the fix */
    char *bad[] = {"KEYLESS_PRIVATE_KEY_STORES=[{dir: /a, file: /b}]", NULL};
    cfg = kl_daemon_config_new();
    assert_int_equal(load_v(cfg, bad, NULL), KL_E_CONFIG);
    assert_string_equal(errbuf,
                        "environment KEYLESS_PRIVATE_KEY_STORES: "
                        "private_key_stores: an entry has both dir and file; "
                        "give exactly one per entry (use one \"- \" entry "
                        "each)");
    kl_config_free(cfg);
    char *bad2[] = {"KEYLESS_PRIVATE_KEY_STORES=/etc/keys", NULL};
    cfg = kl_daemon_config_new();
    assert_int_equal(load_v(cfg, bad2, NULL), KL_E_CONFIG);
    assert_string_equal(errbuf,
                        "environment KEYLESS_PRIVATE_KEY_STORES: "
                        "private_key_stores: must be a list, e.g. "
                        "\"private_key_stores:\\n  - dir: /etc/keyless/keys\" "
                        "or [{dir: /etc/keyless/keys}]");
    kl_config_free(cfg);
    remove_file(dir_a, "gokeyless.yml");
}

/* The reference's short flags: -c file, -l loglevel, -v, -h, -d, -o. */
static void test_short_flags(void **state)
{
    write_file(tmpdir, "named.yaml", "port: 4000\n");
    char path[256];
    snprintf(path, sizeof path, "%s/named.yaml", tmpdir);
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(LOAD(cfg, no_env, "-c", path, "-l", "3", "-d", "-o"),
                     KL_OK);
    assert_int_equal(kl_settings_of(cfg)->server.port, 4000);
    assert_int_equal(cfg->loglevel, 3);
    assert_true(cfg->keystore_debug);
    assert_true(cfg->output_config);
    kl_config_free(cfg);
    cfg = kl_daemon_config_new();
    assert_int_equal(LOAD(cfg, no_env, "-l0", "-v"), KL_OK);
    assert_int_equal(cfg->loglevel, 0);
    assert_true(cfg->version);
    kl_config_free(cfg);
    cfg = kl_daemon_config_new();
    assert_int_equal(LOAD(cfg, no_env, "-h"), KL_OK);
    assert_true(cfg->help);
    kl_config_free(cfg);
    cfg = kl_daemon_config_new();
    assert_int_equal(LOAD(cfg, no_env, "--zone_id=z", "--pid-file", "/p",
                          "--metrics_port=9", "--config-only"),
                     KL_OK);
    assert_string_equal(cfg->zone_id, "z");
    assert_string_equal(cfg->pid_file, "/p");
    assert_int_equal(kl_settings_of(cfg)->metrics_http.port, 9);
    assert_true(cfg->config_only);
    kl_config_free(cfg);
    cfg = kl_daemon_config_new();
    assert_int_equal(LOAD(cfg, no_env, "-x"), KL_E_CONFIG);
    assert_string_equal(errbuf, "unknown flag -x; see --help");
    kl_config_free(cfg);
    cfg = kl_daemon_config_new();
    assert_int_equal(LOAD(cfg, no_env, "--config-only", "--manual-activation"),
                     KL_E_CONFIG);
    assert_string_equal(errbuf, "--manual-activation and --config-only "
                                "exclude each other; give one");
    kl_config_free(cfg);
}

/* The search: gokeyless.yaml, .yml, .json, then keylessd.*, first in the
 * working directory, then in /etc/keyless (dir_b here). */
static void test_file_search(void **state)
{
    kl_config *cfg = kl_daemon_config_new();
    write_file(dir_b, "gokeyless.yaml", "port: 2\n");
    assert_int_equal(load_v(cfg, no_env, NULL), KL_OK);
    assert_int_equal(kl_settings_of(cfg)->server.port,
                     2); /* only the second directory has one */
    kl_config_free(cfg);

    /* JSON (with tabs) is YAML; the first directory wins */
    write_file(dir_a, "gokeyless.json",
               "{\n\t\"port\": 3,\n\t\"private_key_stores\": "
               "[{\"dir\": \"/j\"}],\n\t\"tracing_enabled\": true\n}\n");
    cfg = kl_daemon_config_new();
    assert_int_equal(load_v(cfg, no_env, NULL), KL_OK);
    assert_int_equal(kl_settings_of(cfg)->server.port, 3);
    assert_int_equal(cfg->nstores, 1);
    assert_string_equal(cfg->stores[0].path, "/j");
    assert_true(cfg->tracing_enabled);
    /* the tracing mapping warns, naming the new endpoint */
    assert_int_equal(cfg->nwarnings, 1);
    assert_string_equal(cfg->warnings[0],
                        "tracing_address: \"localhost:6831\" is a Jaeger "
                        "agent address (the reference's); keylessd exports "
                        "OTLP/HTTP and uses "
                        "http://localhost:4318/v1/traces instead (set "
                        "tracing_address to an http:// URL to choose)");
    kl_config_free(cfg);

    /* two candidates in one directory: the first is read, a warning */
    write_file(dir_a, "keylessd.yaml", "port: 4\n");
    cfg = kl_daemon_config_new();
    assert_int_equal(load_v(cfg, no_env, NULL), KL_OK);
    assert_int_equal(kl_settings_of(cfg)->server.port, 3);
    char want[512];
    snprintf(want, sizeof want,
             "%s/keylessd.yaml: ignored: %s/gokeyless.json is read instead "
             "(keep one configuration file, or name it with -c)",
             dir_a, dir_a);
    assert_string_equal(cfg->warnings[0], want);
    kl_config_free(cfg);

    remove_file(dir_a, "gokeyless.json");
    cfg = kl_daemon_config_new();
    assert_int_equal(load_v(cfg, no_env, NULL), KL_OK);
    assert_int_equal(kl_settings_of(cfg)->server.port,
                     4); /* keylessd.yaml accepted */
    kl_config_free(cfg);
    remove_file(dir_a, "keylessd.yaml");
    remove_file(dir_b, "gokeyless.yaml");
}

static void expect_load_error(char **args, const char *msg)
{
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(load_v(cfg, no_env, args), KL_E_CONFIG);
    assert_string_equal(errbuf, msg);
    kl_config_free(cfg);
}

static void test_value_errors(void **state)
{
    /* log_format */
    expect_load_error((char *[]){"--log-format=xml", NULL},
                      "log_format: \"xml\" is not a log format; write "
                      "log_format: text or log_format: json");
    expect_load_error((char *[]){"--current-time=2030-02-30T00:00:00Z", NULL},
                      "current_time: \"2030-02-30T00:00:00Z\" is not an RFC "
                      "3339 time; write e.g. 2030-01-02T15:04:05Z");
    expect_load_error((char *[]){"--current-time=2030-01-02 15:04:05", NULL},
                      "current_time: \"2030-01-02 15:04:05\" is not an RFC "
                      "3339 time; write e.g. 2030-01-02T15:04:05Z");
    expect_load_error((char *[]){"--tracing-sample-rate=1.5", NULL},
                      "flag --tracing-sample-rate=1.5: tracing_sample_rate: "
                      "1.5 is out of range 0..1");
    expect_load_error((char *[]){"--tracing-sample-rate=half", NULL},
                      "flag --tracing-sample-rate=half: tracing_sample_rate: "
                      "\"half\" is not a number; use a decimal number in "
                      "0..1, e.g. 0.01");
    expect_load_error((char *[]){"--auth-cert=", NULL},
                      "auth_cert: must name a file; remove the empty setting "
                      "to use the default server.pem");
    expect_load_error((char *[]){"--sign-timeout=5", NULL},
                      "flag --sign-timeout=5: sign_timeout: \"5\" is not a "
                      "duration; write it with a unit, e.g. 10s, 500ms or "
                      "2m");
    expect_load_error((char *[]){"-c", "", NULL},
                      "config_file: empty file name; name the YAML file or "
                      "leave the option out");
}

static void test_tracing_and_compat(void **state)
{
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(LOAD(cfg, no_env, "--tracing-enabled",
                          "--tracing-address=https://otel:4318/v1/traces",
                          "--sign-retry-count=2"),
                     KL_OK);
    assert_string_equal(cfg->tracing_endpoint, "https://otel:4318/v1/traces");
    /* no mapping warning for a URL; the no-effect note (traces are
     * exported now: no note about tracing itself) */
    assert_int_equal(cfg->nwarnings, 1);
    assert_string_equal(cfg->warnings[0], "sign_retry_count: 2 has no effect "
                                          "in keylessd (see --help)");
    kl_config_free(cfg);
    cfg = kl_daemon_config_new();
    assert_int_equal(LOAD(cfg, no_env, "--tracing-address=[::1]:6831"), KL_OK);
    assert_string_equal(cfg->tracing_endpoint, "http://[::1]:4318/v1/traces");
    assert_int_equal(cfg->nwarnings, 0); /* tracing is off: no warning */
    kl_config_free(cfg);
}

static char *capture_yaml(const kl_config *cfg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    kl_config_write_yaml(cfg, f);
    fclose(f);
    return text;
}

/* --output-config: YAML that reads back to the same configuration, with
 * the API key and PINs redacted. */
static void test_output_config(void **state)
{
    kl_config *cfg = kl_daemon_config_new();
    char *env[] = {"KEYLESS_ORIGIN_CA_API_KEY=v1.0-topsecret", NULL};
    assert_int_equal(
        LOAD(cfg, env, "--private-key-stores",
             "[{dir: \"/k \\\"q\\\"\"}, {uri: "
             "'pkcs11:token=t?module-path=/m.so&pin-value=1234&max-sessions=2'"
             "}]",
             "--port=9999", "--idle-timeout=90s", "--hostname=h",
             "--tracing-sample-rate=0.5"),
        KL_OK);
    char *text = capture_yaml(cfg);
    assert_null(strstr(text, "topsecret"));
    assert_null(strstr(text, "1234"));
    assert_non_null(strstr(text, "origin_ca_api_key: \"REDACTED\"\n"));
    assert_non_null(strstr(text, "pin-value=REDACTED&max-sessions=2"));
    assert_non_null(strstr(text, "port: 9999\n"));
    assert_non_null(strstr(text, "idle_timeout: 1m30s\n"));
    assert_non_null(strstr(text, "pid_file: ~\n"));

    kl_config *back = kl_daemon_config_new();
    assert_int_equal(kl_config_apply_yaml(back, "out.yaml",
                                          (const uint8_t *)text, strlen(text),
                                          errbuf, sizeof errbuf),
                     KL_OK);
    assert_int_equal(back->nwarnings, 0);
    size_t n;
    const kl_option *o = kl_daemon_options.rows;
    n = kl_daemon_options.count;
    for (size_t i = 0; i < n; i++) {
        if ((o[i].flags & (KL_OPTF_NO_YAML | KL_OPTF_SECRET)) ||
            o[i].type == KL_OPT_STORES)
            continue;
        char a[512], b[512];
        kl_config_value_text(cfg, &o[i], a, sizeof a);
        kl_config_value_text(back, &o[i], b, sizeof b);
        assert_string_equal(a, b);
    }
    assert_int_equal(back->nstores, 2);
    assert_string_equal(back->stores[0].path, "/k \"q\"");
    assert_string_equal(back->stores[1].path,
                        "pkcs11:token=t?module-path=/m.so&pin-value=REDACTED"
                        "&max-sessions=2");
    free(text);
    kl_config_free(back);
    kl_config_free(cfg);

    char *r = kl_config_redact_uri("pkcs11:id=%01?pin-value=x");
    assert_string_equal(r, "pkcs11:id=%01?pin-value=REDACTED");
    free(r);
}

/* The Markdown reference names every option, flag and variable, and marks
 * the reloadable ones. */
static void test_markdown(void **state)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    kl_config_usage_markdown(&kl_daemon_options, f);
    fclose(f);
    size_t n;
    const kl_option *o = kl_daemon_options.rows;
    n = kl_daemon_options.count;
    for (size_t i = 0; i < n; i++) {
        char want[128];
        snprintf(want, sizeof want, "`--%s", o[i].flag);
        assert_non_null(strstr(text, want));
        if (o[i].env)
            assert_non_null(strstr(text, o[i].env));
    }
    assert_non_null(strstr(text, "| `port` | `--port PORT` | `KEYLESS_PORT` "
                                 "| integer | `2407` | - | "));
    assert_non_null(strstr(text, "| `auth_cert` | `--auth-cert PATH` | "
                                 "`KEYLESS_AUTH_CERT` | string | "
                                 "`server.pem` | yes | "));
    assert_non_null(strstr(text, "HOST:PORT\\|URL"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_defaults),
        cmocka_unit_test(test_reference_file),
        cmocka_unit_test(test_every_option_everywhere),
        cmocka_unit_test(test_env_for_new_options),
        cmocka_unit_test(test_stores_precedence),
        cmocka_unit_test(test_short_flags),
        cmocka_unit_test(test_file_search),
        cmocka_unit_test(test_value_errors),
        cmocka_unit_test(test_tracing_and_compat),
        cmocka_unit_test(test_output_config),
        cmocka_unit_test(test_markdown),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
