/* SPDX-License-Identifier: Apache-2.0 */
/* Tag 0x15 span context (both forms) and tag 0x16 request context with the
 * P9 members, parse and format, good and bad values. */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

#include "keyless/protocol.h"

/* ---- span context -------------------------------------------------------- */

/* Jaeger binary form with an optional baggage list. */
static size_t binary_span(uint8_t *out, uint32_t baggage)
{
    size_t n = 0;
    for (int i = 0; i < 16; i++)
        out[n++] = (uint8_t)(0xA0 + i); /* trace id */
    for (int i = 0; i < 8; i++)
        out[n++] = (uint8_t)(0x10 + i); /* span id */
    for (int i = 0; i < 8; i++)
        out[n++] = (uint8_t)(0x20 + i); /* parent id */
    out[n++] = 0x03;                    /* flags */
    out[n++] = 0;
    out[n++] = 0;
    out[n++] = 0;
    out[n++] = (uint8_t)baggage;
    for (uint32_t b = 0; b < baggage; b++) {
        const char *k = "key", *v = "value";
        out[n++] = 0, out[n++] = 0, out[n++] = 0, out[n++] = 3;
        memcpy(out + n, k, 3), n += 3;
        out[n++] = 0, out[n++] = 0, out[n++] = 0, out[n++] = 5;
        memcpy(out + n, v, 5), n += 5;
    }
    return n;
}

static void test_span_binary(void **state)
{
    uint8_t buf[256];
    kl_span_context sc;
    (void)state;
    for (uint32_t bag = 0; bag <= 3; bag++) {
        size_t n = binary_span(buf, bag);
        memset(&sc, 0, sizeof sc);
        assert_int_equal(kl_span_context_parse(buf, n, &sc), KL_OK);
        assert_int_equal(sc.trace_id[0], 0xA0);
        assert_int_equal(sc.trace_id[15], 0xAF);
        assert_int_equal(sc.span_id, 0x1011121314151617ULL);
        assert_int_equal(sc.parent_id, 0x2021222324252627ULL);
        assert_int_equal(sc.flags, 3);
        /* Every truncation fails, and so does one trailing byte. */
        for (size_t cut = 0; cut < n; cut++)
            assert_int_equal(kl_span_context_parse(buf, cut, &sc),
                             KL_E_BAD_VALUE);
        buf[n] = 0;
        assert_int_equal(kl_span_context_parse(buf, n + 1, &sc),
                         KL_E_BAD_VALUE);
    }
    /* A baggage count far beyond the data. */
    size_t n = binary_span(buf, 0);
    buf[n - 4] = 0xFF;
    assert_int_equal(kl_span_context_parse(buf, n, &sc), KL_E_BAD_VALUE);
    /* A key length far beyond the data. */
    n = binary_span(buf, 1);
    buf[37] = 0x7F;
    assert_int_equal(kl_span_context_parse(buf, n, &sc), KL_E_BAD_VALUE);
    /* A zero trace id names no trace. */
    n = binary_span(buf, 0);
    memset(buf, 0, 16);
    assert_int_equal(kl_span_context_parse(buf, n, &sc), KL_E_BAD_VALUE);
}

static kl_status span_text(const char *s, kl_span_context *sc)
{
    memset(sc, 0x5A, sizeof *sc);
    return kl_span_context_parse((const uint8_t *)s, strlen(s), sc);
}

