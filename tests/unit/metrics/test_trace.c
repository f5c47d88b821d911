/* SPDX-License-Identifier: Apache-2.0 */
/* Tracing (src/metrics/trace*.c): the OTLP/HTTP JSON encoder,
 * the tag-0x15 decisions (honoured, unsampled, malformed, absent), the
 * binary context keylessd writes, the router's attempt rewrite, sampling,
 * and the rings' drop accounting. */
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics/trace.h"

/* A tracer whose exporter has nowhere to send (nothing listens on port 1
 * of 127.0.0.1): only what the test emits is exported, and fails. */
static kl_tracer *tracer(double rate, unsigned slots)
{
    kl_tracer_opts o = kl_tracer_defaults;
    o.endpoint = "http://127.0.0.1:1/v1/traces";
    o.sample_rate = rate;
    o.rings = 1;
    o.ring_slots = slots;
    o.timeout_ms = 200;
    o.connect_timeout_ms = 200;
    kl_tracer *t = NULL;
    char err[256];
    assert_int_equal(kl_tracer_new(&o, &t, err, sizeof err), KL_OK);
    return t;
}

/* ---- the OTLP encoder ---------------------------------------------------- */

static json_t *get(json_t *o, const char *path)
{
    /* "a.b.0.c": objects by key, arrays by index */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *tok = strtok(buf, "."); tok && o; tok = strtok(NULL, "."))
        o = json_is_array(o) ? json_array_get(o, strtoul(tok, NULL, 10))
                             : json_object_get(o, tok);
    return o;
}

static const char *str(json_t *o, const char *path)
{
    const char *s = json_string_value(get(o, path));
    if (!s)
        fail_msg("no string at %s", path);
    return s;
}

static json_t *attr(json_t *span, const char *key)
{
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(span, "attributes"), i, a)
    {
        if (!strcmp(json_string_value(json_object_get(a, "key")), key))
            return json_object_get(a, "value");
    }
    fail_msg("no attribute %s", key);
    return NULL;
}

static void test_encode(void **state)
{
    (void)state;
    kl_span sp[2];
    memset(sp, 0, sizeof sp);
    for (int i = 0; i < 16; i++)
        sp[0].trace_id[i] = (uint8_t)(0xA0 + i);
    sp[0].span_id = 0x0102030405060708ull;
    sp[0].name = "keyless.request";
    sp[0].kind = KL_SPAN_SERVER;
    sp[0].start_ns = 1000;
    sp[0].end_ns = 5000;
    sp[0].error = true;
    snprintf(sp[0].status_msg, sizeof sp[0].status_msg, "internal error");
    kl_span_attr_str(&sp[0], "keyless.opcode", "OpECDSASignSHA256");
    kl_span_attr_int(&sp[0], "keyless.shard", -3);
    kl_span_attr_bool(&sp[0], "keyless.key_found", true);
    sp[1] = sp[0];
    sp[1].nattrs = 0;
    sp[1].error = false;
    sp[1].parent_id = sp[0].span_id;
    sp[1].span_id = 0xFFFFFFFFFFFFFFFFull;
    sp[1].name = "keyless.execute";
    sp[1].kind = KL_SPAN_INTERNAL;
    sp[1].start_ns = 9000;
    sp[1].end_ns = 8000; /* before its start: clamped */

    size_t len = 0;
    char *text = kl_otlp_encode(sp, 2, NULL, 1700000000000000000ll, &len);
    assert_non_null(text);
    assert_int_equal(strlen(text), len);
    json_error_t e;
    json_t *root = json_loads(text, 0, &e);
    assert_non_null(root);
    assert_string_equal(str(root, "resourceSpans.0.resource.attributes.0.key"),
                        "service.name");
    assert_string_equal(
        str(root, "resourceSpans.0.resource.attributes.0.value.stringValue"),
        "keylessd");
    assert_string_equal(str(root, "resourceSpans.0.scopeSpans.0.scope.name"),
                        "keylessd");
    json_t *spans = get(root, "resourceSpans.0.scopeSpans.0.spans");
    assert_int_equal(json_array_size(spans), 2);
    json_t *s0 = json_array_get(spans, 0), *s1 = json_array_get(spans, 1);
    assert_string_equal(str(s0, "traceId"), "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf");
    assert_string_equal(str(s0, "spanId"), "0102030405060708");
    assert_null(json_object_get(s0, "parentSpanId")); /* a root */
    assert_string_equal(str(s0, "name"), "keyless.request");
    assert_int_equal(json_integer_value(get(s0, "kind")), 2);
    /* 64-bit times are decimal strings: monotonic + offset */
    assert_string_equal(str(s0, "startTimeUnixNano"), "1700000000000001000");
    assert_string_equal(str(s0, "endTimeUnixNano"), "1700000000000005000");
    assert_int_equal(json_integer_value(get(s0, "status.code")), 2);
    assert_string_equal(str(s0, "status.message"), "internal error");
    assert_string_equal(json_string_value(json_object_get(
                            attr(s0, "keyless.opcode"), "stringValue")),
                        "OpECDSASignSHA256");
    assert_string_equal(json_string_value(json_object_get(
                            attr(s0, "keyless.shard"), "intValue")),
                        "-3");
    assert_true(json_is_true(
        json_object_get(attr(s0, "keyless.key_found"), "boolValue")));
    assert_string_equal(str(s1, "parentSpanId"), "0102030405060708");
    assert_string_equal(str(s1, "spanId"), "ffffffffffffffff");
    assert_string_equal(str(s1, "endTimeUnixNano"),
                        str(s1, "startTimeUnixNano"));
    assert_int_equal(json_integer_value(get(s1, "status.code")), 0);
    assert_null(get(s1, "status.message"));
    assert_int_equal(json_array_size(json_object_get(s1, "attributes")), 0);
    json_decref(root);
    free(text);

    /* an empty batch is still a valid request */
    text = kl_otlp_encode(NULL, 0, "svc", 0, &len);
    assert_non_null(text);
    root = json_loads(text, 0, &e);
    assert_int_equal(
        json_array_size(get(root, "resourceSpans.0.scopeSpans.0.spans")), 0);
    assert_string_equal(
        str(root, "resourceSpans.0.resource.attributes.0.value.stringValue"),
        "svc");
    json_decref(root);
    free(text);
}

