/* SPDX-License-Identifier: Apache-2.0 */
/* Inside the directory (directory.h): its copy of <prefix>dir/
 * (directory_state.c), changed by the snapshot and the watch
 * (directory.c). The directory's thread only. */
#ifndef KL_FLEET_DIRECTORY_INT_H
#define KL_FLEET_DIRECTORY_INT_H

#include "fleet/directory.h"

typedef struct kl_fdir_set {
    char name[KL_FLEET_NAME_MAX + 1]; /* first: the arrays sort by it */
    kl_fleet_set_meta meta;
    uint8_t *skis;
    int64_t mod_revision;
} kl_fdir_set;

typedef struct kl_fdir_state {
    kl_fleet_server *srv; /* sorted by name (its first field) */
    size_t nsrv, srv_cap;
    kl_fdir_set *sets;
    size_t nsets, sets_cap;
    kl_fleet_regions *regions; /* dir/regions; NULL: none */
} kl_fdir_state;

void kl_fdir_state_clear(kl_fdir_state *s);
/* A record written: parsed, kept (a bad one removes the server, logged).
 * false: nothing changed or no memory. */
bool kl_fdir_server_put(kl_fdir_state *s, const char *name, const uint8_t *v,
                        size_t len);
bool kl_fdir_server_del(kl_fdir_state *s, const char *name);
bool kl_fdir_set_del(kl_fdir_state *s, const char *name);
/* A set meta written: when it names SKIs not held (in s, or in old, a
 * snapshot's previous state; may be NULL), its chunks are read through c
 * and checked; a bad generation keeps the previous one (logged, KL_OK);
 * an etcd failure is returned (the caller reads again). */
kl_status kl_fdir_set_put(kl_fdir_state *s, const kl_fdir_state *old,
                          kl_etcd *c, const char *prefix, const char *name,
                          const uint8_t *v, size_t len, int64_t mod_revision);
/* One key of dir/ written (del: deleted); *changed set when the view
 * changed. */
kl_status kl_fdir_apply(kl_fdir_state *s, const kl_fdir_state *old, kl_etcd *c,
                        const char *prefix, const uint8_t *key, size_t key_len,
                        const uint8_t *v, size_t len, bool del,
                        int64_t mod_revision, bool *changed);

#endif
