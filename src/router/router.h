/* SPDX-License-Identifier: Apache-2.0 */
/* The geo router (docs/ROUTING.md): serves operations for keys
 * that are not held locally by forwarding them to the best remote key
 * server that holds them and may serve them.
 *
 * - The routing table (table.h) is a YAML file, re-read when it changes
 *   (mtime poll) and on kl_router_reload() (SIGHUP); `dns:` entries are
 *   re-resolved when their records' TTL runs out (dns.h). A table that
 *   does not parse is reported and the previous one stays. Without a
 *   file, tables come from the fleet directory through
 *   kl_router_install_table (table_fleet.h, docs/FLEET.md).
 * - Candidates for a key: the servers that serve it, whose region satisfies
 *   the request's compliance region (tag 0x17, protocol P9) and the key's
 *   policy; ordered healthy first, then by measured latency (EWMA of pings
 *   and live requests; latencies within latency_tolerance_pct tie), then
 *   priority. Up to max_attempts are tried within the request's deadline
 *   (P9 deadline_ms, else default_deadline_ns), which each attempt carries
 *   upstream. An attempt times out when its connection has answered
 *   nothing for the route's timeout since the attempt was sent: p99 of
 *   its quiet waits x timeout_p99_factor within [timeout_floor_ns,
 *   timeout_ceiling_ns] - queueing behind a burst is not loss.
 * - Upstream connections are libkeyless kl_targets (one connection each),
 *   opened in advance, probed by ping every ping_interval_ns, replaced when
 *   dead; a remote gets another connection only when every connection it
 *   has carries conn_inflight_threshold requests, within max_conns_per_remote
 *   and a per-process descriptor budget (max_fds).
 * - Everything runs on the router's own event-loop thread (src/loop), which
 *   drives the targets' descriptors: capacity is bounded by the remotes, not
 *   by local threads. Results come back through the caller's callback, on
 *   the router thread.
 *
 * Threading: kl_router_route, kl_router_cancel, kl_router_has_key,
 * kl_router_reload and kl_router_remote_stats may be called from any
 * thread. */
#ifndef KL_ROUTER_ROUTER_H
#define KL_ROUTER_ROUTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "keyless/protocol.h"

typedef struct kl_router kl_router;

/* Sealed keys held elsewhere (docs/SEALING.md "keylessd and sealed
 * keys"): a request for a sealed key this server cannot open is forwarded
 * to a remote whose sealing attributes (table.h kl_rt_server) satisfy the
 * key's policy. The policy language is src/seal's, which the router may
 * not include (docs/DESIGN.md "The map"): keylessd hands its functions
 * in. A remote's attribute, as eval sees it: */
typedef struct kl_rt_attr {
    const char *name;
    const char *value;
} kl_rt_attr;

typedef struct kl_rt_policy_ops {
    /* The policy for its canonical text (len bytes); NULL when it does
     * not parse (no remote satisfies it) or memory ran out. */
    void *(*parse)(const char *text, size_t len);
    /* Whether a server with these attributes satisfies it. */
    bool (*eval)(const void *policy, const kl_rt_attr *attrs, size_t n);
    void (*free)(void *policy);
} kl_rt_policy_ops;

/* The router's options: keylessd's router_* options point at these
 * fields (router_<field name>; the percentages without _pct). Start from
 * kl_router_defaults and change what differs. Durations in nanoseconds
 * (core/time.h). */
