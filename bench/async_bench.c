/* SPDX-License-Identifier: Apache-2.0 */
/* The host's CPU per accelerator operation in keylessd's ASYNC layer
 * (src/crypto/async.c; docs/DESIGN.md "Accelerators: ASYNC jobs") without
 * the network: one owner thread keeps IN_FLIGHT ECDSA P-256 signatures on
 * the test accelerator (tests/accel, 1 ms x 64 slots, memo=1: the device
 * thread does no crypto) and starts a new one as each is answered, as a
 * shard does. Its own thread's CPU time per operation is the layer's cost:
 * starting the ASYNC job, the provider's submission and pause, the
 * completion (callback and kl_async_poll, or the eventfd and
 * kl_async_ready), the resumption and the answer's copy. "bare ASYNC" is
 * the floor: an ASYNC job that pauses once and finishes, nothing else.
 * "inline" is the same operation with the device answering in the job at
 * once from memo (inline=1): the EVP call into the provider and the
 * slot's bookkeeping, no pause - what the pause and completion add to is.
 *
 *   KL_ACCEL=build/kl_accel.so build/async_bench [runs [in_flight]]
 *
 * Modes alternate run by run; medians are printed as a Markdown table
 * (bench/RESULTS.md "Accelerators: completion callbacks"). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <openssl/async.h>
#include <openssl/evp.h>
#include <openssl/provider.h>

#include "core/time.h"
#include "crypto/async.h"
#include "keys/keystore.h"

#define MAX_IN_FLIGHT 1024
#define MAX_RUNS 31
#define RUN_NS (2 * KL_NS_PER_S)

typedef struct op {
    kl_job job;
    uint8_t dgst[32];
    uint8_t sig[128];
} op;

static op ops[MAX_IN_FLIGHT];
static kl_async *async;
static const kl_key *ec_key;
static int wake_fd = -1;
static unsigned long answered, failed;
static bool refill;
static struct {
    int fd;
    void *tag;
} watched[MAX_IN_FLIGHT];
static size_t nwatched;

static void start(op *o);

static void on_done(kl_job *j)
{
    answered++;
    failed += j->err != KL_OK;
    if (refill)
        start((op *)j);
}

/* An ECDSA P-256 signature of o's digest, answered to on_done. */
static void prepare(op *o)
{
    memset(&o->job, 0, sizeof o->job);
    o->job.key = ec_key;
    o->job.opcode = KL_OP_ECDSA_SIGN_SHA256;
    o->job.in = o->dgst;
    o->job.in_len = sizeof o->dgst;
    o->job.out = o->sig;
    o->job.out_cap = sizeof o->sig;
    o->job.done = on_done;
}

static void start(op *o)
{
    prepare(o);
    if (kl_async_start(async, &o->job) != KL_ASYNC_PAUSED) {
        fprintf(stderr, "async_bench: an operation did not pause\n");
        exit(1);
    }
}

static void wake(void *arg)
{
    (void)arg;
    uint64_t one = 1;
    (void)!write(wake_fd, &one, sizeof one);
}

static void watch(void *arg, int fd, bool add, void *tag)
{
    (void)arg;
    if (add) {
        watched[nwatched].fd = fd;
        watched[nwatched++].tag = tag;
        return;
    }
    for (size_t i = 0; i < nwatched; i++)
        if (watched[i].fd == fd && watched[i].tag == tag) {
            watched[i] = watched[--nwatched];
            return;
        }
}

