/* libkeyless's asynchronous client: a kl_target, its connections, its
 * requests and their deadlines (the rules are in include/keyless/client.h).
 *
 * Everything happens under the target's lock inside kl_async_submit,
 * kl_async_process and kl_async_cancel; completed requests collect on a
 * list and their callbacks run after the lock is released, so a callback
 * may call back into the target. One epoll set holds the sockets, an
 * eventfd (work queued by another thread) and a timerfd (the earliest
 * deadline, connect timeout, backoff or ping), and is the descriptor the
 * caller polls.
 *
 * A request is encoded only when it is about to be written (so the
 * deadline_ms it carries is the budget left at write time, protocol P9)
 * and only when the previous bytes of that connection have all left, so
 * requests wait unsent in the target's queue - where a deadline or a
 * cancel drops them before they cost the server anything. */
#include "keyless/client.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "client/budget.h"
#include "client/pipeline.h"
#include "client/u64map.h"
#include "core/time.h"
#include "tls/tls.h"

#define MS 1000000ull
#define DEF_TIMEOUT_MS 5000
#define DEF_CONNECT_MS 5000
#define DEF_PING_MS 10000
#define DEF_PING_TIMEOUT_MS 3000
#define DEF_BACKOFF_MIN_MS 50
#define DEF_BACKOFF_MAX_MS 5000
#define DEF_MAX_INFLIGHT 1024
#define DEF_RETRY_PCT 10
/* Bytes encoded per batch before writing: many small requests go out in
 * one TLS write, but a flood does not build an unbounded buffer. */
#define BATCH_BYTES (256u << 10)
#define CTX_JSON_MAX 512

typedef enum cstate {
    CS_IDLE = 0,   /* no connection (maybe in backoff until retry_at) */
    CS_CONNECTING, /* TCP connect in progress */
    CS_HANDSHAKE,  /* TLS handshake in progress */
    CS_READY,
} cstate;

typedef struct treq treq;
typedef struct kl_target kl_target;

typedef struct tconn {
    kl_target *t;
    int idx;
    char *host;
    uint16_t port;
    cstate st;
    int fd;
    kl_tls_conn *tls;
    kl_pipeline pipe;
    kl_u64map inflight; /* wire id -> treq (pings are not in it) */
    uint32_t events;    /* registered with epoll (0: not registered) */
    short io_want;      /* what a blocked TLS read/write waits for */
    uint64_t deadline;  /* connect/handshake must finish by then */
    uint64_t retry_at;  /* backoff: no reconnect before */
    unsigned failures;  /* consecutive, for the backoff */
    uint64_t last_write_ns, last_read_ns;
    bool ping_out;
    uint32_t ping_id;
    uint64_t ping_deadline;
    size_t split_left; /* test_split_writes: bytes left of this piece */
    size_t split_next; /* and of the body that follows the header */
    char err[200];
} tconn;

struct treq {
    uint64_t handle;
    kl_result_cb cb;
    void *arg;
    uint64_t submit_ns, deadline_ns;
    bool queued; /* in the unsent queue (else in flight on conn) */
    tconn *conn; /* in flight on */
    uint32_t id; /* wire id there */
    unsigned attempts;
    int server;
    treq *prev, *next; /* unsent queue, then the done list */
    kl_result res;
    uint8_t *resp; /* owned response message */
    kl_request_spec spec;
    kl_req_context ctx; /* caller's context members, deadline added later */
    bool has_ctx;
    /* the spec's bytes follow */
};

struct kl_target {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* blocking callers waiting for their turn */
    bool driving;      /* a blocking caller is polling */
    pid_t pid;         /* process that owns the descriptors; 0: none yet */
    kl_target_opts o;
    kl_tls_ctx *ctx;
    char *server_name;
    tconn *conns;
    size_t nconns;
    int epfd, evfd, tfd;
    uint64_t timer_at;   /* what tfd is armed for (0: disarmed) */
    treq *qhead, *qtail; /* unsent, oldest first */
    size_t queued;
    kl_u64map live; /* handle -> treq, every uncompleted request */
    uint64_t next_handle;
    uint64_t next_check; /* no deadline passes before (scan cache) */
    treq *done_head, *done_tail;
    kl_retry_budget budget;
    uint64_t rnd;
    kl_target_stats stats;
};

/* ---- small helpers ----------------------------------------------------- */

static uint64_t xorshift(kl_target *t)
{
    uint64_t x = t->rnd;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return t->rnd = x;
}

static void q_remove(kl_target *t, treq *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        t->qhead = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        t->qtail = r->prev;
    r->prev = r->next = NULL;
    r->queued = false;
    t->queued--;
}

static void q_push(kl_target *t, treq *r, bool front)
{
    r->queued = true;
    r->conn = NULL;
    if (front) {
        r->prev = NULL;
        r->next = t->qhead;
        if (t->qhead)
            t->qhead->prev = r;
        else
            t->qtail = r;
        t->qhead = r;
    } else {
        r->next = NULL;
        r->prev = t->qtail;
        if (t->qtail)
            t->qtail->next = r;
        else
            t->qhead = r;
        t->qtail = r;
    }
    t->queued++;
    if (r->deadline_ns < t->next_check)
        t->next_check = r->deadline_ns;
}

