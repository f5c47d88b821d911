/* SPDX-License-Identifier: Apache-2.0 */
/* P2 message header and stream framing. */
#include "keyless/protocol.h"

#include "core/cursor.h"

kl_status kl_header_decode(const uint8_t *buf, size_t len, kl_header *out)
{
    kl_cursor c;
    kl_header h;

    /* A short buffer is "not yet", never an error: the stream delivers the
     * rest later (protocol P1: no framing beyond the header). */
    KL_ENSURE(len >= KL_HEADER_LEN, KL_E_AGAIN);
    kl_cursor_init(&c, buf, KL_HEADER_LEN);
    KL_GUARD(kl_read_u8(&c, &h.major));
    KL_GUARD(kl_read_u8(&c, &h.minor));
    KL_GUARD(kl_read_u16(&c, &h.length));
    KL_GUARD(kl_read_u32(&c, &h.id));
    /* Version bytes are reported, not checked: the reference ignores them
     * and a drop-in replacement must answer what it answers (protocol P2). */
    *out = h;
    return KL_OK;
}

kl_status kl_frame_peek(const uint8_t *buf, size_t len, kl_header *hdr,
                        size_t *frame_len)
{
    kl_header h;
    size_t need;

    KL_GUARD(kl_header_decode(buf, len, &h));
    need = KL_HEADER_LEN + (size_t)h.length;
    KL_ENSURE(len >= need, KL_E_AGAIN);
    *hdr = h;
    *frame_len = need;
    return KL_OK;
}
