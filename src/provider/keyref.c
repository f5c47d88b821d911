/* SPDX-License-Identifier: Apache-2.0 */
/* Key reference body: parser and encoder (see keyref.h). Every byte is read
 * through the bounded cursor. */
#include "provider/keyref.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cursor.h"

__attribute__((format(printf, 3, 4))) static kl_status
fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kl_verrf(err, errlen, fmt, ap);
    va_end(ap);
    return KL_E_BAD_VALUE;
}

void kl_keyref_clear(kl_keyref *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->nservers; i++)
        free(r->servers[i]);
    free(r->cert_file);
    free(r->key_file);
    free(r->ca_file);
    free(r->server_name);
    free(r->fallback_key);
    free(r->spki);
    memset(r, 0, sizeof(*r));
}

/* A string item: 1..KL_KEYREF_MAX_STRING bytes, no NUL inside. */
static kl_status take_string(const uint8_t *v, size_t n, char **out)
{
    KL_ENSURE(n >= 1 && n <= KL_KEYREF_MAX_STRING, KL_E_BAD_VALUE);
    KL_ENSURE(memchr(v, 0, n) == NULL, KL_E_BAD_VALUE);
    char *s = malloc(n + 1);
    KL_ENSURE(s, KL_E_NOMEM);
    memcpy(s, v, n);
    s[n] = '\0';
    *out = s;
    return KL_OK;
}

static char **string_slot(kl_keyref *r, uint8_t tag)
{
    switch (tag) {
    case KL_KREF_CERT: return &r->cert_file;
    case KL_KREF_KEY: return &r->key_file;
    case KL_KREF_CA: return &r->ca_file;
    case KL_KREF_SERVER_NAME: return &r->server_name;
    case KL_KREF_FALLBACK: return &r->fallback_key;
    default: return NULL;
    }
}

static kl_status parse_item(kl_keyref *r, uint8_t tag, const uint8_t *v,
                            size_t n, uint32_t *seen, char *err, size_t errlen)
{
    if (tag >= 0x80)
        return KL_OK; /* optional extension: skipped */
    if (tag != KL_KREF_SERVER) {
        if (tag < 32 && (*seen & (1u << tag)))
            return fail(err, errlen, "item 0x%02x appears twice", tag);
        if (tag < 32)
            *seen |= 1u << tag;
    }
    char **slot = string_slot(r, tag);
    kl_status s;
    switch (tag) {
    case KL_KREF_SKI:
        if (n != KL_SKI_LEN)
            return fail(err, errlen, "SKI is %u bytes, not 20", (unsigned)n);
        memcpy(r->ski, v, KL_SKI_LEN);
        return KL_OK;
    case KL_KREF_SERVER:
        if (r->nservers == KL_KEYREF_MAX_SERVERS)
            return fail(err, errlen, "more than %u key servers",
                        (unsigned)KL_KEYREF_MAX_SERVERS);
        s = take_string(v, n, &r->servers[r->nservers]);
        if (s == KL_OK)
            r->nservers++;
        break;
    case KL_KREF_TIMEOUT:
        if (n != 4)
            return fail(err, errlen, "timeout is %u bytes, not 4", (unsigned)n);
        r->timeout_ms = (uint32_t)v[0] << 24 | (uint32_t)v[1] << 16 |
                        (uint32_t)v[2] << 8 | v[3];
        if (r->timeout_ms == 0 || r->timeout_ms > 600000)
            return fail(err, errlen, "timeout %u ms is out of 1..600000",
                        r->timeout_ms);
        return KL_OK;
    case KL_KREF_SPKI:
        if (n == 0)
            return fail(err, errlen, "empty public key");
        r->spki = malloc(n);
        if (!r->spki)
            return KL_E_NOMEM;
        memcpy(r->spki, v, n);
        r->spki_len = n;
        return KL_OK;
    default:
        if (!slot)
            return fail(err, errlen, "unknown item 0x%02x", tag);
        s = take_string(v, n, slot);
        break;
    }
    if (s == KL_E_BAD_VALUE)
        return fail(err, errlen, "item 0x%02x is not a 1..4095 byte string",
                    tag);
    return s;
}

