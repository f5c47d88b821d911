/* SPDX-License-Identifier: Apache-2.0 */
#include "core/log.h"
#include "core/time.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static atomic_int log_level = KL_LOG_DEFAULT_LEVEL;
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

void kl_log_set_prefix(const char *prefix)
{
    log_prefix = prefix ? prefix : "";
}

static const char *const level_names[] = {"debug", "info",     "warning",
                                          "error", "critical", "fatal"};
/* syslog priorities for the journal */
static const int level_prio[] = {7, 6, 4, 3, 2, 0};

/* ---- JSON lines (log_format: json) ----------------------------------- */

static atomic_int log_format = KL_LOG_DEFAULT_FORMAT;

void kl_log_set_format(int format)
{
    atomic_store_explicit(&log_format,
                          format == KL_LOG_JSON ? KL_LOG_JSON : KL_LOG_TEXT,
                          memory_order_relaxed);
}

int kl_log_get_format(void)
{
    return atomic_load_explicit(&log_format, memory_order_relaxed);
}

bool kl_log_format_known(const char *name)
{
    return !name || !*name || !strcmp(name, "text") || !strcmp(name, "json");
}

const char *kl_log_format_name(int format)
{
    return format == KL_LOG_JSON ? "json" : "text";
}

int kl_log_format_parse(const char *name)
{
    return name && !strcmp(name, "json") ? KL_LOG_JSON : KL_LOG_TEXT;
}

/* Length of the valid UTF-8 sequence at p (at most n bytes), 0 if none. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    size_t len = p[0] < 0x80                    ? 1
                 : p[0] >= 0xC2 && p[0] <= 0xDF ? 2
                 : (p[0] & 0xF0) == 0xE0        ? 3
                 : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4
                                                : 0;
    if (!len || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    /* no overlong 3/4-byte forms, no surrogates, nothing past U+10FFFF */
    if (len == 3 &&
        ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] >= 0xA0)))
        return 0;
    if (len == 4 &&
        ((p[0] == 0xF0 && p[1] < 0x90) || (p[0] == 0xF4 && p[1] >= 0x90)))
        return 0;
    return len;
}

/* Appends s (n bytes) as a JSON string body: quotes, backslashes and
 * control characters escaped, invalid UTF-8 replaced by U+FFFD, so every
 * line is valid JSON whatever a client sent. Stops short rather than cut
 * an escape. */
static size_t json_esc(char *out, size_t pos, size_t cap, const char *s,
                       size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        char tmp[8];
        const char *rep = NULL;
        size_t rl = 0, adv = 1;
        if (p[i] == '"' || p[i] == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)p[i];
            rep = tmp, rl = 2;
        } else if (p[i] == '\n') {
            rep = "\\n", rl = 2;
        } else if (p[i] < 0x20 || p[i] == 0x7f) {
            snprintf(tmp, sizeof tmp, "\\u%04x", p[i]);
            rep = tmp, rl = 6;
        } else if (p[i] >= 0x80) {
            adv = utf8_len(p + i, n - i);
            if (adv) {
                rep = (const char *)p + i, rl = adv;
            } else {
                rep = "\\ufffd", rl = 6;
                adv = 1;
            }
        } else {
            rep = (const char *)p + i, rl = 1;
        }
        if (pos + rl >= cap)
            break;
        memcpy(out + pos, rep, rl);
        pos += rl;
        i += adv;
    }
    return pos;
}

/* Appends s (n bytes) for a text line: bytes below 0x20, 0x7f and bytes
 * that are not part of valid UTF-8 become \xNN, everything else is copied
 * (docs/OPERATIONS.md, Logs). A peer's certificate name or error text can
 * neither start a line nor reach a terminal as a control sequence. Stops
 * short rather than cut an escape or a character. */
static size_t text_esc(char *out, size_t pos, size_t cap, const char *s,
                       size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t adv = p[i] < 0x20 || p[i] == 0x7f ? 0 : utf8_len(p + i, n - i);
        if (adv) {
            if (pos + adv >= cap)
                break;
            memcpy(out + pos, p + i, adv);
            pos += adv;
            i += adv;
            continue;
        }
        if (pos + 4 >= cap)
            break;
        snprintf(out + pos, cap - pos, "\\x%02x", p[i]);
        pos += 4;
        i++;
    }
    return pos;
}

static size_t json_member(char *out, size_t pos, size_t cap, const char *key,
                          const char *val)
{
    if (!val || pos + strlen(key) + 8 >= cap)
        return pos;
    pos += (size_t)snprintf(out + pos, cap - pos, ",\"%s\":\"", key);
    /* room for the closing quote and the object's closing brace */
    pos = json_esc(out, pos, cap - 4, val, strlen(val));
    out[pos++] = '"';
    return pos;
}

static void emit(char *line, size_t n, size_t cap)
{
    if (n >= cap - 1)
        n = cap - 2;
    line[n++] = '\n';
    line[n] = 0;
    fputs(line, stderr);
}