/* Moves a request (already out of the queue and of any connection) to the
 * done list; its callback runs once the lock is released. */
static void complete(kl_target *t, treq *r, kl_status st)
{
    (void)kl_u64map_del(&t->live, r->handle);
    r->res.status = st;
    r->res.handle = r->handle;
    r->res.server = r->server;
    r->res.attempts = r->attempts;
    r->res.elapsed_ns = kl_now_ns() - r->submit_ns;
    if (st == KL_OK)
        t->stats.answered++;
    else if (st == KL_E_TIMEOUT)
        t->stats.timed_out++;
    else
        t->stats.failed++;
    r->next = NULL;
    r->prev = NULL;
    if (t->done_tail)
        t->done_tail->next = r;
    else
        t->done_head = r;
    t->done_tail = r;
}

static void req_free(treq *r)
{
    free(r->resp);
    free(r);
}

/* ---- epoll, timer, wake-ups ---------------------------------------------- */

static void conn_watch(kl_target *t, tconn *c, uint32_t ev)
{
    if (c->fd < 0 || t->epfd < 0 || ev == c->events)
        return;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    int op = c->events ? (ev ? EPOLL_CTL_MOD : EPOLL_CTL_DEL) : EPOLL_CTL_ADD;
    if (epoll_ctl(t->epfd, op, c->fd, &e) == 0)
        c->events = ev;
}

/* The descriptors behind kl_async_fd, created on first use. */
static kl_status ensure_runtime(kl_target *t)
{
    if (t->epfd >= 0)
        return KL_OK;
    t->epfd = epoll_create1(EPOLL_CLOEXEC);
    t->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    t->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (t->epfd < 0 || t->evfd < 0 || t->tfd < 0)
        goto fail;
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->evfd, &e) != 0 ||
        epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->tfd, &e) != 0)
        goto fail;
    t->timer_at = 0;
    return KL_OK;
fail:
    if (t->epfd >= 0)
        close(t->epfd);
    if (t->evfd >= 0)
        close(t->evfd);
    if (t->tfd >= 0)
        close(t->tfd);
    t->epfd = t->evfd = t->tfd = -1;
    return KL_E_IO;
}

static void wake(kl_target *t)
{
    uint64_t one = 1;
    if (t->evfd >= 0)
        (void)!write(t->evfd, &one, sizeof one);
}

