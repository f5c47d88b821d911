/* SPDX-License-Identifier: Apache-2.0 */
/* Executing one private-key operation (protocol P4) with OpenSSL's EVP API.
 * Opcode constants come straight from keyless/protocol.h so this file
 * needs nothing from src/proto. */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/rsa.h>

#include "crypto/ctx_cache.h"
#include "crypto/ec_direct.h"
#include "crypto/ops.h"
#include "crypto/p11_ops.h"

typedef enum op_family {
    FAM_NONE = 0,
    FAM_RSA_DECRYPT,
    FAM_RSA_PKCS1,
    FAM_RSA_PSS,
    FAM_ECDSA,
    FAM_ED25519,
} op_family;

typedef struct op_spec {
    op_family fam;
    const char *md; /* signature digest (OpenSSL name), or NULL */
    size_t dlen;    /* exact input length, or 0 = any */
} op_spec;

/* protocol P4 */
static op_spec spec_of(uint8_t op)
{
    switch (op) {
    case KL_OP_RSA_DECRYPT: return (op_spec){FAM_RSA_DECRYPT, NULL, 0};
    /* MD5-SHA1 as the signature digest makes OpenSSL sign the 36 bytes
     * with PKCS#1 v1.5 type-1 padding and no DigestInfo (TLS 1.0/1.1). */
    case KL_OP_RSA_SIGN_MD5SHA1:
        return (op_spec){FAM_RSA_PKCS1, "MD5-SHA1", 36};
    case KL_OP_RSA_SIGN_SHA1: return (op_spec){FAM_RSA_PKCS1, "SHA1", 20};
    case KL_OP_RSA_SIGN_SHA224: return (op_spec){FAM_RSA_PKCS1, "SHA224", 28};
    case KL_OP_RSA_SIGN_SHA256: return (op_spec){FAM_RSA_PKCS1, "SHA256", 32};
    case KL_OP_RSA_SIGN_SHA384: return (op_spec){FAM_RSA_PKCS1, "SHA384", 48};
    case KL_OP_RSA_SIGN_SHA512: return (op_spec){FAM_RSA_PKCS1, "SHA512", 64};
    /* ECDSA signs whatever digest it is given, truncated to the order:
     * no signature digest is set, so any length is accepted. */
    case KL_OP_ECDSA_SIGN_MD5SHA1:
    case KL_OP_ECDSA_SIGN_SHA1:
    case KL_OP_ECDSA_SIGN_SHA224:
    case KL_OP_ECDSA_SIGN_SHA256:
    case KL_OP_ECDSA_SIGN_SHA384:
    case KL_OP_ECDSA_SIGN_SHA512: return (op_spec){FAM_ECDSA, NULL, 0};
    case KL_OP_ED25519_SIGN: return (op_spec){FAM_ED25519, NULL, 0};
    case KL_OP_RSA_PSS_SIGN_SHA256: return (op_spec){FAM_RSA_PSS, "SHA256", 32};
    case KL_OP_RSA_PSS_SIGN_SHA384: return (op_spec){FAM_RSA_PSS, "SHA384", 48};
    case KL_OP_RSA_PSS_SIGN_SHA512: return (op_spec){FAM_RSA_PSS, "SHA512", 64};
    default: return (op_spec){FAM_NONE, NULL, 0};
    }
}

static kl_key_type key_type_for(op_family f)
{
    switch (f) {
    case FAM_ECDSA: return KL_KEY_EC;
    case FAM_ED25519: return KL_KEY_ED25519;
    default: return KL_KEY_RSA;
    }
}

size_t kl_crypto_max_output(const kl_key *key)
{
    /* RSA: modulus bytes; EC: the largest DER ECDSA-Sig-Value; Ed25519: 64 */
    return kl_key_max_output(key);
}

kl_cost_class kl_crypto_cost_class(const kl_key *key)
{
    /* ECDSA P-256 ~20 us, Ed25519 less; RSA-2048 ~260 us and up; a device
     * (token, another provider's hardware) blocks for its own time */
    if (key && kl_key_get_backend(key) != KL_BACKEND_FILE)
        return KL_COST_BLOCKING;
    return key && kl_key_get_type(key) == KL_KEY_RSA ? KL_COST_SLOW
                                                     : KL_COST_FAST;
}

