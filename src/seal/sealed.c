/* SPDX-License-Identifier: Apache-2.0 */
/* The sealed file's bytes: the strict parser and the encoder
 * (docs/SEALING.md "The file, byte by byte"). The cryptography that fills
 * and opens a file is in sealed_crypto.c. Every untrusted byte is read
 * through the core cursor; every field is checked before the next is
 * read, and the first problem is reported with its offset. */
#include "seal/sealed.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>

#include "core/cursor.h"

bool kl_sealed_name_ok(const char *s, size_t len)
{
    if (!s || len == 0 || len > KL_SEALED_MAX_NAME)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' ||
                  c == '-';
        if (!ok)
            return false;
    }
    return true;
}

void kl_sealed_fingerprint(const uint8_t *pk, size_t pk_len, char *buf)
{
    uint8_t md[32];
    unsigned int n = 0;
    memcpy(buf, "SHA256:", 8);
    if (EVP_Digest(pk, pk_len, md, &n, EVP_sha256(), NULL) != 1 || n != 32)
        return; /* "SHA256:" alone: OpenSSL could not hash */
    for (size_t i = 0; i < 16; i++)
        snprintf(buf + 7 + 2 * i, 3, "%02x", md[i]);
}

void kl_sealed_free(kl_sealed *s)
{
    if (!s)
        return;
    free(s->policy_text);
    kl_policy_free(s->policy);
    free(s->spki);
    free(s->rcpt);
    free(s->ct);
    free(s->header);
    free(s);
}

/* ---- encoding ------------------------------------------------------- */

/* The header; with bind_only, without the enc and wrapped fields (what
 * the wraps' info digests). w->p may be NULL with cap 0 to measure: the
 * writes then fail, so measuring uses header_size instead. */
static kl_status put_header(const kl_sealed *s, kl_writer *w, bool bind_only)
{
    KL_GUARD(kl_write_bytes(w, KL_SEALED_MAGIC, KL_SEALED_MAGIC_LEN));
    KL_GUARD(kl_write_u16(w, KL_SEALED_VERSION));
    KL_GUARD(kl_write_u16(w, KL_HPKE_AEAD_AES256GCM));
    KL_GUARD(kl_write_u16(w, (uint16_t)s->policy_len));
    KL_GUARD(kl_write_bytes(w, s->policy_text, s->policy_len));
    KL_GUARD(kl_write_bytes(w, s->ski, KL_SEALED_SKI_LEN));
    KL_GUARD(kl_write_u16(w, (uint16_t)s->spki_len));
    KL_GUARD(kl_write_bytes(w, s->spki, s->spki_len));
    KL_GUARD(kl_write_u16(w, (uint16_t)s->n_rcpt));
    for (size_t i = 0; i < s->n_rcpt; i++) {
        const kl_sealed_recipient *r = &s->rcpt[i];
        size_t nlen = strlen(r->name);
        KL_GUARD(kl_write_u8(w, r->kind));
        KL_GUARD(kl_write_u8(w, (uint8_t)nlen));
        KL_GUARD(kl_write_bytes(w, r->name, nlen));
        KL_GUARD(kl_write_u16(w, r->kem));
        KL_GUARD(kl_write_bytes(w, r->pk, r->pk_len));
        if (bind_only)
            continue;
        KL_GUARD(kl_write_bytes(w, r->enc, r->pk_len));
        KL_GUARD(kl_write_bytes(w, r->wrapped, KL_SEALED_WRAPPED_LEN));
    }
    return KL_OK;
}

static size_t header_size(const kl_sealed *s, bool bind_only)
{
    size_t n = KL_SEALED_MAGIC_LEN + 2 + 2 + 2 + s->policy_len +
               KL_SEALED_SKI_LEN + 2 + s->spki_len + 2;
    for (size_t i = 0; i < s->n_rcpt; i++) {
        n += 1 + 1 + strlen(s->rcpt[i].name) + 2 + s->rcpt[i].pk_len;
        if (!bind_only)
            n += s->rcpt[i].pk_len + KL_SEALED_WRAPPED_LEN;
    }
    return n;
}

