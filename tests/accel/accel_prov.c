/* SPDX-License-Identifier: Apache-2.0 */
/* kl_accel's algorithms (accel.h): EC and RSA key management that holds a
 * default-provider copy of each key, and ECDSA and RSA (PKCS#1 v1.5, PSS)
 * signatures over a digest, run on the device (accel_dev.c).
 *
 * A key reaches this provider the way a card's provider gets a file key:
 * EVP fetches the signature here (by property query, e.g.
 * "?provider=kl_accel") and exports the key from its own key management
 * into ours (import). Our keys export back, so other operations (RSA
 * decryption, verification) still work through the default provider. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_dispatch.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rsa.h>

#include "accel_int.h"

static atomic_uint_fast64_t next_serial = 1;

/* ---- software signing (the device's work, and full=software) ---- */

size_t acc_soft_sign(const acc_req *r, uint8_t *sig, size_t cap)
{
    EVP_PKEY_CTX *c =
        EVP_PKEY_CTX_new_from_pkey(NULL, r->soft, "provider=default");
    OSSL_PARAM ps[5], *p = ps;
    int pad = r->pad, salt = r->saltlen;
    if (r->md[0])
        *p++ = OSSL_PARAM_construct_utf8_string(OSSL_SIGNATURE_PARAM_DIGEST,
                                                (char *)r->md, 0);
    if (EVP_PKEY_get_base_id(r->soft) == EVP_PKEY_RSA) {
        *p++ = OSSL_PARAM_construct_int(OSSL_SIGNATURE_PARAM_PAD_MODE, &pad);
        if (pad == RSA_PKCS1_PSS_PADDING) {
            *p++ = OSSL_PARAM_construct_int(OSSL_SIGNATURE_PARAM_PSS_SALTLEN,
                                            &salt);
            if (r->mgf1[0])
                *p++ = OSSL_PARAM_construct_utf8_string(
                    OSSL_SIGNATURE_PARAM_MGF1_DIGEST, (char *)r->mgf1, 0);
        }
    }
    *p = OSSL_PARAM_construct_end();
    size_t n = cap;
    bool ok = c && EVP_PKEY_sign_init(c) == 1 &&
              EVP_PKEY_CTX_set_params(c, ps) == 1 &&
              EVP_PKEY_sign(c, sig, &n, r->tbs, r->tbslen) == 1;
    EVP_PKEY_CTX_free(c);
    return ok ? n : 0;
}

/* ---- key management ---- */

static void *km_new(void *provctx, int type)
{
    (void)provctx;
    acc_key *k = OPENSSL_zalloc(sizeof *k);
    if (k) {
        k->type = type;
        k->serial = atomic_fetch_add(&next_serial, 1);
    }
    return k;
}
static void *km_new_ec(void *provctx)
{
    return km_new(provctx, EVP_PKEY_EC);
}
static void *km_new_rsa(void *provctx)
{
    return km_new(provctx, EVP_PKEY_RSA);
}

static void km_free(void *kd)
{
    acc_key *k = kd;
    if (k)
        EVP_PKEY_free(k->soft);
    OPENSSL_free(k);
}

static int km_has(const void *kd, int selection)
{
    const acc_key *k = kd;
    if (!k || !k->soft)
        return 0;
    /* a key made from a public key only cannot sign */
    if (selection & OSSL_KEYMGMT_SELECT_PRIVATE_KEY) {
        const char *name = k->type == EVP_PKEY_EC ? OSSL_PKEY_PARAM_PRIV_KEY
                                                  : OSSL_PKEY_PARAM_RSA_D;
        BIGNUM *bn = NULL;
        int ok = EVP_PKEY_get_bn_param(k->soft, name, &bn);
        BN_clear_free(bn);
        return ok;
    }
    return 1;
}

static int km_import(void *kd, int selection, const OSSL_PARAM params[])
{
    acc_key *k = kd;
    int what = (selection & OSSL_KEYMGMT_SELECT_PRIVATE_KEY) ? EVP_PKEY_KEYPAIR
               : (selection & OSSL_KEYMGMT_SELECT_PUBLIC_KEY)
                   ? EVP_PKEY_PUBLIC_KEY
                   : EVP_PKEY_KEY_PARAMETERS;
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_name(
        NULL, k->type == EVP_PKEY_EC ? "EC" : "RSA", "provider=default");
    EVP_PKEY *pk = NULL;
    int ok = c && EVP_PKEY_fromdata_init(c) == 1 &&
             EVP_PKEY_fromdata(c, &pk, what, (OSSL_PARAM *)params) == 1;
    EVP_PKEY_CTX_free(c);
    if (ok) {
        EVP_PKEY_free(k->soft);
        k->soft = pk;
    }
    return ok;
}

