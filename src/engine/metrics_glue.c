/* SPDX-License-Identifier: Apache-2.0 */
/* Where the serving core records its metrics (docs/METRICS.md):
 * each shard writes only its own slot (src/metrics: relaxed loads and
 * stores, no lock, no locked read-modify-write), and crypto jobs carry
 * their timestamps back to the shard, which records them when the answer
 * is queued - so worker threads need no slot at all. With metrics off the
 * slot is NULL: every call below returns at once and no clock is read.
 *
 * Request times:
 *  - total: request read -> its answer queued on the connection;
 *  - exec: the operation itself, queue wait excluded: from the time the
 *    pool began its crypto (kl_job.started_ns) to its completion. For a
 *    forwarded request exec is the remote path (router hand-over to
 *    answer); for an answer given at once it equals total. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509.h>

#include "core/log.h"
#include "core/time.h"
#include "engine/internal.h"

static kl_metrics_conn mstate(kl_conn_state st)
{
    switch (st) {
    case KL_CONN_HANDSHAKE: return KL_MCONN_HANDSHAKE;
    case KL_CONN_OPEN: return KL_MCONN_OPEN;
    case KL_CONN_DRAINING: return KL_MCONN_DRAINING;
    case KL_CONN_CLOSED: break;
    }
    return KL_MCONN_NONE;
}

void kl_conn_set_state(kl_conn *c, kl_conn_state to)
{
    if (c->state != to)
        kl_metrics_conn_move(c->shard->obs.mx, mstate(c->state), mstate(to));
    c->state = to;
}

uint64_t kl_mx_now(const kl_shard *s)
{
    return s->obs.mx || s->obs.tr ? kl_now_ns() : 0;
}

void kl_mx_request_read(kl_shard *s, uint8_t opcode)
{
    if (!s->obs.mx)
        return;
    kl_metrics_request(s->obs.mx, opcode);
    kl_metrics_inflight_add(s->obs.mx, 1);
}

void kl_mx_request_done(kl_shard *s, uint8_t opcode, kl_status err,
                        uint64_t t0_ns, uint64_t exec_ns)
{
    if (!s->obs.mx)
        return;
    kl_metrics_inflight_add(s->obs.mx, -1);
    if (!t0_ns)
        return; /* read before metrics timed it: count only */
    uint64_t now = kl_now_ns(), total = now > t0_ns ? now - t0_ns : 0;
    if (exec_ns == UINT64_MAX)
        exec_ns = total;
    kl_metrics_exec_time(s->obs.mx, opcode, err, exec_ns);
    kl_metrics_total_time(s->obs.mx, opcode, err, total);
}

void kl_mx_job_done(kl_job *job)
{
    kl_srv_job *j = (kl_srv_job *)job;
    uint64_t now = kl_now_ns();
    /* a job that never ran (shed, abandoned): all of it was waiting */
    j->start_ns =
        job->started_ns && job->started_ns >= j->t0_ns && job->started_ns <= now
            ? job->started_ns
            : now;
    j->done_ns = now;
    kl_shard_job_done(job); /* the job is the shard's from here on */
}

static void tr_job_spans(kl_shard *s, const kl_srv_job *j);

void kl_mx_job_complete(kl_shard *s, const kl_srv_job *j)
{
    /* j->trace is written only with tracing on (kl_tr_job_attach) */
    if (s->obs.tr && j->trace.sampled)
        tr_job_spans(s, j);
    if (!s->obs.mx || !j->t0_ns || !j->done_ns) {
        kl_mx_request_done(s, j->job.opcode, j->job.err, 0, 0);
        return;
    }
    kl_metrics_queue_wait(s->obs.mx, (int)kl_crypto_cost_class(j->job.key),
                          j->start_ns - j->t0_ns);
    kl_mx_request_done(s, j->job.opcode, j->job.err, j->t0_ns,
                       j->done_ns - j->start_ns);
}

void kl_mx_handshake_failed(kl_shard *s, int reason, const char *tls_error)
{
    if (!s->obs.mx)
        return;
    if (reason < 0) {
        /* OpenSSL's reasons for a refused or missing peer certificate all
         * name the certificate ("certificate verify failed", "peer did
         * not return a certificate", "certificate required"...). */
        reason = tls_error && strstr(tls_error, "certificate")
                     ? KL_HS_FAIL_CERT
                     : KL_HS_FAIL_PROTOCOL;
    }
    kl_metrics_handshake_failed(s->obs.mx, (kl_metrics_hs_fail)reason);
}

