/* SPDX-License-Identifier: Apache-2.0 */
/* Replays every captured vector (tests/vectors/vectors.json) through the
 * codec: requests parse to the fields the capture describes (or to the
 * specific P3 error for the malformed ones), responses parse, and every
 * response - and every request the reference client library wrote - is
 * re-encoded byte for byte. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "keyless/protocol.h"

static json_t *g_root;

static int load_vectors(void **state)
{
    json_error_t err;
    (void)state;
    g_root = json_load_file(tu_vector_path("vectors.json"), 0, &err);
    if (!g_root) {
        print_error("vectors.json: %s (line %d)\n", err.text, err.line);
        return -1;
    }
    return 0;
}

static int free_vectors(void **state)
{
    (void)state;
    json_decref(g_root);
    return 0;
}

static json_t *all_vectors(void)
{
    json_t *v = json_object_get(g_root, "vectors");
    assert_true(json_is_array(v));
    return v;
}

static json_t *vector(const char *name)
{
    size_t i;
    json_t *v;
    json_array_foreach(all_vectors(), i, v)
    {
        if (strcmp(json_string_value(json_object_get(v, "name")), name) == 0)
            return v;
    }
    fail_msg("no vector %s", name);
    return NULL;
}

static const char *str(json_t *v, const char *key)
{
    json_t *s = json_object_get(v, key);
    return json_is_string(s) ? json_string_value(s) : NULL;
}

/* A message buffer split into frames with kl_frame_peek. */
#define MAX_FRAMES 4
typedef struct frames {
    uint8_t *buf;
    size_t len;
    size_t n;
    kl_header hdr[MAX_FRAMES];
    const uint8_t *msg[MAX_FRAMES];
    size_t msg_len[MAX_FRAMES];
} frames;

static void split(const char *hex, frames *f)
{
    size_t off = 0;
    memset(f, 0, sizeof *f);
    f->buf = tu_unhex(hex, &f->len);
    while (off < f->len) {
        size_t flen;
        assert_true(f->n < MAX_FRAMES);
        assert_int_equal(
            kl_frame_peek(f->buf + off, f->len - off, &f->hdr[f->n], &flen),
            KL_OK);
        f->msg[f->n] = f->buf + off;
        f->msg_len[f->n] = flen;
        f->n++;
        off += flen;
    }
    assert_int_equal(off, f->len);
}

static kl_status parse_req(const frames *f, size_t i, kl_request *req)
{
    memset(req, 0, sizeof *req);
    req->hdr = f->hdr[i];
    return kl_request_parse(f->msg[i] + KL_HEADER_LEN, f->hdr[i].length, req);
}

static void assert_slice_hex(kl_slice s, const char *hex)
{
    size_t n;
    uint8_t *want = tu_unhex(hex, &n);
    assert_int_equal(s.len, n);
    if (n)
        assert_memory_equal(s.ptr, want, n);
    free(want);
}

static void assert_slice_str(kl_slice s, const char *want)
{
    assert_non_null(s.ptr);
    assert_int_equal(s.len, strlen(want));
    assert_memory_equal(s.ptr, want, s.len);
}

/* "0xf1 OpPing" -> 0xF1, checking the name against kl_op_name too. */
static uint8_t opcode_field(const char *s)
{
    char *end;
    unsigned long op = strtoul(s, &end, 16);
    assert_true(op <= 0xFF);
    assert_true(*end == ' ');
    assert_string_equal(kl_op_name((uint8_t)op), end + 1);
    return (uint8_t)op;
}

/* The status each malformed capture must produce (P3); keylessd answers
 * these with `format error` where the reference closed the connection. */
static kl_status expected_parse_status(const char *name)
{
    if (!strcmp(name, "raw-malformed-item-overruns-body"))
        return KL_E_ITEM_OVERRUN;
    if (!strcmp(name, "raw-malformed-opcode-len-2"))
        return KL_E_OPCODE_LEN;
    if (!strcmp(name, "raw-duplicate-tag"))
        return KL_E_DUP_TAG;
    if (!strcmp(name, "raw-bad-client-ip-len"))
        return KL_E_IP_LEN;
    return KL_OK;
}

