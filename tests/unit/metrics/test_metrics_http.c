/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP endpoint over a real socket on 127.0.0.1: /metrics, /health,
 * /ready (both answers), 404, 405, HEAD, and start-up errors; the
 * listener's rules (head deadline, half-close, one answer per connection,
 * 400, 431) and /remotes. */
#include "testutil.h"

#include <stdatomic.h>
#include <time.h>

#include "mhttp.h"
#include "mtest.h"

typedef struct readiness {
    atomic_bool ready;
} readiness;

static bool ready_fn(void *arg, char *reason, size_t len)
{
    readiness *r = arg;
    if (atomic_load(&r->ready))
        return true;
    snprintf(reason, len, "keys not loaded");
    return false;
}

static kl_metrics_http *start(kl_metrics *m, readiness *r)
{
    char err[256] = "";
    kl_metrics_http_opts o = kl_metrics_http_defaults;
    o.address = "127.0.0.1";
    o.port = 0;
    o.ready = ready_fn;
    o.ready_arg = r;
    kl_metrics_http *h = kl_metrics_http_start(m, &o, err, sizeof err);
    if (!h)
        fail_msg("start: %s", err);
    assert_true(kl_metrics_http_port(h) != 0);
    return h;
}

static void test_endpoints(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    kl_metrics_local *l = kl_metrics_local_new(m, 0);
    kl_metrics_request(l, 0x15);
    kl_metrics_request(l, 0x15);
    readiness r = {false};
    kl_metrics_http *h = start(m, &r);
    uint16_t port = kl_metrics_http_port(h);
    mh_reply rep;

    assert_int_equal(mh_request(port, "GET", "/metrics", NULL, &rep), 0);
    assert_int_equal(rep.status, 200);
    assert_non_null(strstr(rep.head, "text/plain; version=0.0.4"));
    mt_assert_line(rep.body,
                   "keyless_requests{opcode=\"OpECDSASignSHA256\"} 2");
    mt_assert_line(rep.body, "# TYPE process_open_fds gauge");
    mh_free(&rep);

    assert_int_equal(mh_request(port, "GET", "/health", NULL, &rep), 0);
    assert_int_equal(rep.status, 200);
    assert_string_equal(rep.body, "ok\n");
    mh_free(&rep);

    assert_int_equal(mh_request(port, "GET", "/ready", NULL, &rep), 0);
    assert_int_equal(rep.status, 503);
    assert_string_equal(rep.body, "keys not loaded\n");
    mh_free(&rep);
    atomic_store(&r.ready, true);
    assert_int_equal(mh_request(port, "GET", "/ready", NULL, &rep), 0);
    assert_int_equal(rep.status, 200);
    assert_string_equal(rep.body, "ready\n");
    mh_free(&rep);

    assert_int_equal(mh_request(port, "GET", "/nope", NULL, &rep), 0);
    assert_int_equal(rep.status, 404);
    mh_free(&rep);
    assert_int_equal(mh_request(port, "GET", "/metrics/x", NULL, &rep), 0);
    assert_int_equal(rep.status, 404);
    mh_free(&rep);

    assert_int_equal(mh_request(port, "POST", "/metrics", "a=b", &rep), 0);
    assert_int_equal(rep.status, 405);
    assert_non_null(strstr(rep.head, "Allow: GET, HEAD"));
    mh_free(&rep);
    assert_int_equal(mh_request(port, "DELETE", "/health", NULL, &rep), 0);
    assert_int_equal(rep.status, 405);
    mh_free(&rep);

    /* HEAD: the GET's status, no body. */
    assert_int_equal(mh_request(port, "HEAD", "/health", NULL, &rep), 0);
    assert_int_equal(rep.status, 200);
    assert_int_equal(rep.body_len, 0);
    mh_free(&rep);

    /* Values move between scrapes: nothing is cached. */
    kl_metrics_request(l, 0x15);
    assert_int_equal(mh_request(port, "GET", "/metrics", NULL, &rep), 0);
    mt_assert_line(rep.body,
                   "keyless_requests{opcode=\"OpECDSASignSHA256\"} 3");
    mh_free(&rep);

    kl_metrics_http_stop(h);
    /* Stopped: the port no longer answers. */
    assert_int_equal(mh_request(port, "GET", "/health", NULL, &rep), -1);
    kl_metrics_free(m);
}

static void test_no_ready_callback(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    char err[256];
    kl_metrics_http_opts o = kl_metrics_http_defaults;
    o.address = "127.0.0.1";
    o.port = 0;
    kl_metrics_http *h = kl_metrics_http_start(m, &o, err, sizeof err);
    assert_non_null(h);
    mh_reply rep;
    assert_int_equal(
        mh_request(kl_metrics_http_port(h), "GET", "/ready", NULL, &rep), 0);
    assert_int_equal(rep.status, 200);
    mh_free(&rep);
    kl_metrics_http_stop(h);
    kl_metrics_free(m);
}

static void test_start_errors(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    char err[256] = "";
    kl_metrics_http_opts bad = kl_metrics_http_defaults;
    bad.address = "localhost";
    bad.port = 0;
    assert_null(kl_metrics_http_start(m, &bad, err, sizeof err));
    assert_non_null(strstr(err, "\"localhost\""));

    /* The port is taken: the error names the address and port. */
    readiness r = {true};
    kl_metrics_http *h = start(m, &r);
    kl_metrics_http_opts dup = kl_metrics_http_defaults;
    dup.address = "127.0.0.1";
    dup.port = kl_metrics_http_port(h);
    err[0] = '\0';
    assert_null(kl_metrics_http_start(m, &dup, err, sizeof err));
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1 port %u", kl_metrics_http_port(h));
    if (!strstr(err, want))
        fail_msg("error \"%s\" does not name %s", err, want);
    kl_metrics_http_stop(h);
    kl_metrics_http_stop(NULL);
    kl_metrics_free(m);
}

