/* SPDX-License-Identifier: Apache-2.0 */
/* Private to the daemon: its optional parts beside the serving core - the
 * geo router (docs/ROUTING.md) and the metrics endpoint with
 * /health and /ready (docs/METRICS.md). Kept apart from
 * daemon_run.c so that each can be read (and changed) on its own.
 *
 * Order (daemon_run.c):
 *   kl_ext_start (metrics object, router: before the server, which takes
 *   both) -> kl_server_new -> kl_server_start -> kl_ext_serve (HTTP
 *   endpoint, certificate series) -> ... -> kl_ext_draining (/ready says
 *   503) -> kl_server_shutdown + kl_server_wait -> kl_ext_stop (HTTP
 *   endpoint, then the router: its last answers go to the shards' queues)
 *   -> kl_pool_free -> kl_server_free -> kl_ext_free (metrics). */
#ifndef KL_DAEMON_EXT_H
#define KL_DAEMON_EXT_H

#include <stdatomic.h>
#include <stdbool.h>

#include "config/config.h"
#include "crypto/pool.h"
#include "metrics/metrics.h"
#include "metrics/trace.h"
#include "router/router.h"
#include "daemon/daemon.h"
#include "engine/server.h"

typedef struct kl_daemon_ext {
    kl_router *router;     /* NULL: router_table unset */
    kl_metrics *metrics;   /* NULL: metrics_port 0 */
    kl_metrics_http *http; /* NULL: not serving (off, or the bind failed) */
    kl_pool *pool;         /* for the queue depths at scrape */
    kl_tracer *tracer;     /* NULL: tracing_enabled false */
    atomic_bool listening, draining;
    _Atomic uint64_t keys; /* keys loaded, for /ready */
    /* the certificate files exported as certificate_expiration_* */
    char *cert_src[3];
    bool identities;         /* metrics_identities at start (restart-only) */
    struct kl_dfleet *fleet; /* NULL: no fleet (daemon_fleet.h) */
    bool router_has_file;    /* router_table: SIGHUP re-reads it */
    /* the server, for the sealed keys no remote could take (set once it
     * serves; read at scrape) */
    _Atomic(kl_server *) srv;
} kl_daemon_ext;

/* Creates the metrics object (metrics_port set), the router (router_table
 * set, or a fleet routing from its directory) and the fleet's
 * registration and directory (daemon_fleet.h). false when the router or
 * the fleet cannot start (the reason is logged): keylessd then does not
 * start. */
bool kl_ext_start(kl_daemon_ext *x, const kl_config *cfg);
/* With router_table set: the table as a start loads it (dns: names
 * resolved), and, when it names remotes, the certificate the router
 * presents to them (tls/certcheck.h, kl_certcheck_client). Each problem is
 * one log line, counted in p. kl_ext_start refuses to start on an error;
 * --check reports them. */
void kl_ext_check_router(const kl_config *cfg, kl_problems *p);
/* The server listens and its shards run: the HTTP endpoint (a bind
 * failure is logged and keylessd serves anyway, as the reference does),
 * the configured certificates' expiry series, the keys gauge. */
void kl_ext_serve(kl_daemon_ext *x, const kl_config *cfg, kl_pool *pool,
                  size_t nkeys);
/* A reload ran: re-reads the routing table (SIGHUP) and records the
 * outcome. ok: the configuration, certificates and keys were taken
 * without a problem. Returns false when the routing table was refused. */
bool kl_ext_reload_router(kl_daemon_ext *x);
void kl_ext_reloaded(kl_daemon_ext *x, const kl_config *cfg, bool ok,
                     size_t nkeys);
/* A key load's keys held elsewhere (start, reload): the router prepares
 * their policies' eligible remotes (router.h). Nothing without a router. */
void kl_ext_sealed_keys(kl_daemon_ext *x, const kl_keystore *ks);
/* SIGTERM: /ready answers 503 "draining" from now on. */
void kl_ext_draining(kl_daemon_ext *x);
/* After kl_ext_draining, while the server still serves: waits the fleet's
 * drain delay (docs/FLEET.md "Registration") so that routers stop
 * choosing this server before it closes; a SIGTERM or SIGINT read from
 * sfd meanwhile ends the wait at once. No fleet registration: returns at
 * once. */
void kl_ext_drain_wait(kl_daemon_ext *x, int sfd);
/* After kl_server_wait: stops the HTTP endpoint, then the router (which
 * answers what it still has through the shards' completion queues). */
void kl_ext_stop(kl_daemon_ext *x);
/* After kl_server_free. */
void kl_ext_free(kl_daemon_ext *x);

#endif
