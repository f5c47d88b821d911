/* SPDX-License-Identifier: Apache-2.0 */
/* Driving tests/tools/faultproxy from a C test (header only, so any test
 * program can include it without a build change): start one in front of a
 * port, change its faults at run time, read its byte counters, stop it.
 *
 *   fp_proxy p;
 *   fp_start(&p, "dc1", daemon_port, 20);   // 20 ms each way
 *   fp_set(&p, "latency_ms=150\n");        // re-read within ~10 ms
 *   fp_stats s = fp_read_stats(&p);
 *   fp_stop(&p);
 *
 * The binary is $KL_BIN_DIR/faultproxy (built by the tests/tools section of
 * CMakeLists.txt). Files live in a directory under $KL_BIN_DIR/test-tmp. */
#ifndef KL_TEST_FPCTL_H
#define KL_TEST_FPCTL_H

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

typedef struct fp_proxy {
    pid_t pid;
    uint16_t port;   /* where clients connect */
    uint16_t target; /* where it forwards */
    char dir[900];
    char control[1024], stats[1024];
    unsigned long drops; /* the control file's drop counter */
    char faults[512];    /* the current control text (without drop=) */
} fp_proxy;

typedef struct fp_stats {
    unsigned long long accepted, active, bytes_up, bytes_down, blackholed;
} fp_stats;

static inline void fp_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static inline void fp_write_file(const char *path, const char *text)
{
    char tmp[1100];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        fail_msg("faultproxy control path too long: %s", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        fail_msg("faultproxy control %s: %s", tmp, strerror(errno));
    fputs(text, f);
    fclose(f);
    if (rename(tmp, path) != 0)
        fail_msg("faultproxy control %s: %s", path, strerror(errno));
}

static inline void fp_flush_control(fp_proxy *p)
{
    char text[640];
    snprintf(text, sizeof text, "%sdrop=%lu\n", p->faults, p->drops);
    fp_write_file(p->control, text);
}

/* Replaces the faults (lines of the control file, see faultproxy.c) and
 * waits until the proxy has surely read them (it polls every 10 ms). */
static inline void fp_set(fp_proxy *p, const char *faults)
{
    snprintf(p->faults, sizeof p->faults, "%s", faults);
    fp_flush_control(p);
    fp_sleep_ms(30);
}

/* Resets every connection through the proxy now. */
static inline void fp_drop(fp_proxy *p)
{
    p->drops++;
    fp_flush_control(p);
    fp_sleep_ms(30);
}

static inline void fp_start(fp_proxy *p, const char *name, uint16_t target,
                            unsigned latency_ms)
{
    memset(p, 0, sizeof *p);
    p->target = target;
    snprintf(p->dir, sizeof p->dir, "%s/test-tmp", tu_bin_dir());
    mkdir(p->dir, 0700);
    snprintf(p->dir + strlen(p->dir), sizeof p->dir - strlen(p->dir),
             "/fp-%s-%d", name, (int)getpid());
    mkdir(p->dir, 0700);
    char portf[1024], tgt[64], bin[1024], logf[1024];
    snprintf(portf, sizeof portf, "%s/port", p->dir);
    snprintf(p->control, sizeof p->control, "%s/control", p->dir);
    snprintf(p->stats, sizeof p->stats, "%s/stats", p->dir);
    snprintf(logf, sizeof logf, "%s/log", p->dir);
    snprintf(tgt, sizeof tgt, "127.0.0.1:%u", target);
    snprintf(bin, sizeof bin, "%s/faultproxy", tu_bin_dir());
    unlink(portf);
    snprintf(p->faults, sizeof p->faults, "latency_ms=%u\n", latency_ms);
    fp_flush_control(p);
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        FILE *lf = freopen(logf, "w", stderr);
        (void)lf;
        execl(bin, bin, "--target", tgt, "--port-file", portf, "--control",
              p->control, "--stats", p->stats, (char *)NULL);
        _exit(127);
    }
    p->pid = pid;
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(portf, "r");
        unsigned port = 0;
        if (f) {
            if (fscanf(f, "%u", &port) != 1)
                port = 0;
            fclose(f);
        }
        if (port) {
            p->port = (uint16_t)port;
            return;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            fail_msg("faultproxy %s exited (status %d); is it built?", bin, st);
        fp_sleep_ms(10);
    }
    fail_msg("faultproxy %s: no port after 5 s", name);
}

static inline fp_stats fp_read_stats(const fp_proxy *p)
{
    fp_stats s = {0};
    fp_sleep_ms(40); /* it rewrites the file at most every 20 ms */
    FILE *f = fopen(p->stats, "r");
    if (!f)
        return s;
    char key[64];
    unsigned long long v;
    while (fscanf(f, " %63[a-z_]=%llu", key, &v) == 2) {
        if (!strcmp(key, "accepted"))
            s.accepted = v;
        else if (!strcmp(key, "active"))
            s.active = v;
        else if (!strcmp(key, "bytes_up"))
            s.bytes_up = v;
        else if (!strcmp(key, "bytes_down"))
            s.bytes_down = v;
        else if (!strcmp(key, "bytes_blackholed"))
            s.blackholed = v;
    }
    fclose(f);
    return s;
}

static inline void fp_stop(fp_proxy *p)
{
    if (p->pid <= 0)
        return;
    kill(p->pid, SIGTERM);
    int st;
    for (int i = 0; i < 200; i++) {
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
            p->pid = 0;
            return;
        }
        fp_sleep_ms(10);
    }
    kill(p->pid, SIGKILL);
    (void)waitpid(p->pid, &st, 0);
    p->pid = 0;
}

#endif
