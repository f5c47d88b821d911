/* SPDX-License-Identifier: Apache-2.0 */
/* The cost-class worker pool: results, bounded queues, isolation of the
 * fast class from the slow one, deadlines, draining. Jobs that must hold a
 * worker for a while are made slow by the test-only wrapper of the crypto
 * call (slowexec.h). */
#include "cryptotest.h"

#include <pthread.h>
#include <unistd.h>

#include "core/time.h"
#include "crypto/pool.h"
#include "slowexec.h"

static kl_keystore *ks;

typedef struct tjob {
    kl_job job;
    uint8_t in[64];
    size_t in_len;
    uint8_t out[512];
    uint64_t submit_ns, done_ns;
    int order;
} tjob;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int done_count;

static void on_done(kl_job *j)
{
    tjob *t = (tjob *)j;
    pthread_mutex_lock(&mu);
    t->done_ns = kl_now_ns();
    t->order = done_count++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void reset_done(void)
{
    pthread_mutex_lock(&mu);
    done_count = 0;
    pthread_mutex_unlock(&mu);
}

static void wait_done(int n)
{
    uint64_t limit = kl_now_ns() + 30ull * 1000000000ull;
    pthread_mutex_lock(&mu);
    while (done_count < n) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&cv, &mu, &ts);
        if (kl_now_ns() > limit)
            break;
    }
    int got = done_count;
    pthread_mutex_unlock(&mu);
    assert_int_equal(got, n);
}

static void make_job(tjob *t, const kl_key *k, uint8_t op, size_t in_len,
                     uint8_t seed)
{
    memset(t, 0, sizeof *t);
    t->job.key = k;
    t->job.opcode = op;
    ct_fill(t->in, in_len, seed);
    t->in_len = in_len;
    t->job.in = t->in;
    t->job.in_len = in_len;
    t->job.out = t->out;
    t->job.out_cap = sizeof t->out;
    t->job.done = on_done;
    t->job.owner = t;
    t->order = -1;
    slow_job(&t->job, 0);
}

static void submit(kl_pool *p, tjob *t)
{
    t->submit_ns = kl_now_ns();
    assert_int_equal(kl_pool_submit(p, &t->job), KL_OK);
}

static void wait_queue_empty(kl_pool *p, kl_cost_class c)
{
    for (int i = 0; i < 2000 && kl_pool_queued(p, c) > 0; i++)
        usleep(1000);
    assert_int_equal(kl_pool_queued(p, c), 0);
}

static int setup(void **state)
{
    (void)state;
    ks = ct_vector_store();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kl_keystore_free(ks);
    return 0;
}

static void test_results_are_correct(void **state)
{
    (void)state;
    enum { N = 300 };
    static tjob jobs[N];
    static const struct {
        const char *key;
        uint8_t op;
        size_t len;
    } kinds[] = {{"ecdsa-p256", 0x15, 32},
                 {"ecdsa-p384", 0x16, 48},
                 {"ed25519", 0x18, 40},
                 {"rsa-2048", 0x05, 32},
                 {"rsa-3072", 0x37, 64}};
    EVP_PKEY *pubs[5];
    for (int i = 0; i < 5; i++)
        pubs[i] = ct_pubkey(kinds[i].key);
    kl_pool_opts o = kl_pool_defaults;
    o.workers = 2;
    kl_pool *p = kl_pool_new(&o);
    assert_non_null(p);
    reset_done();
    for (int i = 0; i < N; i++) {
        int k = i % 5;
        make_job(&jobs[i], ct_key(ks, kinds[k].key), kinds[k].op, kinds[k].len,
                 (uint8_t)i);
        submit(p, &jobs[i]);
    }
    wait_done(N);
    for (int i = 0; i < N; i++) {
        int k = i % 5;
        assert_int_equal(jobs[i].job.err, KL_OK);
        if (!ct_verify(pubs[k], kinds[k].op, jobs[i].in, jobs[i].in_len,
                       jobs[i].out, jobs[i].job.out_len))
            fail_msg("job %d (%s) does not verify", i, kinds[k].key);
    }
    /* a bad job reports its error through the same path */
    tjob bad;
    reset_done();
    make_job(&bad, ct_key(ks, "rsa-2048"), 0x05, 20, 1);
    submit(p, &bad);
    wait_done(1);
    assert_int_equal(bad.job.err, KL_E_CRYPTO);
    assert_int_equal(bad.job.out_len, 0);
    kl_pool_free(p);
    for (int i = 0; i < 5; i++)
        EVP_PKEY_free(pubs[i]);
}

