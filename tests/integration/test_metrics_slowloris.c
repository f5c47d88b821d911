/* SPDX-License-Identifier: Apache-2.0 */
/* The metrics endpoint under the slow-client attack (docs/METRICS.md, The
 * HTTP listener; docs/SECURITY.md): while hostile peers on the metrics port
 * - hold many connections open sending one byte of a request head a second
 *   (more than the endpoint's connection cap, reconnecting whenever they
 *   are dropped), and
 * - open 1,500 connections, send half a request on each and close them all
 *   at once for writing (shutdown: half-closed, the way the report that
 *   found it left them; a full close() is the easy case),
 * a load balancer's probe of /health is answered 200 within one second,
 * every time, and the endpoint holds no descriptor for the closed sockets
 * afterwards. The two together, too: the half-sent requests arrive while the
 * slow clients hold the slots. */
#include "test_router_server_common.h"
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static char *keydir;
static uint8_t ski[20];

/* Slow clients at once: well over the endpoint's 64 slots. */
#define SLOW_CLIENTS 200
/* Half-sent requests closed at once (as in the report that found it). */
#define HALF_SENT 1500
/* What a probe may take. */
#define PROBE_BUDGET_MS 1000.0

static int setup(void **state)
{
    (void)state;
    keydir = rs_keydir("mx-slow-keys", "ecdsa-p256", ski);
    /* the attackers need a descriptor each */
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rlim_t want = HALF_SENT + SLOW_CLIENTS + 256;
    if (rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tp_rmtree(keydir);
    return 0;
}

/* A non-blocking TCP socket connecting to 127.0.0.1:port (on loopback the
 * connection completes from the listen backlog); -1 when the system is
 * out of sockets. */
static int open_nb(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 &&
        errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

/* One probe as a load balancer sends it: connect, GET /health, read the
 * answer to its end, all within PROBE_BUDGET_MS. The time it took (ms);
 * *status the HTTP status (0: no answer in time or connection lost). */
static double probe(uint16_t port, int *status)
{
    double t0 = td_now_ms(), until = t0 + PROBE_BUDGET_MS;
    *status = 0;
    int fd = open_nb(port);
    assert_true(fd >= 0);
    static const char req[] =
        "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: probe\r\n\r\n";
    size_t sent = 0, got = 0;
    char buf[2048];
    while (td_now_ms() < until) {
        struct pollfd p = {fd, sent < sizeof req - 1 ? POLLOUT : POLLIN, 0};
        int left = (int)(until - td_now_ms()) + 1;
        if (poll(&p, 1, left) <= 0)
            continue;
        if (sent < sizeof req - 1) {
            ssize_t n =
                send(fd, req + sent, sizeof req - 1 - sent, MSG_NOSIGNAL);
            if (n < 0 && errno != EAGAIN && errno != EINPROGRESS)
                break;
            if (n > 0)
                sent += (size_t)n;
            continue;
        }
        ssize_t n = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (n < 0 && errno == EAGAIN)
            continue;
        if (n <= 0 || (got += (size_t)n) == sizeof buf - 1)
            break;
        buf[got] = 0;
        /* the whole answer: headers and the body "ok\n" */
        if (strstr(buf, "\r\n\r\nok\n"))
            break;
    }
    buf[got] = 0;
    close(fd);
    if (strstr(buf, "\r\n\r\nok\n"))
        sscanf(buf, "HTTP/1.%*d %d", status);
    return td_now_ms() - t0;
}

/* The slow clients: each has sent the start of a request head and adds a
 * byte a second; one dropped by the server is replaced at once. */
typedef struct slow {
    int fd[SLOW_CLIENTS];
    double next[SLOW_CLIENTS];
    unsigned reconnects;
} slow;

static void slow_open(slow *s, size_t i, uint16_t port)
{
    static const char start[] = "GET /health HTTP/1.1\r\nHost: x\r\n";
    s->fd[i] = open_nb(port);
    assert_true(s->fd[i] >= 0);
    /* the start may not go out before the connection completes: then the
     * first slow byte opens the head */
    (void)send(s->fd[i], start, sizeof start - 1, MSG_NOSIGNAL);
    s->next[i] = td_now_ms() + 1000;
}

static void slow_tick(slow *s, uint16_t port)
{
    double now = td_now_ms();
    for (size_t i = 0; i < SLOW_CLIENTS; i++) {
        struct pollfd p = {s->fd[i], POLLIN, 0};
        bool dropped =
            poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR | POLLIN));
        if (!dropped && now >= s->next[i]) {
            dropped = send(s->fd[i], "X", 1, MSG_NOSIGNAL) < 0 &&
                      errno != EAGAIN && errno != EINPROGRESS;
            s->next[i] = now + 1000;
        }
        if (dropped) {
            close(s->fd[i]);
            slow_open(s, i, port);
            s->reconnects++;
        }
    }
}

