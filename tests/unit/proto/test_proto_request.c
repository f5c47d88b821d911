/* SPDX-License-Identifier: Apache-2.0 */
/* P2 header and P3 request parsing, with a negative test for every rule, and
 * the request encoder (the client side). */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "keyless/protocol.h"

/* A body under construction, item by item. */
typedef struct body {
    uint8_t b[KL_MAX_MESSAGE];
    size_t len;
} body;

static void item(body *b, uint8_t tag, size_t n, uint8_t fill)
{
    b->b[b->len++] = tag;
    b->b[b->len++] = (uint8_t)(n >> 8);
    b->b[b->len++] = (uint8_t)n;
    memset(b->b + b->len, fill, n);
    b->len += n;
}

static kl_status parse(const body *b, kl_request *req)
{
    memset(req, 0, sizeof *req);
    return kl_request_parse(b->b, b->len, req);
}

/* A valid length for each known tag. */
static size_t valid_len(uint8_t tag)
{
    switch (tag) {
    case KL_TAG_OPCODE:
    case KL_TAG_COMPLIANCE: return 1;
    case KL_TAG_CLIENT_IP:
    case KL_TAG_SERVER_IP: return 4;
    case KL_TAG_SKI: return KL_SKI_LEN;
    case KL_TAG_DIGEST: return KL_DIGEST_LEN;
    default: return 2;
    }
}

static const uint8_t known_tags[] = {
    KL_TAG_DIGEST,       KL_TAG_SNI,          KL_TAG_CLIENT_IP,
    KL_TAG_SKI,          KL_TAG_SERVER_IP,    KL_TAG_CERT_ID,
    KL_TAG_OPCODE,       KL_TAG_PAYLOAD,      KL_TAG_CUSTOM_FUNC,
    KL_TAG_SUPPLEMENTAL, KL_TAG_SPAN_CONTEXT, KL_TAG_REQ_CONTEXT,
    KL_TAG_COMPLIANCE,   KL_TAG_PADDING,
};

static bool is_known(unsigned tag)
{
    for (size_t i = 0; i < sizeof known_tags; i++)
        if (known_tags[i] == tag)
            return true;
    return false;
}

/* ---- P2 header ----------------------------------------------------------- */

static void test_header(void **state)
{
    const uint8_t h[] = {0x02, 0x07, 0x12, 0x34, 0xDE, 0xAD, 0xBE, 0xEF, 0x99};
    kl_header hdr;
    size_t n = 0;
    (void)state;
    for (size_t len = 0; len < KL_HEADER_LEN; len++) {
        assert_int_equal(kl_header_decode(h, len, &hdr), KL_E_AGAIN);
        assert_int_equal(kl_frame_peek(h, len, &hdr, &n), KL_E_AGAIN);
    }
    assert_int_equal(kl_header_decode(h, sizeof h, &hdr), KL_OK);
    assert_int_equal(hdr.major, 2); /* reported, not checked (P2) */
    assert_int_equal(hdr.minor, 7);
    assert_int_equal(hdr.length, 0x1234);
    assert_int_equal(hdr.id, 0xDEADBEEF);
}

static void test_frame_peek(void **state)
{
    static uint8_t buf[KL_MAX_MESSAGE + 10];
    kl_header hdr;
    size_t n = 0;
    (void)state;
    /* Empty body: the header alone is a frame. */
    memcpy(buf, "\x01\x00\x00\x00\x00\x00\x00\x07", 8);
    assert_int_equal(kl_frame_peek(buf, 8, &hdr, &n), KL_OK);
    assert_int_equal(n, 8);
    assert_int_equal(hdr.id, 7);
    /* The largest body: 65535 bytes, any length is legal. */
    memcpy(buf, "\x01\x00\xff\xff\x00\x00\x00\x01", 8);
    assert_int_equal(kl_frame_peek(buf, KL_MAX_MESSAGE - 1, &hdr, &n),
                     KL_E_AGAIN);
    assert_int_equal(kl_frame_peek(buf, sizeof buf, &hdr, &n), KL_OK);
    assert_int_equal(n, KL_MAX_MESSAGE);
    assert_int_equal(hdr.length, 0xFFFF);
}

