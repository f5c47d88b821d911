/* SPDX-License-Identifier: Apache-2.0 */
/* libkeyless's asynchronous client, the kl_target itself: options and
 * creation, the descriptors behind kl_async_fd (created lazily, in the
 * process that uses them), fork detection, and one round of work. The
 * layout of the four target files is in target_int.h. */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "client/target_int.h"
#include "core/time.h"
#include "tls/tls.h"

#define DEF_TIMEOUT_MS 5000
#define DEF_CONNECT_MS 5000
#define DEF_PING_MS 10000
#define DEF_PING_TIMEOUT_MS 3000
#define DEF_BACKOFF_MIN_MS 50
#define DEF_BACKOFF_MAX_MS 5000
#define DEF_MAX_INFLIGHT 1024
#define DEF_RETRY_PCT 10

uint64_t kl_tgt_random(kl_target *t)
{
    uint64_t x = t->rnd; /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return t->rnd = x;
}

/* ---- epoll, timer, wake-ups ---------------------------------------------- */

static void close_runtime(kl_target *t)
{
    if (t->epfd >= 0)
        close(t->epfd);
    if (t->evfd >= 0)
        close(t->evfd);
    if (t->tfd >= 0)
        close(t->tfd);
    t->epfd = t->evfd = t->tfd = -1;
    t->woken = false;
    t->timer_at = 0;
}

kl_status kl_tgt_runtime(kl_target *t)
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
    t->woken = false;
    return KL_OK;
fail:
    close_runtime(t);
    return KL_E_IO;
}

/* One eventfd write per round, however many requests are submitted: the
 * flag is cleared when run_locked drains the eventfd. */
void kl_tgt_wake(kl_target *t)
{
    uint64_t one = 1;
    if (t->evfd < 0 || t->woken)
        return;
    if (write(t->evfd, &one, sizeof one) == sizeof one)
        t->woken = true;
}

/* Arms the timer for `at` unless it is already armed no later: a wake-up
 * before anything is due only costs a round that finds nothing to do,
 * while re-arming on every round (the earliest deadline moves with each
 * answer) would cost a system call per round. */
