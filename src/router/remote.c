/* SPDX-License-Identifier: Apache-2.0 */
/* Remotes and their upstream connections. Each connection is a
 * libkeyless kl_target with one server, driven from the router's loop:
 * its kl_async_fd is watched, kl_async_process runs when it is readable.
 * Router thread only, except where mu is taken (the attempt lists, which
 * kl_router_cancel reads).
 *
 * - Opened in advance: a remote gets its first connection when the table
 *   names it, and a probe (ping) right away, so the first request finds a
 *   connection up and a latency measured.
 * - Probed every ping_interval_ns: a pong updates the EWMA and marks the
 *   remote up; a failed probe marks it down, two in a row replace the
 *   connection (a wedged or black-holed TCP connection is never revived).
 * - Grown on load: another connection only when every connection carries
 *   conn_inflight_threshold requests (one lossy TCP connection stalls all
 *   that is multiplexed on it), within max_conns_per_remote and the
 *   process's descriptor budget (4 per kl_target); and shrunk when the load
 *   is gone: a connection beyond the remote's first that carried nothing
 *   for conn_idle_timeout_ns is closed at the next probe round (the first
 * stays: it is the one opened in advance).
 * - Latency: EWMA over pings and live requests, and a window of the last
 *   KL_RT_SAMPLES round trips whose p99 sets the per-attempt timeout:
 *   p99 x timeout_p99_factor within [timeout_floor_ns, timeout_ceiling_ns]
 *   - never a fixed second. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/time.h"
#include "router/router_int.h"

static const uint8_t probe_bytes[] = "kl-router-probe";

kl_remote *kl_remote_new(kl_router *r, const kl_rt_server *s)
{
    kl_remote *rm = calloc(1, sizeof *rm);
    if (!rm)
        return NULL;
    rm->r = r;
    snprintf(rm->name, sizeof rm->name, "%s", s->name);
    snprintf(rm->host, sizeof rm->host, "%s", s->host);
    rm->port = s->port;
    snprintf(rm->region, sizeof rm->region, "%s", s->region);
    rm->priority = s->priority;
    rm->up = true; /* until a probe or a request says otherwise */
    return rm;
}

static void on_ready(kl_loop *loop, kl_watch *w, unsigned events)
{
    (void)loop;
    (void)events;
    kl_upconn *c = w->data;
    if (kl_async_process(c->t) != KL_OK)
        kl_debug("router: remote %s: processing failed", c->rm->name);
}

static kl_upconn *conn_new(kl_remote *rm)
{
    kl_router *r = rm->r;
    if (rm->nconns >= (unsigned)r->o.max_conns_per_remote ||
        rm->nconns >= KL_RT_MAX_CONNS ||
        r->fds + KL_RT_FDS_PER_CONN > (unsigned)r->o.max_fds)
        return NULL;
    char addr[300];
    if (strchr(rm->host, ':'))
        snprintf(addr, sizeof addr, "[%s]:%u", rm->host, rm->port);
    else
        snprintf(addr, sizeof addr, "%s:%u", rm->host, rm->port);
    const char *servers[1] = {addr};
    kl_target_opts o = {
        .servers = servers,
        .nservers = 1,
        .cert_file = r->cert_file,
        .key_file = r->key_file,
        .ca_file = r->ca_file,
        .server_name = r->server_name,
        .timeout_ms = kl_rt_ms(r->o.timeout_ceiling_ns),
        .connect_timeout_ms = kl_rt_ms(r->o.connect_timeout_ns),
        .ping_interval_ms = -1, /* the router probes on its own schedule */
        .backoff_min_ms = 20,
        .backoff_max_ms = kl_rt_ms(r->o.ping_interval_ns),
        .max_inflight = r->o.max_inflight_per_conn,
        .retry_budget_pct = -1, /* the router retries on another remote */
    };
    kl_upconn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    char err[256];
    if (kl_target_new(&o, &c->t, err, sizeof err) != KL_OK) {
        kl_warn("router: remote %s (%s): %s", rm->name, addr, err);
        free(c);
        return NULL;
    }
    int fd = kl_async_fd(c->t);
    if (fd < 0 || kl_watch_start(r->loop, &c->watch, fd, KL_EV_READ, on_ready,
                                 c) != KL_OK) {
        kl_target_free(c->t);
        free(c);
        return NULL;
    }
    c->watching = true;
    c->rm = rm;
    kl_rt_stall_init(c);
    c->idle_since = kl_now_ns();
    rm->conns[rm->nconns++] = c;
    r->fds += KL_RT_FDS_PER_CONN;
    return c;
}

