/* SPDX-License-Identifier: Apache-2.0 */
/* keylessd as a process (cmd/keylessd.c is a thin main over this): the
 * modes (--check, --keystore-debug, --output-config, --config-only, ...),
 * startup with the certificate checks, serving, and reload on SIGHUP or a
 * change in a key directory. */
#ifndef KL_DAEMON_H
#define KL_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "config/config.h"
#include "core/log.h"
#include "daemon/settings.h"
#include "keys/keystore.h"
#include "tls/tls.h"

/* The whole program: returns the exit status. */
int kl_daemon_main(int argc, char **argv, const char *version);

/* Loads openssl_providers (docs/OPERATIONS.md "Accelerators and provider
 * keys") before any key; false, each failure logged, when one cannot be. */
bool kl_daemon_load_providers(const kl_config *cfg);
/* Builds the key store the configuration names. tolerant (reload,
 * --check, --keystore-debug): a key or store that fails is reported and
 * skipped; otherwise the first failure stops the load (NULL). Key
 * directories holding certificates are reported (warnings). */
kl_keystore *kl_daemon_load_keys(const kl_config *cfg, bool tolerant,
                                 kl_problems *p);
/* A reload's load: as tolerant as kl_daemon_load_keys(cfg, true, p), but
 * NULL - keep every key loaded before - when sealing_key is set and cannot
 * be opened, instead of a store where every sealed file is held elsewhere
 * (docs/SEALING.md "keylessd and sealed keys"). */
kl_keystore *kl_daemon_reload_keys(const kl_config *cfg, kl_problems *p);
/* Explains what is wrong with auth_cert, auth_key and cloudflare_ca_cert
 * (tls/certcheck.h), then builds the TLS context; NULL when either failed
 * (every problem logged). */
kl_tls_ctx *kl_daemon_load_tls(const kl_config *cfg, kl_problems *p);

/* --check: configuration, certificates, every key, the access lists, the
 * routing table and the router's certificate - everything a start would
 * refuse or warn about, all in one run; 0 or 1. earlier: the error and
 * warning lines already printed (configuration values, process limits),
 * counted in the summary. */
int kl_daemon_check(const kl_config *cfg, kl_problems earlier);
/* --keystore-debug: every key as "SKI TYPE FILE" lines on out; 0 or 1. */
int kl_daemon_keystore_debug(const kl_config *cfg, FILE *out);

/* Serves until SIGTERM/SIGINT (signals must be blocked in every thread
 * already); reloads on SIGHUP and key directory changes. Takes ownership
 * of cfg, keys and tls. argv is kept for re-reading the configuration. */
int kl_daemon_serve(kl_config *cfg, int argc, char **argv, kl_keystore *keys,
                    kl_tls_ctx *tls);

#endif
