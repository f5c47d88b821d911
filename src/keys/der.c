/* SPDX-License-Identifier: Apache-2.0 */
/* Telling DER key formats apart by their outer shape, through the bounded
 * cursor. Nothing here decodes key material: it only picks the
 * decoder context for the format (a context for one format decodes ~2x
 * faster than one that tries them all) and names what a file holds when it
 * is not a private key (certificate, public key, encrypted key). */
#include <string.h>

#include "core/cursor.h"
#include "keys/decode.h"

enum {
    ASN1_INTEGER_TAG = 0x02,
    ASN1_BIT_STRING_TAG = 0x03,
    ASN1_OCTET_STRING_TAG = 0x04,
    ASN1_OID_TAG = 0x06,
    ASN1_SEQUENCE_TAG = 0x30,
};

/* Reads one TLV with a definite length of at most 4 length bytes. */
KL_WUR static kl_status read_tlv(kl_cursor *c, uint8_t *tag, kl_cursor *val)
{
    uint8_t t = 0, l0 = 0;
    kl_cursor save = *c;
    kl_status s = kl_read_u8(c, &t);
    if (s == KL_OK)
        s = kl_read_u8(c, &l0);
    size_t len = l0;
    if (s == KL_OK && (t & 0x1f) == 0x1f)
        s = KL_E_BAD_VALUE; /* high tag numbers never occur in key formats */
    if (s == KL_OK && l0 & 0x80) {
        size_t nbytes = l0 & 0x7f;
        if (nbytes == 0 || nbytes > 4)
            s = KL_E_BAD_VALUE; /* indefinite or absurd length */
        len = 0;
        for (size_t i = 0; s == KL_OK && i < nbytes; i++) {
            uint8_t b;
            s = kl_read_u8(c, &b);
            len = len << 8 | b;
        }
    }
    if (s == KL_OK)
        s = kl_read_sub(c, len, val);
    if (s != KL_OK) {
        *c = save;
        return s;
    }
    *tag = t;
    return KL_OK;
}

static size_t count_elements(kl_cursor c)
{
    size_t n = 0;
    uint8_t tag;
    kl_cursor v;
    while (kl_cursor_left(&c) > 0 && read_tlv(&c, &tag, &v) == KL_OK)
        n++;
    return n;
}

static int is_small_int(kl_cursor v, uint8_t max)
{
    uint8_t b;
    return kl_cursor_left(&v) == 1 && kl_read_u8(&v, &b) == KL_OK && b <= max;
}

kl_der_kind kl_der_classify(const uint8_t *der, size_t len, const uint8_t **oid,
                            size_t *oid_len)
{
    kl_cursor c, seq, e1, e2, e3;
    uint8_t tag, t1, t2, t3;
    kl_cursor_init(&c, der, len);
    if (read_tlv(&c, &tag, &seq) != KL_OK || tag != ASN1_SEQUENCE_TAG)
        return KL_DER_UNKNOWN;
    size_t elements = count_elements(seq);
    if (read_tlv(&seq, &t1, &e1) != KL_OK || read_tlv(&seq, &t2, &e2) != KL_OK)
        return KL_DER_UNKNOWN;

    if (t1 == ASN1_INTEGER_TAG) {
        if (t2 == ASN1_SEQUENCE_TAG && is_small_int(e1, 1)) {
            /* PrivateKeyInfo: version, AlgorithmIdentifier{OID, params} */
            kl_cursor alg;
            if (read_tlv(&e2, &tag, &alg) != KL_OK || tag != ASN1_OID_TAG)
                return KL_DER_UNKNOWN;
            *oid = alg.p;
            *oid_len = kl_cursor_left(&alg);
            return KL_DER_PKCS8;
        }
        if (t2 == ASN1_OCTET_STRING_TAG && is_small_int(e1, 1))
            return KL_DER_SEC1_PRIVATE; /* version 1, privateKey */
        if (t2 == ASN1_INTEGER_TAG) {
            if (elements >= 9 && is_small_int(e1, 1))
                return KL_DER_PKCS1_PRIVATE; /* version, n, e, d, p, q... */
            if (elements == 2)
                return KL_DER_PKCS1_PUBLIC; /* n, e */
        }
        return KL_DER_UNKNOWN;
    }
    if (t1 == ASN1_SEQUENCE_TAG) {
        if (t2 == ASN1_OCTET_STRING_TAG && elements == 2)
            return KL_DER_PKCS8_ENCRYPTED; /* algorithm, encryptedData */
        if (t2 == ASN1_BIT_STRING_TAG && elements == 2)
            return KL_DER_SPKI; /* algorithm, subjectPublicKey */
        if (t2 == ASN1_SEQUENCE_TAG && elements == 3 &&
            read_tlv(&seq, &t3, &e3) == KL_OK && t3 == ASN1_BIT_STRING_TAG)
            return KL_DER_CERTIFICATE; /* tbs, signatureAlgorithm, sig */
    }
    return KL_DER_UNKNOWN;
}