static void check_request_fields(json_t *v, const kl_request *req)
{
    const char *s;
    if ((s = str(v, "request_opcode"))) {
        assert_true(req->has_opcode);
        assert_int_equal(req->opcode, opcode_field(s));
    }
    if ((s = str(v, "request_payload_hex")))
        assert_slice_hex(req->payload, s);
    /* raw-ski-wrong-length names the key whose SKI it truncated. */
    if ((s = str(v, "ski")) && strcmp(str(v, "name"), "raw-ski-wrong-length")) {
        assert_true(req->has_ski);
        assert_true(kl_request_ski_valid(req));
        size_t n;
        uint8_t *ski = tu_unhex(s, &n);
        assert_int_equal(n, KL_SKI_LEN);
        assert_memory_equal(req->ski, ski, KL_SKI_LEN);
        free(ski);
    }
}

/* Rebuilds the spec the client must have used from a parsed request. */
static void spec_from_request(const kl_request *r, kl_request_spec *s,
                              char strs[3][256])
{
    memset(s, 0, sizeof *s);
    s->id = r->hdr.id;
    s->opcode = r->opcode;
    s->payload = r->payload.ptr;
    s->payload_len = r->payload.len;
    s->supplemental = r->supplemental.ptr;
    s->supplemental_len = r->supplemental.len;
    s->ski = r->has_ski ? r->ski : NULL;
    s->digest = r->has_digest ? r->digest : NULL;
    s->client_ip = r->client_ip.ptr;
    s->client_ip_len = r->client_ip.len;
    s->server_ip = r->server_ip.ptr;
    s->server_ip_len = r->server_ip.len;
    const kl_slice *in[3] = {&r->sni, &r->cert_id, &r->custom_func};
    const char **out[3] = {&s->sni, &s->cert_id, &s->custom_func};
    for (int i = 0; i < 3; i++) {
        if (!in[i]->ptr)
            continue;
        assert_true(in[i]->len < 256);
        memcpy(strs[i], in[i]->ptr, in[i]->len);
        strs[i][in[i]->len] = 0;
        *out[i] = strs[i];
    }
    s->span_context = r->span_context.ptr;
    s->span_context_len = r->span_context.len;
    s->has_compliance = r->has_compliance;
    s->compliance = r->compliance;
}

static void assert_request_reencodes(const frames *f, size_t i,
                                     const kl_request *r, bool padded)
{
    kl_request_spec spec;
    char strs[3][256];
    static uint8_t out[KL_MAX_MESSAGE];
    size_t n = 0;
    spec_from_request(r, &spec, strs);
    spec.no_padding = !padded;
    assert_int_equal(kl_request_encode(out, sizeof out, &spec, &n), KL_OK);
    assert_int_equal(n, f->msg_len[i]);
    assert_memory_equal(out, f->msg[i], n);
}

