/* SPDX-License-Identifier: Apache-2.0 */
#include "engine/outbuf.h"

#include <stdlib.h>
#include <string.h>

#include "keyless/protocol.h"

/* Kept across turns; anything larger is released when the buffer drains,
 * so a burst does not pin memory on an idle connection. */
#define KEEP_CAP (16u * 1024u)

void kl_outbuf_free(kl_outbuf *o)
{
    free(o->buf);
    kl_outbuf_init(o);
}

void kl_outbuf_consume(kl_outbuf *o, size_t n)
{
    o->off += n;
    if (o->off < o->len)
        return;
    o->off = o->len = 0;
    if (o->cap > KEEP_CAP) {
        free(o->buf);
        o->buf = NULL;
        o->cap = 0;
    }
}

/* Makes room for n more bytes at the end. */
static kl_status reserve(kl_outbuf *o, size_t n)
{
    if (o->cap - o->len >= n)
        return KL_OK;
    /* Sent bytes at the front are dead space: slide the unsent ones down
     * first when that is enough and worth it. */
    size_t pending = o->len - o->off;
    if (o->off > 0 && o->cap - pending >= n && o->off >= o->cap / 4) {
        memmove(o->buf, o->buf + o->off, pending);
        o->off = 0;
        o->len = pending;
        return KL_OK;
    }
    size_t cap = o->cap ? o->cap : 4096;
    while (cap - o->len < n)
        cap *= 2;
    uint8_t *b = realloc(o->buf, cap);
    KL_ENSURE(b != NULL, KL_E_NOMEM);
    o->buf = b;
    o->cap = cap;
    return KL_OK;
}

kl_status kl_outbuf_response(kl_outbuf *o, uint32_t id, uint8_t opcode,
                             const uint8_t *payload, size_t plen)
{
    KL_ENSURE(plen <= KL_MAX_RESPONSE_PAYLOAD, KL_E_TOO_LARGE);
    size_t need = kl_response_len(plen), n = 0;
    KL_GUARD(reserve(o, need));
    KL_GUARD(kl_response_encode(o->buf + o->len, o->cap - o->len, id, opcode,
                                payload, plen, &n));
    o->len += n;
    return KL_OK;
}

kl_status kl_outbuf_error(kl_outbuf *o, uint32_t id, kl_status st)
{
    size_t need = kl_response_len(1), n = 0;
    KL_GUARD(reserve(o, need));
    KL_GUARD(kl_error_encode(o->buf + o->len, o->cap - o->len, id,
                             kl_status_to_p6(st), &n));
    o->len += n;
    return KL_OK;
}
