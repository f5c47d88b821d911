/* SPDX-License-Identifier: Apache-2.0 */
/* Logs that anyone who reaches the port could flood or forge
 * (docs/OPERATIONS.md, Logs; docs/SECURITY.md):
 * - 500 failed handshakes in a row (an HTTP request instead of a
 *   ClientHello) write at most 10 "TLS handshake failed" lines per 10 s;
 *   keylessd_log_suppressed_total{kind="handshake_failed"} counts the rest,
 *   and once the window is over one summary line says how many were left
 *   out ("N more like this in the last 10 s"), also when keylessd stops
 *   before the 10 s are over;
 * - a certificate from an untrusted CA whose CN holds CR, LF and ESC (a
 *   forged log line and a terminal sequence) is logged with those bytes
 *   escaped, in text and in JSON logs: no raw control byte reaches the
 *   log. */
#include "test_abuse_common.h"
#include "net.h"

#include <math.h>

static td_daemon d;
static char *dir;

static void start(const char *name, const char *const *more, uint16_t *mport)
{
    static char port_flag[64];
    static const char *flags[8];
    size_t n = 0;
    if (mport) {
        *mport = tn_free_port();
        snprintf(port_flag, sizeof port_flag, "--metrics-port=%u", *mport);
        flags[n++] = "--metrics-address=127.0.0.1";
        flags[n++] = port_flag;
    }
    for (size_t i = 0; more && more[i] && n < 7; i++)
        flags[n++] = more[i];
    flags[n] = NULL;
    dir = tp_tempdir(name);
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    td_opts o = {.name = name, .key_dirs = dir, .extra = flags};
    td_start(&d, &o);
}

static void stop(void)
{
    assert_int_equal(td_stop(&d, 0), 0);
    tp_rmtree(dir);
    dir = NULL;
}

/* Waits up to ms for the log to hold what; returns the log (malloc'd). */
static char *wait_log(const char *what, int ms)
{
    double t0 = td_now_ms();
    for (;;) {
        char *log = td_read_log(&d);
        if (strstr(log, what) || td_now_ms() - t0 > ms)
            return log;
        free(log);
        ha_sleep_ms(50);
    }
}

static size_t count(const char *text, const char *what)
{
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p++)
        n++;
    return n;
}

