/* SPDX-License-Identifier: Apache-2.0 */
/* Faults a real HSM produces and SoftHSM does not, made by the
 * test-only shim module (tests/p11shim) in front of SoftHSM2: sessions the
 * token closed, a token that logged out, a removed device, and a 2 s
 * stall. Through the key store and the pool's blocking workers, keylessd
 * re-opens and re-logs in and answers every request - with a result that
 * verifies with OpenSSL, or with an error - by its deadline; a stalled
 * token call does not delay file keys or other tokens.
 *
 * Every job lives on the heap and is freed by its done callback: a pool
 * that touched a job after answering it (the late result of a stalled
 * call) would be a use-after-free under ASan. */
#include "shimtest.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "core/time.h"
#include "crypto/pool.h"

/* How late past its deadline an answer may come (a loaded, sanitized
 * machine; the watchdog itself answers at the deadline). */
#define SLACK (300 * KL_NS_PER_MS)

static kl_keystore *files, *hsm;
static const kl_key *rsa, *ec, *rsa_b; /* kl-a x2 (max-sessions=2), kl-b */
static const kl_key *file_rsa, *file_ec;
static EVP_PKEY *pub_rsa, *pub_ec, *pub_rsa_b;
static kl_pool *pool;

/* ---- heap jobs answered into records ------------------------------------ */

typedef struct rec {
    const kl_key *key;
    uint8_t op;
    uint8_t in[512];
    size_t in_len;
    uint64_t deadline_ns;
    /* set by the done callback */
    bool done;
    kl_status err;
    uint8_t out[1024];
    size_t out_len;
    uint64_t done_ns;
} rec;

typedef struct hjob {
    kl_job job;
    uint8_t in[512];
    uint8_t out[1024];
} hjob;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int answered, answered_twice;

static void on_done(kl_job *j)
{
    hjob *h = (hjob *)j;
    rec *r = j->owner;
    pthread_mutex_lock(&mu);
    if (r->done)
        answered_twice++;
    r->done = true;
    r->err = j->err;
    r->out_len = j->out_len <= sizeof r->out ? j->out_len : 0;
    memcpy(r->out, h->out, r->out_len);
    r->done_ns = kl_now_ns();
    answered++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    memset(h, 0xa5, sizeof *h);
    free(h);
}

/* A fresh record: a signature input (or ciphertext) for op. */
static void prep(rec *r, const kl_key *k, uint8_t op, uint64_t deadline_ms,
                 uint8_t seed)
{
    memset(r, 0, sizeof *r);
    r->key = k;
    r->op = op;
    if (op == KL_OP_RSA_DECRYPT) {
        r->in_len = (size_t)kl_key_bits(k) / 8;
        ct_fill(r->in, r->in_len, seed);
        r->in[0] = 0x00; /* below the modulus */
    } else {
        r->in_len = 32;
        ct_fill(r->in, r->in_len, seed);
    }
    r->deadline_ns = deadline_ms ? kl_now_ns() + deadline_ms * KL_NS_PER_MS : 0;
}

/* The pool's hold on a job's key store while a token call outlives the
 * job's answer: counted, and the handle checked. */
static _Atomic int holds, unholds;
static int hold_token;

static void *test_key_hold(const kl_job *j)
{
    (void)j;
    atomic_fetch_add(&holds, 1);
    return &hold_token;
}

static void test_key_unhold(void *handle)
{
    assert_ptr_equal(handle, &hold_token);
    atomic_fetch_add(&unholds, 1);
}

static void submit(rec *r)
{
    hjob *h = calloc(1, sizeof *h);
    assert_non_null(h);
    memcpy(h->in, r->in, r->in_len);
    h->job = (kl_job){.key = r->key,
                      .opcode = r->op,
                      .in = h->in,
                      .in_len = r->in_len,
                      .out = h->out,
                      .out_cap = sizeof h->out,
                      .deadline_ns = r->deadline_ns,
                      .done = on_done,
                      .owner = r,
                      .key_hold = test_key_hold,
                      .key_unhold = test_key_unhold};
    assert_int_equal(kl_pool_submit(pool, &h->job), KL_OK);
}

