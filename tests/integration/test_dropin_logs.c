/* SPDX-License-Identifier: Apache-2.0 */
/* Logs (docs/OPERATIONS.md "Logs"): quiet at the default level (nothing per
 * successful request), one line per error response with the client's
 * certificate name and the request id of tag 0x16, at most 10 such lines per
 * second and shard with the rest counted, one line per refused connection, and
 * the journal's format when JOURNAL_STREAM is set. */
#include "daemon.h"
#include "pki.h"
#include "slowkey.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *dir;
static uint8_t ec_ski[20];
static const uint8_t digest[32] = {7, 7, 7};

static int setup(void **state)
{
    dir = tp_tempdir("logs");
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    EVP_PKEY *pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    tp_ski(pub, ec_ski);
    EVP_PKEY_free(pub);
    return 0;
}

static int teardown(void **state)
{
    tp_rmtree(dir);
    return 0;
}

static size_t count(const char *log, const char *what)
{
    size_t n = 0;
    for (const char *p = log; (p = strstr(p, what)); p++)
        n++;
    return n;
}

static void test_quiet_by_default(void **state)
{
    td_daemon d;
    td_opts o = {.name = "logs-quiet",
                 .key_dirs = dir,
                 .extra = (const char *[]){"--loglevel=1", NULL}};
    td_start(&d, &o);
    kl_client *c = td_connect(&d);
    for (int i = 0; i < 50; i++) {
        kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                             .payload = digest,
                             .payload_len = 32,
                             .ski = ec_ski};
        kl_client_result r;
        td_call(&d, c, &s, &r);
        assert_int_equal(r.opcode, KL_OP_RESPONSE);
        kl_client_result_free(&r);
        td_expect_ping(&d, c);
    }
    kl_client_close(c);
    assert_int_equal(td_stop(&d, 0), 0);
    char *log = td_read_log(&d);
    /* startup, the stop signal, the summary (the 2 connections: td_start's
     * probe and the client): nothing else */
    assert_int_equal(count(log, "\n"), 3);
    assert_int_equal(count(log, "[info] listening on 127.0.0.1:"), 1);
    assert_int_equal(count(log, "[info] Terminated: stopping"), 1);
    assert_int_equal(count(log, "[info] stopped: 2 connections, 100 requests, "
                                "0 errors"),
                     1);
    free(log);
}

static void test_error_lines(void **state)
{
    /* the key on a token that takes 300 ms per operation (slowkey.h) */
    td_daemon d;
    td_opts o = {.name = "logs-errors",
                 .slow_key =
                     td_slow_key(tp_path("keys/ecdsa-p256.key"), 300, 1),
                 .extra = (const char *[]){"--loglevel=1", NULL}};
    td_start(&d, &o);
    kl_client *c = td_connect(&d);
    uint8_t other[20];
    memset(other, 0x42, sizeof other);
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                         .payload = digest,
                         .payload_len = 32,
                         .ski = other,
                         .req_context = "{\"request_id\":\"req-42\"}"};
    td_expect_error(&d, c, &s, KL_ERR_KEY_NOT_FOUND);
    /* the server's own failure: a deadline that passes while the request
     * waits (the token takes 300 ms, the deadline is 20 ms) */
    s.ski = ec_ski;
    s.req_context = "{\"request_id\":\"late-7\",\"deadline_ms\":20}";
    td_expect_error(&d, c, &s, KL_ERR_INTERNAL);
    /* a control character in the id does not reach the log */
    s.ski = other;
    s.req_context = "{\"request_id\":\"a\\u001bb\"}";
    td_expect_error(&d, c, &s, KL_ERR_KEY_NOT_FOUND);

    char *log = td_read_log(&d);
    const char *p =
        strstr(log, "(request_id req-42): key not found due to no matching "
                    "SKI/SNI/ServerIP: ");
    assert_non_null(p);
    assert_non_null(strstr(log, "(client keyless dev client): request "));
    assert_non_null(strstr(p, tp_ski_hex(other)));
    p = strstr(log, "[warning] connection 127.0.0.1:");
    assert_non_null(p);
    assert_non_null(strstr(p, "(request_id late-7): internal error"));
    assert_non_null(strstr(log, "(request_id a?b): key not found due"));
    free(log);

    /* at most 10 lines per second and shard; the rest is counted */
    s.req_context = NULL;
    for (int i = 0; i < 30; i++)
        td_expect_error(&d, c, &s, KL_ERR_KEY_NOT_FOUND);
    usleep(1100000);
    td_expect_error(&d, c, &s, KL_ERR_KEY_NOT_FOUND);
    kl_client_close(c);
    assert_int_equal(td_stop(&d, 0), 0);
    log = td_read_log(&d);
    size_t lines = count(log, ": key not found due");
    /* 10 lines per window: the 3 above and 7 of the 30 (or, if a second
     * passed meanwhile, a few more), then the last one, which carries the
     * count of those left out */
    assert_true(lines >= 10 && lines <= 20);
    assert_non_null(strstr(log, " error responses not logged)"));
    free(log);
}

