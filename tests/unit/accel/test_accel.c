/* SPDX-License-Identifier: Apache-2.0 */
/* The test accelerator provider (tests/accel/accel.h) on its own: a
 * signature inside an ASYNC job pauses and is resumed through the job's
 * eventfd; the device runs `slots` operations at once for `latency_us`
 * each; full=software, fail, lose, stopped and memo do what the header
 * says; every signature verifies with the default provider; no eventfd or
 * operation is left behind. With the application's completion callback
 * set, the provider says ASYNC_STATUS_OK, opens no fd and calls back once
 * per operation; busy= pauses with ASYNC_STATUS_EAGAIN and submits again
 * when resumed. Keylessd's use of it is tested elsewhere. */
#include <poll.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/async.h>
#include <openssl/evp.h>
#include <openssl/provider.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>

#include "accel.h"
#include "accelctl.h"

#define MAXJOBS 64

static char ctl_path[256];
static EVP_PKEY *ec_key, *rsa_key;
static OSSL_LIB_CTX *lib; /* default + kl_accel */
static OSSL_PROVIDER *accel_prov, *default_prov;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void ctl(const char *text)
{
    accel_ctl(ctl_path, text);
}

typedef struct sign_job {
    EVP_PKEY *key;
    int pad; /* RSA only */
    uint8_t dgst[32];
    uint8_t sig[512];
    size_t siglen;
    int ok;
    ASYNC_JOB *job;
    ASYNC_WAIT_CTX *wctx;
    bool done;
} sign_job;

static int sign_now(sign_job *s)
{
    EVP_PKEY_CTX *c =
        EVP_PKEY_CTX_new_from_pkey(lib, s->key, "?provider=" KL_ACCEL_NAME);
    s->siglen = sizeof s->sig;
    int ok = c && EVP_PKEY_sign_init(c) == 1 &&
             EVP_PKEY_CTX_set_signature_md(c, EVP_sha256()) == 1;
    if (ok && EVP_PKEY_get_base_id(s->key) == EVP_PKEY_RSA) {
        ok = EVP_PKEY_CTX_set_rsa_padding(c, s->pad) == 1;
        if (ok && s->pad == RSA_PKCS1_PSS_PADDING)
            ok = EVP_PKEY_CTX_set_rsa_pss_saltlen(c, RSA_PSS_SALTLEN_DIGEST) ==
                 1;
    }
    ok = ok && EVP_PKEY_sign(c, s->sig, &s->siglen, s->dgst, 32) == 1;
    EVP_PKEY_CTX_free(c);
    return ok;
}

static int job_main(void *arg)
{
    sign_job *s = *(sign_job **)arg;
    s->ok = sign_now(s);
    return 0;
}

static bool verifies(const sign_job *s)
{
    EVP_PKEY_CTX *c =
        EVP_PKEY_CTX_new_from_pkey(lib, s->key, "provider=default");
    int ok = c && EVP_PKEY_verify_init(c) == 1 &&
             EVP_PKEY_CTX_set_signature_md(c, EVP_sha256()) == 1;
    if (ok && EVP_PKEY_get_base_id(s->key) == EVP_PKEY_RSA)
        ok = EVP_PKEY_CTX_set_rsa_padding(c, s->pad) == 1;
    ok = ok && EVP_PKEY_verify(c, s->sig, s->siglen, s->dgst, 32) == 1;
    EVP_PKEY_CTX_free(c);
    return ok;
}

/* Starts one job per entry and drives them all from this thread: poll on
 * the paused jobs' wait fds, resume the ready ones. Returns the time it
 * took in ms. */
