/* SPDX-License-Identifier: Apache-2.0 */
/* hsload: many concurrent TLS handshakes against one server, for the
 * HAProxy end-to-end test and bench/haproxy/run.sh. One thread,
 * non-blocking sockets, epoll; every connection is a new full handshake
 * (no session reuse), closed as soon as it completes.
 *
 *   hsload -a 127.0.0.1:PORT [-s SNI] [-c CONCURRENCY] [-n TOTAL]
 *          [-t SECONDS] [-x ABORT_PERCENT] [-2|-3] [-T TIMEOUT_MS]
 *
 * -x: that share of connections is abandoned at random points of the
 * handshake (right after connecting, after the ClientHello, after the
 * first server bytes), half with a reset, half with a plain close.
 * Output, one line: handshakes= failed= aborted= seconds= rate= (per
 * second) p50_ms= p90_ms= p99_ms= max_ms=. Exit 0 unless nothing could
 * be started. Built on the fly by the scripts (cc hsload.c -lssl -lcrypto).
 * The server's certificate is not verified: this measures handshakes. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

enum { AB_NONE, AB_CONNECT, AB_HELLO, AB_MID };

typedef struct hs {
    int fd;
    SSL *ssl;
    uint64_t t0;
    int abort_at;
    int reads; /* server flights seen */
    int connected;
} hs;