void kl_remote_sample(kl_remote *rm, uint64_t rtt_ns)
{
    kl_remote_sample2(rm, rtt_ns, rtt_ns);
}

/* latency_ns (submit to answer, queueing included) feeds the EWMA that
 * orders the routes; wait_ns, when not 0, feeds the window whose p99 sets
 * the attempt timeout: how long a request waited for the first answer
 * the connection gave after it was sent (kl_upconn_progress) - the
 * silence the timeout is compared with (stall.c). A request queued behind
 * a burst is answered while answers stream and gives no sample, so a
 * burst (latencies of seconds, an answer every millisecond) does not
 * inflate the time it takes to notice a stall afterwards. */
void kl_remote_sample2(kl_remote *rm, uint64_t latency_ns, uint64_t wait_ns)
{
    uint64_t rtt_ns = latency_ns;
    if (!rm->measured) {
        rm->ewma_ns = (double)rtt_ns;
        rm->measured = true;
    } else {
        double w = rm->r->o.ewma_weight_pct / 100.0;
        rm->ewma_ns += w * ((double)rtt_ns - rm->ewma_ns);
    }
    if (!wait_ns)
        return;
    uint64_t us = wait_ns / 1000;
    rm->samples_us[rm->sample_pos] =
        us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
    rm->sample_pos = (rm->sample_pos + 1) % KL_RT_SAMPLES;
    if (rm->nsamples < KL_RT_SAMPLES)
        rm->nsamples++;
    /* the p99 of the window, recomputed every 16 samples (a sort of 128) */
    if (++rm->since_p99 < 16 && rm->p99_ns)
        return;
    rm->since_p99 = 0;
    uint32_t v[KL_RT_SAMPLES];
    size_t n = rm->nsamples;
    memcpy(v, rm->samples_us, n * sizeof *v);
    for (size_t i = 1; i < n; i++) {
        uint32_t x = v[i];
        size_t j = i;
        for (; j > 0 && v[j - 1] > x; j--)
            v[j] = v[j - 1];
        v[j] = x;
    }
    rm->p99_ns =
        (uint64_t)v[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] * 1000ull;
}

int kl_remote_timeout_ms(const kl_remote *rm)
{
    const kl_router_opts *o = &rm->r->o;
    if (!rm->p99_ns)
        return kl_rt_ms(o->timeout_ceiling_ns);
    uint64_t ns = rm->p99_ns * (uint64_t)o->timeout_p99_factor;
    if (ns < o->timeout_floor_ns)
        ns = o->timeout_floor_ns;
    if (ns > o->timeout_ceiling_ns)
        ns = o->timeout_ceiling_ns;
    return kl_rt_ms(ns);
}

const char *kl_upconn_why(kl_upconn *c, kl_status st, char *buf, size_t len)
{
    kl_conn_info ci;
    ci.last_error[0] = 0;
    if (c && st != KL_E_TIMEOUT)
        kl_target_conn_info(c->t, &ci);
    if (ci.last_error[0])
        snprintf(buf, len, "%s (%s)", kl_status_str(st), ci.last_error);
    else
        snprintf(buf, len, "%s", kl_status_str(st));
    return buf;
}

static void probe(kl_upconn *c);

static void on_probe(void *arg, const kl_result *res)
{
    kl_upconn *c = arg;
    kl_remote *rm = c->rm;
    c->probing = false;
    uint64_t wait_ns =
        res->status == KL_OK ? kl_upconn_progress(c, c->probe_sent_ns) : 0;
    if (res->status == KL_OK && res->opcode == KL_OP_PONG) {
        /* a probe that waited for the handshake measured the handshake:
         * measure again at once, on the connection now up */
        bool fresh = c->probe_fresh;
        if (!fresh) {
            if (!rm->measured)
                kl_debug("router: remote %s measured (ping %.1f ms)", rm->name,
                         kl_ns_to_ms_f(res->elapsed_ns));
            kl_remote_sample2(rm, res->elapsed_ns, wait_ns);
        }
        if (!rm->up)
            kl_info("router: remote %s is up (ping %.1f ms)", rm->name,
                    kl_ns_to_ms_f(res->elapsed_ns));
        rm->up = true;
        c->probe_failures = 0;
        if (fresh)
            probe(c);
        return;
    }
    /* answers came back while the pong did not: a busy connection (the
     * ping waits behind a burst), not a dead one */
    if (res->status == KL_E_TIMEOUT && c->progress_ns > c->probe_sent_ns)
        return;
    char why[320];
    if (rm->up)
        kl_warn("router: remote %s is down: ping %s", rm->name,
                kl_upconn_why(c, res->status, why, sizeof why));
    rm->up = false;
    if (++c->probe_failures >= 2)
        c->dead = true; /* replaced by kl_remote_reap */
}

