/* SPDX-License-Identifier: Apache-2.0 */
/* Overload control with RSA-2048 (shedding is cheap next to the
 * work): capacity is measured first with the same client in the same run
 * (closed loop, 64 deep, 3 s), then 3x that is offered open loop for
 * KL_OVERLOAD_SECONDS (10 s in CI; `make overload` runs 30 s) with a
 * client budget of 250 ms and max_queue_time 200 ms on the server (one
 * worker, pinned to a CPU of its own; the shard and this client share
 * another):
 * - goodput (signatures) stays >= 90% of capacity;
 * - every request is answered by the server (result or error) within its
 *   server deadline + 50 ms: none times out at the client;
 * - the server's memory stays bounded;
 * - normal latency returns within 1 s after the overload stops. */
#include "test_abuse_common.h"

#include "client/verify.h"

#include <dirent.h>
#include <sched.h>

#define BUDGET_MS 250
#define SERVER_DEADLINE_MS 200

static td_daemon d;
static char *dir;
static EVP_PKEY *rsa_pub;
static uint8_t rsa_ski[20];
static kl_target *tg;
static const uint8_t digest[32] = {0x01, 0x02, 0x03};

typedef struct tally {
    bool closed_loop; /* resubmit on every completion */
    bool running;
    uint64_t submitted, ok, shed, other_err, timeouts, failed;
    uint64_t shed_late; /* shed after waiting half the server deadline */
    double max_ms;
    double max_stall_ms; /* longest gap between two turns of the client */
} tally;

static kl_request_spec spec(void)
{
    kl_request_spec s = {.opcode = KL_OP_RSA_SIGN_SHA256,
                         .payload = digest,
                         .payload_len = sizeof digest,
                         .ski = rsa_ski};
    return s;
}

static void on_result(void *arg, const kl_result *r);

static void submit(tally *t)
{
    kl_request_spec s = spec();
    assert_int_equal(kl_async_submit(tg, &s, BUDGET_MS, on_result, t, NULL),
                     KL_OK);
    t->submitted++;
}

static void on_result(void *arg, const kl_result *r)
{
    tally *t = arg;
    double ms = (double)r->elapsed_ns / 1e6;
    if (ms > t->max_ms)
        t->max_ms = ms;
    if (r->status == KL_E_TIMEOUT)
        t->timeouts++;
    else if (r->status != KL_OK)
        t->failed++;
    else if (r->opcode == KL_OP_RESPONSE)
        t->ok++;
    else if (r->opcode == KL_OP_ERROR && r->error == KL_ERR_INTERNAL) {
        t->shed++;
        t->shed_late += ms > SERVER_DEADLINE_MS / 2;
    } else
        t->other_err++;
    if (t->closed_loop && t->running)
        submit(t);
}

/* Runs the target for ms milliseconds; rate > 0: submits open loop at
 * that many requests per second. */
static void drive(tally *t, double ms, double rate)
{
    int fd = kl_async_fd(tg);
    assert_true(fd >= 0);
    double t0 = td_now_ms(), end = t0 + ms;
    uint64_t due_base = t->submitted;
    double prev = t0;
    for (double now = t0; now < end; now = td_now_ms()) {
        if (now - prev > t->max_stall_ms)
            t->max_stall_ms = now - prev;
        prev = now;
        if (rate > 0) {
            uint64_t due = due_base + (uint64_t)((now - t0) * rate / 1000.0);
            while (t->submitted < due)
                submit(t);
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        (void)poll(&p, 1, 1);
        assert_int_equal(kl_async_process(tg), KL_OK);
    }
}

/* Lets everything in flight complete (bounded by the budget). */
static void settle(tally *t)
{
    t->running = false;
    double until = td_now_ms() + BUDGET_MS + 500;
    int fd = kl_async_fd(tg);
    while (td_now_ms() < until) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        (void)poll(&p, 1, 5);
        assert_int_equal(kl_async_process(tg), KL_OK);
        if (t->ok + t->shed + t->other_err + t->timeouts + t->failed ==
            t->submitted)
            return;
    }
}

static double call_ms(void)
{
    kl_request_spec s = spec();
    kl_client_result r;
    double t0 = td_now_ms();
    assert_int_equal(kl_target_call(tg, &s, 2000, &r), KL_OK);
    double ms = td_now_ms() - t0;
    bool ok = r.opcode == KL_OP_RESPONSE;
    kl_client_result_free(&r);
    return ok ? ms : 1e9;
}

/* Closed loop, 64 deep, 3 s after a 0.5 s warm-up: signatures a second,
 * and the server's CPU time per signature (ms) in *cpu_per_sig. */