static void arm_timer(kl_target *t, uint64_t at)
{
    if (t->tfd < 0 || at == t->timer_at)
        return;
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    if (at != UINT64_MAX) {
        its.it_value.tv_sec = (time_t)(at / 1000000000ull);
        its.it_value.tv_nsec = (long)(at % 1000000000ull);
        if (!its.it_value.tv_sec && !its.it_value.tv_nsec)
            its.it_value.tv_nsec = 1;
    }
    if (timerfd_settime(t->tfd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
        t->timer_at = at == UINT64_MAX ? 0 : at;
}

/* ---- fork ------------------------------------------------------------ */

static void conn_forget(tconn *c)
{
    if (c->tls)
        kl_tls_conn_free(c->tls); /* memory only: SSL_free writes nothing */
    c->tls = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->events = 0;
    c->st = CS_IDLE;
    c->ping_out = false;
    c->split_left = c->split_next = 0;
    kl_u64map_free(&c->inflight);
    kl_pipeline_free(&c->pipe);
    kl_pipeline_init(&c->pipe);
}

/* In a child of the process that used the target: drop what was
 * inherited. Only close() touches the kernel: the parent's connections and
 * epoll set (shared open files) are left as they are. */
static void check_fork(kl_target *t)
{
    pid_t me = getpid();
    if (t->pid == me)
        return;
    if (t->pid != 0) {
        for (size_t i = 0; i < t->nconns; i++) {
            conn_forget(&t->conns[i]);
            t->conns[i].failures = 0;
            t->conns[i].retry_at = 0;
        }
        if (t->epfd >= 0)
            close(t->epfd);
        if (t->evfd >= 0)
            close(t->evfd);
        if (t->tfd >= 0)
            close(t->tfd);
        t->epfd = t->evfd = t->tfd = -1;
        /* the parent's requests: no callbacks in the child */
        for (size_t i = 0; i < t->live.cap; i++)
            if (t->live.slots[i].val)
                req_free(t->live.slots[i].val);
        kl_u64map_free(&t->live);
        for (treq *r = t->done_head, *n; r; r = n) {
            n = r->next;
            req_free(r);
        }
        t->qhead = t->qtail = t->done_head = t->done_tail = NULL;
        t->queued = 0;
        t->driving = false;
        t->rnd ^= (uint64_t)me * 0x9E3779B97F4A7C15ull;
    }
    t->pid = me;
}

/* ---- SIGPIPE ------------------------------------------------------------ */

/* Writes to a socket the peer closed raise SIGPIPE. The TLS layer writes
 * with write(2), so the target blocks the signal in this thread around its
 * I/O and consumes one it raised itself (one already pending is left). */
typedef struct sigpipe_guard {
    sigset_t old;
    bool was_pending;
} sigpipe_guard;

static void sigpipe_block(sigpipe_guard *g)
{
    sigset_t pipe, pend;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    sigpending(&pend);
    g->was_pending = sigismember(&pend, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe, &g->old);
}

static void sigpipe_restore(sigpipe_guard *g)
{
    sigset_t pipe, pend;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    sigpending(&pend);
    if (!g->was_pending && sigismember(&pend, SIGPIPE) == 1) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* ---- connections ---------------------------------------------------- */

static uint64_t now_plus_ms(uint64_t now, int ms)
{
    return now + (uint64_t)ms * MS;
}

/* Gives up on a connection: its requests are retried elsewhere (once,
 * before their deadline, within the budget) or fail with st; the server
 * goes into backoff. */
static void conn_fail(kl_target *t, tconn *c, kl_status st, const char *why)
{
    uint64_t now = kl_now_ns();
    if (why)
        snprintf(c->err, sizeof c->err, "%s port %u: %s", c->host,
                 (unsigned)c->port, why);
    if (c->st != CS_READY)
        t->stats.connect_failures++;
    conn_watch(t, c, 0);
    /* Collect first: the map is rebuilt by conn_forget. */
    size_t n = 0;
    treq **v = c->inflight.count ? malloc(c->inflight.count * sizeof *v) : NULL;
    for (size_t i = 0; i < c->inflight.cap && v; i++)
        if (c->inflight.slots[i].val)
            v[n++] = c->inflight.slots[i].val;
    conn_forget(c);
    for (size_t i = 0; i < n; i++) {
        treq *r = v[i];
        r->conn = NULL;
        if (r->attempts < 2 && now < r->deadline_ns &&
            t->o.retry_budget_pct > 0 && kl_budget_try_retry(&t->budget, now)) {
            t->stats.retries++;
            q_push(t, r, true);
        } else {
            complete(t, r, st);
        }
    }
    free(v);
    c->failures++;
    c->retry_at =
        now + kl_backoff_ns(c->failures, (uint64_t)t->o.backoff_min_ms * MS,
                            (uint64_t)t->o.backoff_max_ms * MS, xorshift(t));
}

static kl_status resolve(const tconn *c, struct sockaddr_storage *sa,
                         socklen_t *salen)
{
    struct addrinfo hints, *res = NULL;
    char port[8];
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_ADDRCONFIG;
    snprintf(port, sizeof port, "%u", (unsigned)c->port);
    int gr = getaddrinfo(c->host, port, &hints, &res);
    if (gr != 0) {
        /* AI_ADDRCONFIG hides ::1 without a global IPv6 address */
        hints.ai_flags = 0;
        gr = getaddrinfo(c->host, port, &hints, &res);
    }
    if (gr != 0)
        return KL_E_IO;
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    *salen = res->ai_addrlen;
    freeaddrinfo(res);
    return KL_OK;
}

static void conn_start(kl_target *t, tconn *c, uint64_t now)
{
    struct sockaddr_storage sa;
    socklen_t salen;
    if (resolve(c, &sa, &salen) != KL_OK) {
        conn_fail(t, c, KL_E_IO, "cannot resolve");
        return;
    }
    c->fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        conn_fail(t, c, KL_E_IO, strerror(errno));
        return;
    }
    /* protocol P8: small messages must not wait for Nagle's algorithm
     * (the negative control of the small-write test turns it back on). */
    int nodelay = t->o.test_split_writes ? 0 : 1;
    (void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof nodelay);
    c->deadline = now_plus_ms(now, t->o.connect_timeout_ms);
    c->st = CS_CONNECTING;
    c->err[0] = 0;
    if (connect(c->fd, (struct sockaddr *)&sa, salen) != 0 &&
        errno != EINPROGRESS) {
        conn_fail(t, c, KL_E_IO, strerror(errno));
        return;
    }
    conn_watch(t, c, EPOLLOUT);
}

static void conn_handshake(kl_target *t, tconn *c)
{
    kl_io r = kl_tls_handshake(c->tls);
    if (r == KL_IO_OK) {
        c->st = CS_READY;
        c->failures = 0;
        c->last_read_ns = c->last_write_ns = kl_now_ns();
        t->stats.connects++;
        conn_watch(t, c, EPOLLIN);
        return;
    }
    if (r == KL_IO_WANT_READ || r == KL_IO_WANT_WRITE) {
        conn_watch(t, c, r == KL_IO_WANT_READ ? EPOLLIN : EPOLLOUT);
        return;
    }
    conn_fail(t, c, r == KL_IO_EOF ? KL_E_CLOSED : KL_E_TLS,
              r == KL_IO_EOF ? "closed during the TLS handshake"
                             : kl_tls_last_error(c->tls));
}

/* A TCP connect finished (or not yet): on to the handshake. */
static void conn_connected(kl_target *t, tconn *c)
{
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr) {
        conn_fail(t, c, KL_E_IO, strerror(soerr ? soerr : errno));
        return;
    }
    struct pollfd p = {.fd = c->fd, .events = POLLOUT};
    if (poll(&p, 1, 0) <= 0)
        return; /* still connecting */
    const char *sn = t->server_name ? t->server_name : c->host;
    c->tls = kl_tls_conn_new(t->ctx, c->fd, false, sn);
    if (!c->tls) {
        conn_fail(t, c, KL_E_TLS, "cannot create a TLS connection");
        return;
    }
    c->st = CS_HANDSHAKE;
    conn_handshake(t, c);
}

/* ---- writing ---------------------------------------------------------- */

/* Writes what the connection has encoded. In test_split_writes mode each
 * message goes out as two writes, header then body (the trap this library
 * otherwise never falls into). */
static void conn_write(kl_target *t, tconn *c)
{
    c->io_want = 0;
    for (;;) {
        size_t len, n = 0;
        const uint8_t *p = kl_pipeline_out(&c->pipe, &len);
        if (!len)
            return;
        if (t->o.test_split_writes) {
            if (!c->split_left) {
                kl_header h;
                if (c->split_next) {
                    c->split_left = c->split_next; /* the body */
                    c->split_next = 0;
                } else if (kl_header_decode(p, len, &h) == KL_OK) {
                    c->split_left = KL_HEADER_LEN; /* the header alone */
                    c->split_next = h.length;
                } else {
                    c->split_left = len;
                }
            }
            if (len > c->split_left)
                len = c->split_left;
        }
        kl_io r = kl_tls_write(c->tls, p, len, &n);
        if (r == KL_IO_OK) {
            kl_pipeline_out_done(&c->pipe, n);
            c->last_write_ns = kl_now_ns();
            if (t->o.test_split_writes)
                c->split_left -= n;
            continue;
        }
        if (r == KL_IO_WANT_WRITE || r == KL_IO_WANT_READ) {
            c->io_want = r == KL_IO_WANT_WRITE ? EPOLLOUT : EPOLLIN;
            return;
        }
        conn_fail(t, c, r == KL_IO_EOF ? KL_E_CLOSED : KL_E_TLS,
                  r == KL_IO_EOF ? "connection closed by the server"
                                 : kl_tls_last_error(c->tls));
        return;
    }
}

/* Nobody waits for the answer to this id any more: the pipeline drops it
 * when it comes (the id stays outstanding until then). */
static void drop_answer(tconn *c, uint32_t id)
{
    kl_status st = kl_reqtable_cancel(&c->pipe.reqs, id);
    (void)st; /* KL_E_NOT_FOUND: the connection was reset meanwhile */
}

/* Encodes one queued request for c with the budget left now (protocol
 * P9). */
static kl_status encode_req(kl_target *t, tconn *c, treq *r, uint64_t now)
{
    char json[CTX_JSON_MAX];
    kl_req_context ctx = r->ctx;
    kl_request_spec s = r->spec;
    uint64_t left_ms = (r->deadline_ns - now) / MS;
    /* The server must finish before we stop waiting, answer's way back
     * included: keep a tenth of the budget (at most 5 ms) for it, so that
     * work the server does is work a caller receives. */
    uint64_t margin = left_ms / 10 < 5 ? left_ms / 10 : 5;
    left_ms -= margin;
    ctx.has_deadline = true;
    ctx.deadline_ms =
        left_ms ? (left_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)left_ms) : 1;
    KL_GUARD(kl_req_context_format(json, sizeof json, &ctx));
    s.req_context = json;
    uint32_t id;
    KL_GUARD(kl_pipeline_queue(&c->pipe, &s, true, &id, now));
    kl_status st = kl_u64map_put(&c->inflight, id, r);
    if (st != KL_OK) {
        drop_answer(c, id);
        return st;
    }
    r->id = id;
    r->conn = c;
    r->server = c->idx;
    r->attempts++;
    t->stats.written++;
    return KL_OK;
}

