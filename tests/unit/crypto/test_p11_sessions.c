/* SPDX-License-Identifier: Apache-2.0 */
/* The session pool of a PKCS#11 token: a wait for a session is
 * bounded by the deadline, many jobs on the blocking class with
 * max-sessions=1 all complete or fail at their deadline (none hangs), file
 * keys are not delayed behind them, and sessions the token closed or logged
 * out are replaced transparently. */
#include "hsmtest.h"

#include <pthread.h>

#include "core/time.h"
#include "crypto/pool.h"
#include "keys/p11.h"

static kl_keystore *files, *hsm;
static const kl_key *rsa; /* on kl-a, max-sessions=1 */

static int setup(void **state)
{
    (void)state;
    files = ct_vector_store();
    ht_setup(files);
    hsm = kl_keystore_new(NULL);
    assert_non_null(hsm);
    assert_int_equal(kl_keystore_add_uri(hsm, ht_uri("token=kl-a;object=rsa",
                                                     "pin-value=" HT_PIN_A
                                                     "&max-sessions=1")),
                     KL_OK);
    rsa = kl_keystore_find(hsm, kl_key_ski(ct_key(files, "rsa-2048")));
    assert_non_null(rsa);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kl_keystore_free(hsm);
    kl_keystore_free(files);
    ht_teardown();
    return 0;
}

static kl_status sign_now(uint64_t deadline_ns, uint64_t *elapsed_ns)
{
    uint8_t in[32], out[512];
    size_t n;
    ct_fill(in, sizeof in, 3);
    uint64_t t0 = kl_now_ns();
    kl_status err = kl_crypto_exec_deadline(rsa, 0x05, in, sizeof in, out,
                                            sizeof out, &n, deadline_ns);
    if (elapsed_ns)
        *elapsed_ns = kl_now_ns() - t0;
    return err;
}

static void test_wait_bounded_by_deadline(void **state)
{
    (void)state;
    kl_p11_token *tok = kl_key_p11(rsa)->tok;
    CK_SESSION_HANDLE h;
    assert_int_equal(
        kl_p11_session_get(tok, kl_now_ns() + 1000 * KL_NS_PER_MS, &h), KL_OK);
    /* the only session is taken: a bounded wait, then an error */
    uint64_t el;
    assert_int_equal(sign_now(kl_now_ns() + 100 * KL_NS_PER_MS, &el),
                     KL_E_INTERNAL);
    assert_true(el >= 90 * KL_NS_PER_MS && el < 1000 * KL_NS_PER_MS);
    /* no deadline: the default wait, not forever */
    assert_int_equal(sign_now(0, &el), KL_E_INTERNAL);
    assert_true(el >= KL_CRYPTO_DEFAULT_WAIT_NS - 10 * KL_NS_PER_MS &&
                el < KL_CRYPTO_DEFAULT_WAIT_NS + 1000 * KL_NS_PER_MS);
    kl_p11_session_put(tok, h);
    assert_int_equal(sign_now(kl_now_ns() + 1000 * KL_NS_PER_MS, NULL), KL_OK);
}

/* ---- many jobs on one session ---------------------------------------- */

typedef struct tjob {
    kl_job job;
    uint8_t in[32];
    uint8_t out[512];
    uint64_t done_ns;
} tjob;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int done_count;

static void on_done(kl_job *j)
{
    pthread_mutex_lock(&mu);
    ((tjob *)j)->done_ns = kl_now_ns();
    done_count++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void wait_done(int n, uint64_t limit_ns)
{
    pthread_mutex_lock(&mu);
    while (done_count < n && kl_now_ns() < limit_ns) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&cv, &mu, &ts);
    }
    int got = done_count;
    pthread_mutex_unlock(&mu);
    assert_int_equal(got, n); /* none hangs */
}

static void make(tjob *t, const kl_key *k, uint8_t op, size_t len,
                 uint64_t deadline)
{
    memset(t, 0, sizeof *t);
    ct_fill(t->in, len, (uint8_t)(uintptr_t)t);
    t->job = (kl_job){.key = k,
                      .opcode = op,
                      .in = t->in,
                      .in_len = len,
                      .out = t->out,
                      .out_cap = sizeof t->out,
                      .deadline_ns = deadline,
                      .done = on_done};
}

#define NJOBS 160