/* A raw connection to the endpoint (blocking, 5 s receive timeout). */
static int raw_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* What the server sends until it closes (NUL-terminated, malloc'd). */
static char *read_all(int fd)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    ssize_t n;
    while (len < cap - 1 && (n = read(fd, buf + len, cap - 1 - len)) > 0)
        len += (size_t)n;
    buf[len] = '\0';
    return buf;
}

static void send_str(int fd, const char *s)
{
    assert_int_equal(write(fd, s, strlen(s)), (ssize_t)strlen(s));
}

/* docs/METRICS.md, The HTTP listener: the request head must be complete
 * 2 s after accept, however it trickles in; a peer that half-closes before
 * is closed at once; HTTP/1.1 answers close the connection. */
static void test_listener_rules(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    readiness r = {true};
    kl_metrics_http *h = start(m, &r);
    uint16_t port = kl_metrics_http_port(h);

    /* a byte every 200 ms: closed at the 2 s head deadline */
    int fd = raw_connect(port);
    double t0 = now_ms();
    send_str(fd, "GET /health HTTP/1.1\r\n");
    char byte;
    ssize_t n = 0;
    while (now_ms() - t0 < 6000) {
        if (send(fd, "X", 1, MSG_NOSIGNAL) != 1)
            break;
        struct timeval tv = {.tv_usec = 200000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        n = read(fd, &byte, 1);
        if (n >= 0)
            break; /* closed */
    }
    double took = now_ms() - t0;
    close(fd);
    fprintf(stderr, "trickling head closed after %.0f ms\n", took);
    assert_true(n == 0 || n == -1);
    assert_true(took >= 1900 && took < 4500); /* slack for a loaded host */

    /* half a head, then shutdown for writing: closed at once */
    fd = raw_connect(port);
    send_str(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n");
    t0 = now_ms();
    shutdown(fd, SHUT_WR);
    char *got = read_all(fd);
    took = now_ms() - t0;
    close(fd);
    fprintf(stderr, "half-closed head closed after %.1f ms\n", took);
    assert_string_equal(got, "");
    assert_true(took < 500);
    free(got);

    /* HTTP/1.1 with keep-alive asked: one answer, then closed; a query
     * string is not part of the path */
    fd = raw_connect(port);
    send_str(fd, "GET /health?probe=1 HTTP/1.1\r\nHost: x\r\nConnection: "
                 "keep-alive\r\n\r\n");
    got = read_all(fd);
    close(fd);
    assert_non_null(strstr(got, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(got, "Connection: close\r\n"));
    assert_non_null(strstr(got, "Content-Length: 3\r\n"));
    assert_non_null(strstr(got, "Cache-Control: no-store\r\n"));
    assert_non_null(strstr(got, "\r\n\r\nok\n"));
    free(got);

    /* not a request line: 400; a head over 8 KiB: 431 */
    fd = raw_connect(port);
    send_str(fd, "hello there\r\n\r\n");
    got = read_all(fd);
    close(fd);
    assert_non_null(strstr(got, "HTTP/1.1 400 "));
    free(got);
    fd = raw_connect(port);
    send_str(fd, "GET /health HTTP/1.1\r\nX-Big: ");
    char big[9000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    send_str(fd, big);
    got = read_all(fd);
    close(fd);
    assert_non_null(strstr(got, "HTTP/1.1 431 "));
    free(got);

    /* no /remotes without its callback */
    mh_reply rep;
    /* what the endpoint closed itself: the trickling head */
    assert_int_equal(mh_request(port, "GET", "/metrics", NULL, &rep), 0);
    mt_assert_line(rep.body, "keylessd_metrics_http_closed_total{reason="
                             "\"head_timeout\"} 1");
    mt_assert_line(rep.body, "keylessd_metrics_http_closed_total{reason="
                             "\"evicted\"} 0");
    mh_free(&rep);
    assert_int_equal(mh_request(port, "GET", "/remotes", NULL, &rep), 0);
    assert_int_equal(rep.status, 404);
    mh_free(&rep);
    kl_metrics_http_stop(h);
    kl_metrics_free(m);
}

static bool remotes_fn(void *arg, char *out, size_t len)
{
    int *up = arg;
    snprintf(out, len, "%d of 1 remote key servers up\nfar eu %s\n", *up,
             *up ? "up" : "down");
    return *up > 0;
}

static void test_remotes(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    int up = 0;
    char err[256];
    kl_metrics_http_opts o = kl_metrics_http_defaults;
    o.address = "127.0.0.1";
    o.port = 0;
    o.remotes = remotes_fn;
    o.remotes_arg = &up;
    kl_metrics_http *h = kl_metrics_http_start(m, &o, err, sizeof err);
    assert_non_null(h);
    uint16_t port = kl_metrics_http_port(h);
    mh_reply rep;
    assert_int_equal(mh_request(port, "GET", "/remotes", NULL, &rep), 0);
    assert_int_equal(rep.status, 503);
    assert_string_equal(rep.body,
                        "0 of 1 remote key servers up\nfar eu down\n");
    mh_free(&rep);
    up = 1;
    assert_int_equal(mh_request(port, "GET", "/remotes", NULL, &rep), 0);
    assert_int_equal(rep.status, 200);
    assert_string_equal(rep.body, "1 of 1 remote key servers up\nfar eu up\n");
    mh_free(&rep);
    kl_metrics_http_stop(h);
    kl_metrics_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_endpoints),
        cmocka_unit_test(test_no_ready_callback),
        cmocka_unit_test(test_start_errors),
        cmocka_unit_test(test_listener_rules),
        cmocka_unit_test(test_remotes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