/* Moves queued requests onto c and writes them, as long as everything
 * written before has left (so the deadline in each is fresh) and c has
 * room in flight. Requests whose deadline passed are dropped unsent. */
static void conn_fill(kl_target *t, tconn *c, uint64_t now)
{
    while (c->st == CS_READY) {
        size_t unsent;
        (void)kl_pipeline_out(&c->pipe, &unsent);
        if (unsent || !t->qhead)
            return;
        size_t batch = 0;
        while (t->qhead && batch < BATCH_BYTES &&
               kl_reqtable_count(&c->pipe.reqs) < (size_t)t->o.max_inflight) {
            treq *r = t->qhead;
            q_remove(t, r);
            if (now >= r->deadline_ns) {
                t->stats.expired_unsent++;
                complete(t, r, KL_E_TIMEOUT);
                continue;
            }
            kl_status st = encode_req(t, c, r, now);
            if (st != KL_OK) {
                complete(t, r, st);
                continue;
            }
            batch += KL_PAD_TARGET;
        }
        if (!batch)
            return;
        conn_write(t, c);
        now = kl_now_ns();
    }
}

/* ---- reading ---------------------------------------------------------- */

static void conn_deliver(kl_target *t, tconn *c, kl_client_result *res)
{
    if (res->tracked && c->ping_out && res->id == c->ping_id) {
        c->ping_out = false;
        kl_client_result_free(res);
        return;
    }
    treq *r = res->tracked ? kl_u64map_del(&c->inflight, res->id) : NULL;
    if (!r) {
        kl_client_result_free(res);
        return;
    }
    r->conn = NULL;
    r->res.opcode = res->opcode;
    r->res.error = res->error;
    r->res.payload = res->payload;
    r->res.payload_len = res->payload_len;
    r->res.msg = res->msg;
    r->res.msg_len = res->msg_len;
    r->resp = res->msg; /* owned by the request from here on */
    complete(t, r, KL_OK);
}

