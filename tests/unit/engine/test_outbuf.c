/* SPDX-License-Identifier: Apache-2.0 */
/* src/engine output buffer: responses accumulate contiguously, so one TLS
 * write carries all of them (protocol P8), partial writes leave the unsent
 * bytes first, and the P5 sizes hold. */
#include <stdlib.h>
#include <string.h>

#include "engine/outbuf.h"
#include "keyless/protocol.h"
#include "testutil.h"

/* Parses every message in buf; returns how many and checks ids. */
static size_t parse_all(const uint8_t *p, size_t len, const uint32_t *ids,
                        const uint8_t *ops)
{
    size_t n = 0;
    while (len) {
        kl_header hdr;
        size_t flen;
        assert_int_equal(kl_frame_peek(p, len, &hdr, &flen), KL_OK);
        kl_response r;
        assert_int_equal(kl_response_parse(&hdr, p + 8, flen - 8, &r), KL_OK);
        assert_int_equal(hdr.major, 1);
        assert_int_equal(hdr.minor, 0);
        assert_int_equal(hdr.id, ids[n]);
        assert_int_equal(r.opcode, ops[n]);
        p += flen;
        len -= flen;
        n++;
    }
    return n;
}

static void test_coalesces_in_order(void **state)
{
    kl_outbuf o;
    kl_outbuf_init(&o);
    uint8_t sig[72];
    memset(sig, 0x30, sizeof sig);
    assert_int_equal(kl_outbuf_response(&o, 5, KL_OP_RESPONSE, sig, 72), KL_OK);
    assert_int_equal(kl_outbuf_error(&o, 9, KL_E_KEY_NOT_FOUND), KL_OK);
    assert_int_equal(kl_outbuf_response(&o, 7, KL_OP_PONG, NULL, 0), KL_OK);
    /* three padded 1024-byte messages, back to back in one region */
    assert_int_equal(kl_outbuf_pending(&o), 3 * 1024);
    uint32_t ids[] = {5, 9, 7};
    uint8_t ops[] = {KL_OP_RESPONSE, KL_OP_ERROR, KL_OP_PONG};
    assert_int_equal(
        parse_all(kl_outbuf_data(&o), kl_outbuf_pending(&o), ids, ops), 3);
    kl_outbuf_free(&o);
}

static void test_error_bytes(void **state)
{
    kl_outbuf o;
    kl_outbuf_init(&o);
    assert_int_equal(kl_outbuf_error(&o, 0x01020304, KL_E_FORMAT), KL_OK);
    const uint8_t *p = kl_outbuf_data(&o);
    static const uint8_t head[] = {0x01, 0x00, 0x03, 0xF8, 0x01, 0x02, 0x03,
                                   0x04, 0x11, 0x00, 0x01, 0xFF, 0x12, 0x00,
                                   0x01, 0x07, 0x20, 0x03, 0xED};
    assert_int_equal(kl_outbuf_pending(&o), 1024);
    assert_memory_equal(p, head, sizeof head);
    for (size_t i = sizeof head; i < 1024; i++)
        assert_int_equal(p[i], 0);
    kl_outbuf_free(&o);
}

/* The encoder writes, for the status of every P6 code, that code
 * (docs/DESIGN.md "Errors": the only place a status becomes a byte). */
static void test_error_byte_of_every_status(void **state)
{
    for (int code = 0; code <= 0xFF; code++) {
        kl_outbuf o;
        kl_outbuf_init(&o);
        assert_int_equal(
            kl_outbuf_error(&o, 1, kl_status_from_p6((uint8_t)code)), KL_OK);
        assert_int_equal(kl_outbuf_pending(&o), 1024);
        assert_int_equal(kl_outbuf_data(&o)[15], code);
        kl_outbuf_free(&o);
    }
}

static void test_partial_writes_keep_unsent_first(void **state)
{
    kl_outbuf o;
    kl_outbuf_init(&o);
    uint32_t ids[400];
    uint8_t ops[400];
    uint8_t payload[2000];
    memset(payload, 0x33, sizeof payload);
    /* 2000-byte payloads give 2015-byte messages (P5) */
    for (uint32_t i = 0; i < 100; i++) {
        assert_int_equal(
            kl_outbuf_response(&o, i, KL_OP_RESPONSE, payload, 2000), KL_OK);
        ids[i] = i;
        ops[i] = KL_OP_RESPONSE;
    }
    assert_int_equal(kl_outbuf_pending(&o), 100 * 2015);
    /* a write takes 5 messages and 100 bytes of the 6th */
    size_t taken = 5 * 2015 + 100;
    uint8_t sixth_tail[1915];
    memcpy(sixth_tail, kl_outbuf_data(&o) + taken, sizeof sixth_tail);
    kl_outbuf_consume(&o, taken);
    assert_int_equal(kl_outbuf_pending(&o), 100 * 2015 - taken);
    assert_memory_equal(kl_outbuf_data(&o), sixth_tail, sizeof sixth_tail);
    /* more responses arrive while the write is pending: appended after */
    for (uint32_t i = 100; i < 400; i++) {
        assert_int_equal(kl_outbuf_response(&o, i, KL_OP_PONG, NULL, 0), KL_OK);
        ids[i] = i;
        ops[i] = KL_OP_PONG;
    }
    assert_memory_equal(kl_outbuf_data(&o), sixth_tail, sizeof sixth_tail);
    /* the rest parses as messages 6..399 */
    assert_int_equal(parse_all(kl_outbuf_data(&o) + sizeof sixth_tail,
                               kl_outbuf_pending(&o) - sizeof sixth_tail,
                               ids + 6, ops + 6),
                     394);
    /* everything sent: empty, memory released */
    kl_outbuf_consume(&o, kl_outbuf_pending(&o));
    assert_int_equal(kl_outbuf_pending(&o), 0);
    assert_null(o.buf);
    kl_outbuf_free(&o);
}

static void test_max_and_too_large(void **state)
{
    kl_outbuf o;
    kl_outbuf_init(&o);
    uint8_t *big = calloc(1, KL_MAX_RESPONSE_PAYLOAD + 1);
    assert_int_equal(
        kl_outbuf_response(&o, 1, KL_OP_PONG, big, KL_MAX_RESPONSE_PAYLOAD),
        KL_OK);
    assert_int_equal(kl_outbuf_pending(&o), KL_MAX_MESSAGE);
    assert_int_equal(
        kl_outbuf_response(&o, 2, KL_OP_PONG, big, KL_MAX_RESPONSE_PAYLOAD + 1),
        KL_E_TOO_LARGE);
    /* nothing was appended by the failed call */
    assert_int_equal(kl_outbuf_pending(&o), KL_MAX_MESSAGE);
    free(big);
    kl_outbuf_free(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coalesces_in_order),
        cmocka_unit_test(test_error_bytes),
        cmocka_unit_test(test_error_byte_of_every_status),
        cmocka_unit_test(test_partial_writes_keep_unsent_first),
        cmocka_unit_test(test_max_and_too_large),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