/* The fields' own limits, so that an encoder never writes what the
 * parser would refuse. */
static kl_status fields_ok(const kl_sealed *s)
{
    KL_ENSURE(s->policy_len >= 1 && s->policy_len <= KL_POLICY_MAX_LEN &&
                  s->spki_len >= 1 && s->spki_len <= KL_SEALED_MAX_SPKI &&
                  s->n_rcpt >= 1 && s->n_rcpt <= KL_SEALED_MAX_RECIPIENTS,
              KL_E_TOO_LARGE);
    for (size_t i = 0; i < s->n_rcpt; i++) {
        const kl_sealed_recipient *r = &s->rcpt[i];
        KL_ENSURE(kl_sealed_name_ok(r->name, strlen(r->name)) &&
                      r->pk_len == kl_hpke_pk_len(r->kem),
                  KL_E_BAD_VALUE);
    }
    return KL_OK;
}

kl_status kl_sealed_bind_digest(kl_sealed *s)
{
    KL_GUARD(fields_ok(s));
    size_t n = header_size(s, true);
    uint8_t *buf = malloc(n);
    KL_ENSURE(buf != NULL, KL_E_NOMEM);
    kl_writer w;
    kl_writer_init(&w, buf, n);
    kl_status st = put_header(s, &w, true);
    unsigned int mdlen = 0;
    if (st == KL_OK &&
        (EVP_Digest(buf, w.len, s->bind, &mdlen, EVP_sha256(), NULL) != 1 ||
         mdlen != KL_HPKE_HASH_LEN))
        st = KL_E_INTERNAL;
    free(buf);
    return st;
}

kl_status kl_sealed_make_header(kl_sealed *s)
{
    KL_GUARD(kl_sealed_bind_digest(s));
    size_t hlen = header_size(s, false);
    uint8_t *hdr = malloc(hlen);
    KL_ENSURE(hdr != NULL, KL_E_NOMEM);
    kl_writer w;
    kl_writer_init(&w, hdr, hlen);
    kl_status st = put_header(s, &w, false);
    if (st != KL_OK || w.len != hlen) {
        free(hdr);
        return st != KL_OK ? st : KL_E_INTERNAL;
    }
    free(s->header);
    s->header = hdr;
    s->header_len = hlen;
    return KL_OK;
}

kl_status kl_sealed_encode(kl_sealed *s, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    KL_ENSURE(s->ct_len > KL_HPKE_TAG_LEN &&
                  s->ct_len <= KL_SEALED_MAX_BODY + KL_HPKE_TAG_LEN,
              KL_E_TOO_LARGE);
    KL_GUARD(kl_sealed_make_header(s));
    size_t total = s->header_len + KL_HPKE_NONCE_LEN + 4 + s->ct_len;
    uint8_t *buf = malloc(total);
    KL_ENSURE(buf != NULL, KL_E_NOMEM);
    kl_writer w;
    kl_writer_init(&w, buf, total);
    kl_status st = kl_write_bytes(&w, s->header, s->header_len);
    if (st == KL_OK)
        st = kl_write_bytes(&w, s->nonce, KL_HPKE_NONCE_LEN);
    if (st == KL_OK)
        st = kl_write_u32(&w, (uint32_t)s->ct_len);
    if (st == KL_OK)
        st = kl_write_bytes(&w, s->ct, s->ct_len);
    if (st != KL_OK || w.len != total) {
        free(buf);
        return st != KL_OK ? st : KL_E_INTERNAL;
    }
    *out = buf;
    *len = total;
    return KL_OK;
}

/* ---- parsing -------------------------------------------------------- */

typedef struct parse_state {
    kl_cursor c;
    const uint8_t *start;
    char *err;
    size_t errlen;
} parse_state;

static size_t at(const parse_state *p)
{
    return (size_t)(p->c.p - p->start);
}

