/* SPDX-License-Identifier: Apache-2.0 */
/* The router's thread and its requests (router.h has the rules,
 * router_int.h the layout).
 *
 * A request crosses threads once: kl_router_route copies it, puts it in
 * the inbox and wakes the loop; everything after - the table lookup, the
 * candidates, each attempt, the answer - happens on the router thread,
 * which owns every upstream connection. Attempts go to one remote at a
 * time, best first: an error answer that another remote might not give
 * (key not found, internal error, remote configuration error), a timeout
 * or a lost connection moves on to the next candidate, up to max_attempts
 * and within the request's deadline (protocol P9). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/sched.h"
#include "core/time.h"
#include "router/dns.h"
#include "router/router_int.h"

/* ---- finishing ------------------------------------------------------- */

/* The hand-over from other threads: a few pointer writes under inbox_mu,
 * which nothing holds for longer (a shard must never wait for the router
 * thread's system calls - that would be head-of-line blocking again). */
static void inbox_push(kl_router *r, kl_rreq *q)
{
    pthread_mutex_lock(&r->inbox_mu);
    if (!q->queued) {
        q->queued = true;
        q->inbox_next = NULL;
        if (r->inbox_tail)
            r->inbox_tail->inbox_next = q;
        else
            r->inbox_head = q;
        r->inbox_tail = q;
    }
    pthread_mutex_unlock(&r->inbox_mu);
}

/* Whether q sits in the inbox (mu held: so that cancel cannot queue it
 * meanwhile). */
static bool queued(kl_router *r, kl_rreq *q)
{
    pthread_mutex_lock(&r->inbox_mu);
    bool in = q->queued;
    pthread_mutex_unlock(&r->inbox_mu);
    return in;
}

/* The batch flush (router.h, answer_hold_ns). Each answer may wait
 * 1% of its own round trip, at most the configured hold: the flush is due
 * at the earliest of those. Far remotes' answers then reach the shards -
 * and the clients - a few at a time instead of one wake-up, one TLS
 * record and one client read each, which on a busy machine is CPU taken
 * from local requests (the in-order outage: docs/ROUTING.md "Head-of-line
 * blocking: local latency with remote traffic"). */
static void hold_answer(kl_router *r, kl_rreq *q)
{
    uint64_t now = kl_now_ns();
    uint64_t hold = now > q->t0_ns ? (now - q->t0_ns) / 100 : 0;
    uint64_t max = r->o.answer_hold_ns;
    if (hold > max)
        hold = max;
    if (!r->flush_pending || now + hold < r->flush_due_ns)
        r->flush_due_ns = now + hold;
    r->flush_pending = true;
}

static void run_flush(kl_router *r)
{
    r->flush_pending = false;
    pthread_mutex_lock(&r->mu);
    void (*fn)(void *) = r->flush_fn;
    void *arg = r->flush_arg;
    pthread_mutex_unlock(&r->mu);
    if (fn)
        fn(arg);
}

static void on_flush_timer(kl_loop *loop, kl_timer *t)
{
    (void)loop;
    kl_router *r = t->data;
    if (r->flush_pending)
        run_flush(r);
}

/* At the end of a loop turn: flush now or when the earliest hold ends. */
static void schedule_flush(kl_router *r)
{
    if (!r->flush_pending)
        return;
    if (kl_now_ns() >= r->flush_due_ns ||
        kl_timer_at(r->loop, &r->flush_timer, r->flush_due_ns) != KL_OK)
        run_flush(r);
}

void kl_router_set_flush(kl_router *r, void (*fn)(void *arg), void *arg)
{
    pthread_mutex_lock(&r->mu);
    r->flush_fn = fn;
    r->flush_arg = arg;
    pthread_mutex_unlock(&r->mu);
}

