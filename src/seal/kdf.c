/* SPDX-License-Identifier: Apache-2.0 */
/* The labelled KDF of RFC 9180 section 4 over HKDF-SHA256 (RFC 5869):
 * Extract and Expand are OpenSSL's EVP_KDF "HKDF" in its EXTRACT_ONLY and
 * EXPAND_ONLY modes, so that HPKE's own framing (the "HPKE-v1" label, the
 * suite_id, the length prefix) is all this file adds. */
#include "seal/hpke_int.h"

#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

/* The version label of every labelled derivation (RFC 9180 section 4). */
static const char hpke_v1[] = "HPKE-v1";
#define HPKE_V1_LEN (sizeof hpke_v1 - 1)

/* The Expand info is framed in a stack buffer of this size. Every info
 * HPKE itself builds is far below it (the longest, P-256's shared_secret
 * with its 130-byte kem_context, is 157 bytes); only an exporter_context
 * can reach it, and one longer than 1002 bytes is refused with
 * KL_E_TOO_LARGE. */
#define HKDF_INFO_MAX 1024

size_t kl_hpke_kem_suite_id(uint16_t kem, uint8_t *out)
{
    memcpy(out, "KEM", 3);
    out[3] = (uint8_t)(kem >> 8);
    out[4] = (uint8_t)kem;
    return 5;
}

size_t kl_hpke_suite_id(kl_hpke_suite suite, uint8_t *out)
{
    memcpy(out, "HPKE", 4);
    out[4] = (uint8_t)(suite.kem >> 8);
    out[5] = (uint8_t)suite.kem;
    out[6] = (uint8_t)(suite.kdf >> 8);
    out[7] = (uint8_t)suite.kdf;
    out[8] = (uint8_t)(suite.aead >> 8);
    out[9] = (uint8_t)suite.aead;
    return 10;
}

/* One HKDF step. mode is EVP_KDF_HKDF_MODE_EXTRACT_ONLY (key = ikm, salt)
 * or EVP_KDF_HKDF_MODE_EXPAND_ONLY (key = prk, info). */
static kl_status hkdf(int mode, const uint8_t *key, size_t key_len,
                      const uint8_t *salt, size_t salt_len, const uint8_t *info,
                      size_t info_len, uint8_t *out, size_t out_len)
{
    EVP_KDF *kdf = EVP_KDF_fetch(NULL, OSSL_KDF_NAME_HKDF, NULL);
    if (!kdf)
        return KL_E_INTERNAL;
    EVP_KDF_CTX *kctx = EVP_KDF_CTX_new(kdf);
    EVP_KDF_free(kdf);
    if (!kctx)
        return KL_E_NOMEM;
    OSSL_PARAM params[6], *p = params;
    *p++ = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
    *p++ = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST,
                                            (char *)"SHA256", 0);
    *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)key,
                                             key_len);
    /* An absent salt is HKDF's default, a string of Nh zeros (RFC 5869
     * section 2.2), which is what RFC 9180 means by an empty salt. */
    if (salt_len)
        *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT,
                                                 (void *)salt, salt_len);
    if (info_len)
        *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO,
                                                 (void *)info, info_len);
    *p = OSSL_PARAM_construct_end();
    int ok = EVP_KDF_derive(kctx, out, out_len, params) == 1;
    EVP_KDF_CTX_free(kctx); /* cleanses the copies of key and salt */
    if (!ok)
        OPENSSL_cleanse(out, out_len);
    return ok ? KL_OK : KL_E_INTERNAL;
}

kl_status kl_hpke_labeled_extract(const uint8_t *suite_id, size_t sid_len,
                                  const uint8_t *salt, size_t salt_len,
                                  const char *label, const uint8_t *ikm,
                                  size_t ikm_len, uint8_t *prk)
{
    size_t label_len = strlen(label);
    if (ikm_len > SIZE_MAX / 2)
        return KL_E_TOO_LARGE;
    size_t n = HPKE_V1_LEN + sid_len + label_len + ikm_len;
    uint8_t *buf = OPENSSL_malloc(n);
    if (!buf)
        return KL_E_NOMEM;
    uint8_t *w = buf;
    memcpy(w, hpke_v1, HPKE_V1_LEN);
    w += HPKE_V1_LEN;
    memcpy(w, suite_id, sid_len);
    w += sid_len;
    memcpy(w, label, label_len);
    w += label_len;
    if (ikm_len)
        memcpy(w, ikm, ikm_len);
    kl_status s = hkdf(EVP_KDF_HKDF_MODE_EXTRACT_ONLY, buf, n, salt, salt_len,
                       NULL, 0, prk, KL_HPKE_HASH_LEN);
    OPENSSL_clear_free(buf, n); /* ikm may be a DH result or a PSK */
    return s;
}

kl_status kl_hpke_labeled_expand(const uint8_t *suite_id, size_t sid_len,
                                 const uint8_t *prk, const char *label,
                                 const uint8_t *info, size_t info_len,
                                 uint8_t *out, size_t len)
{
    /* HKDF-Expand gives at most 255 * Nh bytes (RFC 5869 section 2.3). */
    if (len == 0 || len > 255 * KL_HPKE_HASH_LEN)
        return KL_E_TOO_LARGE;
    size_t label_len = strlen(label);
    if (info_len > HKDF_INFO_MAX ||
        2 + HPKE_V1_LEN + sid_len + label_len + info_len > HKDF_INFO_MAX)
        return KL_E_TOO_LARGE;
    uint8_t buf[HKDF_INFO_MAX], *w = buf;
    *w++ = (uint8_t)(len >> 8);
    *w++ = (uint8_t)len;
    memcpy(w, hpke_v1, HPKE_V1_LEN);
    w += HPKE_V1_LEN;
    memcpy(w, suite_id, sid_len);
    w += sid_len;
    memcpy(w, label, label_len);
    w += label_len;
    if (info_len)
        memcpy(w, info, info_len);
    w += info_len;
    size_t n = (size_t)(w - buf);
    kl_status s = hkdf(EVP_KDF_HKDF_MODE_EXPAND_ONLY, prk, KL_HPKE_HASH_LEN,
                       NULL, 0, buf, n, out, len);
    OPENSSL_cleanse(buf, n); /* info holds the key schedule context */
    return s;
}
