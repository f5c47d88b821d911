/* SPDX-License-Identifier: Apache-2.0 */
/* crypto/async.h with the test accelerator (tests/accel): operations on
 * keys the accelerator holds pause and are resumed from an owner's poll
 * loop; many run at once on one thread; every signature verifies; the
 * bounds hold (max_jobs); a job past its deadline or abandoned is answered
 * early while the device still has it, its key held until the device
 * returns; fds and slots come back after many operations with faults; a
 * key of the default provider runs to completion without pausing.
 *
 * The tests that take a mode run twice: with the owner's wait fds only
 * (no wake function), and with a wake function, so that the provider's
 * completion callbacks are used (no fd at all, one wake-up per batch).
 * Then the callbacks' own cases: a batch is one wake-up, a provider that
 * asks to be resumed (ASYNC_STATUS_EAGAIN) is, and a callback after
 * kl_async_free reaches no owner. */
#include <dlfcn.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/provider.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>

#include "accel.h"
#include "accelctl.h"
#include "core/time.h"
#include "crypto/async.h"
#include "keys/keystore.h"

#define MAXW 512

static char ctl_path[256];
static EVP_PKEY *ec_pkey, *rsa_pkey;
static kl_keystore *ks;
static OSSL_PROVIDER *accel_prov, *default_prov;
static kl_accel_stats_fn accel_stats; /* the loaded module's */
static const kl_key *ec_key, *rsa_key;

/* the owner's poll set */
static struct {
    int fd;
    void *tag;
} watched[MAXW];
static size_t nwatched;
static unsigned holds, unholds;

/* callback mode: the owner's wake function and its eventfd */
static bool use_wake;
static int wake_fd = -1;
static atomic_uint wakes;

static void wake(void *arg)
{
    assert_ptr_equal(arg, &wake_fd);
    atomic_fetch_add(&wakes, 1);
    uint64_t one = 1;
    assert_int_equal(write(wake_fd, &one, sizeof one), sizeof one);
}

static int fd_mode(void **state)
{
    (void)state;
    use_wake = false;
    return 0;
}

static int wake_mode(void **state)
{
    (void)state;
    use_wake = true;
    return 0;
}

static void watch(void *arg, int fd, bool add, void *tag)
{
    (void)arg;
    if (add) {
        assert_true(nwatched < MAXW);
        watched[nwatched].fd = fd;
        watched[nwatched++].tag = tag;
        return;
    }
    for (size_t i = 0; i < nwatched; i++)
        if (watched[i].fd == fd && watched[i].tag == tag) {
            watched[i] = watched[--nwatched];
            return;
        }
    fail_msg("unwatch of an fd not watched");
}

typedef struct op {
    kl_job job;
    uint8_t dgst[32];
    uint8_t sig[512];
    bool done;
    _Atomic bool gone;
} op;

static unsigned done_count;

static void on_done(kl_job *j)
{
    op *o = (op *)j;
    assert_false(o->done); /* exactly once */
    o->done = true;
    done_count++;
}

static void *hold(const kl_job *j)
{
    (void)j;
    holds++;
    return &holds;
}

static void unhold(void *h)
{
    assert_ptr_equal(h, &holds);
    unholds++;
}

static void prepare(op *o, const kl_key *key, uint64_t deadline)
{
    memset(o, 0, sizeof *o);
    assert_int_equal(RAND_bytes(o->dgst, 32), 1);
    o->job.key = key;
    o->job.opcode = kl_key_get_type(key) == KL_KEY_EC
                        ? KL_OP_ECDSA_SIGN_SHA256
                        : KL_OP_RSA_PSS_SIGN_SHA256;
    o->job.in = o->dgst;
    o->job.in_len = 32;
    o->job.out = o->sig;
    o->job.out_cap = sizeof o->sig;
    o->job.deadline_ns = deadline;
    o->job.abandoned = &o->gone;
    o->job.done = on_done;
    o->job.key_hold = hold;
    o->job.key_unhold = unhold;
}

