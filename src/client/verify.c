/* SPDX-License-Identifier: Apache-2.0 */
/* The public-key side of an operation: see verify.h. */
#include "client/verify.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

static void say(char *why, size_t whylen, const char *fmt, const char *a)
{
    if (why && whylen)
        snprintf(why, whylen, fmt, a ? a : "");
}

/* Tries, in turn, a PEM certificate, PEM public key, DER certificate and
 * DER public key. */
static EVP_PKEY *decode_pub(const uint8_t *buf, size_t len)
{
    EVP_PKEY *pk = NULL;
    BIO *b = BIO_new_mem_buf(buf, (int)len);
    if (!b)
        return NULL;
    X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
    if (!x) {
        (void)BIO_reset(b);
        pk = PEM_read_bio_PUBKEY(b, NULL, NULL, NULL);
    }
    if (!x && !pk) {
        const unsigned char *p = buf;
        x = d2i_X509(NULL, &p, (long)len);
    }
    if (!x && !pk) {
        const unsigned char *p = buf;
        pk = d2i_PUBKEY(NULL, &p, (long)len);
    }
    if (x) {
        pk = X509_get_pubkey(x);
        X509_free(x);
    }
    BIO_free(b);
    ERR_clear_error();
    return pk;
}

kl_status kl_pubkey_load(const char *path, EVP_PKEY **out, char *err,
                         size_t errlen)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return KL_E_IO;
    }
    uint8_t buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    bool big = !feof(f);
    fclose(f);
    if (big) {
        snprintf(err, errlen, "%s: too large for a certificate or public key",
                 path);
        return KL_E_BAD_VALUE;
    }
    *out = decode_pub(buf, n);
    if (*out)
        return KL_OK;
    if (memmem(buf, n, "PRIVATE KEY-----", 16))
        snprintf(err, errlen,
                 "%s holds a private key: give its certificate or public key "
                 "(openssl pkey -in KEY -pubout)",
                 path);
    else
        snprintf(err, errlen,
                 "%s: neither a certificate nor a public key (PEM or DER)",
                 path);
    return KL_E_BAD_VALUE;
}

const char *kl_pubkey_desc(EVP_PKEY *pk, char *buf, size_t len)
{
    if (EVP_PKEY_is_a(pk, "RSA") || EVP_PKEY_is_a(pk, "RSA-PSS")) {
        snprintf(buf, len, "RSA-%d", EVP_PKEY_get_bits(pk));
    } else if (EVP_PKEY_is_a(pk, "EC")) {
        char group[64] = "";
        size_t gl = 0;
        const char *nist = NULL;
        if (EVP_PKEY_get_utf8_string_param(pk, OSSL_PKEY_PARAM_GROUP_NAME,
                                           group, sizeof group, &gl)) {
            int nid = OBJ_sn2nid(group);
            nist = nid != NID_undef ? EC_curve_nid2nist(nid) : NULL;
        }
        snprintf(buf, len, "ECDSA-%s", nist ? nist : group);
    } else if (EVP_PKEY_is_a(pk, "ED25519")) {
        snprintf(buf, len, "Ed25519");
    } else {
        const char *t = EVP_PKEY_get0_type_name(pk);
        snprintf(buf, len, "%s", t ? t : "unknown key");
    }
    return buf;
}

const EVP_MD *kl_op_md(uint8_t op)
{
    switch (op) {
    case KL_OP_RSA_SIGN_MD5SHA1:
    case KL_OP_ECDSA_SIGN_MD5SHA1: return EVP_md5_sha1();
    case KL_OP_RSA_SIGN_SHA1:
    case KL_OP_ECDSA_SIGN_SHA1: return EVP_sha1();
    case KL_OP_RSA_SIGN_SHA224:
    case KL_OP_ECDSA_SIGN_SHA224: return EVP_sha224();
    case KL_OP_RSA_SIGN_SHA256:
    case KL_OP_ECDSA_SIGN_SHA256:
    case KL_OP_RSA_PSS_SIGN_SHA256: return EVP_sha256();
    case KL_OP_RSA_SIGN_SHA384:
    case KL_OP_ECDSA_SIGN_SHA384:
    case KL_OP_RSA_PSS_SIGN_SHA384: return EVP_sha384();
    case KL_OP_RSA_SIGN_SHA512:
    case KL_OP_ECDSA_SIGN_SHA512:
    case KL_OP_RSA_PSS_SIGN_SHA512: return EVP_sha512();
    default: return NULL;
    }
}

