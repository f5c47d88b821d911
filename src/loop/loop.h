/* SPDX-License-Identifier: Apache-2.0 */
/* An epoll event loop, one per thread: fd watchers with
 * changeable interest, a timer heap, a cross-thread wake-up through an
 * eventfd and a "before sleeping" hook where the owner flushes what the turn
 * produced. Nothing here spins: the loop sleeps in epoll_wait until an fd is
 * ready, a timer is due, or another thread calls kl_loop_wake().
 *
 * Watchers and timers are embedded in their owner's struct (no allocation per
 * connection); their fields are private to the loop. Everything except
 * kl_loop_wake() must be called on the loop's own thread. */
#ifndef KL_LOOP_LOOP_H
#define KL_LOOP_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct kl_loop kl_loop;
typedef struct kl_watch kl_watch;
typedef struct kl_timer kl_timer;

enum {
    KL_EV_READ = 1u,
    KL_EV_WRITE = 2u,
    /* Reported only: the peer hung up or the socket has an error. The
     * callback should then try its I/O to learn what happened. */
    KL_EV_ERROR = 4u,
};

typedef void (*kl_watch_fn)(kl_loop *loop, kl_watch *w, unsigned events);
typedef void (*kl_timer_fn)(kl_loop *loop, kl_timer *t);
/* Returns true when it left work for the next turn (the loop then polls
 * without sleeping). */
typedef bool (*kl_loop_hook_fn)(kl_loop *loop, void *arg);
typedef void (*kl_loop_wake_fn)(kl_loop *loop, void *arg);

struct kl_watch {
    int fd;
    unsigned interest; /* KL_EV_READ | KL_EV_WRITE currently registered */
    bool active;
    kl_watch_fn fn;
    void *data;
};

struct kl_timer {
    uint64_t due_ns; /* monotonic */
    size_t heap_idx; /* SIZE_MAX when not armed */
    kl_timer_fn fn;
    void *data;
};

kl_loop *kl_loop_new(void);
/* Closes the loop's own fds. Watchers still registered are forgotten (their
 * fds belong to their owners). */
void kl_loop_free(kl_loop *l);

/* Runs until kl_loop_stop() is called from a callback. */
KL_WUR kl_status kl_loop_run(kl_loop *l);
/* One turn: before-sleep hook, wait at most timeout_ms (-1: until
 * something happens), run due timers and ready watchers. For tests. */
KL_WUR kl_status kl_loop_run_once(kl_loop *l, int timeout_ms);
void kl_loop_stop(kl_loop *l);

/* The monotonic time of the current turn (cheap: cached per turn). */
uint64_t kl_loop_now(const kl_loop *l);
/* Whether the loop is working rather than waiting in epoll_wait: a hint
 * for other threads (relaxed read of the flag the wake-up protocol keeps;
 * true from the end of one wait to the start of the next). */
bool kl_loop_awake(kl_loop *l);
/* Nanoseconds the loop spent working - running callbacks, timers and the
 * before-sleep hook - rather than waiting in epoll_wait, since it was
 * created. Its own thread only (metrics: keylessd_loop_busy_seconds). */
uint64_t kl_loop_busy_ns(const kl_loop *l);

/* Thread-safe. Makes the loop's thread call the wake function soon.
 * Several wakes before the loop runs coalesce into one call. */
void kl_loop_wake(kl_loop *l);
void kl_loop_set_wake_fn(kl_loop *l, kl_loop_wake_fn fn, void *arg);
void kl_loop_set_before_sleep(kl_loop *l, kl_loop_hook_fn fn, void *arg);

/* ---- fd watchers ---- */
KL_WUR kl_status kl_watch_start(kl_loop *l, kl_watch *w, int fd,
                                unsigned events, kl_watch_fn fn, void *data);
/* Changes the interest (0 is allowed: stays registered, reports nothing). */
KL_WUR kl_status kl_watch_set(kl_loop *l, kl_watch *w, unsigned events);
/* Unregisters; events of this turn not yet delivered are dropped, so the
 * owner may free the watcher right after. Safe on a stopped watcher. */
void kl_watch_stop(kl_loop *l, kl_watch *w);

/* ---- timers (a binary min-heap: O(log n) arm/disarm for 10k+ timers) ---- */
void kl_timer_init(kl_timer *t, kl_timer_fn fn, void *data);
/* Arms (or re-arms) t to fire at the monotonic time due_ns. */
KL_WUR kl_status kl_timer_at(kl_loop *l, kl_timer *t, uint64_t due_ns);
KL_WUR kl_status kl_timer_after(kl_loop *l, kl_timer *t, uint64_t delay_ns);
void kl_timer_stop(kl_loop *l, kl_timer *t);
static inline bool kl_timer_armed(const kl_timer *t)
{
    return t->heap_idx != SIZE_MAX;
}

#endif
