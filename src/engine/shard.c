/* SPDX-License-Identifier: Apache-2.0 */
/* A shard: one thread, one epoll loop, one SO_REUSEPORT listener, the
 * connections it accepted, and the completion queue through which worker
 * threads hand finished jobs back (a queue and a wake-up, never
 * spinning). Per loop turn the before-sleep hook processes input left for
 * later, then flushes every connection that got output during the turn - so
 * all responses that became ready in one turn leave in one TLS write per
 * connection (protocol P8). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "core/sched.h"
#include "core/time.h"
#include "engine/internal.h"

#define ACCEPT_RETRY_NS (100 * KL_NS_PER_MS)
/* inline budget per loop turn (measured: docs/DESIGN.md "Inline fast
 * operations, wake-ups and memory") */
#define KL_INLINE_TURN_NS (500u * 1000u)

void kl_shard_mark_ready(kl_shard *s, kl_conn *c)
{
    if (c->on_ready || c->state == KL_CONN_CLOSED)
        return;
    c->on_ready = true;
    c->ready_next = s->conns.ready;
    s->conns.ready = c;
}

void kl_shard_mark_dirty(kl_shard *s, kl_conn *c)
{
    if (c->on_dirty || c->state == KL_CONN_CLOSED)
        return;
    c->on_dirty = true;
    c->dirty_next = s->conns.dirty;
    s->conns.dirty = c;
}

static void wake_loop(void *loop)
{
    kl_loop_wake(loop);
}

void kl_shard_job_done(kl_job *job)
{
    kl_shard *s = job->owner;
    /* read before the push: from there on the job is the shard's */
    bool rsa = kl_crypto_cost_class(job->key) == KL_COST_SLOW;
    pthread_mutex_lock(&s->done.mu);
    bool was_empty = s->done.head == NULL;
    job->next = s->done.head;
    s->done.head = job;
    pthread_mutex_unlock(&s->done.mu);
    /* The shard takes the whole list at once, so a completion onto a
     * non-empty list has a wake-up on its way. But a pool worker may hold
     * that wake-up while it runs more jobs (kl_pool_defer_wake: at
     * saturation only, 2 ms at most; the shard then wakes once for a batch
     * of answers instead of once per RSA signature). So any job
     * but an RSA one asks again: its answer must not wait for an RSA
     * worker's batch (asking costs two atomics while the shard is awake or
     * an eventfd write is pending, loop.c). RSA jobs do not: asking for
     * every one doubled the wake-ups at RSA saturation (docs/DESIGN.md). */
    if ((was_empty || !rsa) && !kl_pool_defer_wake(wake_loop, s->ev.loop))
        kl_loop_wake(s->ev.loop);
}

/* Sampled access lines (docs/OPERATIONS.md "Logs"): one info line for a
 * fraction of successful key operations, with the request's fields (JSON
 * members with log_format: json). The sampler is a per-thread xorshift: a shard
 * thread owns its state, and its quality only has to spread the sample. */
static bool access_sampled(double rate)
{
    static _Thread_local uint64_t x;
    if (rate >= 1.0)
        return true;
    if (!x)
        x = kl_now_ns() | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return (double)(x >> 11) * (1.0 / 9007199254740992.0) < rate;
}

static void access_line(const kl_srv_job *sj)
{
    const kl_conn *c = sj->conn;
    char ski[2 * KL_SKI_LEN + 1];
    const uint8_t *k = kl_key_ski(sj->job.key);
    for (size_t i = 0; i < KL_SKI_LEN; i++)
        snprintf(ski + 2 * i, 3, "%02x", k[i]);
    /* t0 is read only when metrics time requests; otherwise no duration */
    double ms = sj->t0_ns ? kl_ns_to_ms_f(kl_now_ns() - sj->t0_ns) : -1.0;
    kl_log_fields f = {.request_id = sj->request_id,
                       .client = kl_conn_peer_label(c),
                       .connection = c->addr,
                       .opcode = kl_op_name(sj->job.opcode),
                       .ski = ski,
                       .duration_ms = ms};
    kl_logf(KL_LOG_INFO, &f,
            "connection %s (client %s): request %u%s%s%s: %s %s ok", c->addr,
            kl_conn_peer_label(c), sj->id,
            sj->request_id ? " (request_id " : "",
            sj->request_id ? sj->request_id : "", sj->request_id ? ")" : "",
            kl_op_name(sj->job.opcode), ski);
}