static double scrape_value(uint16_t port, const char *name)
{
    char *body;
    assert_int_equal(tn_http_get(port, "/metrics", &body), 200);
    size_t n = strlen(name);
    double v = NAN;
    for (const char *p = body; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (!strncmp(p, name, n) && p[n] == ' ') {
            v = strtod(p + n + 1, NULL);
            break;
        }
    free(body);
    return v;
}

static void start(td_daemon *d, uint16_t *mport)
{
    static char a_port[64];
    *mport = tn_free_port();
    snprintf(a_port, sizeof a_port, "--metrics-port=%u", *mport);
    const char *flags[] = {"--metrics-address=127.0.0.1", a_port, NULL};
    rs_start(d, "mx-slowloris", keydir, NULL, flags);
    rs_wait_log(d, "metrics: http://127.0.0.1:", 1, 5000);
}

static void expect_probe(uint16_t port, const char *when, double *worst)
{
    int status;
    double ms = probe(port, &status);
    if (ms > *worst)
        *worst = ms;
    if (status != 200 || ms > PROBE_BUDGET_MS)
        fail_msg("%s: /health answered %d after %.0f ms (budget %.0f ms)", when,
                 status, ms, PROBE_BUDGET_MS);
}

static void test_slow_clients_cannot_starve_health(void **state)
{
    (void)state;
    td_daemon d;
    uint16_t mp;
    start(&d, &mp);
    slow *s = calloc(1, sizeof *s);
    assert_non_null(s);
    for (size_t i = 0; i < SLOW_CLIENTS; i++)
        slow_open(s, i, mp);
    /* 8 s of attack (past the 2 s head deadline several times): a probe
     * every 250 ms */
    double worst = 0, until = td_now_ms() + 8000;
    unsigned probes = 0;
    while (td_now_ms() < until) {
        slow_tick(s, mp);
        expect_probe(mp, "slow clients", &worst);
        probes++;
        fp_sleep_ms(250);
    }
    fprintf(stderr,
            "slow clients: %u probes, slowest %.1f ms; %u reconnects by the "
            "attackers\n",
            probes, worst, s->reconnects);
    /* the endpoint counted what it closed to make room */
    double evicted = scrape_value(
        mp, "keylessd_metrics_http_closed_total{reason=\"evicted\"}");
    fprintf(stderr, "evicted: %g\n", evicted);
    assert_true(evicted > 0);
    for (size_t i = 0; i < SLOW_CLIENTS; i++)
        close(s->fd[i]);
    free(s);
    assert_int_equal(td_stop(&d, 0), 0);
}

static void test_half_sent_requests_closed_at_once(void **state)
{
    (void)state;
    td_daemon d;
    uint16_t mp;
    start(&d, &mp);
    double fds_before = scrape_value(mp, "process_open_fds");
    /* the slow clients keep the endpoint's slots busy meanwhile */
    slow *s = calloc(1, sizeof *s);
    assert_non_null(s);
    for (size_t i = 0; i < SLOW_CLIENTS; i++)
        slow_open(s, i, mp);
    int *fd = calloc(HALF_SENT, sizeof *fd);
    assert_non_null(fd);
    static const char half[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAc";
    size_t opened = 0;
    for (size_t i = 0; i < HALF_SENT; i++) {
        fd[i] = open_nb(mp);
        if (fd[i] < 0)
            continue;
        opened++;
        (void)send(fd[i], half, sizeof half - 1, MSG_NOSIGNAL);
    }
    fp_sleep_ms(100);
    /* some may have gone out only once connected */
    for (size_t i = 0; i < HALF_SENT; i++)
        if (fd[i] >= 0)
            (void)send(fd[i], half, sizeof half - 1, MSG_NOSIGNAL);
    for (size_t i = 0; i < HALF_SENT; i++)
        if (fd[i] >= 0)
            shutdown(fd[i], SHUT_WR);
    assert_true(opened > HALF_SENT / 2);

    /* probes for 5 s: each answered within the budget */
    double worst = 0, until = td_now_ms() + 5000;
    unsigned probes = 0;
    while (td_now_ms() < until) {
        slow_tick(s, mp);
        expect_probe(mp, "after half-sent requests", &worst);
        probes++;
        fp_sleep_ms(100);
    }
    for (size_t i = 0; i < SLOW_CLIENTS; i++)
        close(s->fd[i]);
    free(s);
    fp_sleep_ms(200);
    /* and the endpoint holds nothing of them any more, although the
     * half-closed sockets stay open on this side: the scrape's own socket
     * aside, the descriptors are back where they were */
    double fds_after = scrape_value(mp, "process_open_fds");
    for (size_t i = 0; i < HALF_SENT; i++)
        if (fd[i] >= 0)
            close(fd[i]);
    free(fd);
    fprintf(stderr,
            "half-sent: %zu opened and closed; %u probes, slowest %.1f ms; "
            "open fds %g before, %g after\n",
            opened, probes, worst, fds_before, fds_after);
    assert_true(fds_after <= fds_before + 2);
    assert_int_equal(td_stop(&d, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slow_clients_cannot_starve_health),
        cmocka_unit_test(test_half_sent_requests_closed_at_once),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
