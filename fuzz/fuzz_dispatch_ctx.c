/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for kl_dispatch_context (src/engine/dispatch.c): its
 * fast path for {"deadline_ms":N} must answer exactly what the JSON parser
 * (kl_req_context_parse) answers, for any bytes. The input is also tried
 * behind the fast path's prefix, so the fuzzer reaches its digits at once. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dispatch.h"

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            abort();                                                           \
    } while (0)

static void same(const uint8_t *p, size_t len)
{
    kl_req_context a, b;
    kl_status sa = kl_dispatch_context(p, len, &a);
    kl_status sb = kl_req_context_parse(p, len, &b);
    CHECK(sa == sb);
    if (sa != KL_OK)
        return;
    CHECK(a.has_deadline == b.has_deadline && a.deadline_ms == b.deadline_ms);
    CHECK(a.has_hops == b.has_hops && a.hops == b.hops);
    CHECK(!strcmp(a.request_id, b.request_id) && !strcmp(a.trace, b.trace));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char pre[] = "{\"deadline_ms\":";
    static uint8_t buf[64];
    same(data, size);
    if (size <= sizeof buf - (sizeof pre - 1)) {
        memcpy(buf, pre, sizeof pre - 1);
        if (size)
            memcpy(buf + sizeof pre - 1, data, size);
        same(buf, sizeof pre - 1 + size);
    }
    return 0;
}