static void test_attributes(void **state)
{
    (void)state;
    kl_span sp;
    memset(&sp, 0, sizeof sp);
    sp.trace_id[0] = 1;
    sp.span_id = 1;
    sp.name = "x";
    /* a value longer than the slot is cut before a UTF-8 sequence, never
     * inside one: 62 ASCII bytes then a 2-byte character */
    char longv[80];
    memset(longv, 'a', 62);
    memcpy(longv + 62, "\xc3\xa9zzz", 6);
    kl_span_attr_str(&sp, "k.long", longv);
    assert_int_equal(strlen(sp.attrs[0].s), 62);
    /* invalid UTF-8 from a client still yields valid JSON */
    kl_span_attr_str(&sp, "k.bad", "id\xff\xfe-1");
    kl_span_attr_strn(&sp, "k.null", NULL, 5);
    for (int i = 0; i < 10; i++) /* past KL_SPAN_ATTRS: ignored */
        kl_span_attr_int(&sp, "k.n", i);
    assert_int_equal(sp.nattrs, KL_SPAN_ATTRS);
    size_t len;
    char *text = kl_otlp_encode(&sp, 1, NULL, 0, &len);
    assert_non_null(text);
    json_error_t e;
    json_t *root = json_loads(text, 0, &e);
    assert_non_null(root);
    json_t *s0 = get(root, "resourceSpans.0.scopeSpans.0.spans.0");
    assert_string_equal(
        json_string_value(json_object_get(attr(s0, "k.bad"), "stringValue")),
        "id?"
        "?-1");
    assert_string_equal(
        json_string_value(json_object_get(attr(s0, "k.null"), "stringValue")),
        "");
    json_decref(root);
    free(text);
}

/* ---- tag 0x15 ----------------------------------------------------------- */

static void test_binary_context_round_trip(void **state)
{
    (void)state;
    uint8_t trace[16], buf[KL_SPANCTX_BINARY_LEN];
    for (int i = 0; i < 16; i++)
        trace[i] = (uint8_t)(i + 1);
    kl_spanctx_write_binary(buf, trace, 0x1122334455667788ull, 42,
                            KL_TRACE_FLAG_SAMPLED);
    kl_span_context sc;
    assert_int_equal(kl_span_context_parse(buf, sizeof buf, &sc), KL_OK);
    assert_memory_equal(sc.trace_id, trace, 16);
    assert_int_equal(sc.span_id, 0x1122334455667788ull);
    assert_int_equal(sc.parent_id, 42);
    assert_int_equal(sc.flags, 1);
}

