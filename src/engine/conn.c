/* SPDX-License-Identifier: Apache-2.0 */
/* One client connection, on its shard's thread only: TLS handshake, reading
 * and cutting frames, dispatch, answers, limits with backpressure, idle
 * timeout, drain and close (protocol P1, P2, P3, P5, P6, P8). */
#include <errno.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "core/log.h"
#include "core/time.h"
#include "engine/acl.h"
#include "engine/internal.h"
#include "engine/limits.h"

static void on_event(kl_loop *l, kl_watch *w, unsigned events);
static void on_timer(kl_loop *l, kl_timer *t);

static const kl_server_opts *opts(const kl_conn *c)
{
    return &c->shard->srv->o;
}

static void format_addr(const struct sockaddr *sa, char *out, size_t cap)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
        port = ntohs(a->sin_port);
        snprintf(out, cap, "%s:%u", ip, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
        port = ntohs(a->sin6_port);
        snprintf(out, cap, "[%s]:%u", ip, port);
    } else {
        snprintf(out, cap, "?");
    }
}

bool kl_conn_accept(kl_shard *s, int fd, const struct sockaddr *sa)
{
    kl_server *srv = s->srv;
    /* over max_connections or its source's handshake cap, close
     * at once; at max_handshaking, the caller keeps it and stops
     * accepting until a handshake slot frees (limits.c). */
    kl_src src;
    kl_admit a = kl_limits_admit(s, sa, &src);
    if (a == KL_ADMIT_WAIT)
        return false;
    if (a == KL_ADMIT_CLOSE) {
        close(fd);
        return true;
    }
    /* P8: Nagle plus delayed ACKs would hold each coalesced write ~40 ms. */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* the input buffer comes with the first bytes (kl_conn_read) */
    kl_conn *c = calloc(1, sizeof *c);
    if (!c) {
        kl_warn("out of memory accepting a connection");
        close(fd);
        kl_limits_release(s, true, &src);
        return true;
    }
    c->shard = s;
    c->fd = fd;
    c->src = src;
    c->state = KL_CONN_HANDSHAKE;
    c->hs_want = KL_EV_READ;
    kl_outbuf_init(&c->out);
    format_addr(sa, c->addr, sizeof c->addr);
    kl_timer_init(&c->timer, on_timer, c);
    kl_shard_sync(s); /* new connections get the newest certificate */
    c->trust_epoch = s->res.trust_epoch; /* ... and client CA (lifetime.c) */
    c->tls = kl_tls_conn_new(kl_shard_tls(s), fd, true, NULL);
    if (!c->tls ||
        kl_watch_start(s->ev.loop, &c->watch, fd, KL_EV_READ, on_event, c) !=
            KL_OK ||
        kl_timer_at(s->ev.loop, &c->timer,
                    kl_loop_now(s->ev.loop) + srv->o.handshake_timeout_ns) !=
            KL_OK) {
        kl_warn("%s: cannot set up the connection", c->addr);
        kl_watch_stop(s->ev.loop, &c->watch);
        kl_timer_stop(s->ev.loop, &c->timer);
        if (c->tls)
            kl_tls_conn_free(c->tls);
        free(c->in);
        free(c);
        close(fd);
        kl_limits_release(s, true, &src);
        return true;
    }
    c->next = s->conns.live;
    if (s->conns.live)
        s->conns.live->prev = c;
    s->conns.live = c;
    s->conns.nlive++;
    KL_COUNT(s->st.accepted);
    kl_metrics_conn_move(s->obs.mx, KL_MCONN_NONE, KL_MCONN_HANDSHAKE);
    return true;
}

/* ---- closing ---- */

void kl_conn_close(kl_conn *c)
{
    if (c->state == KL_CONN_CLOSED)
        return;
    kl_shard *s = c->shard;
    kl_limits_release(s, c->state == KL_CONN_HANDSHAKE, &c->src);
    kl_acl_grant_release(&c->acl);
    /* workers skip the jobs still queued for it */
    atomic_store_explicit(&c->gone, true, memory_order_relaxed);
    kl_watch_stop(s->ev.loop, &c->watch);
    kl_timer_stop(s->ev.loop, &c->timer);
    kl_tls_conn_free(c->tls);
    c->tls = NULL;
    /* unsent responses have nobody to go to: their bytes go back to the
     * budget now */
    kl_outbuf_free(&c->out);
    kl_conn_held_sync(c);
    close(c->fd);
    c->fd = -1;
    kl_conn_set_state(c, KL_CONN_CLOSED);
    kl_routed_cancel_all(c); /* nothing more goes upstream */
    /* Move from the live list to the closed list; the shard frees it once
     * no job refers to it any more (jobs still running come back to it and
     * their answers are discarded). */
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns.live = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->conns.nlive--;
    c->prev = NULL;
    c->next = s->conns.closed;
    if (s->conns.closed)
        s->conns.closed->prev = c;
    s->conns.closed = c;
}