static void test_queue_limits(void **state)
{
    (void)state;
    kl_pool_opts o = kl_pool_defaults;
    o.workers = 1;
    o.queue_limit[KL_COST_FAST] = 2;
    o.queue_limit[KL_COST_SLOW] = 3;
    kl_pool *p = kl_pool_new(&o);
    const kl_key *ec = ct_key(ks, "ecdsa-p256");
    const kl_key *rsa = ct_key(ks, "rsa-2048");
    tjob blocker, f[3], s[4];
    reset_done();
    make_job(&blocker, ec, 0x15, 32, 0);
    slow_job(&blocker.job, 200000);
    submit(p, &blocker);
    wait_queue_empty(p, KL_COST_FAST); /* the worker holds it, asleep */
    for (int i = 0; i < 2; i++) {
        make_job(&f[i], ec, 0x15, 32, (uint8_t)i);
        submit(p, &f[i]);
    }
    make_job(&f[2], ec, 0x15, 32, 9);
    assert_int_equal(kl_pool_submit(p, &f[2].job), KL_E_TOO_LARGE);
    assert_int_equal(kl_pool_queued(p, KL_COST_FAST), 2);
    for (int i = 0; i < 3; i++) {
        make_job(&s[i], rsa, 0x05, 32, (uint8_t)i);
        submit(p, &s[i]);
    }
    make_job(&s[3], rsa, 0x05, 32, 9);
    assert_int_equal(kl_pool_submit(p, &s[3].job), KL_E_TOO_LARGE);
    assert_int_equal(kl_pool_queued(p, KL_COST_SLOW), 3);
    wait_done(6);
    assert_int_equal(kl_pool_queued(p, KL_COST_FAST), 0);
    assert_int_equal(kl_pool_queued(p, KL_COST_SLOW), 0);
    kl_pool_free(p);
    /* the refused jobs were never run nor called back */
    assert_int_equal(f[2].order, -1);
    assert_int_equal(s[3].order, -1);
    assert_int_equal(done_count, 6);
}

/* 6 long slow jobs (RSA-3072, made to take 200 ms each) then 20 fast ones
 * on 2 workers: the slow class may hold only one worker, so every fast job
 * is done long before the first slow one; the 2 background workers run
 * the others beside it (3 at once: 2 rounds, not 6). */
static void test_fast_class_isolated_from_slow(void **state)
{
    (void)state;
    kl_pool_opts o = kl_pool_defaults;
    o.workers = 2;
    kl_pool *p = kl_pool_new(&o);
    static tjob slow[6], fast[20];
    reset_done();
    uint64_t t0 = kl_now_ns();
    for (int i = 0; i < 6; i++) {
        make_job(&slow[i], ct_key(ks, "rsa-3072"), 0x05, 32, (uint8_t)i);
        slow_job(&slow[i].job, 200000);
        submit(p, &slow[i]);
    }
    for (int i = 0; i < 20; i++) {
        make_job(&fast[i], ct_key(ks, "ecdsa-p256"), 0x15, 32, (uint8_t)i);
        submit(p, &fast[i]);
    }
    wait_done(26);
    uint64_t first_slow = UINT64_MAX, last_fast = 0, last_slow = 0;
    for (int i = 0; i < 6; i++) {
        assert_int_equal(slow[i].job.err, KL_OK);
        if (slow[i].done_ns < first_slow)
            first_slow = slow[i].done_ns;
        if (slow[i].done_ns > last_slow)
            last_slow = slow[i].done_ns;
    }
    for (int i = 0; i < 20; i++) {
        assert_int_equal(fast[i].job.err, KL_OK);
        uint64_t lat = fast[i].done_ns - fast[i].submit_ns;
        if (lat > 150000000ull)
            fail_msg("fast job %d took %.1f ms", i, lat / 1e6);
        if (fast[i].done_ns > last_fast)
            last_fast = fast[i].done_ns;
    }
    print_message("isolation: last fast job done at %.1f ms, first slow at "
                  "%.1f ms, last slow at %.1f ms\n",
                  (last_fast - t0) / 1e6, (first_slow - t0) / 1e6,
                  (last_slow - t0) / 1e6);
    assert_true(last_fast < first_slow);
    /* 3 at a time (1 worker + 2 background workers): 2 x 200 ms */
    assert_true(last_slow - t0 >= 2 * 200000000ull - 5000000ull);
    assert_true(last_slow - t0 < 6 * 200000000ull - 5000000ull);
    kl_pool_free(p);
}

