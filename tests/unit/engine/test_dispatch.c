/* SPDX-License-Identifier: Apache-2.0 */
/* src/engine dispatch: every opcode byte maps to the answer protocol P4/P6
 * prescribes, and the captured vectors that need no key are reproduced byte
 * for byte by dispatch + the output buffer. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dispatch.h"
#include "engine/outbuf.h"
#include "testutil.h"

static bool is_key_op(unsigned op)
{
    return (op >= 0x01 && op <= 0x07) || (op >= 0x12 && op <= 0x18) ||
           (op >= 0x35 && op <= 0x37);
}

/* The expected answer per P4/P6, written independently of the code: the
 * kind and the wire code. */
typedef struct {
    kl_disp_kind kind;
    uint8_t code;
} want_disp;

static want_disp expected(unsigned op, bool ski_valid)
{
    if (op == 0xF1)
        return (want_disp){KL_DISP_PONG, KL_ERR_NONE};
    if (op == 0xF0 || op == 0xF2 || op == 0xFF)
        return (want_disp){KL_DISP_ERROR, KL_ERR_UNEXPECTED_OPCODE};
    if (op == 0x21 || op == 0x22 || op == 0x23)
        return (want_disp){KL_DISP_ERROR, KL_ERR_INTERNAL};
    if (is_key_op(op))
        return ski_valid ? (want_disp){KL_DISP_KEY_OP, KL_ERR_NONE}
                         : (want_disp){KL_DISP_ERROR, KL_ERR_INTERNAL};
    return (want_disp){KL_DISP_ERROR, KL_ERR_BAD_OPCODE}; /* 0x24, 0x08... */
}

static void test_every_opcode(void **state)
{
    for (unsigned op = 0; op < 256; op++) {
        for (int variant = 0; variant < 3; variant++) {
            kl_request req;
            memset(&req, 0, sizeof req);
            req.has_opcode = true;
            req.opcode = (uint8_t)op;
            /* 0: no SKI, 1: all-zero SKI, 2: a real SKI */
            req.has_ski = variant > 0;
            if (variant == 2)
                memset(req.ski, 0xAB, sizeof req.ski);
            kl_disp d = kl_dispatch_decide(KL_OK, &req);
            want_disp want = expected(op, variant == 2);
            /* the status is the code's own (core/status.h), so the
             * encoder writes exactly that byte */
            if (d.kind != want.kind || d.err != kl_status_from_p6(want.code))
                fail_msg("opcode 0x%02x variant %d: got kind %d err %s, "
                         "want kind %d err 0x%02x",
                         op, variant, d.kind, kl_status_str(d.err), want.kind,
                         want.code);
        }
    }
}

static void test_parse_errors_are_format_errors(void **state)
{
    static const kl_status errs[] = {KL_E_ITEM_OVERRUN, KL_E_DUP_TAG,
                                     KL_E_OPCODE_LEN,   KL_E_COMPLIANCE_LEN,
                                     KL_E_IP_LEN,       KL_E_TRUNCATED};
    kl_request req;
    memset(&req, 0, sizeof req);
    req.opcode = KL_OP_PING; /* must not matter */
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        kl_disp d = kl_dispatch_decide(errs[i], &req);
        assert_int_equal(d.kind, KL_DISP_ERROR);
        assert_int_equal(d.err, KL_E_FORMAT);
        assert_int_equal(kl_status_to_p6(d.err), KL_ERR_FORMAT);
    }
}

/* What the server writes for a request that needs no key: the bytes of
 * dispatch + output buffer, or NULL for a key operation. */
static kl_outbuf *answer(const uint8_t *msg, size_t len, kl_disp *d)
{
    kl_header hdr;
    size_t flen;
    assert_int_equal(kl_frame_peek(msg, len, &hdr, &flen), KL_OK);
    assert_int_equal(flen, len);
    kl_request req;
    kl_status st = kl_request_parse(msg + 8, flen - 8, &req);
    *d = kl_dispatch_decide(st, &req);
    static kl_outbuf out;
    kl_outbuf_init(&out);
    if (d->kind == KL_DISP_PONG)
        assert_int_equal(kl_outbuf_response(&out, hdr.id, KL_OP_PONG,
                                            req.payload.ptr, req.payload.len),
                         KL_OK);
    else if (d->kind == KL_DISP_ERROR)
        assert_int_equal(kl_outbuf_error(&out, hdr.id, d->err), KL_OK);
    return &out;
}

static void test_vectors_without_keys(void **state)
{
    json_error_t jerr;
    json_t *root = json_load_file(tu_vector_path("vectors.json"), 0, &jerr);
    assert_non_null(root);
    json_t *vectors = json_object_get(root, "vectors");
    size_t i, checked = 0, key_ops = 0;
    json_t *v;
    json_array_foreach(vectors, i, v)
    {
        const char *name = json_string_value(json_object_get(v, "name"));
        const char *rq = json_string_value(json_object_get(v, "request_hex"));
        const char *rs = json_string_value(json_object_get(v, "response_hex"));
        if (!rq || !rs || !*rs || strstr(name, "pipelined"))
            continue; /* closed by the reference (P3 differs) or several */
        size_t rqlen, rslen;
        uint8_t *req = tu_unhex(rq, &rqlen);
        uint8_t *resp = tu_unhex(rs, &rslen);
        kl_disp d;
        kl_outbuf *out = answer(req, rqlen, &d);
        if (d.kind == KL_DISP_KEY_OP) {
            /* answered by a key lookup or the crypto (other tests) */
            key_ops++;
            assert_true(resp[8 + 3] == KL_OP_RESPONSE ||
                        resp[8 + 3] == KL_OP_ERROR);
        } else {
            if (kl_outbuf_pending(out) != rslen ||
                memcmp(kl_outbuf_data(out), resp, rslen) != 0)
                fail_msg("vector %s: answer differs", name);
            checked++;
        }
        kl_outbuf_free(out);
        free(req);
        free(resp);
    }
    json_decref(root);
    /* pings (incl. max size and 2000 bytes), bad/unexpected opcodes,
     * seal/unseal/rpc, missing or short SKI */
    assert_true(checked >= 18);
    assert_true(key_ops >= 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_opcode),
        cmocka_unit_test(test_parse_errors_are_format_errors),
        cmocka_unit_test(test_vectors_without_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
