/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the tag 0x15 span-context and tag 0x16
 * request-context parsers (protocol P3, P9) and the request-context
 * formatter: what parses must re-render and parse back unchanged. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keyless/protocol.h"

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            abort();                                                           \
    } while (0)

/* Worst case: 6 bytes per escaped byte in request_id and trace, plus keys
 * and two 10-digit numbers. */
static char g_json[4096];

static void span(const uint8_t *data, size_t size)
{
    kl_span_context sc, back;
    char text[80];
    int n;

    if (kl_span_context_parse(data, size, &sc) != KL_OK)
        return;
    /* Render the text form with every digit and parse it back. */
    n = snprintf(text, sizeof text,
                 "%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x"
                 "%02x%02x:%016llx:%016llx:%02x",
                 sc.trace_id[0], sc.trace_id[1], sc.trace_id[2], sc.trace_id[3],
                 sc.trace_id[4], sc.trace_id[5], sc.trace_id[6], sc.trace_id[7],
                 sc.trace_id[8], sc.trace_id[9], sc.trace_id[10],
                 sc.trace_id[11], sc.trace_id[12], sc.trace_id[13],
                 sc.trace_id[14], sc.trace_id[15],
                 (unsigned long long)sc.span_id,
                 (unsigned long long)sc.parent_id, sc.flags);
    CHECK(n > 0 && (size_t)n < sizeof text);
    CHECK(kl_span_context_parse((const uint8_t *)text, (size_t)n, &back) ==
          KL_OK);
    CHECK(!memcmp(back.trace_id, sc.trace_id, sizeof sc.trace_id));
    CHECK(back.span_id == sc.span_id && back.parent_id == sc.parent_id &&
          back.flags == sc.flags);
}

static void reqctx(const uint8_t *data, size_t size)
{
    kl_req_context c, back;

    if (kl_req_context_parse(data, size, &c) != KL_OK)
        return;
    CHECK(strlen(c.request_id) <= KL_REQUEST_ID_MAX);
    CHECK(strlen(c.trace) < sizeof c.trace);
    CHECK(kl_req_context_format(g_json, sizeof g_json, &c) == KL_OK);
    CHECK(kl_req_context_parse((const uint8_t *)g_json, strlen(g_json),
                               &back) == KL_OK);
    CHECK(!strcmp(back.request_id, c.request_id));
    CHECK(!strcmp(back.trace, c.trace));
    CHECK(back.has_deadline == c.has_deadline &&
          back.deadline_ms == c.deadline_ms);
    CHECK(back.has_hops == c.has_hops && back.hops == c.hops);
}

/* Arbitrary bytes in the struct's strings: the formatter's output must
 * always be a JSON object that parses. */
static void format_any(const uint8_t *data, size_t size)
{
    kl_req_context c, back;
    size_t n;

    memset(&c, 0, sizeof c);
    n = size < KL_REQUEST_ID_MAX ? size : KL_REQUEST_ID_MAX;
    memcpy(c.request_id, data, n);
    n = size < sizeof c.trace - 1 ? size : sizeof c.trace - 1;
    if (size)
        memcpy(c.trace, data + size - n, n);
    c.has_hops = size & 1;
    c.hops = (uint32_t)size * 2654435761u;
    c.has_deadline = (size & 2) != 0;
    c.deadline_ms = UINT32_MAX - (uint32_t)size;
    CHECK(kl_req_context_format(g_json, sizeof g_json, &c) == KL_OK);
    CHECK(kl_req_context_parse((const uint8_t *)g_json, strlen(g_json),
                               &back) == KL_OK);
    CHECK(back.has_hops == c.has_hops && back.has_deadline == c.has_deadline);
    /* Valid UTF-8 without NUL survives unchanged; a NUL ends the string. */
    CHECK(strlen(back.request_id) >= 1 || c.request_id[0] == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    span(data, size);
    reqctx(data, size);
    format_any(data, size);
    return 0;
}