static bool verifies(const op *o)
{
    EVP_PKEY *pk = o->job.key == ec_key ? ec_pkey : rsa_pkey;
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_pkey(NULL, pk, "provider=default");
    int ok = c && EVP_PKEY_verify_init(c) == 1;
    if (ok && pk == rsa_pkey)
        ok = EVP_PKEY_CTX_set_signature_md(c, EVP_sha256()) == 1 &&
             EVP_PKEY_CTX_set_rsa_padding(c, RSA_PKCS1_PSS_PADDING) == 1 &&
             EVP_PKEY_CTX_set_rsa_pss_saltlen(c, RSA_PSS_SALTLEN_DIGEST) == 1;
    ok = ok && EVP_PKEY_verify(c, o->sig, o->job.out_len, o->dgst, 32) == 1;
    EVP_PKEY_CTX_free(c);
    return ok;
}

/* The owner's loop: until want callbacks came or timeout_ms passed. */
static void pump(kl_async *a, unsigned want, int timeout_ms)
{
    uint64_t end = kl_now_ns() + (uint64_t)timeout_ms * KL_NS_PER_MS;
    while (done_count < want && kl_now_ns() < end) {
        struct pollfd pf[MAXW + 1];
        void *tags[MAXW];
        size_t n = nwatched;
        for (size_t i = 0; i < n; i++) {
            pf[i] = (struct pollfd){.fd = watched[i].fd, .events = POLLIN};
            tags[i] = watched[i].tag;
        }
        pf[n] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
        int r = poll(pf, n + 1, 5);
        assert_true(r >= 0);
        for (size_t i = 0; i < n && r > 0; i++)
            if (pf[i].revents & POLLIN)
                kl_async_ready(a, tags[i]);
        if (pf[n].revents & POLLIN) {
            uint64_t v;
            assert_int_equal(read(wake_fd, &v, sizeof v), sizeof v);
            kl_async_poll(a);
        }
        /* the owner's timer (at most 5 ms apart here): retries, expiry */
        if (use_wake)
            kl_async_poll(a);
        kl_async_expire(a, kl_now_ns());
    }
}

static void ctl(const char *text)
{
    accel_ctl(ctl_path, text);
}

static kl_async *new_async(unsigned max)
{
    kl_async_opts o = {.max_jobs = max,
                       .watch = watch,
                       .wake = use_wake ? wake : NULL,
                       .arg = &wake_fd};
    kl_async *a = NULL;
    assert_int_equal(kl_async_new(&o, &a), KL_OK);
    done_count = holds = unholds = 0;
    atomic_store(&wakes, 0);
    uint64_t v; /* a wake-up an earlier test did not take */
    while (read(wake_fd, &v, sizeof v) == sizeof v)
        ;
    return a;
}

/* 64 operations at once on this thread, each paused on the device. */
static void test_many_at_once(void **state)
{
    (void)state;
    ctl("latency_us=20000\nslots=64\n");
    kl_async *a = new_async(64);
    static op ops[64];
    for (int i = 0; i < 64; i++) {
        prepare(&ops[i], i % 2 ? rsa_key : ec_key, 0);
        assert_int_equal(kl_async_start(a, &ops[i].job), KL_ASYNC_PAUSED);
    }
    assert_int_equal(kl_async_busy(a), 64);
    op extra;
    prepare(&extra, ec_key, 0);
    assert_int_equal(kl_async_start(a, &extra.job), KL_ASYNC_FULL);
    pump(a, 64, 5000);
    assert_int_equal(done_count, 64);
    for (int i = 0; i < 64; i++) {
        assert_int_equal(ops[i].job.err, KL_OK);
        assert_true(ops[i].job.started_ns > 0);
        assert_true(verifies(&ops[i]));
    }
    kl_async_stats st;
    kl_async_get_stats(a, &st);
    assert_int_equal(st.started, 64);
    assert_int_equal(st.paused, 64);
    assert_int_equal(st.full, 1);
    assert_int_equal(st.busy, 0);
    assert_int_equal(st.fds, nwatched);
    if (use_wake) { /* the provider called back: no fd, no spurious */
        assert_int_equal(st.fds, 0);
        assert_int_equal(st.resumed, 64);
        assert_int_equal(st.spurious, 0);
        assert_true(atomic_load(&wakes) >= 1 && atomic_load(&wakes) <= 64);
    } else {
        assert_true(st.fds <= 64); /* one eventfd per slot, kept */
        assert_true(st.fds >= 1);
        assert_int_equal(atomic_load(&wakes), 0);
    }
    kl_async_free(a);
    assert_int_equal(nwatched, 0);
    kl_accel_stats as;
    accel_stats(&as);
    assert_int_equal(as.open_fds, 0); /* the wait contexts closed them */
}

