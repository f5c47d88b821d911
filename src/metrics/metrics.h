/* SPDX-License-Identifier: Apache-2.0 */
/* Metrics: counters and histograms kept per thread
 * and summed when scraped, rendered in the Prometheus text
 * format 0.0.4 and served with /health and /ready over HTTP on the metrics
 * port. docs/METRICS.md lists every series.
 *
 * Threads. One kl_metrics per process. Every thread that records on the
 * request path (a shard, a crypto worker) registers its own kl_metrics_local
 * slot and is the only writer of it: each update is a relaxed atomic load
 * plus store, no lock and no locked read-modify-write, and the scraper reads
 * relaxed and adds the slots up. The process-wide setters (queue depth, keys
 * loaded, reload result, certificates) may be called from any thread.
 * Every function taking a slot accepts NULL and then does nothing, so code
 * under test can run without metrics.
 *
 * Wiring, for the server's owner:
 *   m = kl_metrics_new();
 *   per shard thread:  l = kl_metrics_local_new(m, shard_index);
 *   per worker thread: l = kl_metrics_local_new(m, -1);
 *   kl_metrics_on_scrape(m, fill_gauges, server);  (queue depths, keys)
 *   kl_metrics_cert_expiry_add_file(m, auth_cert_path); ...
 *   h = kl_metrics_http_start(m, &(kl_metrics_http_opts){"127.0.0.1", 2406,
 *                             ready_fn, server}, err, sizeof err);
 *   ... on shutdown: kl_metrics_http_stop(h); join writers; kl_metrics_free(m).
 */
#ifndef KL_METRICS_METRICS_H
#define KL_METRICS_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <openssl/x509.h>

#include "core/status.h"

typedef struct kl_metrics kl_metrics;
typedef struct kl_metrics_local kl_metrics_local;

/* The 15 buckets of the reference: 0.0001 s doubling to 1.6384 s, +Inf. */
#define KL_METRICS_BUCKETS 15
/* Cost classes, in the order of kl_cost_class (crypto/ops.h): "fast",
 * "slow", "blocking". The server passes its kl_cost_class values (and may
 * _Static_assert(KL_METRICS_COST_CLASSES == KL_COST_CLASSES)); metrics
 * does not include crypto/ so that it stays a leaf module. */
#define KL_METRICS_COST_CLASSES 3

/* Why a request was answered with a fast error instead of being run (P6). */
typedef enum kl_metrics_shed_reason {
    KL_SHED_QUEUE_FULL = 0, /* the cost class's queue was full */
    KL_SHED_DEADLINE,       /* its deadline passed before it ran (P9) */
    KL_SHED_INFLIGHT,       /* the process-wide in-flight limit */
    KL_SHED_DRAINING,       /* the server was shutting down */
    KL_SHED_REASONS
} kl_metrics_shed_reason;

/* Why a TLS handshake failed. */
typedef enum kl_metrics_hs_fail {
    KL_HS_FAIL_TIMEOUT = 0, /* handshake_timeout passed */
    KL_HS_FAIL_CERT,        /* peer certificate missing or not trusted */
    KL_HS_FAIL_PROTOCOL,    /* TLS alert or malformed handshake */
    KL_HS_FAIL_CLOSED,      /* peer closed or reset mid-handshake */
    KL_HS_FAIL_OTHER,
    KL_HS_FAIL_REASONS
} kl_metrics_hs_fail;

/* Kinds of log line a peer can cause at will, rate-limited
 * (docs/OPERATIONS.md, Logs): keylessd_log_suppressed_total{kind} counts
 * the lines left out. */
typedef enum kl_metrics_log_kind {
    KL_LOGSUP_HANDSHAKE_FAILED = 0, /* "TLS handshake failed" */
    KL_LOGSUP_HANDSHAKE_TIMEOUT,    /* "TLS handshake timed out" */
    KL_LOGSUP_HANDSHAKE_TOO_BIG,    /* max_handshake_bytes exceeded */
    KL_LOGSUP_KINDS
} kl_metrics_log_kind;

/* Why a connection was closed right after accept() (limits.c): for
 * keylessd_connections_refused_total{reason}. */
typedef enum kl_metrics_refusal {
    KL_REFUSE_MAX_CONNECTIONS = 0,    /* max_connections were open */
    KL_REFUSE_HANDSHAKING_PER_SOURCE, /* its source had its handshakes */
    KL_REFUSE_REASONS
} kl_metrics_refusal;

