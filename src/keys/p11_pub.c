/* SPDX-License-Identifier: Apache-2.0 */
/* The public half of a token's private key, built from the
 * attributes the token holds, so that the SKI (protocol P7) of an HSM key is
 * computed by kl_ski_from_pkey exactly as for a key file:
 * - RSA: CKA_MODULUS and CKA_PUBLIC_EXPONENT;
 * - EC: CKA_EC_PARAMS (a named curve's OID) and CKA_EC_POINT (the point in
 *   a DER OCTET STRING; some modules give it bare);
 * - Ed25519: CKA_EC_PARAMS is the OID 1.3.101.112 or the PrintableString
 *   "edwards25519", CKA_EC_POINT the 32 bytes in a DER OCTET STRING.
 * Modules usually keep EC points only on the public key object: it is
 * looked up by the same label/id when the private object lacks one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/obj_mac.h>
#include <openssl/objects.h>
#include <openssl/param_build.h>
#include <openssl/x509.h>

#include "keys/p11.h"

#define WHY(...) snprintf(why, whylen, __VA_ARGS__)

/* Reads one attribute into a malloc'd buffer; CKR_OK with *buf NULL when
 * the object does not have it. */
static CK_RV get_attr(CK_FUNCTION_LIST *fl, CK_SESSION_HANDLE h,
                      CK_OBJECT_HANDLE o, CK_ATTRIBUTE_TYPE type, uint8_t **buf,
                      size_t *len)
{
    CK_ATTRIBUTE a = {type, NULL, 0};
    *buf = NULL;
    *len = 0;
    CK_RV rv = fl->C_GetAttributeValue(h, o, &a, 1);
    if (rv == CKR_ATTRIBUTE_TYPE_INVALID || rv == CKR_ATTRIBUTE_SENSITIVE ||
        (rv == CKR_OK &&
         (a.ulValueLen == CK_UNAVAILABLE_INFORMATION || a.ulValueLen == 0)))
        return CKR_OK;
    if (rv != CKR_OK)
        return rv;
    if (!(a.pValue = malloc(a.ulValueLen)))
        return CKR_HOST_MEMORY;
    rv = fl->C_GetAttributeValue(h, o, &a, 1);
    if (rv != CKR_OK) {
        free(a.pValue);
        return rv;
    }
    *buf = a.pValue;
    *len = a.ulValueLen;
    return CKR_OK;
}

/* The contents of a DER OCTET STRING that spans exactly [p, p+n), or NULL
 * (then the bytes are taken as a bare point). */
static const uint8_t *der_octets(const uint8_t *p, size_t n, size_t *len)
{
    if (n < 2 || p[0] != 0x04)
        return NULL;
    size_t l, off;
    if (p[1] < 0x80) {
        l = p[1];
        off = 2;
    } else if (p[1] == 0x81 && n >= 3) {
        l = p[2];
        off = 3;
    } else if (p[1] == 0x82 && n >= 4) {
        l = (size_t)p[2] << 8 | p[3];
        off = 4;
    } else {
        return NULL;
    }
    if (off + l != n)
        return NULL;
    *len = l;
    return p + off;
}

/* The curve of CKA_EC_PARAMS: an EC NID, NID_ED25519, or NID_undef. */
static int curve_of(const uint8_t *p, size_t n)
{
    static const char ed_name[] = "edwards25519";
    if (n == 2 + sizeof ed_name - 1 && p[0] == 0x13 &&
        p[1] == sizeof ed_name - 1 && memcmp(p + 2, ed_name, p[1]) == 0)
        return NID_ED25519;
    const unsigned char *q = p;
    ASN1_OBJECT *obj = d2i_ASN1_OBJECT(NULL, &q, (long)n);
    int nid = obj && q == p + n ? OBJ_obj2nid(obj) : NID_undef;
    ASN1_OBJECT_free(obj);
    return nid;
}

static EVP_PKEY *fromdata(const char *type, OSSL_PARAM *params)
{
    EVP_PKEY *pkey = NULL;
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_name(NULL, type, NULL);
    if (c && EVP_PKEY_fromdata_init(c) == 1)
        EVP_PKEY_fromdata(c, &pkey, EVP_PKEY_PUBLIC_KEY, params);
    EVP_PKEY_CTX_free(c);
    return pkey;
}

