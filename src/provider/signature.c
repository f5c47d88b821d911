/* SPDX-License-Identifier: Apache-2.0 */
/* Signatures with keyless keys: RSA PKCS#1 v1.5 with every TLS
 * hash (and MD5+SHA-1), RSA-PSS (salt = hash length, MGF1 = the hash),
 * ECDSA, and pure Ed25519.
 *
 * EVP_DigestSign* hashes here, locally, and only the digest goes to the key
 * server with the opcode of its hash (protocol P4); Ed25519 sends the whole
 * message (opcode 0x18). EVP_DigestSignFinal duplicates the context before
 * finishing (DUPCTX), so a context can be finished more than once. */
#include <stdlib.h>
#include <string.h>

#include <openssl/core_dispatch.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rsa.h>

#include "provider/key.h"

typedef struct sig_ctx {
    klp_ctx *prov;
    klp_type type; /* of the algorithm: RSA, EC (ECDSA), ED25519 */
    klp_key *key;
    EVP_MD *md;        /* NULL: none chosen */
    EVP_MD_CTX *mdctx; /* while digest-signing */
    int pad;           /* RSA_PKCS1_PADDING or RSA_PKCS1_PSS_PADDING */
    int saltlen;       /* RSA_PSS_SALTLEN_DIGEST or a byte count */
    EVP_MD *mgf1;      /* NULL: the signing hash */
} sig_ctx;

static sig_ctx *sig_new(void *provctx, klp_type type)
{
    sig_ctx *c = OPENSSL_zalloc(sizeof(*c));
    if (c) {
        c->prov = provctx;
        c->type = type;
        c->pad = RSA_PKCS1_PADDING;
        c->saltlen = RSA_PSS_SALTLEN_DIGEST;
    }
    return c;
}

static void sig_free(void *vctx)
{
    sig_ctx *c = vctx;
    if (!c)
        return;
    klp_key_free(c->key);
    EVP_MD_free(c->md);
    EVP_MD_free(c->mgf1);
    EVP_MD_CTX_free(c->mdctx);
    OPENSSL_free(c);
}

static void *sig_dup(void *vctx)
{
    sig_ctx *src = vctx, *c = OPENSSL_memdup(src, sizeof(*src));
    if (!c)
        return NULL;
    /* Take our own references before anything can fail. */
    c->mdctx = NULL;
    c->md = c->mgf1 = NULL;
    if (c->key)
        klp_key_up_ref(c->key);
    if (src->md && EVP_MD_up_ref(src->md))
        c->md = src->md;
    if (src->mgf1 && EVP_MD_up_ref(src->mgf1))
        c->mgf1 = src->mgf1;
    if (c->md != src->md || c->mgf1 != src->mgf1) {
        sig_free(c);
        return NULL;
    }
    if (src->mdctx && (!(c->mdctx = EVP_MD_CTX_new()) ||
                       !EVP_MD_CTX_copy_ex(c->mdctx, src->mdctx))) {
        sig_free(c);
        return NULL;
    }
    return c;
}

static int set_md(sig_ctx *c, EVP_MD **slot, const char *name)
{
    EVP_MD *md = EVP_MD_fetch(klp_libctx(c->prov), name, KLP_PROPQ);
    if (!md) {
        KLP_RAISE(c->prov, KLP_R_UNSUPPORTED, "unknown digest %s", name);
        return 0;
    }
    EVP_MD_free(*slot);
    *slot = md;
    return 1;
}

static int sig_set_params(void *vctx, const OSSL_PARAM params[]);

static int sig_init(void *vctx, void *vkey, const OSSL_PARAM params[])
{
    sig_ctx *c = vctx;
    klp_key *k = vkey;
    if (!k || klp_key_type(k) != c->type || !klp_key_remote(k)) {
        KLP_RAISE(c->prov, KLP_R_BAD_INPUT,
                  "not a keyless key reference of type %s",
                  klp_type_name(c->type));
        return 0;
    }
    klp_key_up_ref(k);
    klp_key_free(c->key);
    c->key = k;
    return sig_set_params(c, params);
}

