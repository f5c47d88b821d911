/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the tag-0x15 span context as keylessd's tracing
 * reads and writes it (protocol P3, src/metrics/trace*.c):
 * - whatever kl_span_context_parse accepts, the binary form keylessd
 *   writes from it parses back to the same ids and flags;
 * - the router's attempt rewrite of such a binary copy keeps the trace id
 *   and names the attempt as the caller;
 * - the bytes, used as attribute values (a client's request id, certificate
 *   name), always encode to OTLP JSON that parses. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/trace.h"

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            abort();                                                           \
    } while (0)

static void context(const uint8_t *data, size_t size)
{
    kl_span_context sc, back;
    if (kl_span_context_parse(data, size, &sc) != KL_OK)
        return;
    uint8_t bin[KL_SPANCTX_BINARY_LEN];
    kl_spanctx_write_binary(bin, sc.trace_id, sc.span_id, sc.parent_id,
                            sc.flags);
    CHECK(kl_span_context_parse(bin, sizeof bin, &back) == KL_OK);
    CHECK(!memcmp(back.trace_id, sc.trace_id, 16));
    CHECK(back.span_id == sc.span_id && back.parent_id == sc.parent_id &&
          back.flags == sc.flags);

    /* the attempt rewrite, without a tracer: init keeps the route span */
    kl_trace_attempt a;
    kl_trace_attempt_init(&a, true, bin, sizeof bin);
    CHECK(a.ctx == bin && a.route_span == sc.span_id);
    kl_trace_attempt_begin(NULL, &a, 0, "r", "eu", 1); /* no tracer: no-op */
    CHECK(kl_span_context_parse(bin, sizeof bin, &back) == KL_OK);
    CHECK(back.span_id == sc.span_id);
}

static void encode(const uint8_t *data, size_t size)
{
    kl_span sp;
    memset(&sp, 0, sizeof sp);
    sp.trace_id[0] = 1;
    sp.span_id = size + 1;
    sp.parent_id = size;
    sp.name = "fuzz";
    sp.kind = KL_SPAN_SERVER;
    sp.error = size & 1;
    size_t half = size / 2;
    kl_span_attr_strn(&sp, "a", (const char *)data, half);
    kl_span_attr_strn(&sp, "b", (const char *)data + half, size - half);
    size_t n =
        size < sizeof sp.status_msg - 1 ? size : sizeof sp.status_msg - 1;
    memcpy(sp.status_msg, data, n);
    sp.status_msg[n] = 0;
    size_t len = 0;
    char *text = kl_otlp_encode(&sp, 1, "keylessd", 0, &len);
    CHECK(text != NULL);
    json_error_t e;
    json_t *root = json_loadb(text, len, 0, &e);
    CHECK(root != NULL);
    json_decref(root);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    context(data, size);
    encode(data, size);
    return 0;
}
