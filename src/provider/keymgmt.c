/* SPDX-License-Identifier: Apache-2.0 */
/* Key management for keyless keys under the standard names RSA, EC and
 * ED25519. A key comes from a key reference (load, from our
 * decoder) and holds only its public half.
 *
 * - Export gives the public half only, and refuses any export that asks
 *   for the private key. OpenSSL 3.0 asks for everything
 *   (OSSL_KEYMGMT_SELECT_ALL) when an operation would move a key to
 *   another provider's implementation: the refusal is what makes EVP fall
 *   back to our own signature and cipher for our keys.
 * - Import takes public halves only (refusing any private material), so
 *   EVP_PKEY_eq can bring a certificate's public key here to compare it
 *   (SSL_CTX_check_private_key, X509_check_private_key). Ordinary private
 *   keys never land here; there is no key generation.
 * - Parameters (bits, size, group, point format, encoded public key...)
 *   are answered by the public half itself. */
#include <string.h>

#include <openssl/core_dispatch.h>
#include <openssl/core_names.h>
#include <openssl/core_object.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "provider/decoder.h"
#include "provider/key.h"

static int km_has(const void *kd, int selection)
{
    const klp_key *k = kd;
    if (!k)
        return 0;
    if (!klp_key_pub(k))
        return (selection & OSSL_KEYMGMT_SELECT_ALL) == 0;
    if (selection & OSSL_KEYMGMT_SELECT_PRIVATE_KEY)
        return klp_key_remote(k);
    return 1;
}

static int km_match(const void *a, const void *b, int selection)
{
    const klp_key *ka = a, *kb = b;
    if (!klp_key_pub(ka) || !klp_key_pub(kb))
        return 0;
    /* Equal public halves mean equal keys; parameters are part of them. */
    return EVP_PKEY_eq(klp_key_pub(ka), klp_key_pub(kb)) == 1;
}

/* Private material that must never be imported. */
static int has_private(const OSSL_PARAM params[])
{
    static const char *const names[] = {
        OSSL_PKEY_PARAM_PRIV_KEY,      OSSL_PKEY_PARAM_RSA_D,
        OSSL_PKEY_PARAM_RSA_FACTOR1,   OSSL_PKEY_PARAM_RSA_FACTOR2,
        OSSL_PKEY_PARAM_RSA_EXPONENT1, OSSL_PKEY_PARAM_RSA_COEFFICIENT1,
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (OSSL_PARAM_locate_const(params, names[i]))
            return 1;
    return 0;
}

static int km_import(void *kd, int selection, const OSSL_PARAM params[])
{
    klp_key *k = kd;
    EVP_PKEY *pub = NULL;
    if (!k || klp_key_pub(k) || has_private(params) ||
        !(selection & OSSL_KEYMGMT_SELECT_PUBLIC_KEY))
        return 0;
    klp_ctx *p = klp_key_prov(k);
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_name(
        klp_libctx(p), klp_type_name(klp_key_type(k)), KLP_PROPQ);
    int ok = c && EVP_PKEY_fromdata_init(c) == 1 &&
             EVP_PKEY_fromdata(c, &pub, EVP_PKEY_PUBLIC_KEY,
                               (OSSL_PARAM *)params) == 1 &&
             klp_key_set_public(k, pub);
    if (!ok)
        EVP_PKEY_free(pub);
    EVP_PKEY_CTX_free(c);
    return ok;
}

static int km_export(void *kd, int selection, OSSL_CALLBACK *cb, void *cbarg)
{
    klp_key *k = kd;
    OSSL_PARAM *params = NULL;
    if (!k || !klp_key_pub(k) || (selection & OSSL_KEYMGMT_SELECT_PRIVATE_KEY))
        return 0;
    int sel = selection & (OSSL_KEYMGMT_SELECT_PUBLIC_KEY |
                           OSSL_KEYMGMT_SELECT_ALL_PARAMETERS);
    if (sel == 0 || EVP_PKEY_todata(klp_key_pub(k), sel, &params) != 1)
        return 0;
    int ok = cb(params, cbarg);
    OSSL_PARAM_free(params);
    return ok;
}

static int km_get_params(void *kd, OSSL_PARAM params[])
{
    klp_key *k = kd;
    if (!k || !klp_key_pub(k))
        return 0;
    return EVP_PKEY_get_params(klp_key_pub(k), params);
}

static void *km_load(const void *reference, size_t reference_sz)
{
    klp_keyref_handle *h = (klp_keyref_handle *)reference;
    if (reference_sz != sizeof(*h) ||
        memcmp(h->magic, KLP_HANDLE_MAGIC, sizeof(h->magic)) != 0)
        return NULL;
    /* Take the decoder's key (it frees whatever is left). */
    klp_key *k = h->key;
    h->key = NULL;
    return k;
}

static void *km_dup(const void *kd, int selection)
{
    klp_key *k = (klp_key *)kd;
    /* Keys are immutable once built: a duplicate is another reference. */
    if (k && klp_key_pub(k))
        klp_key_up_ref(k);
    else
        k = NULL;
    return k;
}

static void km_free(void *kd)
{
    klp_key_free(kd);
}

/* What import takes and export gives, per type (public halves only). */
static const OSSL_PARAM rsa_params[] = {
    OSSL_PARAM_BN(OSSL_PKEY_PARAM_RSA_N, NULL, 0),
    OSSL_PARAM_BN(OSSL_PKEY_PARAM_RSA_E, NULL, 0),
    OSSL_PARAM_END,
};
static const OSSL_PARAM ec_params[] = {
    OSSL_PARAM_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, NULL, 0),
    OSSL_PARAM_utf8_string(OSSL_PKEY_PARAM_EC_ENCODING, NULL, 0),
    OSSL_PARAM_utf8_string(OSSL_PKEY_PARAM_EC_POINT_CONVERSION_FORMAT, NULL, 0),
    OSSL_PARAM_octet_string(OSSL_PKEY_PARAM_PUB_KEY, NULL, 0),
    OSSL_PARAM_END,
};
static const OSSL_PARAM ed_params[] = {
    OSSL_PARAM_octet_string(OSSL_PKEY_PARAM_PUB_KEY, NULL, 0),
    OSSL_PARAM_END,
};
static const OSSL_PARAM gettables[] = {
    OSSL_PARAM_int(OSSL_PKEY_PARAM_BITS, NULL),
    OSSL_PARAM_int(OSSL_PKEY_PARAM_SECURITY_BITS, NULL),
    OSSL_PARAM_int(OSSL_PKEY_PARAM_MAX_SIZE, NULL),
    OSSL_PARAM_utf8_string(OSSL_PKEY_PARAM_DEFAULT_DIGEST, NULL, 0),
    OSSL_PARAM_utf8_string(OSSL_PKEY_PARAM_MANDATORY_DIGEST, NULL, 0),
    OSSL_PARAM_BN(OSSL_PKEY_PARAM_RSA_N, NULL, 0),
    OSSL_PARAM_BN(OSSL_PKEY_PARAM_RSA_E, NULL, 0),
    OSSL_PARAM_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, NULL, 0),
    OSSL_PARAM_utf8_string(OSSL_PKEY_PARAM_EC_ENCODING, NULL, 0),
    OSSL_PARAM_utf8_string(OSSL_PKEY_PARAM_EC_POINT_CONVERSION_FORMAT, NULL, 0),
    OSSL_PARAM_octet_string(OSSL_PKEY_PARAM_PUB_KEY, NULL, 0),
    OSSL_PARAM_octet_string(OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, NULL, 0),
    OSSL_PARAM_END,
};

