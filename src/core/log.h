/* SPDX-License-Identifier: Apache-2.0 */
/* Logging to stderr. Levels follow the reference server's `loglevel`
 * (0 debug .. 5 fatal, default 1 = info). Never log key material. */
#ifndef KL_CORE_LOG_H
#define KL_CORE_LOG_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/time.h"

enum kl_log_level {
    KL_LOG_DEBUG = 0,
    KL_LOG_INFO = 1,
    KL_LOG_WARN = 2,
    KL_LOG_ERROR = 3,
    KL_LOG_CRITICAL = 4,
    KL_LOG_FATAL = 5,
};

/* Before anything sets it, and keylessd's default (loglevel). */
#define KL_LOG_DEFAULT_LEVEL KL_LOG_INFO

void kl_log_set_level(int level);
int kl_log_get_level(void);
/* Prefix lines with a name (e.g. "keylessd"); default none. */
void kl_log_set_prefix(const char *prefix);

/* Line format (option log_format):
 * - text: "TIME PREFIX: [level] message" (under systemd, JOURNAL_STREAM
 *   set: "<N>PREFIX: [level] message", the journal adds the time). The
 *   message is escaped here, at the sink, whatever its call site: bytes
 *   below 0x20 (newline included), 0x7f and bytes that are not valid UTF-8
 *   are written as \xNN, so that no peer-supplied text can start a line,
 *   move the cursor or colour a terminal (docs/OPERATIONS.md, Logs);
 * - json: one JSON object per line, {"time", "level", "logger", "msg"} and
 *   the fields the call gave (request_id, client, connection, opcode, ski,
 *   error, duration_ms); under systemd still prefixed "<N>" (the journal
 *   takes the priority from it and stores the JSON text as the message). */
enum kl_log_format { KL_LOG_TEXT = 0, KL_LOG_JSON = 1 };
/* Before anything sets it, and keylessd's default (log_format). */
#define KL_LOG_DEFAULT_FORMAT KL_LOG_TEXT
void kl_log_set_format(int format);
int kl_log_get_format(void);
/* Whether name is a log format: "text" or "json" (NULL and "" are text). */
bool kl_log_format_known(const char *name);
/* The format a known name gives (kl_log_format_known); text for any
 * other, so check a name from the configuration with that first. */
int kl_log_format_parse(const char *name);
/* The format's name, as kl_log_format_parse reads it. */
const char *kl_log_format_name(int format);

/* Structured fields of a log line: NULL/negative members are left out. In
 * text format they are not printed (the message already says what matters
 * in words); in JSON they become members of the line's object. */
typedef struct kl_log_fields {
    const char *request_id; /* tag 0x16 request_id (protocol P3) */
    const char *client;     /* client certificate name */
    const char *connection; /* peer address:port */
    const char *opcode;     /* P6 name, e.g. OpECDSASignSHA256 */
    const char *ski;        /* hex */
    const char *error;      /* P6 error text */
    double duration_ms;     /* < 0: absent */
} kl_log_fields;

void kl_log(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* kl_log with structured fields (f may be NULL). */
void kl_logf(int level, const kl_log_fields *f, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Rate limit for a kind of line a peer can cause at will (docs/OPERATIONS.md,
 * Logs): at most KL_LOG_LIMIT_LINES lines per window of
 * KL_LOG_LIMIT_WINDOW_NS, the window starting at the first line; the lines
 * left out are counted and, once the window is over, summarised in one line
 * "WHAT: N more like this in the last 10 s". Any thread (a mutex). */
#define KL_LOG_LIMIT_LINES 10
#define KL_LOG_LIMIT_WINDOW_NS (10 * KL_NS_PER_S)

typedef struct kl_log_limit {
    pthread_mutex_t mu;
    const char *what;  /* names the lines in the summary */
    int level;         /* of the summary line */
    uint64_t start_ns; /* monotonic start of the window; 0: none open */
    unsigned lines;    /* written in the window */
    uint64_t held;     /* left out in the window */
} kl_log_limit;

void kl_log_limit_init(kl_log_limit *l, const char *what, int level);
void kl_log_limit_destroy(kl_log_limit *l);
/* Whether one more line may be written at now_ns (monotonic). A window
 * that is over is summarised first. false: the line is counted as left out
 * and *summary_ns (may be NULL) gets the time its summary is due - call
 * kl_log_limit_flush then, or the summary waits for the next line. */
bool kl_log_limit_pass(kl_log_limit *l, uint64_t now_ns, uint64_t *summary_ns);
/* Writes the summary of a window that is over (force: of the open one too,
 * e.g. at shutdown). Returns when the summary of the window still open is
 * due, 0 when it has nothing to summarise. */
uint64_t kl_log_limit_flush(kl_log_limit *l, uint64_t now_ns, bool force);

#define kl_debug(...)                                                          \
    do {                                                                       \
        if (kl_log_get_level() <= KL_LOG_DEBUG)                                \
            kl_log(KL_LOG_DEBUG, __VA_ARGS__);                                 \
    } while (0)
#define kl_info(...) kl_log(KL_LOG_INFO, __VA_ARGS__)
/* Problems found while loading (startup, reload, --check), each already
 * logged as one line: what the daemon and activation count, by level. */
typedef struct kl_problems {
    size_t errors, warnings;
} kl_problems;
/* Counts one problem of this log level (errors and worse, warnings). */
void kl_problems_count(kl_problems *p, int level);

#define kl_warn(...) kl_log(KL_LOG_WARN, __VA_ARGS__)
#define kl_error(...) kl_log(KL_LOG_ERROR, __VA_ARGS__)
#define kl_fatal(...) kl_log(KL_LOG_FATAL, __VA_ARGS__)

#endif
