/* SPDX-License-Identifier: Apache-2.0 */
/* The fleet directory as a router reads it (docs/FLEET.md "Routing from
 * the directory"): a thread that reads <prefix>dir/ as one snapshot, then
 * watches it from the snapshot's revision + 1, and hands a view of the
 * whole directory (every valid server record and every key set with its
 * verified SKIs) to a callback, debounced, after each change.
 *
 * - A disconnect resumes the watch from its last revision; a compacted
 *   revision makes a full snapshot read (paged, at one revision).
 * - A set's SKIs are read (skis/<set>/<gen>/) when its meta names a new
 *   generation, and checked against the meta; a generation that does not
 *   check keeps the previous one's SKIs in use.
 * - Never fails closed: while etcd is unreachable nothing is handed over
 *   (the last table stays); a directory with no valid server record is
 *   not handed over once a non-empty one was (logged).
 * - In sync: the watch is connected and a liveness read (every
 *   sync_check_ms) answered; kl_fleet_dir_sync_age_ms says for how long
 *   it has not been. One log line per transition. */
#ifndef KL_FLEET_DIRECTORY_H
#define KL_FLEET_DIRECTORY_H

#include <stdint.h>

#include "core/status.h"
#include "fleet/etcd.h"
#include "fleet/record.h"

typedef struct kl_fleet_set {
    char name[KL_FLEET_NAME_MAX + 1];
    kl_fleet_set_meta meta;
    const uint8_t *skis;  /* meta.keys x 20 bytes, sorted */
    int64_t mod_revision; /* of its meta: changes whenever the meta does */
} kl_fleet_set;

/* Valid during the callback only. */
typedef struct kl_fleet_view {
    const kl_fleet_server *servers; /* sorted by name */
    size_t nservers;
    const kl_fleet_set *sets; /* sorted by name */
    size_t nsets;
    const kl_fleet_regions *regions; /* dir/regions; NULL: none */
    int64_t revision;                /* the etcd revision the view is at */
} kl_fleet_view;

/* Runs on the directory's thread. */
typedef void (*kl_fleet_view_fn)(void *arg, const kl_fleet_view *v);

typedef struct kl_fleet_dir_opts {
    kl_etcd_opts etcd;
    const char *prefix; /* NULL: "/keyless/" */
    int debounce_ms;    /* 0: 100 */
    int sync_check_ms;  /* liveness read; 0: 2000 */
    kl_fleet_view_fn fn;
    void *arg;
    /* Server records and region codes only: key sets (and their SKIs) are
     * not read, views have none - a "keys" server that routes only its
     * sealed keys held elsewhere (docs/FLEET.md "Sealed keys"). */
    bool records_only;
} kl_fleet_dir_opts;

typedef struct kl_fleet_dir kl_fleet_dir;

/* Checks the options and starts the thread (the first read happens there:
 * an unreachable etcd does not stop startup). */
kl_status kl_fleet_dir_start(const kl_fleet_dir_opts *o, kl_fleet_dir **out,
                             char *err, size_t errlen) KL_WUR;
void kl_fleet_dir_stop(kl_fleet_dir *d);

typedef struct kl_fleet_dir_status {
    bool in_sync;
    uint64_t sync_age_ms; /* 0 while in sync; since start before the first */
    int64_t revision;     /* the last revision seen */
    uint64_t views;       /* views handed over */
    uint64_t snapshots;   /* full reads (start, compaction) */
    size_t nservers, nsets;
} kl_fleet_dir_status;
void kl_fleet_dir_status_get(kl_fleet_dir *d, kl_fleet_dir_status *s);

#endif