kl_status kl_op_digest(uint8_t op, const void *msg, size_t len, uint8_t *out,
                       size_t *out_len)
{
    const EVP_MD *md = kl_op_md(op);
    unsigned int n = 0;
    KL_ENSURE(md != NULL, KL_E_BAD_VALUE);
    KL_ENSURE(EVP_Digest(msg, len, out, &n, md, NULL) == 1, KL_E_INTERNAL);
    *out_len = n;
    return KL_OK;
}

kl_status kl_pkcs1_type2_unpad(const uint8_t *block, size_t len,
                               const uint8_t **msg, size_t *msg_len)
{
    /* RFC 8017 7.2.2: EM = 0x00 || 0x02 || PS || 0x00 || M, |PS| >= 8. */
    KL_ENSURE(len >= 11 && block[0] == 0x00 && block[1] == 0x02,
              KL_E_BAD_VALUE);
    size_t i = 2;
    while (i < len && block[i] != 0)
        i++;
    KL_ENSURE(i < len && i - 2 >= 8, KL_E_BAD_VALUE);
    *msg = block + i + 1;
    *msg_len = len - i - 1;
    return KL_OK;
}

/* Raw RSA: out^e mod n must equal the ciphertext as a k-byte integer. */
static kl_status verify_decrypt(EVP_PKEY *pub, const uint8_t *in, size_t inlen,
                                const uint8_t *out, size_t outlen, char *why,
                                size_t whylen)
{
    size_t k = (size_t)EVP_PKEY_get_size(pub);
    if (outlen != k) {
        char n[64];
        snprintf(n, sizeof n, "%zu bytes, the modulus has %zu", outlen, k);
        say(why, whylen, "decrypt result is %s", n);
        return KL_E_BAD_VALUE;
    }
    /* Leading zero bytes of the ciphertext are allowed (protocol P4). */
    while (inlen > k && in[0] == 0) {
        in++;
        inlen--;
    }
    if (inlen > k) {
        say(why, whylen, "ciphertext longer than the modulus%s", NULL);
        return KL_E_BAD_VALUE;
    }
    uint8_t c[1024], re[1024];
    if (k > sizeof c) {
        say(why, whylen, "modulus too large%s", NULL);
        return KL_E_BAD_VALUE;
    }
    memset(c, 0, k - inlen);
    memcpy(c + k - inlen, in, inlen);

    kl_status st = KL_E_BAD_VALUE;
    size_t relen = sizeof re;
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_pkey(NULL, pub, NULL);
    if (ctx && EVP_PKEY_encrypt_init(ctx) == 1 &&
        EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_NO_PADDING) == 1 &&
        EVP_PKEY_encrypt(ctx, re, &relen, out, outlen) == 1) {
        if (relen == k && memcmp(re, c, k) == 0)
            st = KL_OK;
        else
            say(why, whylen,
                "re-encrypting the result does not give the ciphertext%s",
                NULL);
    } else {
        say(why, whylen, "cannot re-encrypt the result with the public key%s",
            NULL);
    }
    EVP_PKEY_CTX_free(ctx);
    ERR_clear_error();
    return st;
}

