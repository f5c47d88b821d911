/* SPDX-License-Identifier: Apache-2.0 */
/* The captured vectors (tests/vectors/vectors.json) replayed over a real
 * connection to keylessd serving the vectors' keys: each request_hex sent
 * raw, deterministic answers compared byte for byte (ids and padding
 * included), the others verified with the public key. Where protocol.md
 * departs from the reference (tests/vectors/README.md): malformed bodies
 * get `format error` with the request's id and the connection stays up;
 * opcode/key-type mismatches get `cryptography failure`. */
#include "daemon.h"
#include "pki.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "client/verify.h"

static td_daemon d;
static kl_client *c;
static char *dir;
static json_t *root;

static const char *const quirks[] = {
    "rsa-sign-opcode-on-ecdsa-key", "ecdsa-sign-opcode-on-rsa-key",
    "ed25519-opcode-on-ecdsa-key", "rsa-pss-on-ecdsa-key"};

static int setup(void **state)
{
    static const char *const names[] = {"ecdsa-p256", "ecdsa-p384", "ed25519",
                                        "rsa-2048", "rsa-3072"};
    char rel[128];
    json_error_t jerr;
    root = json_load_file(tu_vector_path("vectors.json"), 0, &jerr);
    if (!root)
        fail_msg("vectors.json: line %d: %s", jerr.line, jerr.text);
    dir = tp_tempdir("vectors");
    /* the vector files are read-only for all: copies with mode 0600 */
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(rel, sizeof rel, "keys/%s.key", names[i]);
        tp_copy_key(dir, tu_vector_path(rel));
    }
    td_opts o = {.name = "vectors", .key_dirs = dir};
    td_start(&d, &o);
    c = td_connect(&d);
    return 0;
}

