/* SPDX-License-Identifier: Apache-2.0 */
/* P3 request body parsing: a walk over TLV items through the bounded cursor.
 * Zero-copy: slices in the kl_request point into the caller's body. */
#include "keyless/protocol.h"

#include <string.h>

#include "core/cursor.h"

/* Bit index of each known tag, for duplicate detection (P3: a known tag that
 * appears twice makes the message malformed). -1 for unknown tags, which are
 * skipped and never count as duplicates. Padding is a known tag too, so two
 * padding items are a duplicate, as in the reference (docs/PROTOCOL.md,
 * "Implementation notes"). */
static int known_tag_bit(uint8_t tag)
{
    switch (tag) {
    case KL_TAG_DIGEST: return 0;
    case KL_TAG_SNI: return 1;
    case KL_TAG_CLIENT_IP: return 2;
    case KL_TAG_SKI: return 3;
    case KL_TAG_SERVER_IP: return 4;
    case KL_TAG_CERT_ID: return 5;
    case KL_TAG_OPCODE: return 6;
    case KL_TAG_PAYLOAD: return 7;
    case KL_TAG_CUSTOM_FUNC: return 8;
    case KL_TAG_SUPPLEMENTAL: return 9;
    case KL_TAG_SPAN_CONTEXT: return 10;
    case KL_TAG_REQ_CONTEXT: return 11;
    case KL_TAG_COMPLIANCE: return 12;
    case KL_TAG_PADDING: return 13;
    default: return -1;
    }
}

static kl_slice slice(const uint8_t *p, size_t n)
{
    kl_slice s = {p, n};
    return s;
}

static kl_status ip_item(kl_slice *dst, const uint8_t *p, size_t n)
{
    /* P3: an IP item is an IPv4 or IPv6 address and nothing else. */
    KL_ENSURE(n == 4 || n == 16, KL_E_IP_LEN);
    *dst = slice(p, n);
    return KL_OK;
}

/* Stores one known item. The caller has already checked for duplicates. */
static kl_status apply_item(kl_request *req, uint8_t tag, const uint8_t *p,
                            size_t n)
{
    switch (tag) {
    case KL_TAG_OPCODE:
        KL_ENSURE(n == 1, KL_E_OPCODE_LEN);
        req->has_opcode = true;
        req->opcode = p[0];
        return KL_OK;
    case KL_TAG_COMPLIANCE:
        KL_ENSURE(n == 1, KL_E_COMPLIANCE_LEN);
        req->has_compliance = true;
        req->compliance = p[0];
        return KL_OK;
    case KL_TAG_CLIENT_IP: return ip_item(&req->client_ip, p, n);
    case KL_TAG_SERVER_IP: return ip_item(&req->server_ip, p, n);
    case KL_TAG_SKI:
        /* P3: an SKI of the wrong length is treated as absent (the key
         * lookup then answers `internal error`, like a missing SKI). */
        if (n == KL_SKI_LEN) {
            memcpy(req->ski, p, KL_SKI_LEN);
            req->has_ski = true;
        }
        return KL_OK;
    case KL_TAG_DIGEST:
        if (n == KL_DIGEST_LEN) {
            memcpy(req->digest, p, KL_DIGEST_LEN);
            req->has_digest = true;
        }
        return KL_OK;
    case KL_TAG_PAYLOAD: req->payload = slice(p, n); return KL_OK;
    case KL_TAG_SNI: req->sni = slice(p, n); return KL_OK;
    case KL_TAG_CERT_ID: req->cert_id = slice(p, n); return KL_OK;
    case KL_TAG_CUSTOM_FUNC: req->custom_func = slice(p, n); return KL_OK;
    case KL_TAG_SUPPLEMENTAL: req->supplemental = slice(p, n); return KL_OK;
    case KL_TAG_SPAN_CONTEXT: req->span_context = slice(p, n); return KL_OK;
    case KL_TAG_REQ_CONTEXT: req->req_context = slice(p, n); return KL_OK;
    case KL_TAG_PADDING: return KL_OK; /* P3: ignored */
    default: return KL_E_INTERNAL;     /* unreachable: tag is known */
    }
}

kl_status kl_request_parse(const uint8_t *body, size_t len, kl_request *req)
{
    kl_header hdr = req->hdr; /* the caller's header survives the reset */
    kl_cursor c;
    uint32_t seen = 0;

    memset(req, 0, sizeof *req);
    req->hdr = hdr;
    req->opcode = KL_OP_NONE; /* P3: a missing opcode means 0x00 */
    kl_cursor_init(&c, body, len);

    /* The reference loops while at least 3 bytes remain (i + 2 < len), so 1
     * or 2 trailing bytes that cannot hold an item header are ignored (P3). */
    while (kl_cursor_left(&c) >= KL_ITEM_HEADER_LEN) {
        uint8_t tag;
        uint16_t ilen;
        const uint8_t *data;
        int bit;

        KL_GUARD(kl_read_u8(&c, &tag));
        KL_GUARD(kl_read_u16(&c, &ilen));
        if (kl_read_bytes(&c, ilen, &data) != KL_OK)
            return KL_E_ITEM_OVERRUN;
        bit = known_tag_bit(tag);
        if (bit < 0) {
            /* P3: unknown tags are skipped - clients keep adding tags. */
            req->unknown_items++;
            continue;
        }
        /* A known tag counts as seen whatever its length, so a second SKI is
         * a duplicate even when the first was ignored for its length. */
        KL_ENSURE(!(seen & (UINT32_C(1) << bit)), KL_E_DUP_TAG);
        seen |= UINT32_C(1) << bit;
        KL_GUARD(apply_item(req, tag, data, ilen));
    }
    req->stray_bytes = (uint8_t)kl_cursor_left(&c);
    return KL_OK;
}

bool kl_request_ski_valid(const kl_request *req)
{
    uint8_t any = 0;

    if (!req->has_ski)
        return false;
    /* P7: an all-zero SKI is invalid. */
    for (size_t i = 0; i < KL_SKI_LEN; i++)
        any |= req->ski[i];
    return any != 0;
}
