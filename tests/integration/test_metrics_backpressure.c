/* SPDX-License-Identifier: Apache-2.0 */
/* Connection back-pressure on /metrics (docs/METRICS.md),
 * scraped from a real keylessd on 127.0.0.1 with one shard and small caps
 * (max_connections 3, max_handshaking 2, max_handshaking_per_source 1):
 * - a second handshake from one source is closed at accept:
 *   keylessd_connections_refused_total{reason="max_handshaking_per_source"};
 * - at the global handshake cap the shard stops accepting: one more
 *   keylessd_accept_pauses_total, keylessd_accept_paused 1 while it lasts,
 *   keylessd_accept_paused_seconds_total growing during it and still after
 *   it; the socket it holds and the one in the listen backlog are let in
 *   when handshakes finish;
 * - past max_connections sockets are closed at accept:
 *   keylessd_connections_refused_total{reason="max_connections"};
 * - keylessd_connections{state} follows it all;
 * and, on a second daemon with the smallest memory budget (1 MiB), a client
 * that sends pings and never reads the answers fills it:
 * keylessd_buffered_bytes reaches keylessd_buffered_bytes_limit,
 * keylessd_read_pauses_total counts the pauses, and the bytes go back to
 * 0 when the client goes. Sources are loopback addresses (127.0.0.2...: all of
 * 127/8 reaches lo), chosen by binding the client socket. */
#include "test_abuse_common.h"

#include <math.h>

#include "net.h"

static td_daemon d;
static char *dir;
static uint16_t mport;

static void start(const char *name, const char *const *caps)
{
    static char a_port[64];
    mport = tn_free_port();
    snprintf(a_port, sizeof a_port, "--metrics-port=%u", mport);
    const char *extra[16] = {"--metrics-address=127.0.0.1", a_port};
    size_t n = 2;
    for (size_t i = 0; caps[i] && n < 15; i++)
        extra[n++] = caps[i];
    extra[n] = NULL;
    dir = tp_tempdir(name);
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    td_opts o = {.name = name, .key_dirs = dir, .extra = extra, .shards = 1};
    td_start(&d, &o);
    /* the endpoint starts once the keys are loaded */
    double end = td_now_ms() + 10000;
    for (;;) {
        char *log = td_read_log(&d);
        bool up = log && strstr(log, "metrics: http://127.0.0.1:");
        free(log);
        if (up)
            break;
        if (td_now_ms() > end) {
            td_dump_log(&d);
            fail_msg("no metrics endpoint");
        }
        ha_sleep_ms(20);
    }
}

