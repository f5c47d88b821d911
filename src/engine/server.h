/* SPDX-License-Identifier: Apache-2.0 */
/* keylessd's serving core (protocol P1/P2/P5/P6/P8): shards
 * (one epoll loop thread each, own SO_REUSEPORT listener, connections for
 * life), mutual TLS, request dispatch, crypto handed to the worker pool,
 * completions returned to the owning shard and written as soon as they are
 * ready, limits with backpressure, idle timeout and drain.
 *
 * Life cycle: kl_server_new (binds, so address errors surface at startup)
 * -> kl_server_start -> ... -> kl_server_shutdown (from any thread) ->
 * kl_server_wait -> kl_pool_free (the pool may still call back into the
 * server's completion queues until then) -> kl_server_free.
 *
 * Reload: kl_server_swap replaces the key store and/or the TLS
 * context while the shards serve; requests in flight finish with the store
 * they started with, connections keep the context they were accepted with,
 * and each old object is freed once nothing uses it (res.c). */
#ifndef KL_ENGINE_SERVER_H
#define KL_ENGINE_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "crypto/pool.h"
#include "keys/keystore.h"
#include "metrics/metrics.h"
#include "router/router.h"
#include "tls/tls.h"

typedef struct kl_server kl_server;

/* The engine's options. The values are options of keylessd (the daemon's
 * option table points at these fields, under the names in comments);
 * start from kl_server_defaults and change what differs. The pointers
 * are the objects the engine works with, set by whoever starts it. */
typedef struct kl_server_opts {
    const char *listen_address;     /* numeric IPv4 or IPv6 */
    uint16_t port;                  /* 0: an ephemeral port (tests) */
    bool share_port;                /* listen_reuseport */
    int shards;                     /* 0: number of CPUs */
    kl_tls_ctx *tls;                /* server context: owned by the server
                                       once kl_server_new succeeded */
    kl_keystore *keys;              /* the same */
    kl_pool *pool;                  /* not owned */
    uint32_t max_inflight_per_conn; /* >= 1 */
    uint32_t max_inflight;          /* >= 1 */
    size_t max_output;              /* per connection (max_output_per_conn) */
    size_t max_buffered; /* all shards together (max_buffered_bytes) */
    uint64_t idle_timeout_ns;
    uint64_t handshake_timeout_ns;
    uint64_t drain_timeout_ns;  /* 0: none (close at once) */
    uint64_t max_queue_time_ns; /* 0: no limit */
    /* operations of providers that pause ASYNC jobs, at once per shard
     * (docs/DESIGN.md "Accelerators: ASYNC jobs") */
    uint32_t max_async_jobs;
    /* limits.c, acl.c (docs/SECURITY.md) */
    uint32_t max_connections;            /* more are closed at accept */
    uint32_t max_handshaking;            /* connections not yet authenticated */
    uint32_t max_handshaking_per_source; /* per address or IPv6 /64 */
    uint32_t max_handshake_bytes;        /* before the handshake ends */
    struct kl_acl *acl; /* access lists; NULL: none. Owned by the
                           server once kl_server_new succeeded */
    /* Geo routing: a request for a key the store does not hold
     * is forwarded when the router's table has it. Not owned; it must
     * outlive the shards' requests: free it after kl_server_wait and
     * before kl_server_free (its last answers still go to the shards'
     * completion queues). NULL: no routing. */
    kl_router *router;
    /* Metrics: each shard records into a slot of its own. Not
     * owned; freed after kl_server_free. NULL: none. */
    kl_metrics *metrics;
    /* Tracing (metrics/trace.h): shard i records into ring i of
     * the tracer (it needs kl_server_shards rings). Not owned; freed after
     * kl_server_free. NULL: tracing off. */
    struct kl_tracer *tracer;
    /* Fraction of successful key operations logged as access lines at
     * info level (docs/OPERATIONS.md "Logs"); 0: none, the reference's quiet.
     */
    double access_log_sample_rate;
} kl_server_opts;

/* Every option's default, and keylessd's (its --help prints these). */
extern const kl_server_opts kl_server_defaults;

/* Creates the shards and binds their listening sockets. On failure returns
 * NULL with a message (naming the address) in err. */
kl_server *kl_server_new(const kl_server_opts *o, char *err, size_t errlen);
/* The bound port (useful with port 0). */
uint16_t kl_server_port(const kl_server *s);
int kl_server_shards(const kl_server *s);
KL_WUR kl_status kl_server_start(kl_server *s);
/* Thread-safe, returns at once: stop accepting, stop reading, finish what
 * is in flight (up to drain_timeout), flush, close. */
void kl_server_shutdown(kl_server *s);
/* Joins the shard threads (after kl_server_shutdown). */
void kl_server_wait(kl_server *s);
void kl_server_free(kl_server *s);

/* Replaces the key store and/or the TLS context (NULL: keep that one) from
 * any thread; the server owns them from here on. Shards take them up at
 * their next request, accepted connection or wake-up (they are woken). On
 * KL_E_NOMEM nothing changed and the caller still owns both. */
KL_WUR kl_status kl_server_swap(kl_server *s, kl_keystore *keys,
                                kl_tls_ctx *tls);
/* Incremented by every swap (for tests and logs). */
uint64_t kl_server_generation(const kl_server *s);

/* Counters, summed over shards. */
typedef struct kl_server_stats {
    uint64_t accepted;
    uint64_t handshakes;       /* completed */
    uint64_t handshake_failed; /* refused or broken handshakes */
    uint64_t health_checks;    /* closed before any handshake byte (P1) */
    uint64_t requests;
    uint64_t responses;
    uint64_t errors;           /* error responses, any code */
    uint64_t shed;             /* queue full or deadline passed (P6) */
    uint64_t version_mismatch; /* major version != 1, served anyway (P2) */
    uint64_t stray_bytes;      /* requests with 1-2 stray bytes (P3) */
    uint64_t idle_closed;
    uint64_t read_pauses;       /* times a connection stopped being read */
    uint64_t conn_refused;      /* closed at accept: max_connections */
    uint64_t handshake_refused; /* closed at accept: max_handshaking or
                                   max_handshaking_per_source */
    uint64_t acl_refused;       /* requests refused by an access list */
    uint64_t sealed_unroutable; /* sealed keys held elsewhere, answered
                                   `key not found`: no router here */
} kl_server_stats;

void kl_server_get_stats(const kl_server *s, kl_server_stats *out);

#endif
