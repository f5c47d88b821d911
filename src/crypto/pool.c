/* SPDX-License-Identifier: Apache-2.0 */
/* The cost-class worker pool (see pool.h).
 *
 * One mutex and one condition variable guard both queues; workers sleep on
 * the condition variable when there is nothing they may take (no
 * spinning). Picking rules:
 * - fast jobs first;
 * - at most workers-1 slow jobs run at once, so one worker is always free
 *   for fast jobs however many RSA-4096 signatures are queued. The last
 *   worker may take a *short* slow job (RSA up to 2048 bits, no test delay:
 *   ~0.25 ms of CPU) when no fast job waits: a fast job that comes then
 *   waits at most that long, and RSA-2048 alone can use every core (issue
 *   5; most fast jobs run inline on the shards anyway, kl_pool_run_here);
 * - to keep slow jobs from starving under an endless stream of fast ones, a
 *   waiting slow job is taken after FAST_STREAK fast picks in a row (with a
 *   single worker, every other pick: the two classes alternate).
 * The blocking class (PKCS#11 keys) has its own threads and condition
 * variable: those threads take only blocking jobs, the others never do.
 *
 * Completions at saturation: a done callback may leave the
 * wake-up it owes its owner to the worker (kl_pool_defer_wake), which
 * sends it before it sleeps or before a job when holding it longer is not
 * worth it (may_defer). With RSA-2048 at saturation a shard then wakes once
 * per several signatures instead of once per signature, each wake-up
 * preempting a worker on a 2-core machine (~3 context switches per
 * signature before; docs/DESIGN.md has the numbers).
 *
 * A PKCS#11 call cannot be interrupted, and an HSM may stall for seconds.
 * So a blocking job is answered at its deadline even when its token call
 * has not returned: a watchdog thread answers the jobs whose deadline
 * passed, running or queued, with KL_ERR_INTERNAL (P6), while the worker
 * keeps blocking. Ownership stays race-free because a blocking worker runs
 * on private copies of the input and output: the job itself is touched
 * only by whoever answers it, and who that is - the worker when its call
 * returns, or the watchdog at the deadline - is decided under the pool's
 * mutex (bslot.answered). A late result is wiped and dropped. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "core/log.h"
#include "core/sched.h"
#include "core/time.h"
#include "crypto/pool.h"

#define DEFAULT_QUEUE_LIMIT 65536u
#define FAST_STREAK 8u
/* RSA keys up to this size are short slow jobs (see above) */
#define SHORT_SLOW_BITS 2048
#define DEFAULT_STOP_GRACE_MS 2000
#define SAMPLE_EVERY 16u
/* deferred wake-ups (kl_pool_defer_wake): how many owners per worker, and
 * how long the oldest may wait (measured, docs/DESIGN.md) */
#define DEFER_MAX 8
#define WAKE_DEFER_NS (2000ull * 1000u)

/* What a blocking worker runs; job, deadline_ns and answered are guarded by
 * the pool's mutex. */
typedef struct bslot {
    struct kl_pool *pool;
    int index;   /* takes jobs only while index < blocking_want */
    kl_job *job; /* NULL: idle */
    uint64_t deadline_ns;
    bool answered; /* the watchdog answered job: drop the result */
    /* job->key_hold's handle, taken when the watchdog answered early */
    void *held;
    void (*unhold)(void *handle);
} bslot;

typedef struct job_queue {
    kl_job *head, *tail;
    atomic_size_t len; /* written under the lock, read by kl_pool_queued */
    size_t limit;
} job_queue;

struct kl_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_queue q[KL_COST_CLASSES];
    int workers;
    int max_slow;
    int slow_running;
    unsigned fast_streak;
    unsigned streak_limit;
    bool stopping;
    pthread_t *threads;
    int started;
    pthread_cond_t bcv; /* blocking workers wait here */
    int blocking_want;  /* how many may run token calls (resizable) */
    pthread_t *bthreads;
    bslot **bslots; /* pointers: a thread keeps its slot across a resize */
    int bstarted, bcap;
    uint64_t stop_grace_ns;
    struct kl_pool *abandoned_next; /* see kl_pool_free */
    /* the watchdog of the blocking class (see above) */
    /* moving average of execution times per class (kl_pool_wait_estimate);
     * written by workers, read by submitters: relaxed atomics */
    _Atomic uint64_t exec_ns[KL_COST_CLASSES];
    pthread_cond_t wcv; /* CLOCK_MONOTONIC */
    pthread_t wthread;
    bool wstarted, wstop;
    uint64_t wnext; /* when it wakes up by itself; 0: it is scanning */
};