/* Waits until every record is answered; fails after limit_ms (a hang). */
static void wait_all(rec *r, int n, uint64_t limit_ms)
{
    uint64_t limit = kl_now_ns() + limit_ms * KL_NS_PER_MS;
    pthread_mutex_lock(&mu);
    for (;;) {
        int left = 0;
        for (int i = 0; i < n; i++)
            left += !r[i].done;
        if (left == 0 || kl_now_ns() >= limit)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&cv, &mu, &ts);
    }
    int got = 0;
    for (int i = 0; i < n; i++)
        got += r[i].done;
    pthread_mutex_unlock(&mu);
    assert_int_equal(got, n); /* none hangs */
    assert_int_equal(answered_twice, 0);
}

/* Polls the shim's counters until pred holds (stalls begun or done). */
static void wait_stalls(unsigned long begun, unsigned long done,
                        uint64_t limit_ms)
{
    uint64_t limit = kl_now_ns() + limit_ms * KL_NS_PER_MS;
    kl_p11shim_stats s = stats();
    while ((s.stalls < begun || s.stalls_done < done) && kl_now_ns() < limit) {
        usleep(5000);
        s = stats();
    }
    assert_true(s.stalls >= begun);
    assert_true(s.stalls_done >= done);
}

/* The answer is right: a signature that verifies with OpenSSL, or for a
 * decrypt the same raw block as the key file gives. */
static void assert_result(const rec *r)
{
    assert_int_equal(r->err, KL_OK);
    if (r->op == KL_OP_RSA_DECRYPT) {
        uint8_t want[1024];
        size_t n = 0;
        assert_int_equal(kl_crypto_exec(file_rsa, r->op, r->in, r->in_len, want,
                                        sizeof want, &n),
                         KL_OK);
        assert_int_equal(r->out_len, n);
        assert_memory_equal(r->out, want, n);
        return;
    }
    EVP_PKEY *pub = r->key == rsa ? pub_rsa : r->key == ec ? pub_ec : pub_rsa_b;
    assert_true(ct_verify(pub, r->op, r->in, r->in_len, r->out, r->out_len));
}

/* n jobs at once, each answered correctly by its deadline. */
static void run_ok(const kl_key *k, uint8_t op, int n)
{
    rec r[8];
    assert_true(n <= 8);
    for (int i = 0; i < n; i++)
        prep(&r[i], k, op, 5000, (uint8_t)(i * 7 + op));
    for (int i = 0; i < n; i++)
        submit(&r[i]);
    wait_all(r, n, 10000);
    for (int i = 0; i < n; i++) {
        assert_result(&r[i]);
        assert_true(r[i].done_ns <= r[i].deadline_ns);
    }
}

