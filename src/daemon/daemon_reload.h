/* SPDX-License-Identifier: Apache-2.0 */
/* Private to the daemon: reloading keys, the auth certificate and the CA
 * from the configuration, re-read. */
#ifndef KL_DAEMON_RELOAD_H
#define KL_DAEMON_RELOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon/daemon.h"
#include "engine/server.h"

typedef struct kl_reloader kl_reloader;

/* cfg becomes the reloader's (even on failure); keys is the store the
 * server started with (the server owns it). */
kl_reloader *kl_reloader_new(kl_server *srv, kl_config *cfg, int argc,
                             char **argv, const kl_keystore *keys);
void kl_reloader_free(kl_reloader *r);
/* The router to re-read on reload and the metrics to tell the outcome
 * (daemon_ext.h); not owned. */
struct kl_daemon_ext;
void kl_reloader_set_ext(kl_reloader *r, struct kl_daemon_ext *x);

/* Re-reads the configuration (same flags, environment, file), warns about
 * options that need a restart, builds a new key store (a key that fails
 * is reported and skipped) and, if the certificate files pass the checks,
 * a new TLS context, and swaps them into the server (a TLS context equal
 * to the serving one is dropped instead, so that sessions resume across
 * the reload). Tells systemd RELOADING=1, then READY=1. why: for the log. */
void kl_reloader_run(kl_reloader *r, const char *why);

/* The inotify descriptor to poll (-1: none), and whether its pending
 * events are a change worth a reload (drains them). */
int kl_reloader_watch_fd(const kl_reloader *r);
bool kl_reloader_changed(kl_reloader *r);
uint64_t kl_reloader_watch_delay(const kl_reloader *r);

#endif