void kl_rt_finish(kl_rreq *q, kl_status err, const uint8_t *payload, size_t len)
{
    kl_router *r = q->r;
    pthread_mutex_lock(&r->mu); /* the live list: cancel and stats read it */
    if (q->live_prev)
        q->live_prev->live_next = q->live_next;
    else
        r->live = q->live_next;
    if (q->live_next)
        q->live_next->live_prev = q->live_prev;
    q->live_prev = q->live_next = NULL;
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_sub(&r->nlive, 1);
    if (err == KL_OK)
        KL_RT_INC(r, answered);
    q->done(q->arg, err, payload, len);
    hold_answer(r, q);
    pthread_mutex_lock(&r->mu);
    bool in_inbox = queued(r, q);
    q->done = NULL; /* finished: the inbox frees it if it is queued */
    pthread_mutex_unlock(&r->mu);
    if (!in_inbox)
        free(q);
}

/* Every candidate has been tried or none is left. */
static void give_up(kl_rreq *q)
{
    kl_router *r = q->r;
    if (q->attempts && q->not_found == q->attempts) {
        KL_RT_INC(r, not_found); /* every remote asked said so */
        kl_rt_finish(q, KL_E_KEY_NOT_FOUND, NULL, 0);
        return;
    }
    if (!q->attempts)
        KL_RT_INC(r, no_route);
    /* protocol P6: no healthy route could serve it */
    kl_rt_finish(q, KL_E_REMOTE_CONFIG, NULL, 0);
}

/* ---- attempts ---------------------------------------------------------- */

static void on_answer(void *arg, const kl_result *res);

void kl_rt_attempt_failed(kl_rreq *q)
{
    kl_router *r = q->r;
    kl_trace_attempt_end(r->o.tracer, &q->tra, "connection lost", true);
    pthread_mutex_lock(&r->mu);
    bool cancelled = q->cancelled;
    pthread_mutex_unlock(&r->mu);
    if (cancelled) {
        KL_RT_INC(r, cancelled);
        kl_rt_finish(q, KL_E_INTERNAL, NULL, 0);
        return;
    }
    q->rm->failed++;
    q->rm->up = false;
    q->uncounted++; /* a lost connection (kl_rt_may_try) */
    kl_rt_next_attempt(q);
}

void kl_rt_next_attempt(kl_rreq *q)
{
    kl_router *r = q->r;
    uint64_t now = kl_now_ns();
    if (now >= q->deadline_ns) {
        KL_RT_INC(r, expired);
        /* P6: a passed deadline is answered `internal error` */
        kl_rt_finish(q, KL_E_INTERNAL, NULL, 0);
        return;
    }
    const kl_rt_key *k = kl_rt_find(r->table, q->spec.ski);
    /* a sealed key the table does not route: the remotes its policy
     * admits (sealed.c) */
    kl_rt_pclass *pc = !k && q->policy ? kl_rt_pclass_get(r, q->policy) : NULL;
    if (!k && (!pc || !pc->n)) {
        /* the table changed under it: no server has the key any more */
        if (!q->attempts) {
            KL_RT_INC(r, not_found);
            if (q->policy)
                KL_RT_INC(r, sealed_no_remote);
        }
        kl_rt_finish(q, q->attempts ? KL_E_REMOTE_CONFIG : KL_E_KEY_NOT_FOUND,
                     NULL, 0);
        return;
    }
    while (kl_rt_may_try(q, r->o.max_attempts)) {
        kl_remote *cand[KL_RT_MAX_ATTEMPTS];
        size_t n = k ? kl_rt_candidates(r, r->table, k, q->spec.has_compliance,
                                        q->spec.compliance, q->tried,
                                        q->attempts, cand, 1)
                     : kl_rt_candidates_sealed(r, r->table, pc->servers, pc->n,
                                               q->spec.has_compliance,
                                               q->spec.compliance, q->tried,
                                               q->attempts, cand, 1);
        if (!n)
            break;
        kl_remote *rm = cand[0];
        q->tried[q->attempts++] = rm;
        /* an attempt that cannot go out is not counted (kl_rt_may_try) */
        q->uncounted++;
        if (!rm->in_table)
            continue;
        kl_upconn *c = kl_remote_conn(rm);
        if (!c)
            continue;
        /* libkeyless gets the request's whole budget, so the remote sees
         * the real deadline (P9 deadline_ms) and queues the request rather
         * than shedding it for missing a 20 ms attempt timeout; the
         * attempt timeout is the router's own (stall.c): it ends an
         * attempt only when the connection stops answering */
        uint64_t left_ms = (q->deadline_ns - now) / KL_NS_PER_MS;
        int timeout = left_ms > INT32_MAX ? INT32_MAX
                      : left_ms           ? (int)left_ms
                                          : 1;
        /* route-choice span; the attempt's id goes upstream */
        kl_trace_attempt_begin(r->o.tracer, &q->tra, now, rm->name, rm->region,
                               (unsigned)n);
        pthread_mutex_lock(&r->mu);
        if (q->cancelled) {
            pthread_mutex_unlock(&r->mu);
            kl_trace_attempt_end(r->o.tracer, &q->tra, "cancelled", true);
            KL_RT_INC(r, cancelled);
            kl_rt_finish(q, KL_E_INTERNAL, NULL, 0);
            return;
        }
        kl_status st =
            kl_async_submit(c->t, &q->spec, timeout, on_answer, q, &q->thandle);
        if (st == KL_OK)
            kl_upconn_attach(c, q);
        pthread_mutex_unlock(&r->mu);
        if (st != KL_OK) {
            kl_trace_attempt_end(r->o.tracer, &q->tra, kl_status_str(st), true);
            continue;
        }
        q->uncounted--; /* sent: it counts unless its connection is lost */
        q->rm = rm;
        rm->sent++;
        if (q->attempts > 1)
            KL_RT_INC(r, retries);
        return;
    }
    give_up(q);
}