static kl_job *pop(job_queue *q)
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

/* Called with the lock held. NULL when there is nothing this worker may
 * take now. */
static bool short_slow(const kl_job *j)
{
    return j->test_delay_us == 0 && kl_key_bits(j->key) <= SHORT_SLOW_BITS;
}

static kl_job *pick(kl_pool *p, kl_cost_class *cls)
{
    bool fast = p->q[KL_COST_FAST].head != NULL;
    const kl_job *slow_head = p->q[KL_COST_SLOW].head;
    bool slow_waiting = slow_head != NULL;
    bool slow =
        slow_waiting &&
        (p->slow_running < p->max_slow ||
         (!fast && p->slow_running < p->workers && short_slow(slow_head)));
    if (slow && (!fast || p->fast_streak >= p->streak_limit)) {
        p->fast_streak = 0;
        p->slow_running++;
        *cls = KL_COST_SLOW;
        return pop(&p->q[KL_COST_SLOW]);
    }
    if (fast) {
        p->fast_streak = slow_waiting ? p->fast_streak + 1 : 0;
        *cls = KL_COST_FAST;
        return pop(&p->q[KL_COST_FAST]);
    }
    return NULL;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return kl_timespec_to_ns(&ts);
}

/* Runs job's crypto on this thread, or answers it KL_ERR_INTERNAL at once
 * (shed); sets out_len, err and started_ns. */
static void exec_job(kl_pool *p, kl_cost_class cls, kl_job *job)
{
    job->out_len = 0;
    /* P6 shedding: no work for a request that cannot be answered by its
     * deadline - neither one that expired in the queue nor one whose known
     * cost would take it past the deadline - nor for one whose client has
     * gone (a server that computes answers for clients that
     * gave up collapses under their retries). The test delay stands for slow
     * crypto, so it counts as that cost (real crypto costs are not modelled
     * yet: they are microseconds next to client budgets). */
    uint64_t cost_ns = job->test_delay_us * 1000u;
    if ((job->abandoned &&
         atomic_load_explicit(job->abandoned, memory_order_relaxed)) ||
        (job->deadline_ns && kl_now_ns() + cost_ns > job->deadline_ns)) {
        job->err = KL_ERR_INTERNAL;
    } else {
        job->started_ns = kl_now_ns();
        if (job->test_delay_us)
            usleep((useconds_t)job->test_delay_us);
        /* CPU time, not wall time: a worker preempted for a time slice
         * in the middle of a job would otherwise multiply the estimate
         * and make admission control shed work the pool could do. Average
         * over ~8 samples; concurrent updates may lose one, which an
         * estimate can afford. The thread's CPU clock is a real system
         * call (no vDSO): ~0.6 us, 4% of an ECDSA signature
         * (measured with perf), so only one job in SAMPLE_EVERY per thread is
         * timed - and every job with a test delay (the tests' slow crypto). */
        static _Thread_local unsigned sample_n;
        uint64_t avg =
            atomic_load_explicit(&p->exec_ns[cls], memory_order_relaxed);
        bool timed =
            !avg || job->test_delay_us || ++sample_n % SAMPLE_EVERY == 0;
        uint64_t t0 = timed ? thread_cpu_ns() : 0;
        job->err = kl_crypto_exec_deadline(job->key, job->opcode, job->in,
                                           job->in_len, job->out, job->out_cap,
                                           &job->out_len, job->deadline_ns);
        if (timed) {
            uint64_t took = thread_cpu_ns() - t0 + job->test_delay_us * 1000u;
            avg = avg ? avg - avg / 8 + took / 8 : took;
            atomic_store_explicit(&p->exec_ns[cls], avg, memory_order_relaxed);
        }
    }
}