static int km_export(void *kd, int selection, OSSL_CALLBACK *cb, void *cbarg)
{
    acc_key *k = kd;
    int what = (selection & OSSL_KEYMGMT_SELECT_PRIVATE_KEY) ? EVP_PKEY_KEYPAIR
               : (selection & OSSL_KEYMGMT_SELECT_PUBLIC_KEY)
                   ? EVP_PKEY_PUBLIC_KEY
                   : EVP_PKEY_KEY_PARAMETERS;
    OSSL_PARAM *ps = NULL;
    if (!k->soft || EVP_PKEY_todata(k->soft, what, &ps) != 1)
        return 0;
    int ok = cb(ps, cbarg);
    /* OSSL_PARAM_free does not wipe (OpenSSL 3.0 has no clear_free) */
    for (OSSL_PARAM *p = ps; p->key; p++)
        OPENSSL_cleanse(p->data, p->data_size);
    OSSL_PARAM_free(ps);
    return ok;
}

static const OSSL_PARAM ec_types[] = {
    OSSL_PARAM_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, NULL, 0),
    OSSL_PARAM_octet_string(OSSL_PKEY_PARAM_PUB_KEY, NULL, 0),
    OSSL_PARAM_BN(OSSL_PKEY_PARAM_PRIV_KEY, NULL, 0),
    OSSL_PARAM_utf8_string(OSSL_PKEY_PARAM_EC_POINT_CONVERSION_FORMAT, NULL, 0),
    OSSL_PARAM_utf8_string(OSSL_PKEY_PARAM_EC_ENCODING, NULL, 0),
    OSSL_PARAM_END};
static const OSSL_PARAM rsa_types[] = {
    OSSL_PARAM_BN(OSSL_PKEY_PARAM_RSA_N, NULL, 0),
    OSSL_PARAM_BN(OSSL_PKEY_PARAM_RSA_E, NULL, 0),
    OSSL_PARAM_BN(OSSL_PKEY_PARAM_RSA_D, NULL, 0),
    OSSL_PARAM_BN(OSSL_PKEY_PARAM_RSA_FACTOR1, NULL, 0),
    OSSL_PARAM_BN(OSSL_PKEY_PARAM_RSA_FACTOR2, NULL, 0),
    OSSL_PARAM_BN(OSSL_PKEY_PARAM_RSA_EXPONENT1, NULL, 0),
    OSSL_PARAM_BN(OSSL_PKEY_PARAM_RSA_EXPONENT2, NULL, 0),
    OSSL_PARAM_BN(OSSL_PKEY_PARAM_RSA_COEFFICIENT1, NULL, 0),
    OSSL_PARAM_END};

static const OSSL_PARAM *km_types_ec(int selection)
{
    (void)selection;
    return ec_types;
}
static const OSSL_PARAM *km_types_rsa(int selection)
{
    (void)selection;
    return rsa_types;
}

static int km_get_params(void *kd, OSSL_PARAM params[])
{
    acc_key *k = kd;
    OSSL_PARAM *p;
    if (!k->soft)
        return 0;
    if ((p = OSSL_PARAM_locate(params, OSSL_PKEY_PARAM_BITS)) &&
        !OSSL_PARAM_set_int(p, EVP_PKEY_get_bits(k->soft)))
        return 0;
    if ((p = OSSL_PARAM_locate(params, OSSL_PKEY_PARAM_SECURITY_BITS)) &&
        !OSSL_PARAM_set_int(p, EVP_PKEY_get_security_bits(k->soft)))
        return 0;
    if ((p = OSSL_PARAM_locate(params, OSSL_PKEY_PARAM_MAX_SIZE)) &&
        !OSSL_PARAM_set_int(p, EVP_PKEY_get_size(k->soft)))
        return 0;
    return 1;
}

static const OSSL_PARAM *km_gettable(void *provctx)
{
    (void)provctx;
    static const OSSL_PARAM ps[] = {
        OSSL_PARAM_int(OSSL_PKEY_PARAM_BITS, NULL),
        OSSL_PARAM_int(OSSL_PKEY_PARAM_SECURITY_BITS, NULL),
        OSSL_PARAM_int(OSSL_PKEY_PARAM_MAX_SIZE, NULL), OSSL_PARAM_END};
    return ps;
}