void kl_shard_finish_job(kl_shard *s, kl_srv_job *sj)
{
    double rate = s->srv->o.access_log_sample_rate;
    if (rate > 0 && sj->job.err == KL_OK && access_sampled(rate))
        access_line(sj);
    kl_conn_complete(sj->conn, sj);
    kl_pin_put(s, sj->pin);
    kl_shard_job_free(s, sj);
}

kl_srv_job *kl_shard_job_new(kl_shard *s, size_t size)
{
    kl_srv_job *sj = s->records.free;
    if (sj && size <= KL_JOB_RECORD) {
        s->records.free = (kl_srv_job *)sj->job.next;
        s->records.n--;
        return sj;
    }
    size_t alloc = size;
#if KL_JOB_RECORDS
    if (size <= KL_JOB_RECORD)
        alloc = KL_JOB_RECORD; /* to be kept when freed */
#endif
    if ((sj = malloc(alloc)) != NULL)
        sj->alloc = alloc;
    return sj;
}

void kl_shard_job_free(kl_shard *s, kl_srv_job *sj)
{
#if KL_JOB_RECORDS
    if (sj->alloc == KL_JOB_RECORD && s->records.n < KL_JOB_RECORDS) {
        sj->job.next = (kl_job *)s->records.free;
        s->records.free = sj;
        s->records.n++;
        return;
    }
#else
    (void)s;
#endif
    free(sj);
}

void kl_shard_records_free(kl_shard *s)
{
    while (s->records.free) {
        kl_srv_job *sj = s->records.free;
        s->records.free = (kl_srv_job *)sj->job.next;
        free(sj);
    }
    s->records.n = 0;
}

/* Whether the pool's workers have a CPU that no shard is working on:
 * fewer shards awake than CPUs (a hint, read without locks). Busy workers
 * do not count: they are where the spilled work would go. */
static bool cpu_to_spare(const kl_shard *s)
{
    const kl_server *srv = s->srv;
    int awake = 0;
    for (int i = 0; i < srv->nshards && awake < srv->ncpus; i++)
        awake += kl_loop_awake(srv->shards[i].ev.loop);
    return awake < srv->ncpus;
}

bool kl_shard_may_inline(const kl_shard *s)
{
    if (!s->budget.inline_ns)
        return false;
    /* the turn's clock is read when epoll_wait returns: the budget covers
     * everything the turn runs, the before-sleep reads included */
    if (kl_now_ns() - kl_loop_now(s->ev.loop) < s->budget.inline_ns)
        return true;
    /* Past it, the pool takes the rest only if a CPU is free to run it:
     * with every CPU busy a hand-off moves the work to the same CPUs and
     * adds its own cost (docs/DESIGN.md "Spill only to a free CPU"). The
     * turn still ends: reads are bounded per connection and turn. */
    return !cpu_to_spare(s);
}

void kl_shard_routed_flush(void *arg)
{
    kl_server *srv = arg;
    for (int i = 0; i < srv->nshards; i++)
        if (atomic_exchange(&srv->shards[i].done.routed_wake, false))
            kl_loop_wake(srv->shards[i].ev.loop);
}

static kl_job *take_done(kl_shard *s)
{
    pthread_mutex_lock(&s->done.mu);
    kl_job *list = s->done.head, *routed = s->done.routed;
    s->done.head = s->done.routed = NULL;
    pthread_mutex_unlock(&s->done.mu);
    if (routed) { /* both lists newest first: forwarded answers go last */
        kl_job *tail = routed;
        while (tail->next)
            tail = tail->next;
        tail->next = list;
        list = routed;
    }
    /* pushed newest first; answer in completion order */
    kl_job *rev = NULL;
    while (list) {
        kl_job *next = list->next;
        list->next = rev;
        rev = list;
        list = next;
    }
    return rev;
}

