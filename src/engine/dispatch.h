/* SPDX-License-Identifier: Apache-2.0 */
/* What to do with one request, before any key is touched (protocol P3, P4,
 * P6): a pure function, so the error mapping is unit-tested without a
 * socket. */
#ifndef KL_ENGINE_DISPATCH_H
#define KL_ENGINE_DISPATCH_H

#include "core/status.h"
#include "keyless/protocol.h"

typedef enum kl_disp_kind {
    KL_DISP_ERROR,  /* answer the error response of .err */
    KL_DISP_PONG,   /* answer a pong with the request's payload */
    KL_DISP_KEY_OP, /* look the SKI up; run the operation on a worker */
} kl_disp_kind;

typedef struct kl_disp {
    kl_disp_kind kind;
    kl_status err; /* KL_DISP_ERROR: the P6 answer's status */
} kl_disp;

/* parse_status is kl_request_parse()'s result; req is read only when it is
 * KL_OK. */
kl_disp kl_dispatch_decide(kl_status parse_status, const kl_request *req);

/* Reads a tag-0x16 request context (protocol P3, P9) into out, with the
 * result of kl_req_context_parse. The one form keylessd's own clients send
 * with every request, exactly {"deadline_ms":N}, is read without a JSON
 * parser (jansson was 2% of the server's CPU per ECDSA signature);
 * any other text goes to kl_req_context_parse. */
KL_WUR kl_status kl_dispatch_context(const uint8_t *p, size_t len,
                                     kl_req_context *out);

#endif