/* ---- P3 items ------------------------------------------------------------ */

static void test_parse_all_items(void **state)
{
    body b = {.len = 0};
    kl_request req;
    (void)state;
    /* Reverse of the usual order: any order is fine. */
    item(&b, KL_TAG_PADDING, 5, 0);
    item(&b, KL_TAG_COMPLIANCE, 1, 0x01);
    item(&b, KL_TAG_REQ_CONTEXT, 2, '{');
    item(&b, KL_TAG_SPAN_CONTEXT, 3, 'a');
    item(&b, KL_TAG_SUPPLEMENTAL, 4, 0x14);
    item(&b, KL_TAG_CUSTOM_FUNC, 5, 'f');
    item(&b, KL_TAG_PAYLOAD, 6, 0x12);
    item(&b, KL_TAG_OPCODE, 1, KL_OP_ECDSA_SIGN_SHA256);
    item(&b, KL_TAG_CERT_ID, 7, 'c');
    item(&b, KL_TAG_SERVER_IP, 16, 0x05);
    item(&b, KL_TAG_SKI, KL_SKI_LEN, 0x44);
    item(&b, KL_TAG_CLIENT_IP, 4, 0x03);
    item(&b, KL_TAG_SNI, 8, 's');
    item(&b, KL_TAG_DIGEST, KL_DIGEST_LEN, 0x01);
    assert_int_equal(parse(&b, &req), KL_OK);
    assert_true(req.has_opcode);
    assert_int_equal(req.opcode, KL_OP_ECDSA_SIGN_SHA256);
    assert_int_equal(req.payload.len, 6);
    assert_int_equal(req.payload.ptr[0], 0x12);
    assert_true(req.has_ski);
    assert_true(kl_request_ski_valid(&req));
    assert_int_equal(req.ski[19], 0x44);
    assert_true(req.has_digest);
    assert_int_equal(req.digest[31], 0x01);
    assert_int_equal(req.sni.len, 8);
    assert_int_equal(req.client_ip.len, 4);
    assert_int_equal(req.server_ip.len, 16);
    assert_int_equal(req.cert_id.len, 7);
    assert_int_equal(req.custom_func.len, 5);
    assert_int_equal(req.supplemental.len, 4);
    assert_int_equal(req.span_context.len, 3);
    assert_int_equal(req.req_context.len, 2);
    assert_true(req.has_compliance);
    assert_int_equal(req.compliance, 0x01);
    assert_int_equal(req.stray_bytes, 0);
    assert_int_equal(req.unknown_items, 0);
    /* Zero-copy: slices point into the body. */
    assert_true(req.payload.ptr > b.b && req.payload.ptr < b.b + b.len);
}

static void test_parse_empty_and_zero_length(void **state)
{
    body b = {.len = 0};
    kl_request req;
    (void)state;
    assert_int_equal(kl_request_parse(NULL, 0, &req), KL_OK);
    assert_false(req.has_opcode);
    assert_int_equal(req.opcode, KL_OP_NONE);
    assert_null(req.payload.ptr);
    /* Zero-length items are legal and present (ptr set, len 0). */
    item(&b, KL_TAG_PAYLOAD, 0, 0);
    item(&b, KL_TAG_SNI, 0, 0);
    item(&b, KL_TAG_PADDING, 0, 0);
    assert_int_equal(parse(&b, &req), KL_OK);
    assert_non_null(req.payload.ptr);
    assert_int_equal(req.payload.len, 0);
    assert_non_null(req.sni.ptr);
    assert_int_equal(req.sni.len, 0);
    assert_false(req.has_opcode);
    /* A zero-length item as the last 3 bytes is an item, not stray. */
    b.len = 0;
    item(&b, 0x77, 0, 0);
    assert_int_equal(parse(&b, &req), KL_OK);
    assert_int_equal(req.unknown_items, 1);
    assert_int_equal(req.stray_bytes, 0);
}

