/* SPDX-License-Identifier: Apache-2.0 */
/* Sealing and opening a sealed key file (seal/sealed.h): the data key,
 * its HPKE wraps, and the AES-256-GCM body. docs/SEALING.md "What is
 * bound to what" gives the reasons for the info and aad chosen here.
 * Every secret (data key, PKCS#8 plaintext) is wiped on every path. */
#include "seal/sealed.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

#define INFO_LABEL_LEN (sizeof KL_SEALED_INFO_LABEL - 1)
#define INFO_LEN (INFO_LABEL_LEN + KL_HPKE_HASH_LEN)

/* info = "keylessd sealed key v1" || bind digest. */
static void make_info(const kl_sealed *s, uint8_t info[INFO_LEN])
{
    memcpy(info, KL_SEALED_INFO_LABEL, INFO_LABEL_LEN);
    memcpy(info + INFO_LABEL_LEN, s->bind, KL_HPKE_HASH_LEN);
}

static kl_hpke_suite wrap_suite(uint16_t kem)
{
    return (kl_hpke_suite){kem, KL_HPKE_KDF_SHA256, KL_HPKE_AEAD_AES256GCM};
}

/* AES-256-GCM over in (len bytes) with the header as aad; out holds len
 * bytes, then the tag when sealing. Opening checks the tag at in + len. */
static kl_status body_gcm(int enc, const uint8_t dk[KL_SEALED_DK_LEN],
                          const kl_sealed *s, const uint8_t *in, size_t len,
                          uint8_t *out)
{
    EVP_CIPHER *ciph = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    kl_status st = (ciph && c) ? KL_E_INTERNAL : KL_E_NOMEM;
    int n = 0, fin = 0;
    if (!ciph || !c)
        goto out;
    if (EVP_CipherInit_ex2(c, ciph, dk, s->nonce, enc, NULL) != 1 ||
        EVP_CipherUpdate(c, NULL, &n, s->header, (int)s->header_len) != 1 ||
        EVP_CipherUpdate(c, out, &n, in, (int)len) != 1 || (size_t)n != len)
        goto out;
    if (!enc && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, KL_HPKE_TAG_LEN,
                                    (void *)(in + len)) != 1)
        goto out;
    if (EVP_CipherFinal_ex(c, out + n, &fin) != 1) {
        st = enc ? KL_E_INTERNAL : KL_E_KEY;
        goto out;
    }
    if (enc && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, KL_HPKE_TAG_LEN,
                                   out + len) != 1)
        goto out;
    st = KL_OK;
out:
    EVP_CIPHER_CTX_free(c);
    EVP_CIPHER_free(ciph);
    ERR_clear_error();
    return st;
}

/* The private key as PKCS#8 DER, in memory OpenSSL wipes on free. */
static kl_status pkcs8_der(EVP_PKEY *key, uint8_t **der, size_t *len)
{
    PKCS8_PRIV_KEY_INFO *p8 = EVP_PKEY2PKCS8(key);
    unsigned char *buf = NULL;
    int n = p8 ? i2d_PKCS8_PRIV_KEY_INFO(p8, &buf) : -1;
    PKCS8_PRIV_KEY_INFO_free(p8);
    if (n <= 0 || (size_t)n > KL_SEALED_MAX_BODY) {
        if (buf)
            OPENSSL_clear_free(buf, n > 0 ? (size_t)n : 0);
        ERR_clear_error();
        return n <= 0 ? KL_E_KEY : KL_E_TOO_LARGE;
    }
    *der = buf;
    *len = (size_t)n;
    return KL_OK;
}

/* The key's SubjectPublicKeyInfo; an EC point always uncompressed, the
 * form keylessd's SKI hashes (keys/ski.c), so that the file's SKI is its
 * public key's. */