static void check_response(json_t *v, const frames *f, size_t i)
{
    kl_response resp;
    static uint8_t out[KL_MAX_MESSAGE];
    size_t n = 0;
    json_t *rp = json_object_get(v, "response_parsed");

    assert_int_equal(kl_response_parse(&f->hdr[i], f->msg[i] + KL_HEADER_LEN,
                                       f->hdr[i].length, &resp),
                     KL_OK);
    /* P2: responses always carry 1.0. */
    assert_int_equal(resp.hdr.major, 1);
    assert_int_equal(resp.hdr.minor, 0);
    /* P5: the length follows from the payload alone. */
    assert_int_equal(f->msg_len[i], kl_response_len(resp.payload.len));
    /* Re-encoding reproduces the captured bytes, padding included. The
     * encoder is deterministic given the payload, so this holds for the
     * randomised signatures too. */
    assert_int_equal(kl_response_encode(out, sizeof out, resp.hdr.id,
                                        resp.opcode, resp.payload.ptr,
                                        resp.payload.len, &n),
                     KL_OK);
    assert_int_equal(n, f->msg_len[i]);
    assert_memory_equal(out, f->msg[i], n);
    if (resp.opcode == KL_OP_ERROR) {
        assert_int_equal(
            kl_error_encode(out, sizeof out, resp.hdr.id, resp.error, &n),
            KL_OK);
        assert_int_equal(n, f->msg_len[i]);
        assert_memory_equal(out, f->msg[i], n);
    }
    if (!rp)
        return; /* pipelined: several frames, no per-frame description */
    assert_int_equal(resp.hdr.major,
                     json_integer_value(json_object_get(rp, "major_version")));
    assert_int_equal(resp.hdr.minor,
                     json_integer_value(json_object_get(rp, "minor_version")));
    assert_int_equal(resp.hdr.length,
                     json_integer_value(json_object_get(rp, "length")));
    assert_int_equal(resp.hdr.id,
                     json_integer_value(json_object_get(rp, "id")));
    assert_int_equal(resp.opcode, opcode_field(str(rp, "opcode")));
    if (str(rp, "payload_hex"))
        assert_slice_hex(resp.payload, str(rp, "payload_hex"));
    else
        assert_int_equal(resp.payload.len, 0);
    if (str(rp, "error"))
        assert_string_equal(kl_err_text(resp.error), str(rp, "error"));
    else
        assert_int_equal(resp.error, KL_ERR_NONE);
    /* Padding length and item layout: opcode, payload (only if non-empty),
     * padding (only under 1024 bytes). */
    size_t body = 4 + (resp.payload.len ? 3 + resp.payload.len : 0);
    size_t pad = f->msg_len[i] - KL_HEADER_LEN - body;
    json_t *tags = json_object_get(rp, "item_tags");
    size_t want_tags = 1 + (resp.payload.len ? 1 : 0) + (pad ? 1 : 0);
    assert_int_equal(json_array_size(tags), want_tags);
    assert_int_equal(json_integer_value(json_array_get(tags, 0)), 0x11);
    if (pad) {
        assert_int_equal(
            pad - 3, json_integer_value(json_object_get(rp, "padding_len")));
        assert_int_equal(
            json_integer_value(json_array_get(tags, want_tags - 1)), 0x20);
    } else {
        assert_int_equal(
            0, json_integer_value(json_object_get(rp, "padding_len")));
    }
}

/* Requests that must re-encode byte for byte: everything the reference
 * client library wrote, plus the raw captures in library item order. */
static bool reencodes(json_t *v, bool *padded)
{
    const char *name = str(v, "name");
    *padded = true;
    if (!strcmp(str(v, "source"), "library"))
        return true;
    if (!strcmp(name, "raw-pipelined-3"))
        return true;
    *padded = false;
    return !strcmp(name, "raw-id-echo-ping-unpadded") ||
           !strcmp(name, "raw-max-size-ping") ||
           !strcmp(name, "raw-ping-2000-bytes");
}

static void test_every_vector(void **state)
{
    size_t i, count = 0, reencoded = 0, responses = 0, malformed = 0;
    json_t *v;
    (void)state;

    json_array_foreach(all_vectors(), i, v)
    {
        const char *name = str(v, "name");
        frames rq, rs;
        kl_status want = expected_parse_status(name);
        bool padded;

        split(str(v, "request_hex"), &rq);
        assert_true(rq.n >= 1);
        for (size_t k = 0; k < rq.n; k++) {
            kl_request req;
            kl_status st = parse_req(&rq, k, &req);
            if (st != want)
                fail_msg("%s: parse gave %d, want %d", name, st, want);
            if (st != KL_OK)
                continue;
            if (rq.n == 1)
                check_request_fields(v, &req);
            if (reencodes(v, &padded)) {
                assert_request_reencodes(&rq, k, &req, padded);
                reencoded++;
            }
        }
        if (want != KL_OK) {
            /* The reference closed the connection; there is nothing to
             * compare, but the id is still readable for the format error. */
            assert_string_equal(str(v, "response_hex"), "");
            malformed++;
        }
        if (str(v, "response_hex")[0]) {
            split(str(v, "response_hex"), &rs);
            assert_int_equal(rs.n, rq.n);
            for (size_t k = 0; k < rs.n; k++) {
                bool found = false;
                check_response(v, &rs, k);
                /* Responses echo their request's id, in any order (P8). */
                for (size_t j = 0; j < rq.n; j++)
                    found |= rq.hdr[j].id == rs.hdr[k].id;
                assert_true(found);
                responses++;
            }
            free(rs.buf);
        }
        free(rq.buf);
        count++;
    }
    assert_int_equal(count, 49);
    assert_int_equal(malformed, 4);
    assert_int_equal(responses, 47); /* 45 single + 3 pipelined - 1 */
    assert_int_equal(reencoded, 40);
}

