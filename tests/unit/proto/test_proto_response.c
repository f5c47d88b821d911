/* SPDX-License-Identifier: Apache-2.0 */
/* P5 responses: padding arithmetic at its boundaries, the encoder, and the
 * (client side) response parser with its negative cases. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "keyless/protocol.h"

static uint8_t g_out[KL_MAX_MESSAGE + 64];
static uint8_t g_payload[KL_MAX_BODY + 1];

static void test_padded_len_boundaries(void **state)
{
    (void)state;
    /* b + 8 from 1010 to 1030: padded to 1024 while the padding item header
     * still fits, overshooting to 1025/1026 when it does not, unpadded from
     * 1024 on. */
    const size_t want[] = {
        /* 1010 */ 1024,
        1024,
        1024,
        1024,
        1024,
        1024,
        1024,
        1024,
        1024,
        /* 1019 */ 1024,
        1024,
        1024,
        1025,
        1026,
        /* 1024 */ 1024,
        1025,
        1026,
        1027,
        1028,
        1029,
        1030,
    };
    for (size_t m = 1010; m <= 1030; m++)
        assert_int_equal(kl_padded_message_len(m - 8), want[m - 1010]);
    assert_int_equal(kl_padded_message_len(0), 1024);
    assert_int_equal(kl_padded_message_len(2007), 2015);
    assert_int_equal(kl_padded_message_len(KL_MAX_BODY), KL_MAX_MESSAGE);
}

static void test_response_len(void **state)
{
    (void)state;
    assert_int_equal(kl_response_len(0), 1024);
    assert_int_equal(kl_response_len(1), 1024);
    assert_int_equal(kl_response_len(256), 1024);
    /* b = 7 + plen; b + 8 = 1021 -> 1024 (empty padding item). */
    assert_int_equal(kl_response_len(1006), 1024);
    assert_int_equal(kl_response_len(1007), 1025);
    assert_int_equal(kl_response_len(1008), 1026);
    assert_int_equal(kl_response_len(1009), 1024);
    assert_int_equal(kl_response_len(1010), 1025);
    assert_int_equal(kl_response_len(2000), 2015);
    assert_int_equal(kl_response_len(KL_MAX_RESPONSE_PAYLOAD), 65543);
}

static void test_error_response_bytes(void **state)
{
    size_t n = 0;
    (void)state;
    assert_int_equal(
        kl_error_encode(g_out, sizeof g_out, 0xCAFEBABE, KL_ERR_FORMAT, &n),
        KL_OK);
    /* P5: opcode item (4) + payload item (4) + padding item (3 + 1005). */
    const uint8_t head[] = {1,    0,    0x03, 0xF8, 0xCA, 0xFE, 0xBA,
                            0xBE, 0x11, 0,    1,    0xFF, 0x12, 0,
                            1,    0x07, 0x20, 0x03, 0xED};
    assert_int_equal(n, 1024);
    assert_memory_equal(g_out, head, sizeof head);
    for (size_t i = sizeof head; i < n; i++)
        assert_int_equal(g_out[i], 0);
}

