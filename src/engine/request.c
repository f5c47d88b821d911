/* SPDX-License-Identifier: Apache-2.0 */
/* Requests and their answers (protocol P2, P3, P4, P6, P9): dispatch,
 * key lookup, jobs for the worker pool, and encoding what comes back. Runs
 * on the connection's shard thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/time.h"
#include "crypto/ops.h"
#include "engine/acl.h"
#include "engine/dispatch.h"
#include "engine/internal.h"

#define ERROR_LINES_PER_SEC 10u

/* Error responses are logged one line each - with the client's certificate
 * name and the request id of tag 0x16 (protocol P3, P9) - at most
 * ERROR_LINES_PER_SEC per shard and second: a client that sends garbage in
 * a loop must not fill the disk. What was left out is counted in the next
 * line logged. Successful requests log nothing above debug. */
static bool may_log(kl_shard *s, uint32_t *suppressed)
{
    uint64_t now = kl_loop_now(s->ev.loop);
    *suppressed = 0;
    if (now - s->logs.window_ns >= KL_NS_PER_S) {
        *suppressed = s->logs.suppressed;
        s->logs.window_ns = now;
        s->logs.lines = 0;
        s->logs.suppressed = 0;
    }
    if (s->logs.lines < ERROR_LINES_PER_SEC) {
        s->logs.lines++;
        return true;
    }
    s->logs.suppressed++;
    return false;
}

static void answer_error(kl_conn *c, uint32_t id, kl_status err,
                         const char *request_id, const char *detail)
{
    kl_shard *s = c->shard;
    KL_COUNT(s->st.errors);
    /* The server's own failures are warnings; what the client asked wrong
     * (unknown key, bad format) is information. */
    int level =
        err == KL_E_INTERNAL || err == KL_E_CRYPTO ? KL_LOG_WARN : KL_LOG_INFO;
    uint32_t left_out = 0;
    if (kl_log_get_level() <= level && may_log(s, &left_out)) {
        /* the id is the client's text: no control characters in our log */
        char rid[80];
        if (request_id) {
            snprintf(rid, sizeof rid, "%s", request_id);
            for (char *p = rid; *p; p++)
                if ((unsigned char)*p < 0x20 || *p == 0x7f)
                    *p = '?';
            request_id = rid;
        }
        char more[64] = "";
        if (left_out)
            snprintf(more, sizeof more, " (and %u error responses not logged)",
                     left_out);
        /* log_format json: the same line with its fields */
        kl_log_fields f = {.request_id = request_id,
                           .client = kl_conn_peer_label(c),
                           .connection = c->addr,
                           .error = kl_status_label(err),
                           .duration_ms = -1};
        kl_logf(level, &f,
                "connection %s (client %s): request %u%s%s%s: %s%s%s%s",
                c->addr, kl_conn_peer_label(c), id,
                request_id ? " (request_id " : "", request_id ? request_id : "",
                request_id ? ")" : "", kl_status_label(err), detail ? ": " : "",
                detail ? detail : "", more);
    }
    if (kl_outbuf_error(&c->out, id, err) != KL_OK) {
        kl_conn_close_with(c, KL_LOG_ERROR, "closed",
                           "out of memory for a response");
        return;
    }
    KL_COUNT(s->st.responses);
    kl_shard_mark_dirty(s, c);
}

void kl_conn_answer_error(kl_conn *c, uint32_t id, kl_status err,
                          const char *request_id, const char *detail)
{
    answer_error(c, id, err, request_id, detail);
}

void kl_conn_complete(kl_conn *c, kl_srv_job *j)
{
    kl_shard *s = c->shard;
    c->inflight--;
    atomic_fetch_sub(&s->srv->inflight, 1);
    kl_shard_held_release(s, j->held); /* freed by the caller */
    kl_mx_job_complete(s, j);
    if (c->state == KL_CONN_CLOSED)
        return; /* nobody to answer; the shard frees c when inflight is 0 */
    if (j->job.err != KL_OK) {
        /* Shed means never run: the deadline passed (or the client left)
         * before the crypto began. A job that ran and failed internally,
         * or that an accelerator still held at its deadline, is an error
         * answer, not a shed (docs/METRICS.md). */
        if (j->job.err == KL_E_INTERNAL && !j->job.started_ns) {
            KL_COUNT(s->st.shed);
            kl_metrics_shed(s->obs.mx, KL_SHED_DEADLINE);
        }
        answer_error(c, j->id, j->job.err, j->request_id,
                     kl_op_name(j->job.opcode));
    } else if (kl_outbuf_response(&c->out, j->id, KL_OP_RESPONSE, j->job.out,
                                  j->job.out_len) != KL_OK) {
        answer_error(c, j->id, KL_E_INTERNAL, j->request_id,
                     "response does not fit");
    } else {
        KL_COUNT(s->st.responses);
        kl_shard_mark_dirty(s, c);
    }
    if (c->state != KL_CONN_CLOSED)
        kl_conn_update_interest(c);
}