/* With a single worker the classes alternate. */
static void test_single_worker_alternates(void **state)
{
    (void)state;
    kl_pool_opts o = kl_pool_defaults;
    o.workers = 1;
    kl_pool *p = kl_pool_new(&o);
    tjob blocker, s[3], f[3];
    reset_done();
    make_job(&blocker, ct_key(ks, "ed25519"), 0x18, 8, 0);
    slow_job(&blocker.job, 100000);
    submit(p, &blocker);
    wait_queue_empty(p, KL_COST_FAST);
    for (int i = 0; i < 3; i++) {
        make_job(&s[i], ct_key(ks, "rsa-2048"), 0x05, 32, (uint8_t)i);
        submit(p, &s[i]);
    }
    for (int i = 0; i < 3; i++) {
        make_job(&f[i], ct_key(ks, "ed25519"), 0x18, 8, (uint8_t)i);
        submit(p, &f[i]);
    }
    wait_done(7);
    assert_int_equal(blocker.order, 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(f[i].order, 1 + 2 * i);
        assert_int_equal(s[i].order, 2 + 2 * i);
    }
    kl_pool_free(p);
}

static void test_deadlines(void **state)
{
    (void)state;
    kl_pool_opts o = kl_pool_defaults;
    o.workers = 1;
    kl_pool *p = kl_pool_new(&o);
    tjob late, blocker, expires, ok;
    reset_done();
    make_job(&late, ct_key(ks, "rsa-2048"), 0x05, 32, 1);
    late.job.deadline_ns = kl_now_ns() - 1;
    memset(late.out, 0xAA, sizeof late.out);
    submit(p, &late);
    wait_done(1);
    /* the worker busy for 50 ms, and behind it a job with 10 ms left: its
     * deadline passes in the queue, so it never starts */
    make_job(&blocker, ct_key(ks, "ecdsa-p256"), 0x15, 32, 2);
    slow_job(&blocker.job, 50000);
    submit(p, &blocker);
    wait_queue_empty(p, KL_COST_FAST); /* the worker holds it */
    make_job(&expires, ct_key(ks, "ecdsa-p256"), 0x15, 32, 3);
    expires.job.deadline_ns = kl_now_ns() + 10000000ull;
    memset(expires.out, 0xAA, sizeof expires.out);
    submit(p, &expires);
    make_job(&ok, ct_key(ks, "ecdsa-p256"), 0x15, 32, 4);
    ok.job.deadline_ns = kl_now_ns() + 60ull * 1000000000ull;
    submit(p, &ok);
    wait_done(4);
    uint8_t aa[sizeof late.out];
    memset(aa, 0xAA, sizeof aa);
    assert_int_equal(late.job.err, KL_E_INTERNAL);
    assert_int_equal(late.job.out_len, 0);
    assert_memory_equal(late.out, aa, sizeof aa); /* no crypto ran */
    assert_int_equal(late.job.started_ns, 0);
    assert_int_equal(blocker.job.err, KL_OK);
    assert_int_equal(expires.job.err, KL_E_INTERNAL);
    assert_int_equal(expires.job.out_len, 0);
    assert_memory_equal(expires.out, aa, sizeof aa);
    assert_int_equal(expires.job.started_ns, 0);
    assert_true(expires.order > blocker.order);
    assert_int_equal(ok.job.err, KL_OK);
    assert_true(ok.job.out_len > 0);
    kl_pool_free(p);
}