/* Reports "at OFFSET: FIELD: WHAT" and returns st. */
__attribute__((format(printf, 4, 5))) static kl_status
fail(parse_state *p, kl_status st, size_t off, const char *fmt, ...)
{
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    kl_errf(p->err, p->errlen, "at %zu: %s", off, what);
    return st;
}

/* n bytes of field, or "truncated". */
static kl_status take(parse_state *p, size_t n, const uint8_t **out,
                      const char *field)
{
    if (kl_read_bytes(&p->c, n, out) != KL_OK)
        return fail(p, KL_E_TRUNCATED, at(p),
                    "%s: the file ends %zu byte(s) into it, %zu needed", field,
                    kl_cursor_left(&p->c), n);
    return KL_OK;
}

static kl_status take_u16(parse_state *p, uint16_t *v, const char *field)
{
    const uint8_t *b = NULL;
    KL_GUARD(take(p, 2, &b, field));
    *v = (uint16_t)(b[0] << 8 | b[1]);
    return KL_OK;
}

static kl_status parse_preamble(parse_state *p)
{
    const uint8_t *b = NULL;
    uint16_t v;
    KL_GUARD(take(p, KL_SEALED_MAGIC_LEN, &b, "magic"));
    if (memcmp(b, KL_SEALED_MAGIC, KL_SEALED_MAGIC_LEN) != 0)
        return fail(p, KL_E_BAD_VALUE, 0,
                    "magic: not a sealed key file (it does not start with "
                    "\"" KL_SEALED_MAGIC "\")");
    KL_GUARD(take_u16(p, &v, "version"));
    if (v != KL_SEALED_VERSION)
        return fail(p, KL_E_BAD_VALUE, at(p) - 2,
                    "version: %u is not one this keylessd reads (%u)", v,
                    KL_SEALED_VERSION);
    KL_GUARD(take_u16(p, &v, "aead"));
    if (v != KL_HPKE_AEAD_AES256GCM)
        return fail(p, KL_E_BAD_VALUE, at(p) - 2,
                    "aead: 0x%04x is not AES-256-GCM (0x0002)", v);
    return KL_OK;
}

/* The policy must parse and be in canonical form: one policy, one
 * spelling, so that the bytes bound into the wraps are the policy. */
static kl_status parse_policy(parse_state *p, kl_sealed *s)
{
    uint16_t n;
    const uint8_t *b = NULL;
    KL_GUARD(take_u16(p, &n, "policy length"));
    size_t off = at(p);
    if (n == 0 || n > KL_POLICY_MAX_LEN)
        return fail(p, KL_E_BAD_VALUE, off - 2,
                    "policy length: %u is not within 1..%d", n,
                    KL_POLICY_MAX_LEN);
    KL_GUARD(take(p, n, &b, "policy"));
    char perr[160];
    kl_status st = kl_policy_parse((const char *)b, n, &s->policy, NULL, perr,
                                   sizeof perr);
    if (st != KL_OK)
        return fail(p, KL_E_BAD_VALUE, off, "policy: %s", perr);
    char canon[KL_POLICY_MAX_LEN + 1];
    size_t clen = 0;
    if (kl_policy_print(s->policy, canon, sizeof canon, &clen) != KL_OK ||
        clen != n || memcmp(canon, b, n) != 0)
        return fail(p, KL_E_BAD_VALUE, off,
                    "policy: not in canonical form (written as \"%s\")", canon);
    KL_ENSURE((s->policy_text = malloc((size_t)n + 1)) != NULL, KL_E_NOMEM);
    memcpy(s->policy_text, b, n);
    s->policy_text[n] = 0;
    s->policy_len = n;
    return KL_OK;
}