static void test_parse_keeps_header(void **state)
{
    body b = {.len = 0};
    kl_request req;
    (void)state;
    item(&b, KL_TAG_OPCODE, 1, KL_OP_PING);
    memset(&req, 0xA5, sizeof req);
    req.hdr.id = 42;
    assert_int_equal(kl_request_parse(b.b, b.len, &req), KL_OK);
    assert_int_equal(req.hdr.id, 42);
    /* Everything else was reset. */
    assert_null(req.sni.ptr);
    assert_false(req.has_ski);
    assert_int_equal(req.unknown_items, 0);
}

static void test_stray_bytes(void **state)
{
    body b = {.len = 0};
    kl_request req;
    (void)state;
    /* 1 or 2 bytes cannot hold an item header: ignored and counted. */
    for (size_t stray = 1; stray <= 2; stray++) {
        b.len = 0;
        item(&b, KL_TAG_OPCODE, 1, KL_OP_PING);
        memset(b.b + b.len, 0x11, stray); /* even a known tag byte */
        b.len += stray;
        assert_int_equal(parse(&b, &req), KL_OK);
        assert_int_equal(req.stray_bytes, stray);
        assert_int_equal(req.opcode, KL_OP_PING);
        /* Alone in the body, too. */
        assert_int_equal(kl_request_parse(b.b + 4, stray, &req), KL_OK);
        assert_int_equal(req.stray_bytes, stray);
        assert_false(req.has_opcode);
    }
}

static void test_item_overrun(void **state)
{
    body b = {.len = 0};
    kl_request req;
    (void)state;
    /* Three bytes make an item header, whose data is then missing. */
    item(&b, KL_TAG_OPCODE, 1, KL_OP_PING);
    b.len -= 1;
    assert_int_equal(parse(&b, &req), KL_E_ITEM_OVERRUN);
    /* One byte short, after a good item. */
    b.len = 0;
    item(&b, KL_TAG_OPCODE, 1, KL_OP_PING);
    item(&b, KL_TAG_PAYLOAD, 10, 0xAB);
    b.len -= 1;
    assert_int_equal(parse(&b, &req), KL_E_ITEM_OVERRUN);
    /* Unknown tags are bounded too. */
    b.len = 0;
    item(&b, 0x99, 300, 0);
    b.len = 200;
    assert_int_equal(parse(&b, &req), KL_E_ITEM_OVERRUN);
    /* The largest length against a small body. */
    const uint8_t huge[] = {KL_TAG_PAYLOAD, 0xFF, 0xFF, 1, 2, 3};
    assert_int_equal(kl_request_parse(huge, sizeof huge, &req),
                     KL_E_ITEM_OVERRUN);
    /* The vector raw-malformed-item-overruns-body. */
    const uint8_t v[] = {0x11, 0x00, 0x05, 0xF1};
    assert_int_equal(kl_request_parse(v, sizeof v, &req), KL_E_ITEM_OVERRUN);
}

static void test_duplicate_known_tags(void **state)
{
    body b;
    kl_request req;
    (void)state;
    for (size_t i = 0; i < sizeof known_tags; i++) {
        uint8_t tag = known_tags[i];
        b.len = 0;
        item(&b, tag, valid_len(tag), 0x01);
        assert_int_equal(parse(&b, &req), KL_OK);
        item(&b, tag, valid_len(tag), 0x01);
        if (parse(&b, &req) != KL_E_DUP_TAG)
            fail_msg("tag 0x%02x twice was accepted", tag);
        /* Not adjacent either. */
        b.len = 0;
        item(&b, tag, valid_len(tag), 0x01);
        item(&b, 0xEE, 3, 0);
        item(&b, tag == KL_TAG_SNI ? KL_TAG_CERT_ID : KL_TAG_SNI, 1, 'x');
        item(&b, tag, valid_len(tag), 0x01);
        assert_int_equal(parse(&b, &req), KL_E_DUP_TAG);
    }
    /* A second SKI is a duplicate even when the first was ignored for its
     * length (docs/PROTOCOL.md, implementation notes). */
    b.len = 0;
    item(&b, KL_TAG_SKI, 19, 0x01);
    item(&b, KL_TAG_SKI, KL_SKI_LEN, 0x01);
    assert_int_equal(parse(&b, &req), KL_E_DUP_TAG);
    b.len = 0;
    item(&b, KL_TAG_DIGEST, 0, 0);
    item(&b, KL_TAG_DIGEST, KL_DIGEST_LEN, 0x01);
    assert_int_equal(parse(&b, &req), KL_E_DUP_TAG);
    /* Padding twice, even empty: a duplicate, as in the reference. */
    b.len = 0;
    item(&b, KL_TAG_PADDING, 0, 0);
    item(&b, KL_TAG_PADDING, 0, 0);
    assert_int_equal(parse(&b, &req), KL_E_DUP_TAG);
}