/* The device never answers one operation: it is answered at its deadline
 * (100 ms), its key held until the device gives up (timeout_ms 600). */
static void test_deadline(void **state)
{
    (void)state;
    ctl("latency_us=1000\ntimeout_ms=600\nlose=1\n");
    kl_async *a = new_async(8);
    op lost, ok;
    uint64_t t0 = kl_now_ns();
    prepare(&lost, ec_key, t0 + 100 * KL_NS_PER_MS);
    prepare(&ok, ec_key, t0 + 2000 * KL_NS_PER_MS);
    assert_int_equal(kl_async_start(a, &lost.job), KL_ASYNC_PAUSED);
    assert_int_equal(kl_async_start(a, &ok.job), KL_ASYNC_PAUSED);
    pump(a, 2, 3000);
    assert_true(lost.done && ok.done);
    assert_int_equal(ok.job.err, KL_OK);
    assert_true(verifies(&ok));
    assert_int_equal(lost.job.err, KL_E_INTERNAL);
    double took = (double)(kl_now_ns() - t0) / 1e6;
    assert_true(took >= 99.0 && took < 550.0);
    assert_int_equal(holds, 1);
    assert_int_equal(unholds, 0); /* the device still has it */
    assert_int_equal(kl_async_busy(a), 1);
    /* the device's timeout ends it: slot and key come back, no callback */
    uint64_t end = kl_now_ns() + 3000 * KL_NS_PER_MS;
    while (kl_async_busy(a) && kl_now_ns() < end)
        pump(a, 3, 20);
    assert_int_equal(kl_async_busy(a), 0);
    assert_int_equal(unholds, 1);
    assert_int_equal(done_count, 2);
    kl_async_free(a);
}

/* The client went away: answered at the next expiry pass. */
static void test_abandoned(void **state)
{
    (void)state;
    ctl("latency_us=300000\n");
    kl_async *a = new_async(4);
    op o;
    prepare(&o, rsa_key, 0);
    assert_int_equal(kl_async_start(a, &o.job), KL_ASYNC_PAUSED);
    atomic_store(&o.gone, true);
    assert_int_equal(kl_async_expire(a, kl_now_ns()), 1);
    assert_true(o.done);
    assert_int_equal(o.job.err, KL_E_INTERNAL);
    while (kl_async_busy(a))
        pump(a, 2, 20);
    assert_int_equal(unholds, 1);
    /* abandoned before it started: not run at all */
    op o2;
    prepare(&o2, rsa_key, 0);
    atomic_store(&o2.gone, true);
    assert_int_equal(kl_async_start(a, &o2.job), KL_ASYNC_DONE);
    assert_int_equal(o2.job.err, KL_E_INTERNAL);
    assert_int_equal(o2.job.started_ns, 0);
    kl_async_free(a);
}

/* 3,000 operations with device errors mixed in: every one answered once,
 * errors where the device failed, nothing left open. */