static kl_status spki_der(EVP_PKEY *key, kl_sealed *s)
{
    unsigned char *buf = NULL;
    EVP_PKEY *pub = EVP_PKEY_dup(key);
    if (pub && EVP_PKEY_is_a(pub, "EC"))
        EVP_PKEY_set_utf8_string_param(
            pub, OSSL_PKEY_PARAM_EC_POINT_CONVERSION_FORMAT,
            OSSL_PKEY_EC_POINT_CONVERSION_FORMAT_UNCOMPRESSED);
    int n = pub ? i2d_PUBKEY(pub, &buf) : -1;
    EVP_PKEY_free(pub);
    if (n <= 0 || (size_t)n > KL_SEALED_MAX_SPKI) {
        OPENSSL_free(buf);
        ERR_clear_error();
        return n <= 0 ? KL_E_KEY : KL_E_TOO_LARGE;
    }
    KL_ENSURE((s->spki = malloc((size_t)n)) != NULL, KL_E_NOMEM);
    memcpy(s->spki, buf, (size_t)n);
    s->spki_len = (size_t)n;
    OPENSSL_free(buf);
    return KL_OK;
}

static kl_status set_policy(kl_sealed *s, const char *text, char *err,
                            size_t errlen)
{
    char perr[160];
    kl_status st = kl_policy_parse(text, text ? strlen(text) : 0, &s->policy,
                                   NULL, perr, sizeof perr);
    if (st != KL_OK) {
        kl_errf(err, errlen, "policy: %s", perr);
        return st;
    }
    char canon[KL_POLICY_MAX_LEN + 1];
    KL_GUARD(kl_policy_print(s->policy, canon, sizeof canon, &s->policy_len));
    KL_ENSURE((s->policy_text = strdup(canon)) != NULL, KL_E_NOMEM);
    return KL_OK;
}

static kl_status set_recipients(kl_sealed *s, const kl_sealed_to *to, size_t n,
                                char *err, size_t errlen)
{
    if (n == 0 || n > KL_SEALED_MAX_RECIPIENTS) {
        kl_errf(err, errlen, "%zu recipients: a sealed key takes 1..%d", n,
                KL_SEALED_MAX_RECIPIENTS);
        return KL_E_BAD_VALUE;
    }
    KL_ENSURE((s->rcpt = calloc(n, sizeof *s->rcpt)) != NULL, KL_E_NOMEM);
    s->n_rcpt = n;
    for (size_t i = 0; i < n; i++) {
        kl_sealed_recipient *r = &s->rcpt[i];
        const char *name = to[i].name ? to[i].name : "";
        EVP_PKEY *pk = NULL;
        kl_status st =
            kl_hpke_public_key(to[i].kem, to[i].pk, to[i].pk_len, &pk);
        EVP_PKEY_free(pk);
        ERR_clear_error();
        if (!kl_sealed_name_ok(name, strlen(name)) ||
            (to[i].kind != KL_SEALED_NODE && to[i].kind != KL_SEALED_ESCROW) ||
            st != KL_OK) {
            kl_errf(err, errlen,
                    "recipient %zu (\"%s\"): a bad name, kind or public key", i,
                    name);
            return KL_E_BAD_VALUE;
        }
        for (size_t j = 0; j < i; j++)
            if (!strcmp(s->rcpt[j].name, name) ||
                (s->rcpt[j].kem == to[i].kem &&
                 !memcmp(s->rcpt[j].pk, to[i].pk, to[i].pk_len))) {
                kl_errf(err, errlen,
                        "recipient %zu (\"%s\"): the same name or key as "
                        "recipient %zu",
                        i, name, j);
                return KL_E_BAD_VALUE;
            }
        r->kind = (uint8_t)to[i].kind;
        memcpy(r->name, name, strlen(name) + 1);
        r->kem = to[i].kem;
        r->pk_len = to[i].pk_len;
        memcpy(r->pk, to[i].pk, to[i].pk_len);
    }
    return KL_OK;
}

