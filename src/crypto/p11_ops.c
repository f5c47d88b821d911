/* SPDX-License-Identifier: Apache-2.0 */
/* Private-key operations on PKCS#11 tokens, with the results of
 * protocol P4 exactly as for key files:
 * - RSA PKCS#1 v1.5: CKM_RSA_PKCS over DigestInfo || digest, the DigestInfo
 *   built here (MD5-SHA1: the bare 36 bytes, as TLS 1.0/1.1 sign them);
 * - RSA-PSS: CKM_RSA_PKCS_PSS, MGF1 with the same hash, salt = hash length;
 * - ECDSA: CKM_ECDSA over the digest; the token's r || s becomes DER;
 * - Ed25519: CKM_EDDSA over the message, where the module has it;
 * - RSA decrypt: CKM_RSA_X_509, the raw block left-padded to the modulus.
 * A session that the token closed or logged out is replaced and a key
 * handle the token forgot is looked up again, each at most once per
 * operation (see run). The wait for a session ends at the caller's
 * deadline. */
#include <string.h>

#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>

#include "core/log.h"
#include "core/time.h"
#include "crypto/ops.h"
#include "crypto/p11_ops.h"
#include "keys/p11.h"

/* The largest raw output: an RSA-8192 block. */
#define MAX_RAW 1024

/* DigestInfo prefixes (RFC 8017 9.2, note 1): DER up to the digest. */
static const uint8_t DI_SHA1[] = {0x30, 0x21, 0x30, 0x09, 0x06,
                                  0x05, 0x2b, 0x0e, 0x03, 0x02,
                                  0x1a, 0x05, 0x00, 0x04, 0x14};
#define DI_SHA2(len, last, dlen)                                               \
    {                                                                          \
        0x30, len, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, \
            0x04, 0x02, last, 0x05, 0x00, 0x04, dlen                           \
    }
static const uint8_t DI_SHA224[] = DI_SHA2(0x2d, 0x04, 0x1c);
static const uint8_t DI_SHA256[] = DI_SHA2(0x31, 0x01, 0x20);
static const uint8_t DI_SHA384[] = DI_SHA2(0x41, 0x02, 0x30);
static const uint8_t DI_SHA512[] = DI_SHA2(0x51, 0x03, 0x40);

typedef struct p11_op {
    CK_MECHANISM mech;
    CK_RSA_PKCS_PSS_PARAMS pss;
    const uint8_t *prefix; /* DigestInfo, or NULL */
    size_t prefix_len;
    bool decrypt, ecdsa;
} p11_op;

static void pss(p11_op *op, CK_MECHANISM_TYPE hash, CK_RSA_PKCS_MGF_TYPE mgf,
                CK_ULONG salt)
{
    op->mech.mechanism = CKM_RSA_PKCS_PSS;
    op->pss = (CK_RSA_PKCS_PSS_PARAMS){hash, mgf, salt};
}

#define PREFIX(p) (op->prefix = (p), op->prefix_len = sizeof(p))

