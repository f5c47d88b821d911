/* SPDX-License-Identifier: Apache-2.0 */
/* Private to src/engine: shards, connections, jobs. Threading rule:
 * a connection and everything in a shard except its
 * completion queue are touched only by the shard's thread; workers touch a
 * job only between kl_pool_submit() and pushing it onto the queue. */
#ifndef KL_ENGINE_INTERNAL_H
#define KL_ENGINE_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "crypto/async.h"
#include "loop/loop.h"
#include "metrics/trace.h"
#include "engine/acl.h"
#include "engine/limits.h"
#include "engine/outbuf.h"
#include "engine/server.h"

#define KL_READS_PER_WAKE 16   /* TLS reads per connection per wake-up */
#define KL_WRITES_PER_FLUSH 16 /* TLS writes per connection per turn */
#define KL_ACCEPTS_PER_WAKE 8
#define KL_IN_INITIAL (16u * 1024u)

typedef struct kl_shard kl_shard;
typedef struct kl_conn kl_conn;
typedef struct kl_srv_rjob kl_srv_rjob;

/* A key store or TLS context that a reload can replace (res.c). The server
 * holds one reference to the current one, each shard one to the one it
 * uses; the last release frees it. */
typedef struct kl_res {
    atomic_uint refs;
    void *obj;
    void (*free_fn)(void *obj);
} kl_res;

/* A shard's hold on a key store: counted without atomics, since only the
 * shard's thread submits and completes its jobs. users = jobs that use it,
 * plus one while it is the shard's current store. */
typedef struct kl_pin {
    kl_res *res;
    uint32_t users;
    struct kl_pin *next; /* the shard's retired pins */
} kl_pin;

/* A counter with one writer (its shard) and relaxed readers. */
typedef _Atomic uint64_t kl_counter;
#define KL_COUNT(c) KL_COUNT_N(c, 1)
#define KL_COUNT_N(c, n)                                                       \
    atomic_store_explicit(                                                     \
        &(c), atomic_load_explicit(&(c), memory_order_relaxed) + (n),          \
        memory_order_relaxed)

typedef struct kl_shard_stats {
    kl_counter accepted, handshakes, handshake_failed, health_checks, requests,
        responses, errors, shed, version_mismatch, stray_bytes, idle_closed,
        read_pauses;
    /* limits.c, acl.c */
    kl_counter conn_refused, handshake_refused, acl_refused;
    /* sealed keys held elsewhere answered `key not found` here: no router
     * to forward them (docs/SEALING.md) */
    kl_counter sealed_unroutable;
} kl_shard_stats;

typedef enum kl_conn_state {
    KL_CONN_HANDSHAKE,
    KL_CONN_OPEN,
    KL_CONN_DRAINING, /* not reading; finishing in-flight work */
    KL_CONN_CLOSED,   /* socket gone; freed once no job refers to it */
} kl_conn_state;

struct kl_conn {
    kl_shard *shard;
    kl_conn *prev, *next; /* the shard's live list, or its closed list */
    kl_conn *ready_next;  /* has input to process next turn */
    kl_conn *dirty_next;  /* has output to flush this turn */
    bool on_ready, on_dirty;
    kl_conn_state state;
    int fd;
    kl_watch watch;
    kl_tls_conn *tls;
    unsigned hs_want;      /* KL_EV_* the handshake waits for */
    bool read_wants_write; /* TLS read needs the socket writable */
    bool write_wants_read; /* TLS write needs the socket readable */
    bool write_blocked;    /* TLS write waits for writability */
    bool paused;           /* read interest removed by a limit */
    bool logged_version;
    uint8_t *in;
    size_t in_len, in_cap;
    kl_outbuf out;
    size_t out_held; /* out.cap as counted in shard->budget.held */
    uint32_t inflight;
    kl_srv_rjob *routed; /* forwarded requests in flight (routed.c) */
    uint64_t last_req_ns;
    /* handshake deadline, idle timeout or certificate expiry (whichever
     * first, lifetime.c), or drain deadline */
    kl_timer timer;
    char addr[INET6_ADDRSTRLEN + 8];
    char peer[96];     /* client certificate name, after the handshake */
    kl_acl_grant acl;  /* access-list rules naming this client (acl.c) */
    kl_src src;        /* its source, for max_handshaking_per_source */
    _Atomic bool gone; /* closed: its queued jobs are not run (pool.h) */

