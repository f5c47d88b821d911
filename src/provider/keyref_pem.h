/* SPDX-License-Identifier: Apache-2.0 */
/* The OpenSSL side of key references: building one from a public key,
 * writing and reading its PEM armour, and turning its public key back into
 * an EVP_PKEY that must match its SKI (protocol P7). */
#ifndef KL_PROVIDER_KEYREF_PEM_H
#define KL_PROVIDER_KEYREF_PEM_H

#include <openssl/types.h>

#include "provider/keyref.h"

/* Fills r->ski and r->spki from a public key (the rest is the caller's). */
KL_WUR kl_status kl_keyref_set_pubkey(kl_keyref *r, EVP_PKEY *pub);

/* Writes the PEM block (KL_KEYREF_PEM_LABEL, no headers). */
KL_WUR kl_status kl_keyref_write_pem(BIO *out, const kl_keyref *r);

/* Reads the next PEM block from in. KL_OK with *is_ref true and *out
 * filled when it is a key reference; KL_OK with *is_ref false when it is
 * some other block (consumed); KL_E_NOT_FOUND when no block is left; a
 * parse error (err says why) for a reference that is malformed. */
KL_WUR kl_status kl_keyref_read_pem(BIO *in, kl_keyref *out, bool *is_ref,
                                    char *err, size_t errlen);

/* Decodes r->spki in libctx/propq and checks that its SKI is r->ski.
 * KL_E_KEY (err says why) when it does not decode or does not match. */
KL_WUR kl_status kl_keyref_pubkey(const kl_keyref *r, OSSL_LIB_CTX *libctx,
                                  const char *propq, EVP_PKEY **out, char *err,
                                  size_t errlen);

#endif
