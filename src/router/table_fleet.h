/* SPDX-License-Identifier: Apache-2.0 */
/* A routing table from the fleet directory's view (fleet/directory.h;
 * docs/FLEET.md "What a router holds"). The table has two layers (table.h):
 * a key index shared while the key sets stay the same, and the membership,
 * rebuilt from the server records on every change. Only servers of role
 * "keys" become remotes; self (this server's own name, may be NULL) is
 * left out so a router never forwards to itself. */
#ifndef KL_ROUTER_TABLE_FLEET_H
#define KL_ROUTER_TABLE_FLEET_H

#include "fleet/directory.h"
#include "router/table.h"

/* The key index of the last build and the revisions of the set metas it
 * was built from; one per directory, used by one thread. */
typedef struct kl_rt_fleet_cache {
    kl_rt_table *idx; /* a reference (refs) */
    int64_t *revs;
} kl_rt_fleet_cache;

void kl_rt_fleet_cache_clear(kl_rt_fleet_cache *c);

/* Builds the table for v, reusing the cache's key index when no set's meta
 * changed. For kl_router_install_table. */
KL_WUR kl_status kl_rt_table_from_fleet(const kl_fleet_view *v,
                                        const char *self,
                                        kl_rt_fleet_cache *cache,
                                        kl_rt_table **out, char *err,
                                        size_t errlen);

/* The table of a "keys" server that routes only its sealed keys held
 * elsewhere (docs/FLEET.md "Sealed keys"): every other "keys" server that
 * publishes a sealing key, with its sealing attributes, connected on
 * demand (kl_rt_server.on_demand); no key set. */
KL_WUR kl_status kl_rt_table_from_fleet_sealed(const kl_fleet_view *v,
                                               const char *self,
                                               kl_rt_table **out, char *err,
                                               size_t errlen);

/* The directory feeding a router: a kl_fleet_dir whose views become
 * tables (kl_rt_table_from_fleet) installed by kl_router_install_table.
 * The router must have no table file. A view whose table cannot be built
 * (no memory) is logged and the last table stays. sealed_only: the
 * directory's records only, tables by kl_rt_table_from_fleet_sealed. */
typedef struct kl_rt_fleet_feed kl_rt_fleet_feed;
struct kl_router;
KL_WUR kl_status kl_rt_fleet_feed_start(struct kl_router *r,
                                        const kl_fleet_dir_opts *o,
                                        const char *self, bool sealed_only,
                                        kl_rt_fleet_feed **out, char *err,
                                        size_t errlen);
void kl_rt_fleet_feed_stop(kl_rt_fleet_feed *f);
/* Tables installed so far, and the directory's status. */
uint64_t kl_rt_fleet_feed_installs(kl_rt_fleet_feed *f);
void kl_rt_fleet_feed_status(kl_rt_fleet_feed *f, kl_fleet_dir_status *s);

#endif