/* A remote's answer (or a timeout or a lost connection), on the router
 * thread inside kl_async_process. */
static void on_answer(void *arg, const kl_result *res)
{
    kl_rreq *q = arg;
    kl_router *r = q->r;
    kl_remote *rm = q->rm;
    uint64_t wait_ns = res->elapsed_ns;
    pthread_mutex_lock(&r->mu);
    kl_upconn *uc = q->conn; /* freed only on this thread, after this */
    if (q->conn) {
        if (res->status == KL_OK)
            wait_ns = kl_upconn_answered(q->conn, q);
        kl_upconn_detach(q->conn, q);
    }
    bool cancelled = q->cancelled;
    pthread_mutex_unlock(&r->mu);
    kl_trace_attempt_end(r->o.tracer, &q->tra,
                         res->status != KL_OK ? kl_status_str(res->status)
                         : res->opcode == KL_OP_ERROR ? kl_err_text(res->error)
                                                      : "ok",
                         res->status != KL_OK || res->opcode == KL_OP_ERROR);
    if (cancelled) {
        KL_RT_INC(r, cancelled);
        kl_rt_finish(q, KL_E_INTERNAL, NULL, 0);
        return;
    }
    if (res->status != KL_OK) {
        /* timeout, or the connection failed: this remote is suspect until
         * a probe says otherwise */
        rm->failed++;
        char why[320];
        if (rm->up)
            kl_info("router: remote %s: %s; trying the next route", rm->name,
                    kl_upconn_why(uc, res->status, why, sizeof why));
        rm->up = false;
        if (res->status != KL_E_TIMEOUT)
            q->uncounted++; /* the connection was lost (kl_rt_may_try) */
        kl_rt_next_attempt(q);
        return;
    }
    rm->ok++;
    rm->up = true;
    kl_remote_sample2(rm, res->elapsed_ns, wait_ns);
    if (res->opcode == KL_OP_RESPONSE) {
        kl_rt_finish(q, KL_OK, res->payload, res->payload_len);
        return;
    }
    /* the remote's wire code becomes a status here, the decoding boundary
     * (docs/DESIGN.md "Errors"); any code comes back out unchanged */
    kl_status err = res->opcode == KL_OP_ERROR ? kl_status_from_p6(res->error)
                                               : KL_E_INTERNAL;
    switch ((int)err) {      /* named P6 statuses: core/status.h */
    case KL_E_KEY_NOT_FOUND: /* a stale table there: ask the next one */
        q->not_found++;
        kl_rt_next_attempt(q);
        return;
    case KL_E_INTERNAL:      /* shed or out of time there */
    case KL_E_REMOTE_CONFIG: /* no route from there (hops, policy) */
        kl_rt_next_attempt(q);
        return;
    default: /* the operation's own verdict (crypto error...) */
        kl_rt_finish(q, err, NULL, 0);
    }
}

