/* SPDX-License-Identifier: Apache-2.0 */
/* Key operations of providers that pause ASYNC jobs, run on the shard that
 * received them (crypto/async.h; docs/DESIGN.md "Accelerators: ASYNC
 * jobs"): the provider's wait fds join the shard's event loop, readiness
 * resumes the job, and its completion takes the normal path (the done
 * callback, the completion queue). A provider that calls back instead of
 * writing an fd wakes the shard's loop (kl_loop_wake: no system call while
 * the loop is awake), whose wake function resumes every operation that
 * completed (kl_shard_async_poll). A timer passes over the paused jobs
 * every EXPIRE_EVERY while any is in progress, answering those past their
 * deadline or whose client went away. Made on the first such operation,
 * so a server without such keys has none of it. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/time.h"
#include "crypto/async.h"
#include "engine/internal.h"

#define EXPIRE_EVERY (10 * KL_NS_PER_MS)

typedef struct async_fd {
    kl_watch w;
    void *tag;
    kl_shard *s;
} async_fd;

struct kl_shard_async {
    kl_shard *s;
    kl_async *a;
    async_fd **byfd; /* indexed by fd */
    size_t nbyfd;
    kl_timer tick;
    bool failed; /* could not be made: every operation goes to the pool */
};

static void on_ready(kl_loop *loop, kl_watch *w, unsigned events)
{
    (void)loop, (void)events;
    async_fd *af = w->data;
    /* may stop and free af (the job ended and its fd went away) */
    kl_async_ready(af->s->async->a, af->tag);
}

static void watch(void *arg, int fd, bool add, void *tag)
{
    struct kl_shard_async *sa = arg;
    if (fd < 0)
        return;
    size_t i = (size_t)fd;
    if (!add) {
        async_fd *af = i < sa->nbyfd ? sa->byfd[i] : NULL;
        if (af) {
            kl_watch_stop(sa->s->ev.loop, &af->w);
            free(af);
            sa->byfd[i] = NULL;
        }
        return;
    }
    if (i >= sa->nbyfd) {
        size_t n = sa->nbyfd ? sa->nbyfd : 64;
        while (n <= i)
            n *= 2;
        async_fd **b = realloc(sa->byfd, n * sizeof *b);
        if (!b)
            goto fail;
        memset(b + sa->nbyfd, 0, (n - sa->nbyfd) * sizeof *b);
        sa->byfd = b;
        sa->nbyfd = n;
    }
    async_fd *af = malloc(sizeof *af);
    if (!af)
        goto fail;
    af->tag = tag;
    af->s = sa->s;
    if (kl_watch_start(sa->s->ev.loop, &af->w, fd, KL_EV_READ, on_ready, af) !=
        KL_OK) {
        free(af);
        goto fail;
    }
    sa->byfd[i] = af;
    return;
fail:
    /* the operation is then answered at its deadline (the timer) */
    kl_warn("shard %d: cannot watch an accelerator's fd %d: out of memory",
            sa->s->index, fd);
}

/* On a provider's thread (crypto/async.h kl_async_wake_fn). */
static void wake(void *arg)
{
    struct kl_shard_async *sa = arg;
    kl_loop_wake(sa->s->ev.loop);
}

static void on_tick(kl_loop *loop, kl_timer *t)
{
    struct kl_shard_async *sa = t->data;
    /* operations a busy provider asked to retry (kl_async_poll) */
    kl_async_poll(sa->a);
    kl_async_expire(sa->a, kl_loop_now(loop));
    if (kl_async_busy(sa->a) &&
        kl_timer_after(loop, &sa->tick, EXPIRE_EVERY) != KL_OK)
        kl_warn("shard %d: cannot arm the accelerator timer", sa->s->index);
}

static struct kl_shard_async *get(kl_shard *s)
{
    if (s->async)
        return s->async->failed ? NULL : s->async;
    struct kl_shard_async *sa = calloc(1, sizeof *sa);
    if (!sa)
        return NULL;
    s->async = sa;
    sa->s = s;
    kl_timer_init(&sa->tick, on_tick, sa);
    kl_async_opts o = {.max_jobs = s->srv->o.max_async_jobs,
                       .watch = watch,
                       .wake = wake,
                       .arg = sa};
    if (kl_async_new(&o, &sa->a) != KL_OK) {
        kl_warn("shard %d: cannot set up ASYNC jobs; accelerator operations "
                "run on blocking workers",
                s->index);
        sa->failed = true;
        return NULL;
    }
    return sa;
}

/* A paused job's end, always on its shard's thread (kl_async_ready and
 * the expiry timer run there): answered here and now, not through the
 * completion queue and a wake-up of the loop it is already on. */
static void async_done(kl_job *job)
{
    kl_srv_job *j = (kl_srv_job *)job;
    kl_shard *s = job->owner;
    if (j->t0_ns) { /* metrics on: when it ran (kl_mx_job_done's rule) */
        uint64_t now = kl_now_ns();
        j->start_ns = job->started_ns && job->started_ns >= j->t0_ns &&
                              job->started_ns <= now
                          ? job->started_ns
                          : now;
        j->done_ns = now;
    }
    kl_shard_finish_job(s, j);
}

kl_async_result kl_shard_async_run(kl_shard *s, kl_srv_job *j)
{
    struct kl_shard_async *sa = get(s);
    if (!sa)
        return KL_ASYNC_FULL;
    /* kept for the pool when there is no slot (KL_ASYNC_FULL) */
    kl_job_done_fn pool_done = j->job.done;
    j->job.done = async_done;
    kl_async_result r = kl_async_start(sa->a, &j->job);
    if (r == KL_ASYNC_FULL)
        j->job.done = pool_done;
    if (r == KL_ASYNC_PAUSED && !kl_timer_armed(&sa->tick) &&
        kl_timer_after(s->ev.loop, &sa->tick, EXPIRE_EVERY) != KL_OK)
        kl_warn("shard %d: cannot arm the accelerator timer", s->index);
    return r;
}

unsigned kl_shard_async_poll(kl_shard *s)
{
    return s->async && s->async->a ? kl_async_poll(s->async->a) : 0;
}

unsigned kl_shard_async_busy(const kl_shard *s)
{
    return s->async && s->async->a ? kl_async_busy(s->async->a) : 0;
}

void kl_shard_async_get_stats(const kl_shard *s, kl_async_stats *out)
{
    memset(out, 0, sizeof *out);
    if (s->async && s->async->a)
        kl_async_get_stats(s->async->a, out);
}

void kl_shard_async_free(kl_shard *s)
{
    struct kl_shard_async *sa = s->async;
    if (!sa)
        return;
    kl_timer_stop(s->ev.loop, &sa->tick);
    unsigned left = sa->a ? kl_async_busy(sa->a) : 0;
    if (left)
        kl_warn("shard %d: %u accelerator operation(s) never came back from "
                "the provider; left behind",
                s->index, left);
    kl_async_free(sa->a); /* stops watching its fds */
    free(sa->byfd);
    free(sa);
    s->async = NULL;
}