static EVP_PKEY *rsa_pub(kl_p11_key *k, const uint8_t *n, size_t nlen,
                         const uint8_t *e, size_t elen)
{
    BIGNUM *bn = BN_bin2bn(n, (int)nlen, NULL);
    BIGNUM *be = BN_bin2bn(e, (int)elen, NULL);
    OSSL_PARAM_BLD *b = OSSL_PARAM_BLD_new();
    OSSL_PARAM *params = NULL;
    EVP_PKEY *pkey = NULL;
    if (bn && be && b && OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_RSA_N, bn) &&
        OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_RSA_E, be) &&
        (params = OSSL_PARAM_BLD_to_param(b)))
        pkey = fromdata("RSA", params);
    if (pkey) {
        /* kept for RSA decrypt: the ciphertext is compared with n */
        k->k = (size_t)BN_num_bytes(bn);
        if (!k->k || !(k->modulus = malloc(k->k)) ||
            BN_bn2binpad(bn, k->modulus, (int)k->k) != (int)k->k) {
            EVP_PKEY_free(pkey);
            pkey = NULL;
        }
    }
    OSSL_PARAM_free(params);
    OSSL_PARAM_BLD_free(b);
    BN_free(bn);
    BN_free(be);
    return pkey;
}

static EVP_PKEY *ec_pub(int nid, const uint8_t *pt, size_t len)
{
    if (nid == NID_ED25519)
        return len == 32 ? EVP_PKEY_new_raw_public_key_ex(NULL, "ED25519", NULL,
                                                          pt, len)
                         : NULL;
    const char *name = OBJ_nid2sn(nid);
    if (!name)
        return NULL;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME,
                                         (char *)name, 0),
        OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, (void *)pt,
                                          len),
        OSSL_PARAM_construct_end(),
    };
    return fromdata("EC", params);
}

/* CKA_EC_POINT of the private object, else of the matching public one. */
static CK_RV ec_point(kl_p11_token *t, CK_SESSION_HANDLE h, kl_p11_key *k,
                      CK_OBJECT_HANDLE priv, uint8_t **pt, size_t *len)
{
    CK_FUNCTION_LIST *fl = kl_p11_token_fl(t);
    CK_RV rv = get_attr(fl, h, priv, CKA_EC_POINT, pt, len);
    if (rv != CKR_OK || *pt)
        return rv;
    CK_OBJECT_HANDLE pub;
    size_t count = 0;
    rv = kl_p11_find(t, h, CKO_PUBLIC_KEY, k, &pub, &count);
    if (rv != CKR_OK || count != 1)
        return rv;
    return get_attr(fl, h, pub, CKA_EC_POINT, pt, len);
}

kl_status kl_p11_public_key(kl_p11_token *t, CK_SESSION_HANDLE h, kl_p11_key *k,
                            EVP_PKEY **out, char *why, size_t whylen)
{
    CK_FUNCTION_LIST *fl = kl_p11_token_fl(t);
    CK_OBJECT_HANDLE o = atomic_load(&k->handle);
    CK_KEY_TYPE kt = (CK_KEY_TYPE)-1;
    CK_ATTRIBUTE ta = {CKA_KEY_TYPE, &kt, sizeof kt};
    char b[32];
    CK_RV rv = fl->C_GetAttributeValue(h, o, &ta, 1);
    if (rv != CKR_OK) {
        WHY("cannot read the key type: %s", kl_p11_rv_str(rv, b, sizeof b));
        return KL_E_KEY;
    }
    k->ktype = kt;
    uint8_t *a1 = NULL, *a2 = NULL;
    size_t l1 = 0, l2 = 0;
    EVP_PKEY *pkey = NULL;
    const char *what = "public key";
    if (kt == CKK_RSA) {
        what = "CKA_MODULUS and CKA_PUBLIC_EXPONENT";
        rv = get_attr(fl, h, o, CKA_MODULUS, &a1, &l1);
        if (rv == CKR_OK)
            rv = get_attr(fl, h, o, CKA_PUBLIC_EXPONENT, &a2, &l2);
        if (rv == CKR_OK && a1 && a2)
            pkey = rsa_pub(k, a1, l1, a2, l2);
    } else if (kt == CKK_EC || kt == CKK_EC_EDWARDS) {
        what = "CKA_EC_PARAMS and CKA_EC_POINT";
        rv = get_attr(fl, h, o, CKA_EC_PARAMS, &a1, &l1);
        if (rv == CKR_OK && a1)
            rv = ec_point(t, h, k, o, &a2, &l2);
        int nid = a1 ? curve_of(a1, l1) : NID_undef;
        if (rv == CKR_OK && a2 && nid != NID_undef &&
            (nid == NID_ED25519) == (kt == CKK_EC_EDWARDS)) {
            size_t plen = l2;
            const uint8_t *p = der_octets(a2, l2, &plen);
            pkey = ec_pub(nid, p ? p : a2, plen);
        }
    } else {
        WHY("key type 0x%lx is not supported (RSA, EC, Ed25519)",
            (unsigned long)kt);
        return KL_E_KEY;
    }
    free(a1);
    free(a2);
    if (!pkey) {
        if (rv != CKR_OK)
            WHY("cannot read the public key: %s",
                kl_p11_rv_str(rv, b, sizeof b));
        else
            WHY("cannot build the public key from %s", what);
        return KL_E_KEY;
    }
    *out = pkey;
    return KL_OK;
}