    /* docs/SECURITY.md "Revocation and expiry" (lifetime.c): the client
     * CA generation its certificate was last verified under (the shard's
     * trust_epoch), and when that certificate expires: not_after (seconds
     * since 1970) and expires_ns on the monotonic clock (0: never) */
    uint32_t trust_epoch;
    int64_t not_after;
    uint64_t expires_ns;
};

/* A crypto job as the server submits it: the pool's job first, then what
 * the shard needs to answer it, then the payload copy, the output buffer
 * and the request id. */
typedef struct kl_srv_job {
    kl_job job;
    kl_conn *conn;
    kl_pin *pin; /* the key store job.key lives in */
    uint32_t id;
    /* metrics: read, execution start (estimated, see
     * metrics_glue.c) and end, monotonic ns; 0 when metrics are off */
    uint64_t t0_ns, start_ns, done_ns;
    /* tracing: the request's trace, and when it was queued */
    kl_trace_ref trace;
    uint64_t queued_ns;
    const char *request_id; /* NULL or points into data */
    size_t held;            /* its size, counted in shard->budget.held */
    size_t alloc;           /* bytes allocated (kl_shard_job_new) */
    uint8_t data[];
} kl_srv_job;

/* The trace state of the request being handled: from kl_tr_request_read
 * to kl_tr_request_end, inside one call of kl_conn_handle_request, which
 * holds it; a job or a forwarded request takes a copy of ref. */
typedef struct kl_req_trace {
    kl_trace_ref ref; /* sampled: the request is traced */
    uint64_t t0;      /* read */
    char rid[KL_REQUEST_ID_MAX + 1];
} kl_req_trace;

/* The parts of a shard (struct kl_shard below), by purpose. */

/* Its thread and event loop: other threads reach the shard only by
 * waking the loop (kl_loop_wake), after setting one of the flags below
 * (accept.blocked, conns.global_blocked, done.routed_wake) or pushing onto
 * its completion queue. */
typedef struct kl_shard_loop {
    pthread_t thread;
    bool started;
    kl_loop *loop;
} kl_shard_loop;

/* The listening socket, and accept back-pressure (limits.c): at
 * max_handshaking the listener stops (parked) holding the socket accepted
 * last (held_fd, -1: none; its address in held_sa); blocked asks the
 * shard that frees a handshake slot to wake this one */
typedef struct kl_shard_accept {
    int fd;
    kl_watch watch;
    kl_timer retry;
    bool parked;
    int held_fd;
    struct sockaddr_storage held_sa;
    atomic_bool blocked;
} kl_shard_accept;

/* The connections, the turn's work lists, and the drain at shutdown */
typedef struct kl_shard_conns {
    kl_conn *live; /* doubly linked */
    size_t nlive;
    kl_conn *closed; /* closed, waiting for jobs (zombies) */
    kl_conn *ready, *dirty;
    bool paused_global; /* some connection waits on the process cap */
    atomic_bool global_blocked;
    bool draining;
    bool drain_expired;
    kl_timer drain_timer;
} kl_shard_conns;

/* The completion queue, all under mu: workers push crypto jobs
 * (kl_srv_job, kind KL_JOB_KEY_OP), the router forwarded requests
 * (kl_srv_rjob, routed.c, kind KL_JOB_ROUTED) - both start with a kl_job -
 * and the shard takes them. Forwarded answers sit on a list of their own:
 * the router's batch flush wakes the shard for them (kl_shard_routed_flush,
 * when routed_wake is set), so that answers held together do not wake it
 * one by one - and a crypto completion never waits for that flush (head
 * wakes on its own). */
