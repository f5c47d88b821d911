/* SPDX-License-Identifier: Apache-2.0 */
/* Operation names for command lines (keyless-cli --op, keyless-bench -op
 * and -mix): short names such as "ecdsa-sha256", the protocol's names
 * ("OpECDSASignSHA256", as kl_op_name prints them, which the reference
 * tools use), and numbers ("0x15"). */
#ifndef KL_CLIENT_OPNAMES_H
#define KL_CLIENT_OPNAMES_H

#include <stdbool.h>
#include <stdint.h>

#include <openssl/evp.h>

/* Case, '-' and '_' do not matter, nor an "Op" prefix or "Sign":
 * "ecdsa-sha256", "ECDSA_SHA256" and "OpECDSASignSHA256" are one
 * operation. Numbers 0..255 (decimal or 0x) are taken as they are. */
bool kl_op_parse(const char *s, uint8_t *op);
/* The short name ("rsa-pss-sha256"), or NULL for an opcode without one. */
const char *kl_op_short(uint8_t op);
/* The short names, comma-separated, for help texts. */
const char *kl_op_short_list(void);
/* The operation a public key is used with when none is named (keyless-cli
 * without --op, keyless-bench without -op): rsa-sha256 for RSA,
 * ecdsa-sha256 for EC, ed25519 for Ed25519. */
uint8_t kl_op_default_for_key(const EVP_PKEY *pk);

#endif