static double run_jobs(sign_job *js, size_t n)
{
    double t0 = now_ms();
    size_t left = n;
    for (size_t i = 0; i < n; i++) {
        js[i].wctx = ASYNC_WAIT_CTX_new();
        assert_non_null(js[i].wctx);
        js[i].job = NULL;
        js[i].done = false;
    }
    bool first = true;
    while (left) {
        struct pollfd pf[MAXJOBS];
        size_t idx[MAXJOBS], np = 0;
        for (size_t i = 0; i < n; i++) {
            if (js[i].done)
                continue;
            OSSL_ASYNC_FD fd;
            size_t nfd = 0;
            if (!first) {
                assert_int_equal(
                    ASYNC_WAIT_CTX_get_all_fds(js[i].wctx, NULL, &nfd), 1);
                assert_int_equal(nfd, 1); /* one eventfd per context */
                ASYNC_WAIT_CTX_get_all_fds(js[i].wctx, &fd, &nfd);
                pf[np] = (struct pollfd){.fd = fd, .events = POLLIN};
                idx[np++] = i;
                continue;
            }
            int ret;
            sign_job *arg = &js[i];
            int r = ASYNC_start_job(&js[i].job, js[i].wctx, &ret, job_main,
                                    &arg, sizeof arg);
            assert_int_not_equal(r, ASYNC_ERR);
            assert_int_not_equal(r, ASYNC_NO_JOBS);
            if (r == ASYNC_FINISH) {
                js[i].done = true;
                left--;
            }
        }
        first = false;
        if (!np)
            continue;
        assert_true(poll(pf, np, 10000) > 0);
        for (size_t k = 0; k < np; k++) {
            if (!(pf[k].revents & POLLIN))
                continue;
            sign_job *s = &js[idx[k]];
            int ret;
            int r = ASYNC_start_job(&s->job, s->wctx, &ret, job_main, NULL, 0);
            assert_int_not_equal(r, ASYNC_ERR);
            if (r == ASYNC_FINISH) {
                s->done = true;
                left--;
            }
        }
    }
    double took = now_ms() - t0;
    for (size_t i = 0; i < n; i++)
        ASYNC_WAIT_CTX_free(js[i].wctx);
    return took;
}

static void fill(sign_job *js, size_t n, EVP_PKEY *key, int pad)
{
    memset(js, 0, n * sizeof *js);
    for (size_t i = 0; i < n; i++) {
        js[i].key = key;
        js[i].pad = pad;
        assert_int_equal(RAND_bytes(js[i].dgst, 32), 1);
    }
}

static size_t count_ok(const sign_job *js, size_t n)
{
    size_t ok = 0;
    for (size_t i = 0; i < n; i++)
        if (js[i].ok) {
            assert_true(verifies(&js[i]));
            ok++;
        }
    return ok;
}

static void assert_settled(void)
{
    kl_accel_stats st;
    kl_accel_get_stats(&st);
    assert_int_equal(st.in_flight, 0);
    assert_int_equal(st.open_fds, 0); /* every context was freed */
}

/* No job: the caller blocks for the device's latency. */
static void test_blocking(void **state)
{
    (void)state;
    ctl("latency_us=20000\nslots=4\n");
    kl_accel_stats a, b;
    kl_accel_get_stats(&a);
    sign_job s[3];
    fill(s, 1, ec_key, 0);
    fill(s + 1, 1, rsa_key, RSA_PKCS1_PADDING);
    fill(s + 2, 1, rsa_key, RSA_PKCS1_PSS_PADDING);
    for (int i = 0; i < 3; i++) {
        double t0 = now_ms();
        s[i].ok = sign_now(&s[i]);
        assert_true(s[i].ok);
        assert_true(verifies(&s[i]));
        assert_true(now_ms() - t0 >= 19.0);
    }
    kl_accel_get_stats(&b);
    assert_int_equal(b.blocked - a.blocked, 3);
    assert_int_equal(b.submitted - a.submitted, 3);
    assert_int_equal(b.paused - a.paused, 0);
    assert_settled();
}

/* 48 jobs on one thread with 64 slots take one latency, not 48. */
static void test_async_parallel(void **state)
{
    (void)state;
    ctl("latency_us=100000\nslots=64\n");
    static sign_job js[48];
    fill(js, 24, ec_key, 0);
    fill(js + 24, 24, rsa_key, RSA_PKCS1_PSS_PADDING);
    kl_accel_stats a, b;
    kl_accel_get_stats(&a);
    double took = run_jobs(js, 48);
    assert_int_equal(count_ok(js, 48), 48);
    kl_accel_get_stats(&b);
    assert_int_equal(b.paused - a.paused, 48);
    assert_true(took >= 99.0);
    assert_true(took < 48 * 100.0 / 4); /* far from one at a time */
    assert_settled();
}