/* Sampled access lines: with access_log_sample_rate 1 every
 * successful operation has one info line with the request's fields - as
 * JSON members with log_format: json; errors keep their own lines. */
static void test_access_lines_json(void **state)
{
    td_daemon d;
    td_opts o = {.name = "logs-access",
                 .key_dirs = dir,
                 .extra = (const char *[]){"--loglevel=1",
                                           "--access-log-sample-rate=1",
                                           "--log-format=json", NULL}};
    td_start(&d, &o);
    kl_client *c = td_connect(&d);
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                         .payload = digest,
                         .payload_len = 32,
                         .ski = ec_ski,
                         .req_context = "{\"request_id\":\"acc-1\"}"};
    for (int i = 0; i < 5; i++) {
        kl_client_result r;
        td_call(&d, c, &s, &r);
        assert_int_equal(r.opcode, KL_OP_RESPONSE);
        kl_client_result_free(&r);
    }
    uint8_t other[20];
    memset(other, 0x42, sizeof other);
    s.ski = other;
    td_expect_error(&d, c, &s, KL_ERR_KEY_NOT_FOUND);
    kl_client_close(c);
    assert_int_equal(td_stop(&d, 0), 0);
    char *log = td_read_log(&d);
    char want[128];
    snprintf(want, sizeof want, "\"ski\":\"%s\"", tp_ski_hex(ec_ski));
    size_t n = 0;
    for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strstr(line, " ok\"") || !strstr(line, "\"level\":\"info\""))
            continue;
        n++;
        assert_true(line[0] == '{');
        assert_non_null(strstr(line, "\"request_id\":\"acc-1\""));
        assert_non_null(strstr(line, "\"client\":\"keyless dev client\""));
        assert_non_null(strstr(line, "\"opcode\":\"OpECDSASignSHA256\""));
        assert_non_null(strstr(line, want));
    }
    assert_int_equal(n, 5); /* one per success, none for the error */
    free(log);
}

/* A refused client certificate: one warning line, naming the client. */
static void test_refused_connection_one_line(void **state)
{
    td_daemon d;
    td_opts o = {.name = "logs-refused",
                 .key_dirs = dir,
                 .extra = (const char *[]){"--loglevel=1", NULL}};
    td_start(&d, &o);
    kl_client_opts co = td_client_opts(&d);
    co.cert_file = tp_path("client-other-ca.crt");
    co.key_file = tp_path("client-other-ca.key");
    kl_client *c = NULL;
    char err[256];
    kl_status st = kl_client_connect(&co, &c, err, sizeof err);
    if (st == KL_OK) {
        /* TLS 1.3: the refusal arrives after the client's Finished */
        kl_request_spec s = {.opcode = KL_OP_PING};
        kl_client_result r;
        st = kl_client_call(c, &s, 5000, &r);
        assert_int_not_equal(st, KL_OK);
        kl_client_close(c);
    }
    usleep(100000);
    assert_int_equal(td_stop(&d, 0), 0);
    char *log = td_read_log(&d);
    assert_int_equal(count(log, "TLS handshake failed"), 1);
    const char *p = strstr(log, "[warning] connection 127.0.0.1:");
    assert_non_null(p);
    assert_non_null(strstr(p, "TLS handshake failed"));
    assert_non_null(strstr(p, "client of another CA"));
    free(log);
}

/* Under systemd: no timestamps, "<N>" syslog priorities, one line each. */
static void test_journal_format(void **state)
{
    setenv("JOURNAL_STREAM", "8:123456", 1);
    td_daemon d;
    td_opts o = {.name = "logs-journal",
                 .key_dirs = dir,
                 .extra = (const char *[]){"--loglevel=1", NULL}};
    td_start(&d, &o);
    unsetenv("JOURNAL_STREAM");
    kl_client *c = td_connect(&d);
    uint8_t other[20];
    memset(other, 0x43, sizeof other);
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                         .payload = digest,
                         .payload_len = 32,
                         .ski = other};
    td_expect_error(&d, c, &s, KL_ERR_KEY_NOT_FOUND);
    kl_client_close(c);
    assert_int_equal(td_stop(&d, 0), 0);
    char *log = td_read_log(&d);
    assert_int_equal(strncmp(log, "<6>keylessd: [info] listening on ", 33), 0);
    assert_non_null(strstr(log, "\n<6>keylessd: [info] connection "));
    /* every line starts with a priority, none with a date */
    for (const char *line = log; *line; line = strchr(line, '\n') + 1) {
        assert_int_equal(line[0], '<');
        assert_true(line[2] == '>');
        if (!strchr(line, '\n'))
            break;
    }
    assert_null(strstr(log, "Z keylessd"));
    free(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quiet_by_default),
        cmocka_unit_test(test_error_lines),
        cmocka_unit_test(test_access_lines_json),
        cmocka_unit_test(test_refused_connection_one_line),
        cmocka_unit_test(test_journal_format),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
