/* SPDX-License-Identifier: Apache-2.0 */
/* PEM framing (RFC 7468): finding "-----BEGIN X-----" blocks and decoding
 * their base64 bodies. Done here rather than by OpenSSL's PEM decoder so the
 * loader can pick the private-key block out of a file that also holds
 * certificates or EC parameters, name what a file holds when it holds no
 * private key, and hand DER to the decoder context made for that format. */
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "keys/decode.h"

static const char BEGIN[] = "-----BEGIN ";
static const char DASHES[] = "-----";

static const uint8_t *find(const uint8_t *from, const uint8_t *end,
                           const char *needle)
{
    if (from >= end)
        return NULL;
    return memmem(from, (size_t)(end - from), needle, strlen(needle));
}

kl_status kl_pem_next(const uint8_t *buf, size_t len, size_t *pos,
                      kl_pem_block *blk)
{
    const uint8_t *end = buf + len;
    const uint8_t *b = find(buf + *pos, end, BEGIN);
    KL_ENSURE(b != NULL, KL_E_NOT_FOUND);
    const uint8_t *lab = b + strlen(BEGIN);
    const uint8_t *lab_end = find(lab, end, DASHES);
    if (!lab_end || (size_t)(lab_end - lab) >= sizeof blk->label ||
        memchr(lab, '\n', (size_t)(lab_end - lab))) {
        *pos = (size_t)(lab - buf);
        return KL_E_BAD_VALUE;
    }
    memset(blk, 0, sizeof *blk);
    memcpy(blk->label, lab, (size_t)(lab_end - lab));

    const uint8_t *body = lab_end + strlen(DASHES);
    const uint8_t *nl = memchr(body, '\n', (size_t)(end - body));
    body = nl ? nl + 1 : end;

    char end_line[sizeof blk->label + 16];
    strcpy(end_line, "-----END ");
    strcat(end_line, blk->label);
    strcat(end_line, DASHES);
    const uint8_t *e = find(body, end, end_line);
    if (!e) {
        *pos = len;
        return KL_E_BAD_VALUE;
    }
    blk->body = body;
    blk->body_len = (size_t)(e - body);
    blk->encrypted_header =
        find(body, e, "Proc-Type:") && find(body, e, "ENCRYPTED");
    *pos = (size_t)(e - buf) + strlen(end_line);
    return KL_OK;
}

/* RFC 1421 headers ("Proc-Type: ...", "DEK-Info: ...") end at a blank
 * line; base64 never contains ':'. */
static const uint8_t *skip_headers(const uint8_t *p, const uint8_t *end)
{
    const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl || !memchr(p, ':', (size_t)(nl - p)))
        return p;
    while (p < end) {
        nl = memchr(p, '\n', (size_t)(end - p));
        const uint8_t *line_end = nl ? nl : end;
        int blank = 1;
        for (const uint8_t *q = p; q < line_end; q++)
            if (*q != ' ' && *q != '\t' && *q != '\r')
                blank = 0;
        p = nl ? nl + 1 : end;
        if (blank)
            break;
    }
    return p;
}

kl_status kl_pem_decode_body(const kl_pem_block *blk, uint8_t **out,
                             size_t *out_len)
{
    const uint8_t *end = blk->body + blk->body_len;
    const uint8_t *p = skip_headers(blk->body, end);
    size_t n = (size_t)(end - p);
    KL_ENSURE(n <= INT32_MAX, KL_E_TOO_LARGE);
    /* base64 decodes to at most 3/4 of its length, plus a final block */
    uint8_t *dst = OPENSSL_malloc(n / 4 * 3 + 3 + 1);
    KL_ENSURE(dst != NULL, KL_E_NOMEM);
    EVP_ENCODE_CTX *ctx = EVP_ENCODE_CTX_new();
    if (!ctx) {
        OPENSSL_free(dst);
        return KL_E_NOMEM;
    }
    int got = 0, fin = 0;
    EVP_DecodeInit(ctx);
    int ok = EVP_DecodeUpdate(ctx, dst, &got, p, (int)n) >= 0 &&
             EVP_DecodeFinal(ctx, dst + got, &fin) > 0;
    EVP_ENCODE_CTX_free(ctx);
    if (!ok || got + fin == 0) {
        OPENSSL_clear_free(dst, n / 4 * 3 + 3 + 1);
        return KL_E_BAD_VALUE;
    }
    *out = dst;
    *out_len = (size_t)got + (size_t)fin;
    return KL_OK;
}