/* slots=4: 16 jobs need four rounds; the device never holds more. */
static void test_slots(void **state)
{
    (void)state;
    ctl("latency_us=50000\nslots=4\n");
    static sign_job js[16];
    fill(js, 16, ec_key, 0);
    double took = run_jobs(js, 16);
    assert_int_equal(count_ok(js, 16), 16);
    kl_accel_stats st;
    kl_accel_get_stats(&st);
    assert_int_equal(st.max_in_slot, 4);
    assert_true(took >= 4 * 50.0 - 1);
    assert_settled();
}

/* full=software: what finds every slot busy is signed at once. */
static void test_software(void **state)
{
    (void)state;
    ctl("latency_us=200000\nslots=2\nfull=software\n");
    static sign_job js[8];
    fill(js, 8, rsa_key, RSA_PKCS1_PADDING);
    kl_accel_stats a, b;
    kl_accel_get_stats(&a);
    run_jobs(js, 8);
    kl_accel_get_stats(&b);
    assert_int_equal(count_ok(js, 8), 8);
    assert_int_equal(b.software - a.software, 6);
    assert_int_equal(b.submitted - a.submitted, 2);
    assert_settled();
}

/* fail=3: three device errors, then answers again. */
static void test_fail(void **state)
{
    (void)state;
    ctl("latency_us=1000\nfail=3\n");
    static sign_job js[8];
    fill(js, 8, ec_key, 0);
    run_jobs(js, 8);
    assert_int_equal(count_ok(js, 8), 5);
    assert_settled();
}

/* lose=1: one operation is never answered and ends at timeout_ms with an
 * error; the others are not held up by it. */
static void test_lose(void **state)
{
    (void)state;
    ctl("latency_us=1000\ntimeout_ms=300\nlose=1\n");
    kl_accel_stats a, b;
    kl_accel_get_stats(&a);
    static sign_job js[4];
    fill(js, 4, ec_key, 0);
    double took = run_jobs(js, 4);
    kl_accel_get_stats(&b);
    assert_int_equal(count_ok(js, 4), 3);
    assert_int_equal(b.timed_out - a.timed_out, 1);
    assert_true(took >= 299.0 && took < 3000.0);
    assert_settled();
}

/* stopped=1: nothing is answered, everything ends at timeout_ms; after
 * stopped=0 the device works again. */
static void test_stopped(void **state)
{
    (void)state;
    ctl("latency_us=1000\ntimeout_ms=200\nstopped=1\n");
    static sign_job js[6];
    fill(js, 6, ec_key, 0);
    run_jobs(js, 6);
    assert_int_equal(count_ok(js, 6), 0);
    ctl("latency_us=1000\ntimeout_ms=200\nstopped=0\n");
    fill(js, 6, ec_key, 0);
    run_jobs(js, 6);
    assert_int_equal(count_ok(js, 6), 6);
    assert_settled();
}

/* memo=1: the same digest again is answered from memo, still valid. */
static void test_memo(void **state)
{
    (void)state;
    ctl("latency_us=1000\nmemo=1\n");
    static sign_job js[4];
    fill(js, 4, ec_key, 0);
    for (int i = 1; i < 4; i++)
        memcpy(js[i].dgst, js[0].dgst, 32);
    kl_accel_stats a, b;
    kl_accel_get_stats(&a);
    for (int i = 0; i < 4; i++)
        run_jobs(&js[i], 1);
    kl_accel_get_stats(&b);
    assert_int_equal(count_ok(js, 4), 4);
    assert_int_equal(b.memo_hits - a.memo_hits, 3);
    assert_settled();
}

/* inline=1: answered at once in the job, no pause, no device; with memo=1
 * a repeated digest from the thread's own memo; still valid. */