bool kl_crypto_is_async(const kl_key *key)
{
    return key && kl_key_get_backend(key) == KL_BACKEND_ASYNC;
}

void kl_crypto_thread_cleanup(void)
{
    kl_ctx_cache_thread_free();
    kl_ec_direct_thread_free();
}

/* ---- context setup (on a cache miss) ------------------------------------ */

static int setup_rsa_decrypt(kl_ctx_entry *e)
{
    BIGNUM *n = NULL;
    int k = EVP_PKEY_get_size(e->pkey);
    if (k < 11 || !EVP_PKEY_get_bn_param(e->pkey, OSSL_PKEY_PARAM_RSA_N, &n))
        return 0;
    e->k = (size_t)k;
    e->modulus = OPENSSL_malloc(e->k);
    int ok = e->modulus && BN_bn2binpad(n, e->modulus, k) == k;
    BN_free(n);
    return ok && EVP_PKEY_decrypt_init(e->pctx) == 1 &&
           EVP_PKEY_CTX_set_rsa_padding(e->pctx, RSA_NO_PADDING) == 1;
}

static int setup(kl_ctx_entry *e)
{
    op_spec sp = spec_of(e->opcode);
    if (sp.fam == FAM_ED25519) {
        e->mctx = EVP_MD_CTX_new();
        return e->mctx && EVP_DigestSignInit_ex(e->mctx, NULL, NULL, NULL,
                                                e->propq, e->pkey, NULL) == 1;
    }
    e->pctx = EVP_PKEY_CTX_new_from_pkey(NULL, e->pkey, e->propq);
    if (!e->pctx)
        return 0;
    if (sp.fam == FAM_RSA_DECRYPT)
        return setup_rsa_decrypt(e);
    if (EVP_PKEY_sign_init(e->pctx) != 1)
        return 0;
    if (sp.fam == FAM_ECDSA)
        return 1;
    const EVP_MD *md = EVP_get_digestbyname(sp.md);
    if (!md || EVP_PKEY_CTX_set_signature_md(e->pctx, md) != 1)
        return 0;
    if (sp.fam == FAM_RSA_PKCS1)
        return EVP_PKEY_CTX_set_rsa_padding(e->pctx, RSA_PKCS1_PADDING) == 1;
    /* PSS: salt length = hash length; MGF1 with the same hash, which is
     * what an unset MGF1 digest means (and providers that hold their own
     * keys, such as tpm2-openssl, accept no other setting) */
    return EVP_PKEY_CTX_set_rsa_padding(e->pctx, RSA_PKCS1_PSS_PADDING) == 1 &&
           EVP_PKEY_CTX_set_rsa_pss_saltlen(e->pctx, RSA_PSS_SALTLEN_DIGEST) ==
               1;
}

/* ---- RSA decrypt -------------------------------------------------------- */

/* -1, 0, 1 as a <, ==, > b (k big-endian bytes each), without branching on
 * the data. */
int kl_crypto_compare_be(const uint8_t *a, const uint8_t *b, size_t k)
{
    unsigned gt = 0, lt = 0;
    for (size_t i = 0; i < k; i++) {
        unsigned x = a[i], y = b[i];
        unsigned open = 1u ^ (gt | lt);
        gt |= open & ((y - x) >> 8 & 1u);
        lt |= open & ((x - y) >> 8 & 1u);
    }
    return (int)gt - (int)lt;
}

/* protocol P4: the raw m = c^d mod n, left-padded to k; leading zero bytes
 * in c are allowed, c > n is a crypto error and c == n gives zeros (as the
 * reference does; OpenSSL itself refuses c >= n). */
static kl_status rsa_decrypt(kl_ctx_entry *e, const uint8_t *in, size_t inlen,
                             uint8_t *out, size_t outcap, size_t *out_len,
                             bool *broken)
{
    size_t k = e->k;
    while (inlen > 0 && in[0] == 0) {
        in++;
        inlen--;
    }
    if (inlen > k)
        return KL_E_CRYPTO;
    if (outcap < k)
        return KL_E_INTERNAL;
    uint8_t *c = OPENSSL_zalloc(k);
    if (!c)
        return KL_E_INTERNAL;
    if (inlen)
        memcpy(c + (k - inlen), in, inlen);
    kl_status err = KL_OK;
    int cmp = kl_crypto_compare_be(c, e->modulus, k);
    if (cmp > 0) {
        err = KL_E_CRYPTO;
    } else if (cmp == 0) {
        memset(out, 0, k);
        *out_len = k;
    } else {
        size_t n = outcap;
        if (EVP_PKEY_decrypt(e->pctx, out, &n, c, k) != 1 || n != k) {
            *broken = true;
            err = KL_E_CRYPTO;
        } else {
            *out_len = k;
        }
    }
    OPENSSL_free(c); /* ciphertext: public */
    return err;
}