static void test_encode_parse_sizes(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof g_payload; i++)
        g_payload[i] = (uint8_t)(i * 7 + 1);
    const size_t sizes[] = {0,
                            1,
                            2,
                            100,
                            1000,
                            1004,
                            1005,
                            1006,
                            1007,
                            1008,
                            1009,
                            1010,
                            1011,
                            2000,
                            4096,
                            65000,
                            KL_MAX_RESPONSE_PAYLOAD};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t plen = sizes[k], n = 0, flen = 0;
        kl_header hdr;
        kl_response resp;
        assert_int_equal(kl_response_encode(g_out, sizeof g_out, 99,
                                            KL_OP_RESPONSE, g_payload, plen,
                                            &n),
                         KL_OK);
        assert_int_equal(n, kl_response_len(plen));
        assert_int_equal(kl_frame_peek(g_out, n, &hdr, &flen), KL_OK);
        assert_int_equal(flen, n);
        assert_int_equal(hdr.id, 99);
        assert_int_equal(kl_response_parse(&hdr, g_out + 8, hdr.length, &resp),
                         KL_OK);
        assert_int_equal(resp.opcode, KL_OP_RESPONSE);
        assert_int_equal(resp.error, KL_ERR_NONE);
        assert_int_equal(resp.payload.len, plen);
        if (plen)
            assert_memory_equal(resp.payload.ptr, g_payload, plen);
        /* Exactly this cap suffices; one byte less writes nothing. */
        memset(g_out, 0xEE, 16);
        assert_int_equal(kl_response_encode(g_out, n - 1, 99, KL_OP_RESPONSE,
                                            g_payload, plen, &flen),
                         KL_E_TOO_LARGE);
        assert_int_equal(g_out[0], 0xEE);
    }
}

static void test_encode_empty_payload(void **state)
{
    size_t n = 0;
    (void)state;
    /* A pong to an empty ping: no payload item at all (P5). */
    assert_int_equal(
        kl_response_encode(g_out, sizeof g_out, 1, KL_OP_PONG, NULL, 0, &n),
        KL_OK);
    const uint8_t head[] = {1,    0, 0x03, 0xF8, 0,    0,    0,   1,
                            0x11, 0, 1,    0xF2, 0x20, 0x03, 0xF1};
    assert_int_equal(n, 1024);
    assert_memory_equal(g_out, head, sizeof head);
}

static void test_encode_too_large(void **state)
{
    size_t n = 0;
    (void)state;
    assert_int_equal(kl_response_encode(g_out, sizeof g_out, 1, KL_OP_PONG,
                                        g_payload, KL_MAX_RESPONSE_PAYLOAD + 1,
                                        &n),
                     KL_E_TOO_LARGE);
    assert_int_equal(kl_response_encode(g_out, sizeof g_out, 1, KL_OP_PONG,
                                        g_payload, KL_MAX_BODY, &n),
                     KL_E_TOO_LARGE);
    assert_int_equal(
        kl_response_encode(g_out, 1023, 1, KL_OP_PONG, g_payload, 1, &n),
        KL_E_TOO_LARGE);
    assert_int_equal(kl_error_encode(g_out, 1023, 1, KL_ERR_CRYPTO, &n),
                     KL_E_TOO_LARGE);
    assert_int_equal(kl_error_encode(NULL, 0, 1, KL_ERR_CRYPTO, &n),
                     KL_E_TOO_LARGE);
    assert_int_equal(
        kl_response_encode(g_out, sizeof g_out, 1, KL_OP_PONG, NULL, 5, &n),
        KL_E_BAD_VALUE);
}

/* ---- response parsing ---------------------------------------------------- */

static kl_status parse_body(const uint8_t *b, size_t len, kl_response *resp)
{
    kl_header h = {.major = 1, .length = (uint16_t)len, .id = 5};
    return kl_response_parse(&h, b, len, resp);
}