static const char *km_opname_ec(int op)
{
    return op == OSSL_OP_SIGNATURE ? "ECDSA" : NULL;
}
static const char *km_opname_rsa(int op)
{
    return op == OSSL_OP_SIGNATURE ? "RSA" : NULL;
}

#define KM_COMMON                                                              \
    {OSSL_FUNC_KEYMGMT_FREE, (void (*)(void))km_free},                         \
        {OSSL_FUNC_KEYMGMT_HAS, (void (*)(void))km_has},                       \
        {OSSL_FUNC_KEYMGMT_IMPORT, (void (*)(void))km_import},                 \
        {OSSL_FUNC_KEYMGMT_EXPORT, (void (*)(void))km_export},                 \
        {OSSL_FUNC_KEYMGMT_GET_PARAMS, (void (*)(void))km_get_params},         \
    {                                                                          \
        OSSL_FUNC_KEYMGMT_GETTABLE_PARAMS, (void (*)(void))km_gettable         \
    }

static const OSSL_DISPATCH km_ec[] = {
    {OSSL_FUNC_KEYMGMT_NEW, (void (*)(void))km_new_ec},
    {OSSL_FUNC_KEYMGMT_IMPORT_TYPES, (void (*)(void))km_types_ec},
    {OSSL_FUNC_KEYMGMT_EXPORT_TYPES, (void (*)(void))km_types_ec},
    {OSSL_FUNC_KEYMGMT_QUERY_OPERATION_NAME, (void (*)(void))km_opname_ec},
    KM_COMMON,
    {0, NULL}};
static const OSSL_DISPATCH km_rsa[] = {
    {OSSL_FUNC_KEYMGMT_NEW, (void (*)(void))km_new_rsa},
    {OSSL_FUNC_KEYMGMT_IMPORT_TYPES, (void (*)(void))km_types_rsa},
    {OSSL_FUNC_KEYMGMT_EXPORT_TYPES, (void (*)(void))km_types_rsa},
    {OSSL_FUNC_KEYMGMT_QUERY_OPERATION_NAME, (void (*)(void))km_opname_rsa},
    KM_COMMON,
    {0, NULL}};

/* ---- signatures ---- */

typedef struct sig_ctx {
    int type;
    acc_key *key; /* not owned: the EVP_PKEY holds it */
    acc_req req;  /* parameters; soft and tbs filled at sign */
} sig_ctx;

static void *sig_new(int type)
{
    sig_ctx *c = OPENSSL_zalloc(sizeof *c);
    if (c) {
        c->type = type;
        c->req.pad = RSA_PKCS1_PADDING;
        c->req.saltlen = RSA_PSS_SALTLEN_DIGEST;
    }
    return c;
}
static void *sig_new_ec(void *provctx, const char *propq)
{
    (void)provctx, (void)propq;
    return sig_new(EVP_PKEY_EC);
}
static void *sig_new_rsa(void *provctx, const char *propq)
{
    (void)provctx, (void)propq;
    return sig_new(EVP_PKEY_RSA);
}
static void sig_free(void *vc)
{
    OPENSSL_free(vc);
}
static void *sig_dup(void *vc)
{
    return OPENSSL_memdup(vc, sizeof(sig_ctx));
}

static bool copy_name(char *dst, const OSSL_PARAM *p)
{
    const char *s = NULL;
    if (!OSSL_PARAM_get_utf8_string_ptr(p, &s) || strlen(s) >= ACC_NAME_MAX)
        return false;
    strcpy(dst, s);
    return true;
}

/* pad-mode and saltlen come as numbers or names (EVP passes either). */
static bool get_pad(const OSSL_PARAM *p, int *pad)
{
    const char *s;
    if (p->data_type == OSSL_PARAM_INTEGER)
        return OSSL_PARAM_get_int(p, pad);
    if (!OSSL_PARAM_get_utf8_string_ptr(p, &s))
        return false;
    if (!strcmp(s, OSSL_PKEY_RSA_PAD_MODE_PKCSV15))
        *pad = RSA_PKCS1_PADDING;
    else if (!strcmp(s, OSSL_PKEY_RSA_PAD_MODE_PSS))
        *pad = RSA_PKCS1_PSS_PADDING;
    else
        return false;
    return true;
}

