/* SPDX-License-Identifier: Apache-2.0 */
/* keylessd's metrics endpoint (docs/METRICS.md), scraped from a
 * running daemon after real requests:
 * - the reference's series with exact counts: keyless_requests by opcode,
 *   the exec and total histograms by type and error, the key-load
 *   histogram, certificate_expiration_timestamp_seconds of auth_cert equal
 *   to its notAfter, the process series;
 * - keylessd's own: requests in flight, connections by state, keys loaded,
 *   queue wait per class, loop busy time per shard;
 * - keyless_failed_connection counts a transport failure on an
 *   established connection (garbage instead of a TLS record), not a
 *   refused certificate - that one is keylessd_tls_handshake_failures_total
 *   {reason="certificate"} (as in the reference, whose documentation lists
 *   handshake failures as not counted);
 * - metrics_identities: false leaves CNs, serials and paths out;
 * - /health and /ready, which answers 503 "draining" while the server
 *   drains at SIGTERM; a router with keys of its own is ready while its
 *   only remote is down (/remotes says 503), one without keys is not. */
#include "test_router_server_common.h"
#include "net.h"
#include "slowkey.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include <openssl/pem.h>
#include <openssl/x509.h>

static char *keydir;
static uint8_t ski[20];

static char *scrape(uint16_t port)
{
    char *body;
    assert_int_equal(tn_http_get(port, "/metrics", &body), 200);
    return body;
}

/* The value of the series written exactly as `series` (name and labels);
 * NAN when absent. */
static double metric(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (!strncmp(p, series, n) && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return NAN;
}

/* The value of the first series starting with prefix and containing
 * needle; NAN when none. */
static double metric_with(const char *text, const char *prefix,
                          const char *needle)
{
    for (const char *p = text; p && *p;
         p = strchr(p, '\n'), p = p ? p + 1 : p) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char line[2048];
        if (len >= sizeof line || strncmp(p, prefix, strlen(prefix)))
            continue;
        memcpy(line, p, len);
        line[len] = 0;
        if (!strstr(line, needle))
            continue;
        char *sp = strrchr(line, ' ');
        return sp ? strtod(sp + 1, NULL) : NAN;
    }
    return NAN;
}

static void expect_metric(const char *text, const char *series, double want)
{
    double got = metric(text, series);
    if (got != want) {
        fprintf(stderr, "%s\n", text);
        fail_msg("%s: %g, expected %g", series, got, want);
    }
}

/* slow_key: serve the key from that slow token (slowkey.h) instead of
 * keydir; NULL: keydir */
static void start_slow_with_metrics(td_daemon *d, const char *name,
                                    uint16_t *mport, const char *const *more,
                                    const char *slow_key)
{
    static char a_port[64];
    *mport = tn_free_port();
    snprintf(a_port, sizeof a_port, "--metrics-port=%u", *mport);
    const char *flags[16] = {"--metrics-address=127.0.0.1"};
    size_t n = 1;
    for (size_t i = 0; more && more[i] && n < 14; i++)
        flags[n++] = more[i];
    flags[n++] = a_port; /* after td_start's --metrics-port=0: wins */
    flags[n] = NULL;
    if (slow_key) {
        td_opts o = {.name = name, .slow_key = slow_key, .extra = flags};
        td_start(d, &o);
    } else {
        rs_start(d, name, keydir, NULL, flags);
    }
    rs_wait_log(d, "metrics: http://127.0.0.1:", 1, 5000);
}

static void start_with_metrics(td_daemon *d, const char *name, uint16_t *mport,
                               const char *const *more)
{
    start_slow_with_metrics(d, name, mport, more, NULL);
}

static int setup(void **state)
{
    (void)state;
    keydir = rs_keydir("metrics-keys", "ecdsa-p256", ski);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tp_rmtree(keydir);
    return 0;
}

static int64_t not_after(const char *pem)
{
    FILE *f = fopen(pem, "r");
    assert_non_null(f);
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(x);
    struct tm tm;
    assert_int_equal(ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm), 1);
    X509_free(x);
    return (int64_t)timegm(&tm);
}