typedef struct kl_shard_done {
    pthread_mutex_t mu;
    kl_job *head;
    kl_job *routed;
    atomic_bool routed_wake;
} kl_shard_done;

/* What a reload swaps (res.c), and what it asks of the shard */
typedef struct kl_shard_res {
    uint64_t gen;     /* the server generation taken last */
    kl_pin *keys;     /* current key store */
    kl_pin *old_keys; /* retired stores that jobs still use */
    kl_res *tls;      /* current TLS context */
    /* docs/SECURITY.md "Revocation and expiry": bumped when a reload's
     * TLS context trusts other client CAs than the one before; recheck:
     * the open connections are to be verified again (lifetime.c) */
    uint32_t trust_epoch;
    bool trust_recheck;
} kl_shard_res;

/* Where the shard records (metrics_glue.c) */
typedef struct kl_shard_obs {
    kl_metrics_local *mx;   /* this shard's metrics slot; NULL: off */
    kl_trace_ring *tr;      /* this shard's span ring; NULL: tracing off */
    uint64_t busy_reported; /* loop busy time already recorded */
} kl_shard_obs;

/* Rate limits of log lines */
typedef struct kl_shard_logs {
    uint64_t window_ns; /* of warning lines (request.c) */
    uint32_t lines, suppressed;
    uint64_t refusal_ns; /* of limits.c's warnings */
    kl_timer timer;      /* a summary of lines left out (loglimit.c) */
} kl_shard_logs;

/* The shard's budgets. Fast operations run inline while the turn has used
 * less than inline_ns (0: never; kl_shard_may_inline), past it they spill
 * to the pool when a CPU is free; how many ran here and in the pool. held:
 * bytes held for crypto jobs in flight and output buffers (conn.c),
 * against max_buffered / nshards */
typedef struct kl_shard_budget {
    uint64_t inline_ns;
    uint64_t inlined, pooled;
    size_t held;
} kl_shard_budget;

/* Request records freed on this shard, kept for its next requests
 * (kl_shard_job_new): with hundreds of requests waiting on a device, each
 * freed long after it was made, the allocator's per-thread cache
 * overflows and every malloc and free walks its bins. Records of
 * KL_JOB_RECORD bytes (a P-256 or RSA-2048 request with a request ID
 * fits), linked through job.next, at most KL_JOB_RECORDS (1 MiB). None
 * under AddressSanitizer, which must see a record used after its free. */
#define KL_JOB_RECORD 1024
#if defined(__SANITIZE_ADDRESS__)
#define KL_JOB_RECORDS 0u
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KL_JOB_RECORDS 0u
#endif
#endif
#ifndef KL_JOB_RECORDS
#define KL_JOB_RECORDS 1024u
#endif
typedef struct kl_shard_records {
    kl_srv_job *free;
    unsigned n;
} kl_shard_records;

struct kl_shard {
    kl_server *srv;
    int index;
    kl_shard_loop ev;
    kl_shard_accept accept;
    kl_shard_conns conns;
    kl_shard_done done;
    kl_shard_stats st;
    kl_shard_res res;
    kl_shard_obs obs;
    kl_shard_logs logs;
    kl_shard_budget budget;
    kl_shard_records records;
    /* operations of providers that pause ASYNC jobs (asyncjobs.c); NULL
     * until the first one */
    struct kl_shard_async *async;
};

struct kl_server {
    kl_server_opts o;
    char *listen_address;
    uint16_t port;
    int nshards;
    kl_shard *shards;
    int ncpus; /* CPUs this process may run on (kl_shard_may_inline) */
    atomic_uint inflight; /* process-wide requests in flight */
    atomic_bool stopping;
    /* the current key store and TLS context, swapped by kl_server_swap */
    pthread_mutex_t res_mu;
    kl_res *keys_res, *tls_res;
    _Atomic uint64_t gen;
    /* limits.c: admitted connections, and those of them still
     * in their handshake */
    atomic_uint nconns, nhandshaking;
    struct kl_src_table *src_caps; /* per source; NULL: not tracked */
};