static kl_status parse_key(parse_state *p, kl_sealed *s)
{
    const uint8_t *b = NULL;
    uint16_t n;
    KL_GUARD(take(p, KL_SEALED_SKI_LEN, &b, "ski"));
    memcpy(s->ski, b, KL_SEALED_SKI_LEN);
    KL_GUARD(take_u16(p, &n, "public key length"));
    size_t off = at(p);
    if (n == 0 || n > KL_SEALED_MAX_SPKI)
        return fail(p, KL_E_BAD_VALUE, off - 2,
                    "public key length: %u is not within 1..%d", n,
                    KL_SEALED_MAX_SPKI);
    KL_GUARD(take(p, n, &b, "public key"));
    uint8_t ski[KL_SEALED_SKI_LEN];
    if (kl_sealed_spki_ski(b, n, ski) != KL_OK)
        return fail(p, KL_E_BAD_VALUE, off,
                    "public key: not one DER SubjectPublicKeyInfo of %u "
                    "bytes",
                    n);
    if (memcmp(ski, s->ski, KL_SEALED_SKI_LEN) != 0)
        return fail(p, KL_E_BAD_VALUE, off - 22,
                    "ski: not the SKI of the public key that follows it");
    KL_ENSURE((s->spki = malloc(n)) != NULL, KL_E_NOMEM);
    memcpy(s->spki, b, n);
    s->spki_len = n;
    return KL_OK;
}

static kl_status parse_recipient(parse_state *p, kl_sealed_recipient *r)
{
    const uint8_t *b = NULL;
    uint8_t nlen;
    size_t off = at(p);
    KL_GUARD(take(p, 1, &b, "recipient kind"));
    r->kind = b[0];
    if (r->kind != KL_SEALED_NODE && r->kind != KL_SEALED_ESCROW)
        return fail(p, KL_E_BAD_VALUE, off,
                    "recipient kind: %u is neither 1 (node) nor 2 (escrow)",
                    r->kind);
    KL_GUARD(take(p, 1, &b, "recipient name length"));
    nlen = b[0];
    off = at(p);
    KL_GUARD(take(p, nlen, &b, "recipient name"));
    if (!kl_sealed_name_ok((const char *)b, nlen))
        return fail(p, KL_E_BAD_VALUE, off,
                    "recipient name: not 1..%d bytes of A-Z a-z 0-9 . _ : -",
                    KL_SEALED_MAX_NAME);
    memcpy(r->name, b, nlen);
    r->name[nlen] = 0;
    off = at(p);
    KL_GUARD(take_u16(p, &r->kem, "recipient kem"));
    r->pk_len = kl_hpke_pk_len(r->kem);
    if (!r->pk_len)
        return fail(p, KL_E_BAD_VALUE, off,
                    "recipient kem: 0x%04x is neither DHKEM(P-256) 0x0010 "
                    "nor DHKEM(X25519) 0x0020",
                    r->kem);
    off = at(p);
    KL_GUARD(take(p, r->pk_len, &b, "recipient public key"));
    /* Any 32 bytes are an X25519 key (RFC 9180 section 7.1.4 checks the
     * DH result instead), so only a P-256 point needs importing: on the
     * curve, uncompressed. Importing each X25519 key as well cost most
     * of a load with 100 recipients per file and could not fail. */
    kl_status st = KL_OK;
    if (r->kem == KL_HPKE_KEM_P256)
        st = kl_hpke_public_check(r->kem, b, r->pk_len);
    if (st != KL_OK)
        return fail(p, KL_E_BAD_VALUE, off,
                    "recipient public key: not a valid key of its KEM");
    memcpy(r->pk, b, r->pk_len);
    KL_GUARD(take(p, r->pk_len, &b, "recipient enc"));
    memcpy(r->enc, b, r->pk_len);
    KL_GUARD(take(p, KL_SEALED_WRAPPED_LEN, &b, "recipient wrapped key"));
    memcpy(r->wrapped, b, KL_SEALED_WRAPPED_LEN);
    return KL_OK;
}

/* No name and no public key twice: one entry per recipient, so that
 * "which entry is mine" has one answer. */