void kl_conn_free(kl_conn *c)
{
    free(c->in);
    kl_outbuf_free(&c->out);
    free(c);
}

/* A connection closed for a reason worth one log line (P1: info/warn with
 * the client's certificate name). */
void kl_conn_close_with(kl_conn *c, int level, const char *what,
                        const char *why)
{
    if (kl_log_get_level() <= level)
        kl_log(level, "connection %s (client %s): %s%s%s", c->addr,
               kl_conn_peer_label(c), what, why ? ": " : "", why ? why : "");
    kl_conn_close(c);
}

/* Draining and nothing left to do: close politely. */
bool kl_conn_done_draining(kl_conn *c)
{
    if (c->state != KL_CONN_DRAINING || c->inflight > 0 ||
        kl_outbuf_pending(&c->out) > 0)
        return false;
    kl_tls_shutdown(c->tls);
    kl_debug("connection %s (client %s): closed after draining", c->addr,
             kl_conn_peer_label(c));
    kl_conn_close(c);
    return true;
}

void kl_conn_drain(kl_conn *c)
{
    if (c->state != KL_CONN_OPEN)
        return;
    kl_shard *s = c->shard;
    kl_conn_set_state(c, KL_CONN_DRAINING);
    /* P8: stop reading, finish what is in flight (up to the drain time),
     * then close. */
    if (kl_timer_at(s->ev.loop, &c->timer,
                    kl_loop_now(s->ev.loop) + opts(c)->drain_timeout_ns) !=
        KL_OK) {
        kl_conn_close(c);
        return;
    }
    if (!kl_conn_done_draining(c))
        kl_conn_update_interest(c);
}

/* ---- limits and interest ---- */

/* max_buffered: each shard holds at most its share of the
 * process-wide budget in crypto jobs (payload copy and output space) and
 * output buffers (their capacity: what malloc really holds). */
static size_t shard_budget(const kl_shard *s)
{
    return s->srv->o.max_buffered / (size_t)s->srv->nshards;
}

void kl_shard_held_release(kl_shard *s, size_t n)
{
    size_t budget = shard_budget(s), low = budget - budget / 8;
    bool was_high = s->budget.held >= low;
    s->budget.held -= n;
    /* Connections paused on the budget resume on the wake (shard.c
     * resume_paused); some room first, so that one freed response does
     * not make the shard walk its connections each time. */
    if (was_high && s->budget.held < low && s->conns.paused_global)
        kl_loop_wake(s->ev.loop);
}

void kl_conn_held_sync(kl_conn *c)
{
    size_t cap = c->out.cap;
    if (cap > c->out_held)
        c->shard->budget.held += cap - c->out_held;
    else if (cap < c->out_held)
        kl_shard_held_release(c->shard, c->out_held - cap);
    c->out_held = cap;
}

int kl_conn_read_block(const kl_conn *c)
{
    const kl_server *srv = c->shard->srv;
    if (c->state != KL_CONN_OPEN)
        return KL_NOT_OPEN;
    /* P8: at the in-flight limits, or with too much output unread by the
     * client, stop reading rather than fail requests. */
    if (c->inflight >= srv->o.max_inflight_per_conn ||
        kl_outbuf_pending(&c->out) >= srv->o.max_output)
        return KL_CONN_LIMIT;
    /* over the shard's budget, only connections that hold nothing
     * (no request in flight, no unsent response) may read, one request at
     * a time: clients that do not read their answers cannot starve the
     * others, and memory stays within the budget plus one request per
     * connection. */
    if ((c->inflight > 0 || kl_outbuf_pending(&c->out) > 0) &&
        c->shard->budget.held >= shard_budget(c->shard))
        return KL_BUDGET_LIMIT;
    if (atomic_load_explicit(&srv->inflight, memory_order_relaxed) >=
        srv->o.max_inflight)
        return KL_PROCESS_LIMIT;
    return KL_CAN_READ;
}

