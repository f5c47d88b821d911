/* SPDX-License-Identifier: Apache-2.0 */
/* keylessd's configuration: the loader's kl_config (config/config.h: the
 * process's own options and the loading state) followed by each module's
 * options struct, which the module defines and gives its defaults. The
 * option table (options.c, options_router.inc) points into this struct,
 * so an option read from the file, the environment or a flag lands in the
 * module's own field and the daemon hands the module its struct whole
 * (docs/DESIGN.md, "The map": where an option travels; "Adding an
 * option"). */
#ifndef KL_DAEMON_SETTINGS_H
#define KL_DAEMON_SETTINGS_H

#include <assert.h>
#include <stddef.h>

#include "config/config.h"
#include "crypto/pool.h"
#include "engine/server.h"
#include "metrics/metrics.h"
#include "metrics/trace.h"
#include "router/router.h"

typedef struct kl_settings {
    kl_config cfg;         /* first: the loader works on it (config/config.h) */
    kl_server_opts server; /* the engine (engine/server.h) */
    kl_pool_opts pool;     /* the crypto workers (crypto/pool.h) */
    kl_router_opts router; /* geo routing (router/router.h); table_file
                              unset: none */
    kl_tracer_opts tracing; /* request tracing (metrics/trace.h), when
                               cfg.tracing_enabled */
    /* /metrics, /health, /ready (metrics/metrics.h); port 0: none */
    kl_metrics_http_opts metrics_http;
} kl_settings;

/* What each module is handed: its struct from the settings, with the
 * values derived from several options (derived.c, the one place for
 * them). The objects a module works with (contexts, stores, the pool)
 * are the caller's to set. */

/* The engine's options; max_queue_time 0 takes sign_timeout. */
kl_server_opts kl_settings_server(const kl_settings *s);

/* The router's options: its identity toward the remotes defaults to the
 * server's own (auth_cert, auth_key) and the remotes must chain to the CA
 * that signs clients here (cloudflare_ca_cert); an empty server_name or
 * dns_server is unset. */
kl_router_opts kl_settings_router(const kl_settings *s);

/* The tracer's options: the endpoint from tracing_address (config/derive.c
 * maps the reference's Jaeger address), one ring per shard. */
kl_tracer_opts kl_settings_tracer(const kl_settings *s);

/* The metrics endpoint's options: metrics_address "" is listen_address.
 * The callbacks are the caller's to set. */
kl_metrics_http_opts kl_settings_metrics_http(const kl_settings *s);

/* keylessd's option table, over kl_settings. */
extern const kl_opt_table kl_daemon_options;

/* A configuration with every default, read by kl_config_load; free it with
 * kl_config_free. NULL when out of memory. */
static inline kl_config *kl_daemon_config_new(void)
{
    return kl_config_new(&kl_daemon_options);
}

/* The whole configuration around cfg (made by kl_daemon_config_new). */
static inline kl_settings *kl_settings_of(kl_config *cfg)
{
    assert(cfg->table == &kl_daemon_options);
    return (kl_settings *)cfg;
}
static inline const kl_settings *kl_settings_of_c(const kl_config *cfg)
{
    assert(cfg->table == &kl_daemon_options);
    return (const kl_settings *)cfg;
}

#endif
