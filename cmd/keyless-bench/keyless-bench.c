/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-bench: load and latency for key servers (performance issue).
 *
 * Runs on libkeyless like every client: each connection is a kl_target
 * with one server, and one event loop per thread (one thread unless
 * -threads) drives all of its connections, so the tool leaves the CPU to
 * the server it measures.
 *
 * Two ways to load the server:
 * - closed loop (default, and the reference tool's -workers/-bandwidth):
 *   each connection keeps -depth requests in flight, the next sent when
 *   one completes (after -pause);
 * - open loop (-rate R): requests leave at fixed intended times, R per
 *   second in all, whatever the server does; latency runs from each
 *   request's intended send time, so a stall is charged to every request
 *   it delayed (no coordinated omission).
 * Output: the reference tool's histogram and summary lines, then
 * percentiles, errors and the tool's own CPU use; or JSON (-json). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "bench.h"
#include "client/target_int.h"
#include "core/time.h"

static volatile sig_atomic_t interrupted, continued;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* The process was stopped (SIGSTOP, ^Z, a script that stops "every
 * other process" for a quiet machine) and resumed: whatever it measured
 * meanwhile is the stop, not the server. The report says so. */
static void on_sigcont(int sig)
{
    (void)sig;
    continued = 1;
}

/* ---- requests -------------------------------------------------------- */

static uint64_t rnd_next(uint64_t *s)
{
    uint64_t x = *s; /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Request records come from chunks owned by the worker: no malloc per
 * request, and requests still pending at the end (dropped by
 * kl_target_free without callbacks) are freed with their chunk. */
static breq *req_get(bworker *w)
{
    if (!w->free) {
        size_t n = 1024;
        breq *chunk = calloc(n + 1, sizeof *chunk);
        if (!chunk)
            return NULL;
        chunk[0].next = w->chunks; /* chunk[0] links the chunks */
        w->chunks = chunk;
        for (size_t i = 1; i <= n; i++) {
            chunk[i].next = w->free;
            w->free = &chunk[i];
        }
    }
    breq *r = w->free;
    w->free = r->next;
    return r;
}

static void req_put(bworker *w, breq *r)
{
    r->next = w->free;
    w->free = r;
}

static void on_done(void *arg, const kl_result *res);

static unsigned pick_op(const bench *b, uint64_t rnd)
{
    uint64_t x = rnd % b->total_weight;
    for (unsigned i = 0; i < b->nops; i++) {
        if (x < b->ops[i].weight)
            return i;
        x -= b->ops[i].weight;
    }
    return 0;
}

static void submit(bworker *w, bconn *c, uint64_t intended)
{
    const bench *b = w->b;
    breq *r = req_get(w);
    if (!r) {
        w->st.failed++;
        return;
    }
    uint64_t x = rnd_next(&w->rnd);
    r->w = w;
    r->c = c;
    r->intended = intended;
    r->opi = (uint16_t)pick_op(b, x);
    r->ini = (uint16_t)((x >> 32) % BENCH_NINPUT);
    const bop *o = &b->ops[r->opi];
    kl_request_spec s = {
        .opcode = o->op,
        .payload = o->in + (size_t)r->ini * o->inlen,
        .payload_len = o->inlen,
        .ski = o->op == KL_OP_PING ? NULL
               : o->from_list      ? b->skis[rnd_next(&w->rnd) % b->nskis]
                                   : o->ski,
        .sni = b->sni,
        .server_ip = b->server_ip_len ? b->server_ip : NULL,
        .server_ip_len = b->server_ip_len,
    };
    /* written by flush_dirty at the end of the round: no wake-up */
    if (kl_tgt_submit_local(c->t, &s, b->timeout_ms, on_done, r) != KL_OK) {
        req_put(w, r);
        w->st.failed++;
        return;
    }
    c->inflight++;
    if (!c->dirty) {
        c->dirty = true;
        w->dirty[w->ndirty++] = c;
    }
}

/* Writes what this round submitted at once, without waiting for the
 * event loop to see the targets' wake-ups. */
static void flush_dirty(bworker *w)
{
    /* callbacks run here may mark connections again: those wait for the
     * next round (room for them: the list holds 2 x nconns) */
    size_t n = w->ndirty;
    for (size_t i = 0; i < n; i++) {
        w->dirty[i]->dirty = false;
        if (kl_tgt_flush(w->dirty[i]->t) != KL_OK)
            w->st.failed++;
    }
    memmove(w->dirty, w->dirty + n, (w->ndirty - n) * sizeof *w->dirty);
    w->ndirty -= n;
}

/* Closed loop with -pause: the connections waiting to send again, in
 * the order their pause ends (all pauses are equal, so a FIFO). */
static void pause_push(bworker *w, bconn *c, uint64_t at)
{
    if (w->npaused == w->pause_cap) {
        w->st.failed++; /* cannot happen: at most depth per connection */
        return;
    }
    size_t i = (w->pause_head + w->npaused) % w->pause_cap;
    w->paused[i].c = c;
    w->paused[i].at = at;
    w->npaused++;
}

static void on_done(void *arg, const kl_result *res)
{
    breq *r = arg;
    bworker *w = r->w;
    const bench *b = w->b;
    bconn *c = r->c;
    uint64_t now = kl_now_ns();
    c->inflight--;
    if (now >= b->t_measure && now <= b->t_end)
        bench_account(w, r, res, now);
    req_put(w, r);
    if (b->mode == MODE_OPEN || now >= b->t_end || interrupted)
        return;
    if (b->pause_ns)
        pause_push(w, c, now + b->pause_ns);
    else
        submit(w, c, now);
}

/* ---- the event loop ---------------------------------------------------- */

static void arm(int tfd, uint64_t at)
{
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    its.it_value = kl_ns_to_timespec(at);
    if (!its.it_value.tv_sec && !its.it_value.tv_nsec)
        its.it_value.tv_nsec = 1;
    (void)timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

/* Sleeps until an event or `at`: epoll_pwait2's nanosecond timeout where
 * the kernel has it (Linux 5.11) - no timer to re-arm and read per round,
 * two system calls per request at a high rate - else the timerfd, armed
 * again only when `at` moves. The thread's timer slack is 1 ns
 * (worker_run): the default 50 us would let the kernel wake it that much
 * after a request's intended time. */
static int wait_until(bworker *w, struct epoll_event *ev, int nev, uint64_t at,
                      uint64_t *armed)
{
    if (!w->no_pwait2) {
        uint64_t now = kl_now_ns(), left = at > now ? at - now : 0;
        struct timespec ts = kl_ns_to_timespec(left);
        int n = epoll_pwait2(w->epfd, ev, nev, &ts, NULL);
        if (n >= 0 || errno != ENOSYS)
            return n;
        w->no_pwait2 = true;
    }
    if (at != *armed)
        arm(w->tfd, *armed = at);
    return epoll_wait(w->epfd, ev, nev, -1);
}

/* When a request intended at t leaves: at t, or with -tick at the first
 * point of the tick grid at or after t. */
static uint64_t tick_due(const bench *b, uint64_t t)
{
    if (!b->tick_ns || t <= b->t_start)
        return t;
    uint64_t k = (t - b->t_start + b->tick_ns - 1) / b->tick_ns;
    return b->t_start + k * b->tick_ns;
}

/* Sends what is due now; returns when the next send is due. */
static uint64_t send_due(bworker *w, uint64_t now)
{
    const bench *b = w->b;
    uint64_t next = b->t_end;
    if (b->mode == MODE_OPEN) {
        /* bounded per round so that answers are read meanwhile; a send
         * that is late still carries its intended time. With -tick the
         * requests go only on the tick grid, all those due by then in
         * one write (the wait is charged to them: their intended times
         * stay). */
        if (now >= tick_due(b, w->next_send))
            for (int n = 0;
                 n < 4096 && w->next_send <= now && w->next_send < b->t_end;
                 n++) {
                submit(w, &w->conns[w->rr++ % w->nconns], w->next_send);
                w->next_send += w->interval_ns;
            }
        uint64_t due = tick_due(b, w->next_send);
        if (due < next)
            next = due;
    }
    while (w->npaused && w->paused[w->pause_head].at <= now) {
        bconn *c = w->paused[w->pause_head].c;
        w->pause_head = (w->pause_head + 1) % w->pause_cap;
        w->npaused--;
        submit(w, c, now);
    }
    if (w->npaused && w->paused[w->pause_head].at < next)
        next = w->paused[w->pause_head].at;
    return next;
}

static void *worker_run(void *arg)
{
    bworker *w = arg;
    const bench *b = w->b;
    struct epoll_event ev[64];
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); /* see wait_until */
    uint64_t now = kl_now_ns();
    if (b->mode == MODE_CLOSED)
        for (size_t i = 0; i < w->nconns; i++)
            for (unsigned d = 0; d < b->depth; d++)
                submit(w, &w->conns[i], now);
    uint64_t next_progress = now + KL_NS_PER_S, armed = 0;
    for (;;) {
        now = kl_now_ns();
        if (now >= b->t_end || interrupted)
            break;
        uint64_t next = send_due(w, now);
        flush_dirty(w);
        if (w->id == 0 && b->progress) {
            if (now >= next_progress) {
                bench_progress(w->b, now);
                next_progress += KL_NS_PER_S;
            }
            if (next_progress < next)
                next = next_progress;
        }
        int n = wait_until(w, ev, 64, next, &armed);
        for (int i = 0; i < n; i++) {
            bconn *c = ev[i].data.ptr;
            if (!c) {
                uint64_t x;
                (void)!read(w->tfd, &x, sizeof x);
                armed = 0; /* fired: the next round arms it again */
                continue;
            }
            kl_status st = kl_async_process(c->t);
            if (st != KL_OK)
                w->st.failed++;
        }
    }
    atomic_store_explicit(&w->done, true, memory_order_release);
    return NULL;
}

static int worker_setup(bworker *w)
{
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    w->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (w->epfd < 0 || w->tfd < 0)
        return -1;
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->tfd, &e) != 0)
        return -1;
    for (size_t i = 0; i < w->nconns; i++) {
        int fd = kl_async_fd(w->conns[i].t);
        struct epoll_event ce = {.events = EPOLLIN, .data.ptr = &w->conns[i]};
        if (fd < 0 || epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ce) != 0)
            return -1;
    }
    w->pause_cap = w->nconns * w->b->depth + 1;
    w->paused = calloc(w->pause_cap, sizeof *w->paused);
    w->dirty = calloc(2 * w->nconns, sizeof *w->dirty);
    return w->paused && w->dirty ? 0 : -1;
}

