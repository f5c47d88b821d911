/* SPDX-License-Identifier: Apache-2.0 */
/* DHKEM (RFC 9180 section 4.1) for X25519 and P-256 with HKDF-SHA256:
 * key pairs (section 7.1.3), the serialisation of public keys (7.1.1),
 * their validation (7.1.4), and Encap / Decap. The one operation done
 * with a private key is EVP_PKEY_derive, so a recipient key may live in a
 * PKCS#11 token or any other provider. */
#include "seal/hpke_int.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/obj_mac.h>
#include <openssl/param_build.h>
#include <openssl/params.h>
#include <openssl/provider.h>

/* Ndh = Nsecret = Nsk = 32 for both KEMs (RFC 9180 Table 2). */
#define DH_LEN 32

/* The order of P-256 (RFC 9180 section 7.1.3), big-endian, to bound the
 * candidates of DeriveKeyPair. */
static const uint8_t p256_order[32] = {
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17,
    0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51};

size_t kl_hpke_pk_len(uint16_t kem)
{
    switch (kem) {
    case KL_HPKE_KEM_X25519: return 32;
    case KL_HPKE_KEM_P256: return 65;
    default: return 0;
    }
}

kl_status kl_hpke_generate(uint16_t kem, EVP_PKEY **out)
{
    *out = NULL;
    if (kem == KL_HPKE_KEM_X25519)
        *out = EVP_PKEY_Q_keygen(NULL, NULL, "X25519");
    else if (kem == KL_HPKE_KEM_P256)
        *out = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    else
        return KL_E_BAD_VALUE;
    return *out ? KL_OK : KL_E_INTERNAL;
}

/* A P-256 key pair from the scalar d (32 bytes, 0 < d < order): OpenSSL
 * 3.0 does not compute the public point of an imported private key, so it
 * is d*G here and both halves go in. */
static kl_status p256_from_scalar(const uint8_t *d32, EVP_PKEY **out)
{
    kl_status s = KL_E_INTERNAL;
    EC_GROUP *g = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1);
    BIGNUM *d = BN_secure_new();
    EC_POINT *q = g ? EC_POINT_new(g) : NULL;
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    OSSL_PARAM *params = NULL;
    EVP_PKEY_CTX *pctx = NULL;
    uint8_t pub[65];
    if (!g || !d || !q || !bld) {
        s = KL_E_NOMEM;
        goto done;
    }
    if (!BN_bin2bn(d32, DH_LEN, d) ||
        !EC_POINT_mul(g, q, d, NULL, NULL, NULL) ||
        EC_POINT_point2oct(g, q, POINT_CONVERSION_UNCOMPRESSED, pub, sizeof pub,
                           NULL) != sizeof pub)
        goto done;
    if (!OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME,
                                         "P-256", 0) ||
        !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_PRIV_KEY, d) ||
        !OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, pub,
                                          sizeof pub) ||
        !(params = OSSL_PARAM_BLD_to_param(bld)))
        goto done;
    pctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    if (pctx && EVP_PKEY_fromdata_init(pctx) == 1 &&
        EVP_PKEY_fromdata(pctx, out, EVP_PKEY_KEYPAIR, params) == 1)
        s = KL_OK;
done:
    EVP_PKEY_CTX_free(pctx);
    /* d is a secure BIGNUM, so its copy in params is in the secure heap,
     * which OSSL_PARAM_free clears (OSSL_PARAM_clear_free is 3.2's). */
    OSSL_PARAM_free(params);
    OSSL_PARAM_BLD_free(bld);
    EC_POINT_free(q);
    BN_clear_free(d);
    EC_GROUP_free(g);
    return s;
}

