/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's geo router and metrics endpoint (daemon_ext.h has the
 * order). */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "core/log.h"
#include "core/time.h"
#include "router/dns.h"
#include "router/table.h"
#include "daemon/daemon.h"
#include "daemon/daemon_ext.h"
#include "daemon/daemon_fleet.h"
#include "daemon/daemon_seal.h"
#include "tls/certcheck.h"

/* The router's options as the configuration has them (unset: NULL). */
static const kl_router_opts *router_cfg(const kl_config *cfg)
{
    return &kl_settings_of_c(cfg)->router;
}

/* --check resolves a table's dns: names as the router would. */
static size_t check_resolve(const char *host, char (*out)[64], size_t max,
                            void *arg)
{
    kl_router_opts o = kl_settings_router(arg);
    uint64_t ms = o.connect_timeout_ns / KL_NS_PER_MS;
    uint32_t ttl;
    return kl_rt_dns_resolve(o.dns_server, ms > INT32_MAX ? INT32_MAX : (int)ms,
                             host, out, max, &ttl);
}

static void count_report(void *arg, int level, const char *msg)
{
    kl_problems_count(arg, level);
    kl_log(level, "%s", msg);
}

/* The same, an error made a warning: for a keys server whose router only
 * forwards sealed keys held elsewhere, a router certificate the remotes
 * would refuse costs those keys, not the server. */
static void warn_report(void *arg, int level, const char *msg)
{
    if (level < KL_LOG_WARN) {
        count_report(arg, level, msg);
        return;
    }
    kl_problems_count(arg, KL_LOG_WARN);
    kl_log(KL_LOG_WARN,
           "%s (sealed keys held elsewhere are answered key not found: this "
           "keys server starts without forwarding them)",
           msg);
}

/* The router's client certificate toward remotes (a table naming
 * remotes, or the fleet directory's). */
static void check_router_cert(const kl_config *cfg, kl_problems *p,
                              bool warn_only)
{
    const kl_router_opts *rc = router_cfg(cfg);
    /* The router's identity toward the remotes must be a TLS client
     * certificate (docs/ROUTING.md, "The router's certificate"). */
    kl_router_opts o = kl_settings_router(kl_settings_of_c(cfg));
    bool own = rc->cert_file && *rc->cert_file;
    kl_client_certcheck cc = {
        .cert_option = own ? "router_cert" : "auth_cert",
        .cert_file = o.cert_file,
        .cert_note = own ? NULL
                         : " (what the router presents to remote key servers "
                           "while router_cert is unset)",
        .key_option = rc->key_file && *rc->key_file ? "router_key" : "auth_key",
        /* auth_key against auth_cert is checked with the identity */
        .key_file = own ? o.key_file : NULL,
        .fix = own ? "Issue the router a certificate with extendedKeyUsage "
                     "clientAuth (keyUsage digitalSignature) from a CA the "
                     "remotes trust, and set router_cert and router_key to it"
                   : "Issue the router a certificate with extendedKeyUsage "
                     "clientAuth (keyUsage digitalSignature) from a CA the "
                     "remotes trust and set router_cert and router_key to "
                     "it, or reissue auth_cert with both serverAuth and "
                     "clientAuth",
        .now = cfg->has_current_time ? cfg->current_time_unix : 0,
        .report = warn_only ? warn_report : count_report,
        .arg = p,
    };
    kl_certcheck_client(&cc);
}

void kl_ext_check_router(const kl_config *cfg, kl_problems *p)
{
    kl_dfleet_check(cfg, p);
    if (kl_dfleet_routes(cfg))
        check_router_cert(cfg, p, false); /* remotes come and go: now */
    else if (kl_dfleet_routes_sealed(cfg))
        check_router_cert(cfg, p, true);
    const kl_router_opts *rc = router_cfg(cfg);
    if (!rc->table_file || !*rc->table_file)
        return;
    kl_rt_table *t = NULL;
    char err[1024];
    if (kl_rt_table_load(rc->table_file, check_resolve,
                         (void *)kl_settings_of_c(cfg), &t, err,
                         sizeof err) != KL_OK) {
        kl_error("router_table: %s", err);
        p->errors++;
        return;
    }
    size_t remotes = t->nservers;
    kl_rt_table_free(t);
    if (remotes == 0)
        return; /* no remote: the router presents no certificate */
    check_router_cert(cfg, p, false);
}

/* docs/TRACING.md: one span ring per shard. A tracer that
 * cannot start is reported and keylessd serves without it. */