static double thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* One owner loop for RUN_NS after a warm-up; ns of its CPU per answer. */
static double run_layer(bool callbacks, unsigned in_flight)
{
    kl_async_opts o = {
        .max_jobs = in_flight, .watch = watch, .wake = callbacks ? wake : NULL};
    if (kl_async_new(&o, &async) != KL_OK) {
        fprintf(stderr, "async_bench: kl_async_new failed\n");
        exit(1);
    }
    answered = failed = 0;
    refill = true;
    for (unsigned i = 0; i < in_flight; i++) {
        memset(ops[i].dgst, (int)(i % 64), sizeof ops[i].dgst);
        start(&ops[i]);
    }
    uint64_t t0 = kl_now_ns(), measure_at = t0 + KL_NS_PER_S / 2;
    double cpu0 = 0;
    unsigned long n0 = 0;
    bool measuring = false;
    for (;;) {
        uint64_t now = kl_now_ns();
        if (!measuring && now >= measure_at) {
            measuring = true;
            cpu0 = thread_cpu_ns();
            n0 = answered;
        }
        if (measuring && now >= measure_at + RUN_NS)
            break;
        struct pollfd pf[MAX_IN_FLIGHT + 1];
        void *tags[MAX_IN_FLIGHT];
        size_t n = 0;
        if (!callbacks)
            for (; n < nwatched; n++) {
                pf[n] = (struct pollfd){.fd = watched[n].fd, .events = POLLIN};
                tags[n] = watched[n].tag;
            }
        pf[n] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
        if (poll(pf, n + 1, 100) < 0)
            continue;
        for (size_t i = 0; i < n; i++)
            if (pf[i].revents & POLLIN)
                kl_async_ready(async, tags[i]);
        if (pf[n].revents & POLLIN) {
            uint64_t v;
            (void)!read(wake_fd, &v, sizeof v);
            kl_async_poll(async);
        }
    }
    double per_op = (thread_cpu_ns() - cpu0) / (double)(answered - n0);
    /* let the rest finish, then free */
    refill = false;
    uint64_t end = kl_now_ns() + 5 * KL_NS_PER_S;
    while (kl_async_busy(async) && kl_now_ns() < end) {
        struct pollfd pf = {.fd = wake_fd, .events = POLLIN};
        for (size_t i = 0; i < nwatched; i++) {
            struct pollfd w = {.fd = watched[i].fd, .events = POLLIN};
            if (poll(&w, 1, 0) > 0)
                kl_async_ready(async, watched[i].tag);
        }
        if (poll(&pf, 1, 1) > 0) {
            uint64_t v;
            (void)!read(wake_fd, &v, sizeof v);
            kl_async_poll(async);
        }
    }
    kl_async_free(async);
    if (failed) {
        fprintf(stderr, "async_bench: %lu operations failed\n", failed);
        exit(1);
    }
    return per_op;
}

static void set_device(const char *ctl, const char *text)
{
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%s.tmp", ctl);
    FILE *f = fopen(tmp, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmp, ctl) != 0) {
        fprintf(stderr, "async_bench: cannot write %s\n", ctl);
        exit(1);
    }
    /* the provider looks at the file at most every 50 ms */
    nanosleep(&(struct timespec){.tv_nsec = 60 * 1000 * 1000}, NULL);
}

/* Operations answered without a pause, one after another; ns each. */
static double run_inline(const char *ctl)
{
    set_device(ctl, "latency_us=1000\nslots=64\nmemo=1\ninline=1\n");
    kl_async_opts o = {.max_jobs = 1, .watch = watch, .wake = wake};
    if (kl_async_new(&o, &async) != KL_OK)
        exit(1);
    double cpu0 = 0;
    unsigned long n = 0;
    uint64_t t0 = kl_now_ns(), measure_at = t0 + KL_NS_PER_S / 2;
    bool measuring = false;
    for (unsigned i = 0;; i++) {
        if ((i & 63) == 0) {
            uint64_t now = kl_now_ns();
            if (!measuring && now >= measure_at) {
                measuring = true;
                cpu0 = thread_cpu_ns();
                n = 0;
            }
            if (measuring && now >= measure_at + RUN_NS)
                break;
        }
        op *x = &ops[i % 64];
        memset(x->dgst, (int)(i % 64), sizeof x->dgst);
        prepare(x);
        if (kl_async_start(async, &x->job) != KL_ASYNC_DONE ||
            x->job.err != KL_OK) {
            fprintf(stderr, "async_bench: an inline operation paused or "
                            "failed\n");
            exit(1);
        }
        n++;
    }
    double per = (thread_cpu_ns() - cpu0) / (double)n;
    kl_async_free(async);
    set_device(ctl, "latency_us=1000\nslots=64\nmemo=1\n");
    return per;
}

static int pause_once(void *arg)
{
    (void)arg;
    ASYNC_pause_job();
    return 0;
}

/* The floor: in_flight ASYNC jobs started (each pauses) and resumed (each
 * finishes), round after round; ns per job. */
