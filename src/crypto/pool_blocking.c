/* SPDX-License-Identifier: Apache-2.0 */
/* The blocking class of the pool (see pool.h, pool_int.h): jobs on PKCS#11
 * keys run on threads of their own, with their own condition variable:
 * those threads take only blocking jobs, the fast and slow workers never
 * do. They start with the first such job (or with the pool, when
 * opts.blocking_workers is set) and a reload may resize them.
 *
 * A blocking job is answered at its deadline even when its token call has
 * not returned (pool_watchdog.c). Ownership stays race-free because a
 * blocking worker runs on private copies of the input and output: the job
 * itself is touched only by whoever answers it, and who that is - the
 * worker when its call returns, or the watchdog at the deadline - is decided
 * under the pool's mutex (bslot.answered). A late result is wiped and
 * dropped. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>

#include "core/log.h"
#include "core/time.h"
#include "crypto/pool_int.h"

/* The moving average of a token call's wall time (a token call waits on
 * the device, so its time is wall time, not CPU): admission control's
 * estimate for the blocking class (kl_pool_wait_estimate). Every call is
 * timed - a token call takes milliseconds, the clock read nanoseconds. */
static void note_call_time(kl_pool *p, uint64_t took)
{
    _Atomic uint64_t *e = &p->cost.exec_ns[KL_COST_BLOCKING];
    uint64_t avg = atomic_load_explicit(e, memory_order_relaxed);
    avg = avg ? avg - avg / 8 + took / 8 : took;
    atomic_store_explicit(e, avg, memory_order_relaxed);
}

/* Runs a blocking job on private buffers (see the top of the file). Called
 * and returns with the lock held. */
static void run_blocking(kl_pool *p, bslot *slot, kl_job *job)
{
    size_t in_len = job->in_len, cap = job->out_cap;
    uint8_t *buf = malloc(in_len + cap + 1);
    if (!buf) {
        pthread_mutex_unlock(&p->mu);
        kl_pool_answer_late(job);
        pthread_mutex_lock(&p->mu);
        return;
    }
    if (in_len)
        memcpy(buf, job->in, in_len);
    const kl_key *key = job->key;
    uint8_t opcode = job->opcode;
    uint64_t deadline = job->deadline_ns;
    slot->job = job;
    slot->deadline_ns = deadline;
    slot->answered = false;
    kl_pool_watch(p, deadline);
    pthread_mutex_unlock(&p->mu);

    size_t out_len = 0;
    kl_status err = KL_E_INTERNAL; /* P6 shedding: no crypto for the late */
    uint64_t started = kl_now_ns();
    if (!deadline || started <= deadline) {
        atomic_fetch_add_explicit(&p->blk.busy, 1, memory_order_relaxed);
        err = kl_crypto_exec_deadline(key, opcode, buf, in_len, buf + in_len,
                                      cap, &out_len, deadline);
        note_call_time(p, kl_now_ns() - started);
        atomic_fetch_sub_explicit(&p->blk.busy, 1, memory_order_relaxed);
    }

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
        /* a thread beyond blk.want (a reload lowered the tokens'
         * sessions) takes no job: it waits until a reload wants it back */
        if (q->head && slot->index < p->blk.want) {
            run_blocking(p, slot, kl_pool_pop(q));
            continue;
        }
        if (p->stopping)
            break;
        pthread_cond_wait(&p->blk.cv, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    kl_crypto_thread_cleanup();
    return NULL;
}

void kl_pool_blocking_start(kl_pool *p)
{
    kl_pool_blocking *b = &p->blk;
    int n = b->want;
    if (b->started >= n)
        return;
    if (!kl_pool_watchdog_start(p)) {
        kl_error("crypto pool: cannot start the blocking-class watchdog");
        return; /* no blocking workers either: their jobs are refused */
    }
    if (n > b->cap) {
        pthread_t *t = realloc(b->threads, (size_t)n * sizeof *t);
        if (t)
            b->threads = t;
        bslot **sl = t ? realloc(b->slots, (size_t)n * sizeof *sl) : NULL;
        if (sl)
            b->slots = sl;
        if (!t || !sl) {
            kl_error("crypto pool: out of memory for %d blocking workers", n);
            return;
        }
        b->cap = n;
    }
    int before = b->started;
    while (b->started < n) {
        bslot *slot = calloc(1, sizeof *slot);
        if (!slot)
            break;
        slot->pool = p;
        slot->index = b->started;
        if (pthread_create(&b->threads[b->started], NULL, blocking_main,
                           slot) != 0) {
            free(slot);
            break;
        }
        b->slots[b->started++] = slot;
    }
    if (b->started < n)
        kl_error("crypto pool: started %d of %d blocking workers",
                 b->started - before, n - before);
}

void kl_pool_set_blocking_workers(kl_pool *p, int n)
{
    if (!p)
        return;
    if (n <= 0)
        n = KL_POOL_DEFAULT_BLOCKING;
    pthread_mutex_lock(&p->mu);
    if (n != p->blk.want && !p->stopping) {
        int was = p->blk.want;
        p->blk.want = n;
        atomic_store_explicit(&p->blk.lanes, n, memory_order_relaxed);
        /* grow now if the class is in use; else on its first job */
        if (p->blk.started > 0)
            kl_pool_blocking_start(p);
        /* parked threads may take jobs again */
        pthread_cond_broadcast(&p->blk.cv);
        kl_info("crypto pool: blocking workers %d -> %d (token sessions)", was,
                n);
    }
    pthread_mutex_unlock(&p->mu);
}

/* Called with the lock held at shutdown, once the grace period is over:
 * answers the jobs of blocking workers still stuck in a token call and the
 * blocking jobs still queued (KL_E_INTERNAL, P6), so that their owners can
 * free them; the stuck workers' late results are dropped, and the key
 * stores they use are kept (never released: the process is exiting, and
 * freeing a store could unload the module under the call). */
static kl_job *abandon_blocking(kl_pool *p)
{
    kl_job *late = NULL;
    for (int i = 0; i < p->blk.started; i++) {
        bslot *s = p->blk.slots[i];
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
        kl_job *j = kl_pool_pop(q);
        j->next = late;
        late = j;
    }
    return late;
}

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

int kl_pool_blocking_join(kl_pool *p)
{
    /* The blocking workers finish their queue - unless a token call hangs:
     * an HSM call cannot be interrupted, so after the grace period the
     * stuck threads are left behind (detached) and their jobs answered;
     * the process exits without them. */
    uint64_t limit = kl_now_ns() + p->stop_grace_ns;
    int stuck = 0;
    for (int i = 0; i < p->blk.started; i++) {
        if (join_by(p->blk.threads[i], limit))
            continue;
        if (stuck++ == 0) {
            pthread_mutex_lock(&p->mu);
            kl_job *late = abandon_blocking(p);
            pthread_mutex_unlock(&p->mu);
            while (late) {
                kl_job *j = late;
                late = j->next;
                j->next = NULL;
                kl_pool_answer_late(j);
            }
        }
        pthread_detach(p->blk.threads[i]);
    }
    if (stuck)
        kl_error("crypto pool: %d token call%s still running %.1f s after "
                 "shutdown began (a hung HSM?): left behind, their requests "
                 "answered with an error",
                 stuck, stuck == 1 ? "" : "s", kl_ns_to_s_f(p->stop_grace_ns));
    return stuck;
}

void kl_pool_blocking_free(kl_pool *p)
{
    for (int i = 0; i < p->blk.started; i++)
        free(p->blk.slots[i]);
    free(p->blk.threads);
    free(p->blk.slots);
}
