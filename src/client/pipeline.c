/* SPDX-License-Identifier: Apache-2.0 */
/* The pure half of a client connection: see pipeline.h. */
#include "client/pipeline.h"

#include <stdlib.h>
#include <string.h>

void kl_pipeline_init(kl_pipeline *p)
{
    memset(p, 0, sizeof *p);
    kl_reqtable_init(&p->reqs);
    p->next_id = 1;
}

void kl_pipeline_free(kl_pipeline *p)
{
    kl_reqtable_free(&p->reqs);
    free(p->out.p);
    free(p->in.p);
    memset(p, 0, sizeof *p);
}

/* Makes room for n more bytes after b->len, first reclaiming consumed
 * bytes at the front when that is enough. */
static kl_status reserve(kl_bytebuf *b, size_t n)
{
    if (b->off == b->len) {
        b->off = b->len = 0;
    }
    if (b->cap - b->len >= n)
        return KL_OK;
    if (b->off && b->cap - (b->len - b->off) >= n) {
        memmove(b->p, b->p + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
        return KL_OK;
    }
    size_t need = b->len - b->off + n;
    size_t ncap = b->cap ? b->cap : 4096;
    while (ncap < need)
        ncap *= 2;
    uint8_t *np = malloc(ncap);
    KL_ENSURE(np != NULL, KL_E_NOMEM);
    if (b->len > b->off)
        memcpy(np, b->p + b->off, b->len - b->off);
    free(b->p);
    b->len -= b->off;
    b->off = 0;
    b->p = np;
    b->cap = ncap;
    return KL_OK;
}

kl_status kl_pipeline_queue(kl_pipeline *p, const kl_request_spec *spec,
                            bool auto_id, uint32_t *id_out, uint64_t now_ns)
{
    kl_request_spec s = *spec;
    size_t n = 0;

    if (auto_id) {
        /* Unique among outstanding ids, so responses match one to one. */
        while (kl_reqtable_contains(&p->reqs, p->next_id))
            p->next_id++;
        s.id = p->next_id++;
    }
    KL_GUARD(reserve(&p->out, KL_MAX_MESSAGE));
    KL_GUARD(kl_request_encode(p->out.p + p->out.len, p->out.cap - p->out.len,
                               &s, &n));
    KL_GUARD(kl_reqtable_add(&p->reqs, s.id, now_ns));
    p->out.len += n;
    if (id_out)
        *id_out = s.id;
    return KL_OK;
}

kl_status kl_pipeline_queue_raw(kl_pipeline *p, const void *bytes, size_t len,
                                uint64_t now_ns)
{
    const uint8_t *b = bytes;
    size_t at = 0;

    KL_ENSURE(len == 0 || bytes != NULL, KL_E_BAD_VALUE);
    KL_GUARD(reserve(&p->out, len));
    /* Each complete frame is a request the server will answer (even a
     * malformed body gets `format error` with its id, protocol P3). */
    while (at < len) {
        kl_header h;
        size_t flen;
        if (kl_frame_peek(b + at, len - at, &h, &flen) != KL_OK)
            break;
        KL_GUARD(kl_reqtable_add(&p->reqs, h.id, now_ns));
        at += flen;
    }
    if (len)
        memcpy(p->out.p + p->out.len, b, len);
    p->out.len += len;
    return KL_OK;
}

const uint8_t *kl_pipeline_out(const kl_pipeline *p, size_t *len)
{
    *len = p->out.len - p->out.off;
    return p->out.p ? p->out.p + p->out.off : NULL;
}

void kl_pipeline_out_done(kl_pipeline *p, size_t n)
{
    if (n > p->out.len - p->out.off)
        n = p->out.len - p->out.off;
    p->out.off += n;
    if (p->out.off == p->out.len)
        p->out.off = p->out.len = 0;
}

kl_status kl_pipeline_in_space(kl_pipeline *p, uint8_t **dst, size_t *cap)
{
    KL_ENSURE(p->in.len - p->in.off < KL_PIPELINE_MAX_UNREAD, KL_E_TOO_LARGE);
    KL_GUARD(reserve(&p->in, KL_PIPELINE_READ_CHUNK));
    *dst = p->in.p + p->in.len;
    *cap = p->in.cap - p->in.len;
    return KL_OK;
}

void kl_pipeline_in_commit(kl_pipeline *p, size_t n)
{
    if (n > p->in.cap - p->in.len)
        n = p->in.cap - p->in.len;
    p->in.len += n;
}

bool kl_pipeline_has_frame(const kl_pipeline *p)
{
    kl_header h;
    size_t flen;
    if (!p->in.p)
        return false;
    return kl_frame_peek(p->in.p + p->in.off, p->in.len - p->in.off, &h,
                         &flen) == KL_OK;
}

void kl_client_result_free(kl_client_result *r)
{
    if (!r)
        return;
    free(r->msg);
    memset(r, 0, sizeof *r);
}

kl_status kl_pipeline_next(kl_pipeline *p, kl_client_result *out,
                           uint64_t now_ns)
{
    for (;;) {
        kl_header h;
        size_t flen;
        if (!p->in.p)
            return KL_E_AGAIN;
        kl_status st = kl_frame_peek(p->in.p + p->in.off, p->in.len - p->in.off,
                                     &h, &flen);
        if (st != KL_OK)
            return st; /* KL_E_AGAIN: the frame is incomplete */

        /* The result owns a copy of the whole message, so the receive
         * buffer can be reused at once. */
        uint8_t *msg = malloc(flen);
        KL_ENSURE(msg != NULL, KL_E_NOMEM);
        memcpy(msg, p->in.p + p->in.off, flen);
        p->in.off += flen;
        if (p->in.off == p->in.len)
            p->in.off = p->in.len = 0;

        uint64_t sent = 0;
        kl_req_match m = kl_reqtable_complete(&p->reqs, h.id, &sent);
        kl_response resp;
        st = kl_response_parse(&h, msg + KL_HEADER_LEN, flen - KL_HEADER_LEN,
                               &resp);
        if (st != KL_OK) {
            free(msg);
            return KL_E_BAD_VALUE;
        }
        if (m == KL_REQ_CANCELLED) {
            free(msg);
            continue;
        }
        memset(out, 0, sizeof *out);
        out->id = h.id;
        out->opcode = resp.opcode;
        out->error = resp.error;
        out->payload = resp.payload.len ? resp.payload.ptr : NULL;
        out->payload_len = resp.payload.len;
        out->msg = msg;
        out->msg_len = flen;
        out->tracked = m == KL_REQ_MATCHED;
        out->rtt_ns =
            (m == KL_REQ_MATCHED && now_ns > sent) ? now_ns - sent : 0;
        return KL_OK;
    }
}