static int stop(void **state)
{
    (void)state;
    int st = d.pid > 0 ? td_stop(&d, 0) : 0; /* a test may have stopped it */
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

static char *scrape(void)
{
    char *body = NULL;
    assert_int_equal(tn_http_get(mport, "/metrics", &body), 200);
    return body;
}

/* The value of the series written exactly as `series`; NAN when absent. */
static double value(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (!strncmp(p, series, n) && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return NAN;
}

static double metric(const char *series)
{
    char *s = scrape();
    double v = value(s, series);
    free(s);
    return v;
}

/* Waits (bounded) until series has the value want. */
static void wait_metric(const char *series, double want)
{
    double end = td_now_ms() + 5000, v;
    while ((v = metric(series)) != want) {
        if (td_now_ms() > end) {
            char *s = scrape();
            fprintf(stderr, "%s\n", s);
            free(s);
            fail_msg("%s is %g, expected %g", series, v, want);
        }
        ha_sleep_ms(10);
    }
}

/* Each series exactly as expected, in one scrape. */
typedef struct want {
    const char *series;
    double v;
} want;

static void expect(const want *w, size_t n)
{
    char *s = scrape();
    for (size_t i = 0; i < n; i++) {
        double v = value(s, w[i].series);
        if (v != w[i].v) {
            fprintf(stderr, "%s\n", s);
            fail_msg("%s is %g, expected %g", w[i].series, v, w[i].v);
        }
    }
    free(s);
}

#define EXPECT(...)                                                            \
    do {                                                                       \
        const want w_[] = {__VA_ARGS__};                                       \
        expect(w_, sizeof w_ / sizeof *w_);                                    \
    } while (0)

#define REF_CONNS                                                              \
    "keylessd_connections_refused_total{reason=\"max_connections\"}"
#define REF_SRC                                                                \
    "keylessd_connections_refused_total{reason=\"max_handshaking_per_"         \
    "source\"}"
#define PAUSES "keylessd_accept_pauses_total"
#define PAUSED "keylessd_accept_paused"
#define PAUSED_S "keylessd_accept_paused_seconds_total"
#define HS "keylessd_connections{state=\"handshake\"}"
#define OPEN "keylessd_connections{state=\"open\"}"
#define BUF "keylessd_buffered_bytes"
#define BUF_LIMIT "keylessd_buffered_bytes_limit"
#define READ_PAUSES "keylessd_read_pauses_total"

static void wait_closed(int fd, const char *what)
{
    double end = td_now_ms() + 5000;
    while (!ha_peer_closed(fd)) {
        if (td_now_ms() > end)
            fail_msg("%s: not closed by the server", what);
        ha_sleep_ms(10);
    }
}

static int setup_caps(void **state)
{
    (void)state;
    static const char *caps[] = {"--max-connections=3",
                                 "--max-handshaking=2",
                                 "--max-handshaking-per-source=1",
                                 "--handshake-timeout=60s",
                                 "--max-buffered-bytes=4194304",
                                 NULL};
    start("metrics-backpressure", caps);
    return 0;
}

static void test_refusals_and_pauses(void **state)
{
    (void)state;
    /* td_start's readiness probes have come and gone */
    wait_metric(HS, 0);
    EXPECT({REF_CONNS, 0}, {REF_SRC, 0}, {PAUSES, 0}, {PAUSED, 0},
           {PAUSED_S, 0}, {OPEN, 0}, {BUF, 0}, {BUF_LIMIT, 4194304},
           {READ_PAUSES, 0});

    /* one handshake per source: the second from 127.0.0.2 is closed */
    int a1 = tn_tcp_from("127.0.0.2", d.port);
    wait_metric(HS, 1);
    int a2 = tn_tcp_from("127.0.0.2", d.port);
    wait_closed(a2, "second handshake from 127.0.0.2");
    close(a2);
    EXPECT({REF_SRC, 1}, {REF_CONNS, 0}, {HS, 1}, {PAUSES, 0});

    /* the second handshake fills max_handshaking; the third stops the
     * listener (held by the shard), the fourth waits in the backlog */
    int b1 = tn_tcp_from("127.0.0.3", d.port);
    wait_metric(HS, 2);
    int c1 = tn_tcp_from("127.0.0.4", d.port);
    wait_metric(PAUSED, 1);
    int c2 = tn_tcp_from("127.0.0.5", d.port);
    ha_sleep_ms(300);
    char *s = scrape();
    double p1 = value(s, PAUSED_S);
    assert_true(value(s, PAUSES) == 1);
    assert_true(value(s, HS) == 2); /* the held socket is not a connection */
    assert_true(value(s, REF_SRC) == 1 && value(s, REF_CONNS) == 0);
    free(s);
    if (!(p1 >= 0.3 && p1 < 30))
        fail_msg("paused %g s after 300 ms", p1);
    assert_false(ha_peer_closed(c1));
    assert_false(ha_peer_closed(c2));
    ha_sleep_ms(100);
    double p2 = metric(PAUSED_S); /* the pause in progress counts */
    assert_true(p2 >= p1 + 0.1);

    /* a handshake slot frees: the held socket gets it, the one in the
     * backlog stops the listener again */
    close(a1);
    wait_metric(PAUSES, 2);
    EXPECT({PAUSED, 1}, {HS, 2}, {REF_SRC, 1}, {REF_CONNS, 0});
    /* and again: the backlog is empty, accepting resumes for good */
    close(b1);
    wait_metric(PAUSED, 0);
    s = scrape();
    double p3 = value(s, PAUSED_S);
    assert_true(value(s, PAUSES) == 2);
    assert_true(value(s, HS) == 2); /* c1 and c2 */
    free(s);
    assert_true(p3 >= p2);
    ha_sleep_ms(200);
    assert_true(metric(PAUSED_S) == p3); /* no pause: the total stands */

    /* two authenticated clients: with c2 still in its handshake, that is
     * max_connections; two more sockets are closed at accept */
    close(c1);
    wait_metric(HS, 1);
    kl_client *t1 = td_connect(&d);
    td_expect_ping(&d, t1);
    kl_client *t2 = td_connect(&d);
    td_expect_ping(&d, t2);
    EXPECT({OPEN, 2}, {HS, 1});
    int e1 = tn_tcp_from("127.0.0.6", d.port);
    wait_closed(e1, "a fourth connection");
    int e2 = tn_tcp_from("127.0.0.7", d.port);
    wait_closed(e2, "a fifth connection");
    close(e1);
    close(e2);
    EXPECT({REF_CONNS, 2}, {REF_SRC, 1}, {PAUSES, 2}, {PAUSED, 0},
           {PAUSED_S, p3}, {OPEN, 2}, {HS, 1}, {READ_PAUSES, 0});

    kl_client_close(t1);
    kl_client_close(t2);
    close(c2);
    wait_metric(OPEN, 0);
    wait_metric(HS, 0);
    wait_metric(BUF, 0);
    /* the first refusal was logged (later ones within a second are
     * only counted: the metric is where they all are) */
    char *log = td_read_log(&d);
    assert_non_null(strstr(log, "max_handshaking_per_source reached"));
    free(log);
    /* the stop line's count (the shards' own statistics) agrees */
    assert_int_equal(td_stop(&d, 0), 0);
    log = td_read_log(&d);
    assert_non_null(strstr(log, "3 connections refused at accept (limits)"));
    free(log);
}

static int setup_budget(void **state)
{
    (void)state;
    static const char *caps[] = {"--max-buffered-bytes=1048576",
                                 "--idle-timeout=60s", NULL};
    start("metrics-budget", caps);
    return 0;
}

/* 16 KiB pings, never read: the answers pile up in the shard's output
 * buffer until it holds its budget (1 MiB, one shard), then the
 * connection is not read any more. How often it pauses depends on how
 * much the kernel's socket buffers take meanwhile (each time they take
 * some, the shard drops below the budget's low mark and reads again), so
 * the count is checked for being there and never going down. */
static void test_buffer_budget(void **state)
{
    (void)state;
    enum { PLEN = 16000, N = 400 };
    EXPECT({BUF, 0}, {BUF_LIMIT, 1048576}, {READ_PAUSES, 0});
    ha_tls t;
    ha_tls_connect(&t, d.port, NULL, NULL, 4096);
    ha_tls_send_timeout(&t, 500);
    static uint8_t frame[PLEN + 512];
    size_t sent = 0;
    for (uint32_t i = 0; i < N; i++) {
        size_t len = ha_ping_frame(frame, sizeof frame, i + 1, PLEN);
        if (!ha_tls_write(&t, frame, len))
            break; /* the server stopped reading */
        sent++;
    }
    double end = td_now_ms() + 5000;
    while (metric(READ_PAUSES) < 1 && td_now_ms() < end)
        ha_sleep_ms(10);
    ha_sleep_ms(200); /* the server has stopped reading */
    char *s = scrape();
    double held = value(s, BUF), pauses = value(s, READ_PAUSES);
    free(s);
    print_message("%zu pings sent; %g bytes held, %g read pauses\n", sent, held,
                  pauses);
    assert_true(pauses >= 1);
    /* at the budget, plus what one buffer's growth may add */
    if (!(held >= 1048576 && held <= 4 * 1048576))
        fail_msg("%g bytes held, budget 1048576", held);
    ha_tls_close(&t);
    wait_metric(BUF, 0);
    double after = metric(READ_PAUSES);
    assert_true(after >= pauses);
    ha_sleep_ms(100);
    EXPECT({READ_PAUSES, after}, {BUF_LIMIT, 1048576});
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_refusals_and_pauses, setup_caps,
                                        stop),
        cmocka_unit_test_setup_teardown(test_buffer_budget, setup_budget, stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