/* Wraps dk to every recipient; each wrap is a fresh HPKE encapsulation. */
static kl_status wrap_all(kl_sealed *s, const uint8_t dk[KL_SEALED_DK_LEN])
{
    uint8_t info[INFO_LEN];
    KL_GUARD(kl_sealed_bind_digest(s));
    make_info(s, info);
    for (size_t i = 0; i < s->n_rcpt; i++) {
        kl_sealed_recipient *r = &s->rcpt[i];
        size_t enc_len = 0, ct_len = 0;
        KL_GUARD(kl_hpke_seal_once(wrap_suite(r->kem), r->pk, r->pk_len, info,
                                   sizeof info, NULL, 0, dk, KL_SEALED_DK_LEN,
                                   r->enc, sizeof r->enc, &enc_len, r->wrapped,
                                   sizeof r->wrapped, &ct_len));
        KL_ENSURE(enc_len == r->pk_len && ct_len == KL_SEALED_WRAPPED_LEN,
                  KL_E_INTERNAL);
    }
    return KL_OK;
}

/* Everything of seal after the arguments were checked: dk is the data
 * key (the caller wipes it), der the plaintext. */
static kl_status seal_body(kl_sealed *s, const uint8_t *dk, const uint8_t *der,
                           size_t der_len, uint8_t **out, size_t *out_len)
{
    KL_GUARD(wrap_all(s, dk));
    KL_ENSURE(RAND_bytes(s->nonce, KL_HPKE_NONCE_LEN) == 1, KL_E_INTERNAL);
    KL_GUARD(kl_sealed_make_header(s));
    s->ct_len = der_len + KL_HPKE_TAG_LEN;
    KL_ENSURE((s->ct = malloc(s->ct_len)) != NULL, KL_E_NOMEM);
    KL_GUARD(body_gcm(1, dk, s, der, der_len, s->ct));
    return kl_sealed_encode(s, out, out_len);
}

kl_status kl_sealed_seal(const char *policy, EVP_PKEY *key,
                         const uint8_t ski[KL_SEALED_SKI_LEN],
                         const kl_sealed_to *to, size_t n_to, uint8_t **out,
                         size_t *out_len, char *err, size_t errlen)
{
    *out = NULL;
    *out_len = 0;
    KL_ENSURE(key != NULL && ski != NULL && (to != NULL || n_to == 0),
              KL_E_BAD_VALUE);
    kl_sealed *s = calloc(1, sizeof *s);
    KL_ENSURE(s != NULL, KL_E_NOMEM);
    memcpy(s->ski, ski, KL_SEALED_SKI_LEN);
    uint8_t dk[KL_SEALED_DK_LEN];
    uint8_t *der = NULL;
    size_t der_len = 0;
    kl_status st = set_policy(s, policy, err, errlen);
    if (st == KL_OK)
        st = set_recipients(s, to, n_to, err, errlen);
    if (st == KL_OK && (st = spki_der(key, s)) != KL_OK)
        kl_errf(err, errlen, "the key has no public key OpenSSL can write");
    uint8_t spki_ski[KL_SEALED_SKI_LEN];
    if (st == KL_OK &&
        (kl_sealed_spki_ski(s->spki, s->spki_len, spki_ski) != KL_OK ||
         memcmp(spki_ski, ski, KL_SEALED_SKI_LEN) != 0)) {
        kl_errf(err, errlen, "the SKI given is not the key's");
        st = KL_E_BAD_VALUE;
    }
    if (st == KL_OK && (st = pkcs8_der(key, &der, &der_len)) != KL_OK)
        kl_errf(err, errlen, "the key cannot be written as PKCS#8 (%s)",
                st == KL_E_TOO_LARGE ? "too large" : "not a private key");
    if (st == KL_OK && RAND_priv_bytes(dk, sizeof dk) != 1)
        st = KL_E_INTERNAL;
    if (st == KL_OK)
        st = seal_body(s, dk, der, der_len, out, out_len);
    OPENSSL_cleanse(dk, sizeof dk);
    if (der)
        OPENSSL_clear_free(der, der_len);
    kl_sealed_free(s);
    return st;
}