static kl_status verify_ed25519(EVP_PKEY *pub, const uint8_t *msg, size_t len,
                                const uint8_t *sig, size_t siglen, char *why,
                                size_t whylen)
{
    kl_status st = KL_E_BAD_VALUE;
    EVP_MD_CTX *mctx = EVP_MD_CTX_new();
    if (mctx && EVP_DigestVerifyInit(mctx, NULL, NULL, NULL, pub) == 1) {
        if (EVP_DigestVerify(mctx, sig, siglen, msg, len) == 1)
            st = KL_OK;
        else
            say(why, whylen, "Ed25519 signature does not verify%s", NULL);
    } else {
        say(why, whylen, "cannot set up Ed25519 verification%s", NULL);
    }
    EVP_MD_CTX_free(mctx);
    ERR_clear_error();
    return st;
}

/* PKCS#1 v1.5, PSS and ECDSA: EVP_PKEY_verify over the digest. */
static kl_status verify_digest(EVP_PKEY *pub, uint8_t op, kl_op_class cls,
                               const uint8_t *dgst, size_t dlen,
                               const uint8_t *sig, size_t siglen, char *why,
                               size_t whylen)
{
    const EVP_MD *md = kl_op_md(op);
    kl_status st = KL_E_BAD_VALUE;
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_pkey(NULL, pub, NULL);
    bool ok = ctx && EVP_PKEY_verify_init(ctx) == 1;
    if (ok && cls == KL_OPC_RSA) {
        /* MD5SHA1 has no DigestInfo: OpenSSL's md5-sha1 signs the raw 36
         * bytes, as TLS 1.0/1.1 did (protocol P4). */
        ok = EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PADDING) == 1 &&
             EVP_PKEY_CTX_set_signature_md(ctx, md) == 1;
    } else if (ok && cls == KL_OPC_RSA_PSS) {
        ok = EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PSS_PADDING) == 1 &&
             EVP_PKEY_CTX_set_signature_md(ctx, md) == 1 &&
             EVP_PKEY_CTX_set_rsa_mgf1_md(ctx, md) == 1 &&
             EVP_PKEY_CTX_set_rsa_pss_saltlen(ctx, RSA_PSS_SALTLEN_DIGEST) == 1;
    }
    /* ECDSA: no md on the context - any digest length is signed,
     * truncated to the order (protocol P4). */
    if (!ok) {
        say(why, whylen, "cannot set up verification%s", NULL);
    } else if (EVP_PKEY_verify(ctx, sig, siglen, dgst, dlen) == 1) {
        st = KL_OK;
    } else {
        say(why, whylen, "%s signature does not verify",
            cls == KL_OPC_ECDSA     ? "ECDSA"
            : cls == KL_OPC_RSA_PSS ? "RSA-PSS"
                                    : "RSA PKCS#1 v1.5");
    }
    EVP_PKEY_CTX_free(ctx);
    ERR_clear_error();
    return st;
}

kl_status kl_verify_output(EVP_PKEY *pub, uint8_t op, const uint8_t *in,
                           size_t inlen, const uint8_t *out, size_t outlen,
                           char *why, size_t whylen)
{
    kl_op_class cls = kl_op_classify(op);
    bool is_rsa = EVP_PKEY_is_a(pub, "RSA");
    bool is_ec = EVP_PKEY_is_a(pub, "EC");
    bool is_ed = EVP_PKEY_is_a(pub, "ED25519");
    bool fits = ((cls == KL_OPC_RSA || cls == KL_OPC_RSA_PSS) && is_rsa) ||
                (cls == KL_OPC_ECDSA && is_ec) ||
                (cls == KL_OPC_ED25519 && is_ed);
    if (!fits) {
        say(why, whylen, "opcode %s does not fit this key type",
            kl_op_name(op));
        return KL_E_BAD_VALUE;
    }
    if (op == KL_OP_RSA_DECRYPT)
        return verify_decrypt(pub, in, inlen, out, outlen, why, whylen);
    if (cls == KL_OPC_ED25519)
        return verify_ed25519(pub, in, inlen, out, outlen, why, whylen);
    return verify_digest(pub, op, cls, in, inlen, out, outlen, why, whylen);
}