/* a job whose client has gone is answered without running, and
 * the wait estimate follows the measured cost of a class. */
static void test_abandoned_and_estimate(void **state)
{
    (void)state;
    kl_pool_opts o = kl_pool_defaults;
    o.workers = 2;
    kl_pool *p = kl_pool_new(&o);
    assert_int_equal(kl_pool_wait_estimate(p, KL_COST_SLOW), 0);
    _Atomic bool gone = true, here = false;
    tjob a, b;
    reset_done();
    make_job(&a, ct_key(ks, "ecdsa-p256"), 0x15, 32, 4);
    a.job.abandoned = &gone;
    slow_job(&a.job, 2000000); /* would take 2 s if it ran */
    memset(a.out, 0xAA, sizeof a.out);
    make_job(&b, ct_key(ks, "rsa-2048"), 0x05, 32, 5);
    b.job.abandoned = &here;
    uint64_t t0 = kl_now_ns();
    submit(p, &a);
    submit(p, &b);
    wait_done(2);
    assert_true(kl_now_ns() - t0 < 1000000000ull);
    uint8_t aa[sizeof a.out];
    memset(aa, 0xAA, sizeof aa);
    assert_int_equal(a.job.err, KL_E_INTERNAL);
    assert_int_equal(a.job.out_len, 0);
    assert_memory_equal(a.out, aa, sizeof aa);
    assert_int_equal(b.job.err, KL_OK);
    /* an RSA-2048 signature ran: the slow class now has a cost, the
     * blocking class never does */
    uint64_t est = kl_pool_wait_estimate(p, KL_COST_SLOW);
    assert_true(est > 1000 && est < 1000000000ull);
    assert_int_equal(kl_pool_wait_estimate(p, KL_COST_BLOCKING), 0);
    assert_int_equal(kl_pool_wait_estimate(NULL, KL_COST_SLOW), 0);
    kl_pool_free(p);
}

static void test_free_drains(void **state)
{
    (void)state;
    enum { N = 60 };
    static tjob jobs[N];
    kl_pool *p = kl_pool_new(NULL); /* default: CPU count, at least 2 */
    reset_done();
    for (int i = 0; i < N; i++) {
        make_job(&jobs[i], ct_key(ks, i % 3 ? "ecdsa-p256" : "rsa-2048"),
                 i % 3 ? 0x15 : 0x05, 32, (uint8_t)i);
        submit(p, &jobs[i]);
    }
    kl_pool_free(p); /* returns only after every callback ran */
    pthread_mutex_lock(&mu);
    int n = done_count;
    pthread_mutex_unlock(&mu);
    assert_int_equal(n, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(jobs[i].job.err, KL_OK);
}

static void test_bad_submissions(void **state)
{
    (void)state;
    kl_pool *p = kl_pool_new(NULL);
    tjob t;
    make_job(&t, ct_key(ks, "ecdsa-p256"), 0x15, 32, 0);
    t.job.done = NULL;
    assert_int_equal(kl_pool_submit(p, &t.job), KL_E_INTERNAL);
    assert_int_equal(kl_pool_submit(p, NULL), KL_E_INTERNAL);
    assert_int_equal(kl_pool_queued(p, KL_COST_CLASSES), 0);
    kl_pool_free(p);
    kl_pool_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_results_are_correct),
        cmocka_unit_test(test_queue_limits),
        cmocka_unit_test(test_fast_class_isolated_from_slow),
        cmocka_unit_test(test_single_worker_alternates),
        cmocka_unit_test(test_deadlines),
        cmocka_unit_test(test_abandoned_and_estimate),
        cmocka_unit_test(test_free_drains),
        cmocka_unit_test(test_bad_submissions),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
