/* SPDX-License-Identifier: Apache-2.0 */
/* Keys held by another OpenSSL provider (docs/OPERATIONS.md "Accelerators
 * and provider keys"): loaded through OSSL_STORE under the store's
 * key_propquery, e.g. a TPM key through tpm2-openssl as a "TSS2 PRIVATE
 * KEY" PEM file in a key directory or as a `handle:0x81000001` URI. The
 * private part stays with the provider; the store checks the public part
 * like a token key's and takes the SKI from it, and the key's operations
 * go to that provider (a blocking worker, or an ASYNC job for
 * async_providers). */
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/provider.h>
#include <openssl/store.h>

#include "core/log.h"
#include "keys/decode.h"
#include "keys/store.h"
#include "seal/hpke.h"

/* The first private key the URI yields, or NULL (*why says why). */
static EVP_PKEY *store_load(const char *uri, const char *propq, char *why,
                            size_t whylen, bool *opened)
{
    OSSL_STORE_CTX *c =
        OSSL_STORE_open_ex(uri, NULL, propq, NULL, NULL, NULL, NULL, NULL);
    *opened = c != NULL;
    if (!c) {
        snprintf(why, whylen,
                 "no OpenSSL provider opens it (load the provider that holds "
                 "the key in openssl.cnf, and set key_propquery if it needs "
                 "a property query, e.g. ?provider=tpm2)");
        return NULL;
    }
    EVP_PKEY *pkey = NULL;
    if (OSSL_STORE_expect(c, OSSL_STORE_INFO_PKEY) != 1)
        ERR_clear_error(); /* only a hint to the loader */
    while (!pkey && !OSSL_STORE_eof(c)) {
        OSSL_STORE_INFO *i = OSSL_STORE_load(c);
        if (!i) {
            if (OSSL_STORE_error(c))
                break;
            continue;
        }
        if (OSSL_STORE_INFO_get_type(i) == OSSL_STORE_INFO_PKEY)
            pkey = OSSL_STORE_INFO_get1_PKEY(i);
        OSSL_STORE_INFO_free(i);
    }
    OSSL_STORE_close(c);
    if (!pkey) {
        unsigned long e = ERR_peek_last_error();
        snprintf(why, whylen, "no private key in it%s%s", e ? ": " : "",
                 e ? ERR_reason_error_string(e) : "");
    }
    ERR_clear_error();
    return pkey;
}

kl_status kl_keystore_add_provider_key(kl_keystore *ks, const char *uri,
                                       const char *label, bool quiet, char *why,
                                       size_t whylen)
{
    bool opened;
    EVP_PKEY *pkey = store_load(uri, ks->propq, why, whylen, &opened);
    if (!pkey)
        return opened ? KL_E_KEY : KL_E_CONFIG;
    if (kl_pkey_builtin(pkey)) {
        /* OpenSSL's own decoders read it: a file keylessd refused for a
         * reason of its own, which the caller reports */
        EVP_PKEY_free(pkey);
        snprintf(why, whylen, "not a key of another provider");
        return KL_E_KEY;
    }
    /* The public key as OpenSSL's own code reads it: what a provider
     * reports of its key need not be (tpm2-openssl gives an RSA key's
     * default exponent as 0), its encoding is. Checks and SKI use it. */
    unsigned char *der = NULL;
    int n = i2d_PUBKEY(pkey, &der);
    const unsigned char *p = der;
    EVP_PKEY *pub = n > 0 ? d2i_PUBKEY(NULL, &p, n) : NULL;
    OPENSSL_free(der);
    kl_key_info info;
    uint8_t ski[KL_SKI_LEN];
    kl_status s = KL_E_KEY;
    if (!pub)
        snprintf(why, whylen, "its public key cannot be encoded");
    else if (kl_key_check_public(pub, &info, why, whylen) == KL_OK)
        s = kl_ski_from_pkey(pub, ski);
    EVP_PKEY_free(pub);
    ERR_clear_error();
    if (s != KL_OK) {
        EVP_PKEY_free(pkey);
        if (!quiet)
            kl_keystore_report(ks, KL_LOG_ERROR, label, "%s", why);
        return KL_E_KEY;
    }
    return kl_keystore_insert_ski(ks, pkey, NULL, &info, label, ski);
}

/* One HPKE message to the key's own public half, opened with the key:
 * the provider derives with it (seal/kem.c asks the key's provider), and
 * the public half it reports is its own. */
static kl_status sealing_self_test(uint16_t kem, const uint8_t *pk, size_t pl,
                                   EVP_PKEY *key)
{
    static const uint8_t msg[] = "keylessd sealing key check";
    uint8_t enc[KL_HPKE_MAX_ENC], ct[sizeof msg + KL_HPKE_TAG_LEN],
        pt[sizeof msg];
    size_t el = 0, cl = 0, ptl = 0;
    kl_hpke_suite su = {kem, KL_HPKE_KDF_SHA256, KL_HPKE_AEAD_AES256GCM};
    KL_GUARD(kl_hpke_seal_once(su, pk, pl, NULL, 0, NULL, 0, msg, sizeof msg,
                               enc, sizeof enc, &el, ct, sizeof ct, &cl));
    KL_GUARD(kl_hpke_open_once(su, enc, el, key, NULL, 0, NULL, 0, ct, cl, pt,
                               sizeof pt, &ptl));
    return ptl == sizeof msg && !memcmp(pt, msg, ptl) ? KL_OK : KL_E_KEY;
}

kl_status kl_keys_sealing_key_store(const char *uri, const char *propq,
                                    EVP_PKEY **out, char *why, size_t whylen)
{
    *out = NULL;
    bool opened;
    EVP_PKEY *k = store_load(uri, propq, why, whylen, &opened);
    if (!k)
        return opened ? KL_E_KEY : KL_E_CONFIG;
    uint8_t pk[KL_HPKE_MAX_ENC];
    size_t pl = 0;
    uint16_t kem = KL_HPKE_KEM_X25519;
    if (kl_hpke_public(kem, k, pk, sizeof pk, &pl) != KL_OK) {
        kem = KL_HPKE_KEM_P256;
        if (kl_hpke_public(kem, k, pk, sizeof pk, &pl) != KL_OK) {
            ERR_clear_error();
            EVP_PKEY_free(k);
            snprintf(why, whylen, "not an X25519 or P-256 key");
            return KL_E_KEY;
        }
    }
    kl_status s = sealing_self_test(kem, pk, pl, k);
    ERR_clear_error();
    if (s != KL_OK) {
        EVP_PKEY_free(k);
        snprintf(why, whylen,
                 "the provider cannot do %s key agreement with it (%s)",
                 kem == KL_HPKE_KEM_P256 ? "ECDH" : "X25519", kl_status_str(s));
        return s == KL_E_NOMEM ? s : KL_E_KEY;
    }
    *out = k;
    return KL_OK;
}
