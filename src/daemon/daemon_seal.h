/* SPDX-License-Identifier: Apache-2.0 */
/* This server's side of sealed keys (docs/SEALING.md "keylessd and
 * sealed keys"): the sealing_key and sealing_attributes options turned
 * into what the key store needs, read again at every key load. */
#ifndef KL_DAEMON_DAEMON_SEAL_H
#define KL_DAEMON_DAEMON_SEAL_H

#include <stdbool.h>

#include "config/config.h"
#include "keys/keystore.h"
#include "router/router.h"

#define KL_SEAL_MAX_ATTRS 64

typedef struct kl_daemon_seal {
    EVP_PKEY *key;
    char *text; /* sealing_attributes, cut into the pairs below */
    kl_policy_attr attrs[KL_SEAL_MAX_ATTRS];
    size_t n_attrs;
} kl_daemon_seal;

/* Reads the options into s and points ko at them. false after logging a
 * problem (naming the option, the file and the fix); ko then has no
 * sealing key, so every *.sealed file is held elsewhere. */
bool kl_daemon_seal_prepare(const kl_config *cfg, kl_daemon_seal *s,
                            kl_keystore_opts *ko);
void kl_daemon_seal_release(kl_daemon_seal *s);

/* The sealing policy language (seal/policy.h) for the router, which may
 * not include src/seal: a sealed key held elsewhere goes to a remote whose
 * attributes satisfy its policy (docs/SEALING.md). */
extern const kl_rt_policy_ops kl_daemon_policy_ops;

#endif
