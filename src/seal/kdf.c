/* SPDX-License-Identifier: Apache-2.0 */
/* The labelled KDF of RFC 9180 section 4 over HKDF-SHA256 (RFC 5869):
 * Extract and Expand are RFC 5869's two functions over OpenSSL's HMAC
 * (EVP_MAC), with HPKE's own framing (the "HPKE-v1" label, the suite_id,
 * the length prefix). */
#include "seal/hpke_int.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
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

/* HMAC-SHA256 for every step, fetched once per process: a template
 * context with its digest set, duplicated for each HMAC. EVP_KDF "HKDF"
 * fetched the KDF and the digest by name for every step, which was most
 * of a step's time (docs/SEALING.md "Cost, measured"). The template is
 * only read (duplicated) after its one-time setup, so threads share it. */
static EVP_MAC_CTX *hmac_tmpl;
static CRYPTO_ONCE hmac_once = CRYPTO_ONCE_STATIC_INIT;

static void hmac_free(void)
{
    EVP_MAC_CTX_free(hmac_tmpl);
    hmac_tmpl = NULL;
}

static void hmac_setup(void)
{
    EVP_MAC *mac = EVP_MAC_fetch(NULL, OSSL_MAC_NAME_HMAC, NULL);
    EVP_MAC_CTX *c = mac ? EVP_MAC_CTX_new(mac) : NULL;
    EVP_MAC_free(mac); /* the context holds its own reference */
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
                                         (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    if (!c || EVP_MAC_CTX_set_params(c, params) != 1) {
        EVP_MAC_CTX_free(c);
        return;
    }
    hmac_tmpl = c;
    /* Freed before OpenSSL's own cleanup, registered earlier (atexit
     * handlers run in reverse order). */
    atexit(hmac_free);
}

/* out = HMAC-SHA256(key, a || b || c), KL_HPKE_HASH_LEN bytes. */
static kl_status hmac(const uint8_t *key, size_t key_len, const uint8_t *a,
                      size_t a_len, const uint8_t *b, size_t b_len,
                      const uint8_t *c, size_t c_len, uint8_t *out)
{
    if (!CRYPTO_THREAD_run_once(&hmac_once, hmac_setup) || !hmac_tmpl)
        return KL_E_INTERNAL;
    EVP_MAC_CTX *m = EVP_MAC_CTX_dup(hmac_tmpl);
    if (!m)
        return KL_E_NOMEM;
    size_t n = 0;
    int ok = EVP_MAC_init(m, key, key_len, NULL) == 1 &&
             (!a_len || EVP_MAC_update(m, a, a_len) == 1) &&
             (!b_len || EVP_MAC_update(m, b, b_len) == 1) &&
             (!c_len || EVP_MAC_update(m, c, c_len) == 1) &&
             EVP_MAC_final(m, out, &n, KL_HPKE_HASH_LEN) == 1 &&
             n == KL_HPKE_HASH_LEN;
    EVP_MAC_CTX_free(m); /* cleanses the keyed state */
    if (!ok)
        OPENSSL_cleanse(out, KL_HPKE_HASH_LEN);
    return ok ? KL_OK : KL_E_INTERNAL;
}

/* HKDF-Extract(salt, ikm) (RFC 5869 section 2.2): an empty salt is a
 * string of Nh zeros, which is what RFC 9180 means by an empty salt. */
static kl_status hkdf_extract(const uint8_t *salt, size_t salt_len,
                              const uint8_t *ikm, size_t ikm_len, uint8_t *prk)
{
    static const uint8_t zeros[KL_HPKE_HASH_LEN];
    if (!salt_len)
        return hmac(zeros, sizeof zeros, ikm, ikm_len, NULL, 0, NULL, 0, prk);
    return hmac(salt, salt_len, ikm, ikm_len, NULL, 0, NULL, 0, prk);
}

/* HKDF-Expand(prk, info, len) (RFC 5869 section 2.3), len <= 255 * Nh:
 * T(i) = HMAC(prk, T(i-1) || info || i). */
static kl_status hkdf_expand(const uint8_t *prk, const uint8_t *info,
                             size_t info_len, uint8_t *out, size_t len)
{
    uint8_t t[KL_HPKE_HASH_LEN];
    size_t t_len = 0, done = 0;
    kl_status s = KL_OK;
    for (uint8_t i = 1; s == KL_OK && done < len; i++) {
        s = hmac(prk, KL_HPKE_HASH_LEN, t, t_len, info, info_len, &i, 1, t);
        t_len = sizeof t;
        size_t k = len - done < sizeof t ? len - done : sizeof t;
        if (s == KL_OK)
            memcpy(out + done, t, k);
        done += k;
    }
    OPENSSL_cleanse(t, sizeof t);
    if (s != KL_OK)
        OPENSSL_cleanse(out, len);
    return s;
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
    kl_status s = hkdf_extract(salt, salt_len, buf, n, prk);
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
    kl_status s = hkdf_expand(prk, buf, n, out, len);
    OPENSSL_cleanse(buf, n); /* info holds the key schedule context */
    return s;
}
