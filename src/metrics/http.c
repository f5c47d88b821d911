/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP endpoint on metrics_port: /metrics, /health, /ready, /remotes,
 * on a thread of its own, so a slow scraper can never
 * stall a shard.
 *
 * A small server of its own rather than a general HTTP library, because
 * the endpoint must stay answerable to a load balancer's probe while
 * anyone who reaches the port misbehaves (docs/METRICS.md, The HTTP
 * listener; docs/SECURITY.md):
 * - a connection has HX_HEAD_MS from accept() to deliver its whole request
 *   head, however it trickles in (an idle timeout would be reset by every
 *   byte), and HX_LIFE_MS to take its answer;
 * - a peer that closes (or half-closes) before its head is complete is
 *   closed at once: end of file while reading the head ends the
 *   connection, nothing waits for a timeout;
 * - at most HX_SLOTS connections are held. A new one is always accepted;
 *   when every slot is taken, the connection that has held its slot the
 *   longest without sending a complete request is closed to make room
 *   (failing that, the oldest one still taking its answer). A probe sends
 *   its whole request at once and is answered in the same turn, so
 *   connections that send nothing useful cannot keep it out;
 * - one request per connection (Connection: close), GET and HEAD only, no
 *   request body read.
 * Everything below runs on the endpoint's thread, which alone owns the
 * sockets and the slots; kl_metrics_http_stop wakes it through a pipe and
 * joins it. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/time.h"
#include "metrics/internal.h"

/* Text format 0.0.4, what Prometheus asks for by default. */
#define MX_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define TEXT_TYPE "text/plain; charset=utf-8"

#define HX_SLOTS 64         /* connections held at once */
#define HX_HEAD_MAX 8192    /* bytes of a request head */
#define HX_HEAD_MS 2000     /* accept() to complete request head */
#define HX_LIFE_MS 10000    /* accept() to answer fully sent */
#define HX_ACCEPT_BURST 256 /* accept() calls per turn at most */
#define HX_PAUSE_MS 100     /* no accept() after running out of fds */
#define HX_WARN_MS 10000    /* one warning about evictions at most */

typedef struct hx_conn {
    int fd; /* -1: a free slot */
    bool answering;
    uint64_t since_ns; /* accept() */
    size_t head_len;
    char head[HX_HEAD_MAX + 1];
    char *out; /* the whole answer, head and body */
    size_t out_len, out_off;
} hx_conn;

struct kl_metrics_http {
    kl_metrics *m;
    kl_metrics_ready_fn ready;
    void *ready_arg;
    kl_metrics_ready_fn remotes;
    void *remotes_arg;
    uint16_t port;
    int lfd;
    int wake[2]; /* stop: a byte on wake[1] */
    pthread_t thread;
    uint64_t accept_after_ns; /* paused after EMFILE until then */
    uint64_t evicted;         /* since the last warning */
    uint64_t warned_ns;       /* that warning */
    hx_conn conn[HX_SLOTS];
};

static void count(kl_metrics_http *h, mx_http_close why)
{
    if (h->m)
        atomic_fetch_add_explicit(&h->m->http_closed[why], 1,
                                  memory_order_relaxed);
}

static void conn_close(hx_conn *c)
{
    if (c->fd < 0)
        return;
    close(c->fd);
    free(c->out);
    c->fd = -1;
    c->answering = false;
    c->out = NULL;
    c->out_len = c->out_off = 0;
    c->head_len = 0;
}

/* ---- answers ----------------------------------------------------------- */

static const char *reason_phrase(unsigned status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
    }
}

/* Queues the answer on c (head, and the body unless head_only); takes body
 * when owned. */
static void answer(hx_conn *c, unsigned status, const char *type, char *body,
                   size_t len, bool owned, bool head_only)
{
    char date[64] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    char head[512];
    /* Health checkers and scrapers must never be served a cached answer. */
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %u %s\r\nDate: %s\r\nContent-Type: %s\r\n"
                     "Content-Length: %zu\r\nCache-Control: no-store\r\n"
                     "%sConnection: close\r\n\r\n",
                     status, reason_phrase(status), date, type, len,
                     status == 405 ? "Allow: GET, HEAD\r\n" : "");
    size_t blen = head_only ? 0 : len;
    char *out =
        n > 0 && (size_t)n < sizeof head ? malloc((size_t)n + blen) : NULL;
    if (out) {
        memcpy(out, head, (size_t)n);
        if (blen)
            memcpy(out + n, body, blen);
        c->out = out;
        c->out_len = (size_t)n + blen;
        c->out_off = 0;
    }
    if (owned)
        free(body);
    c->answering = out != NULL; /* out of memory: the caller closes */
}