kl_status kl_hpke_derive(uint16_t kem, const uint8_t *ikm, size_t ikm_len,
                         EVP_PKEY **out)
{
    *out = NULL;
    if (!kl_hpke_pk_len(kem))
        return KL_E_BAD_VALUE;
    uint8_t sid[KL_HPKE_SUITE_ID_MAX], prk[KL_HPKE_HASH_LEN], sk[DH_LEN];
    size_t sid_len = kl_hpke_kem_suite_id(kem, sid);
    kl_status s = kl_hpke_labeled_extract(sid, sid_len, NULL, 0, "dkp_prk", ikm,
                                          ikm_len, prk);
    if (s != KL_OK)
        goto done;
    if (kem == KL_HPKE_KEM_X25519) {
        /* sk = LabeledExpand(dkp_prk, "sk", "", Nsk); clamping is
         * X25519's own, when the key is used (RFC 7748 section 5). */
        s = kl_hpke_labeled_expand(sid, sid_len, prk, "sk", NULL, 0, sk,
                                   sizeof sk);
        if (s != KL_OK)
            goto done;
        *out = EVP_PKEY_new_raw_private_key_ex(NULL, "X25519", NULL, sk,
                                               sizeof sk);
        s = *out ? KL_OK : KL_E_INTERNAL;
        goto done;
    }
    /* P-256: rejection sampling over candidates, bitmask 0xff (RFC 9180
     * section 7.1.3); the chance of a candidate failing is about 2^-32. */
    static const uint8_t zero[DH_LEN];
    for (unsigned counter = 0;; counter++) {
        if (counter > 255) {
            s = KL_E_BAD_VALUE; /* DeriveKeyPairError */
            goto done;
        }
        uint8_t c = (uint8_t)counter;
        s = kl_hpke_labeled_expand(sid, sid_len, prk, "candidate", &c, 1, sk,
                                   sizeof sk);
        if (s != KL_OK)
            goto done;
        sk[0] &= 0xff;
        if (memcmp(sk, zero, sizeof sk) != 0 &&
            memcmp(sk, p256_order, sizeof sk) < 0)
            break;
    }
    s = p256_from_scalar(sk, out);
done:
    OPENSSL_cleanse(prk, sizeof prk);
    OPENSSL_cleanse(sk, sizeof sk);
    return s;
}

/* Whether key is a key of the KEM's group. */
static int key_fits(uint16_t kem, const EVP_PKEY *key)
{
    if (!key)
        return 0;
    if (kem == KL_HPKE_KEM_X25519)
        return EVP_PKEY_is_a(key, "X25519");
    if (kem != KL_HPKE_KEM_P256 || !EVP_PKEY_is_a(key, "EC"))
        return 0;
    char group[64];
    size_t glen = 0;
    if (EVP_PKEY_get_group_name(key, group, sizeof group, &glen) != 1)
        return 0;
    return strcmp(group, "prime256v1") == 0 || strcmp(group, "P-256") == 0;
}

kl_status kl_hpke_public(uint16_t kem, const EVP_PKEY *key, uint8_t *out,
                         size_t cap, size_t *len)
{
    size_t want = kl_hpke_pk_len(kem);
    *len = 0;
    if (!want || !key_fits(kem, key))
        return KL_E_BAD_VALUE;
    if (cap < want)
        return KL_E_TOO_LARGE;
    if (kem == KL_HPKE_KEM_X25519) {
        size_t n = want;
        if (EVP_PKEY_get_raw_public_key(key, out, &n) != 1 || n != want)
            return KL_E_KEY;
        *len = n;
        return KL_OK;
    }
    /* The encoded point is uncompressed unless the key was told otherwise;
     * then it is rebuilt from the coordinates (SECG's uncompressed form,
     * RFC 9180 section 7.1.1). */
    uint8_t buf[133];
    size_t n = 0;
    if (EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY,
                                        buf, sizeof buf, &n) == 1 &&
        n == want && buf[0] == 0x04) {
        memcpy(out, buf, want);
        *len = want;
        return KL_OK;
    }
    BIGNUM *x = NULL, *y = NULL;
    kl_status s = KL_E_KEY;
    if (EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_EC_PUB_X, &x) == 1 &&
        EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_EC_PUB_Y, &y) == 1 &&
        BN_bn2binpad(x, out + 1, 32) == 32 &&
        BN_bn2binpad(y, out + 33, 32) == 32) {
        out[0] = 0x04;
        *len = want;
        s = KL_OK;
    }
    BN_free(x);
    BN_free(y);
    return s;
}

/* DeserializePublicKey with the validation of RFC 9180 section 7.1.4:
 * X25519 takes any 32 bytes (its check is on the DH result); P-256 takes
 * only an uncompressed point that is on the curve - OpenSSL refuses one
 * that is not when importing it, and the partial public key check
 * (coordinates in range, on the curve, not infinity; SP 800-56A
 * 5.6.2.3.4) runs again explicitly. */
