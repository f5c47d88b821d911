/* SPDX-License-Identifier: Apache-2.0 */
/* The epoll loop. Level-triggered: an owner that stops reading removes its
 * read interest instead of leaving bytes unread under an edge trigger, which
 * keeps backpressure (protocol P8) a matter of one kl_watch_set(). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "core/time.h"
#include "loop/internal.h"

static uint32_t to_epoll(unsigned ev)
{
    uint32_t e = 0;
    if (ev & KL_EV_READ)
        e |= EPOLLIN;
    if (ev & KL_EV_WRITE)
        e |= EPOLLOUT;
    return e;
}

/* Wake-ups (a wake-up per completion batch was a visible share of
 * the server's CPU). Two flags:
 * - requested: set by every kl_loop_wake; the loop takes it (exchange) at
 *   the start of each turn and then runs the wake function;
 * - wake_pending: while it is set a waker does not write the eventfd. The
 *   loop keeps it set while it works - a wake-up during a turn costs no
 *   system call at all - and clears it just before it sleeps, then looks at
 *   `requested` once more: set, it does not sleep (timeout 0).
 * A waker stores `requested`, then exchanges `wake_pending`; the loop
 * stores `wake_pending` (false), then loads `requested`. Both sequentially
 * consistent: either the waker sees the flag cleared and writes the
 * eventfd, or the loop sees the request and does not sleep - a wake-up is
 * never lost (tests/unit/loop has the stress test). The eventfd watcher
 * only drains the counter; the wake function runs once per turn, after
 * the ready fds. */
static void on_wake(kl_loop *l, kl_watch *w, unsigned events)
{
    uint64_t v;
    while (read(w->fd, &v, sizeof v) < 0 && errno == EINTR)
        ;
}

kl_loop *kl_loop_new(void)
{
    kl_loop *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    l->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    atomic_init(&l->wake_pending, false);
    atomic_init(&l->wake_requested, false);
    l->now_ns = kl_now_ns();
    if (l->epfd < 0 || l->wakefd < 0 ||
        kl_watch_start(l, &l->wake_watch, l->wakefd, KL_EV_READ, on_wake,
                       NULL) != KL_OK) {
        kl_loop_free(l);
        return NULL;
    }
    return l;
}

void kl_loop_free(kl_loop *l)
{
    if (!l)
        return;
    if (l->epfd >= 0)
        close(l->epfd);
    if (l->wakefd >= 0)
        close(l->wakefd);
    free(l->heap);
    free(l);
}

uint64_t kl_loop_now(const kl_loop *l)
{
    return l->now_ns;
}

bool kl_loop_awake(kl_loop *l)
{
    return atomic_load_explicit(&l->wake_pending, memory_order_relaxed);
}

uint64_t kl_loop_busy_ns(const kl_loop *l)
{
    return l->busy_ns;
}

void kl_loop_stop(kl_loop *l)
{
    l->stop = true;
}

void kl_loop_set_wake_fn(kl_loop *l, kl_loop_wake_fn fn, void *arg)
{
    l->wake_fn = fn;
    l->wake_arg = arg;
}

void kl_loop_set_before_sleep(kl_loop *l, kl_loop_hook_fn fn, void *arg)
{
    l->before_sleep = fn;
    l->before_sleep_arg = arg;
}

