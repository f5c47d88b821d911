/* SPDX-License-Identifier: Apache-2.0 */
/* Key operations as OpenSSL ASYNC jobs (async.h; docs/DESIGN.md
 * "Accelerators: ASYNC jobs").
 *
 * Slots are made once and kept: each has an ASYNC_WAIT_CTX for its whole
 * life, so a provider that keeps one fd per wait context (as card
 * providers do) is added to the owner's poll set once, not per operation.
 * After every pause the slot compares the context's fds with those it
 * watches and tells the owner the difference. A readable fd on an idle
 * slot (a provider that left it readable) is unwatched until the slot's
 * next pause, so that a level-triggered poll set cannot spin.
 *
 * With an owner's wake function, each wait context also carries a
 * completion callback (ASYNC_WAIT_CTX_set_callback). A provider that uses
 * it says so with ASYNC_STATUS_OK before it pauses, and calls it from its
 * own thread when the operation is done: the callback pushes the slot on a
 * lock-free stack and wakes the owner only when the stack was empty, so a
 * batch of completions costs the owner one wake-up and no fd at all. A
 * pause with ASYNC_STATUS_EAGAIN or ASYNC_STATUS_ERR (the provider's queue
 * was full, or it failed) is resumed at the owner's next turn. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/async.h>
#include <openssl/crypto.h>
#include <openssl/err.h>

#include "core/time.h"
#include "crypto/async.h"
#include "crypto/ctx_cache.h"

#define MAX_FDS 4

typedef struct slot {
    kl_async *owner;
    ASYNC_WAIT_CTX *wctx;
    ASYNC_JOB *ajob; /* NULL: idle */
    kl_job *job;     /* the request's job; NULL once answered early */
    void *hold;      /* key_hold's handle while answered early */
    void (*unhold)(void *handle);
    const kl_key *key; /* copied from job: valid while the hold or job is */
    uint8_t opcode;
    uint8_t *in, *out;
    size_t in_len, in_cap, out_cap, out_len;
    kl_status err;
    kl_ctx_entry ctx; /* the slot's own OpenSSL context (ops.h) */
    int fds[MAX_FDS]; /* watched in the owner's poll set */
    unsigned nfds;
    bool paused_once;
    unsigned retries;   /* EAGAIN/ERR pauses of this operation in a row */
    struct slot *cnext; /* on the completed stack */
    struct slot *rnext; /* on the retry list */
    atomic_bool queued; /* on the completed stack (the callback's) */
} slot;

struct kl_async {
    kl_async_opts o;
    slot *slots;
    unsigned nslots;
    unsigned *free_list; /* indices of idle slots */
    unsigned nfree;
    kl_async_stats st;
    /* pushed by providers' callbacks on any thread, taken by the owner */
    _Atomic(slot *) completed;
    slot *retry; /* paused with EAGAIN or ERR: resumed at the next poll */
    /* the wake-up from a callback vs kl_async_free: no wake-up reaches an
     * owner that is gone (a provider may answer a job left behind) */
    pthread_mutex_t wake_mu;
    bool closed;
};

kl_status kl_async_new(const kl_async_opts *o, kl_async **out)
{
    *out = NULL;
    kl_async *a = calloc(1, sizeof *a);
    if (!a)
        return KL_E_NOMEM;
    a->o = *o;
    a->nslots = o->max_jobs ? o->max_jobs : KL_ASYNC_DEFAULT_JOBS;
    a->slots = calloc(a->nslots, sizeof *a->slots);
    a->free_list = calloc(a->nslots, sizeof *a->free_list);
    /* the thread's pool of ASYNC jobs (stacks), made as they are needed */
    if (!a->slots || !a->free_list || !ASYNC_init_thread(a->nslots, 0)) {
        free(a->slots);
        free(a->free_list);
        free(a);
        return KL_E_NOMEM;
    }
    pthread_mutex_init(&a->wake_mu, NULL);
    atomic_init(&a->completed, NULL);
    for (unsigned i = 0; i < a->nslots; i++) {
        a->slots[i].owner = a;
        atomic_init(&a->slots[i].queued, false);
        a->free_list[a->nfree++] = a->nslots - 1 - i;
    }
    *out = a;
    return KL_OK;
}