static void test_scrape_after_requests(void **state)
{
    (void)state;
    td_daemon d;
    uint16_t mp;
    start_with_metrics(&d, "metrics-scrape", &mp, NULL);
    kl_client *c = td_connect(&d);
    kl_request_spec s = rs_sign_spec(ski);
    for (int i = 0; i < 10; i++) {
        kl_client_result r;
        td_call(&d, c, &s, &r);
        assert_int_equal(r.opcode, KL_OP_RESPONSE);
        kl_client_result_free(&r);
    }
    for (int i = 0; i < 3; i++)
        td_expect_ping(&d, c);
    uint8_t none[20];
    memset(none, 0x77, sizeof none);
    kl_request_spec bad = rs_sign_spec(none);
    td_expect_error(&d, c, &bad, KL_ERR_KEY_NOT_FOUND);
    td_expect_error(&d, c, &bad, KL_ERR_KEY_NOT_FOUND);

    char *m = scrape(mp);
    /* the reference's series */
    expect_metric(m, "keyless_requests{opcode=\"OpECDSASignSHA256\"}", 12);
    expect_metric(m, "keyless_requests{opcode=\"OpPing\"}", 3);
    expect_metric(m,
                  "keyless_request_exec_duration_per_opcode_count{error=\"no "
                  "error\",type=\"ecdsa\"}",
                  10);
    expect_metric(m,
                  "keyless_request_total_duration_per_opcode_count{error=\"no "
                  "error\",type=\"ecdsa\"}",
                  10);
    expect_metric(m,
                  "keyless_request_total_duration_per_opcode_bucket{error=\"no "
                  "error\",type=\"ecdsa\",le=\"+Inf\"}",
                  10);
    expect_metric(m,
                  "keyless_request_exec_duration_per_opcode_count{error=\"key "
                  "not found due to no matching SKI/SNI/ServerIP\",type="
                  "\"ecdsa\"}",
                  2);
    expect_metric(m,
                  "keyless_request_exec_duration_per_opcode_count{error=\"no "
                  "error\",type=\"other\"}",
                  3);
    expect_metric(m, "keyless_key_load_duration_count", 12);
    expect_metric(m, "keyless_failed_connection", 0);
    /* the auth certificate's expiry, as its notAfter */
    char src[1200];
    snprintf(src, sizeof src, "source=\"%s\"", tp_path("server.crt"));
    double exp =
        metric_with(m, "certificate_expiration_timestamp_seconds{", src);
    assert_true(exp == (double)not_after(tp_path("server.crt")));
    snprintf(src, sizeof src, "source=\"%s\"", tp_path("ca.crt"));
    assert_false(isnan(
        metric_with(m, "certificate_expiration_timestamp_seconds{", src)));
    /* the client's certificate, seen on the accepted connection */
    snprintf(src, sizeof src, "source=\"listener: 127.0.0.1:%u\"", d.port);
    exp = metric_with(m, "certificate_expiration_timestamp_seconds{", src);
    assert_true(exp == (double)not_after(tp_path("client.crt")));
    assert_true(metric(m, "process_open_fds") > 5);
    assert_true(metric(m, "process_resident_memory_bytes") > 1e6);
    assert_false(isnan(metric(m, "process_cpu_seconds_total")));
    /* keylessd's own */
    expect_metric(m, "keylessd_requests_in_flight", 0);
    expect_metric(m, "keylessd_connections{state=\"open\"}", 1);
    expect_metric(m, "keylessd_keys_loaded", 1);
    expect_metric(m, "keylessd_queue_depth{class=\"fast\"}", 0);
    expect_metric(m, "keylessd_queue_wait_seconds_count{class=\"fast\"}", 10);
    double busy = metric(m, "keylessd_loop_busy_seconds_total{shard=\"0\"}") +
                  metric(m, "keylessd_loop_busy_seconds_total{shard=\"1\"}");
    assert_true(busy > 0 && busy < 60);
    free(m);

    kl_client_close(c);
    fp_sleep_ms(100);
    m = scrape(mp);
    expect_metric(m, "keylessd_connections{state=\"open\"}", 0);
    free(m);
    assert_int_equal(td_stop(&d, 0), 0);
}