/* The P4 opcode for the context's padding and hash (digest length n). */
static uint8_t pick_op(sig_ctx *c, size_t n)
{
    static const struct {
        const char *md;
        uint8_t rsa, ecdsa, pss;
        size_t len;
    } t[] = {
        {"MD5-SHA1", 0x02, 0x12, 0, 36},  {"SHA1", 0x03, 0x13, 0, 20},
        {"SHA224", 0x04, 0x14, 0, 28},    {"SHA256", 0x05, 0x15, 0x35, 32},
        {"SHA384", 0x06, 0x16, 0x36, 48}, {"SHA512", 0x07, 0x17, 0x37, 64},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        if (c->md ? !EVP_MD_is_a(c->md, t[i].md) : n != t[i].len)
            continue;
        if (n != t[i].len)
            return 0;
        if (c->type == KLP_EC)
            return t[i].ecdsa;
        if (c->pad == RSA_PKCS1_PSS_PADDING)
            return t[i].pss;
        /* Without a hash, PKCS#1 v1.5 signs the bytes as they are: only
         * the MD5+SHA-1 opcode does that (no DigestInfo, P4). */
        return (c->md || t[i].rsa == 0x02) ? t[i].rsa : 0;
    }
    return 0;
}

static int pss_ok(sig_ctx *c)
{
    int h = c->md ? EVP_MD_get_size(c->md) : 0;
    if (c->saltlen != RSA_PSS_SALTLEN_DIGEST && c->saltlen != h) {
        KLP_RAISE(c->prov, KLP_R_UNSUPPORTED,
                  "key servers sign RSA-PSS with salt length = hash length "
                  "only (asked for %d)",
                  c->saltlen);
        return 0;
    }
    if (c->mgf1 && (!c->md || !EVP_MD_is_a(c->mgf1, EVP_MD_get0_name(c->md)))) {
        KLP_RAISE(c->prov, KLP_R_UNSUPPORTED,
                  "key servers use MGF1 with the signing hash only");
        return 0;
    }
    return 1;
}

static int sign_digest(sig_ctx *c, unsigned char *sig, size_t *siglen,
                       size_t sigsize, const unsigned char *tbs, size_t n)
{
    size_t max = klp_key_max_output(c->key);
    if (!sig) {
        *siglen = max;
        return 1;
    }
    if (c->type == KLP_RSA && c->pad == RSA_PKCS1_PSS_PADDING && !pss_ok(c))
        return 0;
    uint8_t op = c->type == KLP_ED25519 ? KL_OP_ED25519_SIGN : pick_op(c, n);
    if (op == 0) {
        KLP_RAISE(c->prov, KLP_R_UNSUPPORTED,
                  "no key-server operation signs a %zu-byte input with %s "
                  "(%s padding)",
                  n, c->md ? EVP_MD_get0_name(c->md) : "no hash",
                  c->pad == RSA_PKCS1_PSS_PADDING ? "PSS" : "PKCS#1 v1.5");
        return 0;
    }
    if (c->type == KLP_RSA && sigsize < max) {
        KLP_RAISE(c->prov, KLP_R_BAD_INPUT, "signature buffer too small");
        return 0;
    }
    return klp_key_op(c->key, op, tbs, n, sig, sigsize, siglen);
}

static int sig_sign(void *vctx, unsigned char *sig, size_t *siglen,
                    size_t sigsize, const unsigned char *tbs, size_t tbslen)
{
    return sign_digest(vctx, sig, siglen, sigsize, tbs, tbslen);
}

static int sig_dsign_init(void *vctx, const char *mdname, void *vkey,
                          const OSSL_PARAM params[])
{
    sig_ctx *c = vctx;
    if (!sig_init(c, vkey, params))
        return 0;
    if (c->type == KLP_ED25519) {
        if (mdname && mdname[0]) {
            KLP_RAISE(c->prov, KLP_R_UNSUPPORTED, "Ed25519 takes no digest");
            return 0;
        }
        return 1;
    }
    if (!set_md(c, &c->md, mdname && mdname[0] ? mdname : "SHA256"))
        return 0;
    if (!c->mdctx && !(c->mdctx = EVP_MD_CTX_new()))
        return 0;
    return EVP_DigestInit_ex2(c->mdctx, c->md, NULL);
}

static int sig_dsign_update(void *vctx, const unsigned char *data, size_t n)
{
    sig_ctx *c = vctx;
    return c->mdctx && EVP_DigestUpdate(c->mdctx, data, n);
}

