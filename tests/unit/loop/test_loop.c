/* SPDX-License-Identifier: Apache-2.0 */
/* src/loop: timers fire in order, cross-thread wake-ups, fd readiness,
 * interest changes, and events of a stopped watcher are never delivered. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/time.h"
#include "loop/loop.h"
#include "testutil.h"

/* ---- timers ---- */

typedef struct {
    int order[16];
    int n;
} fired_log;

typedef struct {
    kl_timer t;
    int id;
    fired_log *log;
} tagged_timer;

static void on_tagged(kl_loop *l, kl_timer *t)
{
    tagged_timer *tt = t->data;
    tt->log->order[tt->log->n++] = tt->id;
}

static void run_until_count(kl_loop *l, fired_log *log, int want)
{
    uint64_t end = kl_now_ns() + 2000 * KL_NS_PER_MS;
    while (log->n < want && kl_now_ns() < end)
        assert_int_equal(kl_loop_run_once(l, 100), KL_OK);
}

static void test_timers_fire_in_order(void **state)
{
    kl_loop *l = kl_loop_new();
    assert_non_null(l);
    fired_log log = {0};
    /* Armed out of order; ids are the expected firing order. */
    static const int delays_ms[] = {40, 10, 30, 20, 50, 5};
    static const int ids[] = {5, 2, 4, 3, 6, 1};
    tagged_timer tt[6];
    uint64_t start = kl_now_ns();
    for (int i = 0; i < 6; i++) {
        tt[i].id = ids[i];
        tt[i].log = &log;
        kl_timer_init(&tt[i].t, on_tagged, &tt[i]);
        assert_int_equal(
            kl_timer_after(l, &tt[i].t, delays_ms[i] * KL_NS_PER_MS), KL_OK);
        assert_true(kl_timer_armed(&tt[i].t));
    }
    run_until_count(l, &log, 6);
    assert_int_equal(log.n, 6);
    for (int i = 0; i < 6; i++)
        assert_int_equal(log.order[i], i + 1);
    /* the last one cannot have fired before its 50 ms */
    assert_true(kl_now_ns() - start >= 50 * KL_NS_PER_MS);
    for (int i = 0; i < 6; i++)
        assert_false(kl_timer_armed(&tt[i].t));
    kl_loop_free(l);
}

static void test_timer_stop_and_rearm(void **state)
{
    kl_loop *l = kl_loop_new();
    fired_log log = {0};
    tagged_timer a = {.id = 1, .log = &log}, b = {.id = 2, .log = &log},
                 c = {.id = 3, .log = &log};
    kl_timer_init(&a.t, on_tagged, &a);
    kl_timer_init(&b.t, on_tagged, &b);
    kl_timer_init(&c.t, on_tagged, &c);
    assert_int_equal(kl_timer_after(l, &a.t, 5 * KL_NS_PER_MS), KL_OK);
    assert_int_equal(kl_timer_after(l, &b.t, 10 * KL_NS_PER_MS), KL_OK);
    assert_int_equal(kl_timer_after(l, &c.t, 15 * KL_NS_PER_MS), KL_OK);
    kl_timer_stop(l, &a.t);
    kl_timer_stop(l, &a.t); /* twice is harmless */
    /* re-arm c earlier than b */
    assert_int_equal(kl_timer_after(l, &c.t, 1 * KL_NS_PER_MS), KL_OK);
    run_until_count(l, &log, 2);
    usleep(20000);
    assert_int_equal(kl_loop_run_once(l, 0), KL_OK);
    assert_int_equal(log.n, 2);
    assert_int_equal(log.order[0], 3);
    assert_int_equal(log.order[1], 2);
    kl_loop_free(l);
}