static void test_failed_connection_and_refused_client(void **state)
{
    (void)state;
    td_daemon d;
    uint16_t mp;
    start_with_metrics(&d, "metrics-fail", &mp, NULL);

    /* a client whose certificate another CA signed: refused in the
     * handshake */
    kl_client_opts o = td_client_opts(&d);
    o.cert_file = tp_path("client-other-ca.crt");
    o.key_file = tp_path("client-other-ca.key");
    kl_client *c = NULL;
    char err[512];
    kl_status st = kl_client_connect(&o, &c, err, sizeof err);
    if (st == KL_OK) {
        /* TLS 1.3: the refusal arrives with the first read */
        kl_request_spec s = rs_sign_spec(ski);
        kl_client_result r;
        st = kl_client_call(c, &s, 2000, &r);
        assert_int_not_equal(st, KL_OK);
        kl_client_close(c);
    }
    fp_sleep_ms(100);
    char *m = scrape(mp);
    expect_metric(m,
                  "keylessd_tls_handshake_failures_total{reason="
                  "\"certificate\"}",
                  1);
    expect_metric(m, "keyless_failed_connection", 0);
    free(m);

    /* an established connection that breaks: bytes that are no TLS
     * record, written past the TLS layer */
    c = td_connect(&d);
    td_expect_ping(&d, c);
    static const char junk[64] = "this is not a TLS record at all";
    assert_int_equal(write(kl_client_fd(c), junk, sizeof junk), sizeof junk);
    fp_sleep_ms(200);
    kl_client_close(c);
    m = scrape(mp);
    expect_metric(m, "keyless_failed_connection", 1);
    free(m);
    assert_int_equal(td_stop(&d, 0), 0);
}

/* keylessd_requests_shed_total{reason="deadline"}: a request whose
 * deadline (P9 deadline_ms) is not met is answered `internal error` by
 * then: the key is on a token that takes 300 ms per operation
 * (slowkey.h), the deadline is 100 ms. */
static void test_shed_by_reason(void **state)
{
    (void)state;
    td_daemon d;
    uint16_t mp;
    start_slow_with_metrics(
        &d, "metrics-shed", &mp, NULL,
        td_slow_key(tp_path("keys/ecdsa-p256.key"), 300, 1));
    kl_client *c = td_connect(&d);
    kl_request_spec s = rs_sign_spec(ski);
    s.req_context = "{\"deadline_ms\":100}";
    for (int i = 0; i < 3; i++)
        td_expect_error(&d, c, &s, KL_ERR_INTERNAL);
    char *m = scrape(mp);
    expect_metric(m, "keylessd_requests_shed_total{reason=\"deadline\"}", 3);
    expect_metric(m,
                  "keyless_request_total_duration_per_opcode_count{error="
                  "\"internal error\",type=\"ecdsa\"}",
                  3);
    expect_metric(m, "keylessd_requests_in_flight", 0);
    free(m);
    kl_client_close(c);
    assert_int_equal(td_stop(&d, 0), 0);
}

static void test_health_and_ready(void **state)
{
    (void)state;
    /* every request on the key (on a slow token, slowkey.h) takes 1.5 s:
     * something to drain */
    const char *more[] = {"--drain-timeout=5s", NULL};
    td_daemon d;
    uint16_t mp;
    start_slow_with_metrics(
        &d, "metrics-ready", &mp, more,
        td_slow_key(tp_path("keys/ecdsa-p256.key"), 1500, 1));
    char *body;
    assert_int_equal(tn_http_get(mp, "/health", &body), 200);
    assert_string_equal(body, "ok\n");
    free(body);
    assert_int_equal(tn_http_get(mp, "/ready", &body), 200);
    assert_string_equal(body, "ready\n");
    free(body);

    kl_client *c = td_connect(&d);
    kl_request_spec s = rs_sign_spec(ski);
    uint32_t id;
    assert_int_equal(kl_client_send(c, &s, &id), KL_OK);
    assert_int_equal(kl_client_flush(c, 2000), KL_OK);
    /* in flight for keylessd before the signal (P8: draining stops
     * reading, so a request still unread in the socket is not one); a
     * fixed sleep was too short once on a loaded machine */
    for (int i = 0; i < 200; i++) {
        char *m = scrape(mp);
        double n = metric(m, "keylessd_requests_in_flight");
        free(m);
        if (n >= 1)
            break;
        fp_sleep_ms(25);
    }
    td_signal(&d, SIGTERM);
    fp_sleep_ms(200);
    int status = tn_http_get(mp, "/ready", &body);
    fprintf(stderr, "while draining: /ready %d %s", status, body);
    assert_int_equal(status, 503);
    assert_non_null(strstr(body, "draining"));
    free(body);
    assert_int_equal(tn_http_get(mp, "/health", &body), 200);
    free(body);
    /* the request in flight is still answered */
    kl_client_result r;
    assert_int_equal(kl_client_recv(c, 5000, &r), KL_OK);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    kl_client_result_free(&r);
    kl_client_close(c);
    assert_int_equal(td_wait(&d, 10000), 0);
}