/* ---- setup --------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    (void)ht_uri; /* SoftHSM's own URIs: not used here, all go via the shim */
    files = ct_vector_store();
    ht_setup(files);
    shim_start();

    hsm = kl_keystore_new(NULL);
    assert_non_null(hsm);
    const char *pin_a = "pin-value=" HT_PIN_A "&max-sessions=2";
    assert_int_equal(
        kl_keystore_add_uri(hsm, shim_uri("token=kl-a;object=rsa", pin_a)),
        KL_OK);
    assert_int_equal(
        kl_keystore_add_uri(hsm, shim_uri("token=kl-a;object=ec", pin_a)),
        KL_OK);
    assert_int_equal(kl_keystore_add_uri(hsm, shim_uri("token=kl-b;id=%01",
                                                       "pin-value=" HT_PIN_B
                                                       "&max-sessions=1")),
                     KL_OK);
    file_rsa = ct_key(files, "rsa-2048");
    file_ec = ct_key(files, "ecdsa-p256");
    rsa = kl_keystore_find(hsm, kl_key_ski(file_rsa));
    ec = kl_keystore_find(hsm, kl_key_ski(file_ec));
    rsa_b = kl_keystore_find(hsm, kl_key_ski(ct_key(files, "rsa-3072")));
    assert_non_null(rsa);
    assert_non_null(ec);
    assert_non_null(rsa_b);
    pub_rsa = ct_pubkey("rsa-2048");
    pub_ec = ct_pubkey("ecdsa-p256");
    pub_rsa_b = ct_pubkey("rsa-3072");

    shim_bind_stats();

    /* sized as pool.h advises: one blocking worker per token session */
    assert_int_equal(kl_keystore_token_sessions(hsm), 3);
    kl_pool_opts po = kl_pool_defaults;
    po.workers = 2;
    po.blocking_workers = (int)kl_keystore_token_sessions(hsm);
    pool = kl_pool_new(&po);
    assert_non_null(pool);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kl_pool_free(pool);
    EVP_PKEY_free(pub_rsa);
    EVP_PKEY_free(pub_ec);
    EVP_PKEY_free(pub_rsa_b);
    kl_keystore_free(hsm);
    kl_keystore_free(files);
    ht_teardown();
    return 0;
}

static int before_each(void **state)
{
    (void)state;
    ctl("");
    return 0;
}

/* ---- one fault, then recovery -------------------------------------------- */

/* rule is armed for count calls; 4 jobs of each kind (RSA sign, ECDSA
 * sign, RSA decrypt) run at once on the two sessions of kl-a: every job
 * is answered with a right result, and the shim did make the faults. */
static void one_fault_each_op(const char *error)
{
    static const struct {
        const char *calls;
        const kl_key **key;
        uint8_t op;
    } ops[] = {
        {"sign", &rsa, KL_OP_RSA_SIGN_SHA256},
        {"sign", &ec, KL_OP_ECDSA_SIGN_SHA256},
        {"decrypt", &rsa, KL_OP_RSA_DECRYPT},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        char rule[128];
        /* the op index keeps the content new, so the count starts afresh */
        snprintf(rule, sizeof rule, "# %zu\n%s error=%s count=1\n", i,
                 ops[i].calls, error);
        unsigned long before = stats().errors;
        ctl(rule);
        run_ok(*ops[i].key, ops[i].op, 4);
        assert_int_equal(stats().errors, before + 1);
        ctl("");
        run_ok(*ops[i].key, ops[i].op, 2); /* and afterwards */
    }
}

static void test_session_handle_invalid(void **state)
{
    (void)state;
    one_fault_each_op("CKR_SESSION_HANDLE_INVALID");
}

static void test_user_not_logged_in(void **state)
{
    (void)state;
    one_fault_each_op("CKR_USER_NOT_LOGGED_IN");
}

/* closes every session of the token, the idle ones in the pool too */
static void test_device_removed(void **state)
{
    (void)state;
    one_fault_each_op("CKR_DEVICE_REMOVED");
}

/* The retry fails too: the request gets an error at once (not at its
 * deadline), and the session pool is whole afterwards - both sessions can
 * be used at once. */
static void test_fault_on_retry_is_an_error(void **state)
{
    (void)state;
    static const char *errors[] = {"CKR_SESSION_HANDLE_INVALID",
                                   "CKR_USER_NOT_LOGGED_IN",
                                   "CKR_DEVICE_REMOVED"};
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        char rule[128];
        snprintf(rule, sizeof rule, "sign error=%s count=2 token=kl-a\n",
                 errors[i]);
        unsigned long before = stats().errors;
        ctl(rule);
        rec r;
        prep(&r, rsa, KL_OP_RSA_SIGN_SHA256, 5000, 1);
        uint64_t t0 = kl_now_ns();
        submit(&r);
        wait_all(&r, 1, 10000);
        assert_int_equal(r.err, KL_E_INTERNAL);
        assert_true(r.done_ns - t0 < 1000 * KL_NS_PER_MS);
        assert_int_equal(stats().errors, before + 2);
        ctl("");
        run_ok(rsa, KL_OP_RSA_SIGN_SHA256, 4);
        run_ok(ec, KL_OP_ECDSA_SIGN_SHA256, 2);
    }
}

