#include "core/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static atomic_int log_level = KL_LOG_INFO;
static const char *log_prefix = "";
/* Under systemd (JOURNAL_STREAM set) the journal adds the time itself and
 * reads a "<N>" syslog priority prefix. */
static atomic_int journal_mode = -1;

void kl_log_set_level(int level)
{
    if (level < KL_LOG_DEBUG)
        level = KL_LOG_DEBUG;
    if (level > KL_LOG_FATAL)
        level = KL_LOG_FATAL;
    atomic_store_explicit(&log_level, level, memory_order_relaxed);
}

int kl_log_get_level(void)
{
    return atomic_load_explicit(&log_level, memory_order_relaxed);
}

void kl_log_set_prefix(const char *prefix) { log_prefix = prefix ? prefix : ""; }

static const char *const level_names[] = {"debug", "info",     "warning",
                                          "error", "critical", "fatal"};
/* syslog priorities for the journal */
static const int level_prio[] = {7, 6, 4, 3, 2, 0};

void kl_log(int level, const char *fmt, ...)
{
    if (level < kl_log_get_level())
        return;
    if (level < 0 || level > KL_LOG_FATAL)
        level = KL_LOG_ERROR;
    int journal = atomic_load_explicit(&journal_mode, memory_order_relaxed);
    if (journal < 0) {
        /* racing threads compute the same value: a relaxed store is fine */
        journal = getenv("JOURNAL_STREAM") != NULL;
        atomic_store_explicit(&journal_mode, journal, memory_order_relaxed);
    }

    /* Build the whole line first so that concurrent threads never interleave
     * within a line: one fputs of one buffer. */
    char line[2048];
    size_t n = 0;
    if (journal) {
        n = (size_t)snprintf(line, sizeof line, "<%d>", level_prio[level]);
    } else {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
        n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ ",
                              ts.tv_nsec / 1000000);
    }
    if (*log_prefix && n < sizeof line)
        n += (size_t)snprintf(line + n, sizeof line - n, "%s: ", log_prefix);
    if (n < sizeof line)
        n += (size_t)snprintf(line + n, sizeof line - n, "[%s] ",
                              level_names[level]);
    if (n < sizeof line) {
        va_list ap;
        va_start(ap, fmt);
        n += (size_t)vsnprintf(line + n, sizeof line - n, fmt, ap);
        va_end(ap);
    }
    if (n >= sizeof line - 1)
        n = sizeof line - 2;
    /* one event, one line: fold embedded newlines */
    for (size_t i = 0; i < n; i++)
        if (line[i] == '\n')
            line[i] = ' ';
    line[n++] = '\n';
    line[n] = 0;
    fputs(line, stderr);
}