static void test_no_leak(void **state)
{
    (void)state;
    ctl("latency_us=100\nslots=32\nfail=200\nmemo=1\n");
    kl_async *a = new_async(32);
    static op ops[32];
    unsigned total = 0, errors = 0, answered = 0;
    kl_accel_stats before;
    accel_stats(&before);
    while (total < 3000) {
        done_count = 0;
        for (int i = 0; i < 32; i++) {
            prepare(&ops[i], ec_key, 0);
            memset(ops[i].dgst, i, 32); /* memo: no CPU for the device */
            kl_async_result r = kl_async_start(a, &ops[i].job);
            assert_int_equal(r, KL_ASYNC_PAUSED);
        }
        pump(a, 32, 5000);
        assert_int_equal(done_count, 32);
        for (int i = 0; i < 32; i++) {
            answered++;
            if (ops[i].job.err != KL_OK)
                errors++;
            else
                assert_true(verifies(&ops[i]));
        }
        total += 32;
    }
    assert_int_equal(answered, total);
    assert_int_equal(errors, 200);
    kl_async_stats st;
    kl_async_get_stats(a, &st);
    assert_int_equal(st.busy, 0);
    assert_true(st.fds <= (use_wake ? 0 : 32));
    kl_async_free(a);
    kl_accel_stats after;
    accel_stats(&after);
    assert_int_equal(after.open_fds, 0);
    assert_int_equal(after.in_flight, 0);
}

/* Callbacks: 64 operations the device finishes while the owner does not
 * look make one wake-up, and one kl_async_poll resumes them all. */
static void test_callback_batch(void **state)
{
    (void)state;
    ctl("latency_us=20000\nslots=64\n");
    kl_async *a = new_async(64);
    static op ops[64];
    for (int i = 0; i < 64; i++) {
        prepare(&ops[i], ec_key, 0);
        assert_int_equal(kl_async_start(a, &ops[i].job), KL_ASYNC_PAUSED);
    }
    assert_int_equal(nwatched, 0); /* nothing in the poll set */
    /* the device answers all 64 after 20 ms; the owner sleeps through */
    kl_accel_stats as;
    uint64_t end = kl_now_ns() + 5000 * KL_NS_PER_MS;
    do {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
        accel_stats(&as);
    } while (as.in_flight && kl_now_ns() < end);
    assert_int_equal(as.in_flight, 0);
    assert_int_equal(done_count, 0); /* nothing answered before the poll */
    assert_int_equal(atomic_load(&wakes), 1);
    assert_int_equal(kl_async_poll(a), 64);
    assert_int_equal(done_count, 64);
    for (int i = 0; i < 64; i++) {
        assert_int_equal(ops[i].job.err, KL_OK);
        assert_true(verifies(&ops[i]));
    }
    assert_int_equal(kl_async_poll(a), 0);
    kl_async_stats st;
    kl_async_get_stats(a, &st);
    assert_int_equal(st.resumed, 64);
    assert_int_equal(st.busy, 0);
    uint64_t v;
    assert_int_equal(read(wake_fd, &v, sizeof v), sizeof v);
    assert_int_equal(v, 1);
    kl_async_free(a);
}

/* The device's queue is full for the next 5 submissions: the provider
 * pauses asking to be resumed (EAGAIN with callbacks, a readable fd
 * without), tries again, and every operation is answered and verifies. */
static void test_device_busy(void **state)
{
    (void)state;
    ctl("latency_us=2000\nslots=64\nbusy=5\n");
    kl_async *a = new_async(16);
    static op ops[16];
    kl_accel_stats before, after;
    accel_stats(&before);
    for (int i = 0; i < 16; i++) {
        prepare(&ops[i], i % 2 ? rsa_key : ec_key, 0);
        assert_int_equal(kl_async_start(a, &ops[i].job), KL_ASYNC_PAUSED);
    }
    pump(a, 16, 5000);
    assert_int_equal(done_count, 16);
    for (int i = 0; i < 16; i++) {
        assert_int_equal(ops[i].job.err, KL_OK);
        assert_true(verifies(&ops[i]));
    }
    accel_stats(&after);
    assert_int_equal(after.busy - before.busy, 5);
    assert_int_equal(after.submitted - before.submitted, 16);
    kl_async_stats st;
    kl_async_get_stats(a, &st);
    assert_int_equal(st.retried, use_wake ? 5 : 0);
    assert_int_equal(st.busy, 0);
    kl_async_free(a);
}

/* A device that refuses for long (busy=100000): the operation is retried
 * at the next turn a few times, then only at the owner's polls (its
 * timer) - not in a spin - and answered at its deadline; once the device
 * takes it, the slot comes back. */
