/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the wire codec (protocol P2, P3, P5): splits the
 * input into frames, parses every body as a request and as a response,
 * re-encodes what parsed and checks the codec's invariants, aborting on the
 * first one that breaks. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "keyless/protocol.h"

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            abort();                                                           \
    } while (0)

static uint8_t g_out[KL_MAX_MESSAGE];

static bool in_body(kl_slice s, const uint8_t *body, size_t len)
{
    if (!s.ptr)
        return s.len == 0;
    return s.ptr >= body && s.len <= len &&
           (size_t)(s.ptr - body) <= len - s.len;
}

static bool is_format_error(kl_status st)
{
    return st == KL_E_ITEM_OVERRUN || st == KL_E_DUP_TAG ||
           st == KL_E_OPCODE_LEN || st == KL_E_COMPLIANCE_LEN ||
           st == KL_E_IP_LEN;
}

static bool has_nul(kl_slice s)
{
    return s.len && memchr(s.ptr, 0, s.len) != NULL;
}

static const char *cstr(kl_slice s, char *buf)
{
    if (!s.ptr)
        return NULL;
    memcpy(buf, s.ptr, s.len);
    buf[s.len] = 0;
    return buf;
}

static bool same_bytes(kl_slice a, kl_slice b)
{
    return a.len == b.len && (a.len == 0 || !memcmp(a.ptr, b.ptr, a.len));
}

/* Re-encodes a parsed request and parses it back: every field survives. */
static void request_round_trip(const kl_request *r)
{
    static char sni[KL_MAX_BODY + 1], cid[KL_MAX_BODY + 1], fn[KL_MAX_BODY + 1],
        rc[KL_MAX_BODY + 1];
    kl_request_spec s;
    kl_request back;
    size_t n = 0;

    /* C strings cannot carry NUL bytes: nothing to compare then. */
    if (has_nul(r->sni) || has_nul(r->cert_id) || has_nul(r->custom_func) ||
        has_nul(r->req_context))
        return;
    memset(&s, 0, sizeof s);
    s.id = r->hdr.id;
    s.opcode = r->opcode;
    s.payload = r->payload.ptr;
    s.payload_len = r->payload.len;
    s.supplemental = r->supplemental.ptr;
    s.supplemental_len = r->supplemental.len;
    s.ski = r->has_ski ? r->ski : NULL;
    s.digest = r->has_digest ? r->digest : NULL;
    s.client_ip = r->client_ip.ptr;
    s.client_ip_len = r->client_ip.len;
    s.server_ip = r->server_ip.ptr;
    s.server_ip_len = r->server_ip.len;
    s.sni = cstr(r->sni, sni);
    s.cert_id = cstr(r->cert_id, cid);
    s.custom_func = cstr(r->custom_func, fn);
    s.span_context = r->span_context.ptr;
    s.span_context_len = r->span_context.len;
    s.req_context = cstr(r->req_context, rc);
    s.has_compliance = r->has_compliance;
    s.compliance = r->compliance;
    /* A subset of the original's items, plus padding only when small: it
     * always fits. */
    CHECK(kl_request_encode(g_out, sizeof g_out, &s, &n) == KL_OK);
    CHECK(n >= KL_PAD_TARGET); /* requests are padded like responses */
    CHECK(kl_request_parse(g_out + KL_HEADER_LEN, n - KL_HEADER_LEN, &back) ==
          KL_OK);
    CHECK(back.opcode == r->opcode && back.has_opcode);
    CHECK(same_bytes(back.payload, r->payload));
    CHECK(same_bytes(back.supplemental, r->supplemental));
    CHECK(back.has_ski == r->has_ski);
    CHECK(!r->has_ski || !memcmp(back.ski, r->ski, KL_SKI_LEN));
    CHECK(back.has_digest == r->has_digest);
    CHECK(!r->has_digest || !memcmp(back.digest, r->digest, KL_DIGEST_LEN));
    CHECK(same_bytes(back.client_ip, r->client_ip));
    CHECK(same_bytes(back.server_ip, r->server_ip));
    CHECK(same_bytes(back.sni, r->sni));
    CHECK(same_bytes(back.cert_id, r->cert_id));
    CHECK(same_bytes(back.custom_func, r->custom_func));
    CHECK(same_bytes(back.span_context, r->span_context));
    CHECK(same_bytes(back.req_context, r->req_context));
    CHECK(back.has_compliance == r->has_compliance);
    CHECK(back.compliance == r->compliance);
    CHECK(back.unknown_items == 0 && back.stray_bytes == 0);
}

