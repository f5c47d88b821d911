/* SPDX-License-Identifier: Apache-2.0 */
/* Requests for keys this server does not hold but its routing table does
 * (docs/ROUTING.md): handed to the router, which forwards them on
 * its own thread, and answered through the shard's completion queue like a
 * crypto job - so a 175 ms remote signature holds up nothing else on the
 * connection (protocol P8: answers leave as they become ready).
 *
 * Ownership. A forwarded request (kl_srv_rjob) belongs to its shard from
 * kl_routed_submit until kl_router_route takes it, to the router until its
 * done callback pushed it onto the shard's completion queue, and to the
 * shard again from there. It counts in flight on its connection and in the
 * process (c->inflight, srv->inflight), so backpressure, drain and the
 * zombie rule (a closed connection is freed when nothing refers to it) hold
 * as for crypto jobs.
 *
 * Cancel. kl_router_cancel may be called only before the done callback
 * returned (the router frees its request right after). `finished` is set
 * by the callback under the shard's done.mu, and the shard cancels only
 * under the same lock after seeing it unset: the callback cannot have
 * returned meanwhile. Lock order: done.mu, then the router's own locks;
 * the router calls done holding none of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/time.h"
#include "engine/internal.h"

struct kl_srv_rjob {
    kl_job job; /* first (the queue's type): kind = KL_JOB_ROUTED, owner =
                   the shard, key = NULL, err and out/out_len = the answer */
    kl_conn *conn;
    kl_srv_rjob *prev, *next; /* the connection's forwarded requests */
    kl_route_handle h;
    bool finished; /* done ran; guarded by the shard's done.mu */
    bool sealed;   /* a sealed key held elsewhere (for the log line) */
    uint32_t id;
    uint64_t t0_ns;      /* read (kl_now_ns), 0 with metrics off */
    uint64_t sent_ns;    /* handed to the router */
    uint64_t done_ns;    /* answered by the router */
    kl_trace_ref trace;  /* the request's trace */
    uint64_t route_span; /* its route span, the attempts' parent */
    char request_id[KL_REQUEST_ID_MAX + 1];
};

static void unlink_rjob(kl_srv_rjob *rj)
{
    kl_conn *c = rj->conn;
    if (rj->prev)
        rj->prev->next = rj->next;
    else if (c->routed == rj)
        c->routed = rj->next;
    if (rj->next)
        rj->next->prev = rj->prev;
    rj->prev = rj->next = NULL;
}

/* On the router thread: keep the answer and hand the request back to its
 * shard (as kl_shard_job_done does for crypto jobs), marking it finished
 * in the same critical section. */
static void rjob_done(void *arg, kl_status err, const uint8_t *payload,
                      size_t len)
{
    kl_srv_rjob *rj = arg;
    if (rj->t0_ns)
        rj->done_ns = kl_now_ns();
    rj->job.err = err;
    rj->job.out = NULL;
    rj->job.out_len = 0;
    if (err == KL_OK && len) {
        rj->job.out = malloc(len);
        if (rj->job.out) {
            memcpy(rj->job.out, payload, len);
            rj->job.out_len = len;
        } else {
            rj->job.err = KL_E_INTERNAL;
        }
    }
    kl_shard *s = rj->job.owner;
    pthread_mutex_lock(&s->done.mu);
    rj->finished = true;
    bool was_empty = s->done.routed == NULL;
    rj->job.next = s->done.routed;
    s->done.routed = &rj->job;
    pthread_mutex_unlock(&s->done.mu);
    /* the wake-up is the router's batch flush (kl_shard_routed_flush) */
    if (was_empty)
        atomic_store(&s->done.routed_wake, true);
}

/* Access lists for keys held elsewhere
 * (docs/SECURITY.md "Access lists"): the access lists judge a forwarded
 * key as they judge a local one, so a client gets the same refusal for a
 * key it may not use wherever the key lives (and nothing of the request
 * leaves this server). Here the key exists only as its SKI, which is what
 * kl_acl_allows_ski judges (`ski:` and "*" rules can name it). */