static struct sockaddr_in addr;
static const char *sni;
static SSL_CTX *ctx;
static int ep, abort_pct, timeout_ms = 10000;
static long total = -1, started, ok, failed, aborted;
static double *lat;
static size_t nlat, caplat;
static uint64_t deadline;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void hs_close(hs *h, int reset)
{
    if (reset) {
        struct linger l = {1, 0};
        setsockopt(h->fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    SSL_free(h->ssl);
    close(h->fd); /* also leaves the epoll set */
    h->ssl = NULL;
    h->fd = -1;
}

static int more(void)
{
    if (total >= 0 && started >= total)
        return 0;
    return !deadline || now_ns() < deadline;
}

static void hs_start(hs *h)
{
    h->fd = -1;
    if (!more())
        return;
    started++;
    h->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (h->fd < 0) {
        failed++;
        return;
    }
    int one = 1;
    setsockopt(h->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    h->t0 = now_ns();
    h->reads = h->connected = 0;
    h->abort_at = AB_NONE;
    if (abort_pct && rand() % 100 < abort_pct)
        h->abort_at = AB_CONNECT + rand() % 3;
    if (connect(h->fd, (struct sockaddr *)&addr, sizeof addr) < 0 &&
        errno != EINPROGRESS) {
        close(h->fd);
        h->fd = -1;
        failed++;
        return;
    }
    h->ssl = SSL_new(ctx);
    SSL_set_fd(h->ssl, h->fd);
    if (sni)
        SSL_set_tlsext_host_name(h->ssl, sni);
    SSL_set_connect_state(h->ssl);
    struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = h};
    epoll_ctl(ep, EPOLL_CTL_ADD, h->fd, &ev);
}

static void record(double ms)
{
    if (nlat == caplat) {
        caplat = caplat ? 2 * caplat : 4096;
        lat = realloc(lat, caplat * sizeof *lat);
    }
    lat[nlat++] = ms;
}

/* One event on h; restarts it when its handshake is over. */
static void hs_step(hs *h, uint32_t events)
{
    if (!h->connected) {
        h->connected = 1;
        if (h->abort_at == AB_CONNECT) {
            hs_close(h, rand() & 1);
            aborted++;
            hs_start(h);
            return;
        }
    }
    if (events & EPOLLIN)
        h->reads++;
    if (h->abort_at == AB_MID && h->reads > 0) {
        hs_close(h, rand() & 1);
        aborted++;
        hs_start(h);
        return;
    }
    ERR_clear_error();
    int rc = SSL_do_handshake(h->ssl);
    if (rc == 1) {
        record((double)(now_ns() - h->t0) / 1e6);
        ok++;
        hs_close(h, 0);
        hs_start(h);
        return;
    }
    int e = SSL_get_error(h->ssl, rc);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        if (h->abort_at == AB_HELLO && e == SSL_ERROR_WANT_READ) {
            hs_close(h, rand() & 1); /* the ClientHello is out */
            aborted++;
            hs_start(h);
            return;
        }
        struct epoll_event ev = {.events = e == SSL_ERROR_WANT_READ ? EPOLLIN
                                                                    : EPOLLOUT,
                                 .data.ptr = h};
        epoll_ctl(ep, EPOLL_CTL_MOD, h->fd, &ev);
        return;
    }
    failed++;
    hs_close(h, 0);
    hs_start(h);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double p)
{
    if (!nlat)
        return 0;
    size_t i = (size_t)(p * (double)(nlat - 1) + 0.5);
    return lat[i];
}

static void usage(void)
{
    fprintf(stderr, "usage: hsload -a IP:PORT [-s SNI] [-c N] [-n TOTAL] "
                    "[-t SECONDS] [-x ABORT_PCT] [-2|-3] [-T TIMEOUT_MS]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int conc = 1, version = 0, opt;
    double seconds = 0;
    char host[64] = "";
    int port = 0;
    while ((opt = getopt(argc, argv, "a:s:c:n:t:x:23T:")) != -1) {
        switch (opt) {
        case 'a':
            if (sscanf(optarg, "%63[^:]:%d", host, &port) != 2)
                usage();
            break;
        case 's': sni = optarg; break;
        case 'c': conc = atoi(optarg); break;
        case 'n': total = atol(optarg); break;
        case 't': seconds = atof(optarg); break;
        case 'x': abort_pct = atoi(optarg); break;
        case '2': version = TLS1_2_VERSION; break;
        case '3': version = TLS1_3_VERSION; break;
        case 'T': timeout_ms = atoi(optarg); break;
        default: usage();
        }
    }
    if (!port || conc < 1 || (total < 0 && seconds <= 0))
        usage();
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        usage();
    signal(SIGPIPE, SIG_IGN);
    srand((unsigned)getpid());
    ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    if (version) {
        SSL_CTX_set_min_proto_version(ctx, version);
        SSL_CTX_set_max_proto_version(ctx, version);
    }
    ep = epoll_create1(EPOLL_CLOEXEC);
    hs *conns = calloc((size_t)conc, sizeof *conns);
    uint64_t t0 = now_ns();
    if (seconds > 0)
        deadline = t0 + (uint64_t)(seconds * 1e9);
    int active = 0;
    for (int i = 0; i < conc; i++)
        hs_start(&conns[i]);
    struct epoll_event evs[256];
    for (;;) {
        active = 0;
        for (int i = 0; i < conc; i++) {
            hs *h = &conns[i];
            if (h->fd < 0 && more())
                hs_start(h); /* a start that failed: try again */
            if (h->fd >= 0 &&
                now_ns() - h->t0 > (uint64_t)timeout_ms * 1000000u) {
                failed++;
                hs_close(h, 1);
                hs_start(h);
            }
            active += h->fd >= 0;
        }
        if (!active)
            break;
        int n = epoll_wait(ep, evs, 256, 50);
        for (int i = 0; i < n; i++) {
            hs *h = evs[i].data.ptr;
            if (h->fd >= 0)
                hs_step(h, evs[i].events);
        }
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    qsort(lat, nlat, sizeof *lat, cmp);
    printf("handshakes=%ld failed=%ld aborted=%ld seconds=%.3f rate=%.1f "
           "p50_ms=%.2f p90_ms=%.2f p99_ms=%.2f max_ms=%.2f\n",
           ok, failed, aborted, secs, secs > 0 ? (double)ok / secs : 0,
           pct(0.5), pct(0.9), pct(0.99), nlat ? lat[nlat - 1] : 0);
    free(lat);
    free(conns);
    SSL_CTX_free(ctx);
    close(ep);
    return started ? 0 : 1;
}
