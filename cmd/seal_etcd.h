/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-seal's recipients from the fleet directory (docs/SEALING.md
 * "The fleet directory instead of a fleet file"): the server records in
 * etcd that publish a sealing key, as the nodes of a fleet file. */
#ifndef KL_CMD_SEAL_ETCD_H
#define KL_CMD_SEAL_ETCD_H

#include <stddef.h>

#include "seal/fleetfile.h"

typedef struct seal_etcd_opts {
    const char *urls; /* comma-separated etcd client URLs */
    const char *ca, *cert, *key;
    const char *prefix;               /* NULL: /keyless/ */
    const char *user, *password_file; /* etcd password auth (NULL: none) */
} seal_etcd_opts;

/* Reads <prefix>dir/servers/ at one revision (paged) into a fleet file
 * with one node per record that publishes a sealing key (its name, its
 * sealing attributes, its key; no escrow, nothing revoked). Records
 * without a sealing key, or whose key or name a sealed file cannot carry,
 * are named on stderr and left out. 0, or 1 (failure) or 2 (usage) with
 * err set. */
int seal_fleet_from_etcd(const seal_etcd_opts *o, kl_fleetfile **out, char *err,
                         size_t errlen);

#endif
