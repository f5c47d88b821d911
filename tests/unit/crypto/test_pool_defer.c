/* SPDX-License-Identifier: Apache-2.0 */
/* Deferred wake-ups (kl_pool_defer_wake): a done callback may
 * leave its owner's wake-up to the worker. Every completion is followed by
 * a wake-up (none is lost), at saturation one wake-up carries several
 * completions, below it each one goes at once, equal wake-ups run once. */
#include "cryptotest.h"

#include <pthread.h>
#include <unistd.h>

#include "core/time.h"
#include "crypto/pool.h"

static kl_keystore *ks;

/* A stand-in for a shard: completions counted under its lock, and what
 * the completion count was when each wake-up came. */
typedef struct owner {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;          /* completions handed over */
    int wakes;         /* wake-ups received */
    int done_at_wake;  /* completions seen by the latest wake-up */
    bool wake_on_main; /* a wake-up ran on the test's thread */
} owner;

static pthread_t main_thread;

static void owner_init(owner *o)
{
    memset(o, 0, sizeof *o);
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
}

static void owner_destroy(owner *o)
{
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
}

static void wake(void *arg)
{
    owner *o = arg;
    pthread_mutex_lock(&o->mu);
    o->wakes++;
    o->done_at_wake = o->done;
    if (pthread_equal(pthread_self(), main_thread))
        o->wake_on_main = true;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

static int wakes_of(owner *o)
{
    pthread_mutex_lock(&o->mu);
    int n = o->wakes;
    pthread_mutex_unlock(&o->mu);
    return n;
}

typedef struct tjob {
    kl_job job;
    uint8_t in[32];
    uint8_t out[128];
} tjob;

/* As kl_shard_job_done: hand over, then owe a wake-up */
static void on_done(kl_job *j)
{
    owner *o = j->owner;
    pthread_mutex_lock(&o->mu);
    o->done++;
    pthread_mutex_unlock(&o->mu);
    if (!kl_pool_defer_wake(wake, o))
        wake(o);
}

static void make_job(tjob *t, owner *o, uint8_t seed)
{
    memset(t, 0, sizeof *t);
    t->job.key = ct_key(ks, "ecdsa-p256");
    t->job.opcode = 0x15; /* ECDSA-SHA256 */
    ct_fill(t->in, sizeof t->in, seed);
    t->job.in = t->in;
    t->job.in_len = sizeof t->in;
    t->job.out = t->out;
    t->job.out_cap = sizeof t->out;
    t->job.done = on_done;
    t->job.owner = o;
}

/* Waits up to 10 s until a wake-up has seen n completions. */
static void wait_woken_after(owner *o, int n)
{
    uint64_t limit = kl_now_ns() + 10ull * 1000000000ull;
    pthread_mutex_lock(&o->mu);
    while (o->done_at_wake < n && kl_now_ns() < limit) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&o->cv, &o->mu, &ts);
    }
    int got = o->done_at_wake;
    pthread_mutex_unlock(&o->mu);
    if (got != n)
        fail_msg("the last wake-up saw %d of %d completions", got, n);
}

static int setup(void **state)
{
    (void)state;
    main_thread = pthread_self();
    ks = ct_vector_store();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kl_keystore_free(ks);
    return 0;
}

static void test_not_on_a_worker(void **state)
{
    (void)state;
    owner o;
    owner_init(&o);
    assert_false(kl_pool_defer_wake(wake, &o));
    assert_int_equal(o.wakes, 0);
    owner_destroy(&o);
}

/* 400 jobs queued at once on one worker: saturation. The wake-ups come
 * in batches, and the last one comes after the last completion. */
