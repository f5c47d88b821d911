/* SPDX-License-Identifier: Apache-2.0 */
/* P3 tag 0x16: the request-context JSON object, and the P9 members keylessd
 * adds to it (deadline_ms, hops, trace). The reference reads only
 * request_id; unknown members and members of the wrong type are ignored so
 * that neither side breaks the other. */
#include "keyless/protocol.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "core/status.h"

/* Length of the longest prefix of s (n bytes) of at most max bytes that does
 * not cut a UTF-8 sequence in two. */
static size_t utf8_prefix(const char *s, size_t n, size_t max)
{
    if (n <= max)
        return n;
    /* Back off over continuation bytes (10xxxxxx) to a sequence start. */
    while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
        max--;
    return max;
}

/* A non-negative JSON integer as a uint32, clamped; false otherwise. */
static bool get_u32(json_t *v, uint32_t *out)
{
    json_int_t i;

    if (!json_is_integer(v))
        return false;
    i = json_integer_value(v);
    if (i < 0)
        return false;
    *out = i > (json_int_t)UINT32_MAX ? UINT32_MAX : (uint32_t)i;
    return true;
}

kl_status kl_req_context_parse(const uint8_t *p, size_t len,
                               kl_req_context *out)
{
    json_error_t jerr;
    json_t *root, *v;

    memset(out, 0, sizeof *out);
    KL_ENSURE(p != NULL && len > 0, KL_E_BAD_VALUE);
    /* jansson bounds nesting depth and rejects invalid UTF-8 and NUL
     * characters, so what comes out is safe to log. */
    root = json_loadb((const char *)p, len, 0, &jerr);
    KL_ENSURE(root != NULL, KL_E_BAD_VALUE);
    if (!json_is_object(root)) {
        json_decref(root);
        return KL_E_BAD_VALUE;
    }

    v = json_object_get(root, "request_id");
    if (json_is_string(v)) {
        size_t n = utf8_prefix(json_string_value(v), json_string_length(v),
                               KL_REQUEST_ID_MAX);
        memcpy(out->request_id, json_string_value(v), n);
        out->request_id[n] = '\0';
    }
    out->has_deadline =
        get_u32(json_object_get(root, "deadline_ms"), &out->deadline_ms);
    out->has_hops = get_u32(json_object_get(root, "hops"), &out->hops);
    v = json_object_get(root, "trace");
    /* A truncated traceparent would be a wrong one: keep it whole or not. */
    if (json_is_string(v) && json_string_length(v) < sizeof out->trace)
        memcpy(out->trace, json_string_value(v), json_string_length(v) + 1);

    json_decref(root);
    return KL_OK;
}

/* ---- formatting --------------------------------------------------------- */

typedef struct out_buf {
    char *p;
    size_t cap;
    size_t len;
    bool overflow;
} out_buf;

static void put(out_buf *b, const char *s, size_t n)
{
    if (b->overflow || b->cap - b->len <= n) { /* keep room for the NUL */
        b->overflow = true;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void puts_(out_buf *b, const char *s)
{
    put(b, s, strlen(s));
}

static void putf(out_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void putf(out_buf *b, const char *fmt, ...)
{
    char tmp[32];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->overflow = true;
        return;
    }
    put(b, tmp, (size_t)n);
}

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    size_t len;

    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4;
    else
        return 0;
    /* Overlong forms, surrogates and code points past U+10FFFF. */
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

/* A JSON string literal. Invalid UTF-8 becomes U+FFFD so the output always
 * parses (the fields may have been filled by code, not by our parser). */
static void put_json_string(out_buf *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;

    put(b, "\"", 1);
    while (i < n) {
        size_t k;

        if (u[i] == '"' || u[i] == '\\') {
            char esc[2] = {'\\', (char)u[i]};
            put(b, esc, 2);
            i++;
        } else if (u[i] < 0x20) {
            putf(b, "\\u%04x", u[i]);
            i++;
        } else if ((k = utf8_seq(u + i, n - i)) == 0) {
            puts_(b, "\\ufffd");
            i++;
        } else {
            put(b, s + i, k);
            i += k;
        }
    }
    put(b, "\"", 1);
}

kl_status kl_req_context_format(char *out, size_t cap,
                                const kl_req_context *ctx)
{
    out_buf b = {out, cap, 0, false};
    const char *sep = "";
    size_t n;

    KL_ENSURE(out != NULL && cap > 0, KL_E_TOO_LARGE);
    puts_(&b, "{");
    n = strnlen(ctx->request_id, sizeof ctx->request_id);
    if (n) {
        puts_(&b, "\"request_id\":");
        put_json_string(&b, ctx->request_id, n);
        sep = ",";
    }
    if (ctx->has_deadline) {
        putf(&b, "%s\"deadline_ms\":%u", sep, (unsigned)ctx->deadline_ms);
        sep = ",";
    }
    if (ctx->has_hops) {
        putf(&b, "%s\"hops\":%u", sep, (unsigned)ctx->hops);
        sep = ",";
    }
    n = strnlen(ctx->trace, sizeof ctx->trace);
    if (n) {
        puts_(&b, sep);
        puts_(&b, "\"trace\":");
        put_json_string(&b, ctx->trace, n);
    }
    puts_(&b, "}");
    if (b.overflow) {
        out[0] = '\0';
        return KL_E_TOO_LARGE;
    }
    out[b.len] = '\0';
    return KL_OK;
}