static void arm_timer(kl_target *t, uint64_t at)
{
    if (t->tfd < 0 || at == UINT64_MAX || (t->timer_at && t->timer_at <= at))
        return;
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    its.it_value = kl_ns_to_timespec(at);
    if (!its.it_value.tv_sec && !its.it_value.tv_nsec)
        its.it_value.tv_nsec = 1;
    if (timerfd_settime(t->tfd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
        t->timer_at = at;
}

/* ---- fork ------------------------------------------------------------ */

/* Counts forks in this process (and its children): the atfork handler
 * runs in the child of every fork() made through the C library, so a
 * target needs getpid() only when the count moved. */
static atomic_uint_fast64_t forks;
static pthread_once_t forks_once = PTHREAD_ONCE_INIT;

static void count_fork(void)
{
    atomic_fetch_add_explicit(&forks, 1, memory_order_relaxed);
}

static void watch_forks(void)
{
    (void)pthread_atfork(NULL, NULL, count_fork);
}

/* In a child of the process that used the target: drop what was
 * inherited. Only close() touches the kernel: the parent's connections and
 * epoll set (shared open files) are left as they are. */
void kl_tgt_check_fork(kl_target *t)
{
    uint64_t gen = atomic_load_explicit(&forks, memory_order_relaxed);
    if (t->pid != 0 && gen == t->fork_gen)
        return;
    t->fork_gen = gen;
    pid_t me = getpid();
    if (t->pid == me)
        return;
    if (t->pid != 0) {
        for (size_t i = 0; i < t->nconns; i++) {
            kl_tgt_conn_forget(&t->conns[i]);
            t->conns[i].failures = 0;
            t->conns[i].retry_at = 0;
        }
        close_runtime(t);
        /* the parent's requests: no callbacks in the child */
        kl_tgt_drop_requests(t);
        t->driving = false;
        t->connecting = 0;
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
    bool active;      /* a SIGPIPE we raise must be consumed */
    bool was_pending; /* one was pending before (the caller's) */
} sigpipe_guard;

static void sigpipe_block(sigpipe_guard *g, bool ignored)
{
    struct sigaction sa;
    g->active = g->was_pending = false;
    if (ignored) /* the caller said so (kl_tgt_set_sigpipe_ignored) */
        return;
    /* ignored by the process (the usual choice of servers): nothing to
     * do, at the cost of one system call instead of three */
    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
        return;
    sigset_t pipe, pend;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    if (pthread_sigmask(SIG_BLOCK, &pipe, &g->old) != 0)
        return;
    g->active = true;
    /* unblocked before, nothing can have been pending for this thread;
     * blocked by the caller, one may be - and it is theirs */
    if (sigismember(&g->old, SIGPIPE) == 1)
        g->was_pending =
            sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE) == 1;
}

static void sigpipe_restore(sigpipe_guard *g)
{
    if (!g->active)
        return;
    sigset_t pipe, pend;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    if (!g->was_pending && sigpending(&pend) == 0 &&
        sigismember(&pend, SIGPIPE) == 1) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    if (sigismember(&g->old, SIGPIPE) != 1)
        pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* ---- the work loop ------------------------------------------------------ */

/* Interest and the timer after a round of work. */
static void rearm(kl_target *t, uint64_t now)
{
    uint64_t at = t->next_check;
    for (size_t i = 0; i < t->nconns; i++)
        kl_tgt_conn_rearm(t, &t->conns[i], now, &at);
    arm_timer(t, at);
}

/* One round of work under the lock: with reads, what the descriptors have
 * for us (wake-up, timer, answers) first; then expiry, connecting and
 * writing what is queued. */
static void run_locked(kl_target *t, bool reads)
{
    uint64_t drain, now = kl_now_ns();
    /* only what can be ready is read: wake() is the eventfd's one writer
     * and the timer fires at timer_at, both known under the lock */
    if (reads && t->woken && read(t->evfd, &drain, sizeof drain) > 0)
        t->woken = false;
    if (reads && t->timer_at && now >= t->timer_at &&
        read(t->tfd, &drain, sizeof drain) > 0)
        t->timer_at = 0;
    sigpipe_guard g;
    sigpipe_block(&g, t->sigpipe_ignored);
    /* answers already received count even when their deadline is now */
    for (size_t i = 0; reads && i < t->nconns; i++)
        kl_tgt_conn_step(t, &t->conns[i], now);
    now = kl_now_ns();
    kl_tgt_expire(t, now);
    kl_tgt_ensure_connection(t, now);
    kl_tgt_fail_unreachable(t, kl_now_ns());
    kl_tconn *c = kl_tgt_ready_conn(t);
    if (c)
        kl_tgt_fill(t, c, kl_now_ns());
    sigpipe_restore(&g);
    rearm(t, kl_now_ns());
}

static kl_status process(kl_target *t, bool reads)
{
    pthread_mutex_lock(&t->mu);
    kl_tgt_check_fork(t);
    kl_status st = kl_tgt_runtime(t);
    if (st == KL_OK)
        run_locked(t, reads);
    kl_treq *done = t->done_head;
    t->done_head = t->done_tail = NULL;
    pthread_mutex_unlock(&t->mu);
    kl_tgt_deliver(done);
    return st;
}

kl_status kl_async_process(kl_target *t)
{
    return process(t, true);
}

kl_status kl_tgt_flush(kl_target *t)
{
    /* no reads: the caller's poller reports answers, and a read that finds
     * nothing costs a system call */
    return process(t, false);
}

void kl_tgt_set_sigpipe_ignored(kl_target *t)
{
    pthread_mutex_lock(&t->mu);
    t->sigpipe_ignored = true;
    pthread_mutex_unlock(&t->mu);
}

int kl_async_fd(kl_target *t)
{
    pthread_mutex_lock(&t->mu);
    kl_tgt_check_fork(t);
    int fd = kl_tgt_runtime(t) == KL_OK ? t->epfd : -1;
    pthread_mutex_unlock(&t->mu);
    return fd;
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

static void set_options(kl_target *t, const kl_target_opts *o)
{
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
    pthread_once(&forks_once, watch_forks);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->epfd = t->evfd = t->tfd = -1;
    set_options(t, o);
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
    for (size_t i = 0; i < o->nservers; i++)
        kl_tgt_conn_init(&t->conns[i], t, (int)i); /* all, before any exit */
    for (size_t i = 0; i < o->nservers; i++) {
        kl_tconn *c = &t->conns[i];
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
    sigpipe_block(&g, t->sigpipe_ignored);
    for (size_t i = 0; i < t->nconns; i++) {
        kl_tconn *c = &t->conns[i];
        /* close_notify only on our own connections, never a parent's */
        kl_link_reset(&c->ln, mine && c->st == CS_READY);
        kl_tgt_conn_forget(c);
        kl_link_free(&c->ln);
        free(c->host);
    }
    sigpipe_restore(&g);
    kl_tgt_drop_requests(t);
    close_runtime(t);
    kl_tls_ctx_free(t->ctx);
    free(t->conns);
    free(t->server_name);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* ---- introspection ------------------------------------------------------ */

void kl_target_get_stats(kl_target *t, kl_target_stats *out)
{
    pthread_mutex_lock(&t->mu);
    *out = t->stats;
    pthread_mutex_unlock(&t->mu);
}

int kl_target_active_server(kl_target *t)
{
    pthread_mutex_lock(&t->mu);
    kl_tconn *c = kl_tgt_ready_conn(t);
    int idx = c ? c->idx : -1;
    pthread_mutex_unlock(&t->mu);
    return idx;
}

void kl_target_conn_info(kl_target *t, kl_conn_info *out)
{
    memset(out, 0, sizeof *out);
    out->server = -1;
    pthread_mutex_lock(&t->mu);
    kl_tconn *c = kl_tgt_ready_conn(t), *last = NULL;
    if (c) {
        out->server = c->idx;
        snprintf(out->host, sizeof out->host, "%s", c->host);
        out->port = c->port;
        snprintf(out->tls_version, sizeof out->tls_version, "%s",
                 kl_tls_version(c->ln.tls));
        snprintf(out->cipher, sizeof out->cipher, "%s",
                 kl_tls_cipher(c->ln.tls));
    }
    for (size_t i = 0; i < t->nconns; i++)
        if (t->conns[i].failed_ns &&
            (!last || t->conns[i].failed_ns > last->failed_ns))
            last = &t->conns[i];
    if (last)
        snprintf(out->last_error, sizeof out->last_error, "%s", last->err);
    pthread_mutex_unlock(&t->mu);
}
