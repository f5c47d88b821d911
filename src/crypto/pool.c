/* SPDX-License-Identifier: Apache-2.0 */
/* The cost-class worker pool (see pool.h): its queues, submitting, starting
 * and stopping. The parts are in files of their own (pool_int.h has the
 * state they share): pool_sched.c the fast and slow workers and how they
 * pick, pool_blocking.c the blocking class (PKCS#11 keys), pool_watchdog.c
 * the deadlines of blocking jobs, pool_defer.c the wake-ups done callbacks
 * leave to a worker.
 *
 * One mutex and one condition variable guard both queues of the fast and
 * slow workers; the blocking class has a condition variable of its own
 * under the same mutex. Workers sleep when there is nothing they may take
 * (no spinning). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/time.h"
#include "crypto/pool_int.h"

static int default_workers(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 2 ? 2 : (n > 1024 ? 1024 : (int)n);
}

const kl_pool_opts kl_pool_defaults = {
    .queue_limit = {[KL_COST_FAST] = 65536,
                    [KL_COST_SLOW] = 65536,
                    [KL_COST_BLOCKING] = 65536},
    .stop_grace_ms = 2000,
};

kl_pool *kl_pool_new(const kl_pool_opts *opts)
{
    if (!opts)
        opts = &kl_pool_defaults;
    kl_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    kl_pool_sched_init(&p->sched,
                       opts->workers > 0 ? opts->workers : default_workers());
    for (int c = 0; c < KL_COST_CLASSES; c++) {
        p->q[c].limit = opts->queue_limit[c];
        atomic_init(&p->q[c].len, 0);
        atomic_init(&p->cost.exec_ns[c], 0);
    }
    p->blk.want = opts->blocking_workers > 0 ? opts->blocking_workers
                                             : KL_POOL_DEFAULT_BLOCKING;
    atomic_init(&p->blk.lanes, p->blk.want);
    atomic_init(&p->blk.busy, 0);
    p->stop_grace_ns = kl_ms_to_ns((uint64_t)opts->stop_grace_ms);
    p->threads = calloc((size_t)p->sched.workers, sizeof *p->threads);
    if (!p->threads || pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p->threads);
        free(p);
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* kl_now_ns's clock */
    int wcv_rc = pthread_cond_init(&p->wd.cv, &ca);
    pthread_condattr_destroy(&ca);
    if (wcv_rc != 0 || pthread_cond_init(&p->cv, NULL) != 0 ||
        pthread_cond_init(&p->blk.cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p->threads);
        free(p);
        return NULL;
    }
    if (opts->blocking_workers > 0) {
        pthread_mutex_lock(&p->mu); /* its threads start using p at once */
        kl_pool_blocking_start(p);
        pthread_mutex_unlock(&p->mu);
    }
    for (int i = 0; i < p->sched.workers; i++) {
        if (pthread_create(&p->threads[i], NULL, kl_pool_worker_main, p) != 0)
            break;
        p->started++;
    }
    if (p->started < p->sched.workers) {
        kl_error("crypto pool: started %d of %d workers", p->started,
                 p->sched.workers);
        if (p->started == 0) {
            kl_pool_free(p);
            return NULL;
        }
        /* keep the slow-class bound true for the workers that exist */
        pthread_mutex_lock(&p->mu);
        kl_pool_sched_init(&p->sched, p->started);
        pthread_mutex_unlock(&p->mu);
    }
    return p;
}

/* A pool left to threads stuck in a token call at shutdown (kl_pool_free) */
static kl_pool *abandoned_pool;
static pthread_mutex_t abandoned_mu = PTHREAD_MUTEX_INITIALIZER;

void kl_pool_free(kl_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->cv);
    pthread_cond_broadcast(&p->blk.cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    int stuck = kl_pool_blocking_join(p);
    /* the watchdog goes last: it still answers, at their deadline, the
     * jobs of blocking workers that are stuck in a token call */
    kl_pool_watchdog_stop(p);
    if (stuck) {
        /* the stuck threads still use p when their call returns: p stays,
         * reachable from here (a leak checker then sees it is meant) */
        pthread_mutex_lock(&abandoned_mu);
        p->abandoned_next = abandoned_pool;
        abandoned_pool = p;
        pthread_mutex_unlock(&abandoned_mu);
        return;
    }
    kl_pool_blocking_free(p);
    pthread_cond_destroy(&p->wd.cv);
    pthread_cond_destroy(&p->blk.cv);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
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
        kl_pool_blocking_start(p);
    if (p->stopping) {
        s = KL_E_CLOSED;
    } else if (c == KL_COST_BLOCKING && p->blk.started == 0) {
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
        else if (p->blk.started > p->blk.want)
            pthread_cond_broadcast(&p->blk.cv); /* a parked thread must not
                                                   take the only signal */
        else
            pthread_cond_signal(&p->blk.cv);
        if (c == KL_COST_BLOCKING)
            kl_pool_watch(p, job->deadline_ns);
    }
    pthread_mutex_unlock(&p->mu);
    return s;
}

size_t kl_pool_queued(const kl_pool *p, kl_cost_class c)
{
    if (!p || (int)c < 0 || c >= KL_COST_CLASSES)
        return 0;
    return atomic_load_explicit(&p->q[c].len, memory_order_relaxed);
}
