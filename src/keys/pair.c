/* SPDX-License-Identifier: Apache-2.0 */
/* Does a decoded key's public part belong to its private part? (decode.h;
 * docs/OPERATIONS.md "Key files"; docs/SECURITY.md "Local") A key file
 * carries both, and OpenSSL's decoders take the public part as written: a
 * file whose public key is another key's would be filed under that other
 * key's SKI. Checked at every load, so the checks must cost little next to
 * the decode itself:
 * EVP_PKEY_pairwise_check proves RSA primes prime (hundreds of ms per
 * key) and EC public keys of full order (a variable-base multiplication);
 * neither is needed to tie the two parts together. What is checked:
 *   RSA: n is the product of the primes, e*d = 1 mod (r - 1) for each
 *        prime r, and the CRT values agree with d and the primes; without
 *        primes, (2^d)^e = 2 mod n.
 *   EC: 0 < d < order, and d*G is the public point.
 *   Ed25519: the public key derived from the private one is the key's. */
#include <stdbool.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/params.h>

#include "keys/decode.h"

#define WHY(...) snprintf(why, whylen, __VA_ARGS__)

/* Not a mismatch: no public key can go with this private part. */
static const char bad_scalar[] =
    "EC private key is zero or not below the curve order: not a valid key";

static const char mismatch[] =
    "the private and public parts of the key do not match (%s): the file is "
    "corrupt or was pieced together from two keys; export the key again "
    "from its source";

/* OpenSSL names RSA primes rsa-factor1..10 (and exponents and
 * coefficients alike); two for ordinary keys. */
#define MAX_PRIMES 10

/* One export of every RSA parameter: EVP_PKEY_get_bn_param costs about
 * as much as this each time, and a two-prime key has eight. */
static BIGNUM *param_bn(const OSSL_PARAM *ps, const char *base, int i)
{
    char name[32];
    if (i > 0)
        snprintf(name, sizeof name, "%s%d", base, i);
    else
        snprintf(name, sizeof name, "%s", base);
    const OSSL_PARAM *p = OSSL_PARAM_locate_const(ps, name);
    BIGNUM *bn = NULL;
    if (!p || !OSSL_PARAM_get_BN(p, &bn))
        return NULL;
    return bn;
}

/* OSSL_PARAM_free does not wipe (OpenSSL 3.0 has no clear_free). */
static void params_clear_free(OSSL_PARAM *ps)
{
    for (OSSL_PARAM *p = ps; p && p->key; p++)
        if (p->data)
            OPENSSL_cleanse(p->data, p->data_size);
    OSSL_PARAM_free(ps);
}

/* 1: x = y mod m (m > 0) */
static int congruent(const BIGNUM *x, const BIGNUM *y, const BIGNUM *m,
                     BN_CTX *ctx)
{
    BN_CTX_start(ctx);
    BIGNUM *a = BN_CTX_get(ctx), *b = BN_CTX_get(ctx);
    int ok = b && BN_nnmod(a, x, m, ctx) && BN_nnmod(b, y, m, ctx) &&
             BN_cmp(a, b) == 0;
    BN_CTX_end(ctx);
    return ok;
}

/* Without the primes: one round trip of the number 2 through d and e. */
static const char *rsa_no_primes(const BIGNUM *n, const BIGNUM *e,
                                 const BIGNUM *d, BN_CTX *ctx)
{
    BN_CTX_start(ctx);
    BIGNUM *two = BN_CTX_get(ctx), *s = BN_CTX_get(ctx), *v = BN_CTX_get(ctx);
    BIGNUM *dc = BN_CTX_get(ctx);
    const char *bad = "cannot check the key";
    if (v && dc && BN_set_word(two, 2) && BN_copy(dc, d)) {
        BN_set_flags(dc, BN_FLG_CONSTTIME);
        if (BN_mod_exp_mont_consttime(s, two, dc, n, ctx, NULL) &&
            BN_mod_exp(v, s, e, n, ctx))
            bad = BN_cmp(v, two) == 0 ? NULL : "e and d are not inverses";
    }
    BN_CTX_end(ctx);
    return bad;
}