static void test_span_text(void **state)
{
    kl_span_context sc;
    (void)state;
    assert_int_equal(span_text("abc:def:0:1", &sc), KL_OK);
    for (int i = 0; i < 14; i++)
        assert_int_equal(sc.trace_id[i], 0);
    assert_int_equal(sc.trace_id[14], 0x0A);
    assert_int_equal(sc.trace_id[15], 0xBC);
    assert_int_equal(sc.span_id, 0xDEF);
    assert_int_equal(sc.parent_id, 0);
    assert_int_equal(sc.flags, 1);

    assert_int_equal(span_text("0123456789ABCDEFfedcba9876543210:"
                               "ffffffffffffffff:8000000000000001:ff",
                               &sc),
                     KL_OK);
    assert_int_equal(sc.trace_id[0], 0x01);
    assert_int_equal(sc.trace_id[7], 0xEF);
    assert_int_equal(sc.trace_id[8], 0xFE);
    assert_int_equal(sc.trace_id[15], 0x10);
    assert_int_equal(sc.span_id, UINT64_MAX);
    assert_int_equal(sc.parent_id, 0x8000000000000001ULL);
    assert_int_equal(sc.flags, 0xFF);

    const char *bad[] = {
        "",
        ":",
        ":::",
        "abc:def:0",     /* three fields */
        "abc:def:0:1:2", /* five */
        "abc:def:0:",    /* empty flags */
        "abc::0:1",      /* empty span id */
        ":def:0:1",      /* empty trace id */
        "abg:def:0:1",   /* not hex */
        "abc:def:0:1 ",  /* trailing space */
        " abc:def:0:1",
        "abc:def:0:100",                           /* flags over one byte */
        "0:def:0:1",                               /* zero trace id */
        "000000000000000000000000000000000:1:0:1", /* 33 digits */
        "abc:00000000000000001:0:1",               /* 17 digits */
        "abc:def:00000000000000001:1",
        "abc:def:-1:1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (span_text(bad[i], &sc) != KL_E_BAD_VALUE)
            fail_msg("accepted span context \"%s\"", bad[i]);
    }
    /* A failed parse leaves the output alone. */
    assert_int_equal(sc.flags, 0x5A);
    assert_int_equal(kl_span_context_parse(NULL, 0, &sc), KL_E_BAD_VALUE);
}

/* ---- request context ----------------------------------------------------- */

static kl_status ctx(const char *json, kl_req_context *out)
{
    return kl_req_context_parse((const uint8_t *)json, strlen(json), out);
}

static void test_req_context_members(void **state)
{
    kl_req_context c;
    (void)state;
    assert_int_equal(ctx("{\"request_id\":\"req-1\",\"deadline_ms\":1500,"
                         "\"hops\":2,\"trace\":\"00-abc-def-01\","
                         "\"other\":[1,2,{}]}",
                         &c),
                     KL_OK);
    assert_string_equal(c.request_id, "req-1");
    assert_true(c.has_deadline);
    assert_int_equal(c.deadline_ms, 1500);
    assert_true(c.has_hops);
    assert_int_equal(c.hops, 2);
    assert_string_equal(c.trace, "00-abc-def-01");

    /* Only request_id: the reference's own form. */
    assert_int_equal(ctx("{\"request_id\":\"x\"}", &c), KL_OK);
    assert_string_equal(c.request_id, "x");
    assert_false(c.has_deadline);
    assert_false(c.has_hops);
    assert_string_equal(c.trace, "");

    assert_int_equal(ctx("{}", &c), KL_OK);
    assert_string_equal(c.request_id, "");
    assert_int_equal(ctx(" { } \n", &c), KL_OK);
}

static void test_req_context_wrong_types(void **state)
{
    kl_req_context c;
    (void)state;
    assert_int_equal(ctx("{\"request_id\":5,\"deadline_ms\":\"100\","
                         "\"hops\":1.5,\"trace\":false}",
                         &c),
                     KL_OK);
    assert_string_equal(c.request_id, "");
    assert_false(c.has_deadline);
    assert_false(c.has_hops);
    assert_string_equal(c.trace, "");
    /* Negative numbers are not durations or counts. */
    assert_int_equal(ctx("{\"deadline_ms\":-1,\"hops\":-3}", &c), KL_OK);
    assert_false(c.has_deadline);
    assert_false(c.has_hops);
    /* Huge ones are clamped. */
    assert_int_equal(ctx("{\"deadline_ms\":99999999999,\"hops\":0}", &c),
                     KL_OK);
    assert_true(c.has_deadline);
    assert_int_equal(c.deadline_ms, UINT32_MAX);
    assert_true(c.has_hops);
    assert_int_equal(c.hops, 0);
    /* null members are absent. */
    assert_int_equal(ctx("{\"request_id\":null,\"hops\":null}", &c), KL_OK);
    assert_false(c.has_hops);
}

