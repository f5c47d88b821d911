/* SPDX-License-Identifier: Apache-2.0 */
/* A target's requests: copied at submit, queued unsent, encoded with the
 * budget left when they are written (protocol P9), expired at their
 * deadline, completed onto the done list, cancelled by their caller. */
#include <stdlib.h>
#include <string.h>

#include "client/target_int.h"
#include "core/time.h"

/* Bytes encoded per batch before writing: many small requests go out in
 * one TLS write, but a flood does not build an unbounded buffer. */
#define BATCH_BYTES (256u << 10)
#define CTX_JSON_MAX 512

/* ---- the unsent queue and the done list ------------------------------- */

static void q_remove(kl_target *t, kl_treq *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        t->qhead = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        t->qtail = r->prev;
    r->prev = r->next = NULL;
    r->queued = false;
    t->queued--;
}

void kl_tgt_q_push(kl_target *t, kl_treq *r, bool front)
{
    r->queued = true;
    r->conn = NULL;
    if (front) {
        r->prev = NULL;
        r->next = t->qhead;
        if (t->qhead)
            t->qhead->prev = r;
        else
            t->qtail = r;
        t->qhead = r;
    } else {
        r->next = NULL;
        r->prev = t->qtail;
        if (t->qtail)
            t->qtail->next = r;
        else
            t->qhead = r;
        t->qtail = r;
    }
    t->queued++;
    if (r->deadline_ns < t->next_check)
        t->next_check = r->deadline_ns;
}

void kl_tgt_complete(kl_target *t, kl_treq *r, kl_status st)
{
    (void)kl_u64map_del(&t->live, r->handle);
    r->res.status = st;
    r->res.handle = r->handle;
    r->res.server = r->server;
    r->res.attempts = r->attempts;
    r->res.elapsed_ns = kl_now_ns() - r->submit_ns;
    if (st == KL_OK)
        t->stats.answered++;
    else if (st == KL_E_TIMEOUT)
        t->stats.timed_out++;
    else
        t->stats.failed++;
    r->next = NULL;
    r->prev = NULL;
    if (t->done_tail)
        t->done_tail->next = r;
    else
        t->done_head = r;
    t->done_tail = r;
}

void kl_tgt_req_free(kl_treq *r)
{
    free(r->resp);
    free(r);
}

void kl_tgt_drop_requests(kl_target *t)
{
    kl_treq *q;
    for (size_t i = 0; (q = kl_u64map_next(&t->live, &i));)
        kl_tgt_req_free(q);
    kl_u64map_free(&t->live);
    for (kl_treq *r = t->done_head, *n; r; r = n) {
        n = r->next;
        kl_tgt_req_free(r);
    }
    t->qhead = t->qtail = t->done_head = t->done_tail = NULL;
    t->queued = 0;
}

void kl_tgt_deliver(kl_treq *list)
{
    for (kl_treq *r = list, *n; r; r = n) {
        n = r->next;
        if (r->cb)
            r->cb(r->arg, &r->res);
        kl_tgt_req_free(r);
    }
}

/* ---- deadlines -------------------------------------------------------- */

/* Drops queued requests whose deadline passed and gives up on in-flight
 * ones (their late answers are discarded by the pipeline). A scan of all
 * requests, done only when the earliest known deadline has come. */
void kl_tgt_expire(kl_target *t, uint64_t now)
{
    if (now < t->next_check)
        return;
    uint64_t next = UINT64_MAX;
    size_t n = 0;
    size_t live = kl_u64map_count(&t->live);
    kl_treq **v = live ? malloc(live * sizeof *v) : NULL;
    kl_treq *q;
    for (size_t i = 0; (q = kl_u64map_next(&t->live, &i));) {
        if (q->deadline_ns <= now) {
            if (v)
                v[n++] = q;
        } else if (q->deadline_ns < next) {
            next = q->deadline_ns;
        }
    }
    if (live && !v) {
        t->next_check = now + KL_NS_PER_MS; /* out of memory: try again soon */
        return;
    }
    for (size_t i = 0; i < n; i++) {
        kl_treq *r = v[i];
        if (r->queued) {
            q_remove(t, r);
            t->stats.expired_unsent++;
        } else if (r->conn) {
            (void)kl_u64map_del(&r->conn->inflight, r->id);
            kl_tgt_drop_answer(r->conn, r->id);
            r->conn = NULL;
        }
        kl_tgt_complete(t, r, KL_E_TIMEOUT);
    }
    free(v);
    t->next_check = next;
}