static const OSSL_PARAM *km_gettable(void *provctx)
{
    return gettables;
}

#define KEYMGMT(tag, TYPE, types, opname)                                      \
    static void *tag##_new(void *provctx)                                      \
    {                                                                          \
        return klp_key_empty(provctx, TYPE);                                   \
    }                                                                          \
    static const OSSL_PARAM *tag##_types(int selection)                        \
    {                                                                          \
        return (selection & OSSL_KEYMGMT_SELECT_PRIVATE_KEY) ? NULL : types;   \
    }                                                                          \
    static const char *tag##_opname(int op)                                    \
    {                                                                          \
        return op == OSSL_OP_SIGNATURE ? opname : NULL;                        \
    }                                                                          \
    const OSSL_DISPATCH klp_##tag##_keymgmt_functions[] = {                    \
        {OSSL_FUNC_KEYMGMT_NEW, (void (*)(void))tag##_new},                    \
        {OSSL_FUNC_KEYMGMT_FREE, (void (*)(void))km_free},                     \
        {OSSL_FUNC_KEYMGMT_LOAD, (void (*)(void))km_load},                     \
        {OSSL_FUNC_KEYMGMT_DUP, (void (*)(void))km_dup},                       \
        {OSSL_FUNC_KEYMGMT_HAS, (void (*)(void))km_has},                       \
        {OSSL_FUNC_KEYMGMT_MATCH, (void (*)(void))km_match},                   \
        {OSSL_FUNC_KEYMGMT_IMPORT, (void (*)(void))km_import},                 \
        {OSSL_FUNC_KEYMGMT_IMPORT_TYPES, (void (*)(void))tag##_types},         \
        {OSSL_FUNC_KEYMGMT_EXPORT, (void (*)(void))km_export},                 \
        {OSSL_FUNC_KEYMGMT_EXPORT_TYPES, (void (*)(void))tag##_types},         \
        {OSSL_FUNC_KEYMGMT_GET_PARAMS, (void (*)(void))km_get_params},         \
        {OSSL_FUNC_KEYMGMT_GETTABLE_PARAMS, (void (*)(void))km_gettable},      \
        {OSSL_FUNC_KEYMGMT_QUERY_OPERATION_NAME,                               \
         (void (*)(void))tag##_opname},                                        \
        {0, NULL},                                                             \
    };

KEYMGMT(rsa, KLP_RSA, rsa_params, "RSA")
KEYMGMT(ec, KLP_EC, ec_params, "ECDSA")
KEYMGMT(ed25519, KLP_ED25519, ed_params, "ED25519")
