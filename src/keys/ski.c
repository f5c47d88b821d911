/* SPDX-License-Identifier: Apache-2.0 */
/* Subject key identifiers (protocol P7): SHA-1 over the contents of the
 * subjectPublicKey BIT STRING - what RFC 5280 calls method 1, and what the
 * edge sends to select a key. Built from the key's public parameters
 * directly: asking OpenSSL's encoders for the SubjectPublicKeyInfo costs a
 * fresh encoder context per key, slower than the decode itself. */
#include <stdlib.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "keys/decode.h"
#include "keys/keystore.h"

static kl_status sha1(const uint8_t *p, size_t n, uint8_t out[KL_SKI_LEN])
{
    unsigned int len = 0;
    KL_ENSURE(EVP_Digest(p, n, out, &len, EVP_sha1(), NULL) == 1 &&
                  len == KL_SKI_LEN,
              KL_E_INTERNAL);
    return KL_OK;
}

/* DER INTEGER of a non-negative BIGNUM: minimal bytes, with a 0x00 prefix
 * when the top bit is set (and a single 0x00 for zero). */
static size_t der_uint(uint8_t *p, const BIGNUM *bn)
{
    int nb = BN_num_bytes(bn);
    size_t pad = BN_num_bits(bn) % 8 == 0 ? 1 : 0;
    size_t off = 0;
    p[off++] = 0x02;
    off += kl_der_put_len(p + off, (size_t)nb + pad);
    if (pad)
        p[off++] = 0;
    off += (size_t)BN_bn2bin(bn, p + off);
    return off;
}

/* RSA: SHA-1 of DER RSAPublicKey ::= SEQUENCE { modulus, publicExponent } */
static kl_status rsa_ski(EVP_PKEY *pkey, uint8_t out[KL_SKI_LEN])
{
    BIGNUM *n = NULL, *e = NULL;
    kl_status s = KL_E_KEY;
    uint8_t *buf = NULL;
    if (!EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_RSA_N, &n) ||
        !EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_RSA_E, &e))
        goto out;
    /* tag + length (<=5) + pad + bytes, per integer */
    size_t cap = 2 * 7 + (size_t)BN_num_bytes(n) + (size_t)BN_num_bytes(e);
    buf = malloc(cap + 6);
    s = KL_E_NOMEM;
    if (!buf)
        goto out;
    uint8_t *ints = buf + 6; /* leave room for the SEQUENCE header */
    size_t ilen = der_uint(ints, n);
    ilen += der_uint(ints + ilen, e);
    uint8_t hdr[6];
    hdr[0] = 0x30;
    size_t hlen = 1 + kl_der_put_len(hdr + 1, ilen);
    memcpy(ints - hlen, hdr, hlen);
    s = sha1(ints - hlen, hlen + ilen, out);
out:
    free(buf);
    BN_free(n);
    BN_free(e);
    return s;
}

/* EC: SHA-1 of the uncompressed point 04 || X || Y, whatever point form the
 * key file used (the reference always hashes the uncompressed form). */
static kl_status ec_ski(EVP_PKEY *pkey, uint8_t out[KL_SKI_LEN])
{
    uint8_t pt[1 + 2 * 66];
    size_t len = 0;
    if (EVP_PKEY_get_octet_string_param(
            pkey, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, pt, sizeof pt, &len) &&
        len > 1 && pt[0] == 0x04)
        return sha1(pt, len, out);

    BIGNUM *x = NULL, *y = NULL;
    kl_status s = KL_E_KEY;
    int flen = (EVP_PKEY_get_bits(pkey) + 7) / 8;
    if (flen > 0 && flen <= 66 &&
        EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_EC_PUB_X, &x) &&
        EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_EC_PUB_Y, &y) &&
        BN_bn2binpad(x, pt + 1, flen) == flen &&
        BN_bn2binpad(y, pt + 1 + flen, flen) == flen) {
        pt[0] = 0x04;
        s = sha1(pt, 1 + 2 * (size_t)flen, out);
    }
    BN_free(x);
    BN_free(y);
    return s;
}

kl_status kl_ski_from_pkey(EVP_PKEY *pkey, uint8_t out[KL_SKI_LEN])
{
    KL_ENSURE(pkey != NULL, KL_E_KEY);
    if (EVP_PKEY_is_a(pkey, "RSA") || EVP_PKEY_is_a(pkey, "RSA-PSS"))
        return rsa_ski(pkey, out);
    if (EVP_PKEY_is_a(pkey, "EC"))
        return ec_ski(pkey, out);
    if (EVP_PKEY_is_a(pkey, "ED25519")) {
        uint8_t pub[32];
        size_t len = sizeof pub;
        KL_ENSURE(EVP_PKEY_get_raw_public_key(pkey, pub, &len) == 1 &&
                      len == sizeof pub,
                  KL_E_KEY);
        return sha1(pub, len, out);
    }
    return KL_E_KEY;
}

void kl_ski_hex(const uint8_t ski[KL_SKI_LEN], char out[2 * KL_SKI_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < KL_SKI_LEN; i++) {
        out[2 * i] = hex[ski[i] >> 4];
        out[2 * i + 1] = hex[ski[i] & 15];
    }
    out[2 * KL_SKI_LEN] = 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

kl_status kl_ski_parse(const char *hex, uint8_t out[KL_SKI_LEN])
{
    KL_ENSURE(hex != NULL, KL_E_BAD_VALUE);
    uint8_t tmp[KL_SKI_LEN];
    size_t n = 0;
    int hi = -1;
    for (const char *p = hex; *p; p++) {
        if (*p == ':') {
            /* separators only between whole bytes */
            KL_ENSURE(hi < 0 && n > 0 && p[1] != 0 && p[1] != ':',
                      KL_E_BAD_VALUE);
            continue;
        }
        int v = hexval(*p);
        KL_ENSURE(v >= 0, KL_E_BAD_VALUE);
        if (hi < 0) {
            hi = v;
            continue;
        }
        KL_ENSURE(n < KL_SKI_LEN, KL_E_BAD_VALUE);
        tmp[n++] = (uint8_t)(hi << 4 | v);
        hi = -1;
    }
    KL_ENSURE(n == KL_SKI_LEN && hi < 0, KL_E_BAD_VALUE);
    memcpy(out, tmp, KL_SKI_LEN);
    return KL_OK;
}