static void conn_read(kl_target *t, tconn *c)
{
    for (;;) {
        uint8_t *dst;
        size_t cap, n = 0;
        if (kl_pipeline_in_space(&c->pipe, &dst, &cap) != KL_OK) {
            conn_fail(t, c, KL_E_TOO_LARGE, "too many unread responses");
            return;
        }
        kl_io r = kl_tls_read(c->tls, dst, cap, &n);
        if (r == KL_IO_OK) {
            kl_pipeline_in_commit(&c->pipe, n);
            c->last_read_ns = kl_now_ns();
            for (;;) {
                kl_client_result res;
                kl_status st = kl_pipeline_next(&c->pipe, &res, kl_now_ns());
                if (st == KL_E_AGAIN)
                    break;
                if (st != KL_OK) {
                    /* a malformed answer: the server cannot be trusted
                     * with the rest of this stream */
                    conn_fail(t, c, KL_E_BAD_VALUE, "malformed response");
                    return;
                }
                conn_deliver(t, c, &res);
            }
            continue;
        }
        if (r == KL_IO_WANT_READ || r == KL_IO_WANT_WRITE)
            return;
        conn_fail(t, c, r == KL_IO_EOF ? KL_E_CLOSED : KL_E_TLS,
                  r == KL_IO_EOF ? "connection closed by the server"
                                 : kl_tls_last_error(c->tls));
        return;
    }
}

/* ---- the work loop ------------------------------------------------------ */

/* Drops queued requests whose deadline passed and gives up on in-flight
 * ones (their late answers are discarded by the pipeline). A scan of all
 * requests, done only when the earliest known deadline has come. */
static void expire(kl_target *t, uint64_t now)
{
    if (now < t->next_check)
        return;
    uint64_t next = UINT64_MAX;
    size_t n = 0;
    treq **v = t->live.count ? malloc(t->live.count * sizeof *v) : NULL;
    for (size_t i = 0; i < t->live.cap; i++) {
        treq *r = t->live.slots[i].val;
        if (!r)
            continue;
        if (r->deadline_ns <= now) {
            if (v)
                v[n++] = r;
        } else if (r->deadline_ns < next) {
            next = r->deadline_ns;
        }
    }
    if (t->live.count && !v) {
        t->next_check = now + MS; /* out of memory: try again soon */
        return;
    }
    for (size_t i = 0; i < n; i++) {
        treq *r = v[i];
        if (r->queued) {
            q_remove(t, r);
            t->stats.expired_unsent++;
        } else if (r->conn) {
            (void)kl_u64map_del(&r->conn->inflight, r->id);
            drop_answer(r->conn, r->id);
            r->conn = NULL;
        }
        complete(t, r, KL_E_TIMEOUT);
    }
    free(v);
    t->next_check = next;
}

static tconn *ready_conn(kl_target *t)
{
    for (size_t i = 0; i < t->nconns; i++)
        if (t->conns[i].st == CS_READY)
            return &t->conns[i];
    return NULL;
}

/* With work waiting and no usable connection, connects to the first
 * server out of backoff (sticky failover: a working server is kept). */
static void ensure_connection(kl_target *t, uint64_t now)
{
    if (!t->qhead)
        return;
    for (size_t i = 0; i < t->nconns; i++)
        if (t->conns[i].st != CS_IDLE)
            return; /* one is up or on its way */
    for (size_t i = 0; i < t->nconns; i++) {
        tconn *c = &t->conns[i];
        if (c->retry_at > now)
            continue;
        conn_start(t, c, now);
        if (c->st != CS_IDLE)
            return;
    }
}

static void conn_ping(kl_target *t, tconn *c, uint64_t now)
{
    if (c->st != CS_READY || t->o.ping_interval_ms < 0)
        return;
    if (c->ping_out) {
        if (now >= c->ping_deadline)
            conn_fail(t, c, KL_E_TIMEOUT, "no pong in time");
        return;
    }
    uint64_t last =
        c->last_write_ns > c->last_read_ns ? c->last_write_ns : c->last_read_ns;
    if (c->inflight.count || now < now_plus_ms(last, t->o.ping_interval_ms))
        return;
    kl_request_spec s = {.opcode = KL_OP_PING};
    if (kl_pipeline_queue(&c->pipe, &s, true, &c->ping_id, now) != KL_OK)
        return;
    c->ping_out = true;
    c->ping_deadline = now_plus_ms(now, t->o.ping_timeout_ms);
    t->stats.pings++;
    conn_write(t, c);
}

static void conn_step(kl_target *t, tconn *c, uint64_t now)
{
    switch (c->st) {
    case CS_IDLE: return;
    case CS_CONNECTING:
        if (now >= c->deadline)
            conn_fail(t, c, KL_E_TIMEOUT, "connect timed out");
        else
            conn_connected(t, c);
        return;
    case CS_HANDSHAKE:
        if (now >= c->deadline)
            conn_fail(t, c, KL_E_TIMEOUT, "TLS handshake timed out");
        else
            conn_handshake(t, c);
        return;
    case CS_READY:
        conn_write(t, c);
        if (c->st == CS_READY)
            conn_read(t, c);
        if (c->st == CS_READY)
            conn_ping(t, c, now);
        return;
    }
}

