/* SPDX-License-Identifier: Apache-2.0 */
/* Inside a kl_target (the rules are in include/keyless/client.h). Four
 * files share this state, each one concern:
 * - target.c: creation and options, the descriptors behind kl_async_fd,
 *   fork detection, one round of work (kl_async_process), introspection;
 * - tconn.c: connections - connect, handshake, backoff, writing, reading,
 *   pings, failure;
 * - treq.c: requests - the unsent queue, deadlines, encoding with the budget
 *   left, completion, submit and cancel;
 * - tblock.c: the blocking calls (kl_target_call, kl_target_connect).
 *
 * Everything happens under the target's lock; completed requests collect
 * on a list whose callbacks run once the lock is released, so a callback
 * may call back into the target. One epoll set holds the sockets, an
 * eventfd (work queued by another thread) and a timerfd (the earliest
 * deadline, connect timeout, backoff or ping), and is the descriptor the
 * caller polls.
 *
 * A request is encoded only when it is about to be written (so the
 * deadline_ms it carries is the budget left at write time, protocol P9)
 * and only when the previous bytes of that connection have all left, so
 * requests wait unsent in the target's queue - where a deadline or a
 * cancel drops them before they cost the server anything. */
#ifndef KL_CLIENT_TARGET_INT_H
#define KL_CLIENT_TARGET_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "client/budget.h"
#include "client/link.h"
#include "client/u64map.h"
#include "core/time.h"
#include "keyless/client.h"

typedef enum kl_cstate {
    CS_IDLE = 0,   /* no connection (maybe in backoff until retry_at) */
    CS_CONNECTING, /* TCP connect in progress */
    CS_HANDSHAKE,  /* TLS handshake in progress */
    CS_READY,
} kl_cstate;

typedef struct kl_treq kl_treq;

/* One key server and the connection to it. */
typedef struct kl_tconn {
    kl_target *t;
    int idx;
    char *host;
    uint16_t port;
    kl_cstate st;
    kl_link ln;         /* socket, TLS, pipeline */
    kl_u64map inflight; /* wire id -> kl_treq (pings are not in it) */
    uint32_t events;    /* registered with epoll (0: not registered) */
    short io_want;      /* what a blocked TLS write waits for */
    uint64_t deadline;  /* connect/handshake must finish by then */
    uint64_t retry_at;  /* backoff: no reconnect before */
    unsigned failures;  /* consecutive, for the backoff */
    uint64_t failed_ns; /* last failure (kl_target_connect's verdict) */
    kl_status fail_st;  /* and its status */
    bool fail_connect;  /* it failed before the connection was up */
    uint64_t last_write_ns, last_read_ns;
    bool ping_out;
    uint32_t ping_id;
    uint64_t ping_deadline;
    char err[200];
} kl_tconn;

struct kl_treq {
    uint64_t handle;
    kl_result_cb cb;
    void *arg;
    uint64_t submit_ns, deadline_ns;
    bool queued;    /* in the unsent queue (else in flight on conn) */
    kl_tconn *conn; /* in flight on */
    uint32_t id;    /* wire id there */
    unsigned attempts;
    int server;
    kl_treq *prev, *next; /* unsent queue, then the done list */
    kl_result res;
    uint8_t *resp; /* owned response message */
    kl_request_spec spec;
    kl_req_context ctx; /* caller's context members, deadline added later */
    /* the spec's bytes follow */
};

struct kl_target {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* blocking callers waiting for their turn */
    bool driving;      /* a blocking caller is polling */
    pid_t pid;         /* process that owns the descriptors; 0: none yet */
    uint64_t fork_gen; /* forks seen when pid was last checked */
    kl_target_opts o;
    kl_tls_ctx *ctx;
    char *server_name;
    kl_tconn *conns;
    size_t nconns;
    int epfd, evfd, tfd;
    bool woken;             /* evfd signalled and not yet drained */
    uint64_t timer_at;      /* what tfd is armed for (0: disarmed) */
    unsigned connecting;    /* kl_target_connect callers: connect unasked */
    kl_treq *qhead, *qtail; /* unsent, oldest first */
    size_t queued;
    kl_u64map live; /* handle -> kl_treq, every uncompleted request */
    uint64_t next_handle;
    uint64_t next_check; /* no deadline passes before (scan cache) */
    kl_treq *done_head, *done_tail;
    kl_retry_budget budget;
    uint64_t rnd;
    kl_target_stats stats;
    bool sigpipe_ignored; /* kl_tgt_set_sigpipe_ignored: no guard needed */
};