static void worker_free(bworker *w)
{
    for (size_t i = 0; i < w->nconns; i++)
        kl_target_free(w->conns[i].t);
    for (breq *ch = w->chunks, *n; ch; ch = n) {
        n = ch[0].next;
        free(ch);
    }
    free(w->paused);
    free(w->dirty);
    bench_stats_free(&w->st);
    if (w->epfd >= 0)
        close(w->epfd);
    if (w->tfd >= 0)
        close(w->tfd);
}

/* ---- running ----------------------------------------------------------- */

static double rusage_s(const struct timeval *tv)
{
    return (double)tv->tv_sec + (double)tv->tv_usec / (double)KL_US_PER_S;
}

/* Runs the measurement with the connections made by bench_connect. */
static int run(bench *b)
{
    unsigned nt = b->threads;
    b->workers = calloc(nt, sizeof *b->workers);
    if (!b->workers)
        return BENCH_EXIT_FAIL;
    for (unsigned i = 0; i < nt; i++) {
        bworker *w = &b->workers[i];
        w->b = b;
        w->id = (int)i;
        w->epfd = w->tfd = -1;
        w->rnd = 0x9E3779B97F4A7C15ull * (i + 1) ^ kl_now_ns();
        w->conns = b->conns + (size_t)i * b->nconns / nt;
        w->nconns =
            (size_t)(i + 1) * b->nconns / nt - (size_t)i * b->nconns / nt;
        if (bench_stats_init(&w->st, b) != 0 || worker_setup(w) != 0) {
            fprintf(stderr, "keyless-bench: cannot set up the event loop: %s\n",
                    strerror(errno));
            return BENCH_EXIT_FAIL;
        }
    }
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    continued = 0;
    uint64_t start = kl_now_ns();
    b->t_start = start;
    b->t_measure = start + b->warmup_ns;
    b->t_end = b->t_measure + b->duration_ns;
    if (b->mode == MODE_OPEN) {
        /* the rate is shared by the threads; their schedules interleave */
        for (unsigned i = 0; i < nt; i++) {
            b->workers[i].interval_ns =
                (uint64_t)((double)KL_NS_PER_S * nt / b->rate);
            b->workers[i].next_send =
                start + (uint64_t)((double)KL_NS_PER_S * i / b->rate);
        }
    }
    pthread_t *tids = calloc(nt, sizeof *tids);
    for (unsigned i = 1; i < nt && tids; i++)
        if (pthread_create(&tids[i], NULL, worker_run, &b->workers[i]) != 0)
            tids[i] = 0;
    worker_run(&b->workers[0]);
    for (unsigned i = 1; i < nt && tids; i++)
        if (tids[i])
            pthread_join(tids[i], NULL);
    free(tids);
    uint64_t end = kl_now_ns();
    getrusage(RUSAGE_SELF, &ru1);
    b->measured_ns = (end < b->t_end ? end : b->t_end) - b->t_measure;
    if (end < b->t_measure)
        b->measured_ns = 0;
    b->cpu_user_s = rusage_s(&ru1.ru_utime) - rusage_s(&ru0.ru_utime);
    b->cpu_sys_s = rusage_s(&ru1.ru_stime) - rusage_s(&ru0.ru_stime);
    b->elapsed_ns = end - start;
    b->stopped = continued;
    if (b->stopped && b->json) /* the text report has its own line */
        fprintf(stderr, "keyless-bench: warning: stopped and resumed during "
                        "the run (SIGSTOP/SIGCONT): the figures include the "
                        "stop\n");
    if (b->progress)
        bench_progress_clear();
    return BENCH_EXIT_OK;
}

int main(int argc, char **argv)
{
    bench b;
    bench_defaults(&b);
    int rc = bench_parse_args(&b, argc, argv);
    if (rc != BENCH_EXIT_OK)
        return rc == BENCH_EXIT_HELP ? BENCH_EXIT_OK : rc;
    if ((rc = bench_prepare(&b)) != BENCH_EXIT_OK)
        goto out;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = on_sigcont;
    sigaction(SIGCONT, &sa, NULL);
    /* a server that closes on us is an error to count, not a signal */
    signal(SIGPIPE, SIG_IGN);
    b.stop = &interrupted;
    if (b.idle) {
        rc = bench_hold_idle(&b);
        goto out;
    }
    if ((rc = bench_connect(&b)) != BENCH_EXIT_OK)
        goto out;
    if ((rc = run(&b)) != BENCH_EXIT_OK)
        goto out;
    rc = bench_report(&b);
out:
    for (unsigned i = 0; b.workers && i < b.threads; i++)
        worker_free(&b.workers[i]);
    if (!b.workers)
        for (size_t i = 0; i < b.nconns; i++)
            kl_target_free(b.conns[i].t);
    bench_free(&b);
    return rc;
}