static void test_inline(void **state)
{
    (void)state;
    ctl("latency_us=100000\ninline=1\nmemo=1\n");
    static sign_job js[6];
    fill(js, 4, ec_key, 0);
    for (int i = 1; i < 4; i++)
        memcpy(js[i].dgst, js[0].dgst, 32);
    fill(js + 4, 2, rsa_key, RSA_PKCS1_PSS_PADDING);
    kl_accel_stats a, b;
    kl_accel_get_stats(&a);
    double took = run_jobs(js, 6);
    js[5].ok = sign_now(&js[5]); /* outside a job too (a repeat: memo) */
    kl_accel_get_stats(&b);
    assert_int_equal(count_ok(js, 6), 6);
    assert_true(took < 50.0); /* not one device latency */
    assert_int_equal(b.inlined - a.inlined, 7);
    assert_int_equal(b.memo_hits - a.memo_hits, 4);
    assert_int_equal(b.paused - a.paused, 0);
    assert_int_equal(b.blocked - a.blocked, 0);
    assert_int_equal(b.submitted - a.submitted, 0);
    /* and back to the device */
    ctl("latency_us=20000\n");
    fill(js, 1, ec_key, 0);
    took = run_jobs(js, 1);
    kl_accel_get_stats(&a);
    assert_int_equal(count_ok(js, 1), 1);
    assert_int_equal(a.paused - b.paused, 1);
    assert_true(took >= 19.0);
    assert_settled();
}

static atomic_uint callbacks[MAXJOBS];
static atomic_uint callbacks_all;

static int on_callback(void *arg)
{
    atomic_fetch_add((atomic_uint *)arg, 1);
    atomic_fetch_add(&callbacks_all, 1);
    return 1;
}

/* Starts n jobs whose wait contexts carry a completion callback; each must
 * pause with ASYNC_STATUS_OK (or EAGAIN: resumed at once) and no fd. Then
 * waits for the n callbacks and resumes each job once. */
static void run_callback_jobs(sign_job *js, size_t n, unsigned *eagain)
{
    *eagain = 0;
    atomic_store(&callbacks_all, 0);
    for (size_t i = 0; i < n; i++) {
        atomic_store(&callbacks[i], 0);
        js[i].wctx = ASYNC_WAIT_CTX_new();
        assert_non_null(js[i].wctx);
        assert_int_equal(
            ASYNC_WAIT_CTX_set_callback(js[i].wctx, on_callback, &callbacks[i]),
            1);
        js[i].job = NULL;
        sign_job *arg = &js[i];
        int ret;
        int r = ASYNC_start_job(&js[i].job, js[i].wctx, &ret, job_main, &arg,
                                sizeof arg);
        while (r == ASYNC_PAUSE &&
               ASYNC_WAIT_CTX_get_status(js[i].wctx) == ASYNC_STATUS_EAGAIN) {
            (*eagain)++; /* the device's queue was full: try again */
            ASYNC_WAIT_CTX_set_status(js[i].wctx, ASYNC_STATUS_UNSUPPORTED);
            r = ASYNC_start_job(&js[i].job, js[i].wctx, &ret, job_main, NULL,
                                0);
        }
        assert_int_equal(r, ASYNC_PAUSE);
        assert_int_equal(ASYNC_WAIT_CTX_get_status(js[i].wctx),
                         ASYNC_STATUS_OK);
        size_t nfd = 9;
        assert_int_equal(ASYNC_WAIT_CTX_get_all_fds(js[i].wctx, NULL, &nfd), 1);
        assert_int_equal(nfd, 0);
    }
    double end = now_ms() + 5000;
    while (atomic_load(&callbacks_all) < n && now_ms() < end)
        usleep(1000);
    assert_int_equal(atomic_load(&callbacks_all), n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(atomic_load(&callbacks[i]), 1);
        int ret;
        assert_int_equal(
            ASYNC_start_job(&js[i].job, js[i].wctx, &ret, job_main, NULL, 0),
            ASYNC_FINISH);
        ASYNC_WAIT_CTX_free(js[i].wctx);
    }
    usleep(20 * 1000); /* no late second callback */
    assert_int_equal(atomic_load(&callbacks_all), n);
}

