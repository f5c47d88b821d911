/* SPDX-License-Identifier: Apache-2.0 */
/* Private to src/crypto: private-key operations on PKCS#11 tokens
 * (docs/OPERATIONS.md, PKCS#11), reached through kl_crypto_exec_deadline once
 * the opcode, the key type and the input length were checked. */
#ifndef KL_CRYPTO_P11_OPS_H
#define KL_CRYPTO_P11_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "keys/keystore.h"

kl_status kl_p11_exec(const kl_key *key, uint8_t opcode, const uint8_t *in,
                      size_t inlen, uint8_t *out, size_t outcap,
                      size_t *out_len, uint64_t deadline_ns);

/* -1, 0, 1 as a <, ==, > b (k big-endian bytes each), in constant time
 * (ops.c). */
int kl_crypto_compare_be(const uint8_t *a, const uint8_t *b, size_t k);

#endif