typedef struct kl_router_opts {
    /* YAML routing table; NULL: tables come from kl_router_install_table
     * (the fleet directory), the router starts with an empty one */
    const char *table_file;
    /* the router's client identity toward remote key servers (P1) */
    const char *cert_file, *key_file;
    const char *ca_file;          /* CA the remotes must chain to (required) */
    const char *server_name;      /* name checked in remote certificates; NULL:
                                     each remote's host */
    uint64_t default_deadline_ns; /* requests without deadline_ms */
    int max_attempts;             /* remotes tried per request */
    int max_hops;                 /* P9 hops limit */
    uint64_t timeout_floor_ns;    /* per-attempt timeout bounds */
    uint64_t timeout_ceiling_ns;
    int timeout_p99_factor;      /* attempt timeout = p99 x this */
    uint64_t ping_interval_ns;   /* health/latency probe per remote */
    int ewma_weight_pct;         /* weight of a new latency sample */
    int latency_tolerance_pct;   /* latencies this close tie */
    uint64_t reload_poll_ns;     /* table file mtime check; 0: never */
    uint64_t dns_refresh_ns;     /* dns: entries re-resolved */
    uint64_t connect_timeout_ns; /* TCP + TLS to a remote */
    int conn_inflight_threshold; /* add a connection above */
    int max_conns_per_remote;
    int max_inflight_per_conn;
    int max_fds;      /* descriptors for upstreams */
    int max_inflight; /* routed requests at once */
    /* dns: names are resolved again when their records' TTL runs out,
     * within these bounds; dns_refresh_ns is for names without a TTL and
     * the retry after a failure */
    uint64_t dns_ttl_floor_ns;
    uint64_t dns_ttl_ceiling_ns;
    const char *dns_server; /* "a.b.c.d:port" instead of resolv.conf's */
    /* an upstream connection beyond a remote's first, idle this long, is
     * closed (the first stays, opened in advance) */
    uint64_t conn_idle_timeout_ns;
    /* Answers of far remotes reach their callers in batches: a done
     * callback may leave its wake-up to flush, which the router calls on
     * its thread at most answer_hold_ns (0: at once) after
     * an answer, and never later than 1% of that answer's own round trip
     * - a 175 ms remote's answers travel together, a 0.3 ms remote's go
     * at once (the in-order outage; docs/ROUTING.md "Head-of-line blocking:
     * local latency with remote traffic"). Without a
     * flush (kl_router_set_flush) nothing is held. */
    uint64_t answer_hold_ns;
    /* spans for route choice and attempts (metrics/trace.h);
     * NULL: none. Must outlive the router. */
    struct kl_tracer *tracer;
    /* sealing policies (above); NULL: a sealed key held elsewhere has no
     * eligible remote (`key not found`). Must outlive the router. */
    const kl_rt_policy_ops *policy_ops;
} kl_router_opts;

/* Every option's default, and keylessd's (its --help prints these). */
extern const kl_router_opts kl_router_defaults;

/* What to forward: the request as the server parsed it (protocol P3) and
 * its parsed request context (tag 0x16) or NULL. Everything is copied. */
typedef struct kl_route_req {
    const kl_request *req;
    const kl_req_context *ctx;
    /* req's span context is the server's binary copy for a
     * traced request: each attempt rewrites it (metrics/trace.h) */
    bool traced;
    /* A sealed key held elsewhere: its policy's canonical text (the key
     * store's, NUL-terminated; copied). Used when the table does not
     * route the SKI itself: the candidates are then the table's servers
     * whose sealing attributes satisfy it. NULL: not a sealed key. */
    const char *sealed_policy;
} kl_route_req;

/* Called exactly once per routed request, on the router thread: err is
 * KL_OK with the remote's response payload, or the status of the P6
 * answer (core/status.h): the remote's own answer (kl_status_from_p6 of
 * its code), KL_E_REMOTE_CONFIG when no route could serve it,
 * KL_E_KEY_NOT_FOUND when no remote knows the key, KL_E_INTERNAL when the
 * deadline passed or the request was cancelled. payload is valid during
 * the call only. */
typedef void (*kl_route_done_fn)(void *arg, kl_status err,
                                 const uint8_t *payload, size_t len);

typedef struct kl_route_handle {
    void *req; /* private */
} kl_route_handle;

/* Starts the router thread and loads the table; returns once the table is
 * in effect. KL_E_CONFIG with err set ("file:line: what; fix") when the
 * table or the options are wrong. */
KL_WUR kl_status kl_router_new(const kl_router_opts *opts, kl_router **out,
                               char *err, size_t errlen);
/* Stops the thread; requests still in flight complete with
 * KL_E_INTERNAL before it returns. */
void kl_router_free(kl_router *r);

/* Forwards a request. done runs later on the router thread (never inside
 * this call). KL_E_NOMEM is the only failure (done is then not called). */
/* Sets the batch flush (see answer_hold_ns) before requests are
 * routed; fn NULL turns it off. fn runs on the router thread, or on the
 * caller's thread inside kl_router_free. */