/* ---- the notes of individual captures ----------------------------------- */

static void parse_vector(const char *name, frames *f, kl_request *req)
{
    split(str(vector(name), "request_hex"), f);
    assert_int_equal(f->n, 1);
    assert_int_equal(parse_req(f, 0, req), KL_OK);
}

static void parse_response_vector(const char *name, frames *f,
                                  kl_response *resp)
{
    split(str(vector(name), "response_hex"), f);
    assert_int_equal(f->n, 1);
    assert_int_equal(kl_response_parse(&f->hdr[0], f->msg[0] + KL_HEADER_LEN,
                                       f->hdr[0].length, resp),
                     KL_OK);
}

static void test_raw_id_echo(void **state)
{
    frames f, g;
    kl_request req;
    kl_response resp;
    (void)state;
    parse_vector("raw-id-echo-ping-unpadded", &f, &req);
    assert_int_equal(req.hdr.id, 0xDEADBEEF);
    assert_int_equal(req.opcode, KL_OP_PING);
    assert_slice_str(req.payload, "abc");
    assert_int_equal(req.unknown_items, 0);
    assert_int_equal(req.stray_bytes, 0);
    parse_response_vector("raw-id-echo-ping-unpadded", &g, &resp);
    assert_int_equal(resp.hdr.id, 0xDEADBEEF);
    assert_int_equal(resp.opcode, KL_OP_PONG);
    assert_int_equal(g.msg_len[0], 1024);
    free(f.buf);
    free(g.buf);
}

static void test_raw_unknown_tags(void **state)
{
    frames f;
    kl_request req;
    (void)state;
    parse_vector("raw-unknown-tag-ignored", &f, &req);
    assert_int_equal(req.unknown_items, 2); /* 0x30 and 0xEE */
    assert_int_equal(req.opcode, KL_OP_PING);
    assert_slice_str(req.payload, "abc");
    free(f.buf);
}

static void test_raw_major_version_2(void **state)
{
    frames f, g;
    kl_request req;
    kl_response resp;
    (void)state;
    parse_vector("raw-major-version-2", &f, &req);
    /* P2: reported, not checked. */
    assert_int_equal(req.hdr.major, 2);
    assert_int_equal(req.hdr.minor, 7);
    assert_int_equal(req.opcode, KL_OP_PING);
    assert_slice_str(req.payload, "v2");
    parse_response_vector("raw-major-version-2", &g, &resp);
    assert_int_equal(resp.hdr.major, 1);
    assert_int_equal(resp.hdr.minor, 0);
    free(f.buf);
    free(g.buf);
}

static void test_raw_no_opcode(void **state)
{
    frames f, g;
    kl_request req;
    kl_response resp;
    (void)state;
    parse_vector("raw-empty-body", &f, &req);
    assert_int_equal(req.hdr.length, 0);
    assert_false(req.has_opcode);
    assert_int_equal(req.opcode, KL_OP_NONE);
    assert_int_equal(kl_op_classify(req.opcode), KL_OPC_INVALID);
    assert_null(req.payload.ptr);
    free(f.buf);

    parse_vector("raw-no-opcode-item", &f, &req);
    assert_false(req.has_opcode);
    assert_int_equal(req.opcode, KL_OP_NONE);
    assert_true(req.has_ski);
    assert_int_equal(req.payload.len, 32);
    parse_response_vector("raw-no-opcode-item", &g, &resp);
    assert_int_equal(resp.opcode, KL_OP_ERROR);
    assert_int_equal(resp.error, KL_ERR_BAD_OPCODE);
    free(f.buf);
    free(g.buf);
}

static void test_raw_trailing_bytes(void **state)
{
    frames f;
    kl_request req;
    (void)state;
    parse_vector("raw-trailing-1-2-bytes-ignored", &f, &req);
    assert_int_equal(req.stray_bytes, 2);
    assert_int_equal(req.opcode, KL_OP_PING);
    assert_null(req.payload.ptr);
    assert_int_equal(req.payload.len, 0);
    free(f.buf);
}