static void unwatch_all(slot *s)
{
    kl_async *a = s->owner;
    for (unsigned i = 0; i < s->nfds; i++) {
        a->o.watch(a->o.arg, s->fds[i], false, s);
        a->st.fds--;
    }
    s->nfds = 0;
}

void kl_async_free(kl_async *a)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->wake_mu);
    a->closed = true;
    pthread_mutex_unlock(&a->wake_mu);
    bool all_idle = true;
    for (unsigned i = 0; i < a->nslots; i++) {
        slot *s = &a->slots[i];
        unwatch_all(s);
        if (s->ajob) {
            all_idle = false; /* left behind (async.h) */
            continue;
        }
        ASYNC_WAIT_CTX_free(s->wctx); /* its fds' cleanups close them */
        kl_crypto_private_free(&s->ctx);
        OPENSSL_clear_free(s->in, s->in_cap);
        OPENSSL_clear_free(s->out, s->out_cap);
    }
    if (!all_idle)
        return;
    ASYNC_cleanup_thread();
    pthread_mutex_destroy(&a->wake_mu);
    free(a->slots);
    free(a->free_list);
    free(a);
}

/* Makes the watched set equal to the wait context's fds. */
static void sync_fds(slot *s)
{
    kl_async *a = s->owner;
    OSSL_ASYNC_FD now[MAX_FDS];
    size_t n = 0;
    if (!ASYNC_WAIT_CTX_get_all_fds(s->wctx, NULL, &n) || n > MAX_FDS)
        n = 0; /* more than we watch: resumed only by expiry */
    else if (n)
        ASYNC_WAIT_CTX_get_all_fds(s->wctx, now, &n);
    for (unsigned i = 0; i < s->nfds;) {
        bool keep = false;
        for (size_t j = 0; j < n; j++)
            keep |= now[j] == s->fds[i];
        if (keep) {
            i++;
            continue;
        }
        a->o.watch(a->o.arg, s->fds[i], false, s);
        a->st.fds--;
        s->fds[i] = s->fds[--s->nfds];
    }
    for (size_t j = 0; j < n; j++) {
        bool have = false;
        for (unsigned i = 0; i < s->nfds; i++)
            have |= s->fds[i] == now[j];
        if (!have) {
            s->fds[s->nfds++] = now[j];
            a->o.watch(a->o.arg, now[j], true, s);
            a->st.fds++;
        }
    }
}

/* A provider's completion callback, on the provider's thread: small and
 * non-blocking, as ASYNC_WAIT_CTX_set_callback asks. A second call for
 * the same pause is dropped (the slot is on the stack already). */
static int on_complete(void *arg)
{
    slot *s = arg;
    kl_async *a = s->owner;
    if (atomic_exchange_explicit(&s->queued, true, memory_order_acq_rel))
        return 1;
    slot *old = atomic_load_explicit(&a->completed, memory_order_relaxed);
    do
        s->cnext = old;
    while (!atomic_compare_exchange_weak_explicit(
        &a->completed, &old, s, memory_order_release, memory_order_relaxed));
    if (!old) { /* the first of a batch: the owner takes them all */
        pthread_mutex_lock(&a->wake_mu);
        if (!a->closed)
            a->o.wake(a->o.arg);
        pthread_mutex_unlock(&a->wake_mu);
    }
    return 1;
}

/* The slot whose job this thread starts: job_main runs inside
 * ASYNC_start_job's first switch, so it is read before any other start.
 * (An argument would be copied into a malloc'd block per job.) */
static _Thread_local slot *starting;

static int job_main(void *arg)
{
    (void)arg;
    slot *s = starting;
    starting = NULL;
    s->err = kl_crypto_exec_private(&s->ctx, s->key, s->opcode, s->in,
                                    s->in_len, s->out, s->out_cap, &s->out_len);
    return 0;
}

