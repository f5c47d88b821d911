/* SPDX-License-Identifier: Apache-2.0 */
/* A target's connections: connect and handshake as a non-blocking state
 * machine, sticky failover with backoff, writing, reading, idle pings, and
 * what happens to the requests of a connection that breaks. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "client/target_int.h"
#include "core/time.h"

void kl_tgt_conn_init(kl_tconn *c, kl_target *t, int idx)
{
    c->t = t;
    c->idx = idx;
    kl_link_init(&c->ln);
    c->ln.split = t->o.test_split_writes;
    kl_u64map_init(&c->inflight);
}

static void conn_watch(kl_target *t, kl_tconn *c, uint32_t ev)
{
    if (c->ln.fd < 0 || t->epfd < 0 || ev == c->events)
        return;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    int op = c->events ? (ev ? EPOLL_CTL_MOD : EPOLL_CTL_DEL) : EPOLL_CTL_ADD;
    if (epoll_ctl(t->epfd, op, c->ln.fd, &e) == 0)
        c->events = ev;
}

void kl_tgt_conn_forget(kl_tconn *c)
{
    kl_link_reset(&c->ln, false);
    c->events = 0;
    c->st = CS_IDLE;
    c->ping_out = false;
    kl_u64map_free(&c->inflight);
}

void kl_tgt_conn_fail(kl_target *t, kl_tconn *c, kl_status st, const char *why)
{
    uint64_t now = kl_now_ns();
    if (why)
        snprintf(c->err, sizeof c->err, "%s port %u: %s", c->host,
                 (unsigned)c->port, why);
    c->fail_connect = c->st != CS_READY;
    if (c->fail_connect)
        t->stats.connect_failures++;
    conn_watch(t, c, 0);
    /* Collect first: the map is emptied by kl_tgt_conn_forget. */
    size_t n = 0;
    size_t inflight = kl_u64map_count(&c->inflight);
    kl_treq **v = inflight ? malloc(inflight * sizeof *v) : NULL;
    kl_treq *q;
    for (size_t i = 0; v && (q = kl_u64map_next(&c->inflight, &i));)
        v[n++] = q;
    kl_tgt_conn_forget(c);
    for (size_t i = 0; i < n; i++) {
        kl_treq *r = v[i];
        r->conn = NULL;
        /* once, before the deadline, within the budget (client issue: the
         * retry storm) */
        if (r->attempts < 2 && now < r->deadline_ns &&
            t->o.retry_budget_pct > 0 && kl_budget_try_retry(&t->budget, now)) {
            t->stats.retries++;
            kl_tgt_q_push(t, r, true);
        } else {
            kl_tgt_complete(t, r, st);
        }
    }
    free(v);
    c->failures++;
    c->failed_ns = now;
    c->fail_st = st;
    c->retry_at =
        now + kl_backoff_ns(
                  c->failures, kl_ms_to_ns((uint64_t)t->o.backoff_min_ms),
                  kl_ms_to_ns((uint64_t)t->o.backoff_max_ms), kl_tgt_random(t));
}

/* ---- connecting ------------------------------------------------------- */

static void conn_start(kl_target *t, kl_tconn *c, uint64_t now)
{
    struct addrinfo *res = NULL;
    char why[160];
    c->err[0] = 0;
    if (kl_link_resolve(c->host, c->port, &res, why, sizeof why) != KL_OK) {
        kl_tgt_conn_fail(t, c, KL_E_IO, why);
        return;
    }
    kl_status st = kl_link_connect(&c->ln, res, why, sizeof why);
    freeaddrinfo(res);
    if (st != KL_OK) {
        kl_tgt_conn_fail(t, c, KL_E_IO, why);
        return;
    }
    c->deadline = kl_tgt_after_ms(now, t->o.connect_timeout_ms);
    c->st = CS_CONNECTING;
    conn_watch(t, c, EPOLLOUT);
}

static void conn_handshake(kl_target *t, kl_tconn *c)
{
    short want;
    kl_status st = kl_link_handshake(&c->ln, &want);
    if (st == KL_OK) {
        c->st = CS_READY;
        c->failures = 0;
        c->last_read_ns = c->last_write_ns = kl_now_ns();
        t->stats.connects++;
        conn_watch(t, c, EPOLLIN);
        return;
    }
    if (st == KL_E_AGAIN) {
        conn_watch(t, c, want == POLLIN ? EPOLLIN : EPOLLOUT);
        return;
    }
    kl_tgt_conn_fail(t, c, st,
                     st == KL_E_CLOSED ? "closed during the TLS handshake"
                                       : kl_link_why(&c->ln, st));
}

/* A TCP connect finished (or not yet): on to the handshake. */
static void conn_connected(kl_target *t, kl_tconn *c)
{
    char why[160];
    kl_status st = kl_link_connected(&c->ln, why, sizeof why);
    if (st == KL_E_AGAIN)
        return;
    if (st != KL_OK) {
        kl_tgt_conn_fail(t, c, KL_E_IO, why);
        return;
    }
    const char *sn = t->server_name ? t->server_name : c->host;
    if (kl_link_tls_start(&c->ln, t->ctx, sn) != KL_OK) {
        kl_tgt_conn_fail(t, c, KL_E_TLS, "cannot create a TLS connection");
        return;
    }
    c->st = CS_HANDSHAKE;
    conn_handshake(t, c);
}

kl_tconn *kl_tgt_ready_conn(kl_target *t)
{
    for (size_t i = 0; i < t->nconns; i++)
        if (t->conns[i].st == CS_READY)
            return &t->conns[i];
    return NULL;
}