static double run_bare(unsigned in_flight)
{
    static ASYNC_JOB *jobs[MAX_IN_FLIGHT];
    static ASYNC_WAIT_CTX *w[MAX_IN_FLIGHT];
    if (!ASYNC_init_thread(in_flight, in_flight))
        exit(1);
    for (unsigned i = 0; i < in_flight; i++) {
        jobs[i] = NULL;
        if (!(w[i] = ASYNC_WAIT_CTX_new()))
            exit(1);
    }
    double cpu0 = 0;
    int ret;
    const int rounds = 400, warm = 40;
    for (int r = 0; r < rounds + warm; r++) {
        if (r == warm)
            cpu0 = thread_cpu_ns();
        for (unsigned i = 0; i < in_flight; i++)
            ASYNC_start_job(&jobs[i], w[i], &ret, pause_once, NULL, 0);
        for (unsigned i = 0; i < in_flight; i++)
            ASYNC_start_job(&jobs[i], w[i], &ret, pause_once, NULL, 0);
    }
    double per = (thread_cpu_ns() - cpu0) / rounds / in_flight;
    for (unsigned i = 0; i < in_flight; i++)
        ASYNC_WAIT_CTX_free(w[i]);
    ASYNC_cleanup_thread();
    return per;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

static void pick(void *arg, const kl_key *k)
{
    (void)arg;
    if (kl_key_get_type(k) == KL_KEY_EC)
        ec_key = k;
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 5;
    unsigned in_flight = argc > 2 ? (unsigned)atoi(argv[2]) : 256;
    const char *module = getenv("KL_ACCEL");
    if (runs < 1 || runs > MAX_RUNS || in_flight < 1 ||
        in_flight > MAX_IN_FLIGHT || !module) {
        fprintf(stderr,
                "usage: KL_ACCEL=kl_accel.so async_bench [runs (1-%d) "
                "[in_flight (1-%d)]]\n",
                MAX_RUNS, MAX_IN_FLIGHT);
        return 2;
    }
    /* the device: 1 ms x 64 slots, answers from memo */
    char ctl[] = "/tmp/kl-async-bench.XXXXXX";
    int cfd = mkstemp(ctl);
    static const char text[] = "latency_us=1000\nslots=64\nmemo=1\n";
    if (cfd < 0 || write(cfd, text, sizeof text - 1) != sizeof text - 1)
        return 1;
    close(cfd);
    setenv("KL_ACCEL_CTL", ctl, 1);
    if (!OSSL_PROVIDER_load(NULL, module) ||
        !OSSL_PROVIDER_load(NULL, "default") ||
        !EVP_set_default_properties(NULL, "?provider=kl_accel")) {
        fprintf(stderr, "async_bench: cannot load %s\n", module);
        return 1;
    }
    EVP_PKEY *pk = EVP_PKEY_Q_keygen(NULL, "provider=default", "EC", "P-256");
    kl_keystore *ks = kl_keystore_new(&(kl_keystore_opts){0});
    if (!pk || !ks || kl_keystore_add_pkey(ks, pk, "ec") != KL_OK)
        return 1;
    kl_keystore_foreach(ks, pick, NULL);
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!ec_key || wake_fd < 0)
        return 1;

    double cb[MAX_RUNS], fd[MAX_RUNS], bare[MAX_RUNS], inl[MAX_RUNS];
    for (int r = 0; r < runs; r++) {
        cb[r] = run_layer(true, in_flight);
        fd[r] = run_layer(false, in_flight);
        bare[r] = run_bare(in_flight);
        inl[r] = run_inline(ctl);
        fprintf(stderr,
                "run %d: callback %.0f ns, fd %.0f ns, bare %.0f ns, "
                "inline %.0f ns\n",
                r + 1, cb[r], fd[r], bare[r], inl[r]);
    }
    printf("%u in flight on one owner thread, medians of %d runs; "
           "owner's CPU per operation:\n\n",
           in_flight, runs);
    printf("| completion | ns per operation |\n|---|---:|\n");
    printf("| callback (kl_async_poll) | %.0f |\n", median(cb, runs));
    printf("| eventfd (kl_async_ready) | %.0f |\n", median(fd, runs));
    printf("| bare ASYNC job, pause once | %.0f |\n", median(bare, runs));
    printf("| inline (device answers at once, no pause) | %.0f |\n",
           median(inl, runs));
    unlink(ctl);
    kl_keystore_free(ks);
    EVP_PKEY_free(pk);
    return 0;
}