static bool get_salt(const OSSL_PARAM *p, int *salt)
{
    const char *s;
    if (p->data_type == OSSL_PARAM_INTEGER)
        return OSSL_PARAM_get_int(p, salt);
    if (!OSSL_PARAM_get_utf8_string_ptr(p, &s))
        return false;
    if (!strcmp(s, OSSL_PKEY_RSA_PSS_SALT_LEN_DIGEST))
        *salt = RSA_PSS_SALTLEN_DIGEST;
    else if (!strcmp(s, OSSL_PKEY_RSA_PSS_SALT_LEN_MAX))
        *salt = RSA_PSS_SALTLEN_MAX;
    else if (!strcmp(s, OSSL_PKEY_RSA_PSS_SALT_LEN_AUTO))
        *salt = RSA_PSS_SALTLEN_AUTO;
    else
        *salt = atoi(s);
    return true;
}

static int sig_set_params(void *vc, const OSSL_PARAM params[])
{
    sig_ctx *c = vc;
    const OSSL_PARAM *p;
    if (!params)
        return 1;
    if ((p = OSSL_PARAM_locate_const(params, OSSL_SIGNATURE_PARAM_DIGEST)) &&
        !copy_name(c->req.md, p))
        return 0;
    if (c->type != EVP_PKEY_RSA)
        return 1;
    if ((p = OSSL_PARAM_locate_const(params, OSSL_SIGNATURE_PARAM_PAD_MODE)) &&
        !get_pad(p, &c->req.pad))
        return 0;
    if ((p = OSSL_PARAM_locate_const(params,
                                     OSSL_SIGNATURE_PARAM_PSS_SALTLEN)) &&
        !get_salt(p, &c->req.saltlen))
        return 0;
    if ((p = OSSL_PARAM_locate_const(params,
                                     OSSL_SIGNATURE_PARAM_MGF1_DIGEST)) &&
        !copy_name(c->req.mgf1, p))
        return 0;
    return 1;
}

static const OSSL_PARAM *sig_settable(void *vc, void *provctx)
{
    (void)provctx;
    static const OSSL_PARAM ec[] = {
        OSSL_PARAM_utf8_string(OSSL_SIGNATURE_PARAM_DIGEST, NULL, 0),
        OSSL_PARAM_END};
    static const OSSL_PARAM rsa[] = {
        OSSL_PARAM_utf8_string(OSSL_SIGNATURE_PARAM_DIGEST, NULL, 0),
        OSSL_PARAM_int(OSSL_SIGNATURE_PARAM_PAD_MODE, NULL),
        OSSL_PARAM_int(OSSL_SIGNATURE_PARAM_PSS_SALTLEN, NULL),
        OSSL_PARAM_utf8_string(OSSL_SIGNATURE_PARAM_MGF1_DIGEST, NULL, 0),
        OSSL_PARAM_END};
    const sig_ctx *c = vc;
    return c && c->type == EVP_PKEY_RSA ? rsa : ec;
}

static int sig_get_params(void *vc, OSSL_PARAM params[])
{
    (void)vc, (void)params;
    return 1;
}
static const OSSL_PARAM *sig_gettable(void *vc, void *provctx)
{
    (void)vc, (void)provctx;
    static const OSSL_PARAM none[] = {OSSL_PARAM_END};
    return none;
}

static int sig_init(void *vc, void *kd, const OSSL_PARAM params[])
{
    sig_ctx *c = vc;
    acc_key *k = kd;
    if (!k || !k->soft || k->type != c->type)
        return 0;
    c->key = k;
    return sig_set_params(c, params);
}

static int sig_sign(void *vc, unsigned char *sig, size_t *siglen,
                    size_t sigsize, const unsigned char *tbs, size_t tbslen)
{
    sig_ctx *c = vc;
    size_t max = (size_t)EVP_PKEY_get_size(c->key->soft);
    if (!sig) {
        *siglen = max;
        return 1;
    }
    if (tbslen > ACC_MAX_TBS || sigsize < max || max > ACC_MAX_SIG)
        return 0;
    acc_req r = c->req;
    r.soft = c->key->soft;
    r.serial = c->key->serial;
    memcpy(r.tbs, tbs, tbslen);
    r.tbslen = tbslen;
    /* room for the key's largest signature: the device needs no more */
    size_t n = acc_dev_sign(&r, sig, max);
    OPENSSL_cleanse(r.tbs, tbslen);
    if (!n) {
        ERR_raise_data(ERR_LIB_PROV, ERR_R_OPERATION_FAIL,
                       "kl_accel: the device failed or did not answer");
        return 0;
    }
    *siglen = n;
    return 1;
}

