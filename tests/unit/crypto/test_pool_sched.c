/* SPDX-License-Identifier: Apache-2.0 */
/* The pool's scheduling rules for throughput (docs/DESIGN.md "Inline fast
 * operations, wake-ups and memory"): a job run on the caller's
 * thread (kl_pool_run_here: inline fast operations on a shard) follows the
 * same shedding rules as a worker and does not call back; short slow jobs
 * (RSA-2048) may use every worker when no fast job waits, long ones (RSA
 * above 2048 bits) never take the last worker. Jobs that must hold a
 * worker for a while are made slow by the test-only wrapper of the crypto
 * call (slowexec.h). */
#include "cryptotest.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

#include "core/time.h"
#include "crypto/pool.h"
#include "slowexec.h"

static kl_keystore *ks;

typedef struct tjob {
    kl_job job;
    uint8_t in[64];
    uint8_t out[1024];
    uint64_t done_ns;
} tjob;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int done_count;

static void on_done(kl_job *j)
{
    tjob *t = (tjob *)j;
    pthread_mutex_lock(&mu);
    t->done_ns = kl_now_ns();
    done_count++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void must_not_call(kl_job *j)
{
    (void)j;
    fail_msg("kl_pool_run_here called the done callback");
}

static void wait_done(int n)
{
    uint64_t limit = kl_now_ns() + 60ull * 1000000000ull;
    pthread_mutex_lock(&mu);
    while (done_count < n && kl_now_ns() < limit) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&cv, &mu, &ts);
    }
    int got = done_count;
    done_count = 0;
    pthread_mutex_unlock(&mu);
    assert_int_equal(got, n);
}

static void make_job(tjob *t, const kl_key *k, uint8_t op, uint8_t seed)
{
    memset(t, 0, sizeof *t);
    t->job.key = k;
    t->job.opcode = op;
    ct_fill(t->in, 32, seed);
    t->job.in = t->in;
    t->job.in_len = 32;
    t->job.out = t->out;
    t->job.out_cap = sizeof t->out;
    t->job.done = on_done;
    t->job.owner = t;
    slow_job(&t->job, 0);
}

/* Jobs whose execution overlapped in time: two workers ran slow jobs at
 * once. A job's crypto runs from started_ns to (before) done_ns. */
static int overlaps(const tjob *t, int n)
{
    int o = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (t[i].job.started_ns < t[j].done_ns &&
                t[j].job.started_ns < t[i].done_ns)
                o++;
    return o;
}

static void test_run_here(void **state)
{
    (void)state;
    kl_pool_opts o = kl_pool_defaults;
    o.workers = 1;
    kl_pool *p = kl_pool_new(&o);
    assert_non_null(p);
    EVP_PKEY *pub = ct_pubkey("ecdsa-p256");
    static tjob t;

    /* runs, answers, and leaves the callback alone */
    make_job(&t, ct_key(ks, "ecdsa-p256"), KL_OP_ECDSA_SIGN_SHA256, 1);
    t.job.done = must_not_call;
    uint64_t before = kl_now_ns();
    kl_pool_run_here(p, &t.job);
    assert_int_equal(t.job.err, KL_OK);
    assert_true(t.job.started_ns >= before && t.job.started_ns <= kl_now_ns());
    assert_true(ct_verify(pub, KL_OP_ECDSA_SIGN_SHA256, t.in, 32, t.out,
                          t.job.out_len));
    /* the class's execution time is known now (admission control) */
    assert_true(kl_pool_wait_estimate(p, KL_COST_FAST) > 0);

    /* P6: past its deadline - no crypto, internal error */
    make_job(&t, ct_key(ks, "ed25519"), KL_OP_ED25519_SIGN, 2);
    t.job.done = must_not_call;
    t.job.deadline_ns = kl_now_ns() - 1;
    kl_pool_run_here(p, &t.job);
    assert_int_equal(t.job.err, KL_E_INTERNAL);
    assert_int_equal(t.job.out_len, 0);
    assert_int_equal(t.job.started_ns, 0);

    /* abandoned (the client has gone): the same */
    static _Atomic bool gone = true;
    make_job(&t, ct_key(ks, "ecdsa-p256"), KL_OP_ECDSA_SIGN_SHA256, 3);
    t.job.done = must_not_call;
    t.job.abandoned = &gone;
    kl_pool_run_here(p, &t.job);
    assert_int_equal(t.job.err, KL_E_INTERNAL);
    assert_int_equal(t.job.started_ns, 0);

    /* a future deadline does not stop it */
    make_job(&t, ct_key(ks, "ecdsa-p256"), KL_OP_ECDSA_SIGN_SHA256, 4);
    t.job.done = must_not_call;
    t.job.deadline_ns = kl_now_ns() + 5000000000ull;
    kl_pool_run_here(p, &t.job);
    assert_int_equal(t.job.err, KL_OK);
    assert_true(ct_verify(pub, KL_OP_ECDSA_SIGN_SHA256, t.in, 32, t.out,
                          t.job.out_len));
    EVP_PKEY_free(pub);
    kl_pool_free(p);
}

/* RSA-2048 alone: both workers sign at once (one worker
 * used to stay idle for fast jobs that did not come). */
