/* SPDX-License-Identifier: Apache-2.0 */
/* Worker pool executing crypto jobs by cost class (docs/DESIGN.md "The
 * threads"): each
 * class has its own bounded queue; workers prefer the fast class, and long
 * slow jobs (RSA above 2048 bits) can never occupy every worker, so a burst
 * of RSA-4096 cannot delay ECDSA behind it; short ones (RSA-2048) may, while
 * no fast job is queued (pool_sched.c). Jobs on PKCS#11 keys (the blocking
 * class) run on their own threads only: a slow or stalled HSM never holds a
 * fast or slow worker. Completion is reported through the job's callback on a
 * pool thread; the callback hands the job back to its owner (e.g. through a
 * shard's completion queue) and must not block. A blocking-class job with a
 * deadline is answered by its deadline even when the token call it made has not
 * returned (the late result is dropped; the pool no longer touches the job
 * or its buffers once the callback ran). */
#ifndef KL_CRYPTO_POOL_H
#define KL_CRYPTO_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crypto/ops.h"

typedef struct kl_job kl_job;
typedef void (*kl_job_done_fn)(kl_job *job);

/* What a job is. The pool runs key operations only; a kl_job is also what
 * an owner's queue carries (a shard's completion queue, src/engine), where
 * other kinds travel beside them. */
typedef enum kl_job_kind {
    KL_JOB_KEY_OP = 0, /* an operation on key, run by the pool (or inline) */
    KL_JOB_ROUTED,     /* a request forwarded to the key server that holds
                          the key (src/engine/routed.c): key is NULL, never
                          submitted to the pool */
} kl_job_kind;

struct kl_job {
    kl_job *next; /* owned by whoever holds the job */
    const kl_key *key;
    uint8_t opcode;
    kl_job_kind kind; /* 0 (zeroed): KL_JOB_KEY_OP */
    const uint8_t *in;
    size_t in_len;
    uint8_t *out;
    size_t out_cap;
    size_t out_len;       /* set by the pool */
    uint64_t started_ns;  /* set by the pool: monotonic time its crypto
                             began (0: it never ran - shed, abandoned) */
    kl_status err;        /* set by the pool: KL_OK or the P6 answer */
    uint64_t deadline_ns; /* monotonic; 0 = none. Past it: KL_E_INTERNAL
                             without running the crypto (P6 shedding); a
                             token key's wait for a session ends there */
    /* NULL, or set (by the submitter, any time) when nobody waits for the
     * answer any more - the client has gone: the job is then answered
     * KL_E_INTERNAL without running. Must stay valid until
     * the done callback. */
    const _Atomic bool *abandoned;
    kl_job_done_fn done;
    void *owner; /* free for the submitter */
    /* Optional, for jobs on token keys: what keeps job->key alive. The
     * watchdog may answer a job at its deadline while the token call still
     * runs on key (the owner may then drop its own hold on the key store,
     * and a reload may free it). So before that early answer the pool calls
     * key_hold(job) - under the pool's lock: it must be cheap and must not
     * block - and calls key_unhold(handle) with what it returned once the
     * token call has really returned. */
    void *(*key_hold)(const kl_job *job);
    void (*key_unhold)(void *handle);
};

typedef struct kl_pool kl_pool;

/* Blocking workers started on first use when opts.blocking_workers is 0. */
#define KL_POOL_DEFAULT_BLOCKING 4

/* Start from kl_pool_defaults and change what differs; keylessd's
 * `workers` option points at .workers. */
typedef struct kl_pool_opts {
    int workers;                         /* 0: number of CPUs */
    size_t queue_limit[KL_COST_CLASSES]; /* jobs queued per class */
    /* Threads for KL_COST_BLOCKING jobs (PKCS#11 keys), apart from the
     * workers above: size it by the tokens' sessions
     * (kl_keystore_token_sessions). 0: KL_POOL_DEFAULT_BLOCKING, started
     * when the first such job comes. */
    int blocking_workers;
    /* Background workers for long slow jobs (RSA above 2048 bits), beside
     * the workers, at the idle scheduling class (SCHED_IDLE): the pool is
     * work-conserving - long RSA uses every CPU no one else wants - while a
     * shard or a worker that wakes takes its CPU at once (docs/DESIGN.md
     * "Large RSA: background workers"). 0: as many as workers; < 0: none. */
    int background_workers;
    /* How long kl_pool_free waits for blocking workers stuck in a token
     * call before it leaves them behind. */
    int stop_grace_ms;
} kl_pool_opts;

extern const kl_pool_opts kl_pool_defaults;

/* opts NULL: kl_pool_defaults. */
kl_pool *kl_pool_new(const kl_pool_opts *opts);
/* Stops the workers after the queued jobs ran (their done callbacks run).
 * A blocking worker still in a token call after opts.stop_grace_ms is left
 * running (detached, logged) and its job answered KL_E_INTERNAL; the pool's
 * memory is then not freed, since that thread will still use it when its
 * call returns (the process is exiting). */
void kl_pool_free(kl_pool *p);

/* Resizes the blocking class to n threads (0: the default), e.g. after a
 * reload changed the tokens' sessions (kl_keystore_token_sessions). Grows
 * at once when the class is in use; threads beyond n finish their call and
 * then take no job until a later resize wants them again. */
void kl_pool_set_blocking_workers(kl_pool *p, int n);

/* Runs a job on the calling thread, with the same rules as a worker
 * (abandoned or past its deadline: KL_E_INTERNAL without the crypto;
 * started_ns, out_len and err set; the class's execution-time average
 * updated), but does NOT call job->done: the caller has the result when it
 * returns. For fast-class jobs run inline on a shard; never for
 * the blocking class. */
void kl_pool_run_here(kl_pool *p, kl_job *job);

/* For done callbacks: a callback that owes its owner a wake-up
 * (e.g. a shard's eventfd) may leave it to the worker that called it. The
 * worker calls fn(arg) - once for equal (fn, arg) pairs, on its own
 * thread - before it sleeps, and before its next job unless that job's
 * class is saturated (a job queued for every worker) and the oldest
 * deferred wake-up would, after that job, have waited at most a quarter
 * of the queue's own wait and at most 2 ms: at saturation one wake-up
 * carries several answers, below it every answer goes at once. False when
 * the calling thread does not defer (not a fast or slow worker, or 8
 * owners already waiting): the caller wakes its owner itself, now. */
bool kl_pool_defer_wake(void (*fn)(void *arg), void *arg);

/* Queues a job in the key's cost class. KL_E_TOO_LARGE when that class's
 * queue is full (the caller answers a fast error); the callback is not
 * called then. */
KL_WUR kl_status kl_pool_submit(kl_pool *p, kl_job *job);

size_t kl_pool_queued(const kl_pool *p, kl_cost_class c);

/* How long a job of class c submitted now would wait before it finishes:
 * the jobs queued ahead of it and its own run, from a moving average of
 * the class's recent execution times spread over the workers that may run
 * it. 0 for the blocking class (its watchdog answers at the deadline) and
 * before any job of the class ran. For admission control: a
 * request that cannot finish by its deadline is refused before it is
 * queued, which keeps the queue short and the shedding cheap. */
uint64_t kl_pool_wait_estimate(const kl_pool *p, kl_cost_class c);

#endif