static void test_req_context_not_object(void **state)
{
    kl_req_context c;
    (void)state;
    const char *bad[] = {
        "",
        "[]",
        "\"request_id\"",
        "42",
        "null",
        "{",
        "{\"a\":}",
        "{} {}",
        "{}x",
        "true",
        "{\"request_id\":\"\\u0000\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&c, 0x41, sizeof c);
        if (ctx(bad[i], &c) != KL_E_BAD_VALUE)
            fail_msg("accepted request context '%s'", bad[i]);
        /* The output is reset, so the caller can serve the request. */
        assert_string_equal(c.request_id, "");
        assert_false(c.has_deadline);
    }
    assert_int_equal(kl_req_context_parse(NULL, 0, &c), KL_E_BAD_VALUE);
    /* Invalid UTF-8 is rejected by the JSON parser. */
    const uint8_t bin[] = {'{', '"', 'r', '"', ':', '"', 0xFF, '"', '}'};
    assert_int_equal(kl_req_context_parse(bin, sizeof bin, &c), KL_E_BAD_VALUE);
}

static void test_req_context_truncation(void **state)
{
    char json[1024];
    char id[400];
    kl_req_context c;
    (void)state;
    memset(id, 'a', 300);
    id[300] = 0;
    snprintf(json, sizeof json, "{\"request_id\":\"%s\"}", id);
    assert_int_equal(ctx(json, &c), KL_OK);
    assert_int_equal(strlen(c.request_id), KL_REQUEST_ID_MAX);
    /* Exactly the limit is kept whole. */
    id[KL_REQUEST_ID_MAX] = 0;
    snprintf(json, sizeof json, "{\"request_id\":\"%s\"}", id);
    assert_int_equal(ctx(json, &c), KL_OK);
    assert_string_equal(c.request_id, id);
    /* Never cut a UTF-8 sequence: 127 ASCII bytes then a 3-byte euro sign
     * would cross 128; the euro sign is dropped whole. */
    memset(id, 'b', 127);
    strcpy(id + 127, "\xE2\x82\xAC tail");
    snprintf(json, sizeof json, "{\"request_id\":\"%s\"}", id);
    assert_int_equal(ctx(json, &c), KL_OK);
    assert_int_equal(strlen(c.request_id), 127);
    /* A trace that does not fit is dropped, not cut. */
    memset(id, 't', 64);
    id[64] = 0;
    snprintf(json, sizeof json, "{\"trace\":\"%s\"}", id);
    assert_int_equal(ctx(json, &c), KL_OK);
    assert_string_equal(c.trace, "");
    id[63] = 0;
    snprintf(json, sizeof json, "{\"trace\":\"%s\"}", id);
    assert_int_equal(ctx(json, &c), KL_OK);
    assert_string_equal(c.trace, id);
}

