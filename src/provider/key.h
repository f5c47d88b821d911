/* SPDX-License-Identifier: Apache-2.0 */
/* A keyless key: the public half (an ordinary EVP_PKEY in the provider's
 * child library context) plus, for a key reference, how to reach the key
 * servers that hold the private half. Immutable once built, reference
 * counted, safe to share between threads. */
#ifndef KL_PROVIDER_KEY_H
#define KL_PROVIDER_KEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "provider/prov.h"

typedef enum klp_type {
    KLP_RSA = 1,
    KLP_EC = 2,
    KLP_ED25519 = 3,
} klp_type;

typedef struct klp_key klp_key;

/* From a parsed reference (which is consumed: cleared on return). NULL
 * with err filled when the reference cannot be used. */
klp_key *klp_key_from_ref(klp_ctx *p, kl_keyref *r, char *err, size_t errlen);

/* An empty key of a type, for the keymgmt's import; it can do nothing
 * until klp_key_set_public gives it its public half (once, takes pub). */
klp_key *klp_key_empty(klp_ctx *p, klp_type t);
int klp_key_set_public(klp_key *k, EVP_PKEY *pub);

void klp_key_up_ref(klp_key *k);
void klp_key_free(klp_key *k);

klp_type klp_key_type(const klp_key *k);
klp_ctx *klp_key_prov(const klp_key *k);
/* NULL for an empty key. */
EVP_PKEY *klp_key_pub(const klp_key *k);
/* True for a key reference (the private half is on a key server). */
bool klp_key_remote(const klp_key *k);
/* Largest signature or decryption output (bytes). */
size_t klp_key_max_output(const klp_key *k);
/* Modulus bytes (RSA), 0 otherwise. */
size_t klp_key_rsa_len(const klp_key *k);
/* The type's name: "RSA", "EC", "ED25519". */
const char *klp_type_name(klp_type t);
/* The type of a public key, 0 when it is none of ours. */
klp_type klp_type_of(const EVP_PKEY *pk);

/* Runs operation op (protocol P4) on the key servers: in is the payload,
 * the answer is written to out (at most outcap bytes). Returns 1, or 0
 * with an OpenSSL error raised that names the key servers: KLP_R_UNREACHABLE
 * when none answered within the timeout (after trying the local fallback
 * key, if the reference names one), KLP_R_SERVER_ERROR with the P6 text
 * when one answered with an error. */
int klp_key_op(klp_key *k, uint8_t op, const uint8_t *in, size_t inlen,
               uint8_t *out, size_t outcap, size_t *outlen);

#endif
