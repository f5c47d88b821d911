/* SPDX-License-Identifier: Apache-2.0 */
/* Golden scrape: every reference series with its exact name,
 * label names and values and bucket boundaries, so existing dashboards and
 * alerts keep working; then keylessd's own series and process_*. */
#include "testutil.h"

#include <time.h>

#include "keyless/protocol.h"
#include "mtest.h"
#include "core/time.h"

static void record_reference(kl_metrics_local *l)
{
    for (int i = 0; i < 3; i++)
        kl_metrics_request(l, KL_OP_ECDSA_SIGN_SHA256);
    kl_metrics_request(l, KL_OP_RSA_PSS_SIGN_SHA256);
    kl_metrics_request(l, 0x99);
    /* 50 us and exactly 100 us land in le="0.0001" (inclusive), 150 us in
     * le="0.0002". */
    kl_metrics_exec_time(l, KL_OP_ECDSA_SIGN_SHA256, KL_OK, 50000);
    kl_metrics_exec_time(l, KL_OP_ECDSA_SIGN_SHA384, KL_OK, 100000);
    kl_metrics_exec_time(l, KL_OP_ECDSA_SIGN_SHA256, KL_OK, 150000);
    /* 2 s: only +Inf. */
    kl_metrics_exec_time(l, KL_OP_RSA_PSS_SIGN_SHA256, KL_E_KEY_NOT_FOUND,
                         2000 * KL_NS_PER_MS);
    kl_metrics_exec_time(l, 0x99, kl_status_from_p6(0x20), /* beyond P6 */
                         1 * KL_NS_PER_MS);
    kl_metrics_total_time(l, KL_OP_PING, KL_OK, 3 * KL_NS_PER_MS);
    kl_metrics_key_load_time(l, 1000);
    kl_metrics_key_load_time(l, 400000);
    kl_metrics_failed_connection(l);
    kl_metrics_failed_connection(l);
}