/* protocol P4; false for an opcode without a token operation */
static bool op_of(uint8_t opcode, p11_op *op)
{
    memset(op, 0, sizeof *op);
    op->mech.mechanism = CKM_RSA_PKCS;
    switch (opcode) {
    case KL_OP_RSA_DECRYPT:
        op->mech.mechanism = CKM_RSA_X_509;
        op->decrypt = true;
        break;
    case KL_OP_RSA_SIGN_MD5SHA1: break;
    case KL_OP_RSA_SIGN_SHA1: PREFIX(DI_SHA1); break;
    case KL_OP_RSA_SIGN_SHA224: PREFIX(DI_SHA224); break;
    case KL_OP_RSA_SIGN_SHA256: PREFIX(DI_SHA256); break;
    case KL_OP_RSA_SIGN_SHA384: PREFIX(DI_SHA384); break;
    case KL_OP_RSA_SIGN_SHA512: PREFIX(DI_SHA512); break;
    case KL_OP_RSA_PSS_SIGN_SHA256:
        pss(op, CKM_SHA256, CKG_MGF1_SHA256, 32);
        break;
    case KL_OP_RSA_PSS_SIGN_SHA384:
        pss(op, CKM_SHA384, CKG_MGF1_SHA384, 48);
        break;
    case KL_OP_RSA_PSS_SIGN_SHA512:
        pss(op, CKM_SHA512, CKG_MGF1_SHA512, 64);
        break;
    case KL_OP_ECDSA_SIGN_MD5SHA1:
    case KL_OP_ECDSA_SIGN_SHA1:
    case KL_OP_ECDSA_SIGN_SHA224:
    case KL_OP_ECDSA_SIGN_SHA256:
    case KL_OP_ECDSA_SIGN_SHA384:
    case KL_OP_ECDSA_SIGN_SHA512:
        op->mech.mechanism = CKM_ECDSA;
        op->ecdsa = true;
        break;
    case KL_OP_ED25519_SIGN: op->mech.mechanism = CKM_EDDSA; break;
    default: return false;
    }
    if (op->mech.mechanism == CKM_RSA_PKCS_PSS) {
        op->mech.pParameter = &op->pss;
        op->mech.ulParameterLen = sizeof op->pss;
    }
    return true;
}

static CK_RV run_once(kl_p11_key *k, CK_SESSION_HANDLE h, const p11_op *op,
                      const uint8_t *in, size_t inlen, uint8_t *raw,
                      CK_ULONG *rawlen)
{
    CK_FUNCTION_LIST *fl = kl_p11_token_fl(k->tok);
    CK_OBJECT_HANDLE o = atomic_load(&k->handle);
    CK_MECHANISM mech = op->mech;
    *rawlen = MAX_RAW;
    CK_RV rv;
    if (op->decrypt) {
        rv = fl->C_DecryptInit(h, &mech, o);
        if (rv == CKR_OK)
            rv = fl->C_Decrypt(h, (CK_BYTE *)in, inlen, raw, rawlen);
    } else {
        rv = fl->C_SignInit(h, &mech, o);
        if (rv == CKR_OK)
            rv = fl->C_Sign(h, (CK_BYTE *)in, inlen, raw, rawlen);
    }
    return rv;
}

/* The token refused this input or mechanism (vs. the token failing). */
static bool input_error(CK_RV rv)
{
    return rv == CKR_DATA_INVALID || rv == CKR_DATA_LEN_RANGE ||
           rv == CKR_ENCRYPTED_DATA_INVALID ||
           rv == CKR_ENCRYPTED_DATA_LEN_RANGE || rv == CKR_MECHANISM_INVALID ||
           rv == CKR_MECHANISM_PARAM_INVALID ||
           rv == CKR_KEY_TYPE_INCONSISTENT ||
           rv == CKR_KEY_FUNCTION_NOT_PERMITTED;
}

/* The session is gone with the error (vs. alive, perhaps logged out):
 * its handle must not be closed - the module may have given the number to
 * a new session. */
static bool session_dead(CK_RV rv)
{
    return rv == CKR_SESSION_HANDLE_INVALID || rv == CKR_SESSION_CLOSED ||
           rv == CKR_DEVICE_REMOVED || rv == CKR_TOKEN_NOT_PRESENT;
}

/* Runs op with a session of the key's token. A failure the token can
 * recover from is repaired and the operation tried again: a session that
 * was closed or logged out (or a token that went away) is replaced once;
 * a key handle the token forgot is looked up again, twice at most. They
 * come in any order, since one fault brings another: a token that logged
 * out - also through another thread's session, at any moment - forgets its
 * private handles (SoftHSM does), and a session may die on the try after a
 * look-up. So at most four tries, and none once the deadline passed: the
 * answer is an error by then. */
