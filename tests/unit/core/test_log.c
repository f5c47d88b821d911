/* SPDX-License-Identifier: Apache-2.0 */
/* Logging (src/core/log.c): the text format as before, and log_format
 * json - one valid JSON object per line with time, level, msg
 * and the call's fields, whatever bytes the message holds; under systemd
 * (JOURNAL_STREAM) the "<N>" priority prefix stays in both formats. Text
 * lines escape control bytes and invalid UTF-8 as \xNN (a peer's
 * certificate name cannot forge a line or drive a terminal), and the rate
 * limit of repeated lines summarises what it left out. Each
 * case runs in a child process whose stderr is a file (the journal mode is
 * decided once per process). */
#include "testutil.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/log.h"

typedef void (*logging_fn)(void);

/* Runs fn in a child with stderr sent to a file; returns what it wrote. */
static char *capture(logging_fn fn, bool journal)
{
    char path[] = "/tmp/kl-test-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd, 2);
        if (journal)
            setenv("JOURNAL_STREAM", "8:1234", 1);
        else
            unsetenv("JOURNAL_STREAM");
        fn();
        fflush(stderr);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    size_t len;
    char *text = tu_read_file(path, &len);
    close(fd);
    unlink(path);
    return text;
}

static void text_lines(void)
{
    kl_log_set_prefix("keylessd");
    kl_log_set_level(KL_LOG_INFO);
    kl_info("hello %d", 42);
    kl_debug("not shown");
    kl_log_fields f = {.request_id = "r-1", .duration_ms = -1};
    kl_logf(KL_LOG_WARN, &f, "two\nlines");
}

static void test_text(void **state)
{
    (void)state;
    char *out = capture(text_lines, false);
    /* "2026-01-02T03:04:05.678Z keylessd: [info] hello 42" */
    char *nl = strchr(out, '\n');
    assert_non_null(nl);
    assert_true(nl - out > 25);
    assert_memory_equal(out + 23, "Z keylessd: [info] hello 42\n", 28);
    assert_non_null(strstr(out, "keylessd: [warning] two\\x0alines\n"));
    assert_null(strstr(out, "not shown"));
    assert_null(strstr(out, "r-1")); /* fields are for json */
    free(out);
    out = capture(text_lines, true);
    assert_string_equal(out, "<6>keylessd: [info] hello 42\n"
                             "<4>keylessd: [warning] two\\x0alines\n");
    free(out);
}

static void json_lines(void)
{
    kl_log_set_prefix("keylessd");
    kl_log_set_format(KL_LOG_JSON);
    kl_log_set_level(KL_LOG_DEBUG);
    kl_info("plain \"quoted\" \\ and\ttab");
    kl_log_fields f = {.request_id = "req-\xff\x01-7",
                       .client = "edge \xc3\xa9",
                       .connection = "127.0.0.1:5555",
                       .opcode = "OpECDSASignSHA256",
                       .ski = "d9c69b8e23abba7c26fd5d0e282f3dd679741036",
                       .error = "key not found due to no matching SKI/SNI/"
                                "ServerIP",
                       .duration_ms = 1.5};
    kl_logf(KL_LOG_ERROR, &f, "request %u: failed\nsecond line", 7u);
    kl_log_fields none = {.duration_ms = -1};
    kl_logf(KL_LOG_DEBUG, &none, "no fields");
    /* a message longer than the line still ends as valid JSON */
    static char big[6000];
    memset(big, '"', sizeof big - 1);
    kl_info("%s", big);
    /* ... and keeps its fields, the message being cut instead */
    kl_log_fields g = {.request_id = "big", .duration_ms = 2};
    kl_logf(KL_LOG_INFO, &g, "%s", big);
}

static json_t *line_json(const char *line, size_t len)
{
    json_error_t e;
    json_t *j = json_loadb(line, len, 0, &e);
    if (!j)
        fail_msg("not JSON (%s): %.*s", e.text, (int)len, line);
    return j;
}

static const char *member(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    if (!s)
        fail_msg("no string member %s", k);
    return s;
}