static bool grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (*cap >= need)
        return true;
    uint8_t *b = OPENSSL_malloc(need);
    if (!b)
        return false;
    OPENSSL_clear_free(*buf, *cap);
    *buf = b;
    *cap = need;
    return true;
}

/* The slot's operation ended (the ASYNC job finished or failed). */
static void release(slot *s)
{
    kl_async *a = s->owner;
    s->ajob = NULL;
    s->job = NULL;
    if (s->hold && s->unhold)
        s->unhold(s->hold);
    s->hold = NULL;
    OPENSSL_cleanse(s->out, s->out_len);
    a->st.busy--;
    a->free_list[a->nfree++] = (unsigned)(s - a->slots);
}

/* Copies the result into the job (still attached). */
static void deliver(slot *s)
{
    kl_job *job = s->job;
    job->err = s->err;
    job->out_len = 0;
    if (s->err == KL_OK && s->out_len <= job->out_cap) {
        memcpy(job->out, s->out, s->out_len);
        job->out_len = s->out_len;
    } else if (s->err == KL_OK) {
        job->err = KL_E_INTERNAL;
    }
}

/* One step of the ASYNC job; true when the operation is over. */
static bool step(slot *s)
{
    int ret;
    if (!s->ajob)
        starting = s;
    int r = ASYNC_start_job(&s->ajob, s->wctx, &ret, job_main, NULL, 0);
    if (r == ASYNC_PAUSE) {
        kl_async *a = s->owner;
        if (!s->paused_once)
            a->st.paused++;
        s->paused_once = true;
        /* the status means something only with our callback set */
        int status = a->o.wake ? ASYNC_WAIT_CTX_get_status(s->wctx)
                               : ASYNC_STATUS_UNSUPPORTED;
        if (status == ASYNC_STATUS_OK) {
            /* the provider calls back: no fd of this slot is needed */
            if (s->nfds)
                unwatch_all(s);
            return false;
        }
        if (status == ASYNC_STATUS_EAGAIN || status == ASYNC_STATUS_ERR) {
            /* no callback will come: the provider asks to be resumed. The
             * first few times at the owner's next turn; then at its next
             * poll for any other reason (a completion, its timer), so
             * that a device refusing for long is not asked in a spin */
            ASYNC_WAIT_CTX_set_status(s->wctx, ASYNC_STATUS_UNSUPPORTED);
            a->st.retried++;
            s->rnext = a->retry;
            a->retry = s;
            if (++s->retries <= KL_ASYNC_FAST_RETRIES)
                a->o.wake(a->o.arg);
            return false;
        }
        sync_fds(s);
        return false;
    }
    if (r != ASYNC_FINISH)
        s->err = KL_E_INTERNAL; /* ASYNC_ERR, ASYNC_NO_JOBS */
    /* what a provider queued belongs to this operation only */
    if (ERR_peek_last_error())
        ERR_clear_error();
    if (s->nfds) /* a provider may drop its fd at the end */
        sync_fds(s);
    return true;
}

static bool shed(const kl_job *job, uint64_t now)
{
    return (job->abandoned &&
            atomic_load_explicit(job->abandoned, memory_order_relaxed)) ||
           (job->deadline_ns && now > job->deadline_ns);
}

static bool new_wait_ctx(slot *s)
{
    s->wctx = ASYNC_WAIT_CTX_new();
    if (!s->wctx)
        return false;
    if (s->owner->o.wake &&
        !ASYNC_WAIT_CTX_set_callback(s->wctx, on_complete, s)) {
        ASYNC_WAIT_CTX_free(s->wctx);
        s->wctx = NULL;
        return false;
    }
    return true;
}

