/* SPDX-License-Identifier: Apache-2.0 */
/* Option realtime_priority (docs/DESIGN.md "Real-time event
 * loops"): keylessd's shards run SCHED_FIFO one priority above its crypto
 * workers, its other threads keep normal scheduling, and it serves. Where
 * this test may not use SCHED_FIFO itself (no CAP_SYS_NICE, RLIMIT_RTPRIO
 * 0), keylessd must not either: one warning naming the fix, every thread
 * at normal scheduling, and it still serves. */
#include "daemon.h"
#include "pki.h"
#include "testutil.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *try_fifo(void *arg)
{
    struct sched_param sp = {.sched_priority = 3};
    *(int *)arg = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
    return NULL;
}

/* Whether this process may use SCHED_FIFO priority 3 (as keylessd, started
 * by it with the same credentials and limits, may). */
static bool fifo_allowed(void)
{
    pthread_t t;
    int rc = -1;
    assert_int_equal(pthread_create(&t, NULL, try_fifo, &rc), 0);
    pthread_join(t, NULL);
    return rc == 0;
}

typedef struct thread_sched {
    char name[32];
    int policy, priority;
} thread_sched;

/* /proc/PID/task/TID/stat: comm is field 2 (in parentheses, may hold
 * spaces), rt_priority field 40, policy field 41. */
static bool read_thread(int pid, const char *tid, thread_sched *t)
{
    char path[512], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/task/%s/stat", pid, tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *open = strchr(buf, '('), *close = strrchr(buf, ')');
    if (!open || !close || close < open)
        return false;
    size_t len = (size_t)(close - open - 1);
    if (len >= sizeof t->name)
        len = sizeof t->name - 1;
    memcpy(t->name, open + 1, len);
    t->name[len] = 0;
    /* fields after comm start at 3 */
    char *save = NULL, *tok = strtok_r(close + 2, " ", &save);
    for (int field = 3; tok; field++, tok = strtok_r(NULL, " ", &save)) {
        if (field == 40)
            t->priority = atoi(tok);
        if (field == 41) {
            t->policy = atoi(tok);
            return true;
        }
    }
    return false;
}

/* Every thread of the daemon; returns how many (at most max). */
static int read_threads(int pid, thread_sched *out, int max)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max)
        if (e->d_name[0] != '.' && read_thread(pid, e->d_name, &out[n]))
            n++;
    closedir(d);
    return n;
}

static void test_realtime_priority(void **state)
{
    (void)state;
    char *dir = tp_tempdir("realtime");
    EVP_PKEY_free(tp_genkey(dir, "p256.key", "EC", "P-256", 0));
    static const char *extra[] = {"--realtime-priority=2", NULL};
    td_daemon d;
    td_opts o = {.name = "realtime",
                 .key_dirs = dir,
                 .extra = extra,
                 .shards = 2,
                 .workers = 2};
    td_start(&d, &o);
    kl_client *c = td_connect(&d);
    td_expect_ping(&d, c); /* the shards are running */

    bool allowed = fifo_allowed();
    thread_sched t[64];
    int n = read_threads(d.pid, t, 64), shards = 0, workers = 0;
    for (int i = 0; i < n; i++) {
        print_message("%-16s policy %d priority %d\n", t[i].name, t[i].policy,
                      t[i].priority);
        bool shard = strncmp(t[i].name, "kl-shard-", 9) == 0;
        bool worker = strcmp(t[i].name, "kl-worker") == 0;
        /* background workers (crypto/pool.h) stay in the idle class:
         * below everything, realtime or not */
        if (strcmp(t[i].name, "kl-worker-bg") == 0) {
            assert_int_equal(t[i].policy, SCHED_IDLE);
            continue;
        }
        shards += shard;
        workers += worker;
        if (allowed && shard) {
            assert_int_equal(t[i].policy, SCHED_FIFO);
            assert_int_equal(t[i].priority, 3);
        } else if (allowed && worker) {
            assert_int_equal(t[i].policy, SCHED_FIFO);
            assert_int_equal(t[i].priority, 2);
        } else {
            /* the main thread and helpers; everything when refused */
            assert_int_equal(t[i].policy, SCHED_OTHER);
        }
    }
    assert_int_equal(shards, 2);
    assert_int_equal(workers, 2);
    td_expect_ping(&d, c);
    kl_client_close(c);

    char *log = td_read_log(&d);
    if (allowed) {
        assert_null(strstr(log, "refused SCHED_FIFO"));
    } else {
        print_message("SCHED_FIFO not allowed here: checking the refusal\n");
        char *w = strstr(log, "realtime_priority 2: the kernel refused");
        assert_non_null(w);
        assert_null(strstr(w + 1, "realtime_priority 2: the kernel refused"));
        assert_non_null(strstr(log, "LimitRTPRIO=3"));
    }
    free(log);
    assert_int_equal(td_stop(&d, 0), 0);
    tp_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_realtime_priority),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