static void vlog(int level, const kl_log_fields *f, const char *fmt, va_list ap)
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
    char line[4096];
    size_t n = 0;
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    if (kl_log_get_format() == KL_LOG_JSON) {
        char msg[2048], when[40];
        vsnprintf(msg, sizeof msg, fmt, ap);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
        if (journal)
            n = (size_t)snprintf(line, sizeof line, "<%d>", level_prio[level]);
        n += (size_t)snprintf(line + n, sizeof line - n,
                              "{\"time\":\"%s.%06ldZ\",\"level\":\"%s\"", when,
                              ts.tv_nsec / 1000, level_names[level]);
        if (*log_prefix)
            n = json_member(line, n, sizeof line, "logger", log_prefix);
        if (f) {
            n = json_member(line, n, sizeof line, "request_id", f->request_id);
            n = json_member(line, n, sizeof line, "client", f->client);
            n = json_member(line, n, sizeof line, "connection", f->connection);
            n = json_member(line, n, sizeof line, "opcode", f->opcode);
            n = json_member(line, n, sizeof line, "ski", f->ski);
            n = json_member(line, n, sizeof line, "error", f->error);
            if (f->duration_ms >= 0 && n + 40 < sizeof line)
                n += (size_t)snprintf(line + n, sizeof line - n,
                                      ",\"duration_ms\":%.3f", f->duration_ms);
        }
        /* the message last: if it must be cut, the fields are kept */
        n = json_member(line, n, sizeof line, "msg", msg);
        if (n < sizeof line - 2)
            line[n++] = '}';
        emit(line, n, sizeof line);
        return;
    }
    if (journal) {
        n = (size_t)snprintf(line, sizeof line, "<%d>", level_prio[level]);
    } else {
        n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
        n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ ",
                              ts.tv_nsec / (long)KL_NS_PER_MS);
    }
    if (*log_prefix && n < sizeof line)
        n += (size_t)snprintf(line + n, sizeof line - n, "%s: ", log_prefix);
    if (n < sizeof line)
        n += (size_t)snprintf(line + n, sizeof line - n, "[%s] ",
                              level_names[level]);
    if (n >= sizeof line - 1)
        n = sizeof line - 2;
    /* one event, one line: the message escaped at the sink (log.h) */
    char msg[sizeof line];
    int len = vsnprintf(msg, sizeof msg, fmt, ap);
    if (len > 0)
        n = text_esc(line, n, sizeof line - 1, msg,
                     (size_t)len < sizeof msg ? (size_t)len : sizeof msg - 1);
    emit(line, n, sizeof line);
}

void kl_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(level, NULL, fmt, ap);
    va_end(ap);
}

void kl_logf(int level, const kl_log_fields *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(level, f, fmt, ap);
    va_end(ap);
}

/* ---- rate limit (log.h) ---------------------------------------------- */

void kl_log_limit_init(kl_log_limit *l, const char *what, int level)
{
    memset(l, 0, sizeof *l);
    pthread_mutex_init(&l->mu, NULL);
    l->what = what;
    l->level = level;
}

void kl_log_limit_destroy(kl_log_limit *l)
{
    pthread_mutex_destroy(&l->mu);
}

/* Whether the open window is over at now_ns (another thread may have
 * opened it a moment after this one read the clock). */
static bool window_over(const kl_log_limit *l, uint64_t now_ns)
{
    return l->start_ns && now_ns >= l->start_ns &&
           now_ns - l->start_ns >= KL_LOG_LIMIT_WINDOW_NS;
}

/* Ends the open window, with its summary when lines were left out. Caller
 * holds l->mu (kl_log takes no lock of its own but stdio's). */
static void close_window(kl_log_limit *l, uint64_t now_ns)
{
    if (l->held) {
        uint64_t span = now_ns > l->start_ns ? now_ns - l->start_ns : 0;
        if (span > KL_LOG_LIMIT_WINDOW_NS)
            span = KL_LOG_LIMIT_WINDOW_NS;
        unsigned long long secs = (span + KL_NS_PER_S - 1) / KL_NS_PER_S;
        kl_log(
            l->level,
            "%s: %llu more like this in the last %llu s (at most %d lines "
            "per %llu s are logged; counted in keylessd_log_suppressed_total)",
            l->what, (unsigned long long)l->held, secs ? secs : 1,
            KL_LOG_LIMIT_LINES,
            (unsigned long long)(KL_LOG_LIMIT_WINDOW_NS / KL_NS_PER_S));
    }
    l->start_ns = 0;
    l->lines = 0;
    l->held = 0;
}

bool kl_log_limit_pass(kl_log_limit *l, uint64_t now_ns, uint64_t *summary_ns)
{
    pthread_mutex_lock(&l->mu);
    if (window_over(l, now_ns))
        close_window(l, now_ns);
    if (!l->start_ns)
        l->start_ns = now_ns ? now_ns : 1;
    bool ok = l->lines < KL_LOG_LIMIT_LINES;
    if (ok)
        l->lines++;
    else
        l->held++;
    if (!ok && summary_ns)
        *summary_ns = l->start_ns + KL_LOG_LIMIT_WINDOW_NS;
    pthread_mutex_unlock(&l->mu);
    return ok;
}

uint64_t kl_log_limit_flush(kl_log_limit *l, uint64_t now_ns, bool force)
{
    pthread_mutex_lock(&l->mu);
    if (l->start_ns && (force || window_over(l, now_ns)))
        close_window(l, now_ns);
    uint64_t due =
        l->start_ns && l->held ? l->start_ns + KL_LOG_LIMIT_WINDOW_NS : 0;
    pthread_mutex_unlock(&l->mu);
    return due;
}

void kl_problems_count(kl_problems *p, int level)
{
    if (level >= KL_LOG_ERROR)
        p->errors++;
    else if (level == KL_LOG_WARN)
        p->warnings++;
}