static void test_unknown_tags(void **state)
{
    body b = {.len = 0};
    kl_request req;
    uint32_t unknown = 0;
    (void)state;
    /* Every byte value that is not a known tag is skipped, repeats too. */
    for (unsigned tag = 0; tag < 256; tag++) {
        if (is_known(tag))
            continue;
        item(&b, (uint8_t)tag, tag % 5, (uint8_t)tag);
        item(&b, (uint8_t)tag, 1, 0x11);
        unknown += 2;
    }
    item(&b, KL_TAG_OPCODE, 1, KL_OP_PING);
    assert_int_equal(parse(&b, &req), KL_OK);
    assert_int_equal(req.unknown_items, unknown);
    assert_int_equal(req.unknown_items, 2 * (256 - sizeof known_tags));
    assert_int_equal(req.opcode, KL_OP_PING);
}

static void test_wrong_lengths(void **state)
{
    body b;
    kl_request req;
    (void)state;
    const size_t bad_one[] = {0, 2, 3, 255};
    for (size_t i = 0; i < 4; i++) {
        b.len = 0;
        item(&b, KL_TAG_OPCODE, bad_one[i], KL_OP_PING);
        assert_int_equal(parse(&b, &req), KL_E_OPCODE_LEN);
        b.len = 0;
        item(&b, KL_TAG_COMPLIANCE, bad_one[i], 1);
        assert_int_equal(parse(&b, &req), KL_E_COMPLIANCE_LEN);
    }
    const size_t bad_ip[] = {0, 1, 3, 5, 6, 8, 15, 17, 32};
    for (size_t i = 0; i < sizeof bad_ip / sizeof bad_ip[0]; i++) {
        b.len = 0;
        item(&b, KL_TAG_CLIENT_IP, bad_ip[i], 1);
        assert_int_equal(parse(&b, &req), KL_E_IP_LEN);
        b.len = 0;
        item(&b, KL_TAG_SERVER_IP, bad_ip[i], 1);
        assert_int_equal(parse(&b, &req), KL_E_IP_LEN);
    }
    b.len = 0;
    item(&b, KL_TAG_CLIENT_IP, 16, 1);
    item(&b, KL_TAG_SERVER_IP, 4, 2);
    assert_int_equal(parse(&b, &req), KL_OK);
    assert_int_equal(req.client_ip.len, 16);
    assert_int_equal(req.server_ip.len, 4);
    /* SKI not 20 bytes, digest not 32 bytes: absent, not malformed. */
    const size_t bad_ski[] = {0, 1, 19, 21, 32};
    for (size_t i = 0; i < 5; i++) {
        b.len = 0;
        item(&b, KL_TAG_SKI, bad_ski[i], 0x42);
        item(&b, KL_TAG_DIGEST, bad_ski[i] + 1, 0x42);
        assert_int_equal(parse(&b, &req), KL_OK);
        assert_false(req.has_ski);
        assert_false(kl_request_ski_valid(&req));
        assert_false(req.has_digest);
    }
    /* A 20-byte all-zero SKI is present but invalid (P7). */
    b.len = 0;
    item(&b, KL_TAG_SKI, KL_SKI_LEN, 0);
    assert_int_equal(parse(&b, &req), KL_OK);
    assert_true(req.has_ski);
    assert_false(kl_request_ski_valid(&req));
    b.len = 0;
    item(&b, KL_TAG_SKI, KL_SKI_LEN, 0);
    b.b[b.len - 1] = 1;
    assert_int_equal(parse(&b, &req), KL_OK);
    assert_true(kl_request_ski_valid(&req));
}

