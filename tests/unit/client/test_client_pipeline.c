/* SPDX-License-Identifier: Apache-2.0 */
/* The pure half of a client connection (src/client/pipeline.c): requests
 * encoded into one buffer, ids assigned and tracked, responses framed from
 * arbitrary byte splits and matched in any order. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "client/pipeline.h"

static const uint8_t ski[KL_SKI_LEN] = {0x06, 0x93, 0x86, 0xe2, 0x32};

static kl_request_spec sign_spec(void)
{
    static const uint8_t digest[32] = {1, 2, 3};
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                         .payload = digest,
                         .payload_len = sizeof digest,
                         .ski = ski,
                         .sni = "example.com"};
    return s;
}

/* Feeds bytes into the receive side, n at a time. */
static void feed(kl_pipeline *p, const uint8_t *b, size_t len)
{
    uint8_t *dst;
    size_t cap;
    assert_int_equal(kl_pipeline_in_space(p, &dst, &cap), KL_OK);
    assert_true(cap >= len);
    memcpy(dst, b, len);
    kl_pipeline_in_commit(p, len);
}

static size_t encode_resp(uint8_t *out, uint32_t id, uint8_t op,
                          const char *payload)
{
    size_t n = 0;
    assert_int_equal(kl_response_encode(out, KL_MAX_MESSAGE, id, op,
                                        (const uint8_t *)payload,
                                        strlen(payload), &n),
                     KL_OK);
    return n;
}

/* Every queued message is exactly kl_request_encode's bytes, back to back
 * in one buffer (one write per flush, never header and body apart). */
static void test_queue_encodes_into_one_buffer(void **state)
{
    kl_pipeline p;
    kl_request_spec s = sign_spec();
    uint32_t ids[3];
    static uint8_t expect[3 * 1024 + 16];
    size_t elen = 0;

    kl_pipeline_init(&p);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(kl_pipeline_queue(&p, &s, true, &ids[i], 100), KL_OK);
        kl_request_spec e = s;
        size_t n;
        e.id = ids[i];
        assert_int_equal(
            kl_request_encode(expect + elen, sizeof expect - elen, &e, &n),
            KL_OK);
        elen += n;
    }
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    assert_int_equal(ids[2], 3);
    size_t olen;
    const uint8_t *o = kl_pipeline_out(&p, &olen);
    assert_int_equal(olen, elen);
    assert_int_equal(olen, 3 * 1024); /* padded to 1024 each (P5) */
    assert_memory_equal(o, expect, elen);
    /* the header of the second message is where the first one ends */
    assert_int_equal(o[1024 + 7], 2);

    /* a partial write keeps the rest in place */
    kl_pipeline_out_done(&p, 1000);
    o = kl_pipeline_out(&p, &olen);
    assert_int_equal(olen, elen - 1000);
    assert_memory_equal(o, expect + 1000, olen);
    kl_pipeline_out_done(&p, olen);
    (void)kl_pipeline_out(&p, &olen);
    assert_int_equal(olen, 0);
    assert_int_equal(kl_reqtable_count(&p.reqs), 3);
    kl_pipeline_free(&p);
}

/* Auto ids skip ids the caller chose explicitly and still outstanding. */
static void test_auto_id_skips_outstanding(void **state)
{
    kl_pipeline p;
    kl_request_spec s = sign_spec();
    uint32_t id;
    kl_pipeline_init(&p);
    s.id = 1;
    assert_int_equal(kl_pipeline_queue(&p, &s, false, NULL, 0), KL_OK);
    s.id = 2;
    assert_int_equal(kl_pipeline_queue(&p, &s, false, NULL, 0), KL_OK);
    s.id = 999; /* ignored with auto ids */
    assert_int_equal(kl_pipeline_queue(&p, &s, true, &id, 0), KL_OK);
    assert_int_equal(id, 3);
    /* the explicit id went on the wire as given */
    size_t olen;
    const uint8_t *o = kl_pipeline_out(&p, &olen);
    assert_int_equal(o[4] << 24 | o[5] << 16 | o[6] << 8 | o[7], 1);
    assert_int_equal(o[2048 + 7], 3);
    kl_pipeline_free(&p);
}