/* The application's callback instead of an eventfd: one call per
 * operation, from the device; the signatures verify. */
static void test_callback(void **state)
{
    (void)state;
    ctl("latency_us=5000\nslots=64\n");
    static sign_job js[16];
    fill(js, 8, ec_key, 0);
    fill(js + 8, 8, rsa_key, RSA_PKCS1_PSS_PADDING);
    kl_accel_stats a, b;
    kl_accel_get_stats(&a);
    unsigned eagain;
    run_callback_jobs(js, 16, &eagain);
    assert_int_equal(eagain, 0);
    assert_int_equal(count_ok(js, 16), 16);
    kl_accel_get_stats(&b);
    assert_int_equal(b.paused - a.paused, 16);
    assert_settled();
}

/* busy=3: three submissions refused as a full queue (EAGAIN); each job
 * resumed submits again and is answered. */
static void test_busy(void **state)
{
    (void)state;
    ctl("latency_us=2000\nslots=64\nbusy=3\n");
    static sign_job js[8];
    fill(js, 8, ec_key, 0);
    kl_accel_stats a, b;
    kl_accel_get_stats(&a);
    unsigned eagain;
    run_callback_jobs(js, 8, &eagain);
    assert_int_equal(eagain, 3);
    assert_int_equal(count_ok(js, 8), 8);
    kl_accel_get_stats(&b);
    assert_int_equal(b.busy - a.busy, 3);
    assert_int_equal(b.submitted - a.submitted, 8);
    /* and with callback=0: the fd is made readable instead */
    ctl("latency_us=2000\nslots=64\nbusy=2\ncallback=0\n");
    fill(js, 4, ec_key, 0);
    kl_accel_get_stats(&a);
    run_jobs(js, 4);
    assert_int_equal(count_ok(js, 4), 4);
    kl_accel_get_stats(&b);
    assert_int_equal(b.busy - a.busy, 2);
    assert_settled();
}

static double answered_at[MAXJOBS];

static int on_timed_callback(void *arg)
{
    *(double *)arg = now_ms();
    atomic_fetch_add(&callbacks_all, 1);
    return 1;
}

/* poll_us=50000: answers leave only when the device looks (every 50 ms
 * of CLOCK_MONOTONIC), all of them together, not each at its 1 ms. */
static void test_poll(void **state)
{
    (void)state;
    ctl("latency_us=1000\nslots=64\npoll_us=50000\n");
    static sign_job js[8];
    fill(js, 8, ec_key, 0);
    atomic_store(&callbacks_all, 0);
    /* submitted 5-10 ms past a mark: all due (1 ms later) well before the
     * next one, so that the answers cannot straddle a mark */
    for (;;) {
        double t = now_ms();
        long long whole = (long long)t;
        double past = (double)(whole % 50) + (t - (double)whole);
        if (past >= 5.0 && past < 10.0)
            break;
        usleep(500);
    }
    double t0 = now_ms();
    for (size_t i = 0; i < 8; i++) {
        answered_at[i] = 0;
        js[i].wctx = ASYNC_WAIT_CTX_new();
        assert_non_null(js[i].wctx);
        assert_int_equal(ASYNC_WAIT_CTX_set_callback(
                             js[i].wctx, on_timed_callback, &answered_at[i]),
                         1);
        js[i].job = NULL;
        sign_job *arg = &js[i];
        int ret;
        assert_int_equal(ASYNC_start_job(&js[i].job, js[i].wctx, &ret, job_main,
                                         &arg, sizeof arg),
                         ASYNC_PAUSE);
    }
    while (atomic_load(&callbacks_all) < 8 && now_ms() < t0 + 5000)
        usleep(1000);
    assert_int_equal(atomic_load(&callbacks_all), 8);
    double first = answered_at[0], last = answered_at[0];
    for (size_t i = 0; i < 8; i++) {
        int ret;
        assert_int_equal(
            ASYNC_start_job(&js[i].job, js[i].wctx, &ret, job_main, NULL, 0),
            ASYNC_FINISH);
        ASYNC_WAIT_CTX_free(js[i].wctx);
        first = answered_at[i] < first ? answered_at[i] : first;
        last = answered_at[i] > last ? answered_at[i] : last;
    }
    assert_int_equal(count_ok(js, 8), 8);
    long long whole = (long long)first; /* past the last 50 ms mark */
    double past = (double)(whole % 50) + (first - (double)whole);
    printf("8 answers %.1f ms after the first submission, within %.2f ms; "
           "%.1f ms past a 50 ms mark\n",
           first - t0, last - first, past);
    assert_true(last - first < 5.0); /* one look, one batch */
    assert_true(past < 10.0);        /* at a look, not at 1 ms */
    /* at the next mark, 40-45 ms on: not at the 1 ms latency */
    assert_true(first - t0 >= 30.0 && first - t0 < 60.0);
    ctl("latency_us=1000\n");
    assert_settled();
}

