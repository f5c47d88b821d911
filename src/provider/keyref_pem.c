/* SPDX-License-Identifier: Apache-2.0 */
/* Key references through OpenSSL: see keyref_pem.h. */
#include "provider/keyref_pem.h"

#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "keys/keystore.h"

kl_status kl_keyref_set_pubkey(kl_keyref *r, EVP_PKEY *pub)
{
    unsigned char *der = NULL;
    KL_GUARD(kl_ski_from_pkey(pub, r->ski));
    int n = i2d_PUBKEY(pub, &der);
    KL_ENSURE(n > 0, KL_E_KEY);
    free(r->spki);
    r->spki = malloc((size_t)n);
    if (!r->spki) {
        OPENSSL_free(der);
        return KL_E_NOMEM;
    }
    memcpy(r->spki, der, (size_t)n);
    r->spki_len = (size_t)n;
    OPENSSL_free(der);
    return KL_OK;
}

kl_status kl_keyref_write_pem(BIO *out, const kl_keyref *r)
{
    uint8_t *body;
    size_t len;
    KL_GUARD(kl_keyref_encode(r, &body, &len));
    int ok = PEM_write_bio(out, KL_KEYREF_PEM_LABEL, "", body, (long)len);
    free(body);
    return ok > 0 ? KL_OK : KL_E_IO;
}

kl_status kl_keyref_read_pem(BIO *in, kl_keyref *out, bool *is_ref, char *err,
                             size_t errlen)
{
    char *name = NULL, *header = NULL;
    unsigned char *data = NULL;
    long len = 0;
    *is_ref = false;
    /* PEM_read_bio reads line by line, so the BIO is left just after the
     * block: the next block of a bundle is still there for the next try. */
    ERR_set_mark();
    int ok = PEM_read_bio(in, &name, &header, &data, &len);
    ERR_pop_to_mark();
    if (ok <= 0)
        return KL_E_NOT_FOUND;
    kl_status s = KL_OK;
    if (strcmp(name, KL_KEYREF_PEM_LABEL) == 0) {
        s = kl_keyref_parse(data, (size_t)len, out, err, errlen);
        *is_ref = s == KL_OK;
    }
    OPENSSL_free(name);
    OPENSSL_free(header);
    OPENSSL_free(data);
    return s;
}

kl_status kl_keyref_pubkey(const kl_keyref *r, OSSL_LIB_CTX *libctx,
                           const char *propq, EVP_PKEY **out, char *err,
                           size_t errlen)
{
    const unsigned char *p = r->spki;
    uint8_t ski[KL_SKI_LEN];
    EVP_PKEY *pk = d2i_PUBKEY_ex(NULL, &p, (long)r->spki_len, libctx, propq);
    if (!pk || p != r->spki + r->spki_len) {
        EVP_PKEY_free(pk);
        snprintf(err, errlen, "its public key does not decode");
        return KL_E_KEY;
    }
    if (kl_ski_from_pkey(pk, ski) != KL_OK ||
        memcmp(ski, r->ski, KL_SKI_LEN) != 0) {
        EVP_PKEY_free(pk);
        snprintf(err, errlen, "its SKI is not its public key's");
        return KL_E_KEY;
    }
    *out = pk;
    return KL_OK;
}