static void text(hx_conn *c, unsigned status, const char *s, bool head_only)
{
    answer(c, status, TEXT_TYPE, (char *)s, strlen(s), false, head_only);
}

/* /ready and /remotes: 200 with ok_body, or 503 with the callback's
 * reason on a line. */
#define CHECK_BODY_MAX (128 * 1024) /* /remotes: a line per remote */

static void check(hx_conn *c, kl_metrics_ready_fn fn, void *arg,
                  const char *ok_body, bool head_only)
{
    char *reason = calloc(1, CHECK_BODY_MAX);
    if (!reason)
        return;
    bool ok = !fn || fn(arg, reason, CHECK_BODY_MAX - 1);
    if (!ok && !reason[0])
        snprintf(reason, CHECK_BODY_MAX, "not ready");
    if (ok && !reason[0]) {
        free(reason);
        text(c, 200, ok_body, head_only);
        return;
    }
    size_t n = strnlen(reason, CHECK_BODY_MAX - 2);
    if (n && reason[n - 1] != '\n')
        reason[n++] = '\n';
    answer(c, ok ? 200 : 503, TEXT_TYPE, reason, n, true, head_only);
}

/* The request line of a complete head: method, path (the target up to its
 * query) and version; false when it is not one. The head is cut in place
 * (internal.h; fuzz/fuzz_http_head.c). */
bool mx_http_request_line(char *head, char **method, char **path)
{
    char *eol = strpbrk(head, "\r\n");
    if (!eol)
        return false;
    *eol = '\0';
    char *sp1 = strchr(head, ' ');
    char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (!sp1 || !sp2 || strchr(sp2 + 1, ' ') || sp1 == head || sp2 == sp1 + 1 ||
        strncmp(sp2 + 1, "HTTP/1.", 7) != 0)
        return false;
    *sp1 = *sp2 = '\0';
    *method = head;
    *path = sp1 + 1;
    (*path)[strcspn(*path, "?#")] = '\0';
    return true;
}

static void serve(kl_metrics_http *h, hx_conn *c)
{
    char *method, *path;
    if (!mx_http_request_line(c->head, &method, &path)) {
        text(c, 400, "bad request\n", false);
        return;
    }
    bool head_only = strcmp(method, "HEAD") == 0;
    bool known = strcmp(path, "/metrics") == 0 ||
                 strcmp(path, "/health") == 0 || strcmp(path, "/ready") == 0 ||
                 (strcmp(path, "/remotes") == 0 && h->remotes);
    if (!known) {
        text(c, 404, "not found\n", head_only);
        return;
    }
    /* HEAD is GET without the body (RFC 9110 9.3.2). */
    if (strcmp(method, "GET") != 0 && !head_only) {
        text(c, 405, "method not allowed\n", false);
        return;
    }
    if (strcmp(path, "/health") == 0) {
        text(c, 200, "ok\n", head_only);
    } else if (strcmp(path, "/ready") == 0) {
        check(c, h->ready, h->ready_arg, "ready\n", head_only);
    } else if (strcmp(path, "/remotes") == 0) {
        check(c, h->remotes, h->remotes_arg, "ok\n", head_only);
    } else {
        size_t len = 0;
        char *body = kl_metrics_render(h->m, &len);
        if (body)
            answer(c, 200, MX_CONTENT_TYPE, body, len, true, head_only);
        else
            text(c, 500, "out of memory\n", head_only);
    }
}

/* ---- connections ------------------------------------------------------- */

/* Sends what the socket takes; closes the connection once all is sent. */
static void conn_write(hx_conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            conn_close(c);
            return;
        }
        c->out_off += (size_t)n;
    }
    /* Whatever the peer sent past its head (a body, a second request) is
     * read away first, so that close() sends a FIN and not a reset that
     * could destroy the answer in flight. */
    char sink[4096];
    for (int i = 0; i < 16 && recv(c->fd, sink, sizeof sink, 0) > 0; i++)
        ;
    conn_close(c);
}