kl_status kl_sealed_find(const kl_sealed *s, const EVP_PKEY *node_key,
                         size_t *index)
{
    static const uint16_t kems[] = {KL_HPKE_KEM_X25519, KL_HPKE_KEM_P256};
    for (size_t k = 0; k < 2; k++) {
        uint8_t pk[KL_HPKE_MAX_ENC];
        size_t len = 0;
        if (kl_hpke_public(kems[k], node_key, pk, sizeof pk, &len) != KL_OK)
            continue;
        for (size_t i = 0; i < s->n_rcpt; i++)
            if (s->rcpt[i].kem == kems[k] && s->rcpt[i].pk_len == len &&
                memcmp(s->rcpt[i].pk, pk, len) == 0) {
                *index = i;
                return KL_OK;
            }
    }
    ERR_clear_error();
    return KL_E_NOT_FOUND;
}

/* The PKCS#8 plaintext into a key that must be the SPKI's. */
static kl_status decode_key(const kl_sealed *s, const uint8_t *der, size_t len,
                            EVP_PKEY **key, char *err, size_t errlen)
{
    const unsigned char *q = der;
    PKCS8_PRIV_KEY_INFO *p8 = d2i_PKCS8_PRIV_KEY_INFO(NULL, &q, (long)len);
    EVP_PKEY *k = (p8 && q == der + len) ? EVP_PKCS82PKEY(p8) : NULL;
    PKCS8_PRIV_KEY_INFO_free(p8);
    const unsigned char *sp = s->spki;
    EVP_PKEY *pub = d2i_PUBKEY(NULL, &sp, (long)s->spki_len);
    int same = k && pub && EVP_PKEY_eq(k, pub) == 1;
    EVP_PKEY_free(pub);
    ERR_clear_error();
    if (!k) {
        kl_errf(err, errlen, "the decrypted key is not PKCS#8 DER");
        return KL_E_KEY;
    }
    if (!same) {
        EVP_PKEY_free(k);
        kl_errf(err, errlen,
                "the decrypted key is not the public key the file names");
        return KL_E_KEY;
    }
    *key = k;
    return KL_OK;
}

kl_status kl_sealed_open_der(const kl_sealed *s, size_t index,
                             EVP_PKEY *node_key, uint8_t **der, size_t *der_len,
                             char *err, size_t errlen)
{
    *der = NULL;
    *der_len = 0;
    KL_ENSURE(s != NULL && index < s->n_rcpt && node_key != NULL,
              KL_E_BAD_VALUE);
    const kl_sealed_recipient *r = &s->rcpt[index];
    uint8_t info[INFO_LEN], dk[KL_SEALED_DK_LEN];
    size_t dk_len = 0;
    make_info(s, info);
    kl_status st = kl_hpke_open_once(
        wrap_suite(r->kem), r->enc, r->pk_len, node_key, info, sizeof info,
        NULL, 0, r->wrapped, sizeof r->wrapped, dk, sizeof dk, &dk_len);
    if (st != KL_OK || dk_len != sizeof dk) {
        OPENSSL_cleanse(dk, sizeof dk);
        kl_errf(err, errlen,
                "recipient %zu (\"%s\"): the data key does not decrypt with "
                "this key (the file was altered, or the key is not the "
                "recipient's)",
                index, r->name);
        return KL_E_KEY;
    }
    size_t len = s->ct_len - KL_HPKE_TAG_LEN;
    uint8_t *pt = OPENSSL_malloc(len);
    if (!pt) {
        OPENSSL_cleanse(dk, sizeof dk);
        return KL_E_NOMEM;
    }
    st = body_gcm(0, dk, s, s->ct, len, pt);
    OPENSSL_cleanse(dk, sizeof dk);
    if (st != KL_OK) {
        OPENSSL_clear_free(pt, len);
        kl_errf(err, errlen,
                "the key does not decrypt: the file was altered after "
                "sealing");
        return st;
    }
    *der = pt;
    *der_len = len;
    return KL_OK;
}

kl_status kl_sealed_open(const kl_sealed *s, size_t index, EVP_PKEY *node_key,
                         EVP_PKEY **key, char *err, size_t errlen)
{
    *key = NULL;
    uint8_t *der = NULL;
    size_t len = 0;
    KL_GUARD(kl_sealed_open_der(s, index, node_key, &der, &len, err, errlen));
    kl_status st = decode_key(s, der, len, key, err, errlen);
    OPENSSL_clear_free(der, len);
    return st;
}