static void start_tracing(kl_daemon_ext *x, const kl_config *cfg)
{
    kl_tracer_opts to = kl_settings_tracer(kl_settings_of_c(cfg));
    char err[512];
    if (kl_tracer_new(&to, &x->tracer, err, sizeof err) != KL_OK) {
        kl_error("%s; serving without tracing", err);
        x->tracer = NULL;
        return;
    }
    kl_info("tracing: OTLP/HTTP to %s, sample rate %g (requests with a "
            "span context follow its sampled flag)",
            to.endpoint, to.sample_rate);
}

/* Registration, and the directory when router is set (daemon_fleet.h). */
static bool start_fleet(kl_daemon_ext *x, const kl_config *cfg,
                        kl_router *router)
{
    bool ok;
    x->fleet = kl_dfleet_start(cfg, router, &ok);
    return ok;
}

/* A router without a table file, its tables from the directory, then the
 * fleet (sealed keys held elsewhere route through kl_daemon_policy_ops). */
static bool start_fleet_with_router(kl_daemon_ext *x, const kl_config *cfg)
{
    kl_router_opts o = kl_settings_router(kl_settings_of_c(cfg));
    o.table_file = NULL;
    o.tracer = x->tracer;
    o.policy_ops = &kl_daemon_policy_ops;
    char err[1024];
    if (kl_router_new(&o, &x->router, err, sizeof err) != KL_OK) {
        kl_error("fleet: router: %s; not starting", err);
        x->router = NULL;
        return false;
    }
    return start_fleet(x, cfg, x->router);
}

/* A fleet without router_table: the router's tables come from the
 * directory (docs/FLEET.md "Routing from the directory"). */
static bool start_fleet_router(kl_daemon_ext *x, const kl_config *cfg)
{
    kl_problems p = {0};
    check_router_cert(cfg, &p, false); /* fleet options: kl_dfleet_start */
    if (p.errors) {
        kl_error("not starting: fix the router's certificate, then check "
                 "with keylessd --check");
        return false;
    }
    return start_fleet_with_router(x, cfg);
}

/* A registered keys server with a sealing key: a router for its sealed
 * keys held elsewhere, fed by the directory's records (docs/FLEET.md
 * "Sealed keys"). A router certificate the remotes would refuse is a
 * warning: the server starts without the router. */
static bool start_fleet_sealed_router(kl_daemon_ext *x, const kl_config *cfg)
{
    kl_problems p = {0};
    check_router_cert(cfg, &p, true);
    if (p.errors || p.warnings)
        return start_fleet(x, cfg, NULL);
    return start_fleet_with_router(x, cfg);
}

bool kl_ext_start(kl_daemon_ext *x, const kl_config *cfg)
{
    memset(x, 0, sizeof *x);
    x->identities = cfg->metrics_identities;
    atomic_init(&x->listening, false);
    atomic_init(&x->draining, false);
    atomic_init(&x->keys, 0);
    if (kl_settings_of_c(cfg)->metrics_http.port > 0) {
        x->metrics = kl_metrics_new();
        if (!x->metrics)
            kl_error("metrics: out of memory; serving without them");
        else
            kl_metrics_set_identities(x->metrics, x->identities);
    }
    if (cfg->tracing_enabled)
        start_tracing(x, cfg);
    if (kl_dfleet_routes(cfg))
        return start_fleet_router(x, cfg);
    if (kl_dfleet_routes_sealed(cfg))
        return start_fleet_sealed_router(x, cfg);
    const kl_router_opts *rc = router_cfg(cfg);
    if (!rc->table_file || !*rc->table_file)
        return start_fleet(x, cfg, NULL);
    /* the table and the router's certificate, as --check reports them */
    kl_problems p = {0};
    kl_ext_check_router(cfg, &p);
    if (p.errors) {
        kl_error("not starting: fix the routing problems above, then check "
                 "with keylessd --check");
        return false;
    }
    kl_router_opts o = kl_settings_router(kl_settings_of_c(cfg));
    o.tracer = x->tracer;
    o.policy_ops = &kl_daemon_policy_ops; /* sealed keys held elsewhere */
    char err[1024];
    if (kl_router_new(&o, &x->router, err, sizeof err) != KL_OK) {
        kl_error("router_table: %s; not starting", err);
        x->router = NULL;
        return false;
    }
    x->router_has_file = true;
    kl_info("geo routing: table %s, hop limit %d, %d attempts per request",
            rc->table_file, rc->max_hops, rc->max_attempts);
    return start_fleet(x, cfg, NULL);
}

/* Every remote's figures (a fleet's table may hold thousands), in *got;
 * NULL with *got 0 when there are none or memory runs out. Free with
 * free(). Thread-safe. */