void kl_conn_update_interest(kl_conn *c)
{
    kl_shard *s = c->shard;
    unsigned ev = 0;
    if (c->state == KL_CONN_CLOSED)
        return;
    kl_conn_held_sync(c);
    if (c->state == KL_CONN_HANDSHAKE) {
        ev = c->hs_want;
    } else {
        int why = kl_conn_read_block(c);
        if (why == KL_CAN_READ) {
            ev |= c->read_wants_write ? KL_EV_WRITE : KL_EV_READ;
            if (c->paused) {
                /* Resuming: frames may wait in the input buffer and
                 * records inside TLS, which epoll cannot announce. */
                c->paused = false;
                kl_shard_mark_ready(s, c);
            }
        } else if (why != KL_NOT_OPEN && !c->paused) {
            c->paused = true;
            KL_COUNT(s->st.read_pauses);
        }
        if (why == KL_BUDGET_LIMIT)
            s->conns.paused_global = true; /* kl_shard_held_release wakes us */
        if (why == KL_PROCESS_LIMIT) {
            s->conns.paused_global = true;
            atomic_store(&s->conns.global_blocked, true);
            /* A shard that brought the count down before it could see the
             * flag did not wake us: check again after publishing it. */
            if (atomic_load(&s->srv->inflight) < s->srv->o.max_inflight)
                kl_loop_wake(s->ev.loop);
        }
        if (kl_outbuf_pending(&c->out) > 0) {
            if (c->write_blocked)
                ev |= KL_EV_WRITE;
            if (c->write_wants_read)
                ev |= KL_EV_READ;
        }
    }
    if (kl_watch_set(s->ev.loop, &c->watch, ev) != KL_OK)
        kl_conn_close_with(c, KL_LOG_WARN, "closed", "epoll_ctl failed");
}

/* Cuts and handles every complete frame in the input buffer while the
 * limits allow; the rest stays for later. */
static void process_frames(kl_conn *c)
{
    size_t off = 0;
    if (c->in_len == 0)
        return; /* (c->in may be NULL) */
    for (;;) {
        kl_conn_held_sync(c); /* the last request's answer counts */
        if (kl_conn_read_block(c) != KL_CAN_READ)
            break;
        /* an expired or no longer trusted client certificate: no request
         * read after that runs (lifetime.c) */
        if (!kl_conn_lifetime_ok(c, kl_now_ns()))
            break;
        kl_header hdr;
        size_t flen;
        if (kl_frame_peek(c->in + off, c->in_len - off, &hdr, &flen) != KL_OK)
            break;
        kl_conn_handle_request(c, &hdr, c->in + off + KL_HEADER_LEN,
                               flen - KL_HEADER_LEN);
        off += flen;
    }
    if (c->state == KL_CONN_CLOSED || off == 0)
        return;
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
}

/* An empty input buffer is not kept (an idle connection costs
 * no 16 KiB); a connection holds one only while part of a frame waits. */
static void release_input(kl_conn *c)
{
    if (c->in_len > 0 || !c->in)
        return;
    free(c->in);
    c->in = NULL;
    c->in_cap = 0;
}

static void read_input(kl_conn *c);

void kl_conn_read(kl_conn *c)
{
    read_input(c);
    release_input(c);
}

static void read_input(kl_conn *c)
{
    for (int i = 0;; i++) {
        process_frames(c);
        if (kl_conn_read_block(c) != KL_CAN_READ)
            break;
        if (i == KL_READS_PER_WAKE) {
            /* Bounded work per wake-up; continue next turn. */
            kl_shard_mark_ready(c->shard, c);
            break;
        }
        if (!c->in) {
            c->in = malloc(KL_IN_INITIAL);
            if (!c->in) {
                kl_conn_close_with(c, KL_LOG_ERROR, "closed", "out of memory");
                return;
            }
            c->in_cap = KL_IN_INITIAL;
        }
        if (c->in_len == c->in_cap) {
            /* Only an incomplete frame is left and it is larger than the
             * buffer: grow to the largest message (8 + 65535). */
            uint8_t *big = realloc(c->in, KL_MAX_MESSAGE);
            if (!big) {
                kl_conn_close_with(c, KL_LOG_ERROR, "closed", "out of memory");
                return;
            }
            c->in = big;
            c->in_cap = KL_MAX_MESSAGE;
        }
        size_t n = 0;
        kl_io io =
            kl_tls_read(c->tls, c->in + c->in_len, c->in_cap - c->in_len, &n);
        if (io == KL_IO_OK) {
            c->in_len += n;
            continue;
        }
        if (io == KL_IO_WANT_READ)
            break;
        if (io == KL_IO_WANT_WRITE) {
            c->read_wants_write = true;
            break;
        }
        if (io == KL_IO_EOF) {
            kl_debug("connection %s (client %s): closed by the client%s",
                     c->addr, kl_conn_peer_label(c),
                     c->inflight ? " with requests in flight" : "");
            kl_conn_close(c);
        } else {
            kl_metrics_failed_connection(c->shard->obs.mx);
            kl_conn_close_with(c, KL_LOG_INFO, "read failed",
                               kl_tls_last_error(c->tls));
        }
        return;
    }
    kl_conn_update_interest(c);
}