static inline const char *kl_conn_peer_label(const kl_conn *c)
{
    return c->peer[0] ? c->peer : "-";
}

/* Why a connection must not be read now (protocol P8 limits). */
enum {
    KL_CAN_READ = 0,
    KL_NOT_OPEN,
    KL_CONN_LIMIT,
    KL_PROCESS_LIMIT,
    KL_BUDGET_LIMIT /* the shard's share of max_buffered */
};

/* conn.c */
int kl_conn_read_block(const kl_conn *c);
/* Closes with one log line at level: "<what>: <why>". */
void kl_conn_close_with(kl_conn *c, int level, const char *what,
                        const char *why);
/* loglimit.c: kl_conn_close_with for a kind of line a peer can cause at
 * will, rate-limited (docs/OPERATIONS.md, Logs); a line left out is
 * counted in keylessd_log_suppressed_total{kind}. */
void kl_conn_close_limited(kl_conn *c, kl_metrics_log_kind kind, int level,
                           const char *what, const char *why);
/* Writes the summaries of the windows that are over (force: all, at
 * shutdown); returns when the next is due (0: none). Any thread. */
uint64_t kl_loglimit_flush(uint64_t now_ns, bool force);
/* The shard's logs.timer. */
void kl_shard_loglimit_timer(kl_loop *l, kl_timer *t);
/* false: max_handshaking is reached and fd was left to the caller
 * (limits.h KL_ADMIT_WAIT); true: fd became a connection or was closed */
bool kl_conn_accept(kl_shard *s, int fd, const struct sockaddr *sa);
void kl_conn_read(kl_conn *c);
void kl_conn_flush(kl_conn *c);
void kl_conn_complete(kl_conn *c, kl_srv_job *j);
void kl_conn_update_interest(kl_conn *c);
void kl_conn_drain(kl_conn *c);
void kl_conn_close(kl_conn *c);
void kl_conn_free(kl_conn *c);
/* max_buffered: brings shard->budget.held up to date with c's output
 * buffer; the shard gave back n held bytes. */
void kl_conn_held_sync(kl_conn *c);
void kl_shard_held_release(kl_shard *s, size_t n);
bool kl_conn_done_draining(kl_conn *c);

/* request.c */
void kl_conn_handle_request(kl_conn *c, const kl_header *hdr,
                            const uint8_t *body, size_t len);
/* Queues the error response (protocol P6) that answers err, logged
 * (rate-limited) with the request id and detail. */
void kl_conn_answer_error(kl_conn *c, uint32_t id, kl_status err,
                          const char *request_id, const char *detail);
/* The P6 text that names the answer of err in logs, traces and metrics
 * (docs/PROTOCOL.md P6: the reference's texts). */
static inline const char *kl_status_label(kl_status err)
{
    return kl_err_text(kl_status_to_p6(err));
}

/* metrics_glue.c. Every call accepts s->obs.mx == NULL. */
/* keylessd_connections{state}: c moves to state `to`. */
void kl_conn_set_state(kl_conn *c, kl_conn_state to);
/* A request was read (t0: kl_now_ns() then, or 0 with metrics off). */
void kl_mx_request_read(kl_shard *s, uint8_t opcode);
/* A request got its answer (or was dropped with its connection): in
 * flight - 1, and the exec and total histograms. */
void kl_mx_request_done(kl_shard *s, uint8_t opcode, kl_status err,
                        uint64_t t0_ns, uint64_t exec_ns);
/* The monotonic clock when metrics are on, else 0 (no clock read). */
uint64_t kl_mx_now(const kl_shard *s);
/* The pool's done callback when metrics are on: notes when the job ran,
 * then kl_shard_job_done. */
void kl_mx_job_done(kl_job *job);
/* A crypto job came back: queue wait, exec and total time. */
void kl_mx_job_complete(kl_shard *s, const kl_srv_job *j);
/* A TLS handshake failed, with the text kl_tls_last_error gave. */
void kl_mx_handshake_failed(kl_shard *s, int reason_or_neg,
                            const char *tls_error);
