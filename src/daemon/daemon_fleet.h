/* SPDX-License-Identifier: Apache-2.0 */
/* Private to the daemon: the fleet (docs/FLEET.md) - this server's
 * registration and the directory feeding the router - from the fleet_*
 * options. Called from daemon_ext.c at the points its header lists:
 *   kl_dfleet_check (--check, and before a start)
 *   kl_dfleet_start (after the router is made, before the server serves)
 *   kl_dfleet_scrape (each /metrics scrape)
 *   kl_dfleet_draining (SIGTERM: the record says draining)
 *   kl_dfleet_stop (before the router is freed: the lease is revoked, the
 *   record goes). */
#ifndef KL_DAEMON_FLEET_H
#define KL_DAEMON_FLEET_H

#include <stdbool.h>

#include "config/config.h"
#include "core/log.h"
#include "metrics/metrics.h"
#include "router/router.h"

typedef struct kl_dfleet kl_dfleet;

/* fleet_etcd_endpoints is set. */
bool kl_dfleet_configured(const kl_config *cfg);
/* The router takes its tables from the directory: a fleet, no
 * router_table, and this server either not registered or of role egress
 * or router (a keys server forwards nothing but its sealed keys held
 * elsewhere: below). */
bool kl_dfleet_routes(const kl_config *cfg);
/* A registered "keys" server with sealing_key and no router_table: it
 * forwards only its sealed keys held elsewhere, to the servers whose
 * published sealing attributes satisfy their policies, read from the
 * directory's records (docs/FLEET.md "Sealed keys"). */
bool kl_dfleet_routes_sealed(const kl_config *cfg);
/* Checks the fleet options (endpoints, TLS files, this server's record);
 * each problem is one log line naming the option and the fix, counted in
 * p. */
void kl_dfleet_check(const kl_config *cfg, kl_problems *p);
/* Starts registration (fleet_name set) and, with router non-NULL and no
 * router_table, the directory feeding it. NULL with *ok true: no fleet;
 * *ok false: the options are wrong (logged), keylessd does not start. */
kl_dfleet *kl_dfleet_start(const kl_config *cfg, kl_router *router, bool *ok);
void kl_dfleet_scrape(kl_dfleet *f, kl_metrics *m);
/* The health summary in this server's record after a start or a reload:
 * degraded when a keys server holds no key or the reload had a problem,
 * ok otherwise (draining, once set, stays). */
void kl_dfleet_health(kl_dfleet *f, bool ok, size_t nkeys);
void kl_dfleet_draining(kl_dfleet *f);
/* How long a registered server keeps serving after kl_dfleet_draining
 * (fleet_drain_delay; 0 when it does not register). */
uint64_t kl_dfleet_drain_delay(const kl_dfleet *f);
void kl_dfleet_stop(kl_dfleet *f);

#endif
