/* SPDX-License-Identifier: Apache-2.0 */
/* Private to src/loop: the loop structure shared by loop.c and timer.c. */
#ifndef KL_LOOP_INTERNAL_H
#define KL_LOOP_INTERNAL_H

#include <stdatomic.h>
#include <sys/epoll.h>

#include "loop/loop.h"

#define KL_LOOP_MAX_EVENTS 64

struct kl_loop {
    int epfd;
    int wakefd; /* eventfd */
    kl_watch wake_watch;
    atomic_bool wake_pending;   /* set: wakers skip the eventfd write */
    atomic_bool wake_requested; /* a wake-up the loop has not taken yet */
    kl_loop_wake_fn wake_fn;
    void *wake_arg;
    kl_loop_hook_fn before_sleep;
    void *before_sleep_arg;
    bool stop;
    uint64_t now_ns;
    uint64_t busy_ns; /* time spent outside epoll_wait */

    /* The batch being dispatched, so kl_watch_stop() can drop events not
     * yet delivered for a watcher its owner is about to free. */
    struct epoll_event events[KL_LOOP_MAX_EVENTS];
    int nevents;
    int cur_event;

    kl_timer **heap;
    size_t heap_len;
    size_t heap_cap;
};

/* timer.c */
void kl_loop_run_timers(kl_loop *l);
/* Nanoseconds until the earliest timer (0 when due), or -1 if none. */
int64_t kl_loop_timer_timeout_ns(const kl_loop *l);

#endif