static void test_busy_no_spin(void **state)
{
    (void)state;
    ctl("latency_us=1000\nslots=64\nbusy=100000\n");
    kl_async *a = new_async(4);
    static op o;
    uint64_t t0 = kl_now_ns();
    prepare(&o, ec_key, t0 + 200 * KL_NS_PER_MS);
    assert_int_equal(kl_async_start(a, &o.job), KL_ASYNC_PAUSED);
    pump(a, 1, 2000);
    assert_true(o.done);
    assert_int_equal(o.job.err, KL_E_INTERNAL); /* its deadline */
    uint64_t until = kl_now_ns() + 100 * KL_NS_PER_MS;
    while (kl_now_ns() < until)
        pump(a, 2, 10); /* 300 ms in all, still refused */
    kl_async_stats st;
    kl_async_get_stats(a, &st);
    printf("300 ms of a device refusing: %llu retries\n",
           (unsigned long long)st.retried);
    /* 8 at once, then one per poll of the owner (every <= 5 ms here); a
     * spin would be tens of thousands */
    assert_true(st.retried >= KL_ASYNC_FAST_RETRIES + 10);
    assert_true(st.retried < KL_ASYNC_FAST_RETRIES + 300 / 5 + 40);
    assert_int_equal(st.busy, 1);
    ctl("latency_us=1000\nslots=64\n"); /* the device takes it now */
    until = kl_now_ns() + 2000 * KL_NS_PER_MS;
    while (kl_async_busy(a) && kl_now_ns() < until)
        pump(a, 2, 10);
    assert_int_equal(kl_async_busy(a), 0);
    assert_int_equal(unholds, holds);
    kl_async_free(a);
}

/* A job left behind at kl_async_free (the device lost it): the device's
 * later callback finds its owner closed and wakes nobody. */
static kl_async *left_behind;

static void test_callback_after_free(void **state)
{
    (void)state;
    ctl("latency_us=1000\ntimeout_ms=200\nlose=1\n");
    kl_accel_stats before, after;
    accel_stats(&before);
    kl_async *a = new_async(4);
    static op o;
    prepare(&o, ec_key, 0);
    assert_int_equal(kl_async_start(a, &o.job), KL_ASYNC_PAUSED);
    kl_async_free(a); /* left behind: the process would be stopping */
    left_behind = a;  /* still reachable: not a leak to LeakSanitizer */
    uint64_t end = kl_now_ns() + 3000 * KL_NS_PER_MS;
    do {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
        accel_stats(&after);
    } while (after.timed_out == before.timed_out && kl_now_ns() < end);
    assert_int_equal(after.timed_out - before.timed_out, 1);
    assert_int_equal(atomic_load(&wakes), 0);
    assert_false(o.done);
}

static void pick(void *arg, const kl_key *k)
{
    *(const kl_key **)arg = k;
}

/* A key the default provider signs: the job runs to its end at once. */
static void test_software_key(void **state)
{
    (void)state;
    EVP_PKEY *pk = NULL;
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_name(NULL, "ED25519", NULL);
    assert_int_equal(EVP_PKEY_keygen_init(c), 1);
    assert_int_equal(EVP_PKEY_keygen(c, &pk), 1);
    EVP_PKEY_CTX_free(c);
    kl_keystore *k2 = kl_keystore_new(&(kl_keystore_opts){0});
    assert_int_equal(kl_keystore_add_pkey(k2, pk, "ed25519"), KL_OK);
    const kl_key *key = NULL;
    kl_async *a = new_async(4);
    op o;
    prepare(&o, ec_key, 0);
    kl_keystore_foreach(k2, pick, &key);
    o.job.key = key;
    o.job.opcode = KL_OP_ED25519_SIGN;
    kl_accel_stats b, e;
    accel_stats(&b);
    assert_int_equal(kl_async_start(a, &o.job), KL_ASYNC_DONE);
    accel_stats(&e);
    assert_int_equal(e.submitted, b.submitted);
    assert_int_equal(o.job.err, KL_OK);
    assert_int_equal(o.job.out_len, 64);
    EVP_MD_CTX *m = EVP_MD_CTX_new();
    assert_int_equal(EVP_DigestVerifyInit(m, NULL, NULL, NULL, pk), 1);
    assert_int_equal(EVP_DigestVerify(m, o.sig, 64, o.dgst, 32), 1);
    EVP_MD_CTX_free(m);
    kl_async_free(a);
    kl_keystore_free(k2);
    EVP_PKEY_free(pk);
}