static void wake_blocked_shards(kl_shard *self)
{
    kl_server *srv = self->srv;
    if (atomic_load(&srv->inflight) >= srv->o.max_inflight)
        return;
    for (int i = 0; i < srv->nshards; i++) {
        kl_shard *t = &srv->shards[i];
        if (t != self && atomic_exchange(&t->conns.global_blocked, false))
            kl_loop_wake(t->ev.loop);
    }
}

static void resume_paused(kl_shard *s)
{
    if (!s->conns.paused_global)
        return;
    s->conns.paused_global = false;
    atomic_store(&s->conns.global_blocked, false);
    for (kl_conn *c = s->conns.live; c; c = c->next)
        if (c->paused)
            kl_conn_update_interest(c); /* sets paused_global again if
                                            still at the cap */
}

static void close_listener(kl_shard *s)
{
    if (s->accept.fd < 0)
        return;
    if (s->accept.held_fd >= 0)
        close(s->accept.held_fd); /* a client waiting for a handshake slot */
    s->accept.held_fd = -1;
    s->accept.parked = false;
    /* nobody may wake this loop for accepting any more: it may be freed
     * (kl_shard_destroy) while other shards still close connections */
    atomic_store(&s->accept.blocked, false);
    kl_watch_stop(s->ev.loop, &s->accept.watch);
    kl_timer_stop(s->ev.loop, &s->accept.retry);
    close(s->accept.fd);
    s->accept.fd = -1;
}

/* accept back-pressure: max_handshaking is reached. The socket
 * just accepted waits here and the rest in the kernel's listen backlog
 * (limits.c says why) until a handshake slot frees; kl_limits_wait_slot
 * has this shard woken then (resume_accepting, from on_wake). */
static void park_listener(kl_shard *s, int fd,
                          const struct sockaddr_storage *ss)
{
    s->accept.held_fd = fd;
    s->accept.held_sa = *ss;
    s->accept.parked = true;
    if (kl_watch_set(s->ev.loop, &s->accept.watch, 0) != KL_OK)
        kl_error("shard %d: cannot pause accepting", s->index);
    kl_limits_wait_slot(s);
}

static void resume_accepting(kl_shard *s)
{
    if (!s->accept.parked || s->accept.fd < 0)
        return;
    if (s->accept.held_fd >= 0) {
        if (!kl_conn_accept(s, s->accept.held_fd,
                            (struct sockaddr *)&s->accept.held_sa)) {
            kl_limits_wait_slot(s); /* another shard took the slot */
            return;
        }
        s->accept.held_fd = -1;
    }
    s->accept.parked = false;
    if (kl_watch_set(s->ev.loop, &s->accept.watch, KL_EV_READ) != KL_OK)
        kl_error("shard %d: cannot watch the listening socket", s->index);
}

static void on_drain_timer(kl_loop *l, kl_timer *t)
{
    kl_shard *s = t->data;
    s->conns.drain_expired = true;
    while (s->conns.live) {
        kl_conn *c = s->conns.live;
        kl_log(KL_LOG_INFO,
               "connection %s (client %s): closed at shutdown with %u "
               "requests in flight",
               c->addr, c->peer[0] ? c->peer : "-", c->inflight);
        kl_conn_close(c);
    }
}

static void begin_drain(kl_shard *s)
{
    s->conns.draining = true;
    close_listener(s);
    for (kl_conn *c = s->conns.live, *next; c; c = next) {
        next = c->next;
        if (c->state == KL_CONN_HANDSHAKE)
            kl_conn_close(c);
        else
            kl_conn_drain(c);
    }
    if (kl_timer_at(s->ev.loop, &s->conns.drain_timer,
                    kl_loop_now(s->ev.loop) + s->srv->o.drain_timeout_ns) !=
        KL_OK)
        on_drain_timer(s->ev.loop, &s->conns.drain_timer);
}