void kl_router_set_flush(kl_router *r, void (*fn)(void *arg), void *arg);

KL_WUR kl_status kl_router_route(kl_router *r, const kl_route_req *req,
                                 kl_route_done_fn done, void *arg,
                                 kl_route_handle *h);
/* The client went away: nothing more is sent for this request (an unsent
 * attempt is dropped, a late answer is discarded). done is still called
 * once (KL_E_INTERNAL), so the owner frees its state in one place. Call
 * only before done has run. */
void kl_router_cancel(kl_router *r, const kl_route_handle *h);

/* The sealing policies of the keys a key load holds elsewhere (distinct
 * texts): the router thread computes their eligible remotes now, so that
 * no request pays for it (docs/SEALING.md). Copies the texts; returns at
 * once. */
void kl_router_prepare_policies(kl_router *r, const char *const *texts,
                                size_t n);

/* Whether the current table has a server for this SKI (the server calls
 * this after a local key-store miss). */
bool kl_router_has_key(kl_router *r, const uint8_t ski[KL_SKI_LEN]);

/* Re-reads the table now (SIGHUP) and returns once it is in effect (so a
 * request after it finds the new routes). On error the previous table
 * stays and err says why. Blocking (DNS), so not for a shard thread. */
KL_WUR kl_status kl_router_reload(kl_router *r, char *err, size_t errlen);

/* Installs a table built elsewhere (router/table_fleet.c, from the fleet
 * directory) exactly as a file reload does: remotes that stay keep their
 * connections and latency history, new ones are probed at once, departed
 * ones drain. Takes t (freed on failure too); returns once it is in
 * effect. KL_E_CONFIG when the router has a table file. Not for the
 * router thread. */
struct kl_rt_table;
KL_WUR kl_status kl_router_install_table(kl_router *r, struct kl_rt_table *t);

/* Per remote, for metrics and tests. */
typedef struct kl_remote_stats {
    char name[80];
    char region[72];
    bool up;        /* last probe or request succeeded */
    bool in_table;  /* false: removed, draining */
    double ewma_ms; /* < 0: no sample yet */
    double p99_ms;  /* of the quiet waits (stall.c); < 0: none */
    int timeout_ms; /* current per-attempt timeout */
    unsigned conns; /* upstream connections */
    uint64_t
        idle_closed; /* extra connections closed after conn_idle_timeout_ns */
    uint64_t sent;   /* attempts sent to it */
    uint64_t ok;     /* answered (any P6 answer) */
    uint64_t failed; /* timeouts and connection failures */
    uint64_t lost;   /* of those: overtaken by later requests for the same
                        key while the remote kept answering (stall.c) */
    uint64_t inflight;
} kl_remote_stats;

typedef struct kl_router_stats {
    uint64_t routed, answered, no_route, not_found, hop_limit, expired,
        cancelled, retries, reloads, reload_errors;
    /* sealed keys held elsewhere: routed by their policy, and answered
     * `key not found` because no remote of the table satisfies it (also
     * in not_found) */
    uint64_t sealed_routed, sealed_no_remote;
    unsigned sealed_policies; /* policies whose eligible remotes are kept */
    unsigned fds;             /* descriptors used by upstream connections */
    unsigned generation;      /* tables installed so far */
    unsigned retired;         /* replaced tables not freed yet (a reader may
                                 still hold them) */
} kl_router_stats;

void kl_router_get_stats(kl_router *r, kl_router_stats *out);
/* Fills up to max entries; returns how many remotes there are. */
size_t kl_router_remote_stats(kl_router *r, kl_remote_stats *out, size_t max);

/* Builds the request the router sends upstream for req: everything the
 * client sent (SKI, opcode, payload, compliance region, span context,
 * logging items) with the request context's hops raised by one (P9); the
 * budget (deadline_ms) is added by libkeyless at write time. ctx_json
 * receives the new tag-0x16 text. Exposed for tests. */
KL_WUR kl_status kl_router_forward_spec(const kl_request *req,
                                        const kl_req_context *ctx,
                                        kl_request_spec *spec, char *ctx_json,
                                        size_t cap);

#endif
