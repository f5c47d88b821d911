/* SPDX-License-Identifier: Apache-2.0 */
/* Base64 (RFC 4648, the standard alphabet, padded): how the gateway
 * carries keys and values (docs/DESIGN.md "etcd client (src/fleet)").
 * The decoder is strict, as Go's encoding/base64.StdEncoding that wrote
 * it: a length that is a multiple of 4, '=' only at the end. */
#include <stdint.h>
#include <stdlib.h>

#include "fleet/etcd.h"

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *kl_etcd_b64(const void *data, size_t len)
{
    const uint8_t *p = data;
    if (len > (SIZE_MAX / 4) * 3 - 3)
        return NULL;
    size_t n = (len + 2) / 3 * 4;
    char *out = malloc(n + 1), *o = out;
    if (!out)
        return NULL;
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *o++ = b64_alphabet[v >> 18];
        *o++ = b64_alphabet[(v >> 12) & 63];
        *o++ = b64_alphabet[(v >> 6) & 63];
        *o++ = b64_alphabet[v & 63];
    }
    if (len - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        *o++ = b64_alphabet[v >> 18];
        *o++ = b64_alphabet[(v >> 12) & 63];
        *o++ = '=';
        *o++ = '=';
    } else if (len - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        *o++ = b64_alphabet[v >> 18];
        *o++ = b64_alphabet[(v >> 12) & 63];
        *o++ = b64_alphabet[(v >> 6) & 63];
        *o++ = '=';
    }
    *o = '\0';
    return out;
}

static int b64_val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

kl_status kl_etcd_unb64(const char *s, size_t slen, uint8_t **out,
                        size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    /* Go's encoding/base64.StdEncoding: padded, length a multiple of 4 */
    if (slen % 4 != 0)
        return KL_E_BAD_VALUE;
    size_t pad = 0;
    if (slen >= 1 && s[slen - 1] == '=')
        pad++;
    if (slen >= 2 && s[slen - 2] == '=')
        pad++;
    size_t n = slen / 4 * 3 - pad;
    uint8_t *b = malloc(n + 1), *o = b;
    if (!b)
        return KL_E_NOMEM;
    for (size_t i = 0; i < slen; i += 4) {
        uint32_t v = 0;
        int valid = 4;
        for (int j = 0; j < 4; j++) {
            int d = b64_val((unsigned char)s[i + j]);
            if (d < 0) {
                /* '=' only as the last one or two characters */
                if (s[i + j] != '=' || i + 4 != slen || j < 2 ||
                    (j == 2 && s[i + 3] != '=')) {
                    free(b);
                    return KL_E_BAD_VALUE;
                }
                d = 0;
                valid--;
            }
            v = v << 6 | (uint32_t)d;
        }
        *o++ = (uint8_t)(v >> 16);
        if (valid > 2)
            *o++ = (uint8_t)(v >> 8);
        if (valid > 3)
            *o++ = (uint8_t)v;
    }
    b[n] = '\0';
    *out = b;
    *out_len = n;
    return KL_OK;
}