/* A control file with a typo fails every operation, loudly. */
static void test_bad_ctl(void **state)
{
    (void)state;
    ctl("latency_us=1000\nslotz=3\n");
    sign_job s;
    fill(&s, 1, ec_key, 0);
    kl_accel_stats a, b;
    kl_accel_get_stats(&a);
    assert_false(sign_now(&s));
    kl_accel_get_stats(&b);
    assert_int_equal(b.bad_ctl - a.bad_ctl, 1);
    ctl("latency_us=1000\n");
    assert_true(sign_now(&s));
    assert_true(verifies(&s));
}

static EVP_PKEY *gen(const char *alg, const char *opt, const char *val)
{
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_name(lib, alg, "provider=default");
    EVP_PKEY *k = NULL;
    assert_non_null(c);
    assert_int_equal(EVP_PKEY_keygen_init(c), 1);
    OSSL_PARAM ps[] = {OSSL_PARAM_construct_end(), OSSL_PARAM_construct_end()};
    unsigned bits = 2048;
    if (!strcmp(alg, "EC"))
        ps[0] = OSSL_PARAM_construct_utf8_string(opt, (char *)val, 0);
    else
        ps[0] = OSSL_PARAM_construct_uint(opt, &bits);
    assert_int_equal(EVP_PKEY_CTX_set_params(c, ps), 1);
    assert_int_equal(EVP_PKEY_keygen(c, &k), 1);
    EVP_PKEY_CTX_free(c);
    return k;
}

static int setup(void **state)
{
    (void)state;
    snprintf(ctl_path, sizeof ctl_path, "/tmp/kl_accel_ctl.%d", (int)getpid());
    setenv("KL_ACCEL_CTL", ctl_path, 1);
    if (!(lib = OSSL_LIB_CTX_new()) ||
        !OSSL_PROVIDER_add_builtin(lib, KL_ACCEL_NAME,
                                   kl_accel_provider_init) ||
        !(accel_prov = OSSL_PROVIDER_load(lib, KL_ACCEL_NAME)) ||
        !(default_prov = OSSL_PROVIDER_load(lib, "default")))
        return -1;
    ec_key = gen("EC", "group", "P-256");
    rsa_key = gen("RSA", "bits", NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    EVP_PKEY_free(ec_key);
    EVP_PKEY_free(rsa_key);
    OSSL_PROVIDER_unload(accel_prov);
    OSSL_PROVIDER_unload(default_prov);
    OSSL_LIB_CTX_free(lib);
    unlink(ctl_path);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocking), cmocka_unit_test(test_async_parallel),
        cmocka_unit_test(test_slots),    cmocka_unit_test(test_software),
        cmocka_unit_test(test_fail),     cmocka_unit_test(test_lose),
        cmocka_unit_test(test_stopped),  cmocka_unit_test(test_memo),
        cmocka_unit_test(test_inline),   cmocka_unit_test(test_bad_ctl),
        cmocka_unit_test(test_callback), cmocka_unit_test(test_busy),
        cmocka_unit_test(test_poll),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