void kl_tgt_ensure_connection(kl_target *t, uint64_t now)
{
    if (!t->qhead && !t->connecting)
        return;
    for (size_t i = 0; i < t->nconns; i++)
        if (t->conns[i].st != CS_IDLE)
            return; /* one is up or on its way */
    for (size_t i = 0; i < t->nconns; i++) {
        kl_tconn *c = &t->conns[i];
        if (c->retry_at > now)
            continue;
        conn_start(t, c, now);
        if (c->st != CS_IDLE)
            return;
    }
}

/* ---- writing and reading ---------------------------------------------- */

void kl_tgt_conn_write(kl_target *t, kl_tconn *c)
{
    short want;
    bool wrote = false;
    kl_status st = kl_link_write(&c->ln, &want, &wrote);
    if (wrote)
        c->last_write_ns = kl_now_ns();
    c->io_want = want == POLLOUT ? EPOLLOUT : want == POLLIN ? EPOLLIN : 0;
    if (st != KL_OK)
        kl_tgt_conn_fail(t, c, st, kl_link_why(&c->ln, st));
}

void kl_tgt_drop_answer(kl_tconn *c, uint32_t id)
{
    kl_status st = kl_reqtable_cancel(&c->ln.pipe.reqs, id);
    (void)st; /* KL_E_NOT_FOUND: the connection was reset meanwhile */
}

static void conn_deliver(kl_target *t, kl_tconn *c, kl_client_result *res)
{
    if (res->tracked && c->ping_out && res->id == c->ping_id) {
        c->ping_out = false;
        kl_client_result_free(res);
        return;
    }
    kl_treq *r = res->tracked ? kl_u64map_del(&c->inflight, res->id) : NULL;
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
    kl_tgt_complete(t, r, KL_OK);
}

static void conn_read(kl_target *t, kl_tconn *c)
{
    bool got = false;
    kl_status st = kl_link_read(&c->ln, &got);
    if (got)
        c->last_read_ns = kl_now_ns();
    /* the answers that arrived count, even from a connection now closed */
    for (;;) {
        kl_client_result res;
        kl_status pst = kl_pipeline_next(&c->ln.pipe, &res, kl_now_ns());
        if (pst == KL_E_AGAIN)
            break;
        if (pst != KL_OK) {
            /* a malformed answer: the server cannot be trusted with the
             * rest of this stream */
            kl_tgt_conn_fail(t, c, KL_E_BAD_VALUE, "malformed response");
            return;
        }
        conn_deliver(t, c, &res);
    }
    if (st != KL_OK)
        kl_tgt_conn_fail(t, c, st, kl_link_why(&c->ln, st));
}

/* An idle connection is pinged (0xF1); no pong in time drops it. */
static void conn_ping(kl_target *t, kl_tconn *c, uint64_t now)
{
    if (c->st != CS_READY || t->o.ping_interval_ms < 0)
        return;
    if (c->ping_out) {
        if (now >= c->ping_deadline)
            kl_tgt_conn_fail(t, c, KL_E_TIMEOUT, "no pong in time");
        return;
    }
    uint64_t last =
        c->last_write_ns > c->last_read_ns ? c->last_write_ns : c->last_read_ns;
    if (kl_u64map_count(&c->inflight) ||
        now < kl_tgt_after_ms(last, t->o.ping_interval_ms))
        return;
    kl_request_spec s = {.opcode = KL_OP_PING};
    if (kl_pipeline_queue(&c->ln.pipe, &s, true, &c->ping_id, now) != KL_OK)
        return;
    c->ping_out = true;
    c->ping_deadline = kl_tgt_after_ms(now, t->o.ping_timeout_ms);
    t->stats.pings++;
    kl_tgt_conn_write(t, c);
}

void kl_tgt_conn_step(kl_target *t, kl_tconn *c, uint64_t now)
{
    switch (c->st) {
    case CS_IDLE: return;
    case CS_CONNECTING:
        if (now >= c->deadline)
            kl_tgt_conn_fail(t, c, KL_E_TIMEOUT, "connect timed out");
        else
            conn_connected(t, c);
        return;
    case CS_HANDSHAKE:
        if (now >= c->deadline)
            kl_tgt_conn_fail(t, c, KL_E_TIMEOUT, "TLS handshake timed out");
        else
            conn_handshake(t, c);
        return;
    case CS_READY:
        kl_tgt_conn_write(t, c);
        if (c->st == CS_READY)
            conn_read(t, c);
        if (c->st == CS_READY)
            conn_ping(t, c, now);
        return;
    }
}

void kl_tgt_conn_rearm(kl_target *t, kl_tconn *c, uint64_t now, uint64_t *at)
{
    uint64_t when = UINT64_MAX;
    switch (c->st) {
    case CS_IDLE:
        if ((t->qhead || t->connecting) && c->retry_at > now)
            when = c->retry_at;
        break;
    case CS_CONNECTING:
    case CS_HANDSHAKE: when = c->deadline; break;
    case CS_READY: {
        size_t unsent;
        (void)kl_pipeline_out(&c->ln.pipe, &unsent);
        uint32_t ev = EPOLLIN;
        if (unsent && c->io_want == EPOLLOUT)
            ev |= EPOLLOUT;
        conn_watch(t, c, ev);
        if (t->o.ping_interval_ms < 0)
            break;
        if (c->ping_out) {
            when = c->ping_deadline;
        } else if (!kl_u64map_count(&c->inflight)) {
            uint64_t last = c->last_write_ns > c->last_read_ns
                                ? c->last_write_ns
                                : c->last_read_ns;
            when = kl_tgt_after_ms(last, t->o.ping_interval_ms);
        }
        break;
    }
    }
    if (when < *at)
        *at = when;
}