/* The value of one series (name and labels exactly); NAN when absent. */
static double metric(uint16_t port, const char *series)
{
    char *body = NULL;
    assert_int_equal(tn_http_get(port, "/metrics", &body), 200);
    double v = NAN;
    size_t n = strlen(series);
    for (const char *p = body; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (!strncmp(p, series, n) && p[n] == ' ')
            v = strtod(p + n + 1, NULL);
    free(body);
    return v;
}

/* The sum of N over the summary lines "WHAT: N more like this". */
static unsigned long summarised(const char *log, const char *what)
{
    char pat[128];
    snprintf(pat, sizeof pat, "%s: ", what);
    unsigned long sum = 0;
    for (const char *p = log; (p = strstr(p, pat)) != NULL; p++) {
        char *end;
        unsigned long n = strtoul(p + strlen(pat), &end, 10);
        if (end != p + strlen(pat) && !strncmp(end, " more like this", 15))
            sum += n;
    }
    return sum;
}

#define FLOOD 500

/* n connections that each send an HTTP request instead of a ClientHello
 * and wait for the server to close them (its handshake failed). */
static void fail_handshakes(int conns)
{
    static const char http[] = "GET / HTTP/1.1\r\nHost: keyless\r\n\r\n";
    for (int i = 0; i < conns; i++) {
        int fd = ha_tcp(d.port, false);
        assert_int_equal(write(fd, http, sizeof http - 1),
                         (ssize_t)(sizeof http - 1));
        /* closed by the server after its handshake failed */
        struct pollfd p = {.fd = fd, .events = POLLIN};
        for (;;) {
            int r = poll(&p, 1, 5000);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                fail_msg("connection %d not closed within 5 s", i);
            char b[512];
            ssize_t n = read(fd, b, sizeof b);
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
                break;
        }
        close(fd);
    }
}

static void test_failed_handshakes_rate_limited(void **state)
{
    (void)state;
    uint16_t mport;
    start("logflood", NULL, &mport);
    double t0 = td_now_ms();
    fail_handshakes(FLOOD);
    double secs = (td_now_ms() - t0) / 1000.0;
    /* every failure counted: the lines written plus those left out */
    char *log = td_read_log(&d);
    size_t lines = count(log, "): TLS handshake failed: ");
    double left_out = metric(
        mport, "keylessd_log_suppressed_total{kind=\"handshake_failed\"}");
    print_message("%d failed handshakes in %.1f s: %zu lines, %.0f left out\n",
                  FLOOD, secs, lines, left_out);
    size_t windows = (size_t)(secs / 10.0) + 1;
    if (lines < 10 || lines > 10 * windows) {
        td_dump_log(&d);
        fail_msg("%zu \"TLS handshake failed\" lines for %d failures in %.1f "
                 "s, expected 10 per 10 s",
                 lines, FLOOD, secs);
    }
    if (isnan(left_out) || (size_t)left_out + lines != FLOOD)
        fail_msg("keylessd_log_suppressed_total{kind=\"handshake_failed\"} is "
                 "%g, expected %zu",
                 left_out, FLOOD - lines);
    free(log);
    /* the summary: written when the window is over, though the flood
     * stopped (at most ~10 s after its first line) */
    double t1 = td_now_ms();
    unsigned long sum = 0;
    while (td_now_ms() - t1 < 25000) {
        log = td_read_log(&d);
        sum = summarised(log, "TLS handshake failed");
        free(log);
        if (sum >= (unsigned long)left_out)
            break;
        ha_sleep_ms(200);
    }
    print_message("summary after %.1f s more\n", (td_now_ms() - t1) / 1000.0);
    log = td_read_log(&d);
    if (sum != (unsigned long)left_out ||
        !strstr(log, "[warning] TLS handshake failed: ") ||
        !strstr(log, " more like this in the last 10 s (at most 10 lines per "
                     "10 s are logged; counted in "
                     "keylessd_log_suppressed_total)")) {
        td_dump_log(&d);
        fail_msg("summary lines count %lu, expected %.0f", sum, left_out);
    }
    /* the same count in the failure counter */
    assert_true(metric(mport, "keylessd_tls_handshake_failures_total{reason="
                              "\"protocol\"}") == FLOOD);
    free(log);
    stop();
}

/* Stopped within the 10 s: the lines left out are summarised before the
 * exit, for the seconds that had passed (and the pending summary does not
 * hold the shutdown up). */
static void test_summary_at_shutdown(void **state)
{
    (void)state;
    start("logflood-stop", NULL, NULL);
    fail_handshakes(30);
    double t0 = td_now_ms();
    assert_int_equal(td_stop(&d, 0), 0);
    double ms = td_now_ms() - t0;
    char *log = td_read_log(&d);
    tp_rmtree(dir);
    dir = NULL;
    if (count(log, "): TLS handshake failed: ") +
                summarised(log, "TLS handshake failed") !=
            30 ||
        !strstr(log, "TLS handshake failed: 20 more like this in the last ")) {
        fprintf(stderr, "%s", log);
        fail_msg("no summary of the 20 lines left out at shutdown");
    }
    assert_null(strstr(log, "more like this in the last 10 s"));
    free(log);
    if (ms > 5000)
        fail_msg("stopping took %.0f ms", ms);
}

/* The forged CN: a fake line after CR LF, a screen-clearing ESC sequence. */
static const char forged[] = "evil\r\n2026-01-01T00:00:00.000Z keylessd: "
                             "[error] forged\x1b[2J";
static const char forged_text[] = "(client evil\\x0d\\x0a2026-01-01T00:00:00."
                                  "000Z keylessd: [error] forged\\x1b[2J)";
/* the same in a JSON string: each backslash doubled */
static const char forged_json[] =
    "(client evil\\\\x0d\\\\x0a2026-01-01T00:00:00.000Z keylessd: [error] "
    "forged\\\\x1b[2J)";

static void connect_refused(const char *crt, const char *key)
{
    kl_client_opts o = td_client_opts(&d);
    o.cert_file = crt;
    o.key_file = key;
    kl_client *c = NULL;
    char err[512];
    if (kl_client_connect(&o, &c, err, sizeof err) != KL_OK)
        return; /* TLS 1.2, or the refusal came first */
    static const uint8_t p[] = "hello?";
    kl_request_spec s = {
        .opcode = KL_OP_PING, .payload = p, .payload_len = sizeof p};
    uint32_t id;
    kl_client_result r;
    assert_int_equal(kl_client_send(c, &s, &id), KL_OK);
    kl_status fst = kl_client_flush(c, 3000);
    (void)fst; /* may fail: the refusal is what we wait for */
    kl_status st = kl_client_recv(c, 3000, &r);
    if (st == KL_OK)
        fail_msg("a certificate from an untrusted CA was served");
    kl_client_close(c);
}

static void check_escaped(const char *name, const char *const *more,
                          const char *want)
{
    start(name, more, NULL);
    char crt[1100], key[1100];
    snprintf(crt, sizeof crt, "%s/forged.crt", dir);
    snprintf(key, sizeof key, "%s/forged.key", dir);
    tp_issue_client_raw(dir, "forged", "other-ca", forged, sizeof forged - 1,
                        NULL, 0);
    connect_refused(crt, key);
    char *log = wait_log(want, 5000);
    if (!strstr(log, want)) {
        td_dump_log(&d);
        fail_msg("%s: not in the log: %s", name, want);
    }
    for (const char *p = log; *p; p++)
        if ((unsigned char)*p < 0x20 && *p != '\n')
            fail_msg("%s: raw control byte 0x%02x in the log", name, *p);
    assert_null(strstr(log, "\n2026-01-01T00:00:00.000Z"));
    free(log);
    stop();
}

static void test_forged_name_escaped(void **state)
{
    (void)state;
    check_escaped("logforge-text", NULL, forged_text);
    static const char *const json[] = {"--log-format=json", NULL};
    check_escaped("logforge-json", json, forged_json);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forged_name_escaped),
        cmocka_unit_test(test_failed_handshakes_rate_limited),
        cmocka_unit_test(test_summary_at_shutdown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
