/* SPDX-License-Identifier: Apache-2.0 */
/* Inside the router (router.h has the rules). Files:
 * - router.c: creation, the loop thread, the inbox from other threads,
 *   requests and their attempts, cancel;
 * - remote.c: remotes and their upstream connections (kl_targets), probes,
 *   latency (EWMA, p99) and the per-attempt timeout, the fd budget;
 * - select.c: ordering the candidates for a key (a pure function);
 * - forward.c: the request sent upstream (hops + 1, everything kept);
 * - control.c: the table: loading, the mtime poll, DNS refresh, install.
 * - sealed.c: sealed keys held elsewhere: per sealing policy, the table's
 *   servers whose attributes satisfy it.
 *
 * Threading: remotes, connections and requests' attempt state belong to
 * the router thread; mu guards what other threads touch (a request's
 * cancelled flag and its current attempt, the pending table, the stats).
 * The shard's hot path takes neither mu nor any lock the router thread
 * holds across a system call: kl_router_has_key reads the published table
 * without a lock (readers counter, see router.c), and kl_router_route
 * takes only inbox_mu, held for a few pointer writes. */
#ifndef KL_ROUTER_ROUTER_INT_H
#define KL_ROUTER_ROUTER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "core/hmap.h"
#include "core/time.h"
#include "keyless/client.h"
#include "loop/loop.h"
#include "metrics/trace.h"
#include "router/router.h"
#include "router/table.h"

/* A duration of the options as the int milliseconds libkeyless and the
 * resolver take. */
static inline int kl_rt_ms(uint64_t ns)
{
    uint64_t ms = ns / KL_NS_PER_MS;
    return ms > (uint64_t)INT32_MAX ? INT32_MAX : (int)ms;
}

#define KL_RT_SAMPLES 128 /* latency window per remote, for the p99 */
#define KL_RT_FDS_PER_CONN                                                     \
    4 /* a kl_target: socket, epoll, eventfd, timerfd                          \
       */
#define KL_RT_MAX_CONNS 64
#define KL_RT_MAX_ATTEMPTS 8
/* Remotes one request may try, counted attempts and those a lost
 * connection ended too soon to count (router.c, kl_rt_may_try) */
#define KL_RT_MAX_TRIED 16
#define KL_RT_CTX_MAX 1024

typedef struct kl_remote kl_remote;
typedef struct kl_upconn kl_upconn;
typedef struct kl_rreq kl_rreq;

/* The latest send time of an answered request, per key and operation, on
 * one connection (stall.c: an attempt overtaken by later requests for the
 * same work is lost). Direct-mapped by SKI; sent_ns 0: empty. */
#define KL_RT_ANSWERED_SLOTS 256
typedef struct kl_rt_answered {
    uint64_t sent_ns;
    uint8_t ski[KL_SKI_LEN];
    uint8_t opcode;
} kl_rt_answered;

/* One upstream connection: a kl_target with a single server. */
struct kl_upconn {
    kl_remote *rm;
    kl_target *t;
    kl_watch watch;
    bool watching;
    bool dead; /* to be replaced/freed by the before-sleep hook */
    uint32_t inflight;
    unsigned probe_failures;
    bool probing;
    bool probe_fresh; /* sent before the connection was up */
    uint64_t probe_handle;
    uint64_t probe_sent_ns;
    /* requests in flight on it (doubly linked): watched ones oldest first,
     * and those past their attempt timeout with nowhere else to go, which
     * wait for their answer up to the request's deadline (stall.c) */
    kl_rreq *attempts, *attempts_tail, *waiting;
    uint64_t progress_ns; /* when it last answered anything (or pong) */
    kl_timer stall_timer; /* the attempt timeout (stall.c) */
    uint64_t idle_since;  /* kl_now_ns() when inflight last reached 0 */
    /* lost attempts (stall.c): what was answered, the latest send time
     * among it, and the next check for overtaken attempts */
    kl_rt_answered answered[KL_RT_ANSWERED_SLOTS];
    uint64_t answered_max_ns;
    /* attempts sent at or before this were old together with more than
     * LOST_ALONE_MAX others: a queue, whose tail is never taken for lost
     * as it drains */
    uint64_t queue_ns;
    bool check_pending;
    uint64_t check_at, checked_ns;
};

