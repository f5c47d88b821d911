/* SPDX-License-Identifier: Apache-2.0 */
/* The cost classes of the pool (see pool.h, pool_int.h): the fast and slow
 * workers, which job they pick, running it, and the execution-time
 * estimate behind admission control.
 *
 * Workers sleep on the pool's condition variable when there is nothing they
 * may take (no spinning). Picking rules:
 * - fast jobs first;
 * - at most workers-1 slow jobs run at once, so one worker is always free
 *   for fast jobs however many RSA-4096 signatures are queued. The last
 *   worker may take a *short* slow job (RSA up to 2048 bits: ~0.25 ms of
 *   CPU) when no fast job waits: a fast job that comes then waits at most
 *   that long, and RSA-2048 alone can use every core (docs/DESIGN.md
 *   "Limits and backpressure"; most fast jobs run inline on the shards
 *   anyway, kl_pool_run_here);
 * - to keep slow jobs from starving under an endless stream of fast ones, a
 *   waiting slow job is taken after FAST_STREAK fast picks in a row (with a
 *   single worker, every other pick: the two classes alternate).
 * Background workers (kl_pool_bg_main) take long slow jobs too, beside
 * these rules and without their bound, at the idle scheduling class: the
 * CPUs that the rule above keeps for fast work still run RSA-4096 while
 * nothing else wants them, and give them up at once when a shard or a
 * worker wakes.
 * The blocking class (PKCS#11 keys) has its own threads (pool_blocking.c):
 * these workers never take its jobs.
 *
 * Completions at saturation: a done callback may leave the wake-up it owes
 * its owner to the worker (pool_defer.c), which sends it before it sleeps or
 * before a job when holding it longer is not worth it (kl_pool_may_defer). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "core/log.h"
#include "core/sched.h"
#include "core/time.h"
#include "crypto/pool_int.h"

#define FAST_STREAK 8u
/* RSA keys up to this size are short slow jobs (see above) */
#define SHORT_SLOW_BITS 2048
#define SAMPLE_EVERY 16u

void kl_pool_sched_init(kl_pool_sched *s, int workers)
{
    s->workers = workers;
    s->max_slow = workers > 1 ? workers - 1 : 1;
    s->streak_limit = workers > 1 ? FAST_STREAK : 1;
}

static bool short_slow(const kl_job *j)
{
    return kl_key_bits(j->key) <= SHORT_SLOW_BITS;
}

bool kl_pool_long_slow(const kl_job *j)
{
    return !short_slow(j);
}

/* Called with the lock held. NULL when there is nothing this worker may
 * take now. */