static void test_ref_start(void **state)
{
    (void)state;
    kl_tracer *t = tracer(1.0, 16);
    kl_trace_ring *r = kl_tracer_ring(t, 0);
    assert_non_null(r);
    assert_null(kl_tracer_ring(t, 1));
    kl_trace_ref ref;
    bool bad;

    /* a sampled context: its trace, its span as our parent */
    const char *txt = "abc:def:1:1";
    kl_trace_ref_start(r, (const uint8_t *)txt, strlen(txt), &ref, &bad);
    assert_false(bad);
    assert_true(ref.sampled);
    assert_int_equal(ref.parent_id, 0xDEF);
    assert_int_equal(ref.trace_id[15], 0xBC);
    assert_int_equal(ref.trace_id[14], 0x0A);
    assert_true(ref.span_id != 0 && ref.span_id != 0xDEF);

    /* binary form, sampled flag with the debug bit */
    uint8_t bin[KL_SPANCTX_BINARY_LEN], trace[16] = {9};
    kl_spanctx_write_binary(bin, trace, 77, 5, 0x03);
    kl_trace_ref_start(r, bin, sizeof bin, &ref, &bad);
    assert_true(ref.sampled && !bad);
    assert_int_equal(ref.parent_id, 77);
    assert_memory_equal(ref.trace_id, trace, 16);

    /* unsampled: the caller decided, even at rate 1 */
    txt = "abc:def:1:0";
    kl_trace_ref_start(r, (const uint8_t *)txt, strlen(txt), &ref, &bad);
    assert_false(bad);
    assert_false(ref.sampled);
    kl_spanctx_write_binary(bin, trace, 77, 5, 0x02); /* debug only */
    kl_trace_ref_start(r, bin, sizeof bin, &ref, &bad);
    assert_false(ref.sampled);

    /* malformed values: flagged bad, then treated as absent (rate 1: a
     * new root trace) */
    const char *bad_values[] = {
        "",
        "abc",
        "abc:def:1",
        "abc:def:1:1:",
        ":def:1:1",
        "abc::1:1",
        "abc:def:1:",
        "xyz:def:1:1",
        "0:def:1:1",                               /* zero trace id */
        "00000000000000000000000000000000a:1:1:1", /* 33 digits */
        "abc:11112222333344445:1:1",               /* 17 digits */
        "abc:def:1:100",                           /* 3 flag digits */
    };
    for (size_t i = 0; i < sizeof bad_values / sizeof *bad_values; i++) {
        kl_trace_ref_start(r, (const uint8_t *)bad_values[i],
                           strlen(bad_values[i]), &ref, &bad);
        if (!bad)
            fail_msg("accepted \"%s\"", bad_values[i]);
        assert_true(ref.sampled);
        assert_int_equal(ref.parent_id, 0);
    }
    kl_spanctx_write_binary(bin, trace, 77, 5, 1);
    kl_trace_ref_start(r, bin, sizeof bin - 1, &ref, &bad); /* cut */
    assert_true(bad);
    memset(bin, 0, 16); /* zero trace id */
    kl_trace_ref_start(r, bin, sizeof bin, &ref, &bad);
    assert_true(bad);

    /* absent: the rate decides; each trace is new */
    uint8_t first[16];
    kl_trace_ref_start(r, NULL, 0, &ref, &bad);
    assert_true(ref.sampled && !bad);
    memcpy(first, ref.trace_id, 16);
    kl_trace_ref_start(r, NULL, 0, &ref, &bad);
    assert_memory_not_equal(first, ref.trace_id, 16);
    kl_tracer_free(t, 100);

    t = tracer(0.0, 16);
    r = kl_tracer_ring(t, 0);
    kl_trace_ref_start(r, NULL, 0, &ref, &bad);
    assert_false(ref.sampled);
    txt = "abc:def:1:1"; /* a sampled context is honoured at rate 0 */
    kl_trace_ref_start(r, (const uint8_t *)txt, strlen(txt), &ref, &bad);
    assert_true(ref.sampled);
    kl_tracer_free(t, 100);
}