/* A refused or unreachable server is not waited out to the deadline
 * (docs/PROVIDER.md "Failures, timeouts, fork, fallback"): when no connection
 * is up or on its way, and every server's last attempt failed before it was up,
 * a queued request fails now if all of them failed after it came (each was
 * tried for it) or none may be tried again before its deadline (backoff). Its
 * status is the most recent failure's (KL_E_IO for a refusal), and the
 * target's last error names it. A connection that broke after it was up
 * keeps the old rule: its requests wait for the reconnect. */
void kl_tgt_fail_unreachable(kl_target *t, uint64_t now)
{
    if (!t->qhead || !t->nconns)
        return;
    uint64_t first_fail = UINT64_MAX, next_try = UINT64_MAX, last_fail = 0;
    kl_status st = KL_E_IO;
    for (size_t i = 0; i < t->nconns; i++) {
        const kl_tconn *c = &t->conns[i];
        if (c->st != CS_IDLE || !c->failures || !c->fail_connect)
            return; /* up, on its way, untried, or worth a reconnect */
        if (c->failed_ns < first_fail)
            first_fail = c->failed_ns;
        if (c->retry_at < next_try)
            next_try = c->retry_at;
        if (c->failed_ns >= last_fail) {
            last_fail = c->failed_ns;
            st = c->fail_st;
        }
    }
    if (next_try <= now)
        return; /* one may be tried at once */
    for (kl_treq *r = t->qhead, *n; r; r = n) {
        n = r->next;
        if (r->submit_ns > first_fail && r->deadline_ns > next_try)
            continue;
        q_remove(t, r);
        t->stats.unreachable++;
        kl_tgt_complete(t, r, st);
    }
}

/* ---- writing ----------------------------------------------------------- */

/* Encodes one queued request for c with the budget left now (protocol
 * P9). */
static kl_status encode_req(kl_target *t, kl_tconn *c, kl_treq *r, uint64_t now)
{
    char json[CTX_JSON_MAX];
    kl_req_context ctx = r->ctx;
    kl_request_spec s = r->spec;
    uint64_t left_ms = (r->deadline_ns - now) / KL_NS_PER_MS;
    /* The server must finish before we stop waiting, answer's way back
     * included: keep a tenth of the budget (at most 5 ms) for it, so that
     * work the server does is work a caller receives. */
    uint64_t margin = left_ms / 10 < 5 ? left_ms / 10 : 5;
    left_ms -= margin;
    ctx.has_deadline = true;
    ctx.deadline_ms =
        left_ms ? (left_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)left_ms) : 1;
    KL_GUARD(kl_req_context_format(json, sizeof json, &ctx));
    s.req_context = json;
    uint32_t id;
    KL_GUARD(kl_pipeline_queue(&c->ln.pipe, &s, true, &id, now));
    kl_status st = kl_u64map_put(&c->inflight, id, r);
    if (st != KL_OK) {
        kl_tgt_drop_answer(c, id);
        return st;
    }
    r->id = id;
    r->conn = c;
    r->server = c->idx;
    r->attempts++;
    t->stats.written++;
    return KL_OK;
}

/* As long as everything written before has left (so the deadline in each
 * request is fresh) and c has room in flight. Requests whose deadline
 * passed are dropped unsent. */
void kl_tgt_fill(kl_target *t, kl_tconn *c, uint64_t now)
{
    while (c->st == CS_READY) {
        size_t unsent;
        (void)kl_pipeline_out(&c->ln.pipe, &unsent);
        if (unsent || !t->qhead)
            return;
        size_t batch = 0;
        while (t->qhead && batch < BATCH_BYTES &&
               kl_reqtable_count(&c->ln.pipe.reqs) <
                   (size_t)t->o.max_inflight) {
            kl_treq *r = t->qhead;
            q_remove(t, r);
            if (now >= r->deadline_ns) {
                t->stats.expired_unsent++;
                kl_tgt_complete(t, r, KL_E_TIMEOUT);
                continue;
            }
            kl_status st = encode_req(t, c, r, now);
            if (st != KL_OK) {
                kl_tgt_complete(t, r, st);
                continue;
            }
            batch += KL_PAD_TARGET;
        }
        if (!batch)
            return;
        kl_tgt_conn_write(t, c);
        now = kl_now_ns();
    }
}

/* ---- submit and cancel ------------------------------------------------- */

/* Copies a field into the request's trailing bytes. */
static const void *put(uint8_t **at, const void *p, size_t n)
{
    if (!p)
        return NULL;
    void *dst = *at;
    if (n)
        memcpy(dst, p, n);
    *at += n;
    return dst;
}