static int teardown(void **state)
{
    kl_client_close(c);
    int st = td_stop(&d, 0);
    json_decref(root);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

static const char *jstr(json_t *v, const char *k)
{
    json_t *s = json_object_get(v, k);
    return json_is_string(s) ? json_string_value(s) : NULL;
}

static bool is_quirk(const char *name)
{
    for (size_t i = 0; i < sizeof quirks / sizeof quirks[0]; i++)
        if (!strcmp(name, quirks[i]))
            return true;
    return false;
}

/* Splits a byte string into its frames (the pipelined vector holds 3). */
static size_t split_frames(const uint8_t *b, size_t len, const uint8_t **f,
                           size_t *flen, size_t max)
{
    size_t n = 0, at = 0;
    while (at < len && n < max) {
        kl_header h;
        size_t fl;
        assert_int_equal(kl_frame_peek(b + at, len - at, &h, &fl), KL_OK);
        f[n] = b + at;
        flen[n++] = fl;
        at += fl;
    }
    assert_int_equal(at, len);
    return n;
}

static uint32_t frame_id(const uint8_t *f)
{
    return (uint32_t)f[4] << 24 | (uint32_t)f[5] << 16 | (uint32_t)f[6] << 8 |
           f[7];
}

static void expect_format_error(const char *name, const uint8_t *req,
                                const kl_client_result *r)
{
    if (r->id != frame_id(req) || r->opcode != KL_OP_ERROR ||
        r->error != KL_ERR_FORMAT)
        fail_msg("%s: expected format error for id %u, got id %u opcode "
                 "0x%02x error 0x%02x",
                 name, frame_id(req), r->id, r->opcode, r->error);
}

/* Verifies a non-deterministic answer with the vector key's public key,
 * for the opcode and payload the request carried. */
static void verify_with_pubkey(json_t *v, const char *name, const uint8_t *req,
                               size_t reqlen, const kl_client_result *r)
{
    const char *key = jstr(v, "key");
    char rel[128], why[256] = "";
    kl_request q;
    if (!key)
        fail_msg("%s: non-deterministic vector without a key", name);
    snprintf(rel, sizeof rel, "pubkeys/%s.pubkey.pem", key);
    EVP_PKEY *pub = tp_load_pub(tu_vector_path(rel));
    assert_int_equal(kl_request_parse(req + 8, reqlen - 8, &q), KL_OK);
    if (r->opcode != KL_OP_RESPONSE)
        fail_msg("%s: expected a success response, got opcode 0x%02x error "
                 "0x%02x (%s)",
                 name, r->opcode, r->error, kl_err_text(r->error));
    if (kl_verify_output(pub, q.opcode, q.payload.ptr, q.payload.len,
                         r->payload, r->payload_len, why, sizeof why) != KL_OK)
        fail_msg("%s: %s", name, why);
    assert_int_equal(r->msg_len, kl_response_len(r->payload_len));
    EVP_PKEY_free(pub);
}

static void replay(json_t *v)
{
    const char *name = jstr(v, "name");
    const char *reqhex = jstr(v, "request_hex");
    const char *resphex = jstr(v, "response_hex");
    bool det = json_is_true(json_object_get(v, "deterministic"));
    size_t reqlen, resplen;
    uint8_t *req = tu_unhex(reqhex, &reqlen);
    uint8_t *resp = tu_unhex(resphex ? resphex : "", &resplen);
    const uint8_t *rf[8], *ef[8];
    size_t rfl[8], efl[8];
    size_t nreq = split_frames(req, reqlen, rf, rfl, 8);
    size_t nresp = resplen ? split_frames(resp, resplen, ef, efl, 8) : 0;

    assert_int_equal(kl_client_send_raw(c, req, reqlen), KL_OK);
    for (size_t i = 0; i < nreq; i++) {
        kl_client_result r;
        kl_status st = kl_client_recv(c, 30000, &r);
        if (st != KL_OK) {
            td_dump_log(&d);
            fail_msg("%s: no response %zu of %zu: %s (%s)", name, i + 1, nreq,
                     kl_status_str(st), kl_client_last_error(c));
        }
        if (!r.tracked)
            fail_msg("%s: response with an id nobody sent: %u", name, r.id);
        if (nresp == 0) {
            /* the reference closed the connection; keylessd answers */
            expect_format_error(name, rf[0], &r);
        } else if (is_quirk(name)) {
            if (r.opcode != KL_OP_ERROR || r.error != KL_ERR_CRYPTO)
                fail_msg("%s: expected cryptography failure, got opcode "
                         "0x%02x error 0x%02x",
                         name, r.opcode, r.error);
        } else if (nresp > 1 || det) {
            /* match by id: responses may come in any order (P8) */
            size_t j = 0;
            while (j < nresp && frame_id(ef[j]) != r.id)
                j++;
            if (j == nresp)
                fail_msg("%s: unexpected id %u", name, r.id);
            if (r.msg_len != efl[j] || memcmp(r.msg, ef[j], efl[j]) != 0) {
                kl_response want;
                kl_header h;
                size_t fl;
                assert_int_equal(kl_frame_peek(ef[j], efl[j], &h, &fl), KL_OK);
                assert_int_equal(
                    kl_response_parse(&h, ef[j] + 8, efl[j] - 8, &want), KL_OK);
                fail_msg("%s: response differs from the capture: %zu bytes "
                         "opcode 0x%02x error 0x%02x, expected %zu bytes "
                         "opcode 0x%02x error 0x%02x",
                         name, r.msg_len, r.opcode, r.error, efl[j],
                         want.opcode, want.error);
            }
        } else {
            verify_with_pubkey(v, name, rf[0], rfl[0], &r);
        }
        kl_client_result_free(&r);
    }
    /* the connection is still usable after every vector */
    td_expect_ping(&d, c);
    free(req);
    free(resp);
}

static void test_replay_all_vectors(void **state)
{
    json_t *vs = json_object_get(root, "vectors");
    size_t i, n = 0, malformed = 0, quirk = 0;
    json_t *v;
    assert_true(json_is_array(vs));
    json_array_foreach(vs, i, v)
    {
        const char *resphex = jstr(v, "response_hex");
        malformed += resphex && !resphex[0];
        quirk += is_quirk(jstr(v, "name"));
        replay(v);
        n++;
    }
    /* every vector was replayed: 49 captured, 4 malformed, 4 quirks */
    assert_int_equal(n, 49);
    assert_int_equal(malformed, 4);
    assert_int_equal(quirk, 4);
}

/* The same bytes again on a fresh connection, all written at once: the
 * answers must match by id whatever their order. */
static void test_all_requests_pipelined(void **state)
{
    json_t *vs = json_object_get(root, "vectors");
    size_t i, total = 0;
    json_t *v;
    kl_client *c2 = td_connect(&d);
    json_array_foreach(vs, i, v)
    {
        size_t len;
        uint8_t *req = tu_unhex(jstr(v, "request_hex"), &len);
        const uint8_t *f[8];
        size_t fl[8];
        total += split_frames(req, len, f, fl, 8);
        assert_int_equal(kl_client_send_raw(c2, req, len), KL_OK);
        free(req);
    }
    assert_int_equal(kl_client_flush(c2, 30000), KL_OK);
    for (size_t k = 0; k < total; k++) {
        kl_client_result r;
        kl_status st = kl_client_recv(c2, 30000, &r);
        if (st != KL_OK) {
            td_dump_log(&d);
            fail_msg("pipelined vectors: response %zu of %zu: %s", k + 1, total,
                     kl_status_str(st));
        }
        assert_true(r.tracked);
        kl_client_result_free(&r);
    }
    assert_int_equal(kl_client_outstanding(c2), 0);
    kl_client_close(c2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_all_vectors),
        cmocka_unit_test(test_all_requests_pipelined),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