size_t kl_der_put_len(uint8_t *p, size_t n)
{
    if (n < 0x80) {
        p[0] = (uint8_t)n;
        return 1;
    }
    size_t bytes = 0;
    for (size_t t = n; t; t >>= 8)
        bytes++;
    p[0] = (uint8_t)(0x80 | bytes);
    for (size_t i = 0; i < bytes; i++)
        p[1 + i] = (uint8_t)(n >> (8 * (bytes - 1 - i)));
    return 1 + bytes;
}

kl_status kl_der_p8_v2_split(const uint8_t *der, size_t len, uint8_t *out,
                             size_t *out_len, const uint8_t **pub,
                             size_t *pub_len)
{
    kl_cursor c, seq, v, alg, key, pk;
    uint8_t tag;
    kl_cursor_init(&c, der, len);
    if (read_tlv(&c, &tag, &seq) != KL_OK || tag != ASN1_SEQUENCE_TAG ||
        read_tlv(&seq, &tag, &v) != KL_OK || tag != ASN1_INTEGER_TAG ||
        !is_small_int(v, 1))
        return KL_E_NOT_FOUND;
    uint8_t ver = 0;
    if (kl_read_u8(&v, &ver) != KL_OK || ver != 1)
        return KL_E_NOT_FOUND;
    /* privateKeyAlgorithm, privateKey and [0] attributes are kept as
     * they are; [1] publicKey is taken out */
    const uint8_t *keep = seq.p;
    if (read_tlv(&seq, &tag, &alg) != KL_OK || tag != ASN1_SEQUENCE_TAG ||
        read_tlv(&seq, &tag, &key) != KL_OK || tag != ASN1_OCTET_STRING_TAG)
        return KL_E_NOT_FOUND;
    const uint8_t *keep_end = seq.p;
    if (kl_cursor_left(&seq) > 0 && seq.p[0] == 0xa0) {
        kl_cursor attrs;
        if (read_tlv(&seq, &tag, &attrs) != KL_OK)
            return KL_E_NOT_FOUND;
        keep_end = seq.p;
    }
    /* [1] IMPLICIT BIT STRING, primitive: tag 0x81; no unused bits */
    uint8_t unused = 1;
    if (read_tlv(&seq, &tag, &pk) != KL_OK || tag != 0x81 ||
        kl_cursor_left(&seq) != 0 || kl_read_u8(&pk, &unused) != KL_OK ||
        unused != 0)
        return KL_E_NOT_FOUND;
    size_t body = 3 + (size_t)(keep_end - keep); /* INTEGER 0 + the rest */
    uint8_t hdr[8];
    hdr[0] = ASN1_SEQUENCE_TAG;
    size_t hlen = 1 + kl_der_put_len(hdr + 1, body);
    if (hlen + body > len)
        return KL_E_NOT_FOUND; /* cannot happen: v1 is shorter */
    memcpy(out, hdr, hlen);
    memcpy(out + hlen, "\x02\x01\x00", 3);
    memcpy(out + hlen + 3, keep, (size_t)(keep_end - keep));
    *out_len = hlen + body;
    *pub = pk.p;
    *pub_len = kl_cursor_left(&pk);
    return KL_OK;
}