static kl_status unique(parse_state *p, const kl_sealed *s, size_t i,
                        size_t off)
{
    const kl_sealed_recipient *r = &s->rcpt[i];
    for (size_t j = 0; j < i; j++) {
        const kl_sealed_recipient *o = &s->rcpt[j];
        if (strcmp(o->name, r->name) == 0)
            return fail(p, KL_E_BAD_VALUE, off,
                        "recipient %zu: the name \"%s\" is recipient %zu's "
                        "too",
                        i, r->name, j);
        if (o->kem == r->kem && memcmp(o->pk, r->pk, r->pk_len) == 0)
            return fail(p, KL_E_BAD_VALUE, off,
                        "recipient %zu: the public key is recipient %zu's "
                        "too",
                        i, j);
    }
    return KL_OK;
}

static kl_status parse_recipients(parse_state *p, kl_sealed *s)
{
    uint16_t n;
    KL_GUARD(take_u16(p, &n, "recipient count"));
    if (n == 0 || n > KL_SEALED_MAX_RECIPIENTS)
        return fail(p, KL_E_BAD_VALUE, at(p) - 2,
                    "recipient count: %u is not within 1..%d", n,
                    KL_SEALED_MAX_RECIPIENTS);
    KL_ENSURE((s->rcpt = calloc(n, sizeof *s->rcpt)) != NULL, KL_E_NOMEM);
    s->n_rcpt = n;
    for (size_t i = 0; i < n; i++) {
        size_t off = at(p);
        KL_GUARD(parse_recipient(p, &s->rcpt[i]));
        KL_GUARD(unique(p, s, i, off));
    }
    return KL_OK;
}

static kl_status parse_body(parse_state *p, kl_sealed *s)
{
    const uint8_t *b = NULL;
    uint32_t n = 0;
    KL_GUARD(take(p, KL_HPKE_NONCE_LEN, &b, "nonce"));
    memcpy(s->nonce, b, KL_HPKE_NONCE_LEN);
    KL_GUARD(take(p, 4, &b, "body length"));
    n = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 |
        b[3];
    if (n <= KL_HPKE_TAG_LEN || n > KL_SEALED_MAX_BODY + KL_HPKE_TAG_LEN)
        return fail(p, KL_E_BAD_VALUE, at(p) - 4,
                    "body length: %u is not within %d..%d", n,
                    KL_HPKE_TAG_LEN + 1, KL_SEALED_MAX_BODY + KL_HPKE_TAG_LEN);
    KL_GUARD(take(p, n, &b, "body"));
    KL_ENSURE((s->ct = malloc(n)) != NULL, KL_E_NOMEM);
    memcpy(s->ct, b, n);
    s->ct_len = n;
    if (kl_cursor_left(&p->c) != 0)
        return fail(p, KL_E_BAD_VALUE, at(p),
                    "%zu byte(s) after the body: the file ends with its "
                    "body",
                    kl_cursor_left(&p->c));
    return KL_OK;
}

static kl_status parse_all(parse_state *p, kl_sealed *s)
{
    KL_GUARD(parse_preamble(p));
    KL_GUARD(parse_policy(p, s));
    KL_GUARD(parse_key(p, s));
    KL_GUARD(parse_recipients(p, s));
    s->header_len = at(p);
    KL_ENSURE((s->header = malloc(s->header_len)) != NULL, KL_E_NOMEM);
    memcpy(s->header, p->start, s->header_len);
    KL_GUARD(parse_body(p, s));
    return kl_sealed_bind_digest(s);
}

kl_status kl_sealed_parse(const uint8_t *buf, size_t len, kl_sealed **out,
                          char *err, size_t errlen)
{
    *out = NULL;
    if (!buf || len > KL_SEALED_MAX_FILE) {
        kl_errf(err, errlen, "at 0: the file is %zu bytes, more than %u", len,
                KL_SEALED_MAX_FILE);
        return KL_E_TOO_LARGE;
    }
    kl_sealed *s = calloc(1, sizeof *s);
    KL_ENSURE(s != NULL, KL_E_NOMEM);
    parse_state p = {.start = buf, .err = err, .errlen = errlen};
    kl_cursor_init(&p.c, buf, len);
    kl_status st = parse_all(&p, s);
    if (st != KL_OK) {
        kl_sealed_free(s);
        return st;
    }
    *out = s;
    return KL_OK;
}