static void start(kl_rreq *q)
{
    kl_router *r = q->r;
    q->started = true;
    if (q->shed) { /* P6: shed fast rather than queue without bound */
        KL_RT_INC(r, expired);
        kl_rt_finish(q, KL_E_INTERNAL, NULL, 0);
        return;
    }
    /* protocol P9: a router refuses to forward beyond the hop limit */
    if (q->hops >= (uint32_t)r->o.max_hops) {
        KL_RT_INC(r, hop_limit);
        kl_rt_finish(q, KL_E_REMOTE_CONFIG, NULL, 0);
        return;
    }
    if (!q->spec.ski || (!kl_rt_find(r->table, q->spec.ski) && !q->policy)) {
        KL_RT_INC(r, not_found);
        kl_rt_finish(q, KL_E_KEY_NOT_FOUND, NULL, 0);
        return;
    }
    if (q->policy && !kl_rt_find(r->table, q->spec.ski))
        KL_RT_INC(r, sealed_routed);
    kl_rt_next_attempt(q); /* no eligible remote: `key not found` there */
}

/* ---- the loop thread --------------------------------------------------- */

static void on_wake(kl_loop *loop, void *arg)
{
    kl_router *r = arg;
    pthread_mutex_lock(&r->inbox_mu);
    kl_rreq *list = r->inbox_head;
    r->inbox_head = r->inbox_tail = NULL;
    pthread_mutex_unlock(&r->inbox_mu);
    pthread_mutex_lock(&r->mu);
    kl_rt_table *t = r->pending;
    r->pending = NULL;
    char **prep = r->prep;
    size_t nprep = r->nprep;
    r->prep = NULL;
    r->nprep = 0;
    uint64_t gen = r->handed_gen; /* t is the latest handed over */
    bool stopping = r->stopping;
    pthread_mutex_unlock(&r->mu);
    if (t)
        kl_rt_install(r, t);
    for (size_t i = 0; i < nprep; i++) { /* sealed.c: computed now */
        if (!kl_rt_pclass_get(r, prep[i]))
            kl_warn("router: out of memory preparing a sealing policy");
        free(prep[i]);
    }
    free(prep);
    pthread_mutex_lock(&r->mu);
    if (t) {
        r->installed_gen = gen;
        pthread_cond_broadcast(&r->install_cv);
    }
    if (r->snap && !r->snap->done) {
        kl_rt_snap *sn = r->snap;
        sn->n = 0;
        for (kl_remote *rm = r->remotes; rm; rm = rm->next, sn->n++)
            if (sn->n < sn->max)
                kl_remote_stats_fill(rm, &sn->out[sn->n]);
        sn->done = true;
        pthread_cond_broadcast(&r->snap_cv);
    }
    pthread_mutex_unlock(&r->mu);
    while (list) {
        kl_rreq *q = list;
        list = q->inbox_next;
        pthread_mutex_lock(&r->mu);
        pthread_mutex_lock(&r->inbox_mu);
        q->queued = false;
        pthread_mutex_unlock(&r->inbox_mu);
        bool finished = q->done == NULL;
        bool dropped = q->cancelled && q->conn && q->thandle == 0;
        kl_upconn *c = q->conn;
        if (dropped)
            kl_upconn_detach(c, q);
        if (!finished && !q->started) { /* joins the live list now */
            q->live_prev = NULL;
            q->live_next = r->live;
            if (r->live)
                r->live->live_prev = q;
            r->live = q;
        }
        pthread_mutex_unlock(&r->mu);
        if (finished)
            free(q);
        else if (!q->started)
            start(q);
        else if (dropped) {
            KL_RT_INC(r, cancelled);
            kl_rt_finish(q, KL_E_INTERNAL, NULL, 0);
        }
    }
    if (stopping)
        kl_loop_stop(loop);
}

static bool before_sleep(kl_loop *loop, void *arg)
{
    (void)loop;
    kl_remote_reap(arg);
    kl_rt_retire_reap(arg, false);
    schedule_flush(arg);
    return false;
}