/* The token is gone for a while: every call fails and no session opens.
 * Each request is answered with an error by its deadline; once the token
 * is back, requests succeed again. */
static void test_token_absent_then_back(void **state)
{
    (void)state;
    ctl("crypto error=CKR_DEVICE_REMOVED token=kl-a\n"
        "open error=CKR_TOKEN_NOT_PRESENT token=kl-a\n");
    rec r[6];
    for (int i = 0; i < 6; i++)
        prep(&r[i],
             i % 3 == 0   ? rsa
             : i % 3 == 1 ? ec
                          : rsa,
             i % 3 == 2   ? KL_OP_RSA_DECRYPT
             : i % 3 == 1 ? KL_OP_ECDSA_SIGN_SHA256
                          : KL_OP_RSA_SIGN_SHA256,
             1000, (uint8_t)i);
    for (int i = 0; i < 6; i++)
        submit(&r[i]);
    wait_all(r, 6, 5000);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(r[i].err, KL_E_INTERNAL);
        assert_true(r[i].done_ns <= r[i].deadline_ns + SLACK);
    }
    /* the other token is not affected */
    run_ok(rsa_b, KL_OP_RSA_SIGN_SHA256, 1);
    ctl("");
    run_ok(rsa, KL_OP_RSA_SIGN_SHA256, 4);
    run_ok(rsa, KL_OP_RSA_DECRYPT, 2);
    run_ok(ec, KL_OP_ECDSA_SIGN_SHA256, 2);
}

/* A module that does not end the operation when a sign fails leaves the
 * session unusable (CKR_OPERATION_ACTIVE): that request gets an error, the
 * session is closed rather than pooled, and later requests succeed. */
static void test_operation_left_active(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++) {
        char rule[128];
        snprintf(rule, sizeof rule,
                 "# %d\nsign error=CKR_DEVICE_ERROR count=1 forward=0 "
                 "token=kl-a\n",
                 i);
        ctl(rule);
        rec r;
        prep(&r, i ? ec : rsa,
             i ? KL_OP_ECDSA_SIGN_SHA256 : KL_OP_RSA_SIGN_SHA256, 2000, 1);
        submit(&r);
        wait_all(&r, 1, 5000);
        assert_int_equal(r.err, KL_E_INTERNAL);
        ctl("");
        for (int j = 0; j < 3; j++) /* one at a time: every pooled session */
            run_ok(rsa, KL_OP_RSA_SIGN_SHA256, 1);
        run_ok(ec, KL_OP_ECDSA_SIGN_SHA256, 4);
    }
}

/* ---- a stalled token call -------------------------------------------------
 */

/* A 2 s stall with a 500 ms deadline: the request is answered with an
 * error at its deadline while the worker stays in the token call; file
 * keys, the other session of the token and the other token go on
 * meanwhile; the late result is dropped (the job was freed: ASan would see
 * a write) and the session comes back to the pool. */
