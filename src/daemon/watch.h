/* SPDX-License-Identifier: Apache-2.0 */
/* Watching key directories (inotify) so that a key copied in or removed
 * is served or dropped without a SIGHUP. Private to the daemon. */
#ifndef KL_DAEMON_WATCH_H
#define KL_DAEMON_WATCH_H

#include <stdbool.h>

#include "config/config.h"

typedef struct kl_watcher kl_watcher;

/* NULL when inotify is unavailable (logged; SIGHUP still works). */
kl_watcher *kl_watcher_new(void);
void kl_watcher_free(kl_watcher *w);
/* The descriptor to poll for reading. */
int kl_watcher_fd(const kl_watcher *w);
/* Replaces the watches by the directory stores of cfg and their
 * subdirectories (none when cfg->watch_key_dirs is false). */
void kl_watcher_set(kl_watcher *w, const kl_config *cfg);
/* Reads the pending events; true when one of them is a change that a
 * reload could see (a file added, removed, renamed, written or chmod'ed). */
bool kl_watcher_drain(kl_watcher *w);
/* How many directories are watched. */
int kl_watcher_count(const kl_watcher *w);

#endif