static kl_status public_from_bytes(uint16_t kem, const uint8_t *pk, size_t len,
                                   EVP_PKEY **out)
{
    *out = NULL;
    if (!pk || len != kl_hpke_pk_len(kem))
        return KL_E_BAD_VALUE;
    if (kem == KL_HPKE_KEM_X25519) {
        *out = EVP_PKEY_new_raw_public_key_ex(NULL, "X25519", NULL, pk, len);
        return *out ? KL_OK : KL_E_BAD_VALUE;
    }
    if (pk[0] != 0x04)
        return KL_E_BAD_VALUE;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME,
                                         (char *)"P-256", 0),
        OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, (void *)pk,
                                          len),
        OSSL_PARAM_construct_end(),
    };
    EVP_PKEY_CTX *pctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    if (!pctx)
        return KL_E_NOMEM;
    kl_status s = KL_E_BAD_VALUE;
    if (EVP_PKEY_fromdata_init(pctx) == 1 &&
        EVP_PKEY_fromdata(pctx, out, EVP_PKEY_PUBLIC_KEY, params) == 1) {
        EVP_PKEY_CTX *cctx = EVP_PKEY_CTX_new_from_pkey(NULL, *out, NULL);
        if (cctx && EVP_PKEY_public_check_quick(cctx) == 1)
            s = KL_OK;
        EVP_PKEY_CTX_free(cctx);
    }
    EVP_PKEY_CTX_free(pctx);
    if (s != KL_OK) {
        EVP_PKEY_free(*out);
        *out = NULL;
    }
    return s;
}

kl_status kl_hpke_public_key(uint16_t kem, const uint8_t *pk, size_t len,
                             EVP_PKEY **out)
{
    return public_from_bytes(kem, pk, len, out);
}

/* DH hooks (seal/hpke.h kl_hpke_key_set_dh): one ex_data index of
 * EVP_PKEYs, made on the first hook; until then no key has one and dh()
 * does not look. */
typedef struct dh_ref {
    kl_hpke_dh_hook hook;
    void *arg;
} dh_ref;

static CRYPTO_ONCE hook_once = CRYPTO_ONCE_STATIC_INIT;
static _Atomic int hook_idx = -1;

static void hook_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx,
                      long argl, void *argp)
{
    (void)parent, (void)ad, (void)idx, (void)argl, (void)argp;
    dh_ref *r = ptr;
    if (!r)
        return;
    if (r->hook.free)
        r->hook.free(r->arg);
    OPENSSL_free(r);
}

/* EVP_PKEY_dup's copy has no hook: arg has one owner. */
static int hook_dup(CRYPTO_EX_DATA *to, const CRYPTO_EX_DATA *from,
                    void **from_d, int idx, long argl, void *argp)
{
    (void)to, (void)from, (void)idx, (void)argl, (void)argp;
    *from_d = NULL;
    return 1;
}

static void hook_init(void)
{
    hook_idx = CRYPTO_get_ex_new_index(CRYPTO_EX_INDEX_EVP_PKEY, 0, NULL, NULL,
                                       hook_dup, hook_free);
}

kl_status kl_hpke_key_set_dh(EVP_PKEY *pub, const kl_hpke_dh_hook *hook,
                             void *arg)
{
    dh_ref *r = NULL;
    kl_status s = KL_E_BAD_VALUE;
    if (!pub || !hook || !hook->dh)
        goto fail;
    s = KL_E_INTERNAL;
    if (!CRYPTO_THREAD_run_once(&hook_once, hook_init) || hook_idx < 0)
        goto fail;
    s = KL_E_BAD_VALUE;
    if (EVP_PKEY_get_ex_data(pub, hook_idx))
        goto fail;
    s = KL_E_NOMEM;
    if (!(r = OPENSSL_zalloc(sizeof *r)))
        goto fail;
    r->hook = *hook;
    r->arg = arg;
    if (EVP_PKEY_set_ex_data(pub, hook_idx, r) == 1)
        return KL_OK;
    OPENSSL_free(r);
    s = KL_E_INTERNAL;
fail:
    if (hook && hook->free)
        hook->free(arg);
    return s;
}

static const dh_ref *hook_of(const EVP_PKEY *key)
{
    return hook_idx >= 0 && key ? EVP_PKEY_get_ex_data(key, hook_idx) : NULL;
}