/* A keylessd whose routing table's only remote is a closed port, with
 * its own keys (dir) or none (NULL); the table's directory in *tdir. */
static void start_routing_n(td_daemon *d, const char *name, const char *dir,
                            uint16_t *mp, char **tdir, unsigned more)
{
    *tdir = tp_tempdir("metrics-route");
    char table[1100];
    static char text[128 * 1024];
    snprintf(table, sizeof table, "%s/routes.yaml", *tdir);
    uint8_t far[20];
    memset(far, 0x31, sizeof far);
    unsigned port = tn_free_port();
    size_t at = (size_t)snprintf(
        text, sizeof text,
        "servers:\n  - {name: gone, address: \"127.0.0.1:%u\", region: "
        "eu, serves: [%s]}\n",
        port, tp_ski_hex(far));
    /* more remotes at the same closed port (a fleet-sized table) */
    for (unsigned i = 0; i < more && at < sizeof text; i++)
        at += (size_t)snprintf(text + at, sizeof text - at,
                               "  - {name: r%03u, address: \"127.0.0.1:%u\", "
                               "region: eu, serves: [%s]}\n",
                               i, port, tp_ski_hex(far));
    fp_write_file(table, text);
    static char a_table[1200], a_port[64], a_cert[1200], a_key[1200];
    snprintf(a_table, sizeof a_table, "--router-table=%s", table);
    /* the router's identity toward remotes is a client certificate
     * (docs/ROUTING.md) */
    snprintf(a_cert, sizeof a_cert, "--router-cert=%s", tp_path("client.crt"));
    snprintf(a_key, sizeof a_key, "--router-key=%s", tp_path("client.key"));
    *mp = tn_free_port();
    snprintf(a_port, sizeof a_port, "--metrics-port=%u", *mp);
    const char *flags[] = {
        "--metrics-address=127.0.0.1",  a_table, a_cert, a_key,
        "--router-ping-interval=100ms", a_port,  NULL};
    rs_start(d, name, dir, NULL, flags);
    rs_wait_log(d, "metrics: http://127.0.0.1:", 1, 5000);
    rs_wait_log(d, "router: remote gone is down", 1, 5000);
}

static void start_routing(td_daemon *d, const char *name, const char *dir,
                          uint16_t *mp, char **tdir)
{
    start_routing_n(d, name, dir, mp, tdir, 0);
}

/* A table of more remotes than a fixed array would hold: /remotes lists
 * every one and each has its series (docs/METRICS.md). */
static void test_remotes_many(void **state)
{
    (void)state;
    td_daemon d;
    uint16_t mp;
    char *dir;
    start_routing_n(&d, "metrics-many", keydir, &mp, &dir, 299);
    char *body;
    int status = tn_http_get(mp, "/remotes", &body);
    assert_true(status == 200 || status == 503); /* probes may be under way */
    assert_non_null(strstr(body, " of 300 remote key servers up\n"));
    size_t lines = 0;
    for (const char *p = body; (p = strchr(p, '\n')); p++)
        lines++;
    fprintf(stderr, "/remotes with 300 remotes: %zu lines, %zu bytes\n", lines,
            strlen(body));
    assert_int_equal(lines, 301);
    assert_non_null(strstr(body, "\nr298 eu "));
    free(body);
    char *m = scrape(mp);
    assert_non_null(
        strstr(m, "\nkeylessd_route_up{region=\"eu\",route=\"r298\"} "));
    free(m);
    assert_int_equal(td_stop(&d, 0), 0);
    tp_rmtree(dir);
}

/* docs/METRICS.md, Readiness: a router whose only remote is down still
 * serves its own keys, so it is ready; /remotes and keylessd_route_up say
 * that the remote is down. */