static void test_exhaustion_under_load(void **state)
{
    (void)state;
    kl_pool_opts po = kl_pool_defaults;
    po.workers = 2;
    po.blocking_workers = 8;
    kl_pool *p = kl_pool_new(&po);
    assert_non_null(p);
    EVP_PKEY *pub = ct_pubkey("rsa-2048");
    tjob *jobs = calloc(NJOBS + 1, sizeof *jobs);
    assert_non_null(jobs);

    /* round 1: a tight deadline - some finish, the rest fail at it */
    done_count = 0;
    uint64_t deadline = kl_now_ns() + 40 * KL_NS_PER_MS;
    for (int i = 0; i < NJOBS; i++) {
        make(&jobs[i], rsa, 0x05, 32, deadline);
        assert_int_equal(kl_pool_submit(p, &jobs[i].job), KL_OK);
    }
    wait_done(NJOBS, kl_now_ns() + 20000 * KL_NS_PER_MS);
    int ok = 0, late = 0;
    for (int i = 0; i < NJOBS; i++) {
        tjob *t = &jobs[i];
        if (t->job.err == KL_OK) {
            ok++;
            assert_true(
                ct_verify(pub, 0x05, t->in, 32, t->out, t->job.out_len));
        } else {
            late++;
            assert_int_equal(t->job.err, KL_E_INTERNAL);
        }
        /* answered by its deadline (plus one running signature) */
        assert_true(t->done_ns <= deadline + 500 * KL_NS_PER_MS);
    }
    assert_true(ok > 0);
    assert_true(late > 0);

    /* round 2: room enough - all complete on the one session, and a file
     * key's job submitted behind them is not held up by them */
    done_count = 0;
    deadline = kl_now_ns() + 30000 * KL_NS_PER_MS;
    for (int i = 0; i < NJOBS; i++) {
        make(&jobs[i], rsa, 0x05, 32, deadline);
        assert_int_equal(kl_pool_submit(p, &jobs[i].job), KL_OK);
    }
    tjob *fast = &jobs[NJOBS];
    make(fast, ct_key(files, "ecdsa-p256"), 0x15, 32, 0);
    assert_int_equal(kl_pool_submit(p, &fast->job), KL_OK);
    wait_done(NJOBS + 1, deadline);
    uint64_t last = 0;
    for (int i = 0; i < NJOBS; i++) {
        assert_int_equal(jobs[i].job.err, KL_OK);
        assert_true(ct_verify(pub, 0x05, jobs[i].in, 32, jobs[i].out,
                              jobs[i].job.out_len));
        if (jobs[i].done_ns > last)
            last = jobs[i].done_ns;
    }
    assert_int_equal(fast->job.err, KL_OK);
    assert_true(fast->done_ns < last);
    kl_pool_free(p);
    free(jobs);
    EVP_PKEY_free(pub);
}

/* blocking_workers = 0: the blocking threads start with the first token
 * job, and only token jobs count in the blocking queue */
static void test_blocking_workers_start_on_demand(void **state)
{
    (void)state;
    kl_pool_opts po = kl_pool_defaults;
    po.workers = 1;
    kl_pool *p = kl_pool_new(&po);
    assert_non_null(p);
    assert_int_equal(kl_pool_queued(p, KL_COST_BLOCKING), 0);
    tjob t;
    done_count = 0;
    make(&t, rsa, 0x05, 32, kl_now_ns() + 10000 * KL_NS_PER_MS);
    assert_int_equal(kl_pool_submit(p, &t.job), KL_OK);
    wait_done(1, kl_now_ns() + 10000 * KL_NS_PER_MS);
    assert_int_equal(t.job.err, KL_OK);
    EVP_PKEY *pub = ct_pubkey("rsa-2048");
    assert_true(ct_verify(pub, 0x05, t.in, 32, t.out, t.job.out_len));
    EVP_PKEY_free(pub);
    /* past its deadline before it runs: shed without touching the token */
    done_count = 0;
    make(&t, rsa, 0x05, 32, kl_now_ns() - 1);
    assert_int_equal(kl_pool_submit(p, &t.job), KL_OK);
    wait_done(1, kl_now_ns() + 10000 * KL_NS_PER_MS);
    assert_int_equal(t.job.err, KL_E_INTERNAL);
    kl_pool_free(p);
}

/* ---- faults: sessions lost behind keylessd's back ---------------------- */

static void test_session_closed_is_reopened(void **state)
{
    (void)state;
    kl_p11_token *tok = kl_key_p11(rsa)->tok;
    CK_FUNCTION_LIST *fl = kl_p11_token_fl(tok);
    CK_SESSION_HANDLE h;
    assert_int_equal(
        kl_p11_session_get(tok, kl_now_ns() + 1000 * KL_NS_PER_MS, &h), KL_OK);
    assert_int_equal(fl->C_CloseSession(h), CKR_OK);
    kl_p11_session_put(tok, h); /* the pool now holds a dead handle */
    assert_int_equal(sign_now(kl_now_ns() + 1000 * KL_NS_PER_MS, NULL), KL_OK);
    assert_int_equal(sign_now(kl_now_ns() + 1000 * KL_NS_PER_MS, NULL), KL_OK);
}

static void test_logged_out_is_logged_in(void **state)
{
    (void)state;
    kl_p11_token *tok = kl_key_p11(rsa)->tok;
    CK_FUNCTION_LIST *fl = kl_p11_token_fl(tok);
    CK_SESSION_HANDLE h;
    assert_int_equal(
        kl_p11_session_get(tok, kl_now_ns() + 1000 * KL_NS_PER_MS, &h), KL_OK);
    assert_int_equal(fl->C_Logout(h), CKR_OK);
    kl_p11_session_put(tok, h);
    assert_int_equal(sign_now(kl_now_ns() + 1000 * KL_NS_PER_MS, NULL), KL_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wait_bounded_by_deadline),
        cmocka_unit_test(test_exhaustion_under_load),
        cmocka_unit_test(test_blocking_workers_start_on_demand),
        cmocka_unit_test(test_session_closed_is_reopened),
        cmocka_unit_test(test_logged_out_is_logged_in),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