static void test_sample_rate(void **state)
{
    (void)state;
    kl_tracer *t = tracer(0.25, 16);
    kl_trace_ring *r = kl_tracer_ring(t, 0);
    unsigned yes = 0;
    for (int i = 0; i < 20000; i++)
        yes += kl_trace_ring_sample(r);
    assert_in_range(yes, 4500, 5500);
    kl_tracer_free(t, 100);
}

/* ---- the router's attempts ---------------------------------------------- */

static void test_attempt_rewrites_context(void **state)
{
    (void)state;
    kl_tracer *t = tracer(1.0, 16);
    uint8_t trace[16] = {1, 2, 3}, ctx[KL_SPANCTX_BINARY_LEN];
    kl_spanctx_write_binary(ctx, trace, 500 /* route span */, 400, 1);
    kl_trace_attempt a;
    kl_trace_attempt_init(&a, false, ctx, sizeof ctx);
    assert_null(a.ctx); /* not traced: nothing is touched */
    kl_trace_attempt_init(&a, true, ctx, sizeof ctx - 1);
    assert_null(a.ctx);
    kl_trace_attempt_init(&a, true, ctx, sizeof ctx);
    assert_int_equal(a.route_span, 500);
    kl_span_context sc;
    for (unsigned i = 1; i <= 2; i++) {
        kl_trace_attempt_begin(t, &a, 0, "r1", "eu", 2);
        assert_int_equal(kl_span_context_parse(ctx, sizeof ctx, &sc), KL_OK);
        assert_int_equal(sc.span_id, a.span_id); /* goes upstream */
        assert_int_equal(sc.parent_id, 500);
        assert_memory_equal(sc.trace_id, trace, 16);
        assert_int_equal(a.n, i);
        kl_trace_attempt_end(t, &a, "timeout", true);
        assert_int_equal(a.span_id, 0);
        kl_trace_attempt_end(t, &a, "twice", true); /* no-op */
    }
    kl_tracer_free(t, 100);
    /* 2 x (choose + attempt) spans, none exported (nothing listens) */
}

/* ---- rings -------------------------------------------------------------- */

static void test_full_ring_drops_and_counts(void **state)
{
    (void)state;
    kl_tracer *t = tracer(1.0, 16);
    kl_trace_ring *r = kl_tracer_ring(t, 0);
    kl_span sp;
    memset(&sp, 0, sizeof sp);
    sp.trace_id[0] = 1;
    sp.span_id = 1;
    sp.name = "x";
    for (int i = 0; i < 1000; i++)
        kl_trace_ring_emit(r, &sp);
    for (int i = 0; i < 10; i++)
        kl_tracer_emit(t, &sp); /* the shared ring */
    kl_tracer_stats st;
    kl_tracer_get_stats(t, &st);
    assert_true(st.dropped_full >= 1000 - 2 * 16);
    /* every span is accounted for: the exporter takes what the rings
     * kept, fails to send it and counts it */
    for (int i = 0; i < 100; i++) {
        kl_tracer_get_stats(t, &st);
        if (st.dropped_full + st.dropped_export == 1010)
            break;
        usleep(50000);
    }
    assert_int_equal(st.dropped_full + st.dropped_export, 1010);
    assert_int_equal(st.exported, 0);
    assert_true(st.export_failures >= 1);
    kl_tracer_free(t, 100);
}

static void test_bad_endpoint(void **state)
{
    (void)state;
    kl_tracer_opts o = kl_tracer_defaults;
    o.endpoint = "udp://localhost:6831";
    kl_tracer *t = NULL;
    char err[256];
    assert_int_equal(kl_tracer_new(&o, &t, err, sizeof err), KL_E_CONFIG);
    assert_null(t);
    assert_non_null(strstr(err, "tracing_address"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_attributes),
        cmocka_unit_test(test_binary_context_round_trip),
        cmocka_unit_test(test_ref_start),
        cmocka_unit_test(test_sample_rate),
        cmocka_unit_test(test_attempt_rewrites_context),
        cmocka_unit_test(test_full_ring_drops_and_counts),
        cmocka_unit_test(test_bad_endpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