void kl_loop_wake(kl_loop *l)
{
    atomic_store(&l->wake_requested, true);
    if (atomic_exchange(&l->wake_pending, true))
        return; /* the loop is awake, or a wake-up is on its way */
    uint64_t one = 1;
    while (write(l->wakefd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

kl_status kl_watch_start(kl_loop *l, kl_watch *w, int fd, unsigned events,
                         kl_watch_fn fn, void *data)
{
    struct epoll_event ev = {.events = to_epoll(events), .data.ptr = w};
    w->fd = fd;
    w->fn = fn;
    w->data = data;
    w->interest = events;
    KL_ENSURE(epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) == 0, KL_E_IO);
    w->active = true;
    return KL_OK;
}

kl_status kl_watch_set(kl_loop *l, kl_watch *w, unsigned events)
{
    KL_ENSURE(w->active, KL_E_INTERNAL);
    if (w->interest == events)
        return KL_OK;
    struct epoll_event ev = {.events = to_epoll(events), .data.ptr = w};
    KL_ENSURE(epoll_ctl(l->epfd, EPOLL_CTL_MOD, w->fd, &ev) == 0, KL_E_IO);
    w->interest = events;
    return KL_OK;
}

void kl_watch_stop(kl_loop *l, kl_watch *w)
{
    if (!w->active)
        return;
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, w->fd, NULL);
    w->active = false;
    for (int i = l->cur_event + 1; i < l->nevents; i++)
        if (l->events[i].data.ptr == w)
            l->events[i].data.ptr = NULL;
}

/* Timers fire to the microsecond where the kernel has epoll_pwait2
 * (Linux 5.11): a 200 us hold (the router's answer batching) must not
 * become a millisecond. Older kernels get epoll_wait, rounded up to the
 * millisecond (so does Valgrind 3.19, which warns once about syscall 441
 * and returns ENOSYS: make valgrind runs the fallback). */
static int wait_events(kl_loop *l, int64_t timeout_ns)
{
    static atomic_bool no_pwait2;
    if (!atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
        struct timespec ts, *tp = NULL;
        if (timeout_ns >= 0) {
            ts = kl_ns_to_timespec((uint64_t)timeout_ns);
            tp = &ts;
        }
        int n = epoll_pwait2(l->epfd, l->events, KL_LOOP_MAX_EVENTS, tp, NULL);
        if (n >= 0 || errno != ENOSYS)
            return n;
        atomic_store_explicit(&no_pwait2, true, memory_order_relaxed);
    }
    int ms = timeout_ns < 0 ? -1
                            : (int)((timeout_ns + (int64_t)KL_NS_PER_MS - 1) /
                                    (int64_t)KL_NS_PER_MS);
    return epoll_wait(l->epfd, l->events, KL_LOOP_MAX_EVENTS, ms);
}

kl_status kl_loop_run_once(kl_loop *l, int timeout_ms)
{
    l->stop = false;
    if (l->before_sleep && l->before_sleep(l, l->before_sleep_arg))
        timeout_ms = 0;
    if (l->stop)
        return KL_OK;
    int64_t timeout_ns =
        timeout_ms < 0 ? -1 : (int64_t)timeout_ms * (int64_t)KL_NS_PER_MS;
    int64_t t = kl_loop_timer_timeout_ns(l);
    if (t >= 0 && (timeout_ns < 0 || t < timeout_ns))
        timeout_ns = t;
    /* about to sleep: wakers write the eventfd from here on (see above) */
    atomic_store(&l->wake_pending, false);
    if (atomic_load(&l->wake_requested))
        timeout_ns = 0;
    /* busy: from the end of the last wait to the start of this one (two
     * clock reads per turn, the second one needed anyway) */
    uint64_t before = kl_now_ns();
    if (before > l->now_ns)
        l->busy_ns += before - l->now_ns;
    int n = wait_events(l, timeout_ns);
    if (n < 0) {
        KL_ENSURE(errno == EINTR, KL_E_IO);
        n = 0;
    }
    l->now_ns = kl_now_ns();
    /* awake: wake-ups until the next sleep cost no system call */
    atomic_store(&l->wake_pending, true);
    l->nevents = n;
    for (l->cur_event = 0; l->cur_event < n && !l->stop; l->cur_event++) {
        struct epoll_event *e = &l->events[l->cur_event];
        kl_watch *w = e->data.ptr;
        if (!w)
            continue; /* stopped earlier in this batch */
        unsigned ev = 0;
        if (e->events & EPOLLIN)
            ev |= KL_EV_READ;
        if (e->events & EPOLLOUT)
            ev |= KL_EV_WRITE;
        if (e->events & (EPOLLERR | EPOLLHUP))
            ev |= KL_EV_ERROR;
        w->fn(l, w, ev);
    }
    l->nevents = 0;
    l->cur_event = 0;
    /* after the ready fds, as when the eventfd came last in the batch:
     * input that arrived with the wake-up is read first (a shutdown's
     * wake-up then drains connections with those requests in flight) */
    if (!l->stop && atomic_exchange(&l->wake_requested, false) && l->wake_fn)
        l->wake_fn(l, l->wake_arg);
    if (!l->stop)
        kl_loop_run_timers(l);
    return KL_OK;
}

kl_status kl_loop_run(kl_loop *l)
{
    do
        KL_GUARD(kl_loop_run_once(l, -1));
    while (!l->stop);
    return KL_OK;
}
