/* SPDX-License-Identifier: Apache-2.0 */
/* Constant-time TLS premaster check (see tlspad.h). Every byte of em is
 * read exactly once, in order, and every decision is a mask. */
#include "provider/tlspad.h"

/* All-ones when x == 0, else 0 (x < 2^31). */
static unsigned ct_is_zero(unsigned x)
{
    return 0u - (((x | (0u - x)) >> 31) ^ 1u);
}

static unsigned ct_eq(unsigned a, unsigned b)
{
    return ct_is_zero(a ^ b);
}

unsigned klp_tls_premaster(const uint8_t *em, size_t k, unsigned client_version,
                           unsigned alt_version,
                           const uint8_t rnd[KLP_PREMASTER_LEN],
                           uint8_t out[KLP_PREMASTER_LEN])
{
    if (k < 11 + KLP_PREMASTER_LEN) {
        /* A public property of the key, not of the ciphertext. */
        for (size_t i = 0; i < KLP_PREMASTER_LEN; i++)
            out[i] = rnd[i];
        return 0;
    }
    size_t sep = k - KLP_PREMASTER_LEN - 1; /* where the 00 must be */
    unsigned good = ct_eq(em[0], 0) & ct_eq(em[1], 2);
    /* PS: bytes 2 .. sep-1 all non-zero (at least 8 of them: k >= 59). */
    for (size_t i = 2; i < sep; i++)
        good &= ~ct_is_zero(em[i]);
    good &= ct_is_zero(em[sep]);
    const uint8_t *m = em + sep + 1;
    unsigned ver = (unsigned)m[0] << 8 | m[1];
    unsigned vok = ct_eq(ver, client_version & 0xFFFF);
    vok |= ~ct_is_zero(alt_version) & ct_eq(ver, alt_version & 0xFFFF);
    good &= vok;
    for (size_t i = 0; i < KLP_PREMASTER_LEN; i++)
        out[i] = (uint8_t)((m[i] & good) | (rnd[i] & ~good));
    return good & 1u;
}