static void test_parse_negative(void **state)
{
    kl_response resp;
    (void)state;
    /* Missing opcode. */
    const uint8_t no_op[] = {0x12, 0, 1, 0x07};
    assert_int_equal(parse_body(no_op, sizeof no_op, &resp), KL_E_BAD_VALUE);
    assert_int_equal(parse_body(NULL, 0, &resp), KL_E_BAD_VALUE);
    /* An error whose payload is not one byte. */
    const uint8_t err0[] = {0x11, 0, 1, 0xFF};
    assert_int_equal(parse_body(err0, sizeof err0, &resp), KL_E_BAD_VALUE);
    const uint8_t err2[] = {0x11, 0, 1, 0xFF, 0x12, 0, 2, 1, 2};
    assert_int_equal(parse_body(err2, sizeof err2, &resp), KL_E_BAD_VALUE);
    /* A request opcode in a response. */
    const uint8_t req_op[] = {0x11, 0, 1, 0x05, 0x12, 0, 1, 9};
    assert_int_equal(parse_body(req_op, sizeof req_op, &resp), KL_E_BAD_VALUE);
    /* The item rules of P3 apply. */
    const uint8_t dup[] = {0x11, 0, 1, 0xF0, 0x11, 0, 1, 0xF0};
    assert_int_equal(parse_body(dup, sizeof dup, &resp), KL_E_DUP_TAG);
    const uint8_t over[] = {0x11, 0, 1, 0xF0, 0x12, 0, 9, 1};
    assert_int_equal(parse_body(over, sizeof over, &resp), KL_E_ITEM_OVERRUN);
    const uint8_t oplen[] = {0x11, 0, 2, 0xF0, 0xF0};
    assert_int_equal(parse_body(oplen, sizeof oplen, &resp), KL_E_OPCODE_LEN);
    /* A header announcing another length. */
    const uint8_t ok[] = {0x11, 0, 1, 0xF2};
    kl_header h = {.length = 5};
    assert_int_equal(kl_response_parse(&h, ok, sizeof ok, &resp),
                     KL_E_BAD_VALUE);
}

static void test_parse_positive(void **state)
{
    kl_response resp;
    (void)state;
    const uint8_t err[] = {0x11, 0, 1, 0xFF, 0x12, 0, 1, 0x02, 0x20, 0, 0};
    assert_int_equal(parse_body(err, sizeof err, &resp), KL_OK);
    assert_int_equal(resp.opcode, KL_OP_ERROR);
    assert_int_equal(resp.error, KL_ERR_KEY_NOT_FOUND);
    assert_int_equal(resp.hdr.id, 5);
    /* Unknown items and stray bytes, payload first, no header. */
    const uint8_t odd[] = {0x12, 0,    2, 0xAB, 0xCD, 0x99, 0,
                           0,    0x11, 0, 1,    0xF0, 0x00};
    assert_int_equal(kl_response_parse(NULL, odd, sizeof odd, &resp), KL_OK);
    assert_int_equal(resp.opcode, KL_OP_RESPONSE);
    assert_int_equal(resp.payload.len, 2);
    assert_int_equal(resp.payload.ptr[1], 0xCD);
    assert_int_equal(resp.hdr.id, 0);
    /* A pong without payload. */
    const uint8_t pong[] = {0x11, 0, 1, 0xF2};
    assert_int_equal(parse_body(pong, sizeof pong, &resp), KL_OK);
    assert_int_equal(resp.opcode, KL_OP_PONG);
    assert_int_equal(resp.payload.len, 0);
}

static void test_every_error_code_round_trips(void **state)
{
    (void)state;
    for (unsigned e = 0; e < 256; e++) {
        size_t n = 0;
        kl_header hdr;
        kl_response resp;
        assert_int_equal(
            kl_error_encode(g_out, sizeof g_out, e, (uint8_t)e, &n), KL_OK);
        assert_int_equal(kl_header_decode(g_out, n, &hdr), KL_OK);
        assert_int_equal(kl_response_parse(&hdr, g_out + 8, hdr.length, &resp),
                         KL_OK);
        assert_int_equal(resp.opcode, KL_OP_ERROR);
        assert_int_equal(resp.error, e);
        assert_int_equal(resp.hdr.id, e);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_padded_len_boundaries),
        cmocka_unit_test(test_response_len),
        cmocka_unit_test(test_error_response_bytes),
        cmocka_unit_test(test_encode_parse_sizes),
        cmocka_unit_test(test_encode_empty_payload),
        cmocka_unit_test(test_encode_too_large),
        cmocka_unit_test(test_parse_negative),
        cmocka_unit_test(test_parse_positive),
        cmocka_unit_test(test_every_error_code_round_trips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