/* The pool's watchdog may answer a token job at its deadline while the
 * token call still runs on the key (crypto/pool.h): the job's pin then goes
 * with the answer, so the pool takes its own reference on the store. Runs
 * on the watchdog thread while the job's pin still holds the store. */
static void *job_key_hold(const kl_job *job)
{
    const kl_srv_job *j = (const kl_srv_job *)job;
    return kl_res_ref(j->pin->res);
}

static void job_key_unhold(void *handle)
{
    kl_res_release(handle);
}

/* Fast-class work runs on the shard itself when the turn's inline budget
 * allows (docs/DESIGN.md "Inline fast operations"): the hand-off
 * to a worker and back costs more CPU than an ECDSA signature. */
static bool run_inline(const kl_shard *s, const kl_srv_job *j)
{
    return kl_crypto_cost_class(j->job.key) == KL_COST_FAST &&
           kl_shard_may_inline(s);
}

/* KL_OK: the job path answers it - later through the completion queue, or
 * already, inline - and does its metrics; else the status it was answered
 * with at once (shed, out of memory). */
static kl_status submit(kl_conn *c, const kl_request *req, const kl_key *key,
                        const kl_req_context *ctx, const kl_req_trace *rt,
                        uint64_t t0_ns)
{
    kl_shard *s = c->shard;
    kl_server *srv = s->srv;
    uint32_t id = req->hdr.id;
    const char *rid = ctx && ctx->request_id[0] ? ctx->request_id : NULL;
    size_t plen = req->payload.len, outcap = kl_crypto_max_output(key);
    size_t ridlen = rid ? strlen(rid) + 1 : 0;
    kl_srv_job *j = kl_shard_job_new(s, sizeof *j + plen + outcap + ridlen);
    if (!j) {
        answer_error(c, id, KL_E_INTERNAL, rid, "out of memory");
        return KL_E_INTERNAL;
    }
    memset(&j->job, 0, sizeof j->job);
    j->job.kind = KL_JOB_KEY_OP;
    if (plen)
        memcpy(j->data, req->payload.ptr, plen);
    j->job.key = key;
    j->job.opcode = req->opcode;
    j->job.in = j->data;
    j->job.in_len = plen;
    j->job.out = j->data + plen;
    j->job.out_cap = outcap;
    j->job.owner = s;
    j->conn = c;
    j->pin = kl_pin_get(s); /* the store key lives in stays until done */
    j->job.key_hold = job_key_hold;
    j->job.key_unhold = job_key_unhold;
    j->id = id;
    j->request_id = NULL;
    if (rid) {
        memcpy(j->data + plen + outcap, rid, ridlen);
        j->request_id = (const char *)(j->data + plen + outcap);
    }
    /* P9 deadline_ms, and the configured cap on queueing time: past
     * either, the pool answers `internal error` without doing the work. */
    uint64_t now = kl_loop_now(s->ev.loop), deadline = 0;
    if (ctx && ctx->has_deadline)
        deadline = now + kl_ms_to_ns((uint64_t)ctx->deadline_ms);
    if (srv->o.max_queue_time_ns &&
        (!deadline || now + srv->o.max_queue_time_ns < deadline))
        deadline = now + srv->o.max_queue_time_ns;
    j->job.deadline_ns = deadline;
    j->job.done = kl_shard_job_done;
    j->job.abandoned = &c->gone; /* c lives until this job came back */
    j->t0_ns = t0_ns;
    j->start_ns = j->done_ns = 0;
    if (s->obs.mx)
        j->job.done = kl_mx_job_done; /* notes when it ran */
    kl_tr_job_attach(s, rt, j);
    /* admission control (P6 shedding): a request that the queue
     * ahead of it would keep past its deadline gets its error now, before
     * it costs a queue slot and a worker's wake-up. One run inline waits in
     * no queue (its deadline is still checked when it runs). */
    /* a key of a provider that pauses jobs: on this shard, no queue */
    bool async = kl_crypto_is_async(key);
    bool here = !async && run_inline(s, j);
    if (deadline && !here && !async &&
        now + kl_pool_wait_estimate(srv->o.pool, kl_crypto_cost_class(key)) >
            deadline) {
        kl_pin_put(s, j->pin);
        kl_shard_job_free(s, j);
        KL_COUNT(s->st.shed);
        kl_metrics_shed(s->obs.mx, KL_SHED_DEADLINE);
        answer_error(c, id, KL_E_INTERNAL, rid,
                     "would miss its deadline in the queue");
        return KL_E_INTERNAL;
    }

    c->inflight++;
    atomic_fetch_add(&srv->inflight, 1);
    j->held = sizeof *j + plen + outcap + ridlen;
    s->budget.held += j->held;
    if (here) {
        /* no queue: wait 0, exec = the crypto (metrics); the
         * pool's rules still apply (P6: past its deadline, no crypto) */
        kl_pool_run_here(srv->o.pool, &j->job);
        if (j->t0_ns) {
            j->start_ns = j->t0_ns;
            j->done_ns = kl_now_ns();
        }
        s->budget.inlined++;
        kl_shard_finish_job(s, j);
        return KL_OK;
    }
    if (async) {
        kl_async_result r = kl_shard_async_run(s, j);
        if (r == KL_ASYNC_DONE) {
            if (j->t0_ns) {
                j->start_ns = j->t0_ns;
                j->done_ns = kl_now_ns();
            }
            kl_shard_finish_job(s, j);
        }
        if (r != KL_ASYNC_FULL)
            return KL_OK;
        /* every slot busy: a blocking worker waits for the device */
    }
    s->budget.pooled++;
    if (kl_pool_submit(srv->o.pool, &j->job) != KL_OK) {
        /* P6 shedding: the class queue is full; answer fast. */
        c->inflight--;
        atomic_fetch_sub(&srv->inflight, 1);
        kl_shard_held_release(s, j->held);
        kl_pin_put(s, j->pin);
        kl_shard_job_free(s, j);
        KL_COUNT(s->st.shed);
        kl_metrics_shed(s->obs.mx, KL_SHED_QUEUE_FULL);
        answer_error(c, id, KL_E_INTERNAL, rid, "work queue full");
        return KL_E_INTERNAL;
    }
    return KL_OK;
}