static void run(kl_pool *p, kl_cost_class cls, kl_job *job)
{
    exec_job(p, cls, job);
    job->done(job); /* the job belongs to its owner from here on */
}

/* Wake-ups that done callbacks left to this worker (kl_pool_defer_wake).
 * Thread-local: only fast and slow workers defer (on). */
typedef struct deferred {
    bool on;
    int n;
    uint64_t since_ns; /* when the oldest one was deferred */
    struct {
        void (*fn)(void *arg);
        void *arg;
    } w[DEFER_MAX];
} deferred;
static _Thread_local deferred defer;

static void flush_wakes(void)
{
    int n = defer.n;
    defer.n = 0;
    for (int i = 0; i < n; i++)
        defer.w[i].fn(defer.w[i].arg);
}

bool kl_pool_defer_wake(void (*fn)(void *arg), void *arg)
{
    if (!defer.on)
        return false;
    for (int i = 0; i < defer.n; i++)
        if (defer.w[i].fn == fn && defer.w[i].arg == arg)
            return true;
    if (defer.n == DEFER_MAX)
        return false;
    if (defer.n == 0)
        defer.since_ns = kl_now_ns();
    defer.w[defer.n].fn = fn;
    defer.w[defer.n].arg = arg;
    defer.n++;
    return true;
}

/* Called with the lock held, job picked: whether the wake-ups deferred so
 * far may wait for it too. Only while its class still has a job queued for
 * every worker - saturation - and only while the oldest would not wait,
 * once this job ran, more than a quarter of what the queue already costs
 * the jobs in it (their wait behind one another), nor more than
 * WAKE_DEFER_NS. Below saturation an answer leaves with no added delay,
 * with a short queue almost none, and a fast job that passes a queue of
 * RSA-4096 is not held behind them. */
static bool may_defer(const kl_pool *p, kl_cost_class cls)
{
    uint64_t queued =
        atomic_load_explicit(&p->q[cls].len, memory_order_relaxed);
    uint64_t lanes = (uint64_t)p->workers;
    if (queued < lanes)
        return false;
    uint64_t cost =
        atomic_load_explicit(&p->exec_ns[cls], memory_order_relaxed);
    uint64_t limit = cost * queued / lanes / 4;
    if (limit > WAKE_DEFER_NS)
        limit = WAKE_DEFER_NS;
    return kl_now_ns() + cost - defer.since_ns <= limit;
}