static void probe(kl_upconn *c)
{
    if (c->probing || c->dead)
        return;
    kl_remote *rm = c->rm;
    const kl_router_opts *o = &rm->r->o;
    int timeout = kl_remote_timeout_ms(rm);
    /* a connection not up yet needs its handshake first */
    c->probe_fresh = kl_target_active_server(c->t) < 0;
    if (c->probe_fresh && timeout < kl_rt_ms(o->connect_timeout_ns))
        timeout = kl_rt_ms(o->connect_timeout_ns);
    kl_request_spec ping = {.opcode = KL_OP_PING,
                            .payload = probe_bytes,
                            .payload_len = sizeof probe_bytes - 1};
    c->probe_sent_ns = kl_now_ns();
    if (kl_async_submit(c->t, &ping, timeout, on_probe, c, &c->probe_handle) ==
        KL_OK)
        c->probing = true;
}

void kl_remote_start(kl_remote *rm)
{
    kl_upconn *c = rm->nconns ? rm->conns[0] : conn_new(rm);
    if (c)
        probe(c);
}

/* The first connection below the threshold, in order: load fills the
 * connections one after the other, so that the extra ones carry nothing
 * once it drops and close_idle can let them go (spreading a light load
 * over all of them would keep every one busy forever). When every one is
 * at the threshold: the least loaded, and another connection is opened. */
kl_upconn *kl_remote_conn(kl_remote *rm)
{
    uint32_t threshold = (uint32_t)rm->r->o.conn_inflight_threshold;
    kl_upconn *best = NULL;
    for (unsigned i = 0; i < rm->nconns; i++) {
        kl_upconn *c = rm->conns[i];
        if (c->dead)
            continue;
        if (c->inflight < threshold)
            return c;
        if (!best || c->inflight < best->inflight)
            best = c;
    }
    if (!best || best->inflight >= threshold) {
        kl_upconn *nc = conn_new(rm);
        if (nc) {
            probe(nc); /* connects it now; requests stay on best meanwhile */
            if (!best)
                best = nc;
        }
    }
    return best;
}

static void close_idle(kl_remote *rm);

void kl_remote_probe_all(kl_router *r)
{
    for (kl_remote *rm = r->remotes; rm; rm = rm->next) {
        if (!rm->in_table || (!rm->nconns && rm->on_demand))
            continue; /* on demand: connected by its next request */
        if (!rm->nconns)
            (void)conn_new(rm);
        close_idle(rm);
        for (unsigned i = 0; i < rm->nconns; i++)
            probe(rm->conns[i]);
    }
}

/* Appended: the watched list stays in the order the attempts were sent,
 * so the attempt timeout looks at its head only (stall.c). */
void kl_upconn_attach(kl_upconn *c, kl_rreq *q)
{
    q->conn = c;
    q->waiting = false;
    q->sent_ns = kl_now_ns();
    q->anext = NULL;
    q->aprev = c->attempts_tail;
    if (c->attempts_tail)
        c->attempts_tail->anext = q;
    else
        c->attempts = q;
    c->attempts_tail = q;
    c->inflight++;
    c->rm->inflight++;
    kl_rt_stall_arm(c);
}

static void unlink_attempt(kl_upconn *c, kl_rreq *q)
{
    if (q->waiting) {
        if (q->aprev)
            q->aprev->anext = q->anext;
        else
            c->waiting = q->anext;
        if (q->anext)
            q->anext->aprev = q->aprev;
    } else {
        if (q->aprev)
            q->aprev->anext = q->anext;
        else
            c->attempts = q->anext;
        if (q->anext)
            q->anext->aprev = q->aprev;
        else
            c->attempts_tail = q->aprev;
    }
    q->aprev = q->anext = NULL;
}

void kl_upconn_wait(kl_upconn *c, kl_rreq *q)
{
    unlink_attempt(c, q);
    q->waiting = true;
    q->anext = c->waiting;
    if (c->waiting)
        c->waiting->aprev = q;
    c->waiting = q;
}

uint64_t kl_upconn_progress(kl_upconn *c, uint64_t since_ns)
{
    uint64_t now = kl_now_ns(), prev = c->progress_ns;
    c->progress_ns = now;
    /* only a request the connection had not answered anything since
     * measures a silence worth a sample: one answered while answers were
     * streaming measures the gap between two answers, and those (a
     * millisecond in a burst) would drag the p99 below the round trip */
    return since_ns >= prev && now > since_ns ? now - since_ns : 0;
}