/* P8: everything ready leaves in one TLS write (more only when it exceeds
 * what one write takes). */
void kl_conn_flush(kl_conn *c)
{
    if (c->state == KL_CONN_CLOSED || c->state == KL_CONN_HANDSHAKE)
        return;
    if (c->write_blocked || c->write_wants_read)
        return; /* waiting for the socket; on_event retries */
    for (int i = 0; kl_outbuf_pending(&c->out) > 0; i++) {
        if (i == KL_WRITES_PER_FLUSH) {
            kl_shard_mark_dirty(c->shard, c);
            break;
        }
        size_t n = 0;
        kl_io io = kl_tls_write(c->tls, kl_outbuf_data(&c->out),
                                kl_outbuf_pending(&c->out), &n);
        if (io == KL_IO_OK) {
            kl_outbuf_consume(&c->out, n);
            continue;
        }
        if (io == KL_IO_WANT_WRITE) {
            c->write_blocked = true;
        } else if (io == KL_IO_WANT_READ) {
            c->write_wants_read = true;
        } else {
            kl_metrics_failed_connection(c->shard->obs.mx);
            kl_conn_close_with(c, KL_LOG_INFO, "write failed",
                               io == KL_IO_EOF ? "peer closed"
                                               : kl_tls_last_error(c->tls));
            return;
        }
        break;
    }
    /* nothing in flight and all sent: the connection is idle for now, and
     * an idle connection keeps no output buffer */
    if (kl_outbuf_pending(&c->out) == 0 && c->inflight == 0)
        kl_outbuf_free(&c->out);
    kl_conn_held_sync(c);
    if (!kl_conn_done_draining(c))
        kl_conn_update_interest(c);
}

/* ---- handshake and events ---- */

static void handshake(kl_conn *c)
{
    kl_shard *s = c->shard;
    kl_io io = kl_tls_handshake(c->tls);
    if (io != KL_IO_EOF && io != KL_IO_ERROR && kl_limits_handshake_too_big(c))
        return; /* closed (max_handshake_bytes) */
    switch (io) {
    case KL_IO_OK:
        kl_limits_handshake_done(s, &c->src);
        kl_conn_set_state(c, KL_CONN_OPEN);
        kl_mx_peer_cert(c); /* the client certificate's expiry */
        snprintf(c->peer, sizeof c->peer, "%s", kl_tls_peer_name(c->tls));
        kl_acl_grant_conn(s->srv->o.acl, &c->acl, c->tls);
        KL_COUNT(s->st.handshakes);
        kl_debug("connection %s (client %s): %s %s", c->addr,
                 kl_conn_peer_label(c), kl_tls_version(c->tls),
                 kl_tls_cipher(c->tls));
        c->last_req_ns = kl_loop_now(s->ev.loop);
        kl_conn_lifetime_start(c); /* the certificate's expiry */
        if (kl_timer_at(s->ev.loop, &c->timer, kl_conn_next_due(c)) != KL_OK) {
            kl_conn_close_with(c, KL_LOG_ERROR, "closed", "out of memory");
            return;
        }
        /* The client may have sent requests right behind its Finished;
         * they may already sit decrypted inside TLS. */
        kl_shard_mark_ready(s, c);
        if (s->conns.draining)
            kl_conn_drain(c);
        else /* a reload during the handshake changed the client CA */
            (void)kl_conn_lifetime_ok(c, kl_now_ns());
        break;
    case KL_IO_WANT_READ: c->hs_want = KL_EV_READ; break;
    case KL_IO_WANT_WRITE: c->hs_want = KL_EV_WRITE; break;
    case KL_IO_EOF:
    case KL_IO_ERROR:
        if (!kl_tls_handshake_started(c->tls)) {
            /* P1: a connect-and-close is a load-balancer health check. */
            KL_COUNT(s->st.health_checks);
            kl_debug("connection %s: closed before the TLS handshake "
                     "(health check)",
                     c->addr);
            kl_conn_close(c);
        } else {
            /* P1: refused client certificates end here, for TLS 1.2 and
             * 1.3 alike (in 1.3 the server fails on the client's
             * Certificate message). One line, with the reason. */
            KL_COUNT(s->st.handshake_failed);
            kl_mx_handshake_failed(s, io == KL_IO_EOF ? KL_HS_FAIL_CLOSED : -1,
                                   kl_tls_last_error(c->tls));
            snprintf(c->peer, sizeof c->peer, "%s", kl_tls_peer_name(c->tls));
            /* rate-limited: anyone can fail handshakes (docs/OPERATIONS.md,
             * Logs) */
            kl_conn_close_limited(c, KL_LOGSUP_HANDSHAKE_FAILED, KL_LOG_WARN,
                                  "TLS handshake failed",
                                  io == KL_IO_EOF
                                      ? "the client closed the connection"
                                      : kl_tls_last_error(c->tls));
        }
        return;
    }
    kl_conn_update_interest(c);
}