static void on_wake(kl_loop *l, void *arg)
{
    kl_shard *s = arg;
    bool freed = false;
    /* A reload may have replaced the store; jobs that came back release
     * the store they used (res.c). */
    kl_shard_sync(s);
    for (kl_job *j = take_done(s), *next; j; j = next) {
        next = j->next;
        freed = true;
        if (j->kind == KL_JOB_ROUTED) {
            kl_routed_complete(s, j);
            continue;
        }
        kl_shard_finish_job(s, (kl_srv_job *)j); /* KL_JOB_KEY_OP */
    }
    /* accelerator operations whose provider called back (asyncjobs.c) */
    if (kl_shard_async_poll(s))
        freed = true;
    if (freed)
        wake_blocked_shards(s);
    /* a reload changed the client CA: verify the open connections again
     * (lifetime.c), after the completions above were answered */
    if (s->res.trust_recheck)
        kl_shard_recheck_trust(s);
    resume_paused(s);
    resume_accepting(s);
    if (!s->conns.draining && atomic_load(&s->srv->stopping))
        begin_drain(s);
}

static void on_accept_retry(kl_loop *l, kl_timer *t)
{
    kl_shard *s = t->data;
    if (s->accept.fd >= 0 && !s->accept.parked &&
        kl_watch_set(l, &s->accept.watch, KL_EV_READ) != KL_OK)
        kl_error("shard %d: cannot watch the listening socket", s->index);
}

static void on_listen(kl_loop *l, kl_watch *w, unsigned events)
{
    kl_shard *s = w->data;
    /* A few connections per wake-up: a connect storm cannot
     * starve the connections already served. */
    for (int i = 0; i < KL_ACCEPTS_PER_WAKE; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int fd = accept4(s->accept.fd, (struct sockaddr *)&ss, &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            if (kl_conn_accept(s, fd, (struct sockaddr *)&ss))
                continue;
            park_listener(s, fd, &ss);
            return;
        }
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return;
        /* Out of descriptors or memory: pause accepting briefly instead
         * of spinning on a listener that stays readable. */
        kl_warn("shard %d: accept failed: %s; pausing accepts for 100 ms",
                s->index, strerror(errno));
        if (kl_watch_set(l, &s->accept.watch, 0) != KL_OK ||
            kl_timer_at(l, &s->accept.retry,
                        kl_loop_now(l) + ACCEPT_RETRY_NS) != KL_OK)
            kl_error("shard %d: cannot pause accepting", s->index);
        return;
    }
}

static bool before_sleep(kl_loop *l, void *arg)
{
    kl_shard *s = arg;
    /* Input left over from bounded reads or resumed after a pause. */
    kl_conn *ready = s->conns.ready;
    s->conns.ready = NULL;
    while (ready) {
        kl_conn *c = ready;
        ready = c->ready_next;
        c->on_ready = false;
        if (c->state == KL_CONN_OPEN)
            kl_conn_read(c);
    }
    /* One flush per connection with output: the coalesced write of P8. */
    kl_conn *dirty = s->conns.dirty;
    s->conns.dirty = NULL;
    while (dirty) {
        kl_conn *c = dirty;
        dirty = c->dirty_next;
        c->on_dirty = false;
        kl_conn_flush(c);
    }
    /* Free closed connections no job refers to any more. The lists above
     * are empty of closed connections now. */
    for (kl_conn *c = s->conns.closed, *next; c; c = next) {
        next = c->next;
        if (c->inflight > 0 || c->on_ready || c->on_dirty)
            continue;
        if (c->prev)
            c->prev->next = c->next;
        else
            s->conns.closed = c->next;
        if (c->next)
            c->next->prev = c->prev;
        kl_conn_free(c);
    }
    kl_mx_loop_turn(s); /* keylessd_loop_busy_seconds_total */
    if (s->conns.draining && s->conns.nlive == 0 &&
        (!s->conns.closed || s->conns.drain_expired)) {
        kl_loop_stop(l);
        return false;
    }
    return s->conns.ready != NULL || s->conns.dirty != NULL;
}