#define SIG_COMMON                                                             \
    {OSSL_FUNC_SIGNATURE_FREECTX, (void (*)(void))sig_free},                   \
        {OSSL_FUNC_SIGNATURE_DUPCTX, (void (*)(void))sig_dup},                 \
        {OSSL_FUNC_SIGNATURE_SIGN_INIT, (void (*)(void))sig_init},             \
        {OSSL_FUNC_SIGNATURE_SIGN, (void (*)(void))sig_sign},                  \
        {OSSL_FUNC_SIGNATURE_SET_CTX_PARAMS, (void (*)(void))sig_set_params},  \
        {OSSL_FUNC_SIGNATURE_SETTABLE_CTX_PARAMS,                              \
         (void (*)(void))sig_settable},                                        \
        {OSSL_FUNC_SIGNATURE_GET_CTX_PARAMS, (void (*)(void))sig_get_params},  \
    {                                                                          \
        OSSL_FUNC_SIGNATURE_GETTABLE_CTX_PARAMS, (void (*)(void))sig_gettable  \
    }

static const OSSL_DISPATCH sig_ecdsa[] = {
    {OSSL_FUNC_SIGNATURE_NEWCTX, (void (*)(void))sig_new_ec},
    SIG_COMMON,
    {0, NULL}};
static const OSSL_DISPATCH sig_rsa[] = {
    {OSSL_FUNC_SIGNATURE_NEWCTX, (void (*)(void))sig_new_rsa},
    SIG_COMMON,
    {0, NULL}};

/* ---- the provider ---- */

#define PROPS "provider=" KL_ACCEL_NAME

static const OSSL_ALGORITHM keymgmts[] = {
    {"EC:id-ecPublicKey:1.2.840.10045.2.1", PROPS, km_ec, "kl_accel EC"},
    {"RSA:rsaEncryption:1.2.840.113549.1.1.1", PROPS, km_rsa, "kl_accel RSA"},
    {NULL, NULL, NULL, NULL}};
static const OSSL_ALGORITHM signatures[] = {
    {"ECDSA", PROPS, sig_ecdsa, "kl_accel ECDSA"},
    {"RSA:rsaEncryption:1.2.840.113549.1.1.1", PROPS, sig_rsa, "kl_accel RSA"},
    {NULL, NULL, NULL, NULL}};

static const OSSL_ALGORITHM *query(void *provctx, int op, int *no_cache)
{
    (void)provctx;
    *no_cache = 0;
    switch (op) {
    case OSSL_OP_KEYMGMT: return keymgmts;
    case OSSL_OP_SIGNATURE: return signatures;
    default: return NULL;
    }
}

static void teardown(void *provctx)
{
    (void)provctx;
    acc_dev_stop();
}

static const OSSL_DISPATCH prov_fns[] = {
    {OSSL_FUNC_PROVIDER_QUERY_OPERATION, (void (*)(void))query},
    {OSSL_FUNC_PROVIDER_TEARDOWN, (void (*)(void))teardown},
    {0, NULL}};

int kl_accel_provider_init(const OSSL_CORE_HANDLE *handle,
                           const OSSL_DISPATCH *in, const OSSL_DISPATCH **out,
                           void **provctx)
{
    (void)in;
#ifdef KL_ACCEL_MODULE
    /* The device thread outlives the provider (accel_dev.c): the module
     * must stay mapped when OpenSSL unloads it. */
    Dl_info info;
    if (!dladdr((void *)kl_accel_provider_init, &info) ||
        !dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE))
        return 0;
#endif
    if (!acc_dev_start())
        return 0;
    *out = prov_fns;
    *provctx = (void *)handle;
    return 1;
}

#ifdef KL_ACCEL_MODULE
OPENSSL_EXPORT int OSSL_provider_init(const OSSL_CORE_HANDLE *handle,
                                      const OSSL_DISPATCH *in,
                                      const OSSL_DISPATCH **out,
                                      void **provctx);
int OSSL_provider_init(const OSSL_CORE_HANDLE *handle, const OSSL_DISPATCH *in,
                       const OSSL_DISPATCH **out, void **provctx)
{
    return kl_accel_provider_init(handle, in, out, provctx);
}
#endif