static kl_status parse_body(const uint8_t *buf, size_t len, kl_keyref *r,
                            char *err, size_t errlen)
{
    kl_cursor c;
    const uint8_t *magic;
    uint32_t seen = 0;
    if (len > KL_KEYREF_MAX_BODY)
        return fail(err, errlen, "reference larger than %u bytes",
                    (unsigned)KL_KEYREF_MAX_BODY);
    kl_cursor_init(&c, buf, len);
    if (kl_read_bytes(&c, 4, &magic) != KL_OK ||
        memcmp(magic, KL_KEYREF_MAGIC, 4) != 0)
        return fail(err, errlen, "not a keyless key reference (version 1)");
    while (kl_cursor_left(&c) > 0) {
        uint8_t tag;
        uint16_t n;
        const uint8_t *v;
        if (kl_read_u8(&c, &tag) != KL_OK || kl_read_u16(&c, &n) != KL_OK ||
            kl_read_bytes(&c, n, &v) != KL_OK)
            return fail(err, errlen, "truncated item at byte %u",
                        (unsigned)(len - kl_cursor_left(&c)));
        KL_GUARD(parse_item(r, tag, v, n, &seen, err, errlen));
    }
    if (!(seen & (1u << KL_KREF_SKI)))
        return fail(err, errlen, "no SKI");
    if (r->nservers == 0)
        return fail(err, errlen, "no key server");
    if (!r->spki)
        return fail(err, errlen, "no public key");
    if ((r->cert_file == NULL) != (r->key_file == NULL))
        return fail(err, errlen,
                    "a client certificate needs its key and the reverse");
    return KL_OK;
}

kl_status kl_keyref_parse(const uint8_t *buf, size_t len, kl_keyref *out,
                          char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (err && errlen)
        err[0] = '\0';
    kl_status s = parse_body(buf, len, out, err, errlen);
    if (s != KL_OK)
        kl_keyref_clear(out);
    if (s == KL_E_NOMEM && err && errlen)
        snprintf(err, errlen, "out of memory");
    return s;
}

static kl_status put_item(kl_writer *w, uint8_t tag, const void *v, size_t n)
{
    KL_ENSURE(n <= 0xFFFF, KL_E_TOO_LARGE);
    KL_GUARD(kl_write_u8(w, tag));
    KL_GUARD(kl_write_u16(w, (uint16_t)n));
    return kl_write_bytes(w, v, n);
}

static kl_status put_string(kl_writer *w, uint8_t tag, const char *s)
{
    if (!s)
        return KL_OK;
    size_t n = strlen(s);
    KL_ENSURE(n >= 1 && n <= KL_KEYREF_MAX_STRING, KL_E_BAD_VALUE);
    return put_item(w, tag, s, n);
}

static kl_status encode_into(const kl_keyref *r, kl_writer *w)
{
    KL_GUARD(kl_write_bytes(w, KL_KEYREF_MAGIC, 4));
    KL_GUARD(put_item(w, KL_KREF_SKI, r->ski, KL_SKI_LEN));
    for (size_t i = 0; i < r->nservers; i++)
        KL_GUARD(put_string(w, KL_KREF_SERVER, r->servers[i]));
    KL_GUARD(put_string(w, KL_KREF_CERT, r->cert_file));
    KL_GUARD(put_string(w, KL_KREF_KEY, r->key_file));
    KL_GUARD(put_string(w, KL_KREF_CA, r->ca_file));
    KL_GUARD(put_string(w, KL_KREF_SERVER_NAME, r->server_name));
    if (r->timeout_ms) {
        uint8_t t[4] = {(uint8_t)(r->timeout_ms >> 24),
                        (uint8_t)(r->timeout_ms >> 16),
                        (uint8_t)(r->timeout_ms >> 8), (uint8_t)r->timeout_ms};
        KL_GUARD(put_item(w, KL_KREF_TIMEOUT, t, 4));
    }
    KL_GUARD(put_string(w, KL_KREF_FALLBACK, r->fallback_key));
    return put_item(w, KL_KREF_SPKI, r->spki, r->spki_len);
}

kl_status kl_keyref_encode(const kl_keyref *r, uint8_t **out, size_t *out_len)
{
    KL_ENSURE(r->nservers >= 1 && r->nservers <= KL_KEYREF_MAX_SERVERS,
              KL_E_BAD_VALUE);
    KL_ENSURE(r->spki && r->spki_len > 0, KL_E_BAD_VALUE);
    KL_ENSURE((r->cert_file == NULL) == (r->key_file == NULL), KL_E_BAD_VALUE);
    KL_ENSURE(r->timeout_ms <= 600000, KL_E_BAD_VALUE);
    uint8_t *buf = malloc(KL_KEYREF_MAX_BODY);
    KL_ENSURE(buf, KL_E_NOMEM);
    kl_writer w;
    kl_writer_init(&w, buf, KL_KEYREF_MAX_BODY);
    kl_status s = encode_into(r, &w);
    if (s != KL_OK) {
        free(buf);
        return s;
    }
    *out = buf;
    *out_len = w.len;
    return KL_OK;
}