static CK_RV run(kl_p11_key *k, const p11_op *op, const uint8_t *in,
                 size_t inlen, uint8_t *raw, CK_ULONG *rawlen,
                 uint64_t deadline_ns, bool *no_session)
{
    CK_SESSION_HANDLE h;
    if (kl_p11_session_get(k->tok, deadline_ns, &h) != KL_OK) {
        *no_session = true;
        return CKR_GENERAL_ERROR;
    }
    int reopens = 1, refinds = 2;
    CK_RV rv = run_once(k, h, op, in, inlen, raw, rawlen);
    for (;;) {
        bool lost = kl_p11_rv_session_lost(rv) && reopens > 0;
        bool forgot =
            (rv == CKR_KEY_HANDLE_INVALID || rv == CKR_OBJECT_HANDLE_INVALID) &&
            refinds > 0;
        if ((!lost && !forgot) || kl_now_ns() >= deadline_ns)
            break;
        CK_RV r2;
        if (lost) {
            reopens--;
            r2 = kl_p11_session_recover(k->tok, &h, rv);
        } else {
            /* the token forgot the handle, or hides private objects
             * because it was logged out (SoftHSM says so this way): log in
             * again on this session (harmless when logged in), then look
             * the key up again */
            refinds--;
            r2 = kl_p11_session_recover(k->tok, &h, CKR_USER_NOT_LOGGED_IN);
        }
        if (r2 != CKR_OK) {
            kl_p11_session_drop(k->tok); /* recover left no session */
            return r2;
        }
        if (forgot) {
            CK_OBJECT_HANDLE o;
            size_t count = 0;
            CK_RV fr = kl_p11_find(k->tok, h, CKO_PRIVATE_KEY, k, &o, &count);
            if (fr != CKR_OK) {
                rv = fr; /* e.g. the session died meanwhile: see above */
                continue;
            }
            if (count != 1)
                break; /* the key is gone: rv stays */
            atomic_store(&k->handle, o);
        }
        rv = run_once(k, h, op, in, inlen, raw, rawlen);
    }
    /* Only a session that worked goes back to the pool: after another
     * failure an operation may still be active on it (a module that does
     * not end it on error), which would fail every later use with
     * CKR_OPERATION_ACTIVE. Closing the session ends it. */
    if (rv == CKR_OK || input_error(rv))
        kl_p11_session_put(k->tok, h);
    else if (session_dead(rv))
        kl_p11_session_drop(k->tok);
    else
        kl_p11_session_discard(k->tok, h);
    return rv;
}

/* r || s (two equal halves) into a DER ECDSA-Sig-Value. */
static kl_status ecdsa_der(const uint8_t *raw, size_t len, uint8_t *out,
                           size_t outcap, size_t *out_len)
{
    if (len == 0 || len % 2)
        return KL_E_CRYPTO;
    ECDSA_SIG *sig = ECDSA_SIG_new();
    BIGNUM *r = BN_bin2bn(raw, (int)(len / 2), NULL);
    BIGNUM *s = BN_bin2bn(raw + len / 2, (int)(len / 2), NULL);
    kl_status err = KL_E_INTERNAL;
    if (sig && r && s && ECDSA_SIG_set0(sig, r, s) == 1) {
        r = s = NULL; /* owned by sig */
        int n = i2d_ECDSA_SIG(sig, NULL);
        unsigned char *p = out;
        if (n > 0 && (size_t)n <= outcap && i2d_ECDSA_SIG(sig, &p) == n) {
            *out_len = (size_t)n;
            err = KL_OK;
        }
    }
    BN_free(r);
    BN_free(s);
    ECDSA_SIG_free(sig);
    return err;
}

/* The P4 input rules of RSA decrypt (as ops.c): leading zero bytes are
 * allowed, c > n is a crypto error, c == n gives zeros. 1: run the token
 * on c (k bytes); 0: *err is the answer. */