static void test_json(void **state)
{
    (void)state;
    char *out = capture(json_lines, false);
    json_t *l[5];
    const char *p = out;
    for (int i = 0; i < 5; i++) {
        const char *nl = strchr(p, '\n');
        assert_non_null(nl);
        l[i] = line_json(p, (size_t)(nl - p));
        p = nl + 1;
    }
    assert_string_equal(p, ""); /* exactly five lines */
    assert_string_equal(member(l[0], "level"), "info");
    assert_string_equal(member(l[0], "logger"), "keylessd");
    assert_string_equal(member(l[0], "msg"), "plain \"quoted\" \\ and\ttab");
    const char *t = member(l[0], "time");
    assert_int_equal(strlen(t), 27); /* 2026-01-02T03:04:05.123456Z */
    assert_int_equal(t[26], 'Z');
    assert_null(json_object_get(l[0], "request_id"));

    assert_string_equal(member(l[1], "level"), "error");
    assert_string_equal(member(l[1], "msg"), "request 7: failed\nsecond line");
    /* the client's bytes: invalid UTF-8 replaced, controls escaped */
    assert_string_equal(member(l[1], "request_id"), "req-\xef\xbf\xbd\x01-7");
    assert_string_equal(member(l[1], "client"), "edge \xc3\xa9");
    assert_string_equal(member(l[1], "connection"), "127.0.0.1:5555");
    assert_string_equal(member(l[1], "opcode"), "OpECDSASignSHA256");
    assert_string_equal(member(l[1], "ski"),
                        "d9c69b8e23abba7c26fd5d0e282f3dd679741036");
    assert_string_equal(member(l[1], "error"),
                        "key not found due to no matching SKI/SNI/ServerIP");
    assert_true(json_real_value(json_object_get(l[1], "duration_ms")) == 1.5);

    assert_string_equal(member(l[2], "level"), "debug");
    assert_null(json_object_get(l[2], "duration_ms"));
    assert_true(strlen(member(l[3], "msg")) > 1000); /* cut, still valid */
    assert_string_equal(member(l[4], "request_id"), "big");
    assert_true(json_real_value(json_object_get(l[4], "duration_ms")) == 2);
    assert_true(strlen(member(l[4], "msg")) > 1000);
    for (int i = 0; i < 5; i++)
        json_decref(l[i]);
    free(out);

    /* under systemd: "<3>{...}" - the journal strips the priority */
    out = capture(json_lines, true);
    assert_memory_equal(out, "<6>{", 4);
    const char *second = strchr(out, '\n') + 1;
    assert_memory_equal(second, "<3>{", 4);
    json_t *j = line_json(second + 3, strcspn(second + 3, "\n"));
    assert_string_equal(member(j, "level"), "error");
    json_decref(j);
    free(out);
}

/* What a client controls - here a certificate name as a refused handshake
 * logs it - in both formats. */
static const char forged[] = "edge-1\r\n2026-01-01T00:00:00.000Z keylessd: "
                             "[info] \x1b[31mfake\x1b[0m\x7f\t\xff\xc3\xa9";

static void hostile_text(void)
{
    kl_log_set_prefix("keylessd");
    kl_log_set_level(KL_LOG_INFO);
    kl_warn("connection 127.0.0.1:1 (client %s): TLS handshake failed", forged);
    /* an escape is never cut: 3000 ESC bytes grow to 12000, the line ends
     * on a whole \x1b */
    static char many[3001];
    memset(many, 0x1b, sizeof many - 1);
    kl_info("%s", many);
}

static void hostile_json(void)
{
    kl_log_set_format(KL_LOG_JSON);
    hostile_text();
}

static void test_escaped(void **state)
{
    (void)state;
    char *out = capture(hostile_text, false);
    const char *want =
        "keylessd: [warning] connection 127.0.0.1:1 (client "
        "edge-1\\x0d\\x0a2026-01-01T00:00:00.000Z keylessd: [info] "
        "\\x1b[31mfake\\x1b[0m\\x7f\\x09\\xff\xc3\xa9): TLS handshake "
        "failed\n";
    if (!strstr(out, want))
        fail_msg("not escaped as expected:\n%s", out);
    /* two lines, no raw control byte but the line ends */
    const char *nl = strchr(out, '\n');
    const char *nl2 = strchr(nl + 1, '\n');
    assert_non_null(nl2);
    assert_string_equal(nl2 + 1, "");
    for (const char *p = out; *p; p++)
        if (*p != '\n')
            assert_false((unsigned char)*p < 0x20 || *p == 0x7f);
    size_t len = (size_t)(nl2 - (nl + 1));
    assert_true(len > 4000 && len < 4096);
    assert_memory_equal(nl2 - 4, "\\x1b", 4);
    free(out);

    out = capture(hostile_json, false);
    nl = strchr(out, '\n');
    assert_non_null(nl);
    json_t *j = line_json(out, (size_t)(nl - out));
    char expect[512];
    snprintf(expect, sizeof expect,
             "connection 127.0.0.1:1 (client %.*s\xef\xbf\xbd\xc3\xa9): TLS "
             "handshake failed",
             (int)(sizeof forged - 4), forged);
    assert_string_equal(member(j, "msg"), expect);
    json_decref(j);
    for (const char *p = out; *p; p++)
        if (*p != '\n')
            assert_false((unsigned char)*p < 0x20 || *p == 0x7f);
    free(out);
}