static kl_remote_stats *all_remotes(kl_daemon_ext *x, size_t *got)
{
    *got = 0;
    size_t cap = kl_router_remote_stats(x->router, NULL, 0) + 16;
    kl_remote_stats *st = malloc(cap * sizeof *st);
    if (!st)
        return NULL;
    size_t n = kl_router_remote_stats(x->router, st, cap);
    *got = n < cap ? n : cap; /* remotes added meanwhile: left out */
    return st;
}

/* How many of the routing table's remotes answer their pings (n: how many
 * it has); thread-safe. */
static size_t remotes_up(kl_daemon_ext *x, size_t *n)
{
    size_t got, up = 0;
    kl_remote_stats *st = all_remotes(x, &got);
    *n = 0;
    for (size_t i = 0; i < got; i++) {
        *n += st[i].in_table;
        up += st[i].up && st[i].in_table;
    }
    free(st);
    return up;
}

/* /ready: this server can serve (docs/METRICS.md, Readiness). It listens,
 * does not drain, and holds keys; the remotes of a routing table do not
 * count then (a signature for an SKI served here needs none of them; their
 * health is /remotes and keylessd_route_up). A pure egress keylessd
 * (routing only, no key) can serve while one remote answers, or when its
 * table names none. Runs on the HTTP thread: atomics and the router's
 * thread-safe calls only. */
static bool ready(void *arg, char *reason, size_t len)
{
    kl_daemon_ext *x = arg;
    if (atomic_load(&x->draining)) {
        snprintf(reason, len, "draining");
        return false;
    }
    if (!atomic_load(&x->listening)) {
        snprintf(reason, len, "not listening yet");
        return false;
    }
    if (atomic_load(&x->keys) > 0)
        return true;
    if (!x->router) {
        snprintf(reason, len, "keys not loaded");
        return false;
    }
    size_t n, up = remotes_up(x, &n);
    if (n > 0 && up == 0) {
        snprintf(reason, len,
                 "no key loaded and no healthy route: none of the %zu "
                 "remote key servers answers",
                 n);
        return false;
    }
    return true;
}

/* /remotes (docs/METRICS.md, docs/ROUTING.md): 200 while at least one
 * remote of the routing table answers its pings, else 503; the body says
 * how many and lists each (name, region, up or down, the moving average
 * of its round trips or "-" before the first; keyless-cli fleet --router
 * reads it). HTTP thread. */
static bool remotes(void *arg, char *out, size_t len)
{
    kl_daemon_ext *x = arg;
    size_t got, n = 0, up = 0;
    kl_remote_stats *st = all_remotes(x, &got);
    for (size_t i = 0; i < got; i++) {
        n += st[i].in_table;
        up += st[i].up && st[i].in_table;
    }
    int w = snprintf(out, len, "%zu of %zu remote key servers up\n", up, n);
    size_t at = w > 0 && (size_t)w < len ? (size_t)w : len;
    for (size_t i = 0; i < got && at < len; i++) {
        if (!st[i].in_table)
            continue;
        char lat[32] = "-";
        if (st[i].ewma_ms >= 0)
            snprintf(lat, sizeof lat, "%.3fms", st[i].ewma_ms);
        w = snprintf(out + at, len - at, "%s %s %s %s\n", st[i].name,
                     st[i].region, st[i].up ? "up" : "down", lat);
        at = w > 0 && (size_t)w < len - at ? at + (size_t)w : len;
    }
    free(st);
    return up > 0;
}