kl_async_result kl_async_start(kl_async *a, kl_job *job)
{
    job->out_len = 0;
    uint64_t now = kl_now_ns();
    if (shed(job, now)) {
        job->err = KL_E_INTERNAL; /* P6 shedding, as the pool does */
        return KL_ASYNC_DONE;
    }
    if (!a->nfree) {
        a->st.full++;
        return KL_ASYNC_FULL;
    }
    slot *s = &a->slots[a->free_list[a->nfree - 1]];
    if ((!s->wctx && !new_wait_ctx(s)) ||
        !grow(&s->in, &s->in_cap, job->in_len ? job->in_len : 1) ||
        !grow(&s->out, &s->out_cap, job->out_cap ? job->out_cap : 1)) {
        job->err = KL_E_INTERNAL;
        return KL_ASYNC_DONE;
    }
    a->nfree--;
    a->st.busy++;
    a->st.started++;
    job->started_ns = now;
    memcpy(s->in, job->in, job->in_len);
    s->in_len = job->in_len;
    s->out_len = 0;
    s->key = job->key;
    s->opcode = job->opcode;
    s->job = job;
    s->hold = NULL;
    s->unhold = NULL;
    s->paused_once = false;
    s->retries = 0;
    /* a provider sets another status when it will call back (step) */
    ASYNC_WAIT_CTX_set_status(s->wctx, ASYNC_STATUS_UNSUPPORTED);
    if (!step(s))
        return KL_ASYNC_PAUSED;
    deliver(s);
    release(s);
    return KL_ASYNC_DONE;
}

/* Resumes s's paused job; answers its request when the job finished. */
static void resume(kl_async *a, slot *s)
{
    a->st.resumed++;
    if (!step(s))
        return;
    kl_job *job = s->job;
    if (job)
        deliver(s);
    release(s);
    if (job)
        job->done(job);
}

void kl_async_ready(kl_async *a, void *tag)
{
    slot *s = tag;
    if (!s->ajob) {
        a->st.spurious++;
        unwatch_all(s); /* watched again at its next pause */
        return;
    }
    resume(a, s);
}

unsigned kl_async_poll(kl_async *a)
{
    unsigned n = 0;
    /* the retry list first: a slot resumed now may go back on it */
    slot *retry = a->retry;
    a->retry = NULL;
    while (retry) {
        slot *s = retry;
        retry = s->rnext;
        n++;
        resume(a, s);
    }
    slot *lifo =
        atomic_exchange_explicit(&a->completed, NULL, memory_order_acquire);
    slot *fifo = NULL; /* in the order the provider finished them */
    while (lifo) {
        slot *next = lifo->cnext;
        lifo->cnext = fifo;
        fifo = lifo;
        lifo = next;
    }
    while (fifo) {
        slot *s = fifo;
        fifo = s->cnext;
        /* from here a callback may push it again (its next pause) */
        atomic_store_explicit(&s->queued, false, memory_order_release);
        n++;
        if (!s->ajob) {
            a->st.spurious++; /* a callback for a pause already over */
            continue;
        }
        resume(a, s);
    }
    return n;
}

unsigned kl_async_expire(kl_async *a, uint64_t now_ns)
{
    unsigned n = 0;
    /* the slots in use are found by the time this many were seen (idle
     * slots are taken lowest first, so they are the low indices) */
    unsigned busy = a->st.busy, seen = 0;
    for (unsigned i = 0; i < a->nslots && seen < busy; i++) {
        slot *s = &a->slots[i];
        if (!s->ajob)
            continue;
        seen++;
        kl_job *job = s->job;
        if (!job)
            continue;
        bool gone = job->abandoned &&
                    atomic_load_explicit(job->abandoned, memory_order_relaxed);
        if (!gone && !(job->deadline_ns && now_ns >= job->deadline_ns))
            continue;
        /* the provider still has the operation: keep its key alive */
        if (job->key_hold) {
            s->hold = job->key_hold(job);
            s->unhold = job->key_unhold;
        }
        s->job = NULL;
        job->err = KL_E_INTERNAL;
        job->out_len = 0;
        a->st.expired++;
        n++;
        job->done(job);
    }
    return n;
}

unsigned kl_async_busy(const kl_async *a)
{
    return a->st.busy;
}

void kl_async_get_stats(const kl_async *a, kl_async_stats *out)
{
    *out = a->st;
}