static kl_job *pick(kl_pool *p, kl_cost_class *cls)
{
    kl_pool_sched *s = &p->sched;
    bool fast = p->q[KL_COST_FAST].head != NULL;
    const kl_job *slow_head = p->q[KL_COST_SLOW].head;
    bool slow_waiting = slow_head != NULL;
    bool slow =
        slow_waiting &&
        (s->slow_running < s->max_slow ||
         (!fast && s->slow_running < s->workers && short_slow(slow_head)));
    if (slow && (!fast || s->fast_streak >= s->streak_limit)) {
        s->fast_streak = 0;
        s->slow_running++;
        *cls = KL_COST_SLOW;
        kl_job *j = kl_pool_pop(&p->q[KL_COST_SLOW]);
        /* a long job behind it is a background worker's now */
        const kl_job *next = p->q[KL_COST_SLOW].head;
        if (next && s->bg_workers && !short_slow(next))
            pthread_cond_signal(&p->bg_cv);
        return j;
    }
    if (fast) {
        s->fast_streak = slow_waiting ? s->fast_streak + 1 : 0;
        *cls = KL_COST_FAST;
        return kl_pool_pop(&p->q[KL_COST_FAST]);
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

/* Runs job's crypto on this thread, or answers it KL_E_INTERNAL at once
 * (shed); sets out_len, err and started_ns. */
static void exec_job(kl_pool *p, kl_cost_class cls, kl_job *job)
{
    job->out_len = 0;
    /* P6 shedding: no work for a request whose deadline passed in the
     * queue, nor for one whose client has gone (a server that computes
     * answers for clients that gave up collapses under their retries). */
    if ((job->abandoned &&
         atomic_load_explicit(job->abandoned, memory_order_relaxed)) ||
        (job->deadline_ns && kl_now_ns() > job->deadline_ns)) {
        job->err = KL_E_INTERNAL;
    } else {
        job->started_ns = kl_now_ns();
        /* CPU time, not wall time: a worker preempted for a time slice
         * in the middle of a job would otherwise multiply the estimate
         * and make admission control shed work the pool could do. Average
         * over ~8 samples; concurrent updates may lose one, which an
         * estimate can afford. The thread's CPU clock is a real system
         * call (no vDSO): ~0.6 us, 4% of an ECDSA signature
         * (measured with perf), so only one job in SAMPLE_EVERY per thread is
         * timed. */
        static _Thread_local unsigned sample_n;
        uint64_t avg =
            atomic_load_explicit(&p->cost.exec_ns[cls], memory_order_relaxed);
        bool timed = !avg || ++sample_n % SAMPLE_EVERY == 0;
        uint64_t t0 = timed ? thread_cpu_ns() : 0;
        job->err = kl_crypto_exec_deadline(job->key, job->opcode, job->in,
                                           job->in_len, job->out, job->out_cap,
                                           &job->out_len, job->deadline_ns);
        if (timed) {
            uint64_t took = thread_cpu_ns() - t0;
            avg = avg ? avg - avg / 8 + took / 8 : took;
            atomic_store_explicit(&p->cost.exec_ns[cls], avg,
                                  memory_order_relaxed);
        }
    }
}

static void run(kl_pool *p, kl_cost_class cls, kl_job *job)
{
    exec_job(p, cls, job);
    job->done(job); /* the job belongs to its owner from here on */
}

void *kl_pool_worker_main(void *arg)
{
    kl_pool *p = arg;
    pthread_setname_np(pthread_self(), "kl-worker"); /* top -H, perf */
    kl_sched_thread_start(KL_THREAD_WORKER);         /* realtime_priority */
    kl_pool_defer.on = true;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        kl_cost_class cls;
        kl_job *job = pick(p, &cls);
        if (job) {
            bool flush = kl_pool_defer.n && !kl_pool_may_defer(p, cls);
            pthread_mutex_unlock(&p->mu);
            if (flush)
                kl_pool_flush_wakes();
            run(p, cls, job);
            pthread_mutex_lock(&p->mu);
            if (cls == KL_COST_SLOW)
                p->sched.slow_running--;
            if (p->stopping)
                pthread_cond_broadcast(&p->cv); /* others may now exit */
            continue;
        }
        if (kl_pool_defer.n) { /* never sleep on a wake-up owed */
            pthread_mutex_unlock(&p->mu);
            kl_pool_flush_wakes();
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

/* A background worker: long slow jobs only, at the head of the slow queue
 * (FIFO: a short one there is the workers'), with no bound but their
 * number, in the idle scheduling class, so that any thread that wants the
 * CPU - a shard, a worker - preempts it at once (docs/DESIGN.md "Large
 * RSA: background workers"). */
void *kl_pool_bg_main(void *arg)
{
    kl_pool *p = arg;
    pthread_setname_np(pthread_self(), "kl-worker-bg");
    struct sched_param sp = {.sched_priority = 0};
    if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp) != 0)
        kl_debug("background worker: cannot enter SCHED_IDLE");
    pthread_mutex_lock(&p->mu);
    for (;;) {
        const kl_job *head = p->q[KL_COST_SLOW].head;
        if (head && !short_slow(head)) {
            kl_job *job = kl_pool_pop(&p->q[KL_COST_SLOW]);
            pthread_mutex_unlock(&p->mu);
            run(p, KL_COST_SLOW, job);
            pthread_mutex_lock(&p->mu);
            continue;
        }
        /* a short job at the head is the workers' to finish */
        if (p->stopping && (!head || short_slow(head)))
            break;
        pthread_cond_wait(&p->bg_cv, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    kl_crypto_thread_cleanup();
    return NULL;
}

void kl_pool_run_here(kl_pool *p, kl_job *job)
{
    exec_job(p, kl_crypto_cost_class(job->key), job);
}

uint64_t kl_pool_wait_estimate(const kl_pool *p, kl_cost_class c)
{
    if (!p || (int)c < 0 || c >= KL_COST_CLASSES)
        return 0;
    uint64_t avg =
        atomic_load_explicit(&p->cost.exec_ns[c], memory_order_relaxed);
    uint64_t queued = atomic_load_explicit(&p->q[c].len, memory_order_relaxed);
    if (c == KL_COST_BLOCKING) {
        /* the calls running and queued ahead, over the token sessions, then
         * its own call. A job that finds a session free is always taken:
         * after a token hung once (a huge average) the next calls must
         * still run, or the average would never come down again. */
        int lanes = atomic_load_explicit(&p->blk.lanes, memory_order_relaxed);
        int busy = atomic_load_explicit(&p->blk.busy, memory_order_relaxed);
        if (lanes < 1)
            lanes = 1;
        if (!queued && busy < lanes)
            return 0;
        return avg * (queued + (uint64_t)busy) / (uint64_t)lanes + avg;
    }
    /* workers, max_slow and the background workers change only at
     * creation */
    uint64_t lanes =
        (uint64_t)(c == KL_COST_SLOW ? p->sched.max_slow + p->sched.bg_workers
                                     : p->sched.workers);
    return avg * queued / (lanes ? lanes : 1) + avg;
}