struct kl_remote {
    kl_router *r;
    kl_remote *next;
    char name[KL_RT_NAME_MAX + 8];
    char host[256];
    uint16_t port;
    char region[KL_RT_NAME_MAX + 1];
    int priority;
    bool in_table;
    bool on_demand; /* kl_rt_server's: no connection until asked for */
    bool up;
    bool measured;
    double ewma_ns;
    uint32_t samples_us[KL_RT_SAMPLES];
    size_t nsamples, sample_pos, since_p99;
    uint64_t p99_ns; /* 0: no sample yet */
    kl_upconn *conns[KL_RT_MAX_CONNS];
    unsigned nconns;
    uint64_t sent, ok, failed, inflight;
    uint64_t lost;        /* attempts overtaken and given up (stall.c) */
    uint64_t idle_closed; /* extra connections closed for idleness */
};

/* A sealing policy and the current table's servers that satisfy it
 * (sealed.c). Router thread only. */
typedef struct kl_rt_pclass {
    char *text;
    size_t len;
    uint64_t hash;
    void *policy;      /* policy_ops->parse's; NULL: satisfied by none */
    uint32_t *servers; /* indices into the table's servers */
    size_t n;
    unsigned gen; /* the table they were computed for (table_gen) */
} kl_rt_pclass;

struct kl_rreq {
    kl_router *r;
    kl_rreq *inbox_next;
    kl_rreq *live_prev, *live_next; /* the router's live requests */
    kl_rreq *aprev, *anext;         /* attempts on conn */
    /* guarded by r->mu */
    bool cancelled;
    bool queued;     /* in the inbox; guarded by r->inbox_mu */
    kl_upconn *conn; /* current attempt, NULL between attempts */
    uint64_t thandle;
    bool waiting;     /* on conn->waiting rather than conn->attempts */
    uint64_t sent_ns; /* when the current attempt was handed to conn */
    /* router thread only */
    bool started;
    bool shed; /* over max_inflight: answered `internal error` at once */
    kl_remote *rm;
    uint64_t deadline_ns;
    uint64_t t0_ns; /* kl_router_route: the answer's hold is 1% of now - t0 */
    uint32_t hops;
    unsigned attempts, not_found;
    unsigned uncounted; /* attempts max_attempts does not count */
    kl_remote *tried[KL_RT_MAX_TRIED];
    kl_route_done_fn done;
    void *arg;
    const char *policy;   /* a sealed key's policy text (in data), or NULL */
    kl_request_spec spec; /* points into data */
    kl_trace_attempt tra; /* router thread only */
    uint8_t data[];
};

/* Whether q may make one more attempt. max_attempts counts the attempts
 * that timed out or were answered with an error; an attempt ended by a
 * lost connection (the remote or the path to it went away; it works on
 * nothing more) is not counted, so that a request fails over past a data
 * centre whose servers all went at once, each lost in turn as the request
 * reaches it (docs/ROUTING.md "How it works", Moving on). KL_RT_MAX_TRIED
 * distinct remotes and the deadline bound every attempt, counted or not. */
static inline bool kl_rt_may_try(const kl_rreq *q, int max_attempts)
{
    return q->attempts < KL_RT_MAX_TRIED &&
           q->attempts - q->uncounted < (unsigned)max_attempts;
}

/* Counters: written by the router thread (and kl_router_route), read by
 * anyone. */
typedef struct kl_rt_counters {
    _Atomic uint64_t routed, answered, no_route, not_found, hop_limit, expired,
        cancelled, retries, reloads, reload_errors, sealed_routed,
        sealed_no_remote;
    _Atomic unsigned sealed_policies;
    _Atomic unsigned generation;
} kl_rt_counters;
#define KL_RT_INC(r, f)                                                        \
    atomic_fetch_add_explicit(&(r)->st.f, 1, memory_order_relaxed)

/* A kl_router_remote_stats call waiting for the router thread. */
typedef struct kl_rt_snap {
    kl_remote_stats *out;
    size_t max, n;
    bool done;
} kl_rt_snap;