/* A request that cannot be encoded leaves nothing behind. */
static void test_too_large_leaves_no_trace(void **state)
{
    kl_pipeline p;
    kl_request_spec s = sign_spec();
    static uint8_t big[KL_MAX_BODY];
    uint32_t id = 77;
    kl_pipeline_init(&p);
    s.payload = big;
    s.payload_len = sizeof big;
    assert_int_equal(kl_pipeline_queue(&p, &s, true, &id, 0), KL_E_TOO_LARGE);
    assert_int_equal(id, 77);
    size_t olen;
    (void)kl_pipeline_out(&p, &olen);
    assert_int_equal(olen, 0);
    assert_int_equal(kl_reqtable_count(&p.reqs), 0);
    /* a bad IP length is refused by the encoder too */
    s = sign_spec();
    static const uint8_t ip[5] = {1, 2, 3, 4, 5};
    s.client_ip = ip;
    s.client_ip_len = sizeof ip;
    assert_int_equal(kl_pipeline_queue(&p, &s, true, &id, 0), KL_E_BAD_VALUE);
    assert_int_equal(kl_reqtable_count(&p.reqs), 0);
    kl_pipeline_free(&p);
}

/* Responses in another order than the requests, delivered one byte at a
 * time: each is framed once complete and matched to its id. */
static void test_out_of_order_byte_by_byte(void **state)
{
    kl_pipeline p;
    kl_request_spec s = sign_spec();
    uint32_t a, b, c;
    static uint8_t wire[3 * KL_MAX_MESSAGE];
    size_t wl = 0;
    kl_client_result r;

    kl_pipeline_init(&p);
    assert_int_equal(kl_pipeline_queue(&p, &s, true, &a, 10), KL_OK);
    assert_int_equal(kl_pipeline_queue(&p, &s, true, &b, 20), KL_OK);
    assert_int_equal(kl_pipeline_queue(&p, &s, true, &c, 30), KL_OK);
    wl += encode_resp(wire + wl, c, KL_OP_RESPONSE, "sig-c");
    wl += encode_resp(wire + wl, a, KL_OP_RESPONSE, "sig-a");
    size_t n;
    assert_int_equal(kl_error_encode(wire + wl, sizeof wire - wl, b,
                                     KL_ERR_KEY_NOT_FOUND, &n),
                     KL_OK);
    wl += n;

    assert_int_equal(kl_pipeline_next(&p, &r, 0), KL_E_AGAIN);
    uint32_t got[3];
    int ngot = 0;
    for (size_t i = 0; i < wl; i++) {
        feed(&p, wire + i, 1);
        kl_status st = kl_pipeline_next(&p, &r, 100);
        if (st == KL_E_AGAIN)
            continue;
        assert_int_equal(st, KL_OK);
        assert_true(r.tracked);
        got[ngot++] = r.id;
        assert_int_equal(r.msg_len, 1024);
        if (r.id == b) {
            assert_int_equal(r.opcode, KL_OP_ERROR);
            assert_int_equal(r.error, KL_ERR_KEY_NOT_FOUND);
        } else {
            assert_int_equal(r.opcode, KL_OP_RESPONSE);
            assert_int_equal(r.payload_len, 5);
            assert_memory_equal(r.payload, r.id == a ? "sig-a" : "sig-c", 5);
            assert_int_equal(r.rtt_ns, r.id == a ? 90 : 70);
        }
        kl_client_result_free(&r);
    }
    assert_int_equal(ngot, 3);
    assert_int_equal(got[0], c);
    assert_int_equal(got[1], a);
    assert_int_equal(got[2], b);
    assert_int_equal(kl_reqtable_count(&p.reqs), 0);
    kl_pipeline_free(&p);
}

/* Raw frames are tracked by the ids in their headers; an answer nobody
 * asked for is returned untracked; a cancelled request's answer is
 * dropped. */
static void test_raw_unknown_and_cancelled(void **state)
{
    kl_pipeline p;
    static uint8_t wire[4 * 1100];
    size_t wl = 0;
    kl_client_result r;
    /* two raw frames (ids 0xDEADBEEF and 5), then half a header */
    static const uint8_t raw[] = {1, 0, 0,    4, 0xDE, 0xAD, 0xBE, 0xEF, 0x11,
                                  0, 1, 0xF1, 1, 0,    0,    4,    0,    0,
                                  0, 5, 0x11, 0, 1,    0xF1, 1,    0,    0};
    kl_pipeline_init(&p);
    assert_int_equal(kl_pipeline_queue_raw(&p, raw, sizeof raw, 0), KL_OK);
    assert_int_equal(kl_reqtable_count(&p.reqs), 2);
    assert_true(kl_reqtable_contains(&p.reqs, 0xDEADBEEF));
    size_t olen;
    const uint8_t *o = kl_pipeline_out(&p, &olen);
    assert_int_equal(olen, sizeof raw);
    assert_memory_equal(o, raw, sizeof raw);

    assert_int_equal(kl_reqtable_cancel(&p.reqs, 5), KL_OK);
    wl += encode_resp(wire + wl, 5, KL_OP_PONG, "");
    wl += encode_resp(wire + wl, 0x12345678, KL_OP_PONG, "x");
    wl += encode_resp(wire + wl, 0xDEADBEEF, KL_OP_PONG, "");
    feed(&p, wire, wl);
    assert_int_equal(kl_pipeline_next(&p, &r, 0), KL_OK);
    /* id 5 was dropped: next is the unknown one */
    assert_int_equal(r.id, 0x12345678);
    assert_false(r.tracked);
    assert_int_equal(r.rtt_ns, 0);
    kl_client_result_free(&r);
    assert_int_equal(kl_pipeline_next(&p, &r, 0), KL_OK);
    assert_int_equal(r.id, 0xDEADBEEF);
    assert_true(r.tracked);
    assert_int_equal(r.opcode, KL_OP_PONG);
    assert_null(r.payload);
    assert_int_equal(r.payload_len, 0);
    kl_client_result_free(&r);
    assert_int_equal(kl_pipeline_next(&p, &r, 0), KL_E_AGAIN);
    assert_int_equal(kl_reqtable_count(&p.reqs), 0);
    kl_pipeline_free(&p);
}

