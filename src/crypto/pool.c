/* The cost-class worker pool (see pool.h, architecture 2).
 *
 * One mutex and one condition variable guard both queues; workers sleep on
 * the condition variable when there is nothing they may take (style.md 7:
 * no spinning). Picking rules:
 * - fast jobs first;
 * - at most workers-1 slow jobs run at once, so one worker is always free
 *   for fast jobs however many RSA-4096 signatures are queued;
 * - to keep slow jobs from starving under an endless stream of fast ones, a
 *   waiting slow job is taken after FAST_STREAK fast picks in a row (with a
 *   single worker, every other pick: the two classes alternate).
 * The blocking class (PKCS#11 keys) has its own threads and condition
 * variable: those threads take only blocking jobs, the others never do. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/log.h"
#include "core/time.h"
#include "crypto/pool.h"

#define DEFAULT_QUEUE_LIMIT 65536u
#define FAST_STREAK 8u

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
    int blocking_want;
    pthread_t *bthreads;
    int bstarted;
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
static kl_job *pick(kl_pool *p, kl_cost_class *cls)
{
    bool fast = p->q[KL_COST_FAST].head != NULL;
    bool slow_waiting = p->q[KL_COST_SLOW].head != NULL;
    bool slow = slow_waiting && p->slow_running < p->max_slow;
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

static void run(kl_job *job)
{
    if (job->test_delay_us)
        usleep((useconds_t)job->test_delay_us);
    job->out_len = 0;
    if (job->deadline_ns && kl_now_ns() > job->deadline_ns)
        job->err = KL_ERR_INTERNAL; /* P6 shedding: no crypto for the late */
    else
        job->err = kl_crypto_exec_deadline(job->key, job->opcode, job->in,
                                           job->in_len, job->out, job->out_cap,
                                           &job->out_len, job->deadline_ns);
    job->done(job); /* the job belongs to its owner from here on */
}

static void *worker_main(void *arg)
{
    kl_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        kl_cost_class cls;
        kl_job *job = pick(p, &cls);
        if (job) {
            pthread_mutex_unlock(&p->mu);
            run(job);
            pthread_mutex_lock(&p->mu);
            if (cls == KL_COST_SLOW)
                p->slow_running--;
            if (p->stopping)
                pthread_cond_broadcast(&p->cv); /* others may now exit */
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

static void *blocking_main(void *arg)
{
    kl_pool *p = arg;
    job_queue *q = &p->q[KL_COST_BLOCKING];
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (q->head) {
            kl_job *job = pop(q);
            pthread_mutex_unlock(&p->mu);
            run(job);
            pthread_mutex_lock(&p->mu);
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

/* Called with the lock held (or before the pool is shared). */
static void start_blocking(kl_pool *p)
{
    int n = p->blocking_want;
    if (p->bthreads || !(p->bthreads = calloc((size_t)n, sizeof *p->bthreads)))
        return;
    for (int i = 0; i < n; i++) {
        if (pthread_create(&p->bthreads[i], NULL, blocking_main, p) != 0)
            break;
        p->bstarted++;
    }
    if (p->bstarted < n)
        kl_error("crypto pool: started %d of %d blocking workers", p->bstarted,
                 n);
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
    }
    p->blocking_want = opts && opts->blocking_workers > 0
                           ? opts->blocking_workers
                           : KL_POOL_DEFAULT_BLOCKING;
    p->threads = calloc((size_t)p->workers, sizeof *p->threads);
    if (!p->threads || pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p->threads);
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->cv, NULL) != 0 ||
        pthread_cond_init(&p->bcv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p->threads);
        free(p);
        return NULL;
    }
    if (opts && opts->blocking_workers > 0)
        start_blocking(p);
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
    for (int i = 0; i < p->bstarted; i++)
        pthread_join(p->bthreads[i], NULL);
    free(p->bthreads);
    pthread_cond_destroy(&p->bcv);
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
        pthread_cond_signal(c == KL_COST_BLOCKING ? &p->bcv : &p->cv);
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
