/* SPDX-License-Identifier: Apache-2.0 */
/* The public-key side of a key-server operation: load the public key a
 * client holds (certificate or public key file), hash a message the way an
 * opcode expects, and check a server's answer (protocol P4). Used by
 * keyless-cli and the tests; never touches private keys. */
#ifndef KL_CLIENT_VERIFY_H
#define KL_CLIENT_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "core/status.h"
#include "keyless/protocol.h"

/* Largest digest kl_op_digest writes (SHA-512). */
#define KL_MAX_DIGEST 64u

/* Loads a public key from a certificate or a public key file, PEM or DER.
 * On failure err names the file and what it holds instead. */
KL_WUR kl_status kl_pubkey_load(const char *path, EVP_PKEY **out, char *err,
                                size_t errlen);

/* "RSA-2048", "ECDSA-P-256", "Ed25519" (or the algorithm name). */
const char *kl_pubkey_desc(EVP_PKEY *pk, char *buf, size_t len);

/* The hash an opcode signs with: MD5SHA1 is MD5 || SHA-1 (36 bytes); NULL
 * for opcodes that take no digest (decrypt, Ed25519, non-key opcodes). */
const EVP_MD *kl_op_md(uint8_t op);

/* Hashes msg with the opcode's hash into out (KL_MAX_DIGEST bytes).
 * KL_E_BAD_VALUE for an opcode without a hash. */
KL_WUR kl_status kl_op_digest(uint8_t op, const void *msg, size_t len,
                              uint8_t *out, size_t *out_len);

/* Checks that out is what opcode op on input in must produce with the
 * private half of pub:
 * - RSA PKCS#1 v1.5 (DigestInfo, none for MD5SHA1), RSA-PSS (salt = hash
 *   length), ECDSA (DER), Ed25519 (pure, in = the message): the signature
 *   verifies;
 * - RSA decrypt: out is k bytes and re-encrypting it with the public key
 *   (no padding) gives back the ciphertext.
 * On failure why says what did not match. KL_E_BAD_VALUE when op is not a
 * key operation or does not fit the key type. */
KL_WUR kl_status kl_verify_output(EVP_PKEY *pub, uint8_t op, const uint8_t *in,
                                  size_t inlen, const uint8_t *out,
                                  size_t outlen, char *why, size_t whylen);

/* For an RSA decrypt result: checks the PKCS#1 v1.5 type-2 layout
 * 00 02 PS(>= 8 non-zero) 00 M and points *msg at M. */
KL_WUR kl_status kl_pkcs1_type2_unpad(const uint8_t *block, size_t len,
                                      const uint8_t **msg, size_t *msg_len);

#endif