/* Why an established connection was closed by the server's decision about
 * its client certificate (docs/SECURITY.md "Revocation and expiry"): for
 * keylessd_connections_closed_total{reason}. */
typedef enum kl_metrics_close {
    KL_CLOSE_UNTRUSTED = 0, /* a reload's client CA no longer trusts it */
    KL_CLOSE_CERT_EXPIRED,  /* its certificate's notAfter passed */
    KL_CLOSE_REASONS
} kl_metrics_close;

/* Connection states for keylessd_connections{state}. */
typedef enum kl_metrics_conn {
    KL_MCONN_NONE = 0,  /* not counted: before accept, after close */
    KL_MCONN_HANDSHAKE, /* accepted, TLS handshake running */
    KL_MCONN_OPEN,      /* serving requests */
    KL_MCONN_DRAINING,  /* no longer read, finishing in-flight work */
    KL_MCONN_STATES
} kl_metrics_conn;

kl_metrics *kl_metrics_new(void);
/* After the HTTP endpoint stopped and no thread records any more. */
void kl_metrics_free(kl_metrics *m);

/* A slot for the calling thread (thread-safe; NULL when out of memory).
 * shard >= 0 names a shard (its event-loop busy time is exported with
 * shard="N"); -1 for any other thread. Slots live until kl_metrics_free, so
 * counts survive their thread and counters never go down. */
kl_metrics_local *kl_metrics_local_new(kl_metrics *m, int shard);

/* ---- request path: only the slot's own thread ------------------------- */

/* keyless_requests{opcode}: once per request read, before any work. */
void kl_metrics_request(kl_metrics_local *l, uint8_t opcode);
/* keyless_request_exec_duration_per_opcode{error,type}: the operation
 * itself, queue wait excluded. err: the status of the answer (KL_OK, or
 * the P6 error it was answered with; the label is that error's text). */
void kl_metrics_exec_time(kl_metrics_local *l, uint8_t opcode, kl_status err,
                          uint64_t ns);
/* keyless_request_total_duration_per_opcode{error,type}: request read to
 * response handed to the connection. */
void kl_metrics_total_time(kl_metrics_local *l, uint8_t opcode, kl_status err,
                           uint64_t ns);
/* keyless_key_load_duration: the key lookup of a signing or decrypting
 * request (the reference records it for those opcodes only). */
void kl_metrics_key_load_time(kl_metrics_local *l, uint64_t ns);
/* keyless_failed_connection: a transport failure on an established
 * connection (read or write error, peer identity failure); not handshake
 * failures, EOF, idle timeouts or request errors (as the reference). */
void kl_metrics_failed_connection(kl_metrics_local *l);
/* keylessd_queue_wait_seconds{class}: submit to start of execution. */
void kl_metrics_queue_wait(kl_metrics_local *l, int cost_class, uint64_t ns);
/* keylessd_requests_shed_total{reason}: answered `internal error` at once
 * instead of being run (P6 overload). */
void kl_metrics_shed(kl_metrics_local *l, kl_metrics_shed_reason reason);
/* keylessd_tls_handshake_failures_total{reason}. */
void kl_metrics_handshake_failed(kl_metrics_local *l, kl_metrics_hs_fail r);
/* keylessd_log_suppressed_total{kind}: one line of that kind left out by
 * the log's rate limit. */
void kl_metrics_log_suppressed(kl_metrics_local *l, kl_metrics_log_kind k);
/* keylessd_requests_in_flight: +1 when read, -1 when its response is
 * queued for writing (both on the connection's shard). */
void kl_metrics_inflight_add(kl_metrics_local *l, int64_t delta);
/* keylessd_connections{state}: a connection moves from one state to
 * another (KL_MCONN_NONE on accept and close). Call on its shard. */
void kl_metrics_conn_move(kl_metrics_local *l, kl_metrics_conn from,
                          kl_metrics_conn to);
/* keylessd_loop_busy_seconds_total{shard}: time a shard spent working
 * (not waiting in epoll_wait). */
void kl_metrics_loop_busy(kl_metrics_local *l, uint64_t ns);
/* keylessd_async_*{shard} (docs/METRICS.md "Accelerators"): the shard's
 * ASYNC job counts as they stand (totals and the two gauges). */