void kl_mx_loop_turn(kl_shard *s)
{
    if (!s->obs.mx)
        return;
    uint64_t busy = kl_loop_busy_ns(s->ev.loop);
    if (busy > s->obs.busy_reported) {
        kl_metrics_loop_busy(s->obs.mx, busy - s->obs.busy_reported);
        s->obs.busy_reported = busy;
    }
    if (s->async) {
        kl_async_stats as;
        kl_shard_async_get_stats(s, &as);
        kl_metrics_set_async(s->obs.mx,
                             &(kl_metrics_async){.started = as.started,
                                                 .paused = as.paused,
                                                 .expired = as.expired,
                                                 .full = as.full,
                                                 .retried = as.retried,
                                                 .busy = as.busy,
                                                 .fds = as.fds});
    }
    /* Back-pressure (docs/METRICS.md): the shard's buffered bytes and read
     * pauses as they stand after this turn - the value an idle shard keeps
     * until its next turn. A few loads and, when something changed, a
     * store to the shard's own slot. */
    kl_metrics_set_buffered(s->obs.mx, s->budget.held,
                            s->srv->o.max_buffered / (size_t)s->srv->nshards);
    kl_metrics_set_read_pauses(
        s->obs.mx,
        atomic_load_explicit(&s->st.read_pauses, memory_order_relaxed));
    /* an accept pause that ended without a socket admitted: the listener
     * closed at shutdown (limits.c note_pause ends the others) */
    if (!s->accept.parked && kl_metrics_accept_is_paused(s->obs.mx))
        kl_metrics_accept_paused(s->obs.mx, false, kl_now_ns());
}

void kl_mx_peer_cert(kl_conn *c)
{
    kl_server *srv = c->shard->srv;
    if (!c->shard->obs.mx)
        return;
    /* certificate_expiration_timestamp_seconds for the client's
     * certificate, as the reference records it on each accepted
     * connection (the same certificate keeps one series) */
    unsigned char *der = NULL;
    size_t len = kl_tls_peer_cert_der(c->tls, &der);
    const unsigned char *p = der;
    X509 *x = len ? d2i_X509(NULL, &p, (long)len) : NULL;
    if (x) {
        char src[INET6_ADDRSTRLEN + 32];
        bool v6 = strchr(srv->listen_address, ':') != NULL;
        snprintf(src, sizeof src, "listener: %s%s%s:%u", v6 ? "[" : "",
                 srv->listen_address, v6 ? "]" : "", srv->port);
        kl_metrics_cert_expiry_add(srv->o.metrics, src, x);
        X509_free(x);
    } else {
        ERR_clear_error();
    }
    free(der);
}

void kl_mx_key_lookup(kl_shard *s, const kl_req_trace *rt, uint64_t tk,
                      const uint8_t *ski, bool found)
{
    if (!tk)
        return;
    uint64_t now = kl_now_ns();
    /* keyless_key_load_duration: signing and decrypting ops */
    if (s->obs.mx)
        kl_metrics_key_load_time(s->obs.mx, now - tk);
    if (!rt->ref.sampled)
        return;
    kl_span sp;
    memset(&sp, 0, sizeof sp);
    memcpy(sp.trace_id, rt->ref.trace_id, 16);
    sp.span_id = kl_trace_ring_new_id(s->obs.tr);
    sp.parent_id = rt->ref.span_id;
    sp.name = "keyless.key_lookup";
    sp.kind = KL_SPAN_INTERNAL;
    sp.start_ns = tk;
    sp.end_ns = now;
    char hex[2 * KL_SKI_LEN + 1];
    kl_trace_hex(ski, KL_SKI_LEN, hex);
    kl_span_attr_str(&sp, "keyless.ski", hex);
    kl_span_attr_bool(&sp, "keyless.key_found", found);
    kl_trace_ring_emit(s->obs.tr, &sp);
}

/* ---- tracing (docs/TRACING.md) ------------------------------------------
 * A request's spans: the server span (read -> answer queued), and as its
 * children the key lookup, then either the queue wait and the execution
 * (a crypto job) or the route (a forwarded request; routed.c, whose
 * attempts the router adds). The request's trace state (kl_req_trace)
 * lives from kl_tr_request_read to kl_tr_request_end, inside one call of
 * kl_conn_handle_request, which holds it; a job or a forwarded request
 * takes a copy. */

static void tr_span(kl_span *sp, const kl_trace_ref *ref, const char *name,
                    uint8_t kind, uint64_t start, uint64_t end)
{
    memset(sp, 0, sizeof *sp);
    memcpy(sp->trace_id, ref->trace_id, 16);
    sp->name = name;
    sp->kind = kind;
    sp->start_ns = start;
    sp->end_ns = end >= start ? end : start;
}

/* The server span of a request answered with err. */
static void tr_server_span(kl_shard *s, const kl_conn *c,
                           const kl_trace_ref *ref, uint8_t opcode,
                           kl_status err, uint64_t t0, const char *rid)
{
    kl_span sp;
    tr_span(&sp, ref, "keyless.request", KL_SPAN_SERVER, t0, kl_now_ns());
    sp.span_id = ref->span_id;
    sp.parent_id = ref->parent_id;
    kl_span_attr_str(&sp, "keyless.opcode", kl_op_name(opcode));
    kl_span_attr_str(&sp, "keyless.error", kl_status_label(err));
    if (rid && *rid)
        kl_span_attr_str(&sp, "keyless.request_id", rid);
    kl_span_attr_str(&sp, "keyless.client", kl_conn_peer_label(c));
    kl_span_attr_str(&sp, "net.peer.name", c->addr);
    kl_span_attr_int(&sp, "keyless.shard", s->index);
    if (err != KL_OK) {
        sp.error = true;
        snprintf(sp.status_msg, sizeof sp.status_msg, "%s",
                 kl_status_label(err));
    }
    kl_trace_ring_emit(s->obs.tr, &sp);
}

