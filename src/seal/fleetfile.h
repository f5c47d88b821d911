/* SPDX-License-Identifier: Apache-2.0 */
/* The fleet file: the servers a key may be sealed to, with their
 * attributes and sealing public keys, as the operator distributes them
 * while there is no fleet directory (docs/SEALING.md "The fleet file"):
 *
 *   nodes:
 *     - name: eu-west-1a
 *       attributes: {region: eu-west, country: ie, dc: dub-1,
 *                    tier: [edge, core]}
 *       sealing_key: |            # PEM public key (X25519 or P-256), or
 *         -----BEGIN PUBLIC KEY-----
 *         ...
 *         -----END PUBLIC KEY-----
 *     - name: eu-central-1
 *       attributes: {region: eu-central}
 *       sealing_key: Kx9...=      # base64 of the raw key: 32 bytes X25519,
 *                                 # 65 bytes (04 || X || Y) P-256
 *       revoked: true             # never a recipient again
 *   escrow:                       # optional: recipients of every file
 *     - name: escrow-vault
 *       sealing_key: ...
 *
 * Every error names the file and line, what is wrong and the fix.
 * Unknown fields are errors (a misspelt `revoked` must not leave a node
 * in). */
#ifndef KL_SEAL_FLEETFILE_H
#define KL_SEAL_FLEETFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "seal/sealed.h"

#define KL_FLEETFILE_MAX_ATTRS 64 /* attribute values per node */
#define KL_FLEETFILE_MAX_SIZE (64u << 20)

typedef struct kl_fleetfile_node {
    char name[KL_SEALED_MAX_NAME + 1];
    kl_policy_attr *attrs; /* owned strings; several values per name */
    size_t n_attrs;
    uint16_t kem; /* KL_HPKE_KEM_X25519 or KL_HPKE_KEM_P256 */
    uint8_t pk[KL_HPKE_MAX_ENC];
    size_t pk_len;
    bool revoked;
    unsigned long line; /* where it is written, for messages */
} kl_fleetfile_node;

typedef struct kl_fleetfile {
    kl_fleetfile_node *nodes;
    size_t n_nodes;
    kl_fleetfile_node *escrow; /* no attributes, never revoked */
    size_t n_escrow;
} kl_fleetfile;

/* Parses text (len bytes; path only names it in errors). Errors are
 * KL_E_CONFIG with "PATH:LINE: what; fix" in err, or KL_E_NOMEM. */
KL_WUR kl_status kl_fleetfile_parse(const char *path, const uint8_t *text,
                                    size_t len, kl_fleetfile **out, char *err,
                                    size_t errlen);
/* Reads and parses the file at path. */
KL_WUR kl_status kl_fleetfile_load(const char *path, kl_fleetfile **out,
                                   char *err, size_t errlen);
void kl_fleetfile_free(kl_fleetfile *f);

/* The recipients for a policy: every node that is not revoked and whose
 * attributes satisfy it, then every escrow recipient. *to is malloc'd
 * and points into f (valid while f is). *n_nodes counts the nodes
 * selected; KL_E_NOT_FOUND when that is zero (a policy that selects
 * nobody seals a key no server can open). */
KL_WUR kl_status kl_fleetfile_select(const kl_fleetfile *f, const kl_policy *p,
                                     kl_sealed_to **to, size_t *n_to,
                                     size_t *n_nodes);

/* Parses a sealing public key as the file writes it (PEM or base64 of the
 * raw key) into kem and pk; err says what is wrong. */
KL_WUR kl_status kl_fleetfile_key(const char *text, uint16_t *kem,
                                  uint8_t pk[KL_HPKE_MAX_ENC], size_t *pk_len,
                                  char *err, size_t errlen);

#endif