static void on_probe_timer(kl_loop *loop, kl_timer *t)
{
    kl_router *r = t->data;
    kl_remote_probe_all(r);
    if (kl_timer_after(loop, t, r->o.ping_interval_ns) != KL_OK)
        kl_error("router: cannot arm the probe timer; remotes are no longer "
                 "probed");
}

static void *router_main(void *arg)
{
    kl_router *r = arg;
    pthread_setname_np(pthread_self(), "kl-router"); /* top -H, perf */
    kl_sched_thread_start(KL_THREAD_LOOP);           /* realtime_priority */
    if (kl_loop_run(r->loop) != KL_OK)
        kl_error("router: event loop failed; routed requests are answered "
                 "`internal error`");
    /* stopping: whatever is still in flight gets its answer now */
    for (;;) {
        pthread_mutex_lock(&r->mu);
        kl_rreq *q = r->live;
        if (q && q->conn)
            kl_upconn_detach(q->conn, q);
        pthread_mutex_unlock(&r->mu);
        if (!q)
            break;
        kl_rt_finish(q, KL_E_INTERNAL, NULL, 0);
    }
    run_flush(r); /* nothing more is held */
    pthread_mutex_lock(&r->mu);
    r->stopped = true; /* no more snapshots, no more installs */
    pthread_cond_broadcast(&r->install_cv);
    if (r->snap) {
        r->snap->done = true;
        pthread_cond_broadcast(&r->snap_cv);
    }
    pthread_mutex_unlock(&r->mu);
    while (r->remotes) {
        kl_remote *rm = r->remotes;
        r->remotes = rm->next;
        kl_remote_free(rm);
    }
    return NULL;
}

/* ---- public ------------------------------------------------------------ */

const kl_router_opts kl_router_defaults = {
    .default_deadline_ns = 2 * KL_NS_PER_S,
    .max_attempts = 3,
    .max_hops = 3,
    .timeout_floor_ns = 20 * KL_NS_PER_MS,
    .timeout_ceiling_ns = 2 * KL_NS_PER_S,
    .timeout_p99_factor = 10,
    .ping_interval_ns = 1 * KL_NS_PER_S,
    .ewma_weight_pct = 20,
    .latency_tolerance_pct = 10,
    .reload_poll_ns = 1 * KL_NS_PER_S,
    .dns_refresh_ns = 30 * KL_NS_PER_S,
    .connect_timeout_ns = 2 * KL_NS_PER_S,
    .conn_inflight_threshold = 256,
    .max_conns_per_remote = 8,
    .max_inflight_per_conn = 1024,
    .max_fds = 1024,
    .max_inflight = 65536,
    .dns_ttl_floor_ns = 5 * KL_NS_PER_S,
    .dns_ttl_ceiling_ns = 3600 * KL_NS_PER_S,
    .conn_idle_timeout_ns = 60 * KL_NS_PER_S,
    .answer_hold_ns = 1 * KL_NS_PER_MS,
};

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