/* The shard's loop busy time since the last call (before sleeping). */
void kl_mx_loop_turn(kl_shard *s);
/* A client's certificate after its handshake: its expiry series. */
void kl_mx_peer_cert(kl_conn *c);
/* The key store was searched from tk (kl_mx_now) on: the key-load
 * histogram and the key-lookup span (of the request rt, when traced). */
void kl_mx_key_lookup(kl_shard *s, const kl_req_trace *rt, uint64_t tk,
                      const uint8_t *ski, bool found);

/* Tracing (metrics_glue.c, docs/TRACING.md). With tracing off
 * (s->obs.tr NULL) each of these is one predictable branch. */
void kl_tr_request_read_(kl_conn *c, kl_req_trace *rt, const kl_request *req,
                         const kl_req_context *ctx, uint64_t t0_ns);
void kl_tr_job_attach_(kl_shard *s, const kl_req_trace *rt, kl_srv_job *j);
void kl_tr_request_end_(kl_conn *c, const kl_req_trace *rt, kl_status err);
/* A forwarded request came back (routed.c): its route span (sent -> done,
 * id route_span) and its server span. */
void kl_tr_routed_spans(kl_shard *s, const kl_conn *c, const kl_trace_ref *ref,
                        uint64_t route_span, uint8_t opcode, kl_status err,
                        uint64_t t0, uint64_t sent, uint64_t done,
                        const char *rid);
/* A request parsed (after its tag 0x16): decides whether it is traced
 * (tag 0x15, sampling) and fills rt, its trace state (rt->ref.sampled is
 * false before, and stays so unless it is traced). */
static inline void kl_tr_request_read(kl_conn *c, kl_req_trace *rt,
                                      const kl_request *req,
                                      const kl_req_context *ctx, uint64_t t0_ns)
{
    if (c->shard->obs.tr)
        kl_tr_request_read_(c, rt, req, ctx, t0_ns);
}
/* The request rt becomes job j (before kl_pool_submit). */
static inline void kl_tr_job_attach(kl_shard *s, const kl_req_trace *rt,
                                    kl_srv_job *j)
{
    if (s->obs.tr)
        kl_tr_job_attach_(s, rt, j);
}
/* The request rt was answered at once with err (its server span ends
 * now); a job or the router ends the span of one answered later. */
static inline void kl_tr_request_end(kl_conn *c, const kl_req_trace *rt,
                                     kl_status err)
{
    if (c->shard->obs.tr)
        kl_tr_request_end_(c, rt, err);
}

/* routed.c: requests for keys held elsewhere (docs/ROUTING.md) */
/* Forwards req through the server's router: KL_OK, answered later through
 * (sealed_policy: the key store holds the key sealed for other servers,
 * with this policy - router.h kl_route_req; NULL otherwise)
 * the shard's completion queue and counted in flight like a crypto job. A
 * request refused here (access lists, out of memory) is answered at once
 * and the status of its answer returned, for the request metrics. */
kl_status kl_routed_submit(kl_conn *c, const kl_request *req,
                           const kl_req_context *ctx, const kl_req_trace *rt,
                           uint64_t t0_ns, const char *sealed_policy);
/* On the shard: a forwarded request came back through the queue. */
void kl_routed_complete(kl_shard *s, kl_job *j);
/* After the shard stopped (kl_shard_destroy): frees it unanswered. */
void kl_routed_discard(kl_job *j);
/* The connection closed: nothing more is sent for its forwarded requests
 * (each still comes back once, and is then freed). */
void kl_routed_cancel_all(kl_conn *c);

/* res.c */
kl_res *kl_res_new(void *obj, void (*free_fn)(void *obj));
void kl_res_release(kl_res *r);
/* Another reference on r (any thread); returns r. */
kl_res *kl_res_ref(kl_res *r);
void kl_res_free_keystore(void *obj);
void kl_res_free_tls(void *obj);
/* Takes the server's current store and context if a reload replaced them
 * since the last call (one relaxed load when nothing changed). */