/* Many timers with pseudo-random deadlines come out sorted. */
static void test_timer_heap_many(void **state)
{
    kl_loop *l = kl_loop_new();
    enum { N = 2000 };
    kl_timer *t = calloc(N, sizeof *t);
    uint64_t base = kl_now_ns() + 3600ull * 1000 * KL_NS_PER_MS; /* never due */
    unsigned seed = 12345;
    for (int i = 0; i < N; i++) {
        kl_timer_init(&t[i], NULL, NULL);
        seed = seed * 1103515245u + 12345u;
        assert_int_equal(kl_timer_at(l, &t[i], base + (seed >> 8) % 100000),
                         KL_OK);
    }
    /* stop every third, then check the heap yields ascending due times by
     * repeatedly finding and stopping the earliest */
    for (int i = 0; i < N; i += 3)
        kl_timer_stop(l, &t[i]);
    uint64_t last = 0;
    int left = 0;
    for (int i = 0; i < N; i++)
        left += kl_timer_armed(&t[i]);
    for (int k = 0; k < left; k++) {
        kl_timer *min = NULL;
        for (int i = 0; i < N; i++)
            if (kl_timer_armed(&t[i]) && (!min || t[i].due_ns < min->due_ns))
                min = &t[i];
        assert_non_null(min);
        /* the heap root must hold the minimum */
        kl_timer *root = NULL;
        for (int i = 0; i < N; i++)
            if (kl_timer_armed(&t[i]) && t[i].heap_idx == 0)
                root = &t[i];
        assert_non_null(root);
        assert_true(root->due_ns == min->due_ns);
        assert_true(min->due_ns >= last);
        last = min->due_ns;
        kl_timer_stop(l, min);
    }
    free(t);
    kl_loop_free(l);
}

/* ---- cross-thread wake-up ---- */

typedef struct {
    kl_loop *loop;
    int wakes;
} wake_state;

static void on_wake_count(kl_loop *l, void *arg)
{
    wake_state *ws = arg;
    ws->wakes++;
    kl_loop_stop(l);
}

static void *waker(void *arg)
{
    wake_state *ws = arg;
    usleep(20000);
    kl_loop_wake(ws->loop);
    return NULL;
}

static void test_cross_thread_wake(void **state)
{
    kl_loop *l = kl_loop_new();
    wake_state ws = {.loop = l};
    kl_loop_set_wake_fn(l, on_wake_count, &ws);
    pthread_t th;
    uint64_t start = kl_now_ns();
    assert_int_equal(pthread_create(&th, NULL, waker, &ws), 0);
    /* blocks with no timeout: only the wake-up can end it */
    assert_int_equal(kl_loop_run(l), KL_OK);
    pthread_join(th, NULL);
    assert_int_equal(ws.wakes, 1);
    assert_true(kl_now_ns() - start >= 15 * KL_NS_PER_MS);
    kl_loop_free(l);
}

/* kl_loop_awake (the shards' spill rule reads it from other threads):
 * false while the loop waits in epoll_wait, true while it runs callbacks. */
typedef struct {
    kl_loop *loop;
    bool awake_in_callback;
} awake_state;

static void on_wake_awake(kl_loop *l, void *arg)
{
    awake_state *as = arg;
    as->awake_in_callback = kl_loop_awake(l);
    kl_loop_stop(l);
}

static void *awake_observer(void *arg)
{
    awake_state *as = arg;
    /* the loop goes to sleep with no timer: seen asleep within 2 s */
    bool seen_asleep = false;
    for (int i = 0; i < 2000 && !seen_asleep; i++) {
        usleep(1000);
        seen_asleep = !kl_loop_awake(as->loop);
    }
    kl_loop_wake(as->loop);
    return (void *)(uintptr_t)seen_asleep;
}

static void test_awake_hint(void **state)
{
    kl_loop *l = kl_loop_new();
    awake_state as = {.loop = l};
    kl_loop_set_wake_fn(l, on_wake_awake, &as);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, awake_observer, &as), 0);
    assert_int_equal(kl_loop_run(l), KL_OK);
    void *seen_asleep;
    pthread_join(th, &seen_asleep);
    assert_true((uintptr_t)seen_asleep);
    assert_true(as.awake_in_callback);
    kl_loop_free(l);
}

