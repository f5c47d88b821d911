/* SPDX-License-Identifier: Apache-2.0 */
/* Private to the crypto pool (see pool.h): the state its parts share, one
 * struct per part.
 *
 *   pool.c          the pool: its queues, submitting, starting and stopping
 *   pool_sched.c    the cost classes: the fast and slow workers, which job
 *                   they pick, running it, the execution-time estimate
 *                   (admission control)
 *   pool_blocking.c the blocking class: PKCS#11 jobs on threads of their own
 *   pool_watchdog.c the deadlines of blocking jobs
 *   pool_defer.c    wake-ups that done callbacks leave to a worker
 *
 * One mutex (kl_pool.mu) guards everything here but the relaxed atomics.
 * What runs for every job and crosses files is static inline below, so
 * that the parts cost no call they did not cost in one file. */
#ifndef KL_CRYPTO_POOL_INT_H
#define KL_CRYPTO_POOL_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/time.h"
#include "crypto/pool.h"

/* deferred wake-ups (kl_pool_defer_wake): how many owners per worker, and
 * how long the oldest may wait (measured, docs/DESIGN.md) */
#define DEFER_MAX 8
#define WAKE_DEFER_NS (2000ull * 1000u)

typedef struct job_queue {
    kl_job *head, *tail;
    atomic_size_t len; /* written under the lock, read by kl_pool_queued */
    size_t limit;
} job_queue;

/* pool_sched.c: how the fast and slow workers pick (the rules are at the
 * top of that file) */
typedef struct kl_pool_sched {
    int workers;
    int bg_workers; /* background workers started (long slow jobs only) */
    int max_slow;
    int slow_running;
    unsigned fast_streak;
    unsigned streak_limit;
} kl_pool_sched;

/* pool_sched.c: moving average of execution times per class
 * (kl_pool_wait_estimate); written by workers, read by submitters: relaxed
 * atomics */
typedef struct kl_pool_cost {
    _Atomic uint64_t exec_ns[KL_COST_CLASSES];
} kl_pool_cost;

/* pool_blocking.c: what a blocking worker runs; job, deadline_ns and
 * answered are guarded by the pool's mutex. */
typedef struct bslot {
    struct kl_pool *pool;
    int index;   /* takes jobs only while index < blk.want */
    kl_job *job; /* NULL: idle */
    uint64_t deadline_ns;
    bool answered; /* the watchdog answered job: drop the result */
    /* job->key_hold's handle, taken when the watchdog answered early */
    void *held;
    void (*unhold)(void *handle);
} bslot;

/* pool_blocking.c: the blocking class's threads */
typedef struct kl_pool_blocking {
    pthread_cond_t cv; /* blocking workers wait here */
    int want;          /* how many may run token calls (resizable) */
    atomic_int lanes;  /* want, for kl_pool_wait_estimate without the lock */
    atomic_int busy;   /* workers inside a token call (the same) */
    pthread_t *threads;
    bslot **slots; /* pointers: a thread keeps its slot across a resize */
    int started, cap;
} kl_pool_blocking;

/* pool_watchdog.c: the watchdog of the blocking class */
typedef struct kl_pool_watchdog {
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    pthread_t thread;
    bool started, stop;
    uint64_t next; /* when it wakes up by itself; 0: it is scanning */
} kl_pool_watchdog;

struct kl_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* fast and slow workers wait here */
    job_queue q[KL_COST_CLASSES];
    kl_pool_sched sched;
    bool stopping;
    pthread_t *threads; /* the fast and slow workers */
    int started;
    pthread_cond_t bg_cv; /* background workers wait here */
    pthread_t *bg_threads;
    kl_pool_blocking blk;
    uint64_t stop_grace_ns;
    struct kl_pool *abandoned_next; /* see kl_pool_free */
    kl_pool_cost cost;
    kl_pool_watchdog wd;
};

/* Wake-ups that done callbacks left to this worker (kl_pool_defer_wake).
 * Thread-local: only fast and slow workers defer (on). */
typedef struct kl_pool_deferred {
    bool on;
    int n;
    uint64_t since_ns; /* when the oldest one was deferred */
    struct {
        void (*fn)(void *arg);
        void *arg;
    } w[DEFER_MAX];
} kl_pool_deferred;

