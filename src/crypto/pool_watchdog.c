/* SPDX-License-Identifier: Apache-2.0 */
/* The deadlines of the blocking class (see pool.h, pool_int.h). A PKCS#11
 * call cannot be interrupted, and an HSM may stall for seconds. So a
 * blocking job is answered at its deadline even when its token call has not
 * returned: a watchdog thread answers the jobs whose deadline passed,
 * running or queued, with KL_E_INTERNAL (P6), while the worker keeps
 * blocking (pool_blocking.c says why that is race-free). It is started with
 * the first blocking worker and stopped last, after the blocking workers:
 * it still answers, at their deadline, the jobs of those stuck in a token
 * call. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "core/time.h"
#include "crypto/pool_int.h"

/* Called with the lock held: takes the blocking jobs, running or queued,
 * whose deadline passed (a list through ->next), and sets *next to the
 * earliest deadline still to come (UINT64_MAX: none). */
static kl_job *collect_late(kl_pool *p, uint64_t now, uint64_t *next)
{
    kl_job *late = NULL;
    *next = UINT64_MAX;
    for (int i = 0; i < p->blk.started; i++) {
        bslot *s = p->blk.slots[i];
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
    while (!p->wd.stop) {
        uint64_t next;
        kl_job *late = collect_late(p, kl_now_ns(), &next);
        if (late) {
            p->wd.next = 0; /* scanning again next: no need to wake it */
            pthread_mutex_unlock(&p->mu);
            while (late) {
                kl_job *j = late;
                late = j->next;
                j->next = NULL;
                kl_pool_answer_late(j);
            }
            pthread_mutex_lock(&p->mu);
            continue;
        }
        p->wd.next = next;
        if (next == UINT64_MAX) {
            pthread_cond_wait(&p->wd.cv, &p->mu);
        } else {
            struct timespec ts = kl_ns_to_timespec(next);
            pthread_cond_timedwait(&p->wd.cv, &p->mu, &ts);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

bool kl_pool_watchdog_start(kl_pool *p)
{
    if (p->wd.started)
        return true;
    p->wd.next = UINT64_MAX;
    if (pthread_create(&p->wd.thread, NULL, watchdog_main, p) != 0)
        return false;
    p->wd.started = true;
    return true;
}

void kl_pool_watchdog_stop(kl_pool *p)
{
    if (!p->wd.started)
        return;
    pthread_mutex_lock(&p->mu);
    p->wd.stop = true;
    pthread_cond_signal(&p->wd.cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->wd.thread, NULL);
}