static int decrypt_input(const kl_p11_key *k, const uint8_t *in, size_t inlen,
                         uint8_t *c, uint8_t *out, size_t *out_len,
                         kl_status *err)
{
    while (inlen > 0 && in[0] == 0) {
        in++;
        inlen--;
    }
    *err = KL_E_CRYPTO;
    if (inlen > k->k)
        return 0;
    memset(c, 0, k->k);
    if (inlen)
        memcpy(c + (k->k - inlen), in, inlen);
    int cmp = kl_crypto_compare_be(c, k->modulus, k->k);
    if (cmp > 0)
        return 0;
    if (cmp == 0) {
        memset(out, 0, k->k);
        *out_len = k->k;
        *err = KL_OK;
        return 0;
    }
    return 1;
}

static kl_status finish(const kl_p11_key *k, const p11_op *op,
                        const uint8_t *raw, size_t rawlen, uint8_t *out,
                        size_t outcap, size_t *out_len)
{
    if (op->ecdsa)
        return ecdsa_der(raw, rawlen, out, outcap, out_len);
    if (k->ktype == CKK_RSA) {
        /* some modules drop leading zero bytes of an RSA result */
        if (rawlen > k->k || outcap < k->k)
            return KL_E_INTERNAL;
        memset(out, 0, k->k - rawlen);
        memcpy(out + (k->k - rawlen), raw, rawlen);
        *out_len = k->k;
        return KL_OK;
    }
    if (rawlen > outcap)
        return KL_E_INTERNAL;
    memcpy(out, raw, rawlen);
    *out_len = rawlen;
    return KL_OK;
}

kl_status kl_p11_exec(const kl_key *key, uint8_t opcode, const uint8_t *in,
                      size_t inlen, uint8_t *out, size_t outcap,
                      size_t *out_len, uint64_t deadline_ns)
{
    kl_p11_key *k = kl_key_p11(key);
    p11_op op;
    if (!k || !op_of(opcode, &op))
        return KL_E_BAD_OPCODE;
    if (!deadline_ns)
        deadline_ns = kl_now_ns() + KL_CRYPTO_DEFAULT_WAIT_NS;
    uint8_t data[MAX_RAW], raw[MAX_RAW];
    const uint8_t *src = in;
    size_t srclen = inlen;
    kl_status err = KL_OK;
    if (op.decrypt) {
        if (k->k > MAX_RAW || !k->modulus)
            return KL_E_INTERNAL;
        if (!decrypt_input(k, in, inlen, data, out, out_len, &err))
            return err;
        src = data;
        srclen = k->k;
    } else if (op.prefix) {
        if (op.prefix_len + inlen > sizeof data)
            return KL_E_CRYPTO;
        memcpy(data, op.prefix, op.prefix_len);
        memcpy(data + op.prefix_len, in, inlen);
        src = data;
        srclen = op.prefix_len + inlen;
    }
    CK_ULONG rawlen = 0;
    bool no_session = false;
    CK_RV rv = run(k, &op, src, srclen, raw, &rawlen, deadline_ns, &no_session);
    if (no_session) {
        err = KL_E_INTERNAL; /* P6: busy past the deadline */
    } else if (rv != CKR_OK) {
        char b[32];
        /* the key's URI: the token's names the key that opened it */
        kl_log(input_error(rv) ? KL_LOG_DEBUG : KL_LOG_WARN,
               "%s: opcode 0x%02x failed: %s", kl_key_path(key), opcode,
               kl_p11_rv_str(rv, b, sizeof b));
        err = input_error(rv) ? KL_E_CRYPTO : KL_E_INTERNAL;
    } else {
        err = finish(k, &op, raw, rawlen, out, outcap, out_len);
    }
    /* the plaintext of a decrypt passed through these buffers */
    OPENSSL_cleanse(raw, sizeof raw);
    if (op.decrypt)
        OPENSSL_cleanse(data, sizeof data);
    return err;
}