static void test_req_context_format(void **state)
{
    kl_req_context c, back;
    char out[512];
    (void)state;
    memset(&c, 0, sizeof c);
    assert_int_equal(kl_req_context_format(out, sizeof out, &c), KL_OK);
    assert_string_equal(out, "{}");

    strcpy(c.request_id, "r-1");
    c.has_deadline = true;
    c.deadline_ms = 250;
    c.has_hops = true;
    c.hops = 1;
    assert_int_equal(kl_req_context_format(out, sizeof out, &c), KL_OK);
    assert_string_equal(out, "{\"request_id\":\"r-1\",\"deadline_ms\":250,"
                             "\"hops\":1}");
    strcpy(c.trace, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    assert_int_equal(kl_req_context_format(out, sizeof out, &c), KL_OK);
    assert_int_equal(ctx(out, &back), KL_OK);
    assert_memory_equal(&back, &c, sizeof c);

    /* Members alone, without a request id. */
    memset(&c, 0, sizeof c);
    c.has_hops = true;
    c.hops = 3;
    assert_int_equal(kl_req_context_format(out, sizeof out, &c), KL_OK);
    assert_string_equal(out, "{\"hops\":3}");
    memset(&c, 0, sizeof c);
    strcpy(c.trace, "t");
    assert_int_equal(kl_req_context_format(out, sizeof out, &c), KL_OK);
    assert_string_equal(out, "{\"trace\":\"t\"}");
}

static void test_req_context_escaping(void **state)
{
    kl_req_context c, back;
    char out[1024];
    (void)state;
    memset(&c, 0, sizeof c);
    strcpy(c.request_id, "a\"b\\c\n\x01\x7f\xC3\xA9");
    assert_int_equal(kl_req_context_format(out, sizeof out, &c), KL_OK);
    assert_string_equal(out, "{\"request_id\":\"a\\\"b\\\\c\\u000a\\u0001"
                             "\x7f\xC3\xA9\"}");
    assert_int_equal(ctx(out, &back), KL_OK);
    assert_string_equal(back.request_id, c.request_id);
    /* Invalid UTF-8 (lone continuation, overlong, surrogate, truncated)
     * becomes U+FFFD so the output always parses. */
    strcpy(c.request_id, "x\x80y\xC0\xAFz\xED\xA0\x80w\xE2\x82");
    assert_int_equal(kl_req_context_format(out, sizeof out, &c), KL_OK);
    assert_int_equal(ctx(out, &back), KL_OK);
    assert_string_equal(back.request_id, "x\xEF\xBF\xBDy\xEF\xBF\xBD\xEF\xBF"
                                         "\xBDz\xEF\xBF\xBD\xEF\xBF\xBD\xEF"
                                         "\xBF\xBDw\xEF\xBF\xBD\xEF\xBF\xBD");
    /* Every byte value survives a round trip as some valid JSON. */
    for (unsigned b = 1; b < 256; b++) {
        c.request_id[0] = (char)b;
        c.request_id[1] = 0;
        assert_int_equal(kl_req_context_format(out, sizeof out, &c), KL_OK);
        assert_int_equal(ctx(out, &back), KL_OK);
    }
    /* A request_id that fills its whole array (no NUL) is bounded. */
    memset(c.request_id, 'z', sizeof c.request_id);
    assert_int_equal(kl_req_context_format(out, sizeof out, &c), KL_OK);
    assert_int_equal(strlen(out),
                     strlen("{\"request_id\":\"\"}") + sizeof c.request_id);
}

static void test_req_context_too_large(void **state)
{
    kl_req_context c;
    char out[64];
    (void)state;
    memset(&c, 0, sizeof c);
    strcpy(c.request_id, "abc");
    const char *want = "{\"request_id\":\"abc\"}";
    size_t need = strlen(want) + 1;
    assert_int_equal(kl_req_context_format(out, need, &c), KL_OK);
    assert_string_equal(out, want);
    for (size_t cap = 1; cap < need; cap++) {
        memset(out, 'Q', sizeof out);
        assert_int_equal(kl_req_context_format(out, cap, &c), KL_E_TOO_LARGE);
        assert_int_equal(out[0], 0);
        assert_int_equal(out[cap], 'Q'); /* nothing past the cap */
    }
    assert_int_equal(kl_req_context_format(out, 0, &c), KL_E_TOO_LARGE);
    assert_int_equal(kl_req_context_format(NULL, 0, &c), KL_E_TOO_LARGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_span_binary),
        cmocka_unit_test(test_span_text),
        cmocka_unit_test(test_req_context_members),
        cmocka_unit_test(test_req_context_wrong_types),
        cmocka_unit_test(test_req_context_not_object),
        cmocka_unit_test(test_req_context_truncation),
        cmocka_unit_test(test_req_context_format),
        cmocka_unit_test(test_req_context_escaping),
        cmocka_unit_test(test_req_context_too_large),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
