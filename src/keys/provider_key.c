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