kl_status kl_router_new(const kl_router_opts *opts, kl_router **out, char *err,
                        size_t errlen)
{
    *out = NULL;
    if (!opts->ca_file) {
        snprintf(err, errlen,
                 "router: the CA for remote key servers must be set");
        return KL_E_CONFIG;
    }
    if (opts->dns_server && !kl_rt_dns_server_valid(opts->dns_server)) {
        snprintf(err, errlen,
                 "router: router_dns_server \"%s\" is not a name server "
                 "address; write it as IPv4:port, e.g. 127.0.0.1:53",
                 opts->dns_server);
        return KL_E_CONFIG;
    }
    if (opts->dns_ttl_floor_ns > opts->dns_ttl_ceiling_ns) {
        snprintf(err, errlen,
                 "router: router_dns_ttl_floor (%d ms) is above "
                 "router_dns_ttl_ceiling (%d ms); raise the ceiling or lower "
                 "the floor",
                 kl_rt_ms(opts->dns_ttl_floor_ns),
                 kl_rt_ms(opts->dns_ttl_ceiling_ns));
        return KL_E_CONFIG;
    }
    kl_router *r = calloc(1, sizeof *r);
    KL_ENSURE(r != NULL, KL_E_NOMEM);
    r->o = *opts;
    kl_router_opts *o = &r->o;
    /* bounds the option table enforces, kept for other callers */
    if (o->max_attempts > KL_RT_MAX_ATTEMPTS)
        o->max_attempts = KL_RT_MAX_ATTEMPTS;
    if (o->timeout_ceiling_ns < o->timeout_floor_ns)
        o->timeout_ceiling_ns = o->timeout_floor_ns;
    if (o->ewma_weight_pct > 100)
        o->ewma_weight_pct = 100;
    r->table_file = dup_or_null(opts->table_file);
    r->cert_file = dup_or_null(opts->cert_file);
    r->key_file = dup_or_null(opts->key_file);
    r->ca_file = dup_or_null(opts->ca_file);
    r->server_name = dup_or_null(opts->server_name);
    r->dns_server = dup_or_null(opts->dns_server);
    o->dns_server = r->dns_server;
    o->table_file = r->table_file;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->inbox_mu, NULL);
    pthread_mutex_init(&r->build_mu, NULL);
    pthread_cond_init(&r->control_cv, NULL);
    pthread_cond_init(&r->snap_cv, NULL);
    pthread_cond_init(&r->install_cv, NULL);
    kl_rt_pclass_init(r);
    r->loop = kl_loop_new();
    if ((opts->table_file && !r->table_file) || !r->ca_file || !r->loop ||
        (opts->dns_server && !r->dns_server)) {
        kl_router_free(r);
        return KL_E_NOMEM;
    }
    kl_loop_set_wake_fn(r->loop, on_wake, r);
    kl_loop_set_before_sleep(r->loop, before_sleep, r);
    kl_timer_init(&r->probe_timer, on_probe_timer, r);
    kl_timer_init(&r->flush_timer, on_flush_timer, r);
    /* the first table is loaded here, so a bad file stops startup */
    kl_status st = kl_rt_control_start(r, err, errlen);
    if (st != KL_OK) {
        kl_router_free(r);
        return st;
    }
    /* installed on the loop thread before anything else runs there */
    if (kl_timer_after(r->loop, &r->probe_timer, o->ping_interval_ns) !=
            KL_OK ||
        pthread_create(&r->thread, NULL, router_main, r) != 0) {
        kl_router_free(r);
        return KL_E_NOMEM;
    }
    pthread_mutex_lock(&r->mu);
    r->thread_started = true;
    pthread_mutex_unlock(&r->mu);
    kl_loop_wake(r->loop);
    /* the first table is in effect before the server takes requests: a
     * request right after start finds its routes (not `key not found`) */
    kl_rt_wait_installed(r);
    *out = r;
    return KL_OK;
}

void kl_router_free(kl_router *r)
{
    if (!r)
        return;
    kl_rt_control_stop(r);
    if (r->thread_started) {
        pthread_mutex_lock(&r->mu);
        r->stopping = true;
        pthread_mutex_unlock(&r->mu);
        kl_loop_wake(r->loop);
        pthread_join(r->thread, NULL);
    }
    /* requests that never reached the loop */
    while (r->inbox_head) {
        kl_rreq *q = r->inbox_head;
        r->inbox_head = q->inbox_next;
        if (q->done)
            q->done(q->arg, KL_E_INTERNAL, NULL, 0);
        free(q);
    }
    run_flush(r);
    kl_rt_table_free(r->pending);
    for (size_t i = 0; i < r->nprep; i++)
        free(r->prep[i]);
    free(r->prep);
    kl_rt_retire_reap(r, true);
    kl_rt_table_free(r->table);
    kl_rt_pclass_free_all(r);
    kl_hmap_free(&r->pclasses);
    if (r->loop)
        kl_loop_free(r->loop);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->inbox_mu);
    pthread_mutex_destroy(&r->build_mu);
    pthread_cond_destroy(&r->control_cv);
    pthread_cond_destroy(&r->snap_cv);
    pthread_cond_destroy(&r->install_cv);
    free(r->table_file);
    free(r->cert_file);
    free(r->key_file);
    free(r->ca_file);
    free(r->server_name);
    free(r->dns_server);
    free(r);
}