/* ---- entry point -------------------------------------------------------- */

static kl_status sign(kl_ctx_entry *e, op_family fam, const uint8_t *in,
                      size_t inlen, uint8_t *out, size_t outcap,
                      size_t *out_len, bool *broken)
{
    size_t n = outcap;
    int ok;
    if (fam == FAM_ED25519) {
        ok = EVP_DigestSign(e->mctx, out, &n, in, inlen) == 1;
        if (!ok) {
            /* newer OpenSSL may refuse a second one-shot on the same
             * context: set it up again once */
            ERR_clear_error();
            ok = EVP_DigestSignInit_ex(e->mctx, NULL, NULL, NULL, e->propq,
                                       e->pkey, NULL) == 1 &&
                 (n = outcap, EVP_DigestSign(e->mctx, out, &n, in, inlen)) == 1;
        }
    } else {
        ok = EVP_PKEY_sign(e->pctx, out, &n, in, inlen) == 1;
    }
    if (!ok) {
        *broken = true;
        return KL_E_CRYPTO;
    }
    *out_len = n;
    return KL_OK;
}

kl_status kl_crypto_exec(const kl_key *key, uint8_t opcode,
                         const uint8_t *payload, size_t plen, uint8_t *out,
                         size_t outcap, size_t *out_len)
{
    return kl_crypto_exec_deadline(key, opcode, payload, plen, out, outcap,
                                   out_len, 0);
}

/* protocol P4's checks before any key work: the opcode, that it fits the
 * key type, the digest length, room for the output. */
static kl_status check(const kl_key *key, op_spec sp, size_t plen,
                       size_t outcap)
{
    if (sp.fam == FAM_NONE)
        return KL_E_BAD_OPCODE;
    if (!key)
        return KL_E_INTERNAL;
    if (kl_key_get_type(key) != key_type_for(sp.fam))
        return KL_E_CRYPTO;
    if (sp.dlen && plen != sp.dlen)
        return KL_E_CRYPTO; /* an RSA or PSS digest of the wrong length */
    if (outcap < kl_crypto_max_output(key))
        return KL_E_INTERNAL;
    return KL_OK;
}

/* The EVP path with a prepared context e (NULL: setting it up failed). */
static kl_status run_evp(kl_ctx_entry *e, EVP_PKEY *pkey, op_spec sp,
                         const uint8_t *payload, size_t plen, uint8_t *out,
                         size_t outcap, size_t *out_len, bool *broken)
{
    if (!e)
        return sp.fam == FAM_RSA_DECRYPT && EVP_PKEY_get_size(pkey) < 11
                   ? KL_E_CRYPTO /* P4: modulus under 11 bytes */
                   : KL_E_INTERNAL;
    if (sp.fam == FAM_RSA_DECRYPT)
        return rsa_decrypt(e, payload, plen, out, outcap, out_len, broken);
    return sign(e, sp.fam, payload, plen, out, outcap, out_len, broken);
}

/* A key of a provider that blocks (a TPM through tpm2-openssl, whose
 * provider context is not safe for calls from several threads at once):
 * one operation at a time, on a context of its own, waiting for the
 * previous one no longer than the deadline (docs/OPERATIONS.md
 * "Accelerators and provider keys"). */
static kl_status provider_exec(const kl_key *key, uint8_t opcode,
                               const uint8_t *payload, size_t plen,
                               uint8_t *out, size_t outcap, size_t *out_len,
                               uint64_t deadline_ns)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    uint64_t now = kl_now_ns();
    uint64_t wait = deadline_ns ? (deadline_ns > now ? deadline_ns - now : 0)
                                : KL_CRYPTO_DEFAULT_WAIT_NS;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t until =
        (uint64_t)ts.tv_sec * KL_NS_PER_S + (uint64_t)ts.tv_nsec + wait;
    ts.tv_sec = (time_t)(until / KL_NS_PER_S);
    ts.tv_nsec = (long)(until % KL_NS_PER_S);
    if (pthread_mutex_timedlock(&mu, &ts) != 0)
        return KL_E_INTERNAL; /* the device is busy past the deadline */
    kl_ctx_entry e = {0};     /* a context for this call only */
    kl_status err = kl_crypto_exec_private(&e, key, opcode, payload, plen, out,
                                           outcap, out_len);
    kl_crypto_private_free(&e);
    pthread_mutex_unlock(&mu);
    return err;
}