static inline uint64_t kl_tgt_after_ms(uint64_t now, int ms)
{
    return now + kl_ms_to_ns((uint64_t)ms);
}

/* target.c */
uint64_t kl_tgt_random(kl_target *t);
/* Notices a fork (cheaply: getpid() only after the C library's fork ran
 * the atfork handler) and, in a child, drops what was inherited. */
void kl_tgt_check_fork(kl_target *t);
/* The epoll set, eventfd and timerfd, created on first use. */
KL_WUR kl_status kl_tgt_runtime(kl_target *t);
/* Makes kl_async_fd readable (another thread queued work). */
void kl_tgt_wake(kl_target *t);

/* tconn.c */
void kl_tgt_conn_init(kl_tconn *c, kl_target *t, int idx);
/* Drops the connection's state without writing anything (fork, free). */
void kl_tgt_conn_forget(kl_tconn *c);
/* Gives up on a connection: its requests are retried or fail with st. */
void kl_tgt_conn_fail(kl_target *t, kl_tconn *c, kl_status st, const char *why);
/* Makes progress on whatever the connection is doing. */
void kl_tgt_conn_step(kl_target *t, kl_tconn *c, uint64_t now);
/* Writes what the connection has encoded. */
void kl_tgt_conn_write(kl_target *t, kl_tconn *c);
/* Sets epoll interest after a round; lowers *at to the connection's next
 * timed event (connect deadline, backoff end, ping). */
void kl_tgt_conn_rearm(kl_target *t, kl_tconn *c, uint64_t now, uint64_t *at);
/* With work waiting (or a kl_target_connect caller) and no connection,
 * connects to the first server out of backoff (sticky failover). */
void kl_tgt_ensure_connection(kl_target *t, uint64_t now);
kl_tconn *kl_tgt_ready_conn(kl_target *t);
/* Nobody waits for this id any more: its answer is dropped on arrival. */
void kl_tgt_drop_answer(kl_tconn *c, uint32_t id);

/* treq.c */
void kl_tgt_q_push(kl_target *t, kl_treq *r, bool front);
/* Moves a request (out of the queue and of any connection) to the done
 * list with status st. */
void kl_tgt_complete(kl_target *t, kl_treq *r, kl_status st);
void kl_tgt_req_free(kl_treq *r);
/* Frees every request without callbacks (fork, free). */
void kl_tgt_drop_requests(kl_target *t);
/* Expires requests whose deadline passed. */
void kl_tgt_expire(kl_target *t, uint64_t now);
/* Completes, with the last failure's status, the queued requests that
 * waiting cannot help: every server failed to connect since they came, or
 * none may be tried again before their deadline. */
void kl_tgt_fail_unreachable(kl_target *t, uint64_t now);
/* Moves queued requests onto c and writes them. */
void kl_tgt_fill(kl_target *t, kl_tconn *c, uint64_t now);
/* Runs the callbacks of a done list (lock not held) and frees it. */
void kl_tgt_deliver(kl_treq *list);

/* For a caller that drives the target from one thread and processes it
 * itself after submitting (keyless-bench): no eventfd wake-up per round
 * (two system calls) - kl_tgt_flush must follow. */
KL_WUR kl_status kl_tgt_submit_local(kl_target *t, const kl_request_spec *spec,
                                     int timeout_ms, kl_result_cb cb,
                                     void *arg);
/* Writes what was submitted (kl_async_process without reading the
 * sockets: the caller's poller reports answers, and a read that finds
 * nothing costs a system call). */
KL_WUR kl_status kl_tgt_flush(kl_target *t);
/* The process ignores SIGPIPE for good (SIG_IGN, set once by the caller):
 * the target skips its per-round signal check. */
void kl_tgt_set_sigpipe_ignored(kl_target *t);

#endif