/* Interest and the timer after a round of work. */
static void rearm(kl_target *t, uint64_t now)
{
    uint64_t at = t->next_check;
    for (size_t i = 0; i < t->nconns; i++) {
        tconn *c = &t->conns[i];
        switch (c->st) {
        case CS_IDLE:
            if (t->qhead && c->retry_at > now && c->retry_at < at)
                at = c->retry_at;
            break;
        case CS_CONNECTING:
        case CS_HANDSHAKE:
            if (c->deadline < at)
                at = c->deadline;
            break;
        case CS_READY: {
            size_t unsent;
            (void)kl_pipeline_out(&c->pipe, &unsent);
            uint32_t ev = EPOLLIN;
            if (unsent && c->io_want == EPOLLOUT)
                ev |= EPOLLOUT;
            conn_watch(t, c, ev);
            if (t->o.ping_interval_ms >= 0) {
                uint64_t p;
                if (c->ping_out)
                    p = c->ping_deadline;
                else {
                    uint64_t last = c->last_write_ns > c->last_read_ns
                                        ? c->last_write_ns
                                        : c->last_read_ns;
                    p = c->inflight.count
                            ? UINT64_MAX
                            : now_plus_ms(last, t->o.ping_interval_ms);
                }
                if (p < at)
                    at = p;
            }
            break;
        }
        }
    }
    arm_timer(t, at);
}

/* One round of work under the lock. */
static void run_locked(kl_target *t)
{
    uint64_t drain;
    if (t->evfd >= 0)
        (void)!read(t->evfd, &drain, sizeof drain);
    if (t->tfd >= 0 && read(t->tfd, &drain, sizeof drain) > 0)
        t->timer_at = 0;
    sigpipe_guard g;
    sigpipe_block(&g);
    uint64_t now = kl_now_ns();
    /* answers already received count even when their deadline is now */
    for (size_t i = 0; i < t->nconns; i++)
        conn_step(t, &t->conns[i], now);
    now = kl_now_ns();
    expire(t, now);
    ensure_connection(t, now);
    tconn *c = ready_conn(t);
    if (c)
        conn_fill(t, c, kl_now_ns());
    sigpipe_restore(&g);
    rearm(t, kl_now_ns());
}

/* Runs the callbacks of completed requests (lock not held). */
static void deliver(treq *list)
{
    for (treq *r = list, *n; r; r = n) {
        n = r->next;
        if (r->cb)
            r->cb(r->arg, &r->res);
        req_free(r);
    }
}

static treq *take_done(kl_target *t)
{
    treq *d = t->done_head;
    t->done_head = t->done_tail = NULL;
    return d;
}

kl_status kl_async_process(kl_target *t)
{
    pthread_mutex_lock(&t->mu);
    check_fork(t);
    kl_status st = ensure_runtime(t);
    if (st == KL_OK)
        run_locked(t);
    treq *d = take_done(t);
    pthread_mutex_unlock(&t->mu);
    deliver(d);
    return st;
}

int kl_async_fd(kl_target *t)
{
    pthread_mutex_lock(&t->mu);
    check_fork(t);
    int fd = ensure_runtime(t) == KL_OK ? t->epfd : -1;
    pthread_mutex_unlock(&t->mu);
    return fd;
}

/* ---- requests ------------------------------------------------------------ */

/* Copies a field into the request's trailing bytes. */
static const void *put(uint8_t **at, const void *p, size_t n)
{
    if (!p)
        return NULL;
    void *dst = *at;
    if (n)
        memcpy(dst, p, n);
    *at += n;
    return dst;
}

static size_t slen(const char *s)
{
    return s ? strlen(s) + 1 : 0;
}

static treq *req_new(const kl_request_spec *s)
{
    size_t extra = s->payload_len + s->supplemental_len +
                   (s->ski ? KL_SKI_LEN : 0) + (s->digest ? KL_DIGEST_LEN : 0) +
                   s->client_ip_len + s->server_ip_len + slen(s->sni) +
                   slen(s->cert_id) + slen(s->custom_func) +
                   s->span_context_len;
    treq *r = calloc(1, sizeof *r + extra);
    if (!r)
        return NULL;
    uint8_t *at = (uint8_t *)(r + 1);
    kl_request_spec *d = &r->spec;
    *d = *s;
    d->id = 0;
    d->req_context = NULL;
    d->payload = put(&at, s->payload, s->payload_len);
    d->supplemental = put(&at, s->supplemental, s->supplemental_len);
    d->ski = put(&at, s->ski, s->ski ? KL_SKI_LEN : 0);
    d->digest = put(&at, s->digest, s->digest ? KL_DIGEST_LEN : 0);
    d->client_ip = put(&at, s->client_ip, s->client_ip_len);
    d->server_ip = put(&at, s->server_ip, s->server_ip_len);
    d->sni = put(&at, s->sni, slen(s->sni));
    d->cert_id = put(&at, s->cert_id, slen(s->cert_id));
    d->custom_func = put(&at, s->custom_func, slen(s->custom_func));
    d->span_context = put(&at, s->span_context, s->span_context_len);
    return r;
}

