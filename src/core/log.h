/* SPDX-License-Identifier: Apache-2.0 */
/* Logging to stderr. Levels follow the reference server's `loglevel`
 * (0 debug .. 5 fatal, default 1 = info). Never log key material. */
#ifndef KL_CORE_LOG_H
#define KL_CORE_LOG_H

enum kl_log_level {
    KL_LOG_DEBUG = 0,
    KL_LOG_INFO = 1,
    KL_LOG_WARN = 2,
    KL_LOG_ERROR = 3,
    KL_LOG_CRITICAL = 4,
    KL_LOG_FATAL = 5,
};

void kl_log_set_level(int level);
int kl_log_get_level(void);
/* Prefix lines with a name (e.g. "keylessd"); default none. */
void kl_log_set_prefix(const char *prefix);

/* Line format (option log_format, issue 11):
 * - text: "TIME PREFIX: [level] message" (under systemd, JOURNAL_STREAM
 *   set: "<N>PREFIX: [level] message", the journal adds the time);
 * - json: one JSON object per line, {"time", "level", "logger", "msg"} and
 *   the fields the call gave (request_id, client, connection, opcode, ski,
 *   error, duration_ms); under systemd still prefixed "<N>" (the journal
 *   takes the priority from it and stores the JSON text as the message). */
enum kl_log_format { KL_LOG_TEXT = 0, KL_LOG_JSON = 1 };
void kl_log_set_format(int format);
int kl_log_get_format(void);
/* "text" or "json" -> the format; -1 for anything else. */
int kl_log_format_parse(const char *name);

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

#define kl_debug(...)                                                          \
    do {                                                                       \
        if (kl_log_get_level() <= KL_LOG_DEBUG)                                \
            kl_log(KL_LOG_DEBUG, __VA_ARGS__);                                 \
    } while (0)
#define kl_info(...) kl_log(KL_LOG_INFO, __VA_ARGS__)
#define kl_warn(...) kl_log(KL_LOG_WARN, __VA_ARGS__)
#define kl_error(...) kl_log(KL_LOG_ERROR, __VA_ARGS__)
#define kl_fatal(...) kl_log(KL_LOG_FATAL, __VA_ARGS__)

#endif