static void on_event(kl_loop *l, kl_watch *w, unsigned events)
{
    kl_conn *c = w->data;
    if (c->state == KL_CONN_HANDSHAKE) {
        handshake(c);
        return;
    }
    if ((c->write_blocked && (events & (KL_EV_WRITE | KL_EV_ERROR))) ||
        (c->write_wants_read && (events & (KL_EV_READ | KL_EV_ERROR)))) {
        c->write_blocked = c->write_wants_read = false;
        kl_conn_flush(c);
        if (c->state == KL_CONN_CLOSED)
            return;
    }
    if (c->read_wants_write && (events & KL_EV_WRITE)) {
        c->read_wants_write = false;
        events |= KL_EV_READ;
    }
    if (events & KL_EV_ERROR) {
        /* Hang-up or socket error: reading tells which, and closes. */
        if (c->state == KL_CONN_OPEN && kl_conn_read_block(c) == KL_CAN_READ) {
            kl_conn_read(c);
        } else {
            kl_debug("connection %s (client %s): hang-up%s", c->addr,
                     kl_conn_peer_label(c),
                     c->inflight ? " with requests in flight" : "");
            kl_conn_close(c);
        }
        return;
    }
    if ((events & KL_EV_READ) && kl_conn_read_block(c) == KL_CAN_READ)
        kl_conn_read(c);
    else
        kl_conn_update_interest(c);
}

static void on_timer(kl_loop *l, kl_timer *t)
{
    kl_conn *c = t->data;
    kl_shard *s = c->shard;
    uint64_t now = kl_loop_now(l);
    switch (c->state) {
    case KL_CONN_HANDSHAKE:
        KL_COUNT(s->st.handshake_failed);
        kl_mx_handshake_failed(s, KL_HS_FAIL_TIMEOUT, NULL);
        kl_conn_close_limited(c, KL_LOGSUP_HANDSHAKE_TIMEOUT, KL_LOG_INFO,
                              "closed", "TLS handshake timed out");
        return;
    case KL_CONN_OPEN: {
        /* The certificate's expiry (lifetime.c), checked on the clock:
         * the loop's turn may have started before it. */
        if (!kl_conn_lifetime_ok(c, kl_now_ns()))
            return;
        /* Re-armed lazily: requests only move last_req_ns. */
        uint64_t due = kl_conn_next_due(c);
        if (now < due) {
            if (kl_timer_at(l, &c->timer, due) != KL_OK)
                kl_conn_close(c);
            return;
        }
        KL_COUNT(s->st.idle_closed);
        kl_debug("connection %s (client %s): idle timeout", c->addr,
                 kl_conn_peer_label(c));
        kl_conn_drain(c);
        return;
    }
    case KL_CONN_DRAINING:
        kl_conn_close_with(c, KL_LOG_INFO, "closed",
                           c->inflight
                               ? "drain time over with requests in flight"
                               : "drain time over with unsent responses");
        return;
    case KL_CONN_CLOSED: return;
    }
}