/* Sampled gauges, at the start of each scrape (HTTP thread). */
static void on_scrape(kl_metrics *m, void *arg)
{
    kl_daemon_ext *x = arg;
    _Static_assert(KL_METRICS_COST_CLASSES == KL_COST_CLASSES,
                   "metrics and the pool agree on the cost classes");
    if (x->pool)
        for (int c = 0; c < KL_COST_CLASSES; c++)
            kl_metrics_set_queue_depth(
                m, c, kl_pool_queued(x->pool, (kl_cost_class)c));
    kl_metrics_set_keys_loaded(m, atomic_load(&x->keys));
    kl_metrics_set_sealed_refused(m, kl_keys_sealed_refused_total());
    /* sealed keys held elsewhere that no remote could take: the router's
     * (no eligible remote) and the shards' (no router) */
    uint64_t unroutable = 0;
    kl_server *srv = atomic_load(&x->srv);
    if (srv) {
        kl_server_stats ss;
        kl_server_get_stats(srv, &ss);
        unroutable += ss.sealed_unroutable;
    }
    if (x->router) {
        kl_router_stats rs;
        kl_router_get_stats(x->router, &rs);
        unroutable += rs.sealed_no_remote;
    }
    kl_metrics_set_sealed_unroutable(m, unroutable);
    kl_dfleet_scrape(x->fleet, m);
    /* per upstream route, and the trace exporter */
    if (x->router) {
        size_t n;
        kl_remote_stats *st = all_remotes(x, &n);
        kl_metrics_route *mr = n ? calloc(n, sizeof *mr) : NULL;
        if (!mr)
            n = 0; /* out of memory: no route series this scrape */
        for (size_t i = 0; i < n; i++) {
            memset(&mr[i], 0, sizeof mr[i]);
            _Static_assert(sizeof mr[i].name == sizeof st[i].name &&
                               sizeof mr[i].region == sizeof st[i].region,
                           "route names fit");
            memcpy(mr[i].name, st[i].name, sizeof mr[i].name);
            memcpy(mr[i].region, st[i].region, sizeof mr[i].region);
            mr[i].up = st[i].up;
            mr[i].ewma_seconds =
                st[i].ewma_ms < 0 ? -1 : st[i].ewma_ms / (double)KL_MS_PER_S;
            mr[i].inflight = st[i].inflight;
            mr[i].requests = st[i].sent;
            mr[i].errors = st[i].failed;
        }
        kl_metrics_set_routes(m, mr, n);
        free(mr);
        free(st);
    }
    if (x->tracer) {
        kl_tracer_stats ts;
        kl_tracer_get_stats(x->tracer, &ts);
        kl_metrics_set_tracing(
            m, &(kl_metrics_tracing){ts.exported, ts.dropped_full,
                                     ts.dropped_export, ts.export_failures});
    }
}

/* certificate_expiration_timestamp_seconds for the configured files: the
 * server's own certificate, the client CA, the router's identity. */
static void export_certs(kl_daemon_ext *x, const kl_config *cfg)
{
    for (size_t i = 0; i < 3; i++) {
        if (x->cert_src[i])
            kl_metrics_cert_expiry_forget(x->metrics, x->cert_src[i]);
        free(x->cert_src[i]);
        x->cert_src[i] = NULL;
    }
    const char *files[3] = {cfg->auth_cert, cfg->cloudflare_ca_cert,
                            router_cfg(cfg)->table_file &&
                                    *router_cfg(cfg)->table_file
                                ? router_cfg(cfg)->cert_file
                                : NULL};
    /* metrics_identities: false names them by option, not by path */
    static const char *const options[3] = {"auth_cert", "cloudflare_ca_cert",
                                           "router_cert"};
    for (size_t i = 0; i < 3; i++) {
        const char *f = files[i];
        if (!f || !*f || (i == 2 && !strcmp(f, cfg->auth_cert)))
            continue;
        const char *src = x->identities ? f : options[i];
        if (kl_metrics_cert_expiry_add_file_as(x->metrics, f, src) != KL_OK) {
            kl_debug("metrics: no certificate expiry series for %s "
                     "(unreadable or no certificate)",
                     f);
            continue;
        }
        x->cert_src[i] = strdup(src);
    }
}

void kl_ext_serve(kl_daemon_ext *x, const kl_config *cfg, kl_pool *pool,
                  size_t nkeys)
{
    x->pool = pool;
    atomic_store(&x->keys, nkeys);
    atomic_store(&x->listening, true);
    kl_dfleet_health(x->fleet, true, nkeys);
    if (!x->metrics)
        return;
    kl_metrics_set_keys_loaded(x->metrics, nkeys);
    export_certs(x, cfg);
    kl_metrics_on_scrape(x->metrics, on_scrape, x);
    kl_metrics_http_opts mo = kl_settings_metrics_http(kl_settings_of_c(cfg));
    mo.ready = ready;
    mo.ready_arg = x;
    mo.remotes = x->router ? remotes : NULL;
    mo.remotes_arg = x;
    const char *addr = mo.address;
    char err[512];
    x->http = kl_metrics_http_start(x->metrics, &mo, err, sizeof err);
    if (!x->http) {
        /* The reference logs this and goes on serving keys: a key server
         * must not stay down for its metrics. */
        kl_error("metrics: %s; serving keys without /metrics, /health and "
                 "/ready (fix metrics_port or metrics_address, or set "
                 "metrics_port: 0)",
                 err);
        return;
    }
    kl_info("metrics: http://%s%s%s:%u/metrics (and /health, /ready%s)",
            strchr(addr, ':') ? "[" : "", addr, strchr(addr, ':') ? "]" : "",
            kl_metrics_http_port(x->http), x->router ? ", /remotes" : "");
}