static void test_ready_with_remote_down(void **state)
{
    (void)state;
    td_daemon d;
    uint16_t mp;
    char *dir;
    start_routing(&d, "metrics-route", keydir, &mp, &dir);
    char *body;
    int status = tn_http_get(mp, "/ready", &body);
    fprintf(stderr, "remote down, keys here: /ready %d %s", status, body);
    assert_int_equal(status, 200);
    assert_string_equal(body, "ready\n");
    free(body);
    /* and it does serve them */
    kl_client *c = td_connect(&d);
    kl_request_spec s = rs_sign_spec(ski);
    kl_client_result r;
    td_call(&d, c, &s, &r);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    kl_client_result_free(&r);
    kl_client_close(c);
    /* the remote's health has its own path and series */
    status = tn_http_get(mp, "/remotes", &body);
    fprintf(stderr, "/remotes %d %s", status, body);
    assert_int_equal(status, 503);
    assert_non_null(strstr(body, "0 of 1 remote key servers up\n"));
    assert_non_null(strstr(body, "gone eu down "));
    free(body);
    char *m = scrape(mp);
    expect_metric(m, "keylessd_route_up{region=\"eu\",route=\"gone\"}", 0);
    free(m);
    assert_int_equal(td_stop(&d, 0), 0);
    tp_rmtree(dir);
}

/* A pure egress keylessd (no key of its own) can serve nothing while no
 * remote answers: not ready. */
static void test_egress_ready_needs_a_route(void **state)
{
    (void)state;
    td_daemon d;
    uint16_t mp;
    char *dir;
    start_routing(&d, "metrics-egress", NULL, &mp, &dir);
    char *body;
    int status = tn_http_get(mp, "/ready", &body);
    fprintf(stderr, "no key, no route up: /ready %d %s", status, body);
    assert_int_equal(status, 503);
    assert_non_null(strstr(body, "no healthy route"));
    free(body);
    assert_int_equal(td_stop(&d, 0), 0);
    tp_rmtree(dir);
}

/* The subject CN of a PEM certificate. */
static void cert_cn(const char *pem, char *cn, size_t len)
{
    FILE *f = fopen(pem, "r");
    assert_non_null(f);
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(x);
    assert_true(X509_NAME_get_text_by_NID(X509_get_subject_name(x),
                                          NID_commonName, cn, (int)len) > 0);
    X509_free(x);
}

/* metrics_identities: false (docs/METRICS.md, Identities in the series):
 * the certificate series stay, with their expiry, but name no client CN,
 * SAN, serial number or file path. */
static void test_without_identities(void **state)
{
    (void)state;
    const char *more[] = {"--metrics-identities=false", NULL};
    td_daemon d;
    uint16_t mp;
    start_with_metrics(&d, "metrics-anon", &mp, more);
    kl_client *c = td_connect(&d);
    td_expect_ping(&d, c);
    char *m = scrape(mp);
    char cn[256], src[1200];
    cert_cn(tp_path("client.crt"), cn, sizeof cn);
    snprintf(src, sizeof src, "cn=\"%s\"", cn);
    if (strstr(m, src) || strstr(m, tp_path("server.crt")) ||
        strstr(m, tp_path("ca.crt")) || strstr(m, "serial_no=\"1")) {
        fprintf(stderr, "%s\n", m);
        fail_msg("an identity in /metrics with metrics_identities: false");
    }
    /* the client's certificate, seen on the accepted connection */
    snprintf(src, sizeof src,
             "cn=\"\",hostnames=\"\",serial_no=\"\",server=\"0\",source="
             "\"listener: 127.0.0.1:%u\"",
             d.port);
    double exp =
        metric_with(m, "certificate_expiration_timestamp_seconds{", src);
    assert_true(exp == (double)not_after(tp_path("client.crt")));
    /* the configured ones, by option name */
    exp = metric_with(m, "certificate_expiration_timestamp_seconds{",
                      "source=\"auth_cert\"");
    assert_true(exp == (double)not_after(tp_path("server.crt")));
    assert_false(
        isnan(metric_with(m, "certificate_expiration_timestamp_seconds{",
                          "source=\"cloudflare_ca_cert\"")));
    free(m);
    kl_client_close(c);
    assert_int_equal(td_stop(&d, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scrape_after_requests),
        cmocka_unit_test(test_failed_connection_and_refused_client),
        cmocka_unit_test(test_shed_by_reason),
        cmocka_unit_test(test_without_identities),
        cmocka_unit_test(test_health_and_ready),
        cmocka_unit_test(test_ready_with_remote_down),
        cmocka_unit_test(test_remotes_many),
        cmocka_unit_test(test_egress_ready_needs_a_route),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