/* DH through a hook: the peer as SerializePublicKey. */
static kl_status hook_dh(const dh_ref *r, uint16_t kem, EVP_PKEY *peer,
                         uint8_t *out)
{
    uint8_t pke[KL_HPKE_MAX_ENC];
    size_t n = 0;
    KL_GUARD(kl_hpke_public(kem, peer, pke, sizeof pke, &n));
    return r->hook.dh(r->arg, kem, pke, n, out);
}

/* The property query that keeps a derive with sk in the provider that
 * holds it: without one, OpenSSL 3.0 may fetch ECDH from the default
 * provider and hand it sk's public half only (a TPM key through
 * tpm2-openssl: "missing private key"). NULL for OpenSSL's own keys. */
static const char *key_propq(const EVP_PKEY *sk, char *buf, size_t len)
{
    const OSSL_PROVIDER *p = EVP_PKEY_get0_provider(sk);
    const char *name = p ? OSSL_PROVIDER_get0_name(p) : NULL;
    if (!name || !strcmp(name, "default") || !strcmp(name, "fips") ||
        !strcmp(name, "base"))
        return NULL;
    int n = snprintf(buf, len, "?provider=%s", name);
    return n > 0 && (size_t)n < len ? buf : NULL;
}

/* DH(sk, pk): the X25519 result, or P-256's x-coordinate; 32 bytes. */
static kl_status dh(uint16_t kem, EVP_PKEY *sk, EVP_PKEY *peer, uint8_t *out)
{
    const dh_ref *hook = hook_of(sk);
    char pq[96];
    EVP_PKEY_CTX *dctx = hook ? NULL
                              : EVP_PKEY_CTX_new_from_pkey(
                                    NULL, sk, key_propq(sk, pq, sizeof pq));
    if (!hook && !dctx)
        return KL_E_NOMEM;
    size_t n = DH_LEN;
    kl_status s = KL_E_KEY;
    /* The peer was validated when it was read (public_from_bytes). */
    if (hook) {
        s = hook_dh(hook, kem, peer, out);
    } else if (EVP_PKEY_derive_init(dctx) == 1 &&
               EVP_PKEY_derive_set_peer_ex(dctx, peer, 0) == 1) {
        if (EVP_PKEY_derive(dctx, out, &n) == 1)
            s = n == DH_LEN ? KL_OK : KL_E_INTERNAL;
        else if (kem == KL_HPKE_KEM_X25519)
            /* OpenSSL's X25519 fails exactly when the result is all zero
             * (a low-order point, RFC 7748 section 6.1): the peer's input
             * is bad, not our key. */
            s = KL_E_BAD_VALUE;
    }
    EVP_PKEY_CTX_free(dctx);
    /* RFC 9180 section 7.1.4: abort on an all-zero X25519 result, whoever
     * computed it (a provider need not check it as OpenSSL does). */
    static const uint8_t zero[DH_LEN];
    if (s == KL_OK && CRYPTO_memcmp(out, zero, DH_LEN) == 0)
        s = KL_E_BAD_VALUE;
    if (s != KL_OK)
        OPENSSL_cleanse(out, DH_LEN);
    return s;
}

/* ExtractAndExpand(dh, kem_context) with kem_context = enc || pkRm. */
static kl_status extract_and_expand(uint16_t kem, const uint8_t *dh_out,
                                    const uint8_t *enc, const uint8_t *pkrm,
                                    size_t pk_len, uint8_t *shared_secret)
{
    uint8_t sid[KL_HPKE_SUITE_ID_MAX], prk[KL_HPKE_HASH_LEN];
    uint8_t kem_context[2 * KL_HPKE_MAX_ENC];
    size_t sid_len = kl_hpke_kem_suite_id(kem, sid);
    memcpy(kem_context, enc, pk_len);
    memcpy(kem_context + pk_len, pkrm, pk_len);
    kl_status s = kl_hpke_labeled_extract(sid, sid_len, NULL, 0, "eae_prk",
                                          dh_out, DH_LEN, prk);
    if (s == KL_OK)
        s = kl_hpke_labeled_expand(sid, sid_len, prk, "shared_secret",
                                   kem_context, 2 * pk_len, shared_secret,
                                   KL_HPKE_HASH_LEN);
    OPENSSL_cleanse(prk, sizeof prk);
    return s;
}