/* Reads what has arrived; answers once the head is complete. */
static void conn_read(kl_metrics_http *h, hx_conn *c)
{
    for (;;) {
        ssize_t n =
            recv(c->fd, c->head + c->head_len, HX_HEAD_MAX - c->head_len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            /* closed or half-closed before the head was complete: no
             * answer can be asked for any more (docs/METRICS.md) */
            conn_close(c);
            return;
        }
        c->head_len += (size_t)n;
        c->head[c->head_len] = '\0';
        if (strstr(c->head, "\r\n\r\n") || strstr(c->head, "\n\n")) {
            serve(h, c);
            break;
        }
        if (c->head_len == HX_HEAD_MAX) {
            text(c, 431, "request head too large\n", false);
            break;
        }
    }
    if (!c->answering)
        conn_close(c); /* out of memory */
    else
        conn_write(c);
}

/* The slot for a new connection: a free one, or the one held longest by a
 * connection without a complete request (then the oldest answering). */
static hx_conn *slot_for_new(kl_metrics_http *h)
{
    hx_conn *reading = NULL, *answering = NULL;
    for (size_t i = 0; i < HX_SLOTS; i++) {
        hx_conn *c = &h->conn[i];
        if (c->fd < 0)
            return c;
        hx_conn **oldest = c->answering ? &answering : &reading;
        if (!*oldest || c->since_ns < (*oldest)->since_ns)
            *oldest = c;
    }
    hx_conn *victim = reading ? reading : answering;
    conn_close(victim);
    count(h, MX_HTTP_EVICTED);
    h->evicted++;
    uint64_t now = kl_now_ns();
    if (!h->warned_ns || now - h->warned_ns >= HX_WARN_MS * KL_NS_PER_MS) {
        kl_warn("metrics http: all %d connections were taken; closed %llu "
                "of the oldest without a complete request to make room "
                "(slow or idle clients on the metrics port: docs/METRICS.md, "
                "The HTTP listener)",
                HX_SLOTS, (unsigned long long)h->evicted);
        h->evicted = 0;
        h->warned_ns = now;
    }
    return victim;
}

static void accept_new(kl_metrics_http *h, uint64_t now)
{
    for (int i = 0; i < HX_ACCEPT_BURST; i++) {
        int fd = accept4(h->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                /* out of descriptors or memory: the backlog waits */
                kl_warn("metrics http: accept: %s; retrying in %d ms",
                        strerror(errno), HX_PAUSE_MS);
                h->accept_after_ns = now + HX_PAUSE_MS * KL_NS_PER_MS;
            }
            return;
        }
        hx_conn *c = slot_for_new(h);
        c->fd = fd;
        c->since_ns = now;
        /* a probe's request is usually there already */
        conn_read(h, c);
    }
}

static int poll_timeout_ms(const kl_metrics_http *h, uint64_t now)
{
    uint64_t next = UINT64_MAX;
    if (h->accept_after_ns > now)
        next = h->accept_after_ns;
    for (size_t i = 0; i < HX_SLOTS; i++) {
        const hx_conn *c = &h->conn[i];
        if (c->fd < 0)
            continue;
        uint64_t d = c->since_ns +
                     (c->answering ? HX_LIFE_MS : HX_HEAD_MS) * KL_NS_PER_MS;
        if (d < next)
            next = d;
    }
    if (next == UINT64_MAX)
        return -1;
    return next <= now ? 0
                       : (int)((next - now + KL_NS_PER_MS - 1) / KL_NS_PER_MS);
}