static void test_wakes_coalesce(void **state)
{
    kl_loop *l = kl_loop_new();
    wake_state ws = {.loop = l};
    kl_loop_set_wake_fn(l, on_wake_count, &ws);
    for (int i = 0; i < 10; i++)
        kl_loop_wake(l);
    assert_int_equal(kl_loop_run_once(l, 1000), KL_OK);
    assert_int_equal(ws.wakes, 1);
    /* nothing left pending */
    assert_int_equal(kl_loop_run_once(l, 10), KL_OK);
    assert_int_equal(ws.wakes, 1);
    /* a later wake is delivered again */
    kl_loop_wake(l);
    assert_int_equal(kl_loop_run_once(l, 1000), KL_OK);
    assert_int_equal(ws.wakes, 2);
    kl_loop_free(l);
}

/* Many threads waking one loop at once: every published item must be seen
 * by a wake callback. With the flag cleared before the eventfd was read, a
 * wake written between the two was swallowed while the flag stayed set,
 * and the loop never woke again (found by the reload test). */
#define WAKERS 3
#define WAKES_EACH 100000

typedef struct {
    kl_loop *loop;
    atomic_ulong published;
    unsigned long seen;
} storm_state;

static void on_storm_wake(kl_loop *l, void *arg)
{
    storm_state *st = arg;
    st->seen = atomic_load(&st->published);
}

static void *storm_waker(void *arg)
{
    storm_state *st = arg;
    for (int i = 0; i < WAKES_EACH; i++) {
        atomic_fetch_add(&st->published, 1);
        kl_loop_wake(st->loop);
    }
    return NULL;
}

static void test_wake_storm_loses_nothing(void **state)
{
    storm_state st = {.loop = kl_loop_new()};
    atomic_init(&st.published, 0);
    kl_loop_set_wake_fn(st.loop, on_storm_wake, &st);
    pthread_t th[WAKERS];
    for (int i = 0; i < WAKERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, storm_waker, &st), 0);
    /* each turn waits up to 2 s for a wake-up: a lost one shows as a turn
     * that slept out its timeout while items were unseen. (A turn may end
     * without progress: a wake-up that comes while the loop is awake costs
     * no eventfd write and is taken at the start of the next turn, which
     * then does not sleep - loop.c.) */
    while (st.seen < (unsigned long)WAKERS * WAKES_EACH) {
        uint64_t t0 = kl_now_ns();
        assert_int_equal(kl_loop_run_once(st.loop, 2000), KL_OK);
        if (kl_now_ns() - t0 >= 1000 * KL_NS_PER_MS &&
            atomic_load(&st.published) > st.seen)
            fail_msg("wake-up lost: %lu of %lu items seen", st.seen,
                     atomic_load(&st.published));
    }
    for (int i = 0; i < WAKERS; i++)
        pthread_join(th[i], NULL);
    kl_loop_free(st.loop);
}

/* ---- fd readiness ---- */

typedef struct {
    kl_watch w;
    unsigned last_events;
    int calls;
    kl_watch *stop_other; /* stop this watcher when called */
} fd_state;

static void on_fd(kl_loop *l, kl_watch *w, unsigned events)
{
    fd_state *fs = w->data;
    fs->calls++;
    fs->last_events = events;
    if (fs->stop_other)
        kl_watch_stop(l, fs->stop_other);
}