bool kl_ext_reload_router(kl_daemon_ext *x)
{
    if (!x->router || (x->fleet && !x->router_has_file))
        return true; /* the fleet directory keeps its table current */
    char err[1024];
    if (kl_router_reload(x->router, err, sizeof err) != KL_OK) {
        kl_error("reload: router_table: %s; keeping the previous routes", err);
        return false;
    }
    kl_router_stats st;
    kl_router_get_stats(x->router, &st);
    kl_info("reload: routing table re-read (generation %u)", st.generation);
    return true;
}

void kl_ext_reloaded(kl_daemon_ext *x, const kl_config *cfg, bool ok,
                     size_t nkeys)
{
    atomic_store(&x->keys, nkeys);
    kl_dfleet_health(x->fleet, ok, nkeys);
    if (!x->metrics)
        return;
    kl_metrics_set_keys_loaded(x->metrics, nkeys);
    kl_metrics_reload_result(x->metrics, ok, time(NULL));
    export_certs(x, cfg);
}

static int cmp_text(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void kl_ext_sealed_keys(kl_daemon_ext *x, const kl_keystore *ks)
{
    size_t n = kl_keystore_held_elsewhere_count(ks);
    if (!x->router || !n)
        return;
    const char **v = malloc(n * sizeof *v);
    if (!v)
        return; /* the router computes each at its first request */
    for (size_t i = 0; i < n; i++)
        v[i] = kl_keystore_elsewhere_policy(ks, i);
    qsort(v, n, sizeof *v, cmp_text); /* distinct texts: sorted, unique */
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!k || strcmp(v[k - 1], v[i]) != 0)
            v[k++] = v[i];
    kl_router_prepare_policies(x->router, v, k);
    kl_info("router: sealed keys held elsewhere: %zu key(s), %zu "
            "polic%s; their remotes are computed now",
            n, k, k == 1 ? "y" : "ies");
    free(v);
}

void kl_ext_draining(kl_daemon_ext *x)
{
    atomic_store(&x->draining, true);
    kl_dfleet_draining(x->fleet);
}

void kl_ext_drain_wait(kl_daemon_ext *x, int sfd)
{
    uint64_t delay = kl_dfleet_drain_delay(x->fleet);
    if (!delay)
        return;
    kl_info("draining: marked draining in the fleet directory; serving %llu "
            "ms more while routers move away (fleet_drain_delay; SIGTERM "
            "again to stop now)",
            (unsigned long long)(delay / KL_NS_PER_MS));
    uint64_t end = kl_now_ns() + delay;
    for (uint64_t now = kl_now_ns(); now < end; now = kl_now_ns()) {
        struct pollfd pfd = {.fd = sfd, .events = POLLIN};
        uint64_t left_ms = (end - now + KL_NS_PER_MS - 1) / KL_NS_PER_MS;
        int n = poll(&pfd, sfd >= 0 ? 1 : 0, (int)left_ms);
        if (n <= 0 || !(pfd.revents & POLLIN))
            continue; /* the time passed, or EINTR */
        struct signalfd_siginfo si;
        if (read(sfd, &si, sizeof si) != (ssize_t)sizeof si)
            continue;
        if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
            kl_info("draining: signal %u: stopping now", si.ssi_signo);
            return;
        }
    }
}

void kl_ext_stop(kl_daemon_ext *x)
{
    kl_metrics_http_stop(x->http);
    x->http = NULL;
    x->pool = NULL;
    kl_dfleet_stop(x->fleet); /* its feed installs into the router */
    x->fleet = NULL;
    if (x->router) {
        kl_router_stats st;
        kl_router_get_stats(x->router, &st);
        kl_info("router: %llu forwarded, %llu answered, %llu without a "
                "route, %llu past the hop limit, %llu cancelled",
                (unsigned long long)st.routed, (unsigned long long)st.answered,
                (unsigned long long)st.no_route,
                (unsigned long long)st.hop_limit,
                (unsigned long long)st.cancelled);
        kl_router_free(x->router);
        x->router = NULL;
    }
}

void kl_ext_free(kl_daemon_ext *x)
{
    kl_ext_stop(x);
    for (size_t i = 0; i < 3; i++)
        free(x->cert_src[i]);
    kl_metrics_free(x->metrics);
    if (x->tracer) {
        /* the shards and the router are gone: flush, at most 2 s */
        kl_tracer_free(x->tracer, 2000);
    }
    memset(x, 0, sizeof *x);
}