static int sig_dsign_final(void *vctx, unsigned char *sig, size_t *siglen,
                           size_t sigsize)
{
    sig_ctx *c = vctx;
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (!c->mdctx)
        return 0;
    if (!sig)
        return sign_digest(c, NULL, siglen, 0, NULL, 0);
    if (!EVP_DigestFinal_ex(c->mdctx, d, &n))
        return 0;
    return sign_digest(c, sig, siglen, sigsize, d, n);
}

/* Ed25519 is one-shot: the key server gets the message itself. */
static int sig_dsign_oneshot(void *vctx, unsigned char *sig, size_t *siglen,
                             size_t sigsize, const unsigned char *tbs,
                             size_t tbslen)
{
    return sign_digest(vctx, sig, siglen, sigsize, tbs, tbslen);
}

static int get_int_or_name(const OSSL_PARAM *p, int *v, const OSSL_ITEM *names)
{
    if (p->data_type != OSSL_PARAM_UTF8_STRING)
        return OSSL_PARAM_get_int(p, v);
    for (; names->ptr; names++)
        if (strcmp(p->data, names->ptr) == 0) {
            *v = (int)names->id;
            return 1;
        }
    char *end;
    long l = strtol(p->data, &end, 10);
    if (*end != '\0' || l < -3 || l > 1024)
        return 0;
    *v = (int)l;
    return 1;
}

static int sig_set_params(void *vctx, const OSSL_PARAM params[])
{
    static const OSSL_ITEM pads[] = {{RSA_PKCS1_PADDING, "pkcs1"},
                                     {RSA_PKCS1_PSS_PADDING, "pss"},
                                     {RSA_NO_PADDING, "none"},
                                     {0, NULL}};
    static const OSSL_ITEM salts[] = {
        {(unsigned)RSA_PSS_SALTLEN_DIGEST, "digest"},
        {(unsigned)RSA_PSS_SALTLEN_MAX, "max"},
        {(unsigned)RSA_PSS_SALTLEN_AUTO, "auto"},
        {0, NULL}};
    sig_ctx *c = vctx;
    const OSSL_PARAM *p;
    if (!params)
        return 1;
    if ((p = OSSL_PARAM_locate_const(params, OSSL_SIGNATURE_PARAM_DIGEST))) {
        if (p->data_type != OSSL_PARAM_UTF8_STRING || c->type == KLP_ED25519 ||
            !set_md(c, &c->md, p->data))
            return 0;
    }
    if ((p = OSSL_PARAM_locate_const(params,
                                     OSSL_SIGNATURE_PARAM_MGF1_DIGEST))) {
        if (p->data_type != OSSL_PARAM_UTF8_STRING ||
            !set_md(c, &c->mgf1, p->data))
            return 0;
    }
    if ((p = OSSL_PARAM_locate_const(params, OSSL_SIGNATURE_PARAM_PAD_MODE))) {
        int pad;
        if (c->type != KLP_RSA || !get_int_or_name(p, &pad, pads) ||
            (pad != RSA_PKCS1_PADDING && pad != RSA_PKCS1_PSS_PADDING)) {
            KLP_RAISE(c->prov, KLP_R_UNSUPPORTED,
                      "keyless RSA keys sign with PKCS#1 v1.5 or PSS only");
            return 0;
        }
        c->pad = pad;
    }
    if ((p = OSSL_PARAM_locate_const(params,
                                     OSSL_SIGNATURE_PARAM_PSS_SALTLEN))) {
        if (!get_int_or_name(p, &c->saltlen, salts))
            return 0;
    }
    return 1;
}

static const OSSL_PARAM *sig_settable(void *vctx, void *provctx)
{
    static const OSSL_PARAM t[] = {
        OSSL_PARAM_utf8_string(OSSL_SIGNATURE_PARAM_DIGEST, NULL, 0),
        OSSL_PARAM_utf8_string(OSSL_SIGNATURE_PARAM_PAD_MODE, NULL, 0),
        OSSL_PARAM_utf8_string(OSSL_SIGNATURE_PARAM_PSS_SALTLEN, NULL, 0),
        OSSL_PARAM_utf8_string(OSSL_SIGNATURE_PARAM_MGF1_DIGEST, NULL, 0),
        OSSL_PARAM_END,
    };
    return t;
}