static const char *rsa_check(EVP_PKEY *pkey, BN_CTX *ctx)
{
    BIGNUM *n = NULL, *e = NULL, *d = NULL, *r[MAX_PRIMES] = {0};
    BIGNUM *ex[MAX_PRIMES] = {0}, *coef = NULL;
    const char *bad = "cannot check the key";
    int k = 0;
    OSSL_PARAM *ps = NULL;
    if (EVP_PKEY_todata(pkey, EVP_PKEY_KEYPAIR, &ps) != 1 ||
        !(n = param_bn(ps, OSSL_PKEY_PARAM_RSA_N, 0)) ||
        !(e = param_bn(ps, OSSL_PKEY_PARAM_RSA_E, 0)) ||
        !(d = param_bn(ps, OSSL_PKEY_PARAM_RSA_D, 0)))
        goto out;
    while (k < MAX_PRIMES && (r[k] = param_bn(ps, "rsa-factor", k + 1)))
        k++;
    /* PKCS#1 written by tools that know only n, e and d: primes of 0 */
    bool zeros = true;
    for (int i = 0; i < k; i++)
        zeros = zeros && BN_is_zero(r[i]);
    if (k == 0 || zeros) {
        bad = rsa_no_primes(n, e, d, ctx);
        goto out;
    }
    BN_CTX_start(ctx);
    BIGNUM *prod = BN_CTX_get(ctx), *ed = BN_CTX_get(ctx);
    BIGNUM *rm1 = BN_CTX_get(ctx), *t = BN_CTX_get(ctx);
    if (!t || !BN_one(prod) || !BN_mul(ed, e, d, ctx))
        goto end;
    for (int i = 0; i < k; i++) {
        if (BN_cmp(r[i], BN_value_one()) <= 0) {
            bad = "a prime of the key is not above 1";
            goto end;
        }
        if (!BN_mul(prod, prod, r[i], ctx) ||
            !BN_sub(rm1, r[i], BN_value_one()))
            goto end;
        if (!congruent(ed, BN_value_one(), rm1, ctx)) {
            bad = "e*d is not 1 modulo p-1 for a prime p: the public exponent "
                  "or d belongs to another key";
            goto end;
        }
        ex[i] = param_bn(ps, "rsa-exponent", i + 1);
        if (ex[i] && !congruent(ex[i], d, rm1, ctx)) {
            bad = "a CRT exponent does not agree with d";
            goto end;
        }
    }
    if (BN_cmp(prod, n) != 0) {
        bad = "the modulus is not the product of the primes: the public key "
              "belongs to another key";
        goto end;
    }
    coef = k >= 2 ? param_bn(ps, "rsa-coefficient", 1) : NULL;
    if (coef && (!BN_mod_mul(t, coef, r[1], r[0], ctx) || !BN_is_one(t))) {
        bad = "the CRT coefficient does not agree with the primes";
        goto end;
    }
    bad = NULL;
end:
    BN_CTX_end(ctx);
out:
    params_clear_free(ps);
    BN_free(n);
    BN_free(e);
    BN_clear_free(d);
    for (int i = 0; i < MAX_PRIMES; i++) {
        BN_clear_free(r[i]);
        BN_clear_free(ex[i]);
    }
    BN_clear_free(coef);
    return bad;
}

static const int curves[KL_PAIR_CURVES] = {NID_X9_62_prime256v1, NID_secp384r1,
                                           NID_secp521r1, NID_secp224r1};

static const EC_GROUP *group_for(kl_pair_cache *c, int nid)
{
    for (int i = 0; i < KL_PAIR_CURVES; i++) {
        if (curves[i] != nid)
            continue;
        if (!c->group[i])
            c->group[i] = EC_GROUP_new_by_curve_name(nid);
        return c->group[i];
    }
    return NULL;
}

