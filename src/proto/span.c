/* SPDX-License-Identifier: Apache-2.0 */
/* P3 tag 0x15: the trace span context, in Jaeger's binary form or its text
 * form. A bad value is logged and ignored by the caller, so this parser only
 * has to say yes or no - but it reads untrusted bytes, so it goes through the
 * bounded cursor like every other parser. */
#include "keyless/protocol.h"

#include <string.h>

#include "core/cursor.h"

static kl_status read_u64(kl_cursor *c, uint64_t *v)
{
    uint32_t hi, lo;

    KL_GUARD(kl_read_u32(c, &hi));
    KL_GUARD(kl_read_u32(c, &lo));
    *v = (uint64_t)hi << 32 | lo;
    return KL_OK;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    uint8_t any = 0;

    for (size_t i = 0; i < n; i++)
        any |= p[i];
    return any == 0;
}

/* Binary form: trace id (16: high then low), span id (8), parent id (8),
 * flags (1), baggage count (4), then count x {key len (4), key, value len
 * (4), value}. The value must be consumed exactly. */
static kl_status parse_binary(const uint8_t *p, size_t len,
                              kl_span_context *out)
{
    kl_cursor c;
    const uint8_t *trace;
    uint32_t count;

    kl_cursor_init(&c, p, len);
    KL_GUARD(kl_read_bytes(&c, sizeof out->trace_id, &trace));
    memcpy(out->trace_id, trace, sizeof out->trace_id);
    KL_GUARD(read_u64(&c, &out->span_id));
    KL_GUARD(read_u64(&c, &out->parent_id));
    KL_GUARD(kl_read_u8(&c, &out->flags));
    KL_GUARD(kl_read_u32(&c, &count));
    /* Each entry consumes at least 8 bytes or fails, so a huge count ends
     * after at most len / 8 rounds. Baggage is skipped, not kept. */
    for (uint32_t i = 0; i < count; i++) {
        uint32_t n;
        const uint8_t *skip;

        KL_GUARD(kl_read_u32(&c, &n));
        KL_GUARD(kl_read_bytes(&c, n, &skip));
        KL_GUARD(kl_read_u32(&c, &n));
        KL_GUARD(kl_read_bytes(&c, n, &skip));
    }
    KL_ENSURE(kl_cursor_left(&c) == 0, KL_E_BAD_VALUE);
    return KL_OK;
}

static int hex_value(uint8_t ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Reads one hex field of 1 .. 2 * out_len digits, ended by ':' (consumed)
 * or, for the last field, by the end of the value, into out right-aligned
 * big-endian (Jaeger writes ids without leading zeros). */
static kl_status hex_field(kl_cursor *c, bool last, uint8_t *out,
                           size_t out_len)
{
    uint8_t digits[32];
    size_t n = 0;
    uint8_t ch;
    bool ended = false;

    while (kl_read_u8(c, &ch) == KL_OK) {
        int v;

        if (ch == ':') {
            KL_ENSURE(!last, KL_E_BAD_VALUE);
            ended = true;
            break;
        }
        v = hex_value(ch);
        KL_ENSURE(v >= 0, KL_E_BAD_VALUE);
        KL_ENSURE(n < 2 * out_len && n < sizeof digits, KL_E_BAD_VALUE);
        digits[n++] = (uint8_t)v;
    }
    KL_ENSURE(ended || last, KL_E_BAD_VALUE);
    KL_ENSURE(n > 0, KL_E_BAD_VALUE);
    memset(out, 0, out_len);
    for (size_t i = 0; i < n; i++) {
        size_t pos = 2 * out_len - n + i; /* nibble index, 0 = top */
        out[pos / 2] |= (uint8_t)(digits[i] << (pos % 2 ? 0 : 4));
    }
    return KL_OK;
}

static uint64_t be64(const uint8_t b[8])
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return v;
}

/* Text form "traceid:spanid:parentid:flags", all hex: trace id up to 32
 * digits, span and parent ids up to 16, flags up to 2. */
static kl_status parse_text(const uint8_t *p, size_t len, kl_span_context *out)
{
    kl_cursor c;
    uint8_t span[8], parent[8];

    kl_cursor_init(&c, p, len);
    KL_GUARD(hex_field(&c, false, out->trace_id, sizeof out->trace_id));
    KL_GUARD(hex_field(&c, false, span, sizeof span));
    KL_GUARD(hex_field(&c, false, parent, sizeof parent));
    KL_GUARD(hex_field(&c, true, &out->flags, 1));
    out->span_id = be64(span);
    out->parent_id = be64(parent);
    return KL_OK;
}

kl_status kl_span_context_parse(const uint8_t *p, size_t len,
                                kl_span_context *out)
{
    kl_span_context sc;

    /* The binary form cannot be mistaken for text: its baggage count would
     * be made of printable bytes (>= 0x20202020 entries) and could never be
     * consumed exactly. So try binary, then text. */
    memset(&sc, 0, sizeof sc);
    if (parse_binary(p, len, &sc) != KL_OK) {
        memset(&sc, 0, sizeof sc);
        if (parse_text(p, len, &sc) != KL_OK)
            return KL_E_BAD_VALUE;
    }
    /* A zero trace id names no trace (Jaeger treats it as invalid). */
    KL_ENSURE(!all_zero(sc.trace_id, sizeof sc.trace_id), KL_E_BAD_VALUE);
    *out = sc;
    return KL_OK;
}