static void check_request(const kl_header *hdr, const uint8_t *body, size_t len)
{
    kl_request r;
    kl_span_context sc;
    kl_req_context rc;
    kl_status st;
    size_t n = 0;

    memset(&r, 0, sizeof r);
    r.hdr = *hdr;
    st = kl_request_parse(body, len, &r);
    if (st != KL_OK) {
        CHECK(is_format_error(st));
        /* keylessd answers `format error` with the request's id. */
        CHECK(kl_error_encode(g_out, sizeof g_out, hdr->id, KL_ERR_FORMAT,
                              &n) == KL_OK);
        CHECK(n == KL_PAD_TARGET);
        return;
    }
    CHECK(r.hdr.id == hdr->id);
    CHECK(r.stray_bytes <= 2);
    CHECK(r.has_opcode || r.opcode == KL_OP_NONE);
    CHECK(!r.client_ip.ptr || r.client_ip.len == 4 || r.client_ip.len == 16);
    CHECK(!r.server_ip.ptr || r.server_ip.len == 4 || r.server_ip.len == 16);
    CHECK(in_body(r.payload, body, len) && in_body(r.sni, body, len) &&
          in_body(r.client_ip, body, len) && in_body(r.server_ip, body, len) &&
          in_body(r.cert_id, body, len) && in_body(r.custom_func, body, len) &&
          in_body(r.supplemental, body, len) &&
          in_body(r.span_context, body, len) &&
          in_body(r.req_context, body, len));
    CHECK(kl_request_ski_valid(&r) <= r.has_ski);
    /* Names are total functions. */
    CHECK(kl_op_name(r.opcode) && kl_op_type(r.opcode));
    CHECK((kl_op_digest_len(r.opcode) != 0) <=
          (kl_op_classify(r.opcode) != KL_OPC_INVALID));
    if (r.span_context.ptr &&
        kl_span_context_parse(r.span_context.ptr, r.span_context.len, &sc) ==
            KL_OK) {
        uint8_t any = 0;
        for (size_t i = 0; i < sizeof sc.trace_id; i++)
            any |= sc.trace_id[i];
        CHECK(any != 0);
    }
    if (r.req_context.ptr &&
        kl_req_context_parse(r.req_context.ptr, r.req_context.len, &rc) ==
            KL_OK)
        CHECK(strlen(rc.request_id) <= KL_REQUEST_ID_MAX);
    request_round_trip(&r);
}

static void check_response(const kl_header *hdr, const uint8_t *body,
                           size_t len, kl_status req_status)
{
    kl_response resp, back;
    kl_header h2;
    kl_status st;
    size_t n = 0, flen = 0;

    st = kl_response_parse(hdr, body, len, &resp);
    /* Same item rules as requests: item errors agree exactly. */
    if (req_status != KL_OK) {
        CHECK(st == req_status);
        return;
    }
    if (st != KL_OK) {
        CHECK(st == KL_E_BAD_VALUE);
        return;
    }
    CHECK(resp.opcode == KL_OP_RESPONSE || resp.opcode == KL_OP_PONG ||
          resp.opcode == KL_OP_ERROR);
    CHECK(resp.opcode != KL_OP_ERROR || resp.payload.len == 1);
    CHECK(in_body(resp.payload, body, len));
    /* Re-encode: length is what kl_response_len promised, and it parses
     * back to the same thing. */
    CHECK(resp.payload.len <= KL_MAX_RESPONSE_PAYLOAD);
    CHECK(kl_response_encode(g_out, sizeof g_out, resp.hdr.id, resp.opcode,
                             resp.payload.ptr, resp.payload.len, &n) == KL_OK);
    CHECK(n == kl_response_len(resp.payload.len));
    CHECK(n >= KL_PAD_TARGET);
    CHECK(kl_frame_peek(g_out, n, &h2, &flen) == KL_OK && flen == n);
    CHECK(h2.major == 1 && h2.minor == 0 && h2.id == hdr->id);
    CHECK(kl_response_parse(&h2, g_out + KL_HEADER_LEN, h2.length, &back) ==
          KL_OK);
    CHECK(back.opcode == resp.opcode && back.error == resp.error);
    CHECK(same_bytes(back.payload, resp.payload));
    /* A cap one byte short fails without writing. */
    CHECK(kl_response_encode(g_out, n - 1, resp.hdr.id, resp.opcode,
                             resp.payload.ptr, resp.payload.len,
                             &flen) == KL_E_TOO_LARGE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;

    while (off < size) {
        kl_header hdr;
        size_t flen = 0;
        kl_request probe;
        kl_status st = kl_frame_peek(data + off, size - off, &hdr, &flen);

        if (st == KL_E_AGAIN) {
            /* Only ever because the frame is incomplete. */
            kl_header h;
            CHECK(size - off < KL_HEADER_LEN ||
                  (kl_header_decode(data + off, size - off, &h) == KL_OK &&
                   size - off < KL_HEADER_LEN + (size_t)h.length));
            break;
        }
        CHECK(st == KL_OK);
        CHECK(flen == KL_HEADER_LEN + (size_t)hdr.length);
        CHECK(flen <= size - off);

        const uint8_t *body = data + off + KL_HEADER_LEN;
        check_request(&hdr, body, hdr.length);
        memset(&probe, 0, sizeof probe);
        check_response(&hdr, body, hdr.length,
                       kl_request_parse(body, hdr.length, &probe));
        off += flen;
    }
    return 0;
}