/* The status of the answer given at once (KL_OK for a pong), with *later
 * false; *later true when a job or the router answers it and does its
 * metrics. *parsed: the request parsed (and was counted by opcode,
 * *opcode). */
static kl_status handle(kl_conn *c, const kl_header *hdr, const uint8_t *body,
                        size_t len, uint64_t t0_ns, kl_req_trace *rt,
                        bool *parsed, uint8_t *opcode, bool *later)
{
    kl_shard *s = c->shard;
    c->last_req_ns = kl_loop_now(s->ev.loop);
    /* P2: versions are not checked; count and note the first. */
    if (hdr->major != KL_VERSION_MAJOR) {
        KL_COUNT(s->st.version_mismatch);
        if (!c->logged_version) {
            c->logged_version = true;
            kl_debug("connection %s (client %s): request with version %u.%u "
                     "served as 1.0",
                     c->addr, kl_conn_peer_label(c), hdr->major, hdr->minor);
        }
    }
    kl_request req;
    kl_status st = kl_request_parse(body, len, &req);
    *parsed = st == KL_OK;
    *opcode = KL_OP_NONE;
    if (st == KL_OK) {
        req.hdr = *hdr;
        *opcode = req.opcode;
        kl_mx_request_read(s, req.opcode); /* keyless_requests{opcode} */
    }
    kl_req_context ctx, *pctx = NULL;
    if (st == KL_OK && req.stray_bytes)
        KL_COUNT(s->st.stray_bytes);
    /* Tag 0x16 is parsed only when present: most requests lack it. */
    if (st == KL_OK && req.req_context.ptr) {
        if (kl_dispatch_context(req.req_context.ptr, req.req_context.len,
                                &ctx) == KL_OK)
            pctx = &ctx;
        else
            kl_debug("connection %s: request %u: request context is not a "
                     "JSON object; ignored",
                     c->addr, hdr->id);
    }
    const char *rid = pctx && pctx->request_id[0] ? pctx->request_id : NULL;
    if (st == KL_OK) /* tag 0x15, sampling */
        kl_tr_request_read(c, rt, &req, pctx, t0_ns);
    kl_disp d = kl_dispatch_decide(st, &req);
    *later = false;
    switch (d.kind) {
    case KL_DISP_ERROR:
        answer_error(c, hdr->id, d.err, rid,
                     st != KL_OK ? kl_status_str(st) : kl_op_name(req.opcode));
        return d.err;
    case KL_DISP_PONG:
        if (kl_outbuf_response(&c->out, hdr->id, KL_OP_PONG, req.payload.ptr,
                               req.payload.len) != KL_OK) {
            answer_error(c, hdr->id, KL_E_INTERNAL, rid, "pong too large");
            return KL_E_INTERNAL;
        }
        KL_COUNT(s->st.responses);
        kl_shard_mark_dirty(s, c);
        return KL_OK;
    case KL_DISP_KEY_OP: {
        kl_shard_sync(s); /* a reload may have replaced the store */
        uint64_t tk = kl_mx_now(s);
        const kl_key *key = kl_keystore_find(kl_shard_keys(s), req.ski);
        /* keyless_key_load_duration, and the key-lookup span */
        kl_mx_key_lookup(s, rt, tk, req.ski, key != NULL);
        /* a key held elsewhere is forwarded (routed.c): one the table
         * routes, or a sealed key for other servers, which goes to a
         * remote its policy admits (docs/SEALING.md) */
        const char *sealed = NULL;
        if (!key && s->srv->o.router &&
            (kl_router_has_key(s->srv->o.router, req.ski) ||
             (sealed =
                  kl_keystore_held_elsewhere(kl_shard_keys(s), req.ski)))) {
            kl_status err = kl_routed_submit(c, &req, pctx, rt, t0_ns, sealed);
            *later = err == KL_OK;
            return err;
        }
        if (!key && !s->srv->o.router &&
            kl_keystore_held_elsewhere(kl_shard_keys(s), req.ski))
            KL_COUNT(s->st.sealed_unroutable); /* nowhere to forward */
        /* a key the access lists refuse this client is answered
         * as if it did not exist (acl.h); the log line says why. */
        bool refused =
            key && !kl_acl_allows(s->srv->o.acl, &c->acl, c->tls, key);
        if (!key || refused) {
            char hex[2 * KL_SKI_LEN + 1 + 40];
            kl_ski_hex(req.ski, hex);
            if (refused) {
                KL_COUNT(s->st.acl_refused);
                strcat(hex, ": refused by the access lists");
            }
            answer_error(c, hdr->id, KL_E_KEY_NOT_FOUND, rid, hex);
            return KL_E_KEY_NOT_FOUND;
        }
        /* not submitted: answered at once (shed, out of memory) */
        kl_status err = submit(c, &req, key, pctx, rt, t0_ns);
        *later = err == KL_OK;
        return err;
    }
    }
    return KL_E_INTERNAL;
}

void kl_conn_handle_request(kl_conn *c, const kl_header *hdr,
                            const uint8_t *body, size_t len)
{
    kl_shard *s = c->shard;
    KL_COUNT(s->st.requests);
    uint64_t t0 = kl_mx_now(s); /* 0: metrics off */
    bool parsed;
    uint8_t opcode;
    kl_req_trace rt; /* the request's trace state (kl_tr_request_read) */
    rt.ref.sampled = false;
    bool later;
    kl_status err =
        handle(c, hdr, body, len, t0, &rt, &parsed, &opcode, &later);
    if (later)
        return; /* its job or the router ends the metrics and the span */
    /* answered at once: exec = total */
    if (parsed)
        kl_mx_request_done(s, opcode, err, t0, UINT64_MAX);
    kl_tr_request_end(c, &rt, err);
}