static void *worker_main(void *arg)
{
    kl_pool *p = arg;
    pthread_setname_np(pthread_self(), "kl-worker"); /* top -H, perf */
    kl_sched_thread_start(KL_THREAD_WORKER);         /* realtime_priority */
    defer.on = true;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        kl_cost_class cls;
        kl_job *job = pick(p, &cls);
        if (job) {
            bool flush = defer.n && !may_defer(p, cls);
            pthread_mutex_unlock(&p->mu);
            if (flush)
                flush_wakes();
            run(p, cls, job);
            pthread_mutex_lock(&p->mu);
            if (cls == KL_COST_SLOW)
                p->slow_running--;
            if (p->stopping)
                pthread_cond_broadcast(&p->cv); /* others may now exit */
            continue;
        }
        if (defer.n) { /* never sleep on a wake-up owed */
            pthread_mutex_unlock(&p->mu);
            flush_wakes();
            pthread_mutex_lock(&p->mu);
            continue;
        }
        if (p->stopping && !p->q[KL_COST_FAST].head && !p->q[KL_COST_SLOW].head)
            break;
        pthread_cond_wait(&p->cv, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    kl_crypto_thread_cleanup();
    return NULL;
}

static void answer_late(kl_job *job)
{
    job->out_len = 0;
    job->err = KL_ERR_INTERNAL; /* P6: not done by its deadline */
    job->done(job);
}

/* Called with the lock held: a new deadline the watchdog must wake for. */
static void watch(kl_pool *p, uint64_t deadline_ns)
{
    if (deadline_ns && p->wstarted && deadline_ns < p->wnext)
        pthread_cond_signal(&p->wcv);
}

/* Runs a blocking job on private buffers (see the top of the file). Called
 * and returns with the lock held. */
static void run_blocking(kl_pool *p, bslot *slot, kl_job *job)
{
    size_t in_len = job->in_len, cap = job->out_cap;
    uint8_t *buf = malloc(in_len + cap + 1);
    if (!buf) {
        pthread_mutex_unlock(&p->mu);
        answer_late(job);
        pthread_mutex_lock(&p->mu);
        return;
    }
    if (in_len)
        memcpy(buf, job->in, in_len);
    const kl_key *key = job->key;
    uint8_t opcode = job->opcode;
    uint64_t deadline = job->deadline_ns, delay = job->test_delay_us;
    slot->job = job;
    slot->deadline_ns = deadline;
    slot->answered = false;
    watch(p, deadline);
    pthread_mutex_unlock(&p->mu);

    if (delay)
        usleep((useconds_t)delay);
    size_t out_len = 0;
    uint8_t err = KL_ERR_INTERNAL; /* P6 shedding: no crypto for the late */
    uint64_t started = kl_now_ns();
    if (!deadline || started <= deadline)
        err = kl_crypto_exec_deadline(key, opcode, buf, in_len, buf + in_len,
                                      cap, &out_len, deadline);

    pthread_mutex_lock(&p->mu);
    bool mine = !slot->answered;
    slot->job = NULL;
    void *held = slot->held;
    void (*unhold)(void *) = slot->unhold;
    slot->held = NULL;
    pthread_mutex_unlock(&p->mu);
    if (held)
        unhold(held); /* the token call is over: key may go now */
    if (mine) {
        if (out_len)
            memcpy(job->out, buf + in_len, out_len);
        job->out_len = out_len;
        job->err = err;
        job->started_ns = !deadline || started <= deadline ? started : 0;
    }
    OPENSSL_cleanse(buf, in_len + cap); /* a decrypt's plaintext */
    free(buf);
    if (mine)
        job->done(job); /* the job belongs to its owner from here on */
    pthread_mutex_lock(&p->mu);
}

static void *blocking_main(void *arg)
{
    bslot *slot = arg;
    kl_pool *p = slot->pool;
    pthread_setname_np(pthread_self(), "kl-p11-worker");
    job_queue *q = &p->q[KL_COST_BLOCKING];
    pthread_mutex_lock(&p->mu);
    for (;;) {
        /* a thread beyond blocking_want (a reload lowered the tokens'
         * sessions) takes no job: it waits until a reload wants it back */
        if (q->head && slot->index < p->blocking_want) {
            run_blocking(p, slot, pop(q));
            continue;
        }
        if (p->stopping)
            break;
        pthread_cond_wait(&p->bcv, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    kl_crypto_thread_cleanup();
    return NULL;
}

/* Called with the lock held: takes the blocking jobs, running or queued,
 * whose deadline passed (a list through ->next), and sets *next to the
 * earliest deadline still to come (UINT64_MAX: none). */
static kl_job *collect_late(kl_pool *p, uint64_t now, uint64_t *next)
{
    kl_job *late = NULL;
    *next = UINT64_MAX;
    for (int i = 0; i < p->bstarted; i++) {
        bslot *s = p->bslots[i];
        if (!s->job || s->answered || !s->deadline_ns)
            continue;
        if (s->deadline_ns <= now) {
            s->answered = true; /* from here on the job is the watchdog's */
            /* the token call still uses the key after the owner had its
             * answer: keep the key's store alive until it returns */
            if (s->job->key_hold && s->job->key_unhold) {
                s->held = s->job->key_hold(s->job);
                s->unhold = s->job->key_unhold;
            }
            s->job->next = late;
            late = s->job;
        } else if (s->deadline_ns < *next) {
            *next = s->deadline_ns;
        }
    }
    job_queue *q = &p->q[KL_COST_BLOCKING];
    kl_job *prev = NULL;
    for (kl_job *j = q->head, *nx; j; j = nx) {
        nx = j->next;
        if (!j->deadline_ns || j->deadline_ns > now) {
            if (j->deadline_ns && j->deadline_ns < *next)
                *next = j->deadline_ns;
            prev = j;
            continue;
        }
        if (prev)
            prev->next = nx;
        else
            q->head = nx;
        if (q->tail == j)
            q->tail = prev;
        atomic_store_explicit(
            &q->len, atomic_load_explicit(&q->len, memory_order_relaxed) - 1,
            memory_order_relaxed);
        j->next = late;
        late = j;
    }
    return late;
}

static void *watchdog_main(void *arg)
{
    kl_pool *p = arg;
    pthread_setname_np(pthread_self(), "kl-watchdog");
    pthread_mutex_lock(&p->mu);
    while (!p->wstop) {
        uint64_t next;
        kl_job *late = collect_late(p, kl_now_ns(), &next);
        if (late) {
            p->wnext = 0; /* scanning again next: no need to wake it */
            pthread_mutex_unlock(&p->mu);
            while (late) {
                kl_job *j = late;
                late = j->next;
                j->next = NULL;
                answer_late(j);
            }
            pthread_mutex_lock(&p->mu);
            continue;
        }
        p->wnext = next;
        if (next == UINT64_MAX) {
            pthread_cond_wait(&p->wcv, &p->mu);
        } else {
            struct timespec ts = kl_ns_to_timespec(next);
            pthread_cond_timedwait(&p->wcv, &p->mu, &ts);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Called with the lock held: threads up to blocking_want (the first call
 * also starts the watchdog). */
static void start_blocking(kl_pool *p)
{
    int n = p->blocking_want;
    if (p->bstarted >= n)
        return;
    if (!p->wstarted) {
        p->wnext = UINT64_MAX;
        if (pthread_create(&p->wthread, NULL, watchdog_main, p) != 0) {
            kl_error("crypto pool: cannot start the blocking-class watchdog");
            return; /* no blocking workers either: their jobs are refused */
        }
        p->wstarted = true;
    }
    if (n > p->bcap) {
        pthread_t *t = realloc(p->bthreads, (size_t)n * sizeof *t);
        if (t)
            p->bthreads = t;
        bslot **sl = t ? realloc(p->bslots, (size_t)n * sizeof *sl) : NULL;
        if (sl)
            p->bslots = sl;
        if (!t || !sl) {
            kl_error("crypto pool: out of memory for %d blocking workers", n);
            return;
        }
        p->bcap = n;
    }
    int before = p->bstarted;
    while (p->bstarted < n) {
        bslot *slot = calloc(1, sizeof *slot);
        if (!slot)
            break;
        slot->pool = p;
        slot->index = p->bstarted;
        if (pthread_create(&p->bthreads[p->bstarted], NULL, blocking_main,
                           slot) != 0) {
            free(slot);
            break;
        }
        p->bslots[p->bstarted++] = slot;
    }
    if (p->bstarted < n)
        kl_error("crypto pool: started %d of %d blocking workers",
                 p->bstarted - before, n - before);
}

static int default_workers(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 2 ? 2 : (n > 1024 ? 1024 : (int)n);
}

kl_pool *kl_pool_new(const kl_pool_opts *opts)
{
    kl_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->workers = opts && opts->workers > 0 ? opts->workers : default_workers();
    p->max_slow = p->workers > 1 ? p->workers - 1 : 1;
    p->streak_limit = p->workers > 1 ? FAST_STREAK : 1;
    for (int c = 0; c < KL_COST_CLASSES; c++) {
        size_t lim = opts ? opts->queue_limit[c] : 0;
        p->q[c].limit = lim ? lim : DEFAULT_QUEUE_LIMIT;
        atomic_init(&p->q[c].len, 0);
        atomic_init(&p->exec_ns[c], 0);
    }
    p->blocking_want = opts && opts->blocking_workers > 0
                           ? opts->blocking_workers
                           : KL_POOL_DEFAULT_BLOCKING;
    p->stop_grace_ns = kl_ms_to_ns(opts && opts->stop_grace_ms > 0
                                       ? (uint64_t)opts->stop_grace_ms
                                       : DEFAULT_STOP_GRACE_MS);
    p->threads = calloc((size_t)p->workers, sizeof *p->threads);
    if (!p->threads || pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p->threads);
        free(p);
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* kl_now_ns's clock */
    int wcv_rc = pthread_cond_init(&p->wcv, &ca);
    pthread_condattr_destroy(&ca);
    if (wcv_rc != 0 || pthread_cond_init(&p->cv, NULL) != 0 ||
        pthread_cond_init(&p->bcv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p->threads);
        free(p);
        return NULL;
    }
    if (opts && opts->blocking_workers > 0) {
        pthread_mutex_lock(&p->mu); /* its threads start using p at once */
        start_blocking(p);
        pthread_mutex_unlock(&p->mu);
    }
    for (int i = 0; i < p->workers; i++) {
        if (pthread_create(&p->threads[i], NULL, worker_main, p) != 0)
            break;
        p->started++;
    }
    if (p->started < p->workers) {
        kl_error("crypto pool: started %d of %d workers", p->started,
                 p->workers);
        if (p->started == 0) {
            kl_pool_free(p);
            return NULL;
        }
        /* keep the slow-class bound true for the workers that exist */
        pthread_mutex_lock(&p->mu);
        p->workers = p->started;
        p->max_slow = p->workers > 1 ? p->workers - 1 : 1;
        p->streak_limit = p->workers > 1 ? FAST_STREAK : 1;
        pthread_mutex_unlock(&p->mu);
    }
    return p;
}

/* Called with the lock held at shutdown, once the grace period is over:
 * answers the jobs of blocking workers still stuck in a token call and the
 * blocking jobs still queued (KL_ERR_INTERNAL, P6), so that their owners can
 * free them; the stuck workers' late results are dropped, and the key
 * stores they use are kept (never released: the process is exiting, and
 * freeing a store could unload the module under the call). */
static kl_job *abandon_blocking(kl_pool *p)
{
    kl_job *late = NULL;
    for (int i = 0; i < p->bstarted; i++) {
        bslot *s = p->bslots[i];
        if (!s->job || s->answered)
            continue;
        s->answered = true;
        if (s->job->key_hold && !s->held)
            (void)s->job->key_hold(s->job); /* deliberately never unheld */
        s->job->next = late;
        late = s->job;
    }
    job_queue *q = &p->q[KL_COST_BLOCKING];
    while (q->head) {
        kl_job *j = pop(q);
        j->next = late;
        late = j;
    }
    return late;
}

/* A pool left to threads stuck in a token call at shutdown (kl_pool_free) */
static kl_pool *abandoned_pool;
static pthread_mutex_t abandoned_mu = PTHREAD_MUTEX_INITIALIZER;

/* Joins t by the monotonic time limit_ns; false when it is still running. */
static bool join_by(pthread_t t, uint64_t limit_ns)
{
    /* pthread_timedjoin_np counts in CLOCK_REALTIME */
    uint64_t now = kl_now_ns(), left = limit_ns > now ? limit_ns - now : 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts = kl_ns_to_timespec(kl_timespec_to_ns(&ts) + left);
    return pthread_timedjoin_np(t, NULL, &ts) == 0;
}

void kl_pool_free(kl_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->cv);
    pthread_cond_broadcast(&p->bcv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    /* The blocking workers finish their queue - unless a token call hangs:
     * an HSM call cannot be interrupted, so after the grace period the
     * stuck threads are left behind (detached) and their jobs answered;
     * the process exits without them. */
    uint64_t limit = kl_now_ns() + p->stop_grace_ns;
    int stuck = 0;
    for (int i = 0; i < p->bstarted; i++) {
        if (join_by(p->bthreads[i], limit))
            continue;
        if (stuck++ == 0) {
            pthread_mutex_lock(&p->mu);
            kl_job *late = abandon_blocking(p);
            pthread_mutex_unlock(&p->mu);
            while (late) {
                kl_job *j = late;
                late = j->next;
                j->next = NULL;
                answer_late(j);
            }
        }
        pthread_detach(p->bthreads[i]);
    }
    if (stuck)
        kl_error("crypto pool: %d token call%s still running %.1f s after "
                 "shutdown began (a hung HSM?): left behind, their requests "
                 "answered with an error",
                 stuck, stuck == 1 ? "" : "s", kl_ns_to_s_f(p->stop_grace_ns));
    /* the watchdog goes last: it still answers, at their deadline, the
     * jobs of blocking workers that are stuck in a token call */
    if (p->wstarted) {
        pthread_mutex_lock(&p->mu);
        p->wstop = true;
        pthread_cond_signal(&p->wcv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->wthread, NULL);
    }
    if (stuck) {
        /* the stuck threads still use p when their call returns: p stays,
         * reachable from here (a leak checker then sees it is meant) */
        pthread_mutex_lock(&abandoned_mu);
        p->abandoned_next = abandoned_pool;
        abandoned_pool = p;
        pthread_mutex_unlock(&abandoned_mu);
        return;
    }
    for (int i = 0; i < p->bstarted; i++)
        free(p->bslots[i]);
    free(p->bthreads);
    free(p->bslots);
    pthread_cond_destroy(&p->wcv);
    pthread_cond_destroy(&p->bcv);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}

void kl_pool_set_blocking_workers(kl_pool *p, int n)
{
    if (!p)
        return;
    if (n <= 0)
        n = KL_POOL_DEFAULT_BLOCKING;
    pthread_mutex_lock(&p->mu);
    if (n != p->blocking_want && !p->stopping) {
        int was = p->blocking_want;
        p->blocking_want = n;
        /* grow now if the class is in use; else on its first job */
        if (p->bstarted > 0)
            start_blocking(p);
        /* parked threads may take jobs again */
        pthread_cond_broadcast(&p->bcv);
        kl_info("crypto pool: blocking workers %d -> %d (token sessions)", was,
                n);
    }
    pthread_mutex_unlock(&p->mu);
}

void kl_pool_run_here(kl_pool *p, kl_job *job)
{
    exec_job(p, kl_crypto_cost_class(job->key), job);
}

kl_status kl_pool_submit(kl_pool *p, kl_job *job)
{
    KL_ENSURE(p != NULL && job != NULL && job->done != NULL, KL_E_INTERNAL);
    kl_cost_class c = kl_crypto_cost_class(job->key);
    job->next = NULL;
    pthread_mutex_lock(&p->mu);
    kl_status s = KL_OK;
    job_queue *q = &p->q[c];
    size_t len = atomic_load_explicit(&q->len, memory_order_relaxed);
    if (c == KL_COST_BLOCKING && !p->stopping)
        start_blocking(p);
    if (p->stopping) {
        s = KL_E_CLOSED;
    } else if (c == KL_COST_BLOCKING && p->bstarted == 0) {
        s = KL_E_INTERNAL; /* no thread could run it */
    } else if (len >= q->limit) {
        s = KL_E_TOO_LARGE;
    } else {
        if (q->tail)
            q->tail->next = job;
        else
            q->head = job;
        q->tail = job;
        atomic_store_explicit(&q->len, len + 1, memory_order_relaxed);
        if (c != KL_COST_BLOCKING)
            pthread_cond_signal(&p->cv);
        else if (p->bstarted > p->blocking_want)
            pthread_cond_broadcast(&p->bcv); /* a parked thread must not
                                                take the only signal */
        else
            pthread_cond_signal(&p->bcv);
        if (c == KL_COST_BLOCKING)
            watch(p, job->deadline_ns);
    }
    pthread_mutex_unlock(&p->mu);
    return s;
}

uint64_t kl_pool_wait_estimate(const kl_pool *p, kl_cost_class c)
{
    if (!p || c == KL_COST_BLOCKING || (int)c < 0 || c >= KL_COST_CLASSES)
        return 0;
    uint64_t avg = atomic_load_explicit(&p->exec_ns[c], memory_order_relaxed);
    uint64_t queued = atomic_load_explicit(&p->q[c].len, memory_order_relaxed);
    /* workers and max_slow change only at creation */
    uint64_t lanes = (uint64_t)(c == KL_COST_SLOW ? p->max_slow : p->workers);
    return avg * queued / (lanes ? lanes : 1) + avg;
}

size_t kl_pool_queued(const kl_pool *p, kl_cost_class c)
{
    if (!p || (int)c < 0 || c >= KL_COST_CLASSES)
        return 0;
    return atomic_load_explicit(&p->q[c].len, memory_order_relaxed);
}