static double measure_capacity(double *cpu_per_sig)
{
    tally cap = {.closed_loop = true, .running = true};
    for (int i = 0; i < 64; i++)
        submit(&cap);
    drive(&cap, 500, 0);
    uint64_t warm = cap.ok;
    double cpu0 = ha_cpu_ms(d.pid);
    drive(&cap, 3000, 0);
    double cpu1 = ha_cpu_ms(d.pid);
    double capacity = (double)(cap.ok - warm) / 3.0;
    *cpu_per_sig = (cpu1 - cpu0) / (double)(cap.ok - warm);
    settle(&cap);
    assert_true(capacity > 50);
    assert_int_equal(cap.failed + cap.other_err, 0);
    if (cap.timeouts || cap.shed)
        print_message("(capacity phase: %llu shed, %llu timed out: the "
                      "machine is slow or busy)\n",
                      (unsigned long long)cap.shed,
                      (unsigned long long)cap.timeouts);
    if (!HA_ASAN)
        assert_int_equal(cap.timeouts, 0);
    return capacity;
}

static bool pinned;

/* The n-th CPU this process may use, -1 when it may use fewer than 2. */
static int allowed_cpu(int n)
{
    cpu_set_t all;
    if (sched_getaffinity(0, sizeof all, &all) != 0 || CPU_COUNT(&all) < 2)
        return -1;
    for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &all) && seen++ == n)
            return cpu;
    return -1;
}

static bool pin(pid_t tid, int cpu)
{
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return sched_setaffinity(tid, sizeof one, &one) == 0;
}

/* keylessd's worker alone on one CPU; its other threads (the shard) and
 * this client on another. */
