/* SPDX-License-Identifier: Apache-2.0 */
/* Logging (src/core/log.c): the text format as before, and log_format
 * json (issue 11) - one valid JSON object per line with time, level, msg
 * and the call's fields, whatever bytes the message holds; under systemd
 * (JOURNAL_STREAM) the "<N>" priority prefix stays in both formats. Each
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
    assert_non_null(strstr(out, "keylessd: [warning] two lines\n"));
    assert_null(strstr(out, "not shown"));
    assert_null(strstr(out, "r-1")); /* fields are for json */
    free(out);
    out = capture(text_lines, true);
    assert_string_equal(out, "<6>keylessd: [info] hello 42\n"
                             "<4>keylessd: [warning] two lines\n");
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

static void test_format_names(void **state)
{
    (void)state;
    assert_int_equal(kl_log_format_parse("text"), KL_LOG_TEXT);
    assert_int_equal(kl_log_format_parse(""), KL_LOG_TEXT);
    assert_int_equal(kl_log_format_parse(NULL), KL_LOG_TEXT);
    assert_int_equal(kl_log_format_parse("json"), KL_LOG_JSON);
    assert_int_equal(kl_log_format_parse("JSON "), -1);
    assert_int_equal(kl_log_format_parse("logfmt"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_format_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