typedef struct kl_metrics_async {
    uint64_t started, paused, expired, full, retried; /* totals */
    uint64_t busy, fds;                               /* now */
} kl_metrics_async;
void kl_metrics_set_async(kl_metrics_local *l, const kl_metrics_async *a);

/* ---- connection back-pressure: the shard's thread ---- */

/* keylessd_connections_refused_total{reason}: a socket closed right after
 * accept() by a connection cap. */
void kl_metrics_conn_refused(kl_metrics_local *l, kl_metrics_refusal r);
/* keylessd_connections_closed_total{reason}: an established connection is
 * closed (once its requests in flight are answered) because of its client
 * certificate. */
void kl_metrics_conn_closed(kl_metrics_local *l, kl_metrics_close r);
/* The shard's listener stopped accepting at max_handshaking (paused true)
 * or accepts again (false), at now_ns on CLOCK_MONOTONIC (kl_now_ns). A
 * repeated state is ignored. keylessd_accept_pauses_total counts the
 * stops; keylessd_accept_paused_seconds_total adds up their time, the
 * pause in progress included (read at scrape); keylessd_accept_paused is
 * the number of listeners stopped now. */
void kl_metrics_accept_paused(kl_metrics_local *l, bool paused,
                              uint64_t now_ns);
/* Whether the slot's listener is recorded as stopped (its thread only). */
bool kl_metrics_accept_is_paused(const kl_metrics_local *l);
/* keylessd_buffered_bytes and keylessd_buffered_bytes_limit: the bytes the
 * shard holds for requests in flight and unsent responses, and its share
 * of max_buffered_bytes (a last value, not a counter). */
void kl_metrics_set_buffered(kl_metrics_local *l, uint64_t bytes,
                             uint64_t budget);
/* keylessd_read_pauses_total: the shard's own running count of times a
 * connection stopped being read because of a limit (it never goes down). */
void kl_metrics_set_read_pauses(kl_metrics_local *l, uint64_t n);

/* ---- process-wide values: any thread, last write wins ----------------- */

void kl_metrics_set_queue_depth(kl_metrics *m, int cost_class, uint64_t n);
void kl_metrics_set_keys_loaded(kl_metrics *m, uint64_t n);
/* Sealed key files refused by the loads so far (a running total the key
 * store keeps; sampled at scrape). */
void kl_metrics_set_sealed_refused(kl_metrics *m, uint64_t n);
/* Requests for sealed keys held elsewhere answered `key not found`: no
 * remote satisfies the key's policy, or no router (docs/METRICS.md). */
void kl_metrics_set_sealed_unroutable(kl_metrics *m, uint64_t n);
/* A configuration or key reload finished (when: wall-clock seconds). */
void kl_metrics_reload_result(kl_metrics *m, bool ok, time_t when);

/* Called at the start of every scrape, on the HTTP thread, to refresh the
 * sampled gauges (e.g. kl_metrics_set_queue_depth from kl_pool_queued).
 * Set it before kl_metrics_http_start. */
typedef void (*kl_metrics_scrape_fn)(kl_metrics *m, void *arg);
void kl_metrics_on_scrape(kl_metrics *m, kl_metrics_scrape_fn fn, void *arg);

/* ---- routes and tracing (routes.c) ------------------------------------- */

/* Geo routing (docs/METRICS.md): the upstream routes as the router sees
 * them, for keylessd_route_*. Set from the scrape hook (any thread);
 * copied. Names are the routing table's, so the label set is bounded by
 * the configuration. */
typedef struct kl_metrics_route {
    char name[80];
    char region[72];
    bool up;
    double ewma_seconds; /* < 0: no sample yet (no series) */
    uint64_t inflight;
    uint64_t requests; /* attempts sent */
    uint64_t errors;   /* timeouts and connection failures */
} kl_metrics_route;
void kl_metrics_set_routes(kl_metrics *m, const kl_metrics_route *r, size_t n);

/* Trace export (docs/TRACING.md): keylessd_trace_* from the tracer's
 * counters. Absent until first set. */
typedef struct kl_metrics_tracing {
    uint64_t exported, dropped_full, dropped_export, export_failures;
} kl_metrics_tracing;
void kl_metrics_set_tracing(kl_metrics *m, const kl_metrics_tracing *t);

