/* SPDX-License-Identifier: Apache-2.0 */
/* ECDSA from a bare scalar (see ec_direct.h). EVP offers no way to sign
 * with a key without that key's own OpenSSL objects: an EVP_PKEY for P-256
 * is 44 allocations (~1.9 KiB, its own EC_GROUP copy), and with 100,000
 * keys in rotation each signature misses on them (~1.7 us of ~14 us). Here
 * a thread keeps one EC_KEY per curve, hot in its cache, and sets the
 * request's scalar into it: the only cold memory left is the kl_key that
 * holds the scalar. The code that signs is the one EVP_PKEY_sign runs for
 * a default-provider key (ECDSA_sign_ex on an EC_KEY); the key store copies
 * the scalar only when that holds (keystore.c). */
/* The build hides deprecated declarations (CMakeLists.txt); this file
 * alone sees EC_KEY_* and ECDSA_sign, without the warnings. */
#undef OPENSSL_NO_DEPRECATED
#undef OPENSSL_API_COMPAT
#define OPENSSL_API_COMPAT 10101
#define OPENSSL_SUPPRESS_DEPRECATED

#include <limits.h>

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/obj_mac.h>

#include "crypto/ec_direct.h"
#include "keyless/protocol.h"

static const int curves[] = {NID_X9_62_prime256v1, NID_secp384r1, NID_secp521r1,
                             NID_secp224r1};
#define NCURVES (sizeof curves / sizeof curves[0])

static __thread struct {
    EC_KEY *key[NCURVES];
    BIGNUM *d;
} tl;

/* This thread's EC_KEY slot for the curve; NULL for another curve. */
static EC_KEY **slot_for(int curve)
{
    for (size_t i = 0; i < NCURVES; i++)
        if (curves[i] == curve)
            return &tl.key[i];
    return NULL;
}

kl_status kl_ec_sign_scalar(int curve, const uint8_t *d, size_t dlen,
                            const uint8_t *dgst, size_t dgstlen, uint8_t *out,
                            size_t *out_len)
{
    EC_KEY **slot = slot_for(curve);
    if (slot && !*slot)
        *slot = EC_KEY_new_by_curve_name(curve);
    if (!slot || !*slot || (!tl.d && !(tl.d = BN_new())))
        return KL_E_INTERNAL;
    EC_KEY *ek = *slot;
    if (dlen > INT_MAX || dgstlen > INT_MAX)
        return KL_E_CRYPTO;
    unsigned int n = 0;
    int ok = BN_bin2bn(d, (int)dlen, tl.d) != NULL &&
             EC_KEY_set_private_key(ek, tl.d) == 1 &&
             ECDSA_sign(0, dgst, (int)dgstlen, out, &n, ek) == 1;
    /* no copy of the scalar stays behind: the BIGNUM is zeroed, and the
     * EC_KEY's own copy is freed with BN_clear_free when 1 replaces it */
    BN_clear(tl.d);
    if (EC_KEY_set_private_key(ek, BN_value_one()) != 1) {
        EC_KEY_free(ek); /* cannot happen; never keep a scalar around */
        *slot = NULL;
    }
    if (!ok)
        return KL_E_CRYPTO;
    *out_len = n;
    return KL_OK;
}

void kl_ec_direct_thread_free(void)
{
    for (size_t i = 0; i < NCURVES; i++) {
        EC_KEY_free(tl.key[i]);
        tl.key[i] = NULL;
    }
    BN_clear_free(tl.d);
    tl.d = NULL;
}