static void test_fd_readiness_and_interest(void **state)
{
    kl_loop *l = kl_loop_new();
    int p[2];
    assert_int_equal(pipe(p), 0);
    fd_state rd = {0}, wr = {0};
    assert_int_equal(kl_watch_start(l, &rd.w, p[0], KL_EV_READ, on_fd, &rd),
                     KL_OK);
    assert_int_equal(kl_watch_start(l, &wr.w, p[1], 0, on_fd, &wr), KL_OK);
    /* nothing readable yet, write interest off */
    assert_int_equal(kl_loop_run_once(l, 10), KL_OK);
    assert_int_equal(rd.calls, 0);
    assert_int_equal(wr.calls, 0);
    /* write interest on: the pipe is writable */
    assert_int_equal(kl_watch_set(l, &wr.w, KL_EV_WRITE), KL_OK);
    assert_int_equal(kl_loop_run_once(l, 100), KL_OK);
    assert_int_equal(wr.calls, 1);
    assert_true(wr.last_events & KL_EV_WRITE);
    assert_int_equal(kl_watch_set(l, &wr.w, 0), KL_OK);
    /* data makes the read end ready, level-triggered: again next turn */
    assert_int_equal(write(p[1], "x", 1), 1);
    assert_int_equal(kl_loop_run_once(l, 100), KL_OK);
    assert_int_equal(rd.calls, 1);
    assert_true(rd.last_events & KL_EV_READ);
    assert_int_equal(kl_loop_run_once(l, 100), KL_OK);
    assert_int_equal(rd.calls, 2);
    /* read interest removed (backpressure): no more reports */
    assert_int_equal(kl_watch_set(l, &rd.w, 0), KL_OK);
    assert_int_equal(kl_loop_run_once(l, 10), KL_OK);
    assert_int_equal(rd.calls, 2);
    assert_int_equal(wr.calls, 1);
    kl_watch_stop(l, &rd.w);
    kl_watch_stop(l, &wr.w);
    close(p[0]);
    close(p[1]);
    kl_loop_free(l);
}

/* Two watchers ready in one batch; the first stops the second (as a
 * connection closing another would): the second is not called. */
static void test_stopped_watcher_not_called(void **state)
{
    kl_loop *l = kl_loop_new();
    int a[2], b[2];
    assert_int_equal(pipe(a), 0);
    assert_int_equal(pipe(b), 0);
    fd_state fa = {0}, fb = {0};
    assert_int_equal(kl_watch_start(l, &fa.w, a[0], KL_EV_READ, on_fd, &fa),
                     KL_OK);
    assert_int_equal(kl_watch_start(l, &fb.w, b[0], KL_EV_READ, on_fd, &fb),
                     KL_OK);
    fa.stop_other = &fb.w;
    fb.stop_other = &fa.w;
    assert_int_equal(write(a[1], "x", 1), 1);
    assert_int_equal(write(b[1], "x", 1), 1);
    assert_int_equal(kl_loop_run_once(l, 100), KL_OK);
    /* exactly one of them ran */
    assert_int_equal(fa.calls + fb.calls, 1);
    kl_watch_stop(l, &fa.w);
    kl_watch_stop(l, &fb.w);
    close(a[0]);
    close(a[1]);
    close(b[0]);
    close(b[1]);
    kl_loop_free(l);
}

/* ---- before-sleep hook ---- */

static int hook_calls;
static bool hook(kl_loop *l, void *arg)
{
    hook_calls++;
    return hook_calls < 3; /* "more work" twice */
}

static void test_before_sleep_hook(void **state)
{
    kl_loop *l = kl_loop_new();
    kl_loop_set_before_sleep(l, hook, NULL);
    uint64_t start = kl_now_ns();
    /* twice the hook says "more work": those turns must not sleep */
    assert_int_equal(kl_loop_run_once(l, 1000), KL_OK);
    assert_int_equal(kl_loop_run_once(l, 1000), KL_OK);
    assert_true(kl_now_ns() - start < 500 * KL_NS_PER_MS);
    assert_int_equal(hook_calls, 2);
    /* the third turn sleeps for its timeout */
    assert_int_equal(kl_loop_run_once(l, 30), KL_OK);
    assert_int_equal(hook_calls, 3);
    assert_true(kl_now_ns() - start >= 30 * KL_NS_PER_MS);
    kl_loop_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timers_fire_in_order),
        cmocka_unit_test(test_timer_stop_and_rearm),
        cmocka_unit_test(test_timer_heap_many),
        cmocka_unit_test(test_cross_thread_wake),
        cmocka_unit_test(test_awake_hint),
        cmocka_unit_test(test_wakes_coalesce),
        cmocka_unit_test(test_wake_storm_loses_nothing),
        cmocka_unit_test(test_fd_readiness_and_interest),
        cmocka_unit_test(test_stopped_watcher_not_called),
        cmocka_unit_test(test_before_sleep_hook),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