#define SEC 1000000000ull

static void limited_lines(void)
{
    kl_log_set_prefix("keylessd");
    kl_log_set_level(KL_LOG_INFO);
    kl_log_limit l;
    kl_log_limit_init(&l, "TLS handshake failed", KL_LOG_WARN);
    uint64_t t = 1000 * SEC, due = 0;
    int passed = 0;
    for (int i = 0; i < 500; i++) /* 500 lines within 5 s */
        if (kl_log_limit_pass(&l, t + (uint64_t)i * 10000000ull, &due))
            kl_warn("line %d", passed++);
    if (passed != KL_LOG_LIMIT_LINES || due != t + 10 * SEC)
        kl_error("passed %d, due %llu", passed, (unsigned long long)due);
    /* not yet over: nothing written, still due */
    if (kl_log_limit_flush(&l, t + 9 * SEC, false) != t + 10 * SEC)
        kl_error("flush before the end");
    /* over: one summary, nothing more due */
    if (kl_log_limit_flush(&l, t + 10 * SEC, false) != 0)
        kl_error("flush after the end");
    if (kl_log_limit_flush(&l, t + 11 * SEC, false) != 0)
        kl_error("second flush");
    /* a new window: 12 lines, the summary written by the next line after
     * it (no flush), then a forced flush at shutdown after 3 s */
    for (int i = 0; i < 12; i++)
        if (kl_log_limit_pass(&l, t + 20 * SEC, NULL))
            kl_warn("second window");
    if (kl_log_limit_pass(&l, t + 31 * SEC, NULL))
        kl_warn("third window");
    for (int i = 0; i < 11; i++)
        if (kl_log_limit_pass(&l, t + 32 * SEC, NULL))
            kl_warn("third window");
    if (kl_log_limit_flush(&l, t + 34 * SEC, true) != 0)
        kl_error("forced flush");
    /* a summary is written at the summary's level even when below the
     * lines' */
    kl_log_limit_destroy(&l);
}

static size_t count(const char *text, const char *what)
{
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what))
        n++;
    return n;
}

static void test_limit(void **state)
{
    (void)state;
    char *out = capture(limited_lines, false);
    if (strstr(out, "[error]"))
        fail_msg("%s", out);
    assert_int_equal(count(out, "] line "), KL_LOG_LIMIT_LINES);
    assert_int_equal(count(out, "[warning] TLS handshake failed: 490 more like "
                                "this in the last 10 s (at most 10 lines per "
                                "10 s are logged; counted in "
                                "keylessd_log_suppressed_total)\n"),
                     1);
    assert_int_equal(count(out, "] second window\n"), 10);
    assert_int_equal(count(out, "TLS handshake failed: 2 more like this in the "
                                "last 10 s"),
                     1);
    assert_int_equal(count(out, "] third window\n"), 10);
    assert_int_equal(count(out, "TLS handshake failed: 2 more like this in the "
                                "last 3 s"),
                     1);
    assert_int_equal(count(out, "more like this"), 3);
    /* the order: the second window's summary before the third's lines */
    assert_true(strstr(out, "2 more like this in the last 10 s") <
                strstr(out, "] third window"));
    free(out);
}

static void test_format_names(void **state)
{
    (void)state;
    assert_int_equal(kl_log_format_parse("text"), KL_LOG_TEXT);
    assert_int_equal(kl_log_format_parse(""), KL_LOG_TEXT);
    assert_int_equal(kl_log_format_parse(NULL), KL_LOG_TEXT);
    assert_int_equal(kl_log_format_parse("json"), KL_LOG_JSON);
    assert_true(kl_log_format_known("text"));
    assert_true(kl_log_format_known(""));
    assert_true(kl_log_format_known(NULL));
    assert_true(kl_log_format_known("json"));
    assert_false(kl_log_format_known("JSON "));
    assert_false(kl_log_format_known("logfmt"));
    assert_int_equal(kl_log_format_parse("logfmt"), KL_LOG_TEXT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text),         cmocka_unit_test(test_json),
        cmocka_unit_test(test_format_names), cmocka_unit_test(test_escaped),
        cmocka_unit_test(test_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
