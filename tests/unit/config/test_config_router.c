/* SPDX-License-Identifier: Apache-2.0 */
/* src/config: the geo-routing options (docs/ROUTING.md) and the
 * metrics address - defaults, the three sources, bounds and the
 * cross-check of the timeout bounds, with their exact messages. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
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
    tc_setup_dir(tmpdir, sizeof tmpdir, "config-router");
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
    (void)state;
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, tc_no_env, NULL), KL_OK);
    assert_null(kl_settings_of(cfg)->router.table_file); /* routing off */
    assert_null(kl_settings_of(cfg)->router.cert_file);
    assert_null(kl_settings_of(cfg)->router.key_file);
    assert_null(kl_settings_of(cfg)->router.ca_file);
    assert_null(kl_settings_of(cfg)->router.server_name);
    assert_int_equal(kl_settings_of(cfg)->router.default_deadline_ns, 2 * SEC);
    assert_int_equal(kl_settings_of(cfg)->router.max_attempts, 3);
    assert_int_equal(kl_settings_of(cfg)->router.max_hops, 3);
    assert_int_equal(kl_settings_of(cfg)->router.timeout_floor_ns,
                     20 * KL_NS_PER_MS);
    assert_int_equal(kl_settings_of(cfg)->router.timeout_ceiling_ns, 2 * SEC);
    assert_int_equal(kl_settings_of(cfg)->router.timeout_p99_factor, 10);
    assert_int_equal(kl_settings_of(cfg)->router.ping_interval_ns, 1 * SEC);
    assert_int_equal(kl_settings_of(cfg)->router.ewma_weight_pct, 20);
    assert_int_equal(kl_settings_of(cfg)->router.latency_tolerance_pct, 10);
    assert_int_equal(kl_settings_of(cfg)->router.reload_poll_ns, 1 * SEC);
    assert_int_equal(kl_settings_of(cfg)->router.dns_refresh_ns, 30 * SEC);
    assert_int_equal(kl_settings_of(cfg)->router.connect_timeout_ns, 2 * SEC);
    assert_int_equal(kl_settings_of(cfg)->router.conn_inflight_threshold, 256);
    assert_int_equal(kl_settings_of(cfg)->router.max_conns_per_remote, 8);
    assert_int_equal(kl_settings_of(cfg)->router.max_inflight_per_conn, 1024);
    assert_int_equal(kl_settings_of(cfg)->router.max_fds, 1024);
    assert_int_equal(kl_settings_of(cfg)->router.max_inflight, 65536);
    assert_int_equal(kl_settings_of(cfg)->metrics_http.port, 2406);
    /* loopback, not listen_address (docs/METRICS.md) */
    assert_string_equal(kl_settings_of(cfg)->metrics_http.address, "127.0.0.1");
    kl_config_free(cfg);
}

static void test_sources(void **state)
{
    (void)state;
    const char *file =
        write_tmp("routed.yaml", "router_table: /etc/keyless/"
                                 "routes.yaml\n"
                                 "router_max_attempts: 5\n"
                                 "router_timeout_floor: 50ms\n"
                                 "router_reload_poll: 0s\n"
                                 "router_cert: /etc/r.pem\n"
                                 "metrics_address: \"127.0.0.1\"\n"
                                 "metrics_port: 9106\n");
    char cflag[160];
    snprintf(cflag, sizeof cflag, "--config-file=%s", file);
    char *env[] = {"KEYLESS_ROUTER_MAX_HOPS=5", "KEYLESS_ROUTER_MAX_ATTEMPTS=4",
                   NULL};
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, env, cflag, "--router-max-attempts=2",
                               "--router_ping_interval=250ms", "--metrics-port",
                               "0", NULL),
                     KL_OK);
    assert_string_equal(kl_settings_of(cfg)->router.table_file,
                        "/etc/keyless/routes.yaml");
    assert_string_equal(kl_settings_of(cfg)->router.cert_file, "/etc/r.pem");
    assert_int_equal(kl_settings_of(cfg)->router.max_attempts,
                     2); /* flag > env > file */
    assert_int_equal(kl_settings_of(cfg)->router.max_hops, 5); /* env */
    assert_int_equal(kl_settings_of(cfg)->router.timeout_floor_ns,
                     50 * KL_NS_PER_MS);
    assert_int_equal(kl_settings_of(cfg)->router.reload_poll_ns,
                     0); /* SIGHUP only */
    assert_int_equal(kl_settings_of(cfg)->router.ping_interval_ns,
                     250 * KL_NS_PER_MS);
    assert_string_equal(kl_settings_of(cfg)->metrics_http.address, "127.0.0.1");
    assert_int_equal(kl_settings_of(cfg)->metrics_http.port,
                     0); /* the endpoint is off */

    /* --output-config writes them back */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    kl_config_write_yaml(cfg, f);
    fclose(f);
    assert_non_null(
        strstr(text, "router_table: \"/etc/keyless/routes.yaml\"\n"));
    assert_non_null(strstr(text, "router_max_hops: 5\n"));
    assert_non_null(strstr(text, "router_timeout_floor: 50ms\n"));
    assert_non_null(strstr(text, "metrics_address: \"127.0.0.1\"\n"));
    free(text);
    kl_config_free(cfg);
}

static void expect_error(const char *flag, const char *message)
{
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, tc_no_env, (char *)flag, NULL),
                     KL_E_CONFIG);
    if (!strstr(errbuf, message))
        fail_msg("%s: got \"%s\", expected \"%s\"", flag, errbuf, message);
    kl_config_free(cfg);
}

static void test_bounds(void **state)
{
    (void)state;
    expect_error("--router-max-attempts=9", "router_max_attempts");
    expect_error("--router-max-attempts=0", "router_max_attempts");
    expect_error("--router-max-hops=17", "router_max_hops");
    expect_error("--router-ewma-weight=101", "router_ewma_weight");
    expect_error("--router-max-conns-per-remote=65", "router_max_conns");
    expect_error("--router-timeout-floor=0s", "router_timeout_floor");
    expect_error("--router-ping-interval=fast", "is not a duration");
    expect_error("--router-max-fds=3", "router_max_fds");
}

static void test_timeout_bounds_cross_check(void **state)
{
    (void)state;
    kl_config *cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, tc_no_env, "--router-timeout-floor=500ms",
                               "--router-timeout-ceiling=100ms", NULL),
                     KL_E_CONFIG);
    assert_string_equal(errbuf, "router_timeout_ceiling: 100ms is below "
                                "router_timeout_floor 500ms; raise the "
                                "ceiling or lower the floor");
    kl_config_free(cfg);
    cfg = kl_daemon_config_new();
    assert_int_equal(load_args(cfg, tc_no_env, "--router-timeout-floor=100ms",
                               "--router-timeout-ceiling=100ms", NULL),
                     KL_OK);
    kl_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_sources),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_timeout_bounds_cross_check),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