static void collect(void *arg, const kl_key *k)
{
    (void)arg;
    if (kl_key_get_type(k) == KL_KEY_EC)
        ec_key = k;
    else
        rsa_key = k;
}

static EVP_PKEY *gen(const char *alg)
{
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_name(NULL, alg, "provider=default");
    EVP_PKEY *k = NULL;
    assert_int_equal(EVP_PKEY_keygen_init(c), 1);
    if (!strcmp(alg, "EC"))
        assert_int_equal(EVP_PKEY_CTX_set_group_name(c, "P-256"), 1);
    else
        assert_int_equal(EVP_PKEY_CTX_set_rsa_keygen_bits(c, 2048), 1);
    assert_int_equal(EVP_PKEY_keygen(c, &k), 1);
    EVP_PKEY_CTX_free(c);
    return k;
}

static int setup(void **state)
{
    (void)state;
    snprintf(ctl_path, sizeof ctl_path, "/tmp/kl_accel_ctl.%d", (int)getpid());
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd < 0)
        return -1;
    setenv("KL_ACCEL_CTL", ctl_path, 1);
    /* keylessd's process: the accelerator preferred by default properties
     * (as an openssl.cnf would say), the default provider beside it */
    const char *mod = getenv("KL_ACCEL");
    if (!mod || !(accel_prov = OSSL_PROVIDER_load(NULL, mod)) ||
        !(default_prov = OSSL_PROVIDER_load(NULL, "default")) ||
        !EVP_set_default_properties(NULL, "?provider=" KL_ACCEL_NAME))
        return -1;
    void *h = dlopen(mod, RTLD_NOW | RTLD_NOLOAD);
    if (!h || !(accel_stats = (kl_accel_stats_fn)dlsym(h, KL_ACCEL_STATS_FN)))
        return -1;
    dlclose(h); /* the provider keeps it loaded */
    ec_pkey = gen("EC");
    rsa_pkey = gen("RSA");
    ks = kl_keystore_new(&(kl_keystore_opts){0});
    if (kl_keystore_add_pkey(ks, ec_pkey, "ec") != KL_OK ||
        kl_keystore_add_pkey(ks, rsa_pkey, "rsa") != KL_OK)
        return -1;
    kl_keystore_foreach(ks, collect, NULL);
    return ec_key && rsa_key ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    kl_keystore_free(ks);
    EVP_PKEY_free(ec_pkey);
    EVP_PKEY_free(rsa_pkey);
    OSSL_PROVIDER_unload(accel_prov);
    OSSL_PROVIDER_unload(default_prov);
    unlink(ctl_path);
    close(wake_fd);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_many_at_once, fd_mode),
        cmocka_unit_test_setup(test_many_at_once, wake_mode),
        cmocka_unit_test_setup(test_deadline, fd_mode),
        cmocka_unit_test_setup(test_deadline, wake_mode),
        cmocka_unit_test_setup(test_abandoned, fd_mode),
        cmocka_unit_test_setup(test_abandoned, wake_mode),
        cmocka_unit_test_setup(test_no_leak, fd_mode),
        cmocka_unit_test_setup(test_no_leak, wake_mode),
        cmocka_unit_test_setup(test_device_busy, fd_mode),
        cmocka_unit_test_setup(test_device_busy, wake_mode),
        cmocka_unit_test_setup(test_callback_batch, wake_mode),
        cmocka_unit_test_setup(test_busy_no_spin, wake_mode),
        cmocka_unit_test_setup(test_callback_after_free, wake_mode),
        cmocka_unit_test_setup(test_software_key, fd_mode),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
