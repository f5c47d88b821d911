/* SPDX-License-Identifier: Apache-2.0 */
/* RSA decryption with keyless keys, for TLS 1.2 RSA key exchange.
 *
 * libssl decrypts the ClientKeyExchange in RSA_PKCS1_WITH_TLS_PADDING mode
 * and hands over the client version. The key server answers the raw block
 * (protocol P4, opcode 0x01), so the padding and version check happen here,
 * in constant time, and a bad block yields a random premaster secret with
 * success (tlspad.h) - the handshake then fails at Finished, as RFC 5246
 * 7.4.7.1 wants. RSA_NO_PADDING returns the raw block. Plain PKCS#1 v1.5
 * and OAEP decryption are refused: done outside TLS they would give their
 * callers an oracle. */
#include <string.h>

#include <openssl/core_dispatch.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>

#include "provider/key.h"
#include "provider/tlspad.h"

typedef struct dec_ctx {
    klp_ctx *prov;
    klp_key *key;
    int pad;
    unsigned client_version, alt_version;
} dec_ctx;

static void *ac_new(void *provctx)
{
    dec_ctx *c = OPENSSL_zalloc(sizeof(*c));
    if (c) {
        c->prov = provctx;
        c->pad = RSA_PKCS1_WITH_TLS_PADDING;
    }
    return c;
}

static void ac_free(void *vctx)
{
    dec_ctx *c = vctx;
    if (c)
        klp_key_free(c->key);
    OPENSSL_clear_free(c, sizeof(*c));
}

static void *ac_dup(void *vctx)
{
    dec_ctx *c = OPENSSL_memdup(vctx, sizeof(dec_ctx));
    if (c && c->key)
        klp_key_up_ref(c->key);
    return c;
}

static int ac_set_params(void *vctx, const OSSL_PARAM params[]);

static int ac_decrypt_init(void *vctx, void *vkey, const OSSL_PARAM params[])
{
    dec_ctx *c = vctx;
    klp_key *k = vkey;
    if (!k || klp_key_type(k) != KLP_RSA || !klp_key_remote(k)) {
        KLP_RAISE(c->prov, KLP_R_BAD_INPUT, "not a keyless RSA key reference");
        return 0;
    }
    klp_key_up_ref(k);
    klp_key_free(c->key);
    c->key = k;
    return ac_set_params(c, params);
}

static int ac_decrypt(void *vctx, unsigned char *out, size_t *outlen,
                      size_t outsize, const unsigned char *in, size_t inlen)
{
    dec_ctx *c = vctx;
    size_t k = klp_key_rsa_len(c->key);
    int tls = c->pad == RSA_PKCS1_WITH_TLS_PADDING;
    if (!out) {
        *outlen = tls ? KLP_PREMASTER_LEN : k;
        return 1;
    }
    /* Public checks: failing them reveals nothing about the plaintext. */
    if (inlen != k || outsize < (tls ? KLP_PREMASTER_LEN : k) ||
        (tls && c->client_version == 0)) {
        KLP_RAISE(c->prov, KLP_R_BAD_INPUT,
                  "RSA decrypt: %zu-byte input for a %zu-byte key, %zu-byte "
                  "output buffer%s",
                  inlen, k, outsize,
                  tls && !c->client_version ? ", no TLS client version" : "");
        return 0;
    }
    uint8_t *em = OPENSSL_malloc(k);
    uint8_t rnd[KLP_PREMASTER_LEN];
    size_t emlen = 0;
    int ok =
        em && RAND_priv_bytes_ex(klp_libctx(c->prov), rnd, sizeof(rnd), 0) == 1;
    /* The key server answers for any ciphertext below the modulus: a
     * failure here is the transport's or a public property of the input. */
    ok = ok && klp_key_op(c->key, KL_OP_RSA_DECRYPT, in, inlen, em, k, &emlen);
    if (ok && emlen != k) {
        KLP_RAISE(c->prov, KLP_R_SERVER_ERROR,
                  "RSA decrypt: the key server answered %zu bytes, not %zu",
                  emlen, k);
        ok = 0;
    }
    if (ok && tls) {
        (void)klp_tls_premaster(em, k, c->client_version, c->alt_version, rnd,
                                out);
        *outlen = KLP_PREMASTER_LEN;
    } else if (ok) {
        memcpy(out, em, k);
        *outlen = k;
    }
    OPENSSL_clear_free(em, k);
    OPENSSL_cleanse(rnd, sizeof(rnd));
    return ok;
}

