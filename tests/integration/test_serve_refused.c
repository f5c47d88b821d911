/* SPDX-License-Identifier: Apache-2.0 */
/* Protocol P1: clients without a valid certificate are refused - no
 * certificate, one from another CA, a serverAuth-only one - over TLS 1.2
 * and TLS 1.3 (where the refusal comes after the client's handshake): no
 * response, and the connection closed within 1 s. A silent TCP connect is
 * closed at the handshake timeout. */
#include "daemon.h"
#include "pki.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static td_daemon d;
static char *dir;

static int setup(void **state)
{
    dir = tp_tempdir("refused");
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    static const char *const extra[] = {"--handshake-timeout=1s", NULL};
    td_opts o = {.name = "refused", .key_dirs = dir, .extra = extra};
    td_start(&d, &o);
    return 0;
}

static int teardown(void **state)
{
    int st = td_stop(&d, 0);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

/* Connects with the given identity and sends a ping; the server must
 * answer nothing and close within 1 s of the start. */
static void expect_refused(const char *what, const char *cert, const char *key,
                           bool tls12)
{
    kl_client_opts o = td_client_opts(&d);
    o.cert_file = cert;
    o.key_file = key;
    o.tls12_only = tls12;
    kl_client *c = NULL;
    char err[512] = "";
    double t0 = td_now_ms();
    kl_status st = kl_client_connect(&o, &c, err, sizeof err);
    if (st == KL_OK) {
        /* TLS 1.3: the client's handshake completes before the server has
         * checked its certificate; the refusal arrives afterwards. */
        static const uint8_t p[] = "hello?";
        kl_request_spec s = {
            .opcode = KL_OP_PING, .payload = p, .payload_len = sizeof p};
        uint32_t id;
        kl_client_result r;
        assert_int_equal(kl_client_send(c, &s, &id), KL_OK);
        /* the write may already fail: the refusal is what we wait for */
        kl_status fst = kl_client_flush(c, 3000);
        (void)fst;
        st = kl_client_recv(c, 3000, &r);
        if (st == KL_OK)
            fail_msg("%s (%s): the server answered (opcode 0x%02x)", what,
                     tls12 ? "TLS 1.2" : "TLS 1.3", r.opcode);
        if (st == KL_E_TIMEOUT)
            fail_msg("%s (%s): connection still open after 3 s", what,
                     tls12 ? "TLS 1.2" : "TLS 1.3");
        snprintf(err, sizeof err, "%s", kl_client_last_error(c));
        kl_client_close(c);
    }
    double ms = td_now_ms() - t0;
    print_message("%s over %s: refused after %.0f ms: %s\n", what,
                  tls12 ? "TLS 1.2" : "TLS 1.3", ms, err);
    if (ms > 1000.0)
        fail_msg("%s (%s): closed only after %.0f ms (limit 1000)", what,
                 tls12 ? "TLS 1.2" : "TLS 1.3", ms);
}

static void test_no_certificate(void **state)
{
    expect_refused("no client certificate", NULL, NULL, false);
    expect_refused("no client certificate", NULL, NULL, true);
}

static void test_certificate_from_another_ca(void **state)
{
    expect_refused("certificate from another CA",
                   tp_path("client-other-ca.crt"),
                   tp_path("client-other-ca.key"), false);
    expect_refused("certificate from another CA",
                   tp_path("client-other-ca.crt"),
                   tp_path("client-other-ca.key"), true);
}

static void test_server_auth_only_certificate(void **state)
{
    expect_refused("serverAuth-only certificate",
                   tp_path("client-serverauth.crt"),
                   tp_path("client-serverauth.key"), false);
    expect_refused("serverAuth-only certificate",
                   tp_path("client-serverauth.crt"),
                   tp_path("client-serverauth.key"), true);
}

/* After all the refusals, a proper client is still served, on both
 * versions. */
static void test_valid_client_still_served(void **state)
{
    for (int v = 0; v < 2; v++) {
        kl_client_opts o = td_client_opts(&d);
        o.tls12_only = v == 1;
        kl_client *c = NULL;
        char err[512];
        if (kl_client_connect(&o, &c, err, sizeof err) != KL_OK)
            fail_msg("valid client refused: %s", err);
        assert_string_equal(kl_client_tls_version(c),
                            v ? "TLSv1.2" : "TLSv1.3");
        td_expect_ping(&d, c);
        kl_client_close(c);
    }
}

static int tcp_connect_loopback(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* Waits for the server to close fd; returns the elapsed ms (or -1). */
static double wait_closed(int fd, int limit_ms)
{
    double t0 = td_now_ms();
    for (;;) {
        int left = limit_ms - (int)(td_now_ms() - t0);
        if (left <= 0)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        char b[256];
        ssize_t n = read(fd, b, sizeof b);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return td_now_ms() - t0;
        if (n < 0)
            return -1;
        /* bytes before the close (an alert): keep reading */
    }
}

/* A connect that never starts the handshake is closed at the handshake
 * timeout (1 s here). */
static void test_silent_connect_closed_at_handshake_timeout(void **state)
{
    int fd = tcp_connect_loopback(d.port);
    double ms = wait_closed(fd, 6000);
    close(fd);
    print_message("silent connect closed after %.0f ms\n", ms);
    if (ms < 0)
        fail_msg("a silent connection was not closed within 6 s "
                 "(--handshake-timeout=1s)");
    if (ms < 800 || ms > 3000)
        fail_msg("silent connection closed after %.0f ms, expected about "
                 "1000 (800..3000)",
                 ms);
}

/* A handshake that starts and stalls (half a ClientHello) is closed at
 * the handshake timeout too. */
static void test_stalled_handshake_closed(void **state)
{
    int fd = tcp_connect_loopback(d.port);
    /* a TLS record header announcing 512 bytes, then nothing */
    static const uint8_t part[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01};
    assert_int_equal(write(fd, part, sizeof part), (ssize_t)sizeof part);
    double ms = wait_closed(fd, 6000);
    close(fd);
    if (ms < 0)
        fail_msg("a stalled handshake was not closed within 6 s");
    if (ms < 800 || ms > 3000)
        fail_msg("stalled handshake closed after %.0f ms, expected about "
                 "1000 (800..3000)",
                 ms);
}

/* P1: a connect followed by a close before the handshake is a load
 * balancer's health check, logged at debug level only. */
static void test_health_check_logged_at_debug(void **state)
{
    int fd = tcp_connect_loopback(d.port);
    struct sockaddr_in me;
    socklen_t ml = sizeof me;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&me, &ml), 0);
    close(fd);
    char who[64];
    snprintf(who, sizeof who, "127.0.0.1:%u", ntohs(me.sin_port));
    /* the log line is written by another process: wait for it */
    char *line = NULL;
    for (int i = 0; i < 200 && !line; i++) {
        char *log = td_read_log(&d);
        char *at = strstr(log, who);
        if (at) {
            char *start = at;
            while (start > log && start[-1] != '\n')
                start--;
            char *end = strchr(at, '\n');
            line = strndup(start, end ? (size_t)(end - start) : strlen(start));
        }
        free(log);
        if (!line)
            usleep(10000);
    }
    if (!line)
        fail_msg("no log line mentions the health check from %s", who);
    print_message("%s\n", line);
    assert_non_null(strstr(line, "[debug]"));
    free(line);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_certificate),
        cmocka_unit_test(test_certificate_from_another_ca),
        cmocka_unit_test(test_server_auth_only_certificate),
        cmocka_unit_test(test_valid_client_still_served),
        cmocka_unit_test(test_silent_connect_closed_at_handshake_timeout),
        cmocka_unit_test(test_stalled_handshake_closed),
        cmocka_unit_test(test_health_check_logged_at_debug),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
