/* SPDX-License-Identifier: Apache-2.0 */
/* Real-time scheduling of the serving threads (src/core/sched.c, option
 * realtime_priority): loops one priority above workers, nothing changed at
 * 0, a refusal warned once with the fix and the thread left as it was, and
 * RLIMIT_RTPRIO alone enough (the systemd LimitRTPRIO advice). Each case
 * runs in a child process: the setting is process-wide, and a child may
 * give up root to see the unprivileged behaviour. */
#include "testutil.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/sched.h"

/* exit codes of a child's checks */
enum { OK = 0, BAD_POLICY = 10, BAD_RETURN = 11, SKIP = 77 };

typedef struct probe {
    kl_thread_role role;
    bool applied;
    int policy, priority;
} probe;

static void *probe_main(void *arg)
{
    probe *p = arg;
    p->applied = kl_sched_thread_start(p->role);
    struct sched_param sp;
    pthread_getschedparam(pthread_self(), &p->policy, &sp);
    p->priority = sp.sched_priority;
    return NULL;
}

/* What a new thread of this role gets from kl_sched_thread_start. */
static probe run_probe(kl_thread_role role)
{
    probe p = {.role = role};
    pthread_t t;
    if (pthread_create(&t, NULL, probe_main, &p) != 0)
        _exit(99);
    pthread_join(t, NULL);
    return p;
}

/* Whether this process may use SCHED_FIFO at prio (tried on a thread). */
static void *try_fifo(void *arg)
{
    struct sched_param sp = {.sched_priority = *(int *)arg};
    *(int *)arg = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
    return NULL;
}
static bool fifo_allowed(int prio)
{
    pthread_t t;
    int v = prio;
    if (pthread_create(&t, NULL, try_fifo, &v) != 0)
        return false;
    pthread_join(t, NULL);
    return v == 0;
}

/* Gives up root (if root) with RLIMIT_RTPRIO = rtprio: an unprivileged
 * process may use SCHED_FIFO up to that limit. */
static void unprivileged(rlim_t rtprio)
{
    struct rlimit rl = {.rlim_cur = rtprio, .rlim_max = rtprio};
    if (setrlimit(RLIMIT_RTPRIO, &rl) != 0)
        _exit(SKIP);
    if (getuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
        _exit(SKIP);
}

typedef int (*child_fn)(void);

/* Runs fn in a child with stderr sent to a file; returns the exit code and
 * (in *log, malloc'd) what it wrote. */
static int in_child(child_fn fn, char **log)
{
    char path[] = "/tmp/kl-test-sched-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd, 2);
        _exit(fn());
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    off_t n = lseek(fd, 0, SEEK_END);
    *log = calloc(1, (size_t)n + 1);
    assert_non_null(*log);
    assert_int_equal(pread(fd, *log, (size_t)n, 0), n);
    close(fd);
    unlink(path);
    return WEXITSTATUS(st);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static int child_off(void)
{
    kl_sched_configure(0);
    probe l = run_probe(KL_THREAD_LOOP), w = run_probe(KL_THREAD_WORKER);
    if (!l.applied || !w.applied)
        return BAD_RETURN;
    return l.policy == SCHED_OTHER && w.policy == SCHED_OTHER ? OK : BAD_POLICY;
}

static void test_zero_changes_nothing(void **state)
{
    (void)state;
    char *log;
    assert_int_equal(in_child(child_off, &log), OK);
    assert_string_equal(log, "");
    free(log);
}

static void test_range_clamped(void **state)
{
    (void)state;
    kl_sched_configure(200);
    assert_int_equal(kl_sched_priority(), KL_SCHED_PRIORITY_MAX);
    kl_sched_configure(-3);
    assert_int_equal(kl_sched_priority(), 0);
    kl_sched_configure(0);
}

/* The loops above the workers: 5 -> loops 6, workers 5. */
static int child_fifo(void)
{
    if (!fifo_allowed(6))
        return SKIP;
    kl_sched_configure(5);
    probe l = run_probe(KL_THREAD_LOOP), w = run_probe(KL_THREAD_WORKER);
    if (!l.applied || !w.applied)
        return BAD_RETURN;
    if (l.policy != SCHED_FIFO || l.priority != 6)
        return BAD_POLICY;
    if (w.policy != SCHED_FIFO || w.priority != 5)
        return BAD_POLICY;
    return OK;
}

static void test_loops_above_workers(void **state)
{
    char *log;
    int rc = in_child(child_fifo, &log);
    free(log);
    if (rc == SKIP) {
        print_message("SCHED_FIFO not allowed here (no CAP_SYS_NICE, "
                      "RLIMIT_RTPRIO 0)\n");
        skip();
    }
    assert_int_equal(rc, OK);
    (void)state;
}

/* Unprivileged with RLIMIT_RTPRIO 0: refused, warned once, unchanged. */
static int child_refused(void)
{
    unprivileged(0);
    if (fifo_allowed(1))
        return SKIP; /* CAP_SYS_NICE survived */
    kl_sched_configure(3);
    probe l = run_probe(KL_THREAD_LOOP), w = run_probe(KL_THREAD_WORKER);
    if (l.applied || w.applied)
        return BAD_RETURN;
    return l.policy == SCHED_OTHER && w.policy == SCHED_OTHER ? OK : BAD_POLICY;
}

static void test_refusal_warned_once(void **state)
{
    (void)state;
    char *log;
    int rc = in_child(child_refused, &log);
    if (rc == SKIP) {
        free(log);
        skip();
    }
    assert_int_equal(rc, OK);
    print_message("%s", log);
    assert_int_equal(count(log, "realtime_priority 3"), 1);
    assert_non_null(strstr(log, "normal scheduling"));
    assert_non_null(strstr(log, "LimitRTPRIO=4"));
    assert_non_null(strstr(log, "CAP_SYS_NICE"));
    free(log);
}

/* RLIMIT_RTPRIO 4 without privileges allows 3 (workers) and 4 (loops):
 * the documented systemd fix (LimitRTPRIO=N+1) is enough. */
static int child_rlimit(void)
{
    unprivileged(4);
    kl_sched_configure(3);
    probe l = run_probe(KL_THREAD_LOOP), w = run_probe(KL_THREAD_WORKER);
    if (!l.applied || !w.applied)
        return BAD_RETURN;
    return l.priority == 4 && w.priority == 3 ? OK : BAD_POLICY;
}

static void test_rlimit_is_enough(void **state)
{
    (void)state;
    char *log;
    int rc = in_child(child_rlimit, &log);
    if (rc == SKIP) {
        free(log);
        print_message(
            "cannot raise RLIMIT_RTPRIO here (no CAP_SYS_RESOURCE)\n");
        skip();
    }
    assert_int_equal(rc, OK);
    assert_string_equal(log, "");
    free(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_changes_nothing),
        cmocka_unit_test(test_range_clamped),
        cmocka_unit_test(test_loops_above_workers),
        cmocka_unit_test(test_refusal_warned_once),
        cmocka_unit_test(test_rlimit_is_enough),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
