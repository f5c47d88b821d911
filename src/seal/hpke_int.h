/* SPDX-License-Identifier: Apache-2.0 */
/* Inside HPKE (seal/hpke.h): the labelled KDF of RFC 9180 section 4 and
 * the DHKEM of section 4.1, shared by kdf.c, kem.c and hpke.c. The unit
 * tests use them to check the vectors' intermediate values. */
#ifndef KL_SEAL_HPKE_INT_H
#define KL_SEAL_HPKE_INT_H

#include "seal/hpke.h"

/* suite_id: "KEM" || I2OSP(kem_id, 2) inside the KEM (5 bytes), "HPKE" ||
 * I2OSP(kem_id, 2) || I2OSP(kdf_id, 2) || I2OSP(aead_id, 2) elsewhere
 * (10 bytes). */
#define KL_HPKE_SUITE_ID_MAX 10
size_t kl_hpke_kem_suite_id(uint16_t kem, uint8_t *out);
size_t kl_hpke_suite_id(kl_hpke_suite suite, uint8_t *out);

/* LabeledExtract(salt, label, ikm) = Extract(salt, "HPKE-v1" || suite_id
 * || label || ikm): a KL_HPKE_HASH_LEN-byte PRK. An empty salt is HKDF's
 * (Nh zero bytes). */
KL_WUR kl_status kl_hpke_labeled_extract(const uint8_t *suite_id,
                                         size_t sid_len, const uint8_t *salt,
                                         size_t salt_len, const char *label,
                                         const uint8_t *ikm, size_t ikm_len,
                                         uint8_t *prk);
/* LabeledExpand(prk, label, info, L) = Expand(prk, I2OSP(L, 2) ||
 * "HPKE-v1" || suite_id || label || info, L). */
KL_WUR kl_status kl_hpke_labeled_expand(const uint8_t *suite_id, size_t sid_len,
                                        const uint8_t *prk, const char *label,
                                        const uint8_t *info, size_t info_len,
                                        uint8_t *out, size_t len);

/* Encap(pkR) (RFC 9180 section 4.1) with the ephemeral key eph, or a
 * fresh one when eph is NULL: shared_secret (KL_HPKE_HASH_LEN bytes) and
 * enc (cap >= kl_hpke_pk_len(kem)). */
KL_WUR kl_status kl_hpke_encap(uint16_t kem, EVP_PKEY *eph, const uint8_t *pkr,
                               size_t pkr_len, uint8_t *shared_secret,
                               uint8_t *enc, size_t enc_cap, size_t *enc_len);
/* Decap(enc, skR): shared_secret (KL_HPKE_HASH_LEN bytes). */
KL_WUR kl_status kl_hpke_decap(uint16_t kem, const uint8_t *enc, size_t enc_len,
                               EVP_PKEY *skr, uint8_t *shared_secret);

#endif