struct kl_router {
    kl_router_opts o;
    char *table_file, *cert_file, *key_file, *ca_file, *server_name;
    char *dns_server;
    kl_loop *loop;
    pthread_t thread;
    bool thread_started;
    kl_timer probe_timer;
    /* the batch flush (kl_router_set_flush): fn and arg guarded by mu;
     * the due time is the router thread's */
    void (*flush_fn)(void *arg);
    void *flush_arg;
    bool flush_pending;
    uint64_t flush_due_ns;
    kl_timer flush_timer;
    pthread_mutex_t mu;
    /* the inbox: the only lock a shard takes to hand a request over, never
     * held across anything but pointer writes (lock order: mu, then
     * inbox_mu) */
    pthread_mutex_t inbox_mu;
    kl_rreq *inbox_head, *inbox_tail;
    kl_rt_table *pending; /* a new table for the router thread */
    char **prep;          /* policies to prepare (kl_router_prepare_policies) */
    size_t nprep;
    /* tables handed over / installed, so that kl_router_new and
     * kl_router_reload return once theirs is in effect (guarded by mu) */
    uint64_t handed_gen, installed_gen;
    pthread_cond_t install_cv;
    bool stopping;
    bool stopped;       /* the loop has ended */
    kl_rt_table *table; /* current; router thread only */
    /* the same table for kl_router_has_key, read without a lock: a reader
     * counts itself in readers[epoch & 1] before loading the pointer. A
     * replaced table joins retired_next; the router thread flips the
     * epoch and frees what was retired before the flip (retired_wait)
     * once the half the readers counted in before the flip is 0: a grace
     * period, waited for without spinning (kl_rt_retire_reap) */
    _Atomic(kl_rt_table *) published;
    /* sealing policies asked for (sealed.c), router thread only; the
     * install count they are computed against */
    kl_hmap pclasses;
    unsigned table_gen;
    atomic_uint epoch;
    atomic_uint readers[2];
    kl_rt_table *retired_wait, *retired_next;
    _Atomic unsigned nretired; /* tables on both lists (stats) */
    kl_remote *remotes;
    kl_rreq *live;       /* started requests; guarded by mu */
    atomic_size_t nlive; /* routed and not finished (max_inflight) */
    _Atomic unsigned fds;
    kl_rt_counters st;
    kl_rt_snap *snap; /* guarded by mu; answered through snap_cv */
    pthread_cond_t snap_cv;
    /* control thread (control.c) */
    pthread_t control;
    bool control_started;
    pthread_mutex_t build_mu; /* one table build at a time */
    pthread_cond_t control_cv;
    bool control_stop;
    struct timespec table_mtime;
    ino_t table_ino;
    off_t table_size;
    uint64_t servers_sig;
    bool has_dns;
    uint64_t dns_next_ms; /* kl_now_ms() when the dns: names are due */
    uint32_t dns_ttl_s;   /* the last good resolution's smallest TTL */
    unsigned dns_failing; /* failed refreshes in a row */
};

/* router.c */
void kl_rt_finish(kl_rreq *q, kl_status err, const uint8_t *payload,
                  size_t len);
void kl_rt_next_attempt(kl_rreq *q);
/* An attempt ended without an answer (connection lost or replaced). */
void kl_rt_attempt_failed(kl_rreq *q);

/* remote.c */
kl_remote *kl_remote_new(kl_router *r, const kl_rt_server *s);
void kl_remote_free(kl_remote *rm);
/* Opens the first connection and probes it (at install). */
void kl_remote_start(kl_remote *rm);
/* The least loaded live connection, adding one when all pass the
 * threshold and the budget allows; NULL when none can be had. */
kl_upconn *kl_remote_conn(kl_remote *rm);
void kl_remote_sample(kl_remote *rm, uint64_t rtt_ns);
/* An answer after latency_ns (for the EWMA); wait_ns, when not 0, is
 * how long its connection stayed silent after it was sent (for the p99
 * window: the attempt timeout). */
void kl_remote_sample2(kl_remote *rm, uint64_t latency_ns, uint64_t wait_ns);
int kl_remote_timeout_ms(const kl_remote *rm);
void kl_remote_probe_all(kl_router *r);
/* Frees dead connections (and removed remotes with nothing in flight). */
void kl_remote_reap(kl_router *r);
void kl_upconn_attach(kl_upconn *c, kl_rreq *q);
void kl_upconn_detach(kl_upconn *c, kl_rreq *q);
/* The connection answered something (an attempt's answer or a pong) for
 * a request sent at since_ns; returns now - since_ns when nothing was
 * answered on it since then (a sample for the timeout window), else 0. */