static void test_raw_ski_wrong_length(void **state)
{
    frames f, g;
    kl_request req;
    kl_response resp;
    (void)state;
    parse_vector("raw-ski-wrong-length", &f, &req);
    assert_false(req.has_ski); /* 19 bytes: absent (P3) */
    assert_false(kl_request_ski_valid(&req));
    assert_int_equal(req.opcode, KL_OP_ECDSA_SIGN_SHA256);
    assert_int_equal(req.payload.len, 32);
    parse_response_vector("raw-ski-wrong-length", &g, &resp);
    assert_int_equal(resp.error, KL_ERR_INTERNAL);
    free(f.buf);
    free(g.buf);
}

static void test_raw_sizes(void **state)
{
    frames f, g;
    kl_request req;
    kl_response resp;
    (void)state;
    parse_vector("raw-max-size-ping", &f, &req);
    assert_int_equal(req.hdr.length, 0xFFFF);
    assert_int_equal(req.payload.len, KL_MAX_RESPONSE_PAYLOAD);
    parse_response_vector("raw-max-size-ping", &g, &resp);
    assert_int_equal(resp.hdr.length, 0xFFFF);
    assert_int_equal(g.msg_len[0], KL_MAX_MESSAGE);
    assert_int_equal(kl_response_len(KL_MAX_RESPONSE_PAYLOAD), KL_MAX_MESSAGE);
    free(f.buf);
    free(g.buf);

    parse_vector("raw-ping-2000-bytes", &f, &req);
    assert_int_equal(req.payload.len, 2000);
    parse_response_vector("raw-ping-2000-bytes", &g, &resp);
    assert_int_equal(g.msg_len[0], 2015);
    assert_int_equal(resp.hdr.length, 2007);
    free(f.buf);
    free(g.buf);
}

static void test_optional_items(void **state)
{
    frames f;
    kl_request req;
    (void)state;
    parse_vector("ecdsa-with-all-optional-items", &f, &req);
    assert_true(req.has_digest);
    assert_slice_hex(req.client_ip, "c0000201");
    assert_slice_hex(req.server_ip, "7f000001");
    assert_slice_str(req.sni, "localhost");
    assert_slice_str(req.cert_id, "cert-id-1");
    assert_null(req.custom_func.ptr);
    assert_false(req.has_compliance);
    free(f.buf);

    parse_vector("custom-no-func", &f, &req);
    assert_int_equal(req.opcode, KL_OP_CUSTOM);
    assert_slice_str(req.custom_func, "f");
    free(f.buf);

    parse_vector("ping-empty", &f, &req);
    assert_int_equal(req.hdr.id, 1);
    assert_null(req.payload.ptr);
    assert_null(req.sni.ptr);
    assert_false(req.has_ski);
    free(f.buf);
}

static void test_pipelined(void **state)
{
    frames f;
    kl_request req;
    const uint8_t ops[3] = {KL_OP_RSA_SIGN_SHA256, KL_OP_PING,
                            KL_OP_ED25519_SIGN};
    (void)state;
    split(str(vector("raw-pipelined-3"), "request_hex"), &f);
    assert_int_equal(f.n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(f.hdr[i].id, 101 + i);
        assert_int_equal(parse_req(&f, i, &req), KL_OK);
        assert_int_equal(req.opcode, ops[i]);
    }
    /* A partial stream is "not yet", never an error. */
    kl_header h;
    size_t n;
    assert_int_equal(kl_frame_peek(f.buf, 1023, &h, &n), KL_E_AGAIN);
    assert_int_equal(kl_frame_peek(f.buf, 1025, &h, &n), KL_OK);
    assert_int_equal(n, 1024);
    free(f.buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_vector),
        cmocka_unit_test(test_raw_id_echo),
        cmocka_unit_test(test_raw_unknown_tags),
        cmocka_unit_test(test_raw_major_version_2),
        cmocka_unit_test(test_raw_no_opcode),
        cmocka_unit_test(test_raw_trailing_bytes),
        cmocka_unit_test(test_raw_ski_wrong_length),
        cmocka_unit_test(test_raw_sizes),
        cmocka_unit_test(test_optional_items),
        cmocka_unit_test(test_pipelined),
    };
    return cmocka_run_group_tests(tests, load_vectors, free_vectors);
}