kl_status kl_async_submit(kl_target *t, const kl_request_spec *spec,
                          int timeout_ms, kl_result_cb cb, void *arg,
                          uint64_t *handle)
{
    if (handle)
        *handle = 0;
    treq *r = req_new(spec);
    KL_ENSURE(r != NULL, KL_E_NOMEM);
    if (spec->req_context) {
        /* the caller's members (request_id, hops) travel on; deadline_ms
         * is ours to set */
        if (kl_req_context_parse((const uint8_t *)spec->req_context,
                                 strlen(spec->req_context), &r->ctx) != KL_OK) {
            free(r);
            return KL_E_BAD_VALUE;
        }
    }
    r->cb = cb;
    r->arg = arg;
    r->server = -1;
    r->submit_ns = kl_now_ns();
    r->deadline_ns = now_plus_ms(r->submit_ns,
                                 timeout_ms > 0 ? timeout_ms : t->o.timeout_ms);

    pthread_mutex_lock(&t->mu);
    check_fork(t);
    kl_status st = ensure_runtime(t);
    if (st == KL_OK) {
        r->handle = ++t->next_handle;
        st = kl_u64map_put(&t->live, r->handle, r);
    }
    if (st != KL_OK) {
        pthread_mutex_unlock(&t->mu);
        free(r);
        return st;
    }
    t->stats.submitted++;
    kl_budget_request(&t->budget, r->submit_ns);
    q_push(t, r, false);
    if (handle)
        *handle = r->handle;
    wake(t);
    pthread_mutex_unlock(&t->mu);
    return KL_OK;
}

kl_status kl_async_cancel(kl_target *t, uint64_t handle)
{
    pthread_mutex_lock(&t->mu);
    check_fork(t);
    treq *r = kl_u64map_del(&t->live, handle);
    if (!r) {
        pthread_mutex_unlock(&t->mu);
        return KL_E_NOT_FOUND;
    }
    if (r->queued) {
        q_remove(t, r); /* never written */
    } else if (r->conn) {
        (void)kl_u64map_del(&r->conn->inflight, r->id);
        drop_answer(r->conn, r->id);
    }
    t->stats.cancelled++;
    pthread_mutex_unlock(&t->mu);
    req_free(r);
    return KL_OK;
}

/* ---- blocking ------------------------------------------------------------ */

typedef struct waiter {
    kl_target *t;
    bool done;
    kl_status st;
    kl_client_result *out;
} waiter;

static void call_done(void *arg, const kl_result *res)
{
    waiter *w = arg;
    kl_status st = res->status;
    if (st == KL_OK) {
        uint8_t *m = malloc(res->msg_len);
        if (!m) {
            st = KL_E_NOMEM;
        } else {
            memcpy(m, res->msg, res->msg_len);
            w->out->msg = m;
            w->out->msg_len = res->msg_len;
            w->out->opcode = res->opcode;
            w->out->error = res->error;
            w->out->payload =
                res->payload ? m + (res->payload - res->msg) : NULL;
            w->out->payload_len = res->payload_len;
            w->out->tracked = true;
            w->out->rtt_ns = res->elapsed_ns;
            w->out->id = 0;
        }
    }
    pthread_mutex_lock(&w->t->mu);
    w->st = st;
    w->done = true;
    pthread_cond_broadcast(&w->t->cv);
    pthread_mutex_unlock(&w->t->mu);
}

kl_status kl_target_call(kl_target *t, const kl_request_spec *spec,
                         int timeout_ms, kl_client_result *out)
{
    waiter w = {.t = t, .out = out};
    memset(out, 0, sizeof *out);
    KL_GUARD(kl_async_submit(t, spec, timeout_ms, call_done, &w, NULL));
    pthread_mutex_lock(&t->mu);
    while (!w.done) {
        if (t->driving) {
            /* another caller polls; it wakes us when callbacks ran */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 20 * (long)MS;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&t->cv, &t->mu, &ts);
            continue;
        }
        t->driving = true;
        int fd = t->epfd;
        pthread_mutex_unlock(&t->mu);
        kl_status pst = kl_async_process(t);
        (void)pst; /* it fails only where the submit above would have */
        pthread_mutex_lock(&t->mu);
        if (!w.done) {
            pthread_mutex_unlock(&t->mu);
            /* the request's own deadline arms the timer, so this wait is
             * bounded; the cap only lets a turn pass to other callers */
            struct pollfd p = {.fd = fd, .events = POLLIN};
            (void)poll(&p, 1, 100);
            pthread_mutex_lock(&t->mu);
        }
        t->driving = false;
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return w.st;
}

/* ---- creation ------------------------------------------------------------ */

static kl_status parse_server(const char *s, char **host, uint16_t *port)
{
    const char *h = s, *colon = NULL;
    size_t hlen;
    if (!s || !*s)
        return KL_E_CONFIG;
    if (*s == '[') {
        const char *end = strchr(s, ']');
        if (!end)
            return KL_E_CONFIG;
        h = s + 1;
        hlen = (size_t)(end - h);
        if (end[1] == ':')
            colon = end + 1;
        else if (end[1])
            return KL_E_CONFIG;
    } else {
        colon = strrchr(s, ':');
        if (colon && strchr(s, ':') != colon)
            colon = NULL; /* a bare IPv6 literal */
        hlen = colon ? (size_t)(colon - s) : strlen(s);
    }
    *port = KL_DEFAULT_PORT;
    if (colon) {
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (*end || p <= 0 || p > 65535)
            return KL_E_CONFIG;
        *port = (uint16_t)p;
    }
    *host = strndup(h, hlen);
    return *host ? KL_OK : KL_E_NOMEM;
}

