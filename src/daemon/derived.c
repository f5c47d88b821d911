/* SPDX-License-Identifier: Apache-2.0 */
/* What the daemon hands each module: its options struct from the
 * settings, with the values that come from more than one option worked out
 * here and nowhere else (settings.h). */
#include <unistd.h>

#include "daemon/settings.h"

kl_server_opts kl_settings_server(const kl_settings *s)
{
    kl_server_opts o = s->server;
    /* sign_timeout (the reference's) is the request deadline unless
     * max_queue_time says otherwise (docs/OPERATIONS.md, the options). */
    if (!o.max_queue_time_ns)
        o.max_queue_time_ns = s->cfg.sign_timeout_ns;
    return o;
}

static const char *or_default(const char *v, const char *d)
{
    return v && *v ? v : d;
}

kl_router_opts kl_settings_router(const kl_settings *s)
{
    kl_router_opts o = s->router;
    o.cert_file = or_default(o.cert_file, s->cfg.auth_cert);
    o.key_file = or_default(o.key_file, s->cfg.auth_key);
    o.ca_file = or_default(o.ca_file, s->cfg.cloudflare_ca_cert);
    o.server_name = or_default(o.server_name, NULL);
    o.dns_server = or_default(o.dns_server, NULL);
    return o;
}

kl_tracer_opts kl_settings_tracer(const kl_settings *s)
{
    kl_tracer_opts o = s->tracing;
    o.endpoint = s->cfg.tracing_endpoint;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    /* docs/TRACING.md: one span ring per shard (shards 0: one per CPU) */
    o.rings = s->server.shards > 0 ? (unsigned)s->server.shards
              : ncpu > 0           ? (unsigned)ncpu
                                   : 1;
    return o;
}

kl_metrics_http_opts kl_settings_metrics_http(const kl_settings *s)
{
    kl_metrics_http_opts o = s->metrics_http;
    o.address = or_default(o.address, s->server.listen_address);
    return o;
}