/* The fleet directory (docs/FLEET.md, docs/METRICS.md): keylessd_fleet_*
 * from the directory's and the registration's status. Absent until first
 * set (no fleet configured: never). */
typedef struct kl_metrics_fleet {
    bool reading;           /* the directory is read (routing from it) */
    bool in_sync;           /* reading: the directory is in sync */
    double sync_age_s;      /* reading: seconds since it was last in sync */
    uint64_t servers;       /* reading: server records in the last view */
    bool registering;       /* this server registers itself */
    bool registered;        /* registering: its record is on a live lease */
    uint64_t registrations; /* records written on a new lease */
} kl_metrics_fleet;
void kl_metrics_set_fleet(kl_metrics *m, const kl_metrics_fleet *f);

/* ---- certificate_expiration_timestamp_seconds (certs.c) --------------- */

/* Sets the series of one certificate; the same certificate from the same
 * source replaces its series. source: the file path for configured certs,
 * "listener: <addr>" for peers' certificates (as the reference). At most
 * KL_METRICS_MAX_CERTS series; beyond that new ones are dropped. */
#define KL_METRICS_MAX_CERTS 512
void kl_metrics_cert_expiry_add(kl_metrics *m, const char *source, X509 *cert);
/* Every certificate of a PEM file, source = path. KL_E_IO when it cannot be
 * read, KL_E_BAD_VALUE when it holds no certificate. */
KL_WUR kl_status kl_metrics_cert_expiry_add_file(kl_metrics *m,
                                                 const char *path);
/* The same with another source label (the option's name instead of the
 * path, when identities are off). */
KL_WUR kl_status kl_metrics_cert_expiry_add_file_as(kl_metrics *m,
                                                    const char *path,
                                                    const char *source);
/* metrics_identities (docs/METRICS.md, Identities in the series): with
 * false, certificates added from then on carry empty cn, hostnames and
 * serial_no labels, and certificates that then share a label set keep one
 * series, the earliest notAfter. Set it before adding any. true by
 * default, as the reference. */
void kl_metrics_set_identities(kl_metrics *m, bool on);
/* Removes a source's series (before re-adding it on reload). */
void kl_metrics_cert_expiry_forget(kl_metrics *m, const char *source);

/* ---- exposition ------------------------------------------------------- */

/* The whole exposition (text format 0.0.4), malloc'd, *len its length.
 * NULL when out of memory. Runs the scrape hook first. */
char *kl_metrics_render(kl_metrics *m, size_t *len);

/* ---- HTTP endpoint (http.c) ------------------------------------------- */

typedef struct kl_metrics_http kl_metrics_http;

/* Readiness for /ready: true when ready; otherwise write a short reason
 * ("keys not loaded", "draining", ...) into reason. Runs on the HTTP
 * thread, so it must only read thread-safe state. */
typedef bool (*kl_metrics_ready_fn)(void *arg, char *reason, size_t len);

/* Start from kl_metrics_http_defaults and change what differs;
 * keylessd's metrics_address and metrics_port options point at .address
 * and .port (metrics_port 0 means no endpoint there: the daemon does not
 * start one). */
typedef struct kl_metrics_http_opts {
    const char *address;       /* numeric IPv4/IPv6 */
    uint16_t port;             /* 0: an ephemeral port (tests) */
    kl_metrics_ready_fn ready; /* NULL: always ready */
    void *ready_arg;
    /* /remotes, the same way (true: 200 with what it wrote, or "ok" when
     * nothing); NULL: no /remotes (404) */
    kl_metrics_ready_fn remotes;
    void *remotes_arg;
} kl_metrics_http_opts;

extern const kl_metrics_http_opts kl_metrics_http_defaults;

/* Serves GET/HEAD /metrics, /health (200 "ok" while the process runs),
 * /ready (200 "ready" or 503 with the reason) and /remotes on a thread of
 * its own, never a shard, that stays answerable to probes while clients
 * misbehave (http.c; docs/METRICS.md, The HTTP listener). Other paths 404,
 * other methods 405. NULL with a message naming the address on failure. */
kl_metrics_http *kl_metrics_http_start(kl_metrics *m,
                                       const kl_metrics_http_opts *o, char *err,
                                       size_t errlen);
uint16_t kl_metrics_http_port(const kl_metrics_http *h);
/* Stops the thread and closes the socket; NULL is fine. */
void kl_metrics_http_stop(kl_metrics_http *h);

#endif