kl_status kl_router_route(kl_router *r, const kl_route_req *rr,
                          kl_route_done_fn done, void *arg, kl_route_handle *h)
{
    const kl_request *req = rr->req;
    size_t size = kl_rt_forward_size(req);
    size_t plen = rr->sealed_policy ? strlen(rr->sealed_policy) + 1 : 0;
    kl_rreq *q = calloc(1, sizeof *q + size + KL_RT_CTX_MAX + plen);
    KL_ENSURE(q != NULL, KL_E_NOMEM);
    if (plen) { /* after the request context's room */
        char *pt = (char *)q->data + size + KL_RT_CTX_MAX;
        memcpy(pt, rr->sealed_policy, plen);
        q->policy = pt;
    }
    char *json = (char *)q->data + size;
    if (kl_rt_forward_fill(req, rr->ctx, &q->spec, q->data, json,
                           KL_RT_CTX_MAX) != KL_OK) {
        /* an oversized request context: forward without its members */
        kl_req_context none;
        memset(&none, 0, sizeof none);
        if (rr->ctx) {
            none.has_hops = rr->ctx->has_hops;
            none.hops = rr->ctx->hops;
        }
        if (kl_rt_forward_fill(req, &none, &q->spec, q->data, json,
                               KL_RT_CTX_MAX) != KL_OK) {
            free(q);
            return KL_E_NOMEM;
        }
    }
    q->r = r;
    q->done = done;
    q->arg = arg;
    kl_trace_attempt_init(&q->tra, rr->traced && r->o.tracer,
                          (uint8_t *)q->spec.span_context,
                          q->spec.span_context_len);
    q->hops = rr->ctx && rr->ctx->has_hops ? rr->ctx->hops : 0;
    uint64_t budget = rr->ctx && rr->ctx->has_deadline
                          ? kl_ms_to_ns(rr->ctx->deadline_ms)
                          : r->o.default_deadline_ns;
    q->t0_ns = kl_now_ns();
    q->deadline_ns = q->t0_ns + budget;
    if (h)
        h->req = q;
    /* The shard's whole hand-over: one counter, the inbox lock for a few
     * pointer writes, a coalesced wake-up. The live list is joined on the
     * router thread; kl_router_free answers what is still in the inbox. */
    q->shed = atomic_fetch_add(&r->nlive, 1) >= (size_t)r->o.max_inflight;
    KL_RT_INC(r, routed);
    inbox_push(r, q);
    kl_loop_wake(r->loop);
    return KL_OK;
}

void kl_router_prepare_policies(kl_router *r, const char *const *texts,
                                size_t n)
{
    char **v = calloc(n ? n : 1, sizeof *v);
    size_t k = 0;
    for (size_t i = 0; v && i < n; i++)
        if ((v[k] = strdup(texts[i])))
            k++;
    if (!v)
        return; /* out of memory: computed at the first request instead */
    pthread_mutex_lock(&r->mu);
    char **old = r->prep;
    size_t nold = r->nprep;
    r->prep = v; /* a newer load's list replaces one not taken yet */
    r->nprep = k;
    pthread_mutex_unlock(&r->mu);
    for (size_t i = 0; i < nold; i++)
        free(old[i]);
    free(old);
    kl_loop_wake(r->loop);
}

void kl_router_cancel(kl_router *r, const kl_route_handle *h)
{
    kl_rreq *q = h ? h->req : NULL;
    if (!q)
        return;
    pthread_mutex_lock(&r->mu);
    if (!q->cancelled && q->done) {
        q->cancelled = true;
        /* nothing more is sent: an unsent attempt is dropped by
         * libkeyless; one in flight has its answer discarded */
        if (q->conn && kl_async_cancel(q->conn->t, q->thandle) == KL_OK)
            q->thandle = 0; /* its callback will not come: the loop ends it */
        inbox_push(r, q);
    }
    pthread_mutex_unlock(&r->mu);
    kl_loop_wake(r->loop);
}