static void test_stall_answered_at_deadline(void **state)
{
    (void)state;
    kl_p11shim_stats s0 = stats();
    int holds0 = atomic_load(&holds), unholds0 = atomic_load(&unholds);
    ctl("sign stall_ms=2000 count=1 token=kl-a\n");
    rec stalled;
    prep(&stalled, rsa, KL_OP_RSA_SIGN_SHA256, 500, 1);
    submit(&stalled);
    wait_stalls(s0.stalls + 1, 0, 2000);

    /* while it is stuck: file-key ECDSA, kl-b, and kl-a's other session */
    enum { NFILE = 32 };
    rec fr[NFILE];
    uint64_t t0 = kl_now_ns();
    for (int i = 0; i < NFILE; i++) {
        prep(&fr[i], file_ec, KL_OP_ECDSA_SIGN_SHA256, 0, (uint8_t)i);
        submit(&fr[i]);
    }
    wait_all(fr, NFILE, 5000);
    for (int i = 0; i < NFILE; i++) {
        assert_int_equal(fr[i].err, KL_OK);
        assert_true(ct_verify(pub_ec, fr[i].op, fr[i].in, 32, fr[i].out,
                              fr[i].out_len));
        assert_true(fr[i].done_ns - t0 < 300 * KL_NS_PER_MS);
    }
    rec other[2];
    prep(&other[0], rsa_b, KL_OP_RSA_SIGN_SHA256, 1000, 2);
    prep(&other[1], ec, KL_OP_ECDSA_SIGN_SHA256, 1000, 3);
    submit(&other[0]);
    submit(&other[1]);
    wait_all(other, 2, 5000);
    assert_result(&other[0]);
    assert_result(&other[1]);
    assert_true(other[0].done_ns <= other[0].deadline_ns);
    assert_true(other[1].done_ns <= other[1].deadline_ns);

    /* the stalled one: an error at its deadline, long before the stall ends */
    wait_all(&stalled, 1, 3000);
    assert_int_equal(stalled.err, KL_E_INTERNAL);
    assert_true(stalled.done_ns >= stalled.deadline_ns);
    assert_true(stalled.done_ns <= stalled.deadline_ns + SLACK);
    assert_int_equal(stats().stalls_done, s0.stalls_done);
    /* answered early: the pool holds the key's store while the call runs */
    assert_int_equal(atomic_load(&holds), holds0 + 1);
    assert_int_equal(atomic_load(&unholds), unholds0);

    /* the call returns; its result goes nowhere; the session is reused */
    wait_stalls(s0.stalls + 1, s0.stalls_done + 1, 4000);
    usleep(50 * 1000);
    assert_int_equal(answered_twice, 0);
    /* ... and the hold is given back once the call really returned */
    assert_int_equal(atomic_load(&unholds), unholds0 + 1);
    assert_int_equal(atomic_load(&holds), holds0 + 1);
    run_ok(rsa, KL_OP_RSA_SIGN_SHA256, 4);
}

/* Every call on kl-a stalls 1 s and a burst of kl-a requests with 300 ms
 * deadlines comes: two are stuck in the token, the others wait for a
 * session or in the queue. Every one is answered with an error by its
 * deadline. Once the token is fast again, requests succeed. */
static void test_stall_burst_all_answered(void **state)
{
    (void)state;
    kl_p11shim_stats s0 = stats();
    ctl("crypto stall_ms=1000 token=kl-a\n");
    enum { N = 8 };
    rec r[N];
    for (int i = 0; i < N; i++)
        prep(&r[i], i % 2 ? ec : rsa,
             i % 2 ? KL_OP_ECDSA_SIGN_SHA256 : KL_OP_RSA_SIGN_SHA256, 300,
             (uint8_t)i);
    for (int i = 0; i < N; i++)
        submit(&r[i]);
    wait_all(r, N, 3000);
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].err, KL_E_INTERNAL);
        assert_true(r[i].done_ns <= r[i].deadline_ns + SLACK);
    }
    kl_p11shim_stats s1 = stats();
    /* no more token calls than sessions (the rest never got one) */
    assert_true(s1.stalls - s0.stalls >= 1 && s1.stalls - s0.stalls <= 2);
    ctl("");
    wait_stalls(s1.stalls, s1.stalls, 3000);
    run_ok(rsa, KL_OP_RSA_SIGN_SHA256, 4);
    run_ok(ec, KL_OP_ECDSA_SIGN_SHA256, 2);
}