static void test_short_slow_uses_every_worker(void **state)
{
    (void)state;
    kl_pool_opts o = kl_pool_defaults;
    o.workers = 2;
    kl_pool *p = kl_pool_new(&o);
    enum { N = 200 };
    static tjob t[N];
    for (int i = 0; i < N; i++) {
        make_job(&t[i], ct_key(ks, "rsa-2048"), KL_OP_RSA_SIGN_SHA256,
                 (uint8_t)i);
        assert_int_equal(kl_pool_submit(p, &t[i].job), KL_OK);
    }
    wait_done(N);
    EVP_PKEY *pub = ct_pubkey("rsa-2048");
    for (int i = 0; i < N; i++) {
        assert_int_equal(t[i].job.err, KL_OK);
        if (i % 20 == 0)
            assert_true(ct_verify(pub, KL_OP_RSA_SIGN_SHA256, t[i].in, 32,
                                  t[i].out, t[i].job.out_len));
    }
    EVP_PKEY_free(pub);
    int ov = overlaps(t, N);
    print_message("RSA-2048 jobs running at the same time: %d pairs\n", ov);
    assert_true(ov > 0);
    kl_pool_free(p);
}

/* Long slow jobs (RSA above 2048 bits: RSA-3072 here, each made to take
 * 50 ms) never take the last worker, even with no fast job waiting: a fast
 * one that comes finds it free. (Without background workers: they would
 * run the others beside it.) */
static void test_long_slow_keeps_a_worker(void **state)
{
    (void)state;
    kl_pool_opts o = kl_pool_defaults;
    o.workers = 2;
    o.background_workers = -1;
    kl_pool *p = kl_pool_new(&o);
    enum { N = 4 };
    static tjob t[N], fast;
    for (int i = 0; i < N; i++) {
        make_job(&t[i], ct_key(ks, "rsa-3072"), KL_OP_RSA_SIGN_SHA256,
                 (uint8_t)i);
        slow_job(&t[i].job, 50000);
        assert_int_equal(kl_pool_submit(p, &t[i].job), KL_OK);
    }
    usleep(20000); /* the first slow job runs; nothing fast is queued */
    make_job(&fast, ct_key(ks, "ecdsa-p256"), KL_OP_ECDSA_SIGN_SHA256, 9);
    uint64_t t0 = kl_now_ns();
    assert_int_equal(kl_pool_submit(p, &fast.job), KL_OK);
    wait_done(N + 1);
    assert_int_equal(fast.job.err, KL_OK);
    print_message("fast job behind long slow ones: %.1f ms\n",
                  (fast.done_ns - t0) / 1e6);
    assert_true(fast.done_ns - t0 < 40000000ull); /* not behind a 50 ms one */
    assert_int_equal(overlaps(t, N), 0);
    kl_pool_free(p);
}

/* Real RSA above 2048 bits (3072 here; 4096 alike) is long too. */
static void test_rsa3072_is_long(void **state)
{
    (void)state;
    const kl_key *big = ct_key(ks, "rsa-3072");
    kl_pool_opts o = kl_pool_defaults;
    o.workers = 2;
    o.background_workers = -1;
    kl_pool *p = kl_pool_new(&o);
    enum { N = 12 };
    static tjob t[N];
    for (int i = 0; i < N; i++) {
        make_job(&t[i], big, KL_OP_RSA_SIGN_SHA256, (uint8_t)i);
        assert_int_equal(kl_pool_submit(p, &t[i].job), KL_OK);
    }
    wait_done(N);
    for (int i = 0; i < N; i++)
        assert_int_equal(t[i].job.err, KL_OK);
    assert_int_equal(overlaps(t, N), 0);
    kl_pool_free(p);
}

/* Most jobs running at once. */
static int peak(const tjob *t, int n)
{
    int best = 0;
    for (int i = 0; i < n; i++) {
        int at = 0;
        for (int j = 0; j < n; j++)
            at += t[j].job.started_ns <= t[i].job.started_ns &&
                  t[i].job.started_ns < t[j].done_ns;
        best = at > best ? at : best;
    }
    return best;
}

/* The background workers (pool.h): long slow jobs use them beside the one
 * worker the rule allows - 3 at once with 2 workers and 2 background
 * workers - while the last worker stays free: a fast job is not behind
 * them. Their threads are in SCHED_IDLE. */
static void test_background_workers(void **state)
{
    (void)state;
    kl_pool_opts o = kl_pool_defaults;
    o.workers = 2;
    kl_pool *p = kl_pool_new(&o);
    enum { N = 9 };
    static tjob t[N], fast;
    for (int i = 0; i < N; i++) {
        make_job(&t[i], ct_key(ks, "rsa-3072"), KL_OP_RSA_SIGN_SHA256,
                 (uint8_t)i);
        slow_job(&t[i].job, 50000);
        assert_int_equal(kl_pool_submit(p, &t[i].job), KL_OK);
    }
    usleep(20000);
    make_job(&fast, ct_key(ks, "ecdsa-p256"), KL_OP_ECDSA_SIGN_SHA256, 9);
    uint64_t t0 = kl_now_ns();
    assert_int_equal(kl_pool_submit(p, &fast.job), KL_OK);
    wait_done(N + 1);
    for (int i = 0; i < N; i++)
        assert_int_equal(t[i].job.err, KL_ERR_NONE);
    print_message("long slow jobs at once: %d; fast job: %.1f ms\n", peak(t, N),
                  (fast.done_ns - t0) / 1e6);
    assert_int_equal(peak(t, N), 3);
    assert_true(fast.done_ns - t0 < 40000000ull);
    /* their scheduling class */
    int idle = 0;
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));) {
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(comm, sizeof comm, f) &&
            strncmp(comm, "kl-worker-bg", 12) == 0)
            idle += sched_getscheduler(atoi(e->d_name)) == SCHED_IDLE;
        fclose(f);
    }
    closedir(d);
    assert_int_equal(idle, 2);
    kl_pool_free(p);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_here),
        cmocka_unit_test(test_short_slow_uses_every_worker),
        cmocka_unit_test(test_long_slow_keeps_a_worker),
        cmocka_unit_test(test_rsa3072_is_long),
        cmocka_unit_test(test_background_workers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