uint64_t kl_upconn_progress(kl_upconn *c, uint64_t since_ns);
/* "I/O error (127.0.0.1 port 2407: Connection refused)": a failed
 * attempt's status with the connection's last failure, for the log. */
const char *kl_upconn_why(kl_upconn *c, kl_status st, char *buf, size_t len);
/* The same for q's answer (any P6 answer), which also notes that the
 * connection has answered q's work up to q's send time (stall.c). */
uint64_t kl_upconn_answered(kl_upconn *c, const kl_rreq *q);

/* stall.c: the attempt timeout. Arms c's timer for its oldest watched
 * attempt (attach calls it); its callback fails stalled attempts over. */
void kl_rt_stall_init(kl_upconn *c);
void kl_rt_stall_arm(kl_upconn *c);
/* q's connection answered it: notes it and, when an older attempt may
 * have been overtaken, schedules a check. */
void kl_rt_stall_answered(kl_upconn *c, const kl_rreq *q);
/* Moves q (watched on c) to c's waiting list (mu held). */
void kl_upconn_wait(kl_upconn *c, kl_rreq *q);
void kl_remote_stats_fill(const kl_remote *rm, kl_remote_stats *out);

/* select.c: the candidates for a key, best first, excluding those in
 * tried[]; returns how many (at most max). */
size_t kl_rt_candidates(const kl_router *r, const kl_rt_table *t,
                        const kl_rt_key *k, bool has_compliance,
                        uint8_t compliance, kl_remote *const *tried,
                        size_t ntried, kl_remote **out, size_t max);
/* Orders remotes best first (exposed for the unit test). */
void kl_rt_order(kl_remote **rms, size_t n, int tolerance_pct);

/* The same for a sealed key: the eligible servers (indices into t's
 * servers) that are remotes, satisfy the compliance byte and are not in
 * tried[]. */
size_t kl_rt_candidates_sealed(const kl_router *r, const kl_rt_table *t,
                               const uint32_t *servers, size_t nservers,
                               bool has_compliance, uint8_t compliance,
                               kl_remote *const *tried, size_t ntried,
                               kl_remote **out, size_t max);

/* sealed.c: sealed keys held elsewhere (router.h kl_rt_policy_ops).
 * The servers of t (indices, into out: room for t->nservers) that open
 * sealed keys and whose attributes satisfy policy; returns how many. */
size_t kl_rt_eligible(const kl_rt_table *t, const kl_rt_policy_ops *ops,
                      const void *policy, uint32_t *out);
/* The class of a policy text, computed for the current table; NULL when
 * out of memory. Router thread. */
kl_rt_pclass *kl_rt_pclass_get(kl_router *r, const char *text);
/* A new table is current: every class is computed again. Router
 * thread. */
void kl_rt_pclass_refresh(kl_router *r);
void kl_rt_pclass_init(kl_router *r);
void kl_rt_pclass_free_all(kl_router *r);

/* forward.c */
size_t kl_rt_forward_size(const kl_request *req);
/* Fills spec with copies of req's items in buf (kl_rt_forward_size
 * bytes) and the request context, hops + 1, in ctx_json. */
KL_WUR kl_status kl_rt_forward_fill(const kl_request *req,
                                    const kl_req_context *ctx,
                                    kl_request_spec *spec, uint8_t *buf,
                                    char *ctx_json, size_t cap);

/* Retires a replaced table: freed once no kl_router_has_key can still be
 * reading it. Router thread. */
void kl_rt_retire(kl_router *r, kl_rt_table *old);
/* Frees retired tables no kl_router_has_key can still be reading, and
 * starts the next grace period; all of them when force (the router
 * stopped). Never waits. Router thread. */
void kl_rt_retire_reap(kl_router *r, bool force);

/* Waits (up to a few seconds) until the router thread has installed
 * every table handed over so far. Not on the router thread. */
void kl_rt_wait_installed(kl_router *r);

/* control.c */
KL_WUR kl_status kl_rt_control_start(kl_router *r, char *err, size_t errlen);
void kl_rt_control_stop(kl_router *r);
/* On the router thread: makes t current, reconciling remotes. */
void kl_rt_install(kl_router *r, kl_rt_table *t);

#endif