static int def(int v, int d)
{
    return v > 0 ? v : d;
}

kl_status kl_target_new(const kl_target_opts *o, kl_target **out, char *err,
                        size_t errlen)
{
    char dummy[8];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = 0;
    *out = NULL;
    if (!o->servers || !o->nservers) {
        snprintf(err, errlen, "no key server given");
        return KL_E_CONFIG;
    }
    kl_target *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return KL_E_NOMEM;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->epfd = t->evfd = t->tfd = -1;
    t->o = *o;
    t->o.servers = NULL;
    t->o.timeout_ms = def(o->timeout_ms, DEF_TIMEOUT_MS);
    t->o.connect_timeout_ms = def(o->connect_timeout_ms, DEF_CONNECT_MS);
    t->o.ping_interval_ms =
        o->ping_interval_ms < 0 ? -1 : def(o->ping_interval_ms, DEF_PING_MS);
    t->o.ping_timeout_ms = def(o->ping_timeout_ms, DEF_PING_TIMEOUT_MS);
    t->o.backoff_min_ms = def(o->backoff_min_ms, DEF_BACKOFF_MIN_MS);
    t->o.backoff_max_ms = def(o->backoff_max_ms, DEF_BACKOFF_MAX_MS);
    t->o.max_inflight = def(o->max_inflight, DEF_MAX_INFLIGHT);
    t->o.retry_budget_pct =
        o->retry_budget_pct < 0 ? 0 : def(o->retry_budget_pct, DEF_RETRY_PCT);
    t->next_check = UINT64_MAX;
    t->rnd = kl_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)t;
    if (!t->rnd)
        t->rnd = 1;
    kl_budget_init(&t->budget, (uint32_t)t->o.retry_budget_pct);
    kl_u64map_init(&t->live);
    if (o->server_name && *o->server_name)
        t->server_name = strdup(o->server_name);
    t->conns = calloc(o->nservers, sizeof *t->conns);
    if (!t->conns || (o->server_name && *o->server_name && !t->server_name)) {
        kl_target_free(t);
        snprintf(err, errlen, "out of memory");
        return KL_E_NOMEM;
    }
    t->nconns = o->nservers;
    for (size_t i = 0; i < o->nservers; i++) {
        tconn *c = &t->conns[i];
        c->t = t;
        c->idx = (int)i;
        c->fd = -1;
        kl_pipeline_init(&c->pipe);
        kl_u64map_init(&c->inflight);
        kl_status st = parse_server(o->servers[i], &c->host, &c->port);
        if (st != KL_OK) {
            snprintf(err, errlen, "bad key server address \"%s\"",
                     o->servers[i] ? o->servers[i] : "");
            kl_target_free(t);
            return st;
        }
    }
    kl_tls_opts topts = {.cert_file = o->cert_file,
                         .key_file = o->key_file,
                         .ca_file = o->ca_file,
                         .tls12_only = o->tls12_only};
    t->ctx = kl_tls_client_ctx_new(&topts, err, errlen);
    if (!t->ctx) {
        kl_target_free(t);
        return KL_E_CONFIG;
    }
    *out = t;
    return KL_OK;
}

void kl_target_free(kl_target *t)
{
    if (!t)
        return;
    bool mine = t->pid == 0 || t->pid == getpid();
    sigpipe_guard g;
    sigpipe_block(&g);
    for (size_t i = 0; i < t->nconns; i++) {
        tconn *c = &t->conns[i];
        if (mine && c->tls && c->st == CS_READY)
            kl_tls_shutdown(c->tls);
        conn_forget(c);
        kl_u64map_free(&c->inflight);
        kl_pipeline_free(&c->pipe);
        free(c->host);
    }
    sigpipe_restore(&g);
    for (size_t i = 0; i < t->live.cap; i++)
        if (t->live.slots[i].val)
            req_free(t->live.slots[i].val);
    kl_u64map_free(&t->live);
    for (treq *r = t->done_head, *n; r; r = n) {
        n = r->next;
        req_free(r);
    }
    if (t->epfd >= 0)
        close(t->epfd);
    if (t->evfd >= 0)
        close(t->evfd);
    if (t->tfd >= 0)
        close(t->tfd);
    kl_tls_ctx_free(t->ctx);
    free(t->conns);
    free(t->server_name);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

void kl_target_get_stats(kl_target *t, kl_target_stats *out)
{
    pthread_mutex_lock(&t->mu);
    *out = t->stats;
    pthread_mutex_unlock(&t->mu);
}

int kl_target_active_server(kl_target *t)
{
    pthread_mutex_lock(&t->mu);
    tconn *c = ready_conn(t);
    int idx = c ? c->idx : -1;
    pthread_mutex_unlock(&t->mu);
    return idx;
}
