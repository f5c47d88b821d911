/* SPDX-License-Identifier: Apache-2.0 */
/* The one bounded cursor through which every untrusted byte is read.
 * A read either succeeds completely or fails with
 * KL_E_TRUNCATED and leaves the cursor unchanged; nothing indexes a raw frame
 * directly, so an overread is impossible by construction.
 * The writer is its twin for encoding: a write that does not fit fails with
 * KL_E_TOO_LARGE and writes nothing. */
#ifndef KL_CORE_CURSOR_H
#define KL_CORE_CURSOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/status.h"

typedef struct kl_cursor {
    const uint8_t *p;
    size_t left;
} kl_cursor;

static inline void kl_cursor_init(kl_cursor *c, const uint8_t *p, size_t len)
{
    c->p = p;
    c->left = len;
}

static inline size_t kl_cursor_left(const kl_cursor *c)
{
    return c->left;
}

KL_WUR static inline kl_status kl_read_u8(kl_cursor *c, uint8_t *v)
{
    KL_ENSURE(c->left >= 1, KL_E_TRUNCATED);
    *v = c->p[0];
    c->p += 1;
    c->left -= 1;
    return KL_OK;
}

KL_WUR static inline kl_status kl_read_u16(kl_cursor *c, uint16_t *v)
{
    KL_ENSURE(c->left >= 2, KL_E_TRUNCATED);
    *v = (uint16_t)((uint16_t)c->p[0] << 8 | c->p[1]);
    c->p += 2;
    c->left -= 2;
    return KL_OK;
}

KL_WUR static inline kl_status kl_read_u32(kl_cursor *c, uint32_t *v)
{
    KL_ENSURE(c->left >= 4, KL_E_TRUNCATED);
    *v = (uint32_t)c->p[0] << 24 | (uint32_t)c->p[1] << 16 |
         (uint32_t)c->p[2] << 8 | (uint32_t)c->p[3];
    c->p += 4;
    c->left -= 4;
    return KL_OK;
}

/* Points *out at the next n bytes (no copy) and skips them. */
KL_WUR static inline kl_status kl_read_bytes(kl_cursor *c, size_t n,
                                             const uint8_t **out)
{
    KL_ENSURE(c->left >= n, KL_E_TRUNCATED);
    *out = c->p;
    c->p += n;
    c->left -= n;
    return KL_OK;
}

/* Carves the next n bytes into their own cursor. */
KL_WUR static inline kl_status kl_read_sub(kl_cursor *c, size_t n,
                                           kl_cursor *sub)
{
    const uint8_t *p;
    KL_GUARD(kl_read_bytes(c, n, &p));
    kl_cursor_init(sub, p, n);
    return KL_OK;
}

typedef struct kl_writer {
    uint8_t *p;
    size_t cap;
    size_t len;
} kl_writer;

static inline void kl_writer_init(kl_writer *w, uint8_t *p, size_t cap)
{
    w->p = p;
    w->cap = cap;
    w->len = 0;
}

KL_WUR static inline kl_status kl_write_u8(kl_writer *w, uint8_t v)
{
    KL_ENSURE(w->cap - w->len >= 1, KL_E_TOO_LARGE);
    w->p[w->len++] = v;
    return KL_OK;
}

KL_WUR static inline kl_status kl_write_u16(kl_writer *w, uint16_t v)
{
    KL_ENSURE(w->cap - w->len >= 2, KL_E_TOO_LARGE);
    w->p[w->len++] = (uint8_t)(v >> 8);
    w->p[w->len++] = (uint8_t)v;
    return KL_OK;
}

KL_WUR static inline kl_status kl_write_u32(kl_writer *w, uint32_t v)
{
    KL_ENSURE(w->cap - w->len >= 4, KL_E_TOO_LARGE);
    w->p[w->len++] = (uint8_t)(v >> 24);
    w->p[w->len++] = (uint8_t)(v >> 16);
    w->p[w->len++] = (uint8_t)(v >> 8);
    w->p[w->len++] = (uint8_t)v;
    return KL_OK;
}

KL_WUR static inline kl_status kl_write_bytes(kl_writer *w, const void *src,
                                              size_t n)
{
    KL_ENSURE(w->cap - w->len >= n, KL_E_TOO_LARGE);
    if (n)
        memcpy(w->p + w->len, src, n);
    w->len += n;
    return KL_OK;
}

KL_WUR static inline kl_status kl_write_zeros(kl_writer *w, size_t n)
{
    KL_ENSURE(w->cap - w->len >= n, KL_E_TOO_LARGE);
    memset(w->p + w->len, 0, n);
    w->len += n;
    return KL_OK;
}

#endif