static void *run(void *arg)
{
    kl_metrics_http *h = arg;
    struct pollfd p[2 + HX_SLOTS];
    hx_conn *of[2 + HX_SLOTS];
    for (;;) {
        uint64_t now = kl_now_ns();
        nfds_t n = 0;
        p[n++] = (struct pollfd){h->wake[0], POLLIN, 0};
        bool listening = h->accept_after_ns <= now;
        if (listening)
            p[n++] = (struct pollfd){h->lfd, POLLIN, 0};
        for (size_t i = 0; i < HX_SLOTS; i++) {
            hx_conn *c = &h->conn[i];
            if (c->fd < 0)
                continue;
            of[n] = c;
            p[n++] = (struct pollfd){c->fd, c->answering ? POLLOUT : POLLIN, 0};
        }
        int r = poll(p, n, poll_timeout_ms(h, now));
        if (r < 0 && errno != EINTR) {
            kl_error("metrics http: poll: %s; endpoint stopped",
                     strerror(errno));
            break;
        }
        if (r > 0 && p[0].revents)
            break; /* kl_metrics_http_stop */
        now = kl_now_ns();
        /* connections first, then new ones: a full table evicts only
         * what had its turn */
        for (nfds_t i = listening ? 2 : 1; r > 0 && i < n; i++) {
            hx_conn *c = of[i];
            if (!p[i].revents || c->fd != p[i].fd)
                continue;
            if (c->answering)
                conn_write(c);
            else
                conn_read(h, c);
        }
        for (size_t i = 0; i < HX_SLOTS; i++) {
            hx_conn *c = &h->conn[i];
            uint64_t limit =
                (c->answering ? HX_LIFE_MS : HX_HEAD_MS) * KL_NS_PER_MS;
            if (c->fd >= 0 && now - c->since_ns >= limit) {
                count(h, c->answering ? MX_HTTP_ANSWER_TIMEOUT
                                      : MX_HTTP_HEAD_TIMEOUT);
                conn_close(c);
            }
        }
        if (listening && r > 0 && p[1].revents)
            accept_new(h, now);
    }
    return NULL;
}

/* ---- start and stop ---------------------------------------------------- */

static int listen_on(const char *addr, uint16_t port, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    socklen_t sl;
    if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        sl = sizeof *v4;
    } else if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        sl = sizeof *v6;
    } else {
        snprintf(err, errlen,
                 "metrics address \"%s\" is not a numeric IPv4 or IPv6 "
                 "address",
                 addr);
        return -1;
    }
    int fd =
        socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&ss, sl) != 0 ||
        listen(fd, SOMAXCONN) != 0) {
        int e = errno;
        snprintf(err, errlen, "cannot serve metrics on %s port %u: %s", addr,
                 (unsigned)port, strerror(e));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

const kl_metrics_http_opts kl_metrics_http_defaults = {
    .address = "127.0.0.1", /* loopback: the endpoint needs no login */
    .port = 2406,           /* the reference's */
};

kl_metrics_http *kl_metrics_http_start(kl_metrics *m,
                                       const kl_metrics_http_opts *o, char *err,
                                       size_t errlen)
{
    const char *addr = o->address;
    int lfd = listen_on(addr, o->port, err, errlen);
    if (lfd < 0)
        return NULL;
    kl_metrics_http *h = calloc(1, sizeof *h);
    if (!h || pipe2(h->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(err, errlen, "cannot serve metrics: %s", strerror(errno));
        free(h);
        close(lfd);
        return NULL;
    }
    h->m = m;
    h->ready = o->ready;
    h->ready_arg = o->ready_arg;
    h->remotes = o->remotes;
    h->remotes_arg = o->remotes_arg;
    h->lfd = lfd;
    for (size_t i = 0; i < HX_SLOTS; i++)
        h->conn[i].fd = -1;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    h->port = o->port;
    if (getsockname(lfd, (struct sockaddr *)&ss, &sl) == 0)
        h->port = ntohs(ss.ss_family == AF_INET6
                            ? ((struct sockaddr_in6 *)&ss)->sin6_port
                            : ((struct sockaddr_in *)&ss)->sin_port);
    /* Signals stay with the threads that handle them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(&h->thread, NULL, run, h);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) {
        snprintf(err, errlen, "cannot serve metrics: thread: %s", strerror(e));
        close(h->wake[0]);
        close(h->wake[1]);
        close(lfd);
        free(h);
        return NULL;
    }
    return h;
}

uint16_t kl_metrics_http_port(const kl_metrics_http *h)
{
    return h->port;
}

void kl_metrics_http_stop(kl_metrics_http *h)
{
    if (!h)
        return;
    ssize_t w;
    do
        w = write(h->wake[1], "x", 1);
    while (w < 0 && errno == EINTR);
    pthread_join(h->thread, NULL);
    for (size_t i = 0; i < HX_SLOTS; i++)
        conn_close(&h->conn[i]);
    close(h->lfd);
    close(h->wake[0]);
    close(h->wake[1]);
    free(h);
}