/* A frame that is not a valid response is skipped with KL_E_BAD_VALUE and
 * its id accounted for; the stream stays in sync. */
static void test_malformed_response_skipped(void **state)
{
    kl_pipeline p;
    kl_request_spec s = sign_spec();
    uint32_t a, b;
    kl_client_result r;
    /* an error response with a 2-byte payload, then a request opcode */
    static const uint8_t bad1[] = {1, 0, 0,    9,    0, 0, 0, 1, 0x11,
                                   0, 1, 0xFF, 0x12, 0, 2, 1, 2};
    static const uint8_t bad2[] = {1, 0, 0, 4, 0, 0, 0, 9, 0x11, 0, 1, 0x01};
    static uint8_t good[1100];
    kl_pipeline_init(&p);
    assert_int_equal(kl_pipeline_queue(&p, &s, true, &a, 0), KL_OK);
    assert_int_equal(kl_pipeline_queue(&p, &s, true, &b, 0), KL_OK);
    size_t gl = encode_resp(good, b, KL_OP_RESPONSE, "ok");
    feed(&p, bad1, sizeof bad1);
    feed(&p, bad2, sizeof bad2);
    feed(&p, good, gl);
    assert_int_equal(kl_pipeline_next(&p, &r, 0), KL_E_BAD_VALUE);
    assert_false(kl_reqtable_contains(&p.reqs, a));
    assert_int_equal(kl_pipeline_next(&p, &r, 0), KL_E_BAD_VALUE);
    assert_int_equal(kl_pipeline_next(&p, &r, 0), KL_OK);
    assert_int_equal(r.id, b);
    assert_memory_equal(r.payload, "ok", 2);
    kl_client_result_free(&r);
    assert_int_equal(kl_pipeline_next(&p, &r, 0), KL_E_AGAIN);
    kl_pipeline_free(&p);
}

/* The biggest legal response (65543 bytes) frames fine; reading keeps
 * room for more. */
static void test_max_size_response(void **state)
{
    kl_pipeline p;
    kl_client_result r;
    static uint8_t payload[KL_MAX_RESPONSE_PAYLOAD];
    static uint8_t msg[KL_MAX_MESSAGE];
    size_t n;
    memset(payload, 0xAB, sizeof payload);
    assert_int_equal(kl_response_encode(msg, sizeof msg, 42, KL_OP_PONG,
                                        payload, sizeof payload, &n),
                     KL_OK);
    assert_int_equal(n, KL_MAX_MESSAGE);
    kl_pipeline_init(&p);
    /* in two pieces, each within one read's room */
    feed(&p, msg, 40000);
    assert_int_equal(kl_pipeline_next(&p, &r, 0), KL_E_AGAIN);
    feed(&p, msg + 40000, n - 40000);
    assert_int_equal(kl_pipeline_next(&p, &r, 0), KL_OK);
    assert_int_equal(r.payload_len, sizeof payload);
    assert_memory_equal(r.payload, payload, sizeof payload);
    assert_false(r.tracked);
    kl_client_result_free(&r);
    kl_pipeline_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_encodes_into_one_buffer),
        cmocka_unit_test(test_auto_id_skips_outstanding),
        cmocka_unit_test(test_too_large_leaves_no_trace),
        cmocka_unit_test(test_out_of_order_byte_by_byte),
        cmocka_unit_test(test_raw_unknown_and_cancelled),
        cmocka_unit_test(test_malformed_response_skipped),
        cmocka_unit_test(test_max_size_response),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