static const char *ec_check(EVP_PKEY *pkey, int nid, kl_pair_cache *c,
                            BN_CTX *ctx)
{
    const EC_GROUP *g = group_for(c, nid);
    BIGNUM *d = NULL;
    EC_POINT *want = NULL, *have = NULL;
    uint8_t pub[1 + 2 * 66];
    size_t len = 0;
    const char *bad = "cannot check the key";
    if (!g || !EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_PRIV_KEY, &d))
        goto out;
    if (BN_is_zero(d) || BN_cmp(d, EC_GROUP_get0_order(g)) >= 0) {
        bad = bad_scalar;
        goto out;
    }
    BN_set_flags(d, BN_FLG_CONSTTIME);
    if (!EVP_PKEY_get_octet_string_param(
            pkey, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, pub, sizeof pub, &len)) {
        bad = "the key has no public point";
        goto out;
    }
    if (!(want = EC_POINT_new(g)) || !(have = EC_POINT_new(g)) ||
        !EC_POINT_mul(g, want, d, NULL, NULL, ctx))
        goto out;
    if (!EC_POINT_oct2point(g, have, pub, len, ctx)) {
        bad = "the public point is not on the curve";
        goto out;
    }
    bad = EC_POINT_cmp(g, want, have, ctx) == 0
              ? NULL
              : "the public point is not d*G: it belongs to another key";
out:
    BN_clear_free(d);
    EC_POINT_free(want);
    EC_POINT_free(have);
    return bad;
}

static const char *ed25519_check(EVP_PKEY *pkey)
{
    uint8_t priv[32], pub[32], derived[32];
    size_t plen = sizeof priv, qlen = sizeof pub, dlen = sizeof derived;
    const char *bad = "cannot check the key";
    EVP_PKEY *again = NULL;
    if (EVP_PKEY_get_raw_private_key(pkey, priv, &plen) == 1 &&
        plen == sizeof priv &&
        EVP_PKEY_get_raw_public_key(pkey, pub, &qlen) == 1 &&
        qlen == sizeof pub &&
        (again = EVP_PKEY_new_raw_private_key_ex(NULL, "ED25519", NULL, priv,
                                                 plen)) != NULL &&
        EVP_PKEY_get_raw_public_key(again, derived, &dlen) == 1 &&
        dlen == sizeof derived)
        bad = memcmp(pub, derived, sizeof pub) == 0
                  ? NULL
                  : "the public key is not the one derived from the private "
                    "key: it belongs to another key";
    OPENSSL_cleanse(priv, sizeof priv);
    EVP_PKEY_free(again);
    return bad;
}

void kl_pair_cache_free(kl_pair_cache *c)
{
    for (int i = 0; i < KL_PAIR_CURVES; i++) {
        EC_GROUP_free(c->group[i]);
        c->group[i] = NULL;
    }
    BN_CTX_free(c->bn);
    c->bn = NULL;
}

kl_status kl_key_check_pair(kl_pair_cache *c, EVP_PKEY *pkey,
                            const kl_key_info *info, char *why, size_t whylen)
{
    if (!c->bn && !(c->bn = BN_CTX_new())) {
        WHY("out of memory");
        return KL_E_NOMEM;
    }
    const char *bad = NULL;
    switch (info->type) {
    case KL_KEY_RSA: bad = rsa_check(pkey, c->bn); break;
    case KL_KEY_EC: bad = ec_check(pkey, info->curve, c, c->bn); break;
    case KL_KEY_ED25519: bad = ed25519_check(pkey); break;
    default: bad = "unknown key type"; break;
    }
    ERR_clear_error();
    if (!bad)
        return KL_OK;
    if (bad == bad_scalar)
        WHY("%s", bad);
    else
        WHY(mismatch, bad);
    return KL_E_KEY;
}