static void test_reference_series(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    kl_metrics_local *a = kl_metrics_local_new(m, 0);
    kl_metrics_local *b = kl_metrics_local_new(m, -1);
    record_reference(a);
    kl_metrics_request(b, KL_OP_ECDSA_SIGN_SHA256); /* summed over slots */
    char *s = mt_scrape(m);

    mt_assert_line(s, "# TYPE keyless_requests counter");
    mt_assert_line(s, "keyless_requests{opcode=\"OpECDSASignSHA256\"} 4");
    mt_assert_line(s, "keyless_requests{opcode=\"OpRSAPSSSignSHA256\"} 1");
    mt_assert_line(s, "keyless_requests{opcode=\"Op(153)\"} 1");
    mt_assert_no_line(s, "keyless_requests{opcode=\"OpPing\"} 0");

    const char *ex = "keyless_request_exec_duration_per_opcode";
    mt_assert_line(s, "# TYPE %s histogram", ex);
    unsigned ok[16] = {2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3};
    mt_assert_hist(s, ex, "error=\"no error\",type=\"ecdsa\",", ok, "0.0003");
    unsigned inf[16] = {[15] = 1};
    mt_assert_hist(s, ex,
                   "error=\"key not found due to no matching SKI/SNI/"
                   "ServerIP\",type=\"rsa\",",
                   inf, "2");
    unsigned ms1[16] = {0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    mt_assert_hist(s, ex, "error=\"unknown error\",type=\"unknown\",", ms1,
                   "0.001");
    /* Children never observed are absent, as in the reference. */
    if (strstr(s, "type=\"ed25519\""))
        fail_msg("unobserved child exported");

    const char *tot = "keyless_request_total_duration_per_opcode";
    mt_assert_line(s, "# TYPE %s histogram", tot);
    unsigned ms3[16] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    mt_assert_hist(s, tot, "error=\"no error\",type=\"other\",", ms3, "0.003");

    mt_assert_line(s, "# TYPE keyless_key_load_duration histogram");
    unsigned kl[16] = {1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
    mt_assert_hist(s, "keyless_key_load_duration", "", kl, "0.000401");

    mt_assert_line(s, "# TYPE keyless_failed_connection counter");
    mt_assert_line(s, "keyless_failed_connection 2");
    mt_assert_line(s, "# TYPE certificate_expiration_timestamp_seconds gauge");

    mt_assert_line(s, "# TYPE process_cpu_seconds_total counter");
    mt_assert_line(s, "# TYPE process_resident_memory_bytes gauge");
    mt_assert_line(s, "# TYPE process_open_fds gauge");
    free(s);
    kl_metrics_free(m);
}

static void count_hook(kl_metrics *m, void *arg)
{
    ++*(int *)arg;
    kl_metrics_set_queue_depth(m, 2, 9);
}

static void test_own_series(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    kl_metrics_local *sh0 = kl_metrics_local_new(m, 0);
    kl_metrics_local *sh1 = kl_metrics_local_new(m, 1);
    kl_metrics_local *w = kl_metrics_local_new(m, -1);
    int hooks = 0;
    kl_metrics_on_scrape(m, count_hook, &hooks);

    kl_metrics_inflight_add(sh0, 3);
    kl_metrics_inflight_add(sh0, -1);
    kl_metrics_inflight_add(sh1, 1);
    kl_metrics_conn_move(sh0, KL_MCONN_NONE, KL_MCONN_HANDSHAKE);
    kl_metrics_conn_move(sh0, KL_MCONN_NONE, KL_MCONN_HANDSHAKE);
    kl_metrics_conn_move(sh0, KL_MCONN_HANDSHAKE, KL_MCONN_OPEN);
    kl_metrics_conn_move(sh1, KL_MCONN_NONE, KL_MCONN_OPEN);
    kl_metrics_conn_move(sh1, KL_MCONN_OPEN, KL_MCONN_DRAINING);
    kl_metrics_conn_move(sh1, KL_MCONN_OPEN, (kl_metrics_conn)99); /* ignored */
    kl_metrics_shed(sh0, KL_SHED_QUEUE_FULL);
    kl_metrics_shed(w, KL_SHED_DEADLINE);
    kl_metrics_shed(w, KL_SHED_DEADLINE);
    kl_metrics_shed(w, (kl_metrics_shed_reason)42); /* ignored */
    kl_metrics_handshake_failed(sh1, KL_HS_FAIL_CERT);
    kl_metrics_log_suppressed(sh0, KL_LOGSUP_HANDSHAKE_FAILED);
    kl_metrics_log_suppressed(sh1, KL_LOGSUP_HANDSHAKE_FAILED);
    kl_metrics_log_suppressed(sh1, KL_LOGSUP_KINDS); /* ignored */
    kl_metrics_queue_wait(w, 1, 5 * KL_NS_PER_MS);
    kl_metrics_queue_wait(w, 3, 5 * KL_NS_PER_MS); /* no such class: ignored */
    kl_metrics_loop_busy(sh0, 1500 * KL_NS_PER_MS);
    kl_metrics_set_keys_loaded(m, 7);
    kl_metrics_set_queue_depth(m, 0, 4);
    kl_metrics_set_queue_depth(m, 7, 4); /* ignored */

    char *s = mt_scrape(m);
    assert_int_equal(hooks, 1);
    /* No reload yet: its gauges are absent, not a misleading 0. */
    if (strstr(s, "keylessd_last_reload_successful"))
        fail_msg("reload gauge before any reload");
    mt_assert_line(s, "keylessd_requests_in_flight 3");
    mt_assert_line(s, "keylessd_connections{state=\"handshake\"} 1");
    mt_assert_line(s, "keylessd_connections{state=\"open\"} 1");
    mt_assert_line(s, "keylessd_connections{state=\"draining\"} 1");
    mt_assert_line(s, "keylessd_requests_shed_total{reason=\"queue_full\"} 1");
    mt_assert_line(s, "keylessd_requests_shed_total{reason=\"deadline\"} 2");
    mt_assert_line(s,
                   "keylessd_requests_shed_total{reason=\"inflight_limit\"} 0");
    mt_assert_line(s, "keylessd_requests_shed_total{reason=\"draining\"} 0");
    mt_assert_line(
        s, "keylessd_tls_handshake_failures_total{reason=\"certificate\"} 1");
    mt_assert_line(
        s, "keylessd_tls_handshake_failures_total{reason=\"timeout\"} 0");
    mt_assert_line(
        s, "keylessd_log_suppressed_total{kind=\"handshake_failed\"} 2");
    mt_assert_line(
        s, "keylessd_log_suppressed_total{kind=\"handshake_timeout\"} 0");
    mt_assert_line(s, "keylessd_queue_depth{class=\"fast\"} 4");
    mt_assert_line(s, "keylessd_queue_depth{class=\"slow\"} 0");
    mt_assert_line(s, "keylessd_queue_depth{class=\"blocking\"} 9");
    unsigned q[16] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    mt_assert_hist(s, "keylessd_queue_wait_seconds", "class=\"slow\",", q,
                   "0.005");
    unsigned none[16] = {0};
    mt_assert_hist(s, "keylessd_queue_wait_seconds", "class=\"fast\",", none,
                   "0");
    mt_assert_line(s, "keylessd_keys_loaded 7");
    mt_assert_line(s, "keylessd_loop_busy_seconds_total{shard=\"0\"} 1.5");
    mt_assert_line(s, "keylessd_loop_busy_seconds_total{shard=\"1\"} 0");
    mt_assert_no_line(s, "keylessd_loop_busy_seconds_total{shard=\"-1\"} 0");
    free(s);

    kl_metrics_reload_result(m, false, 1700000000);
    kl_metrics_reload_result(m, true, 1700000100);
    s = mt_scrape(m);
    assert_int_equal(hooks, 2);
    mt_assert_line(s, "keylessd_last_reload_successful 1");
    mt_assert_line(s, "keylessd_last_reload_timestamp_seconds 1700000100");
    mt_assert_line(s, "keylessd_reloads_total{result=\"success\"} 1");
    mt_assert_line(s, "keylessd_reloads_total{result=\"failure\"} 1");
    free(s);
    kl_metrics_free(m);
}

/* per upstream route (from the router) and the trace exporter,
 * absent until set; a route without a latency sample has no EWMA series;
 * label values are escaped */
static void test_route_and_trace_series(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    char *s = mt_scrape(m);
    assert_null(strstr(s, "keylessd_route_"));
    assert_null(strstr(s, "keylessd_trace_"));
    free(s);
    kl_metrics_route r[2] = {
        {.name = "fra1",
         .region = "eu",
         .up = true,
         .ewma_seconds = 0.0125,
         .inflight = 3,
         .requests = 40,
         .errors = 2},
        {.name = "sjc \"2\"", .region = "us", .up = false, .ewma_seconds = -1},
    };
    kl_metrics_set_routes(m, r, 2);
    kl_metrics_set_tracing(m, &(kl_metrics_tracing){.exported = 120,
                                                    .dropped_full = 4,
                                                    .dropped_export = 8,
                                                    .export_failures = 1});
    s = mt_scrape(m);
    mt_assert_line(s, "# TYPE keylessd_route_up gauge");
    mt_assert_line(s, "keylessd_route_up{region=\"eu\",route=\"fra1\"} 1");
    mt_assert_line(s, "keylessd_route_up{region=\"us\",route=\"sjc "
                      "\\\"2\\\"\"} 0");
    mt_assert_line(s, "# TYPE keylessd_route_latency_ewma_seconds gauge");
    mt_assert_line(s, "keylessd_route_latency_ewma_seconds{region=\"eu\","
                      "route=\"fra1\"} 0.0125");
    assert_null(strstr(s, "keylessd_route_latency_ewma_seconds{region=\"us\""));
    mt_assert_line(s, "keylessd_route_requests_in_flight{region=\"eu\","
                      "route=\"fra1\"} 3");
    mt_assert_line(s, "# TYPE keylessd_route_requests_total counter");
    mt_assert_line(s, "keylessd_route_requests_total{region=\"eu\","
                      "route=\"fra1\"} 40");
    mt_assert_line(s, "keylessd_route_errors_total{region=\"eu\","
                      "route=\"fra1\"} 2");
    mt_assert_line(s, "# TYPE keylessd_trace_spans_exported_total counter");
    mt_assert_line(s, "keylessd_trace_spans_exported_total 120");
    mt_assert_line(s, "keylessd_trace_spans_dropped_total{reason="
                      "\"queue_full\"} 4");
    mt_assert_line(s, "keylessd_trace_spans_dropped_total{reason="
                      "\"export_failed\"} 8");
    mt_assert_line(s, "keylessd_trace_export_failures_total 1");
    free(s);
    kl_metrics_set_routes(m, NULL, 0); /* the table lost its remotes */
    s = mt_scrape(m);
    assert_null(strstr(s, "keylessd_route_"));
    free(s);
    kl_metrics_free(m);
}

/* Connection back-pressure: refusals by reason, accept
 * pauses (count, time with the pause in progress, listeners paused now),
 * read pauses and the buffer budget, all summed over the shards. */
static void test_backpressure_series(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    kl_metrics_local *sh0 = kl_metrics_local_new(m, 0);
    kl_metrics_local *sh1 = kl_metrics_local_new(m, 1);
    char *s = mt_scrape(m);
    mt_assert_line(s, "# TYPE keylessd_connections_refused_total counter");
    mt_assert_line(
        s, "keylessd_connections_refused_total{reason=\"max_connections\"} 0");
    mt_assert_line(s, "keylessd_connections_refused_total{reason=\"max_"
                      "handshaking_per_source\"} 0");
    mt_assert_line(s, "# TYPE keylessd_connections_closed_total counter");
    mt_assert_line(s,
                   "keylessd_connections_closed_total{reason=\"untrusted\"} 0");
    mt_assert_line(
        s, "keylessd_connections_closed_total{reason=\"cert_expired\"} 0");
    mt_assert_line(s, "# TYPE keylessd_accept_pauses_total counter");
    mt_assert_line(s, "keylessd_accept_pauses_total 0");
    mt_assert_line(s, "# TYPE keylessd_accept_paused_seconds_total counter");
    mt_assert_line(s, "keylessd_accept_paused_seconds_total 0");
    mt_assert_line(s, "# TYPE keylessd_accept_paused gauge");
    mt_assert_line(s, "keylessd_accept_paused 0");
    mt_assert_line(s, "# TYPE keylessd_read_pauses_total counter");
    mt_assert_line(s, "keylessd_read_pauses_total 0");
    mt_assert_line(s, "# TYPE keylessd_buffered_bytes gauge");
    mt_assert_line(s, "keylessd_buffered_bytes 0");
    mt_assert_line(s, "# TYPE keylessd_buffered_bytes_limit gauge");
    mt_assert_line(s, "keylessd_buffered_bytes_limit 0");
    free(s);

    kl_metrics_conn_refused(sh0, KL_REFUSE_MAX_CONNECTIONS);
    kl_metrics_conn_refused(sh1, KL_REFUSE_MAX_CONNECTIONS);
    kl_metrics_conn_refused(sh1, KL_REFUSE_HANDSHAKING_PER_SOURCE);
    kl_metrics_conn_refused(sh1, (kl_metrics_refusal)9); /* ignored */
    kl_metrics_conn_closed(sh0, KL_CLOSE_UNTRUSTED);
    kl_metrics_conn_closed(sh1, KL_CLOSE_UNTRUSTED);
    kl_metrics_conn_closed(sh1, KL_CLOSE_CERT_EXPIRED);
    kl_metrics_conn_closed(sh0, (kl_metrics_close)7); /* ignored */
    /* shard 0: one pause of 1.5 s, its repeated states ignored */
    assert_false(kl_metrics_accept_is_paused(sh0));
    kl_metrics_accept_paused(sh0, true, 1000 * KL_NS_PER_MS);
    kl_metrics_accept_paused(sh0, true, 1200 * KL_NS_PER_MS);
    assert_true(kl_metrics_accept_is_paused(sh0));
    kl_metrics_accept_paused(sh0, false, 2500 * KL_NS_PER_MS);
    kl_metrics_accept_paused(sh0, false, 2600 * KL_NS_PER_MS);
    assert_false(kl_metrics_accept_is_paused(sh0));
    /* shard 1: a pause in progress since 2 s ago */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    kl_metrics_accept_paused(sh1, true, now - 2000 * KL_NS_PER_MS);
    kl_metrics_set_read_pauses(sh0, 5);
    kl_metrics_set_read_pauses(sh1, 2);
    kl_metrics_set_buffered(sh0, 4096, 32u << 20);
    kl_metrics_set_buffered(sh1, 100, 32u << 20);

    s = mt_scrape(m);
    mt_assert_line(
        s, "keylessd_connections_refused_total{reason=\"max_connections\"} 2");
    mt_assert_line(s, "keylessd_connections_refused_total{reason=\"max_"
                      "handshaking_per_source\"} 1");
    mt_assert_line(s,
                   "keylessd_connections_closed_total{reason=\"untrusted\"} 2");
    mt_assert_line(
        s, "keylessd_connections_closed_total{reason=\"cert_expired\"} 1");
    mt_assert_line(s, "keylessd_accept_pauses_total 2");
    mt_assert_line(s, "keylessd_accept_paused 1");
    double p1 = mt_value(s, "keylessd_accept_paused_seconds_total ");
    assert_true(p1 >= 3.5 && p1 < 3.5 + 60);
    mt_assert_line(s, "keylessd_read_pauses_total 7");
    mt_assert_line(s, "keylessd_buffered_bytes 4196");
    mt_assert_line(s, "keylessd_buffered_bytes_limit 67108864");
    free(s);

    /* the pause in progress grows between scrapes, then stops at its end */
    s = mt_scrape(m);
    double p2 = mt_value(s, "keylessd_accept_paused_seconds_total ");
    assert_true(p2 >= p1);
    free(s);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    kl_metrics_accept_paused(sh1, false, now);
    kl_metrics_set_buffered(sh1, 0, 32u << 20);
    s = mt_scrape(m);
    mt_assert_line(s, "keylessd_accept_paused 0");
    mt_assert_line(s, "keylessd_accept_pauses_total 2");
    double p3 = mt_value(s, "keylessd_accept_paused_seconds_total ");
    assert_true(p3 >= p2);
    mt_assert_line(s, "keylessd_buffered_bytes 4096");
    free(s);
    s = mt_scrape(m);
    assert_true(mt_value(s, "keylessd_accept_paused_seconds_total ") == p3);
    free(s);
    kl_metrics_free(m);
}

static void test_process_series(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    char *s = mt_scrape(m);
    /* stdin/out/err at least; and this test's own memory and CPU. */
    assert_true(mt_value(s, "process_open_fds ") >= 3);
    assert_true(mt_value(s, "process_max_fds ") >= 3);
    assert_true(mt_value(s, "process_resident_memory_bytes ") > 1e5);
    assert_true(mt_value(s, "process_virtual_memory_bytes ") > 1e5);
    assert_true(mt_value(s, "process_cpu_seconds_total ") >= 0);
    double start = mt_value(s, "process_start_time_seconds ");
    double now = (double)time(NULL);
    assert_true(start <= now + 1 && start > now - 3600);
    free(s);
    kl_metrics_free(m);
}

/* Every slot function takes NULL, so code under test can run without. */
static void test_null_slot(void **state)
{
    (void)state;
    kl_metrics_request(NULL, 1);
    kl_metrics_exec_time(NULL, 1, KL_OK, 1);
    kl_metrics_total_time(NULL, 1, KL_OK, 1);
    kl_metrics_key_load_time(NULL, 1);
    kl_metrics_failed_connection(NULL);
    kl_metrics_queue_wait(NULL, 0, 1);
    kl_metrics_shed(NULL, KL_SHED_DEADLINE);
    kl_metrics_handshake_failed(NULL, KL_HS_FAIL_OTHER);
    kl_metrics_log_suppressed(NULL, KL_LOGSUP_HANDSHAKE_FAILED);
    kl_metrics_inflight_add(NULL, 1);
    kl_metrics_conn_move(NULL, KL_MCONN_NONE, KL_MCONN_OPEN);
    kl_metrics_loop_busy(NULL, 1);
    kl_metrics_conn_refused(NULL, KL_REFUSE_MAX_CONNECTIONS);
    kl_metrics_accept_paused(NULL, true, 1);
    assert_false(kl_metrics_accept_is_paused(NULL));
    kl_metrics_set_buffered(NULL, 1, 2);
    kl_metrics_set_read_pauses(NULL, 1);
    kl_metrics_set_keys_loaded(NULL, 1);
    kl_metrics_reload_result(NULL, true, 0);
    kl_metrics_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_series),
        cmocka_unit_test(test_own_series),
        cmocka_unit_test(test_route_and_trace_series),
        cmocka_unit_test(test_backpressure_series),
        cmocka_unit_test(test_process_series),
        cmocka_unit_test(test_null_slot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
