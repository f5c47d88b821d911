/* SPDX-License-Identifier: Apache-2.0 */
/* The standard process_* series (the names every Prometheus client library
 * exports, so generic dashboards work), read from /proc/self at scrape. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "metrics/internal.h"

typedef struct proc_stat {
    unsigned long long utime, stime, start; /* clock ticks */
    unsigned long long vsize;               /* bytes */
    long long rss;                          /* pages */
} proc_stat;

static bool read_stat(proc_stat *ps)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name (field 2) is in parentheses and may itself hold
     * spaces and parentheses: fields are counted from the last ')'. */
    const char *p = strrchr(buf, ')');
    if (!p)
        return false;
    /* Fields 3..24 of proc(5); 14/15 utime/stime, 22 starttime, 23 vsize,
     * 24 rss. */
    int got = sscanf(p + 1,
                     " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu"
                     " %*d %*d %*d %*d %*d %*d %llu %llu %lld",
                     &ps->utime, &ps->stime, &ps->start, &ps->vsize, &ps->rss);
    return got == 5;
}

static long long boot_time(void)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    char line[256];
    long long bt = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "btime %lld", &bt) == 1)
            break;
    fclose(f);
    return bt;
}

static long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

static void gauge(mx_buf *b, const char *name, const char *type,
                  const char *help, double v)
{
    mx_family(b, name, type, help);
    mx_printf(b, "%s ", name);
    mx_put_double(b, v);
    mx_puts(b, "\n");
}

void mx_render_process(mx_buf *b)
{
    double tck = (double)sysconf(_SC_CLK_TCK);
    long page = sysconf(_SC_PAGESIZE);
    proc_stat ps;
    if (tck > 0 && page > 0 && read_stat(&ps)) {
        gauge(b, "process_cpu_seconds_total", "counter",
              "Total user and system CPU time spent in seconds.",
              (double)(ps.utime + ps.stime) / tck);
        gauge(b, "process_resident_memory_bytes", "gauge",
              "Resident memory size in bytes.", (double)ps.rss * page);
        gauge(b, "process_virtual_memory_bytes", "gauge",
              "Virtual memory size in bytes.", (double)ps.vsize);
        long long bt = boot_time();
        if (bt >= 0)
            gauge(b, "process_start_time_seconds", "gauge",
                  "Start time of the process since unix epoch in seconds.",
                  (double)bt + (double)ps.start / tck);
    }
    long fds = open_fds();
    if (fds >= 0)
        gauge(b, "process_open_fds", "gauge",
              "Number of open file descriptors.", (double)fds);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        gauge(b, "process_max_fds", "gauge",
              "Maximum number of open file descriptors.",
              rl.rlim_cur == RLIM_INFINITY ? -1.0 : (double)rl.rlim_cur);
}