kl_status kl_hpke_encap(uint16_t kem, EVP_PKEY *eph, const uint8_t *pkr,
                        size_t pkr_len, uint8_t *shared_secret, uint8_t *enc,
                        size_t enc_cap, size_t *enc_len)
{
    size_t pk_len = kl_hpke_pk_len(kem);
    *enc_len = 0;
    if (!pk_len)
        return KL_E_BAD_VALUE;
    if (enc_cap < pk_len)
        return KL_E_TOO_LARGE;
    EVP_PKEY *pk_r = NULL, *sk_e = eph;
    uint8_t dh_out[DH_LEN];
    size_t n = 0;
    kl_status s = public_from_bytes(kem, pkr, pkr_len, &pk_r);
    if (s == KL_OK && !sk_e)
        s = kl_hpke_generate(kem, &sk_e);
    if (s == KL_OK)
        s = kl_hpke_public(kem, sk_e, enc, enc_cap, &n);
    if (s == KL_OK)
        s = dh(kem, sk_e, pk_r, dh_out);
    if (s == KL_OK)
        s = extract_and_expand(kem, dh_out, enc, pkr, pk_len, shared_secret);
    OPENSSL_cleanse(dh_out, sizeof dh_out);
    if (sk_e != eph)
        EVP_PKEY_free(sk_e); /* the fresh ephemeral key: used once */
    EVP_PKEY_free(pk_r);
    if (s == KL_OK)
        *enc_len = pk_len;
    else
        OPENSSL_cleanse(shared_secret, KL_HPKE_HASH_LEN);
    return s;
}

kl_status kl_hpke_decap(uint16_t kem, const uint8_t *enc, size_t enc_len,
                        EVP_PKEY *skr, uint8_t *shared_secret)
{
    uint8_t pkrm[KL_HPKE_MAX_ENC], dh_out[DH_LEN];
    size_t pk_len = 0;
    EVP_PKEY *pk_e = NULL;
    kl_status s = kl_hpke_public(kem, skr, pkrm, sizeof pkrm, &pk_len);
    if (s == KL_OK)
        s = public_from_bytes(kem, enc, enc_len, &pk_e);
    if (s == KL_OK)
        s = dh(kem, skr, pk_e, dh_out);
    if (s == KL_OK)
        s = extract_and_expand(kem, dh_out, enc, pkrm, pk_len, shared_secret);
    OPENSSL_cleanse(dh_out, sizeof dh_out);
    EVP_PKEY_free(pk_e);
    if (s != KL_OK)
        OPENSSL_cleanse(shared_secret, KL_HPKE_HASH_LEN);
    return s;
}

/* The P-256 group, made once per process for kl_hpke_public_check (an
 * EVP_PKEY import per point builds one each time: ~20 us a point,
 * docs/SEALING.md "Cost, measured"). Only read after its setup, so
 * threads share it. */
static EC_GROUP *p256_group;
static CRYPTO_ONCE p256_once = CRYPTO_ONCE_STATIC_INIT;

static void p256_group_free(void)
{
    EC_GROUP_free(p256_group);
    p256_group = NULL;
}

static void p256_group_setup(void)
{
    p256_group = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1);
    if (p256_group)
        atexit(p256_group_free); /* before OpenSSL's cleanup (earlier) */
}

kl_status kl_hpke_public_check(uint16_t kem, const uint8_t *pk, size_t len)
{
    if (!pk || !len || len != kl_hpke_pk_len(kem))
        return KL_E_BAD_VALUE;
    if (kem == KL_HPKE_KEM_X25519)
        return KL_OK;
    if (pk[0] != 0x04)
        return KL_E_BAD_VALUE;
    if (!CRYPTO_THREAD_run_once(&p256_once, p256_group_setup) || !p256_group)
        return KL_E_INTERNAL;
    /* oct2point refuses coordinates out of range and a point off the
     * curve; 65 bytes cannot encode the point at infinity. */
    EC_POINT *q = EC_POINT_new(p256_group);
    if (!q)
        return KL_E_NOMEM;
    kl_status s = EC_POINT_oct2point(p256_group, q, pk, len, NULL) == 1 &&
                          EC_POINT_is_on_curve(p256_group, q, NULL) == 1 &&
                          !EC_POINT_is_at_infinity(p256_group, q)
                      ? KL_OK
                      : KL_E_BAD_VALUE;
    EC_POINT_free(q);
    ERR_clear_error();
    return s;
}