void kl_shard_sync(kl_shard *s);
static inline const kl_keystore *kl_shard_keys(const kl_shard *s)
{
    return (const kl_keystore *)s->res.keys->res->obj;
}
static inline kl_tls_ctx *kl_shard_tls(const kl_shard *s)
{
    return (kl_tls_ctx *)s->res.tls->obj;
}
/* A job starts or stops using the shard's current store. */
kl_pin *kl_pin_get(kl_shard *s);
void kl_pin_put(kl_shard *s, kl_pin *p);
/* Drops everything the shard holds (kl_shard_destroy). */
void kl_shard_release_res(kl_shard *s);

/* lifetime.c: connections whose client certificate stops being trusted
 * (docs/SECURITY.md "Revocation and expiry") */
/* After the handshake: when the client certificate expires. */
void kl_conn_lifetime_start(kl_conn *c);
/* When the open connection's timer is due next: its idle timeout or its
 * certificate's expiry, whichever comes first. */
uint64_t kl_conn_next_due(const kl_conn *c);
/* Whether an open connection may go on (at now, kl_now_ns): false when its
 * certificate expired or a reload's client CA no longer trusts it - it is
 * then draining (no more requests read; those in flight are answered,
 * then it closes), logged and counted. */
bool kl_conn_lifetime_ok(kl_conn *c, uint64_t now);
/* On the shard's thread after a reload changed the client CA
 * (s->res.trust_recheck): verifies every open connection again. */
void kl_shard_recheck_trust(kl_shard *s);

/* shard.c */
void kl_shard_mark_ready(kl_shard *s, kl_conn *c);
void kl_shard_mark_dirty(kl_shard *s, kl_conn *c);
KL_WUR kl_status kl_shard_init(kl_shard *s, kl_server *srv, int index,
                               char *err, size_t errlen);
void kl_shard_destroy(kl_shard *s);
void *kl_shard_main(void *arg);
/* The pool's done callback, on a worker thread: queue the job to its shard
 * and wake the shard. */
void kl_shard_job_done(kl_job *job);
/* The router's batch flush (router.h kl_router_set_flush; arg: the
 * kl_server): wakes the shards that got forwarded answers. */
void kl_shard_routed_flush(void *srv);
/* On the shard: a crypto job came back (or ran inline): answer it, drop
 * its pin, free it. */
void kl_shard_finish_job(kl_shard *s, kl_srv_job *sj);
/* A request record of size bytes (uninitialised), on the shard's thread;
 * NULL: out of memory. kl_shard_job_free gives it back. */
kl_srv_job *kl_shard_job_new(kl_shard *s, size_t size);
void kl_shard_job_free(kl_shard *s, kl_srv_job *sj);
/* Frees the records kept (kl_shard_destroy). */
void kl_shard_records_free(kl_shard *s);

/* asyncjobs.c: runs j (a key of a provider that pauses ASYNC jobs,
 * kl_crypto_is_async) on this shard. KL_ASYNC_DONE: finished, as if
 * inline; KL_ASYNC_PAUSED: j->job.done comes later on this thread;
 * KL_ASYNC_FULL: not run (max_async_jobs, or ASYNC unavailable) - the pool
 * takes it. */
kl_async_result kl_shard_async_run(kl_shard *s, kl_srv_job *j);
/* In the loop's wake function: resumes the operations whose provider
 * called back (crypto/async.h kl_async_poll). */
unsigned kl_shard_async_poll(kl_shard *s);
unsigned kl_shard_async_busy(const kl_shard *s);
void kl_shard_async_get_stats(const kl_shard *s, kl_async_stats *out);
/* On the shard's thread, after its loop stopped. */
void kl_shard_async_free(kl_shard *s);
/* Whether a fast operation may run inline on the shard now (the turn's
 * inline budget). */
bool kl_shard_may_inline(const kl_shard *s);

#endif