/* Without the pool (kl_crypto_exec_deadline on the caller's thread) a
 * token call cannot be cut short: the call returns when the token does,
 * here with the signature, past the deadline. keylessd always goes
 * through the pool, which answers by the deadline (above). */
static void test_direct_call_waits_for_the_token(void **state)
{
    (void)state;
    ctl("sign stall_ms=600 count=1 token=kl-a\n");
    uint8_t in[32], out[512];
    size_t n = 0;
    ct_fill(in, sizeof in, 9);
    uint64_t t0 = kl_now_ns();
    kl_status err =
        kl_crypto_exec_deadline(rsa, KL_OP_RSA_SIGN_SHA256, in, sizeof in, out,
                                sizeof out, &n, t0 + 200 * KL_NS_PER_MS);
    uint64_t el = kl_now_ns() - t0;
    assert_int_equal(err, KL_OK);
    assert_true(
        ct_verify(pub_rsa, KL_OP_RSA_SIGN_SHA256, in, sizeof in, out, n));
    assert_true(el >= 600 * KL_NS_PER_MS);
}

/* ---- the shim's control file --------------------------------------------- */

/* A malformed control file fails the calls it would govern (loudly), and a
 * request on them gets an error; a good file restores service. */
static void test_bad_control_file(void **state)
{
    (void)state;
    static const char *bad[] = {
        "sign error=CKR_NOT_A_CODE\n",
        "sign count=1\n", /* no action */
        "frob error=CKR_DEVICE_REMOVED\n",
        "sign stall_ms=abc\n",
        "sign stall_ms=0\n",
        "sign error=CKR_DEVICE_REMOVED count=0\n",
        "sign error=CKR_DEVICE_REMOVED count=-1\n",
        "sign error\n",
        "sign token="
        "0123456789012345678901234567890123456789"
        " error=CKR_DEVICE_REMOVED\n",
        "sign error=CKR_0x0\n",
        "sign error=CKR_DEVICE_REMOVED\nsign bogus=1\n",
        "sign error=CKR_DEVICE_ERROR forward=2\n",
        "sign stall_ms=10 forward=0\n", /* skips the call, answers OK */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned long before = stats().bad_ctl;
        ctl(bad[i]);
        rec r;
        prep(&r, rsa, KL_OP_RSA_SIGN_SHA256, 2000, (uint8_t)i);
        submit(&r);
        wait_all(&r, 1, 5000);
        assert_int_equal(r.err, KL_E_INTERNAL);
        assert_true(stats().bad_ctl > before);
    }
    /* comments, blank lines, a hex code, a rule for another token */
    ctl("# only kl-b\n\n  sign error=CKR_0x30 token=kl-b count=1\n");
    run_ok(rsa, KL_OP_RSA_SIGN_SHA256, 2);
    rec b;
    prep(&b, rsa_b, KL_OP_RSA_SIGN_SHA256, 2000, 5);
    submit(&b);
    wait_all(&b, 1, 5000);
    assert_int_equal(b.err, KL_E_INTERNAL); /* CKR_DEVICE_ERROR (0x30) */
    ctl("");
    run_ok(rsa_b, KL_OP_RSA_SIGN_SHA256, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_session_handle_invalid, before_each),
        cmocka_unit_test_setup(test_user_not_logged_in, before_each),
        cmocka_unit_test_setup(test_device_removed, before_each),
        cmocka_unit_test_setup(test_fault_on_retry_is_an_error, before_each),
        cmocka_unit_test_setup(test_token_absent_then_back, before_each),
        cmocka_unit_test_setup(test_operation_left_active, before_each),
        cmocka_unit_test_setup(test_stall_answered_at_deadline, before_each),
        cmocka_unit_test_setup(test_stall_burst_all_answered, before_each),
        cmocka_unit_test_setup(test_direct_call_waits_for_the_token,
                               before_each),
        cmocka_unit_test_setup(test_bad_control_file, before_each),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