/* Called by a shard for every local key-store miss: no lock, no wait.
 * The reader counts itself in the current epoch's half before it loads
 * the pointer (all sequentially consistent). A table replaced before the
 * router flips the epoch can only be held by readers counted in the
 * other half: once that half is seen at 0 after the flip, none holds it
 * (a reader that counts itself in late loads the pointer later still,
 * and finds a newer table). New readers never count in the half being
 * waited for, so it drains within one reader's time (~100 ns) - unlike
 * a single count, which under load from every shard may never be 0. */
bool kl_router_has_key(kl_router *r, const uint8_t ski[KL_SKI_LEN])
{
    unsigned half = atomic_load(&r->epoch) & 1u;
    atomic_fetch_add(&r->readers[half], 1);
    const kl_rt_table *t = atomic_load(&r->published);
    bool has = kl_rt_find(t, ski) != NULL;
    atomic_fetch_sub(&r->readers[half], 1);
    return has;
}

static void free_list(kl_router *r, kl_rt_table *t)
{
    while (t) {
        kl_rt_table *next = t->retired_next;
        kl_rt_table_free(t);
        atomic_fetch_sub(&r->nretired, 1);
        t = next;
    }
}

void kl_rt_retire(kl_router *r, kl_rt_table *old)
{
    old->retired_next = r->retired_next;
    r->retired_next = old;
    atomic_fetch_add(&r->nretired, 1);
    kl_rt_retire_reap(r, false);
}

void kl_rt_retire_reap(kl_router *r, bool force)
{
    if (force) {
        free_list(r, r->retired_wait);
        free_list(r, r->retired_next);
        r->retired_wait = r->retired_next = NULL;
        return;
    }
    unsigned e = atomic_load(&r->epoch);
    if (r->retired_wait) {
        if (atomic_load(&r->readers[(e - 1u) & 1u]) != 0)
            return; /* the grace period goes on: looked at again later */
        free_list(r, r->retired_wait);
        r->retired_wait = NULL;
    }
    if (!r->retired_next)
        return;
    r->retired_wait = r->retired_next;
    r->retired_next = NULL;
    atomic_store(&r->epoch, e + 1u); /* new readers: the other half */
    if (atomic_load(&r->readers[e & 1u]) == 0) {
        free_list(r, r->retired_wait);
        r->retired_wait = NULL;
    }
}

void kl_router_get_stats(kl_router *r, kl_router_stats *out)
{
#define LD(f) atomic_load_explicit(&r->st.f, memory_order_relaxed)
    out->routed = LD(routed);
    out->answered = LD(answered);
    out->no_route = LD(no_route);
    out->not_found = LD(not_found);
    out->hop_limit = LD(hop_limit);
    out->expired = LD(expired);
    out->cancelled = LD(cancelled);
    out->retries = LD(retries);
    out->reloads = LD(reloads);
    out->reload_errors = LD(reload_errors);
    out->generation = LD(generation);
    out->sealed_routed = LD(sealed_routed);
    out->sealed_no_remote = LD(sealed_no_remote);
    out->sealed_policies = LD(sealed_policies);
#undef LD
    out->fds = atomic_load(&r->fds);
    out->retired = atomic_load(&r->nretired);
}

/* Remotes belong to the router thread: ask it for a copy and wait. Not to
 * be called from a done callback (that is the router thread). */
size_t kl_router_remote_stats(kl_router *r, kl_remote_stats *out, size_t max)
{
    kl_rt_snap sn = {out, max, 0, false};
    pthread_mutex_lock(&r->mu);
    while (r->snap && !r->stopped) /* one at a time */
        pthread_cond_wait(&r->snap_cv, &r->mu);
    if (r->stopped || !r->thread_started) {
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    r->snap = &sn;
    pthread_mutex_unlock(&r->mu);
    kl_loop_wake(r->loop);
    pthread_mutex_lock(&r->mu);
    while (!sn.done)
        pthread_cond_wait(&r->snap_cv, &r->mu);
    r->snap = NULL;
    pthread_cond_broadcast(&r->snap_cv);
    pthread_mutex_unlock(&r->mu);
    return sn.n;
}
