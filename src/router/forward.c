/* SPDX-License-Identifier: Apache-2.0 */
/* The request a router sends upstream (protocol P9): everything
 * the client sent - SKI, opcode, payload, compliance region, span context
 * (tag 0x15, raw), the logging items and the request context's other
 * members - with hops raised by one. deadline_ms is left to libkeyless,
 * which writes the budget left at the moment the request leaves. */
#include <string.h>

#include "router/router_int.h"

static size_t str_size(kl_slice s)
{
    return s.ptr ? s.len + 1 : 0;
}

size_t kl_rt_forward_size(const kl_request *req)
{
    return req->payload.len + req->supplemental.len + KL_SKI_LEN +
           KL_DIGEST_LEN + req->client_ip.len + req->server_ip.len +
           str_size(req->sni) + str_size(req->cert_id) +
           str_size(req->custom_func) + req->span_context.len;
}

/* Copies n bytes to *at; returns where they went (NULL for an absent
 * item). */
static const uint8_t *put(uint8_t **at, const uint8_t *p, size_t n)
{
    if (!p)
        return NULL;
    uint8_t *dst = *at;
    if (n)
        memcpy(dst, p, n);
    *at += n;
    return dst;
}

/* A string item (no NUL on the wire) as a C string; a NUL inside it
 * would cut it short, so such an item is dropped rather than altered. */
static const char *put_str(uint8_t **at, kl_slice s)
{
    if (!s.ptr || memchr(s.ptr, 0, s.len))
        return NULL;
    char *dst = (char *)*at;
    memcpy(dst, s.ptr, s.len);
    dst[s.len] = 0;
    *at += s.len + 1;
    return dst;
}

/* Fills spec with copies in buf (kl_rt_forward_size(req) bytes). */
kl_status kl_rt_forward_fill(const kl_request *req, const kl_req_context *ctx,
                             kl_request_spec *spec, uint8_t *buf,
                             char *ctx_json, size_t cap)
{
    uint8_t *at = buf;
    memset(spec, 0, sizeof *spec);
    spec->opcode = req->opcode;
    spec->payload = put(&at, req->payload.ptr, req->payload.len);
    spec->payload_len = spec->payload ? req->payload.len : 0;
    spec->supplemental = put(&at, req->supplemental.ptr, req->supplemental.len);
    spec->supplemental_len = req->supplemental.ptr ? req->supplemental.len : 0;
    spec->ski = req->has_ski ? put(&at, req->ski, KL_SKI_LEN) : NULL;
    spec->digest =
        req->has_digest ? put(&at, req->digest, KL_DIGEST_LEN) : NULL;
    spec->client_ip = put(&at, req->client_ip.ptr, req->client_ip.len);
    spec->client_ip_len = spec->client_ip ? req->client_ip.len : 0;
    spec->server_ip = put(&at, req->server_ip.ptr, req->server_ip.len);
    spec->server_ip_len = spec->server_ip ? req->server_ip.len : 0;
    spec->sni = put_str(&at, req->sni);
    spec->cert_id = put_str(&at, req->cert_id);
    spec->custom_func = put_str(&at, req->custom_func);
    spec->span_context = put(&at, req->span_context.ptr, req->span_context.len);
    spec->span_context_len = spec->span_context ? req->span_context.len : 0;
    spec->has_compliance = req->has_compliance;
    spec->compliance = req->compliance;
    /* protocol P9: one more router passed */
    kl_req_context c;
    if (ctx)
        c = *ctx;
    else
        memset(&c, 0, sizeof c);
    c.hops = c.has_hops ? c.hops + 1 : 1;
    c.has_hops = true;
    c.has_deadline = false; /* libkeyless writes the budget left */
    KL_GUARD(kl_req_context_format(ctx_json, cap, &c));
    spec->req_context = ctx_json;
    return KL_OK;
}

kl_status kl_router_forward_spec(const kl_request *req,
                                 const kl_req_context *ctx,
                                 kl_request_spec *spec, char *ctx_json,
                                 size_t cap)
{
    /* for tests: the copies live in a per-thread buffer, valid until the
     * next call on this thread */
    static __thread uint8_t scratch[KL_MAX_MESSAGE];
    if (kl_rt_forward_size(req) > sizeof scratch)
        return KL_E_TOO_LARGE;
    return kl_rt_forward_fill(req, ctx, spec, scratch, ctx_json, cap);
}
