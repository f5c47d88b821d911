/* SPDX-License-Identifier: Apache-2.0 */
/* A connection's output buffer: encoded responses accumulate here during a
 * loop turn and leave together in one TLS write (protocol P8: coalesce, never
 * header and body apart). The unsent bytes always start at data(); the
 * buffer may move or be compacted between write attempts, which the TLS layer
 * allows (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER), as long as it only grows. */
#ifndef KL_ENGINE_OUTBUF_H
#define KL_ENGINE_OUTBUF_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct kl_outbuf {
    uint8_t *buf;
    size_t off; /* first unsent byte */
    size_t len; /* end of the data */
    size_t cap;
} kl_outbuf;

static inline void kl_outbuf_init(kl_outbuf *o)
{
    o->buf = NULL;
    o->off = o->len = o->cap = 0;
}
void kl_outbuf_free(kl_outbuf *o);

static inline const uint8_t *kl_outbuf_data(const kl_outbuf *o)
{
    return o->buf + o->off;
}
static inline size_t kl_outbuf_pending(const kl_outbuf *o)
{
    return o->len - o->off;
}
/* n bytes were written. Releases a large buffer once it is empty. */
void kl_outbuf_consume(kl_outbuf *o, size_t n);

/* Appends a whole response message (P5, padding included). */
KL_WUR kl_status kl_outbuf_response(kl_outbuf *o, uint32_t id, uint8_t opcode,
                                    const uint8_t *payload, size_t plen);
/* Appends the error response (P6) that answers st: the one place the
 * server turns a status into its wire code (docs/DESIGN.md "Errors"). */
KL_WUR kl_status kl_outbuf_error(kl_outbuf *o, uint32_t id, kl_status st);

#endif