void kl_tr_request_read_(kl_conn *c, kl_req_trace *rt, const kl_request *req,
                         const kl_req_context *ctx, uint64_t t0_ns)
{
    kl_shard *s = c->shard;
    bool bad;
    kl_trace_ref_start(s->obs.tr, req->span_context.ptr, req->span_context.len,
                       &rt->ref, &bad);
    if (bad) /* protocol P3: a bad value is logged and ignored */
        kl_debug("connection %s (client %s): request %u: span context "
                 "(tag 0x15) is neither Jaeger form; ignored",
                 c->addr, kl_conn_peer_label(c), req->hdr.id);
    rt->ref.opcode = req->opcode;
    rt->t0 = t0_ns;
    rt->rid[0] = 0;
    if (rt->ref.sampled && ctx && ctx->request_id[0])
        snprintf(rt->rid, sizeof rt->rid, "%s", ctx->request_id);
}

void kl_tr_job_attach_(kl_shard *s, const kl_req_trace *rt, kl_srv_job *j)
{
    j->trace = rt->ref;
    if (!j->trace.sampled)
        return;
    j->queued_ns = kl_now_ns();
    /* the pool's done callback notes when the job ran (even with metrics
     * off): the queue-wait and execution spans need it */
    if (j->job.done == kl_shard_job_done)
        j->job.done = kl_mx_job_done;
}

void kl_tr_request_end_(kl_conn *c, const kl_req_trace *rt, kl_status err)
{
    if (rt->ref.sampled)
        tr_server_span(c->shard, c, &rt->ref, rt->ref.opcode, err, rt->t0,
                       rt->rid);
}

static void tr_job_spans(kl_shard *s, const kl_srv_job *j)
{
    const kl_trace_ref *ref = &j->trace;
    kl_status err = j->job.err;
    uint64_t queued = j->queued_ns ? j->queued_ns : j->t0_ns;
    /* the pool's own start time when it ran the job; inline jobs and jobs
     * that never ran have none */
    uint64_t start = j->job.started_ns ? j->job.started_ns : j->start_ns;
    uint64_t done = j->done_ns ? j->done_ns : kl_now_ns();
    if (start < queued)
        start = queued;
    if (done < start)
        done = start;
    kl_span sp;
    tr_span(&sp, ref, "keyless.queue_wait", KL_SPAN_INTERNAL, queued, start);
    sp.span_id = kl_trace_ring_new_id(s->obs.tr);
    sp.parent_id = ref->span_id;
    kl_span_attr_int(&sp, "keyless.cost_class",
                     (int64_t)kl_crypto_cost_class(j->job.key));
    kl_trace_ring_emit(s->obs.tr, &sp);
    if (j->job.started_ns) {
        tr_span(&sp, ref, "keyless.execute", KL_SPAN_INTERNAL, start, done);
        sp.span_id = kl_trace_ring_new_id(s->obs.tr);
        sp.parent_id = ref->span_id;
        kl_span_attr_str(&sp, "keyless.opcode", kl_op_name(j->job.opcode));
        kl_span_attr_str(&sp, "keyless.error", kl_status_label(err));
        if (err != KL_OK) {
            sp.error = true;
            snprintf(sp.status_msg, sizeof sp.status_msg, "%s",
                     kl_status_label(err));
        }
        kl_trace_ring_emit(s->obs.tr, &sp);
    }
    tr_server_span(s, j->conn, ref, j->job.opcode, err, j->t0_ns,
                   j->request_id);
}

void kl_tr_routed_spans(kl_shard *s, const kl_conn *c, const kl_trace_ref *ref,
                        uint64_t route_span, uint8_t opcode, kl_status err,
                        uint64_t t0, uint64_t sent, uint64_t done,
                        const char *rid)
{
    kl_span sp;
    tr_span(&sp, ref, "keyless.route", KL_SPAN_INTERNAL, sent,
            done ? done : kl_now_ns());
    sp.span_id = route_span;
    sp.parent_id = ref->span_id;
    kl_span_attr_str(&sp, "keyless.error", kl_status_label(err));
    if (err != KL_OK) {
        sp.error = true;
        snprintf(sp.status_msg, sizeof sp.status_msg, "%s",
                 kl_status_label(err));
    }
    kl_trace_ring_emit(s->obs.tr, &sp);
    tr_server_span(s, c, ref, opcode, err, t0, rid);
}