kl_status kl_crypto_exec_deadline(const kl_key *key, uint8_t opcode,
                                  const uint8_t *payload, size_t plen,
                                  uint8_t *out, size_t outcap, size_t *out_len,
                                  uint64_t deadline_ns)
{
    *out_len = 0;
    op_spec sp = spec_of(opcode);
    kl_status err = check(key, sp, plen, outcap);
    if (err != KL_OK)
        return err;
    if (kl_key_get_backend(key) == KL_BACKEND_PKCS11)
        return kl_p11_exec(key, opcode, payload, plen, out, outcap, out_len,
                           deadline_ns);

    /* ECDSA with an EC file key: its scalar on this thread's EC_KEY, no
     * cold OpenSSL memory (ec_direct.h; docs/DESIGN.md "Many keys: the
     * scalar next to the SKI") */
    size_t dlen;
    const uint8_t *d;
    if (sp.fam == FAM_ECDSA && (d = kl_key_ec_scalar(key, &dlen))) {
        err = kl_ec_sign_scalar(kl_key_curve(key), d, dlen, payload, plen, out,
                                out_len);
        ERR_clear_error();
        return err;
    }
    if (kl_key_get_backend(key) == KL_BACKEND_PROVIDER)
        return provider_exec(key, opcode, payload, plen, out, outcap, out_len,
                             deadline_ns);
    EVP_PKEY *pkey = kl_key_pkey(key);
    kl_ctx_entry *e = kl_ctx_cache_get(pkey, opcode, kl_key_propq(key), setup);
    bool broken = false;
    err = run_evp(e, pkey, sp, payload, plen, out, outcap, out_len, &broken);
    if (broken)
        kl_ctx_cache_drop(e);
    /* failures leave reasons on this thread's queue; never let them pile
     * up or leak into an unrelated caller's error check */
    ERR_clear_error();
    return err;
}

void kl_crypto_private_free(kl_ctx_entry *e)
{
    EVP_PKEY_CTX_free(e->pctx);
    EVP_MD_CTX_free(e->mctx);
    OPENSSL_free(e->modulus);
    EVP_PKEY_free(e->pkey);
    *e = (kl_ctx_entry){0};
}

kl_status kl_crypto_exec_private(kl_ctx_entry *keep, const kl_key *key,
                                 uint8_t opcode, const uint8_t *payload,
                                 size_t plen, uint8_t *out, size_t outcap,
                                 size_t *out_len)
{
    *out_len = 0;
    op_spec sp = spec_of(opcode);
    kl_status err = check(key, sp, plen, outcap);
    if (err != KL_OK)
        return err;
    if (kl_key_get_backend(key) == KL_BACKEND_PKCS11)
        return KL_E_INTERNAL; /* token keys run on the blocking class */
    EVP_PKEY *pkey = kl_key_pkey(key);
    const char *propq = kl_key_propq(key);
    kl_ctx_entry *e = keep;
    if (keep->pkey != pkey || keep->opcode != opcode || keep->propq != propq) {
        /* a reference: a reload cannot reuse the address for another key
         * while this context names it (as the context cache does) */
        kl_crypto_private_free(keep);
        if (EVP_PKEY_up_ref(pkey) != 1)
            return KL_E_INTERNAL;
        *keep = (kl_ctx_entry){.pkey = pkey, .opcode = opcode, .propq = propq};
        if (!setup(keep)) {
            kl_crypto_private_free(keep);
            e = NULL;
        }
    }
    bool broken = false;
    err = run_evp(e, pkey, sp, payload, plen, out, outcap, out_len, &broken);
    if (broken)
        kl_crypto_private_free(keep);
    /* a look first: clearing walks every entry of the thread's queue, a
     * visible share of an accelerator operation's host CPU */
    if (ERR_peek_last_error())
        ERR_clear_error();
    return err;
}