kl_status kl_shard_init(kl_shard *s, kl_server *srv, int index, char *err,
                        size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->srv = srv;
    s->index = index;
    s->accept.fd = -1;
    s->accept.held_fd = -1;
    atomic_init(&s->conns.global_blocked, false);
    atomic_init(&s->done.routed_wake, false);
    atomic_init(&s->accept.blocked, false);
    pthread_mutex_init(&s->done.mu, NULL);
    kl_timer_init(&s->accept.retry, on_accept_retry, s);
    kl_timer_init(&s->conns.drain_timer, on_drain_timer, s);
    kl_timer_init(&s->logs.timer, kl_shard_loglimit_timer, s);
    s->ev.loop = kl_loop_new();
    if (!s->ev.loop) {
        snprintf(err, errlen, "cannot create an event loop: %s",
                 strerror(errno));
        return KL_E_IO;
    }
    kl_loop_set_wake_fn(s->ev.loop, on_wake, s);
    if (srv->o.metrics) /* written by this shard's thread only */
        s->obs.mx = kl_metrics_local_new(srv->o.metrics, index);
    s->obs.tr = kl_tracer_ring(srv->o.tracer, (unsigned)index);
    kl_loop_set_before_sleep(s->ev.loop, before_sleep, s);
    s->budget.inline_ns = KL_INLINE_TURN_NS;
    kl_shard_sync(s);
    if (!s->res.keys || !s->res.tls) {
        snprintf(err, errlen, "out of memory");
        return KL_E_NOMEM;
    }
    return KL_OK;
}

void *kl_shard_main(void *arg)
{
    kl_shard *s = arg;
    char name[16]; /* top -H and perf show which thread is which */
    snprintf(name, sizeof name, "kl-shard-%d", s->index);
    pthread_setname_np(pthread_self(), name);
    kl_sched_thread_start(KL_THREAD_LOOP); /* realtime_priority */
    if (kl_watch_start(s->ev.loop, &s->accept.watch, s->accept.fd, KL_EV_READ,
                       on_listen, s) != KL_OK) {
        kl_error("shard %d: cannot watch the listening socket", s->index);
        return NULL;
    }
    /* A shutdown requested before this thread ran must not be missed. */
    if (atomic_load(&s->srv->stopping))
        begin_drain(s);
    if (kl_loop_run(s->ev.loop) != KL_OK)
        kl_error("shard %d: event loop failed: %s", s->index, strerror(errno));
    kl_debug("shard %d: %llu operations ran inline, %llu in the pool", s->index,
             (unsigned long long)s->budget.inlined,
             (unsigned long long)s->budget.pooled);
    close_listener(s);
    kl_shard_async_free(s); /* its watchers are on this loop */
    /* lines left out and not yet summarised: said before the exit */
    kl_loglimit_flush(kl_now_ns(), true);
    kl_crypto_thread_cleanup(); /* the contexts of the inline operations */
    return NULL;
}

void kl_shard_destroy(kl_shard *s)
{
    if (!s->ev.loop)
        return;
    /* Jobs that came back after the loop stopped, then every connection
     * left (only after the pool stopped: nothing refers to them now). */
    for (kl_job *j = take_done(s), *next; j; j = next) {
        next = j->next;
        if (j->kind == KL_JOB_ROUTED) {
            kl_routed_discard(j);
            continue;
        }
        kl_srv_job *sj = (kl_srv_job *)j;
        sj->conn->inflight--;
        kl_pin_put(s, sj->pin);
        kl_shard_job_free(s, sj);
    }
    kl_shard_records_free(s);
    while (s->conns.live)
        kl_conn_close(s->conns.live);
    while (s->conns.closed) {
        kl_conn *c = s->conns.closed;
        s->conns.closed = c->next;
        kl_conn_free(c);
    }
    close_listener(s);
    kl_shard_release_res(s);
    kl_loop_free(s->ev.loop);
    s->ev.loop = NULL;
    pthread_mutex_destroy(&s->done.mu);
}