/* ---- request encoding ---------------------------------------------------- */

static void test_encode_all_fields(void **state)
{
    static uint8_t out[KL_MAX_MESSAGE];
    const uint8_t ski[KL_SKI_LEN] = {1, 2, 3};
    const uint8_t digest[KL_DIGEST_LEN] = {9};
    const uint8_t cip[16] = {0x20, 0x01}, sip[4] = {127, 0, 0, 1};
    const uint8_t payload[] = {0xAA, 0xBB}, sup[] = {0x55};
    const uint8_t span[] = "abc:def:0:1";
    kl_request_spec s = {
        .id = 0x01020304,
        .opcode = KL_OP_RSA_SIGN_SHA256,
        .payload = payload,
        .payload_len = sizeof payload,
        .supplemental = sup,
        .supplemental_len = sizeof sup,
        .ski = ski,
        .digest = digest,
        .client_ip = cip,
        .client_ip_len = 16,
        .server_ip = sip,
        .server_ip_len = 4,
        .sni = "example.com",
        .cert_id = "cid",
        .custom_func = "fn",
        .span_context = span,
        .span_context_len = sizeof span - 1,
        .req_context = "{\"request_id\":\"r\"}",
        .has_compliance = true,
        .compliance = 1,
    };
    size_t n = 0;
    kl_header hdr;
    kl_request req;
    (void)state;
    assert_int_equal(kl_request_encode(out, sizeof out, &s, &n), KL_OK);
    assert_int_equal(n, 1024);
    assert_int_equal(kl_header_decode(out, n, &hdr), KL_OK);
    assert_int_equal(hdr.major, 1);
    assert_int_equal(hdr.minor, 0);
    assert_int_equal(hdr.length, 1016);
    assert_int_equal(hdr.id, 0x01020304);
    assert_int_equal(kl_request_parse(out + 8, hdr.length, &req), KL_OK);
    assert_int_equal(req.opcode, KL_OP_RSA_SIGN_SHA256);
    assert_memory_equal(req.payload.ptr, payload, 2);
    assert_memory_equal(req.supplemental.ptr, sup, 1);
    assert_memory_equal(req.ski, ski, KL_SKI_LEN);
    assert_memory_equal(req.digest, digest, KL_DIGEST_LEN);
    assert_memory_equal(req.client_ip.ptr, cip, 16);
    assert_memory_equal(req.server_ip.ptr, sip, 4);
    assert_memory_equal(req.sni.ptr, "example.com", req.sni.len);
    assert_memory_equal(req.cert_id.ptr, "cid", 3);
    assert_memory_equal(req.custom_func.ptr, "fn", 2);
    assert_int_equal(req.span_context.len, sizeof span - 1);
    assert_int_equal(req.req_context.len, strlen(s.req_context));
    assert_true(req.has_compliance);
    assert_int_equal(req.compliance, 1);
    /* The documented item order. */
    const uint8_t order[] = {0x11, 0x12, 0x14, 0x04, 0x01, 0x03, 0x05,
                             0x02, 0x06, 0x13, 0x15, 0x16, 0x17, 0x20};
    size_t off = 8;
    for (size_t i = 0; i < sizeof order; i++) {
        assert_true(off + 3 <= n);
        assert_int_equal(out[off], order[i]);
        off += 3 + ((size_t)out[off + 1] << 8 | out[off + 2]);
    }
    assert_int_equal(off, n);
}

static void test_encode_minimal_and_unpadded(void **state)
{
    uint8_t out[64];
    kl_request_spec s = {.id = 7, .opcode = KL_OP_PING, .no_padding = true};
    size_t n = 0;
    (void)state;
    /* Empty payload and empty strings are omitted. */
    s.sni = "";
    s.req_context = "";
    assert_int_equal(kl_request_encode(out, sizeof out, &s, &n), KL_OK);
    const uint8_t want[] = {1, 0, 0, 4, 0, 0, 0, 7, 0x11, 0, 1, 0xF1};
    assert_int_equal(n, sizeof want);
    assert_memory_equal(out, want, n);
    /* Exactly the cap it needs, and one less. */
    assert_int_equal(kl_request_encode(out, sizeof want, &s, &n), KL_OK);
    memset(out, 0xEE, sizeof out);
    assert_int_equal(kl_request_encode(out, sizeof want - 1, &s, &n),
                     KL_E_TOO_LARGE);
    assert_int_equal(out[0], 0xEE); /* nothing written */
    assert_int_equal(kl_request_encode(NULL, 0, &s, &n), KL_E_TOO_LARGE);
}