/* pool_defer.c. KL_POOL_TLS, on its declaration and its definition alike:
 * the local-dynamic model a variable private to one file gets. It is
 * defined in the module (program or library) of every file that uses it,
 * so no access takes the extra step of a variable another module could
 * define. */
#define KL_POOL_TLS                                                            \
    __attribute__((visibility("hidden"), tls_model("local-dynamic")))
extern _Thread_local kl_pool_deferred kl_pool_defer KL_POOL_TLS;

/* ---- the queues (pool.c) ---- */

static inline kl_job *kl_pool_pop(job_queue *q)
{
    kl_job *j = q->head;
    q->head = j->next;
    if (!q->head)
        q->tail = NULL;
    j->next = NULL;
    atomic_store_explicit(
        &q->len, atomic_load_explicit(&q->len, memory_order_relaxed) - 1,
        memory_order_relaxed);
    return j;
}

/* ---- the cost classes (pool_sched.c) ---- */

/* n fast and slow workers, and the bounds that follow from their number
 * (under the lock once the workers run) */
void kl_pool_sched_init(kl_pool_sched *s, int workers);
/* A fast or slow worker's thread (arg: the pool). */
void *kl_pool_worker_main(void *arg);
/* A background worker (kl_pool_opts.background_workers). */
void *kl_pool_bg_main(void *arg);
/* Whether a queued slow job is long (a background worker may take it). */
bool kl_pool_long_slow(const kl_job *j);

/* ---- the blocking class (pool_blocking.c) ---- */

/* Called with the lock held: threads up to blk.want (the first call also
 * starts the watchdog). */
void kl_pool_blocking_start(kl_pool *p);
/* At shutdown, the fast and slow workers joined: joins the blocking
 * workers, or leaves behind those still in a token call after the grace
 * period (their jobs answered). Returns how many it left. */
int kl_pool_blocking_join(kl_pool *p);
/* Frees what the blocking workers used (every one joined). */
void kl_pool_blocking_free(kl_pool *p);

/* ---- deadlines (pool_watchdog.c) ---- */

/* Called with the lock held: starts the watchdog; false when it could not
 * be started. */
bool kl_pool_watchdog_start(kl_pool *p);
/* Stops and joins the watchdog, if it was started (last at shutdown). */
void kl_pool_watchdog_stop(kl_pool *p);

static inline void kl_pool_answer_late(kl_job *job)
{
    job->out_len = 0;
    job->err = KL_E_INTERNAL; /* P6: not done by its deadline */
    job->done(job);
}

/* Called with the lock held: a new deadline the watchdog must wake for. */
static inline void kl_pool_watch(kl_pool *p, uint64_t deadline_ns)
{
    if (deadline_ns && p->wd.started && deadline_ns < p->wd.next)
        pthread_cond_signal(&p->wd.cv);
}

/* ---- deferred wake-ups (pool_defer.c) ---- */

static inline void kl_pool_flush_wakes(void)
{
    int n = kl_pool_defer.n;
    kl_pool_defer.n = 0;
    for (int i = 0; i < n; i++)
        kl_pool_defer.w[i].fn(kl_pool_defer.w[i].arg);
}

/* Called with the lock held, job picked: whether the wake-ups deferred so
 * far may wait for it too. Only while its class still has a job queued for
 * every worker - saturation - and only while the oldest would not wait,
 * once this job ran, more than a quarter of what the queue already costs
 * the jobs in it (their wait behind one another), nor more than
 * WAKE_DEFER_NS. Below saturation an answer leaves with no added delay,
 * with a short queue almost none, and a fast job that passes a queue of
 * RSA-4096 is not held behind them. */
static inline bool kl_pool_may_defer(const kl_pool *p, kl_cost_class cls)
{
    uint64_t queued =
        atomic_load_explicit(&p->q[cls].len, memory_order_relaxed);
    uint64_t lanes = (uint64_t)p->sched.workers;
    if (queued < lanes)
        return false;
    uint64_t cost =
        atomic_load_explicit(&p->cost.exec_ns[cls], memory_order_relaxed);
    uint64_t limit = cost * queued / lanes / 4;
    if (limit > WAKE_DEFER_NS)
        limit = WAKE_DEFER_NS;
    return kl_now_ns() + cost - kl_pool_defer.since_ns <= limit;
}

#endif