static bool pin_apart(pid_t pid)
{
    int wcpu = allowed_cpu(0), ocpu = allowed_cpu(1);
    if (wcpu < 0 || ocpu < 0)
        return false;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *tasks = opendir(path);
    if (!tasks)
        return false;
    bool ok = true;
    unsigned workers = 0;
    struct dirent *e;
    while ((e = readdir(tasks)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char cpath[400], comm[32] = "";
        snprintf(cpath, sizeof cpath, "%s/%s/comm", path, e->d_name);
        FILE *f = fopen(cpath, "r");
        if (f) {
            if (!fgets(comm, sizeof comm, f))
                comm[0] = 0;
            fclose(f);
        }
        bool worker = strncmp(comm, "kl-worker", 9) == 0;
        workers += worker;
        ok &= pin((pid_t)atoi(e->d_name), worker ? wcpu : ocpu);
    }
    closedir(tasks);
    return ok && workers == 1 && pin(0, ocpu);
}

static int setup(void **state)
{
    static char mqt[64];
    static const char *extra[4];
    snprintf(mqt, sizeof mqt, "--max-queue-time=%dms", SERVER_DEADLINE_MS);
    extra[0] = mqt;
    extra[1] = "--max-inflight-per-conn=65536";
    dir = tp_tempdir("overload");
    tp_copy_key(dir, tp_path("keys/rsa-2048.key"));
    rsa_pub = tp_load_pub(tp_path("pubkeys/rsa-2048.pem"));
    tp_ski(rsa_pub, rsa_ski);
    /* One worker and one shard. The worker gets a core of its own; the
     * shard shares the other with the load generator (this process).
     * Unpinned, the client's 3x work under overload takes CPU from the
     * worker that it did not take while capacity was measured, and raw
     * goodput measures the scheduler (bench/RESULTS.md "Overload"). */
    td_opts o = {.name = "overload",
                 .key_dirs = dir,
                 .extra = extra,
                 .shards = 1,
                 .workers = 1};
    td_start(&d, &o);
    pinned = pin_apart(d.pid);
    const td_daemon *ds[] = {&d};
    kl_target_opts over = {.max_inflight = 65536, .retry_budget_pct = -1};
    tg = td_target(ds, 1, &over);
    return 0;
}

static int teardown(void **state)
{
    kl_target_free(tg);
    int st = td_stop(&d, 0);
    EVP_PKEY_free(rsa_pub);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

static void test_overload(void **state)
{
    const char *env = getenv("KL_OVERLOAD_SECONDS");
    int secs = env && atoi(env) > 0 ? atoi(env) : 10;

    /* normal latency, one request at a time */
    double base[50];
    for (int i = 0; i < 50; i++)
        base[i] = call_ms();
    double base_p50 = ha_quantile(base, 50, 0.5);

    double cap_cpu;
    double capacity = measure_capacity(&cap_cpu);
    print_message("%s\n",
                  pinned ? "keylessd's worker pinned to one CPU, its shard "
                           "and this client to another"
                         : "not pinned (fewer than 2 CPUs)");
    print_message("capacity: %.0f RSA-2048 signatures/s (closed loop, 64 "
                  "deep), server CPU %.3f ms per signature; one at a time "
                  "p50 %.2f ms\n",
                  capacity, cap_cpu, base_p50);

    /* 3x capacity, open loop */
    long rss0 = ha_rss_kb(d.pid);
    tally ov = {.running = true};
    double cpu0 = ha_cpu_ms(d.pid);
    drive(&ov, 1000.0 * secs, 3 * capacity);
    double stopped = td_now_ms();
    double ov_cpu_ms = ha_cpu_ms(d.pid) - cpu0;
    uint64_t ok_during = ov.ok;
    long rss1 = ha_rss_kb(d.pid);
    settle(&ov);
    double goodput = (double)ok_during / secs;
    print_message("offered %.0f/s for %d s: %llu submitted, %llu signed "
                  "(goodput %.0f/s = %.0f%% of capacity), %llu shed (%llu "
                  "of them after %d ms or more), %llu "
                  "timed out at the client, %llu failed, slowest answer "
                  "%.0f ms; server RSS %ld -> %ld kB\n",
                  3 * capacity, secs, (unsigned long long)ov.submitted,
                  (unsigned long long)ov.ok, goodput, 100 * goodput / capacity,
                  (unsigned long long)ov.shed, (unsigned long long)ov.shed_late,
                  SERVER_DEADLINE_MS / 2, (unsigned long long)ov.timeouts,
                  (unsigned long long)ov.failed, ov.max_ms, rss0, rss1);

    /* recovery: requests one at a time until latency is normal again */
    double normal = base_p50 * 5 > 10 ? base_p50 * 5 : 10, back = -1;
    while (td_now_ms() - stopped < 3000) {
        double ms = call_ms();
        if (ms <= normal) {
            back = td_now_ms() - stopped;
            break;
        }
    }
    print_message("latency normal again %.0f ms after the overload stopped\n",
                  back);
    /* The machine's speed drifts when other work shares it: capacity is
     * measured again after the overload, and goodput is compared with the
     * mean of both measurements. */
    double after_cpu;
    double after = measure_capacity(&after_cpu);
    print_message("capacity after: %.0f/s; goodput %.0f%% of the mean\n", after,
                  200 * goodput / (capacity + after));
    capacity = (capacity + after) / 2;
    /* What the server did with the CPU it got: signatures per CPU second
     * under overload against the capacity runs (shedding, parsing and
     * answering the excess is what costs the difference). */
    double sig_cpu = (cap_cpu + after_cpu) / 2;
    double ov_cpu = ov_cpu_ms / (double)(ok_during ? ok_during : 1);
    double efficiency = sig_cpu / ov_cpu;
    print_message("server CPU per signature: %.3f ms at capacity, %.3f ms "
                  "under 3x overload (efficiency %.0f%%); the server got "
                  "%.2f cores during the overload\n",
                  sig_cpu, ov_cpu, 100 * efficiency, ov_cpu_ms / secs / 1000);
    print_message("longest stall of the test's client loop: %.0f ms\n",
                  ov.max_stall_ms);

    /* every request got its callback, none lost a connection */
    assert_int_equal(ov.ok + ov.shed + ov.timeouts, ov.submitted);
    assert_int_equal(ov.failed + ov.other_err, 0);
    if (HA_ASAN) {
        /* ASan multiplies the cost of everything but the bounds are about
         * the release build: the rest is checked there */
        print_message("(ASan build: goodput, deadline and recovery bounds "
                      "not checked)\n");
        return;
    }
    /* The worker's output is not eroded by the excess: shedding happens
     * before a request costs the worker anything. (The CPU the shard
     * spends on it is printed above, not asserted: bench/RESULTS.md
     * "Overload".) */
    assert_true(goodput >= 0.9 * capacity);
    /* Every request is answered by the server within its budget. A
     * client timeout is the server's fault only if the client itself kept
     * up: on a machine shared with other work the test's own thread can be
     * descheduled for longer than the 50 ms margin, and answers waiting in
     * its socket then expire unread. Those are tolerated (<= 1%) only when
     * such a stall was seen. */
    if (ov.timeouts > 0 && ov.max_stall_ms > 50)
        assert_true(ov.timeouts * 100 <= ov.submitted);
    else
        assert_int_equal(ov.timeouts, 0);
    /* (the slowest callback is reported, not asserted: it includes the
     * test's own scheduling delays on a loaded machine; a server answer
     * later than the budget would be a client timeout, asserted above) */
    assert_true(ov.shed > 0);
    HA_EXPECT_RSS_BELOW(rss1 - rss0, 64 * 1024);
    assert_true(back >= 0 && back <= 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overload),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