static void test_encode_errors(void **state)
{
    static uint8_t out[KL_MAX_MESSAGE + 16];
    static uint8_t payload[KL_MAX_BODY];
    const uint8_t ip[16] = {0};
    kl_request_spec s = {.opcode = KL_OP_PING, .payload = payload};
    size_t n = 0;
    (void)state;
    /* Largest body: opcode item + payload item = 65535. */
    s.payload_len = KL_MAX_RESPONSE_PAYLOAD;
    assert_int_equal(kl_request_encode(out, sizeof out, &s, &n), KL_OK);
    assert_int_equal(n, KL_MAX_MESSAGE);
    assert_int_equal(kl_request_encode(out, KL_MAX_MESSAGE - 1, &s, &n),
                     KL_E_TOO_LARGE);
    s.payload_len = KL_MAX_RESPONSE_PAYLOAD + 1;
    assert_int_equal(kl_request_encode(out, sizeof out, &s, &n),
                     KL_E_TOO_LARGE);
    s.payload_len = 10;
    s.sni = "x"; /* pushes a max payload over the limit */
    s.payload_len = KL_MAX_RESPONSE_PAYLOAD;
    assert_int_equal(kl_request_encode(out, sizeof out, &s, &n),
                     KL_E_TOO_LARGE);
    s.sni = NULL;
    s.payload_len = 3;
    /* Never emit what the parser rejects. */
    s.client_ip = ip;
    s.client_ip_len = 5;
    assert_int_equal(kl_request_encode(out, sizeof out, &s, &n),
                     KL_E_BAD_VALUE);
    s.client_ip = NULL;
    s.server_ip = ip;
    s.server_ip_len = 0;
    assert_int_equal(kl_request_encode(out, sizeof out, &s, &n),
                     KL_E_BAD_VALUE);
    s.server_ip = NULL;
    s.payload = NULL;
    assert_int_equal(kl_request_encode(out, sizeof out, &s, &n),
                     KL_E_BAD_VALUE);
}

static void test_encode_padding(void **state)
{
    static uint8_t out[4096];
    static uint8_t payload[2048];
    kl_request_spec s = {.opcode = KL_OP_PING, .payload = payload};
    (void)state;
    /* Body before padding b = 4 + 3 + plen; message = b + 8. */
    for (size_t plen = 1; plen < 1100; plen++) {
        size_t n = 0, b = 7 + plen;
        kl_request req;
        s.payload_len = plen;
        assert_int_equal(kl_request_encode(out, sizeof out, &s, &n), KL_OK);
        assert_int_equal(n, kl_padded_message_len(b));
        assert_int_equal(kl_request_parse(out + 8, n - 8, &req), KL_OK);
        assert_int_equal(req.payload.len, plen);
        assert_int_equal(req.stray_bytes, 0);
        if (b + 8 >= 1024)
            assert_int_equal(n, b + 8);
        else
            assert_int_equal(n, b + 8 + 3 > 1024 ? b + 8 + 3 : 1024);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header),
        cmocka_unit_test(test_frame_peek),
        cmocka_unit_test(test_parse_all_items),
        cmocka_unit_test(test_parse_empty_and_zero_length),
        cmocka_unit_test(test_parse_keeps_header),
        cmocka_unit_test(test_stray_bytes),
        cmocka_unit_test(test_item_overrun),
        cmocka_unit_test(test_duplicate_known_tags),
        cmocka_unit_test(test_unknown_tags),
        cmocka_unit_test(test_wrong_lengths),
        cmocka_unit_test(test_encode_all_fields),
        cmocka_unit_test(test_encode_minimal_and_unpadded),
        cmocka_unit_test(test_encode_errors),
        cmocka_unit_test(test_encode_padding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