uint64_t kl_upconn_answered(kl_upconn *c, const kl_rreq *q)
{
    uint64_t wait_ns = kl_upconn_progress(c, q->sent_ns);
    kl_rt_stall_answered(c, q); /* what it overtook is lost (stall.c) */
    return wait_ns;
}

void kl_upconn_detach(kl_upconn *c, kl_rreq *q)
{
    unlink_attempt(c, q);
    q->waiting = false;
    q->conn = NULL;
    c->inflight--;
    c->rm->inflight--;
    if (!c->inflight)
        c->idle_since = kl_now_ns();
}

/* Extra connections that carried nothing for conn_idle_timeout_ns: closed (by
 * kl_remote_reap, as dead ones are), keeping one. */
static void close_idle(kl_remote *rm)
{
    uint64_t now = kl_now_ns();
    uint64_t idle_ns = rm->r->o.conn_idle_timeout_ns;
    unsigned live = 0;
    for (unsigned i = 0; i < rm->nconns; i++)
        live += !rm->conns[i]->dead;
    for (unsigned i = 0; i < rm->nconns && live > 1; i++) {
        kl_upconn *c = rm->conns[i];
        if (c->dead || c->inflight || now - c->idle_since < idle_ns)
            continue;
        c->dead = true;
        live--;
        rm->idle_closed++;
        kl_debug("router: remote %s: idle connection closed (%u left)",
                 rm->name, live);
    }
}

/* Closes a connection; what was in flight on it tries its next remote. */
static void conn_close(kl_upconn *c)
{
    kl_remote *rm = c->rm;
    kl_router *r = rm->r;
    pthread_mutex_lock(&r->mu); /* kl_router_cancel reads q->conn */
    kl_rreq *orphans = NULL;
    while (c->attempts || c->waiting) {
        kl_rreq *q = c->attempts ? c->attempts : c->waiting;
        kl_upconn_detach(c, q);
        q->anext = orphans;
        orphans = q;
    }
    pthread_mutex_unlock(&r->mu);
    if (c->watching)
        kl_watch_stop(r->loop, &c->watch);
    kl_timer_stop(r->loop, &c->stall_timer);
    kl_target_free(c->t); /* drops its requests without callbacks */
    r->fds -= KL_RT_FDS_PER_CONN;
    for (unsigned i = 0; i < rm->nconns; i++)
        if (rm->conns[i] == c) {
            rm->conns[i] = rm->conns[--rm->nconns];
            break;
        }
    free(c);
    while (orphans) {
        kl_rreq *q = orphans;
        orphans = q->anext;
        q->anext = NULL;
        kl_rt_attempt_failed(q);
    }
}

void kl_remote_free(kl_remote *rm)
{
    while (rm->nconns)
        conn_close(rm->conns[0]);
    free(rm);
}

void kl_remote_reap(kl_router *r)
{
    for (kl_remote **pp = &r->remotes; *pp;) {
        kl_remote *rm = *pp;
        for (unsigned i = 0; i < rm->nconns;) {
            if (rm->conns[i]->dead)
                conn_close(rm->conns[i]); /* swaps the last one in */
            else
                i++;
        }
        if (!rm->in_table && rm->inflight == 0) {
            *pp = rm->next; /* removed from the table and drained */
            kl_info("router: remote %s removed", rm->name);
            kl_remote_free(rm);
            continue;
        }
        if (rm->in_table && !rm->nconns && !rm->on_demand) {
            kl_upconn *c = conn_new(rm); /* the replacement */
            if (c)
                probe(c);
        }
        pp = &rm->next;
    }
}

void kl_remote_stats_fill(const kl_remote *rm, kl_remote_stats *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", rm->name);
    snprintf(out->region, sizeof out->region, "%s", rm->region);
    out->up = rm->up;
    out->in_table = rm->in_table;
    out->ewma_ms = rm->measured ? rm->ewma_ns / (double)KL_NS_PER_MS : -1.0;
    out->p99_ms = rm->p99_ns ? kl_ns_to_ms_f(rm->p99_ns) : -1.0;
    out->timeout_ms = kl_remote_timeout_ms(rm);
    out->conns = rm->nconns;
    out->idle_closed = rm->idle_closed;
    out->sent = rm->sent;
    out->ok = rm->ok;
    out->failed = rm->failed;
    out->lost = rm->lost;
    out->inflight = rm->inflight;
}
