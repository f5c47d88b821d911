/* SPDX-License-Identifier: Apache-2.0 */
/* P5 responses: padding arithmetic, encoding and (client side) parsing.
 * The encoder and parser of the response family live side by side. */
#include "keyless/protocol.h"

#include <string.h>

#include "core/cursor.h"
#include "proto/internal.h"

size_t kl_padded_message_len(size_t body_before_padding)
{
    size_t msg = KL_HEADER_LEN + body_before_padding;

    /* P5: at or past the target, no padding item at all. */
    if (msg >= KL_PAD_TARGET)
        return msg;
    /* Below it, one padding item whose data fills up to the target, with
     * zero data when the item header alone reaches it (1025/1026 bytes). */
    msg += KL_ITEM_HEADER_LEN;
    return msg >= KL_PAD_TARGET ? msg : KL_PAD_TARGET;
}

/* Body bytes of a response before padding: opcode item, then the payload
 * item unless the payload is empty (P5). */
static size_t response_body_len(size_t plen)
{
    return KL_ITEM_HEADER_LEN + 1 + (plen ? KL_ITEM_HEADER_LEN + plen : 0);
}

size_t kl_response_len(size_t plen)
{
    return kl_padded_message_len(response_body_len(plen));
}

kl_status kl_proto_write_padding(kl_writer *w, size_t total)
{
    size_t data;

    if (total == w->len)
        return KL_OK;
    KL_ENSURE(total >= w->len + KL_ITEM_HEADER_LEN, KL_E_INTERNAL);
    data = total - w->len - KL_ITEM_HEADER_LEN;
    KL_GUARD(kl_write_u8(w, KL_TAG_PADDING));
    KL_GUARD(kl_write_u16(w, (uint16_t)data));
    return kl_write_zeros(w, data);
}

kl_status kl_response_encode(uint8_t *out, size_t cap, uint32_t id,
                             uint8_t opcode, const uint8_t *payload,
                             size_t plen, size_t *out_len)
{
    kl_writer w;
    size_t total;

    KL_ENSURE(plen <= KL_MAX_RESPONSE_PAYLOAD, KL_E_TOO_LARGE);
    KL_ENSURE(plen == 0 || payload != NULL, KL_E_BAD_VALUE);
    total = kl_response_len(plen);
    /* Check the whole size first so a failed encode writes nothing. */
    KL_ENSURE(out != NULL && cap >= total, KL_E_TOO_LARGE);

    kl_writer_init(&w, out, cap);
    /* P2: responses always carry version 1.0 and echo the request id. */
    KL_GUARD(kl_write_u8(&w, KL_VERSION_MAJOR));
    KL_GUARD(kl_write_u8(&w, KL_VERSION_MINOR));
    KL_GUARD(kl_write_u16(&w, (uint16_t)(total - KL_HEADER_LEN)));
    KL_GUARD(kl_write_u32(&w, id));
    KL_GUARD(kl_write_u8(&w, KL_TAG_OPCODE));
    KL_GUARD(kl_write_u16(&w, 1));
    KL_GUARD(kl_write_u8(&w, opcode));
    if (plen) {
        KL_GUARD(kl_write_u8(&w, KL_TAG_PAYLOAD));
        KL_GUARD(kl_write_u16(&w, (uint16_t)plen));
        KL_GUARD(kl_write_bytes(&w, payload, plen));
    }
    KL_GUARD(kl_proto_write_padding(&w, total));
    KL_ENSURE(w.len == total, KL_E_INTERNAL);
    *out_len = w.len;
    return KL_OK;
}

kl_status kl_error_encode(uint8_t *out, size_t cap, uint32_t id, uint8_t err,
                          size_t *out_len)
{
    /* P6: an error is opcode 0xFF with the 1-byte code as its payload. */
    return kl_response_encode(out, cap, id, KL_OP_ERROR, &err, 1, out_len);
}

kl_status kl_response_parse(const kl_header *hdr, const uint8_t *body,
                            size_t len, kl_response *resp)
{
    kl_request items;

    memset(resp, 0, sizeof *resp);
    if (hdr) {
        /* The body must be exactly the one the header announced. */
        KL_ENSURE(hdr->length == len, KL_E_BAD_VALUE);
        resp->hdr = *hdr;
    }
    /* Same item rules as requests (P3): any order, unknown tags skipped,
     * duplicates and overruns malformed. */
    memset(&items, 0, sizeof items);
    KL_GUARD(kl_request_parse(body, len, &items));
    KL_ENSURE(items.has_opcode, KL_E_BAD_VALUE);
    /* P5: a response carries one of the three response opcodes. */
    KL_ENSURE(items.opcode == KL_OP_RESPONSE || items.opcode == KL_OP_PONG ||
                  items.opcode == KL_OP_ERROR,
              KL_E_BAD_VALUE);
    resp->opcode = items.opcode;
    resp->payload = items.payload;
    resp->error = KL_ERR_NONE;
    if (items.opcode == KL_OP_ERROR) {
        /* P6: the error code is the whole payload. */
        KL_ENSURE(items.payload.len == 1, KL_E_BAD_VALUE);
        resp->error = items.payload.ptr[0];
    }
    return KL_OK;
}
