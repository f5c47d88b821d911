/* SPDX-License-Identifier: Apache-2.0 */
/* ECDSA with a key's bare private scalar (kl_key_ec_scalar) on a
 * per-thread EC_KEY: the one place keylessd uses OpenSSL's deprecated EC
 * API, because 100,000 keys measured it (docs/DESIGN.md "Many keys: the
 * scalar next to the SKI"). Thread-safe; each thread's EC_KEYs are freed by
 * kl_ec_direct_thread_free (kl_crypto_thread_cleanup). */
#ifndef KL_CRYPTO_EC_DIRECT_H
#define KL_CRYPTO_EC_DIRECT_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* Signs dgst (any length: ECDSA truncates it to the order, as
 * EVP_PKEY_sign does with no digest set) with the scalar d (dlen bytes,
 * big-endian) on the named curve (an EC curve NID). out must hold the
 * curve's largest DER signature. Returns KL_OK with *out_len set,
 * KL_E_CRYPTO when OpenSSL refuses, KL_E_INTERNAL for an unknown curve
 * or no memory. Leaves no copy of d behind. */
kl_status kl_ec_sign_scalar(int curve, const uint8_t *d, size_t dlen,
                            const uint8_t *dgst, size_t dgstlen, uint8_t *out,
                            size_t *out_len);
/* Frees this thread's EC_KEYs. */
void kl_ec_direct_thread_free(void);

#endif