static int ac_set_params(void *vctx, const OSSL_PARAM params[])
{
    dec_ctx *c = vctx;
    const OSSL_PARAM *p;
    if (!params)
        return 1;
    if ((p = OSSL_PARAM_locate_const(params,
                                     OSSL_ASYM_CIPHER_PARAM_PAD_MODE))) {
        int pad = -1;
        if (p->data_type == OSSL_PARAM_UTF8_STRING)
            pad = strcmp(p->data, "none") == 0 ? RSA_NO_PADDING : -1;
        else if (!OSSL_PARAM_get_int(p, &pad))
            return 0;
        if (pad != RSA_NO_PADDING && pad != RSA_PKCS1_WITH_TLS_PADDING) {
            KLP_RAISE(c->prov, KLP_R_UNSUPPORTED,
                      "keyless RSA keys decrypt in TLS or no-padding mode "
                      "only");
            return 0;
        }
        c->pad = pad;
    }
    p = OSSL_PARAM_locate_const(params,
                                OSSL_ASYM_CIPHER_PARAM_TLS_CLIENT_VERSION);
    if (p && !OSSL_PARAM_get_uint(p, &c->client_version))
        return 0;
    p = OSSL_PARAM_locate_const(params,
                                OSSL_ASYM_CIPHER_PARAM_TLS_NEGOTIATED_VERSION);
    if (p && !OSSL_PARAM_get_uint(p, &c->alt_version))
        return 0;
    return 1;
}

static const OSSL_PARAM *ac_settable(void *vctx, void *provctx)
{
    static const OSSL_PARAM t[] = {
        OSSL_PARAM_int(OSSL_ASYM_CIPHER_PARAM_PAD_MODE, NULL),
        OSSL_PARAM_uint(OSSL_ASYM_CIPHER_PARAM_TLS_CLIENT_VERSION, NULL),
        OSSL_PARAM_uint(OSSL_ASYM_CIPHER_PARAM_TLS_NEGOTIATED_VERSION, NULL),
        OSSL_PARAM_END,
    };
    return t;
}

static int ac_get_params(void *vctx, OSSL_PARAM params[])
{
    dec_ctx *c = vctx;
    OSSL_PARAM *p = OSSL_PARAM_locate(params, OSSL_ASYM_CIPHER_PARAM_PAD_MODE);
    if (p && p->data_type == OSSL_PARAM_INTEGER &&
        !OSSL_PARAM_set_int(p, c->pad))
        return 0;
    return 1;
}

static const OSSL_PARAM *ac_gettable(void *vctx, void *provctx)
{
    static const OSSL_PARAM t[] = {
        OSSL_PARAM_int(OSSL_ASYM_CIPHER_PARAM_PAD_MODE, NULL),
        OSSL_PARAM_END,
    };
    return t;
}

const OSSL_DISPATCH klp_rsa_cipher_functions[] = {
    {OSSL_FUNC_ASYM_CIPHER_NEWCTX, (void (*)(void))ac_new},
    {OSSL_FUNC_ASYM_CIPHER_FREECTX, (void (*)(void))ac_free},
    {OSSL_FUNC_ASYM_CIPHER_DUPCTX, (void (*)(void))ac_dup},
    {OSSL_FUNC_ASYM_CIPHER_DECRYPT_INIT, (void (*)(void))ac_decrypt_init},
    {OSSL_FUNC_ASYM_CIPHER_DECRYPT, (void (*)(void))ac_decrypt},
    {OSSL_FUNC_ASYM_CIPHER_SET_CTX_PARAMS, (void (*)(void))ac_set_params},
    {OSSL_FUNC_ASYM_CIPHER_SETTABLE_CTX_PARAMS, (void (*)(void))ac_settable},
    {OSSL_FUNC_ASYM_CIPHER_GET_CTX_PARAMS, (void (*)(void))ac_get_params},
    {OSSL_FUNC_ASYM_CIPHER_GETTABLE_CTX_PARAMS, (void (*)(void))ac_gettable},
    {0, NULL},
};