static size_t slen(const char *s)
{
    return s ? strlen(s) + 1 : 0;
}

static kl_treq *req_new(const kl_request_spec *s)
{
    size_t extra = s->payload_len + s->supplemental_len +
                   (s->ski ? KL_SKI_LEN : 0) + (s->digest ? KL_DIGEST_LEN : 0) +
                   s->client_ip_len + s->server_ip_len + slen(s->sni) +
                   slen(s->cert_id) + slen(s->custom_func) +
                   s->span_context_len;
    kl_treq *r = calloc(1, sizeof *r + extra);
    if (!r)
        return NULL;
    uint8_t *at = (uint8_t *)(r + 1);
    kl_request_spec *d = &r->spec;
    *d = *s;
    d->id = 0;
    d->req_context = NULL;
    d->payload = put(&at, s->payload, s->payload_len);
    d->supplemental = put(&at, s->supplemental, s->supplemental_len);
    d->ski = put(&at, s->ski, s->ski ? KL_SKI_LEN : 0);
    d->digest = put(&at, s->digest, s->digest ? KL_DIGEST_LEN : 0);
    d->client_ip = put(&at, s->client_ip, s->client_ip_len);
    d->server_ip = put(&at, s->server_ip, s->server_ip_len);
    d->sni = put(&at, s->sni, slen(s->sni));
    d->cert_id = put(&at, s->cert_id, slen(s->cert_id));
    d->custom_func = put(&at, s->custom_func, slen(s->custom_func));
    d->span_context = put(&at, s->span_context, s->span_context_len);
    return r;
}

static kl_status submit(kl_target *t, const kl_request_spec *spec,
                        int timeout_ms, kl_result_cb cb, void *arg,
                        uint64_t *handle, bool wake)
{
    if (handle)
        *handle = 0;
    kl_treq *r = req_new(spec);
    KL_ENSURE(r != NULL, KL_E_NOMEM);
    if (spec->req_context) {
        /* the caller's members (request_id, hops) travel on; deadline_ms
         * is ours to set */
        if (kl_req_context_parse((const uint8_t *)spec->req_context,
                                 strlen(spec->req_context), &r->ctx) != KL_OK) {
            free(r);
            return KL_E_BAD_VALUE;
        }
    }
    r->cb = cb;
    r->arg = arg;
    r->server = -1;
    r->submit_ns = kl_now_ns();
    r->deadline_ns = kl_tgt_after_ms(
        r->submit_ns, timeout_ms > 0 ? timeout_ms : t->o.timeout_ms);

    pthread_mutex_lock(&t->mu);
    kl_tgt_check_fork(t);
    kl_status st = kl_tgt_runtime(t);
    if (st == KL_OK) {
        r->handle = ++t->next_handle;
        st = kl_u64map_put(&t->live, r->handle, r);
    }
    if (st != KL_OK) {
        pthread_mutex_unlock(&t->mu);
        free(r);
        return st;
    }
    t->stats.submitted++;
    kl_budget_request(&t->budget, r->submit_ns);
    kl_tgt_q_push(t, r, false);
    if (handle)
        *handle = r->handle;
    if (wake)
        kl_tgt_wake(t);
    pthread_mutex_unlock(&t->mu);
    return KL_OK;
}

kl_status kl_async_submit(kl_target *t, const kl_request_spec *spec,
                          int timeout_ms, kl_result_cb cb, void *arg,
                          uint64_t *handle)
{
    return submit(t, spec, timeout_ms, cb, arg, handle, true);
}

kl_status kl_tgt_submit_local(kl_target *t, const kl_request_spec *spec,
                              int timeout_ms, kl_result_cb cb, void *arg)
{
    return submit(t, spec, timeout_ms, cb, arg, NULL, false);
}

kl_status kl_async_cancel(kl_target *t, uint64_t handle)
{
    pthread_mutex_lock(&t->mu);
    kl_tgt_check_fork(t);
    kl_treq *r = kl_u64map_del(&t->live, handle);
    if (!r) {
        pthread_mutex_unlock(&t->mu);
        return KL_E_NOT_FOUND;
    }
    if (r->queued) {
        q_remove(t, r); /* never written */
    } else if (r->conn) {
        (void)kl_u64map_del(&r->conn->inflight, r->id);
        kl_tgt_drop_answer(r->conn, r->id);
    }
    t->stats.cancelled++;
    pthread_mutex_unlock(&t->mu);
    kl_tgt_req_free(r);
    return KL_OK;
}