static int sig_get_params(void *vctx, OSSL_PARAM params[])
{
    sig_ctx *c = vctx;
    OSSL_PARAM *p;
    if ((p = OSSL_PARAM_locate(params, OSSL_SIGNATURE_PARAM_DIGEST)) &&
        !OSSL_PARAM_set_utf8_string(p, c->md ? EVP_MD_get0_name(c->md) : ""))
        return 0;
    if ((p = OSSL_PARAM_locate(params, OSSL_SIGNATURE_PARAM_PAD_MODE))) {
        int ok =
            p->data_type == OSSL_PARAM_INTEGER
                ? OSSL_PARAM_set_int(p, c->pad)
                : OSSL_PARAM_set_utf8_string(
                      p, c->pad == RSA_PKCS1_PSS_PADDING ? "pss" : "pkcs1");
        if (!ok)
            return 0;
    }
    if ((p = OSSL_PARAM_locate(params, OSSL_SIGNATURE_PARAM_PSS_SALTLEN)) &&
        p->data_type == OSSL_PARAM_INTEGER &&
        !OSSL_PARAM_set_int(p, c->saltlen))
        return 0;
    return 1;
}

static const OSSL_PARAM *sig_gettable(void *vctx, void *provctx)
{
    static const OSSL_PARAM t[] = {
        OSSL_PARAM_utf8_string(OSSL_SIGNATURE_PARAM_DIGEST, NULL, 0),
        OSSL_PARAM_utf8_string(OSSL_SIGNATURE_PARAM_PAD_MODE, NULL, 0),
        OSSL_PARAM_int(OSSL_SIGNATURE_PARAM_PSS_SALTLEN, NULL),
        OSSL_PARAM_END,
    };
    return t;
}

#define SIG_COMMON(tag)                                                        \
    {OSSL_FUNC_SIGNATURE_NEWCTX, (void (*)(void))tag##_new},                   \
        {OSSL_FUNC_SIGNATURE_FREECTX, (void (*)(void))sig_free},               \
        {OSSL_FUNC_SIGNATURE_DUPCTX, (void (*)(void))sig_dup},                 \
        {OSSL_FUNC_SIGNATURE_DIGEST_SIGN_INIT,                                 \
         (void (*)(void))sig_dsign_init},                                      \
        {OSSL_FUNC_SIGNATURE_SET_CTX_PARAMS, (void (*)(void))sig_set_params},  \
        {OSSL_FUNC_SIGNATURE_SETTABLE_CTX_PARAMS,                              \
         (void (*)(void))sig_settable},                                        \
        {OSSL_FUNC_SIGNATURE_GET_CTX_PARAMS, (void (*)(void))sig_get_params},  \
    {                                                                          \
        OSSL_FUNC_SIGNATURE_GETTABLE_CTX_PARAMS, (void (*)(void))sig_gettable  \
    }

/* RSA and ECDSA: sign a digest, or hash here and sign the digest. */
#define SIG_DIGEST                                                             \
    {OSSL_FUNC_SIGNATURE_SIGN_INIT, (void (*)(void))sig_init},                 \
        {OSSL_FUNC_SIGNATURE_SIGN, (void (*)(void))sig_sign},                  \
        {OSSL_FUNC_SIGNATURE_DIGEST_SIGN_UPDATE,                               \
         (void (*)(void))sig_dsign_update},                                    \
    {                                                                          \
        OSSL_FUNC_SIGNATURE_DIGEST_SIGN_FINAL, (void (*)(void))sig_dsign_final \
    }

static void *rsa_new(void *provctx, const char *propq)
{
    return sig_new(provctx, KLP_RSA);
}
static void *ecdsa_new(void *provctx, const char *propq)
{
    return sig_new(provctx, KLP_EC);
}
static void *ed25519_new(void *provctx, const char *propq)
{
    return sig_new(provctx, KLP_ED25519);
}

const OSSL_DISPATCH klp_rsa_signature_functions[] = {
    SIG_COMMON(rsa), SIG_DIGEST, {0, NULL}};
const OSSL_DISPATCH klp_ecdsa_signature_functions[] = {
    SIG_COMMON(ecdsa), SIG_DIGEST, {0, NULL}};
const OSSL_DISPATCH klp_ed25519_signature_functions[] = {
    SIG_COMMON(ed25519),
    {OSSL_FUNC_SIGNATURE_DIGEST_SIGN, (void (*)(void))sig_dsign_oneshot},
    {0, NULL}};