static void test_batched_at_saturation(void **state)
{
    (void)state;
    enum { N = 400 };
    static tjob jobs[N];
    owner o;
    owner_init(&o);
    kl_pool_opts po = kl_pool_defaults;
    po.workers = 1;
    kl_pool *p = kl_pool_new(&po);
    assert_non_null(p);
    /* one job first: the pool learns the class's execution time */
    make_job(&jobs[0], &o, 0);
    assert_int_equal(kl_pool_submit(p, &jobs[0].job), KL_OK);
    wait_woken_after(&o, 1);
    for (int i = 1; i < N; i++) {
        make_job(&jobs[i], &o, (uint8_t)i);
        assert_int_equal(kl_pool_submit(p, &jobs[i].job), KL_OK);
    }
    wait_woken_after(&o, N);
    kl_pool_free(p);
    EVP_PKEY *pub = ct_pubkey("ecdsa-p256");
    for (int i = 0; i < N; i++) {
        assert_int_equal(jobs[i].job.err, KL_OK);
        if (!ct_verify(pub, 0x15, jobs[i].in, sizeof jobs[i].in, jobs[i].out,
                       jobs[i].job.out_len))
            fail_msg("job %d does not verify", i);
    }
    EVP_PKEY_free(pub);
    assert_false(o.wake_on_main);
    /* one per completion without deferring; with it a batch lasts up to a
     * quarter of the queue's time, at most 2 ms: tens of signatures (half
     * as many wake-ups as completions leaves room for a busy machine) */
    if (o.wakes > N / 2)
        fail_msg("%d wake-ups for %d completions", o.wakes, N);
    owner_destroy(&o);
}

/* One job at a time: nothing queued behind it, so its wake-up goes at
 * once - one per job, each before the next job is submitted. */
static void test_at_once_below_saturation(void **state)
{
    (void)state;
    enum { N = 20 };
    tjob jobs[N];
    owner o;
    owner_init(&o);
    kl_pool_opts po = kl_pool_defaults;
    po.workers = 2;
    kl_pool *p = kl_pool_new(&po);
    assert_non_null(p);
    for (int i = 0; i < N; i++) {
        make_job(&jobs[i], &o, (uint8_t)i);
        uint64_t t0 = kl_now_ns();
        assert_int_equal(kl_pool_submit(p, &jobs[i].job), KL_OK);
        wait_woken_after(&o, i + 1);
        /* generous: a sanitizer build on a busy machine */
        assert_true(kl_now_ns() - t0 < 2000ull * 1000000ull);
    }
    assert_int_equal(o.wakes, N);
    kl_pool_free(p);
    owner_destroy(&o);
}

/* A callback owing several owners: equal wake-ups run once, and past the
 * worker's room (8 owners) the caller must wake its owner itself. */
static owner many[10];
static bool deferred[10], deferred_again;

static void on_done_many(kl_job *j)
{
    (void)j;
    for (int i = 0; i < 10; i++)
        deferred[i] = kl_pool_defer_wake(wake, &many[i]);
    deferred_again = kl_pool_defer_wake(wake, &many[0]);
    for (int i = 0; i < 10; i++)
        if (!deferred[i])
            wake(&many[i]);
}

static void test_equal_once_and_room(void **state)
{
    (void)state;
    for (int i = 0; i < 10; i++)
        owner_init(&many[i]);
    kl_pool_opts po = kl_pool_defaults;
    po.workers = 1;
    kl_pool *p = kl_pool_new(&po);
    assert_non_null(p);
    tjob t;
    make_job(&t, &many[0], 1);
    t.job.done = on_done_many;
    assert_int_equal(kl_pool_submit(p, &t.job), KL_OK);
    for (int i = 0; i < 10; i++) {
        uint64_t limit = kl_now_ns() + 10ull * 1000000000ull;
        while (wakes_of(&many[i]) == 0 && kl_now_ns() < limit)
            usleep(1000);
    }
    kl_pool_free(p); /* joins the worker: every wake-up has run */
    for (int i = 0; i < 8; i++)
        assert_true(deferred[i]);
    assert_false(deferred[8]);
    assert_false(deferred[9]);
    assert_true(deferred_again);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(many[i].wakes, 1);
        owner_destroy(&many[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_on_a_worker),
        cmocka_unit_test(test_batched_at_saturation),
        cmocka_unit_test(test_at_once_below_saturation),
        cmocka_unit_test(test_equal_once_and_room),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
