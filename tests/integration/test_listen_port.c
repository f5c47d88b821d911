/* SPDX-License-Identifier: Apache-2.0 */
/* A port already in use (docs/OPERATIONS.md, "Handover"): a second keylessd
 * on the port of a running one refuses to start, naming the address, the
 * port and listen_reuseport, instead of sharing the port through
 * SO_REUSEPORT (clients would land on either process at random). With
 * listen_reuseport: true it starts beside the first, which can then stop
 * without a refused connection. Connections of a stopped keylessd left in
 * TIME_WAIT do not count as another process. */
#include "daemon.h"
#include "pki.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char *keydir;

static int setup(void **state)
{
    (void)state;
    keydir = tp_tempdir("listen-port");
    tp_copy_key(keydir, tp_path("keys/ecdsa-p256.key"));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tp_rmtree(keydir);
    return 0;
}

static void start(td_daemon *d, const char *name, uint16_t port,
                  const char *const *extra)
{
    td_opts o = {
        .name = name, .key_dirs = keydir, .port = port, .extra = extra};
    td_start(d, &o);
}

/* Waits up to ms for needle in the daemon's log. */
static void wait_log(const td_daemon *d, const char *needle, int ms)
{
    double until = td_now_ms() + ms;
    for (;;) {
        char *log = td_read_log(d);
        bool found = log && strstr(log, needle);
        free(log);
        if (found)
            return;
        if (td_now_ms() > until)
            break;
        usleep(20000);
    }
    td_dump_log(d);
    fail_msg("%s: \"%s\" not logged within %d ms", d->name, needle, ms);
}

/* A listening socket on 127.0.0.1 and an ephemeral port (*port), with
 * SO_REUSEPORT when share. */
static int listener(bool share, uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    assert_true(fd >= 0);
    if (share)
        assert_int_equal(
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one), 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 16), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static void ping(const td_daemon *d)
{
    kl_client *c = td_connect(d);
    td_expect_ping(d, c);
    kl_client_close(c);
}

/* keylessd on port with the test PKI and the extra flags; its exit status
 * and output (malloc'd) in *out. */
static int run_on(uint16_t port, const char *extra, char **out)
{
    char bin[1024], a_port[32], a_cert[1100], a_key[1100], a_ca[1100],
        a_kd[1100];
    snprintf(bin, sizeof bin, "%s/keylessd", tu_bin_dir());
    snprintf(a_port, sizeof a_port, "--port=%u", port);
    snprintf(a_cert, sizeof a_cert, "--auth-cert=%s", tp_path("server.crt"));
    snprintf(a_key, sizeof a_key, "--auth-key=%s", tp_path("server.key"));
    snprintf(a_ca, sizeof a_ca, "--cloudflare-ca-cert=%s", tp_path("ca.crt"));
    snprintf(a_kd, sizeof a_kd, "--private-key-dirs=%s", keydir);
    const char *argv[] = {bin,          "--listen-address=127.0.0.1",
                          a_port,       a_cert,
                          a_key,        a_ca,
                          a_kd,         "--metrics-port=0",
                          "--shards=2", "--workers=1",
                          extra,        NULL};
    return td_run(argv, out, 15000);
}

/* The bug: the second keylessd started and took half the connections. */
static void test_second_keylessd_refused(void **state)
{
    (void)state;
    td_daemon a;
    start(&a, "port-first", 0, NULL);
    char *out = NULL;
    int rc = run_on(a.port, NULL, &out);
    char want[256];
    snprintf(want, sizeof want,
             "cannot listen on 127.0.0.1:%u: address already in use: another "
             "process is listening on port %u; stop it, change port, or set "
             "listen_reuseport: true to share the port for a handover",
             a.port, a.port);
    if (rc != 1 || !strstr(out, want))
        fail_msg("second keylessd: status %d (want 1), want\n  %s\ngot:\n%s",
                 rc, want, out);
    free(out);
    /* the first one is untouched */
    ping(&a);
    assert_int_equal(td_stop(&a, 0), 0);
}

/* A process of another kind that shares its port too (SO_REUSEPORT, as
 * nginx's `reuseport` does) is refused the same way; so is a plain one. */
static void test_foreign_listener_refused(void **state)
{
    (void)state;
    for (int share = 0; share < 2; share++) {
        uint16_t port;
        int fd = listener(share, &port);
        char *out = NULL;
        int rc = run_on(port, NULL, &out);
        if (rc != 1 || !strstr(out, "another process is listening on port"))
            fail_msg("SO_REUSEPORT %d: status %d (want 1):\n%s", share, rc,
                     out);
        free(out);
        close(fd);
    }
}

/* listen_reuseport: true shares the port with the running keylessd; the
 * old one stops and the new one goes on serving on the same port. */
static void test_handover_with_option(void **state)
{
    (void)state;
    td_daemon a, b;
    start(&a, "port-old", 0, NULL);
    static const char *const share[] = {"--listen-reuseport=true", NULL};
    start(&b, "port-new", a.port, share);
    /* td_start saw the port accept (the old one listens there): the new
     * one's own line says that it listens too */
    char line[64];
    snprintf(line, sizeof line, "listening on 127.0.0.1:%u", a.port);
    wait_log(&b, line, 10000);
    ping(&b);
    assert_int_equal(td_stop(&a, 0), 0);
    for (int i = 0; i < 5; i++)
        ping(&b);
    assert_int_equal(td_stop(&b, 0), 0);
}

/* A restart right after a stop that closed connections: the old
 * connections in TIME_WAIT are not a listener. */
static void test_restart_after_time_wait(void **state)
{
    (void)state;
    td_daemon a, b;
    start(&a, "port-before", 0, NULL);
    /* a connection still in its handshake: the server closes it first
     * when it stops, so its side ends in TIME_WAIT once we close ours */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(a.port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    usleep(100000); /* accepted */
    assert_int_equal(td_stop(&a, 0), 0);
    char byte;
    assert_int_equal(read(fd, &byte, 1), 0); /* the server's FIN */
    close(fd);
    start(&b, "port-after", a.port, NULL);
    ping(&b);
    assert_int_equal(td_stop(&b, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_second_keylessd_refused),
        cmocka_unit_test(test_foreign_listener_refused),
        cmocka_unit_test(test_handover_with_option),
        cmocka_unit_test(test_restart_after_time_wait),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