kl_status kl_routed_submit(kl_conn *c, const kl_request *req,
                           const kl_req_context *ctx, const kl_req_trace *rt,
                           uint64_t t0_ns, const char *sealed_policy)
{
    kl_shard *s = c->shard;
    kl_server *srv = s->srv;
    const char *rid = ctx && ctx->request_id[0] ? ctx->request_id : NULL;
    if (!kl_acl_allows_ski(srv->o.acl, &c->acl, c->tls, req->ski)) {
        /* the same answer and log line as for a refused local key
         * (request.c): `key not found`, the key's existence not revealed */
        char hex[2 * KL_SKI_LEN + 1 + 40];
        kl_ski_hex(req->ski, hex);
        strcat(hex, ": refused by the access lists");
        KL_COUNT(s->st.acl_refused);
        kl_conn_answer_error(c, req->hdr.id, KL_E_KEY_NOT_FOUND, rid, hex);
        return KL_E_KEY_NOT_FOUND;
    }
    kl_srv_rjob *rj = calloc(1, sizeof *rj);
    if (!rj) {
        kl_conn_answer_error(c, req->hdr.id, KL_E_INTERNAL, rid,
                             "out of memory forwarding");
        return KL_E_INTERNAL;
    }
    rj->job.kind = KL_JOB_ROUTED; /* its key is elsewhere: job.key NULL */
    rj->job.owner = s;
    rj->job.opcode = req->opcode;
    rj->conn = c;
    rj->sealed = sealed_policy != NULL;
    rj->id = req->hdr.id;
    rj->t0_ns = t0_ns;
    rj->sent_ns = t0_ns ? kl_now_ns() : 0;
    if (rid)
        snprintf(rj->request_id, sizeof rj->request_id, "%s", rid);
    rj->next = c->routed;
    if (c->routed)
        c->routed->prev = rj;
    c->routed = rj;
    c->inflight++;
    atomic_fetch_add(&srv->inflight, 1);
    /* The router copies the request (SKI, payload, compliance region, span
     * context, request context with hops + 1): the input buffer may move
     * on. done never runs inside this call. */
    kl_route_req rr = {req, ctx, false, sealed_policy};
    /* a traced request goes upstream with our binary span
     * context naming its route span; the router rewrites it per attempt */
    kl_request traced;
    uint8_t sc[KL_SPANCTX_BINARY_LEN];
    if (s->obs.tr && rt->ref.sampled) { /* rj->trace stays zero otherwise */
        rj->trace = rt->ref;
        rj->route_span = kl_trace_ring_new_id(s->obs.tr);
        kl_spanctx_write_binary(sc, rj->trace.trace_id, rj->route_span,
                                rj->trace.span_id, KL_TRACE_FLAG_SAMPLED);
        traced = *req;
        traced.span_context = (kl_slice){sc, sizeof sc};
        rr.req = &traced;
        rr.traced = true;
    }
    if (kl_router_route(srv->o.router, &rr, rjob_done, rj, &rj->h) != KL_OK) {
        unlink_rjob(rj);
        c->inflight--;
        atomic_fetch_sub(&srv->inflight, 1);
        free(rj);
        kl_conn_answer_error(c, req->hdr.id, KL_E_INTERNAL, rid,
                             "out of memory forwarding");
        return KL_E_INTERNAL;
    }
    return KL_OK;
}

/* The log line's detail for a forwarded request answered with an error
 * (the router's outcomes, router.h; the error itself is logged and
 * counted by its P6 name). */
static const char *routed_why(kl_status err, bool sealed)
{
    if (sealed && err == KL_E_KEY_NOT_FOUND)
        return "forwarding: a sealed key held elsewhere that no remote "
               "took (none satisfies its policy, or each asked had no such "
               "key)";
    switch ((int)err) { /* named P6 statuses: core/status.h */
    case KL_E_REMOTE_CONFIG:
        return "forwarding: no route could serve it (region policy, hop "
               "limit, or every remote tried failed)";
    case KL_E_KEY_NOT_FOUND:
        return "forwarding: no remote key server knows the key";
    case KL_E_INTERNAL: return "forwarding: deadline passed, shed or cancelled";
    default: return "forwarded: the remote key server's answer";
    }
}

void kl_routed_complete(kl_shard *s, kl_job *j)
{
    kl_srv_rjob *rj = (kl_srv_rjob *)j;
    kl_conn *c = rj->conn;
    unlink_rjob(rj);
    c->inflight--;
    atomic_fetch_sub(&s->srv->inflight, 1);
    kl_status err = j->err;
    /* exec: the remote path, from the hand-over to the router's answer */
    kl_mx_request_done(s, j->opcode, err, rj->t0_ns,
                       rj->done_ns > rj->sent_ns ? rj->done_ns - rj->sent_ns
                                                 : 0);
    if (rj->trace.sampled)
        kl_tr_routed_spans(s, c, &rj->trace, rj->route_span, j->opcode, err,
                           rj->t0_ns, rj->sent_ns, rj->done_ns, rj->request_id);
    if (c->state != KL_CONN_CLOSED) {
        const char *rid = rj->request_id[0] ? rj->request_id : NULL;
        if (err != KL_OK) {
            kl_conn_answer_error(c, rj->id, err, rid,
                                 routed_why(err, rj->sealed));
        } else if (kl_outbuf_response(&c->out, rj->id, KL_OP_RESPONSE, j->out,
                                      j->out_len) != KL_OK) {
            kl_conn_answer_error(c, rj->id, KL_E_INTERNAL, rid,
                                 "remote response does not fit");
        } else {
            KL_COUNT(s->st.responses);
            kl_shard_mark_dirty(s, c);
        }
        if (c->state != KL_CONN_CLOSED)
            kl_conn_update_interest(c);
    }
    free(j->out);
    free(rj);
}

void kl_routed_discard(kl_job *j)
{
    kl_srv_rjob *rj = (kl_srv_rjob *)j;
    unlink_rjob(rj);
    rj->conn->inflight--;
    free(j->out);
    free(rj);
}

void kl_routed_cancel_all(kl_conn *c)
{
    if (!c->routed)
        return;
    kl_shard *s = c->shard;
    size_t n = 0;
    pthread_mutex_lock(&s->done.mu);
    for (kl_srv_rjob *rj = c->routed; rj; rj = rj->next)
        if (!rj->finished) {
            kl_router_cancel(s->srv->o.router, &rj->h);
            n++;
        }
    pthread_mutex_unlock(&s->done.mu);
    if (n)
        kl_debug("connection %s (client %s): closed with %zu forwarded "
                 "request(s) in flight; cancelled",
                 c->addr, kl_conn_peer_label(c), n);
}
