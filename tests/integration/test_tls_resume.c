/* SPDX-License-Identifier: Apache-2.0 */
/* Session resumption against a running keylessd (reconnect
 * storms; docs/DESIGN.md "Limits and backpressure"): a client that got a
 * session resumes it on its next connection
 * - also when its first connection ended without close_notify, as edges'
 * often do - with TLS 1.3 and TLS 1.2, and the resumed connection serves
 * requests. A raw OpenSSL client, so that the session and the way the
 * connection ends are the test's. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "daemon.h"
#include "keyless/protocol.h"
#include "net.h"
#include "pki.h"
#include "testutil.h"

static td_daemon d;

static int setup(void **state)
{
    (void)state;
    td_opts o = {.name = "tls-resume",
                 .key_files = tp_path("keys/ecdsa-p256.key")};
    td_start(&d, &o);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(td_stop(&d, 0), 0);
    return 0;
}

/* Connects (resuming sess when not NULL), pings, and returns the
 * connection's session; *reused tells whether it was resumed. With
 * notify, the connection ends with close_notify; without, the socket is
 * just closed, as a crashed or impatient edge does. */
static SSL_SESSION *one_connection(SSL_CTX *ctx, SSL_SESSION *sess, bool notify,
                                   bool *reused)
{
    int fd = tn_tcp_from(NULL, d.port);
    SSL *ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (sess)
        assert_int_equal(SSL_set_session(ssl, sess), 1);
    if (SSL_connect(ssl) != 1) {
        ERR_print_errors_fp(stderr);
        fail_msg("handshake failed");
    }
    *reused = SSL_session_reused(ssl) == 1;
    /* a ping, answered with a pong carrying the same id (protocol P5);
     * reading it also takes in TLS 1.3's session ticket */
    kl_request_spec ping = {.opcode = KL_OP_PING, .id = 77};
    uint8_t msg[2048], in[2048];
    size_t len;
    assert_int_equal(kl_request_encode(msg, sizeof msg, &ping, &len), KL_OK);
    assert_int_equal(SSL_write(ssl, msg, (int)len), (int)len);
    size_t got = 0;
    while (got < KL_HEADER_LEN) {
        int n = SSL_read(ssl, in + got, (int)(sizeof in - got));
        assert_true(n > 0);
        got += (size_t)n;
    }
    kl_header h;
    size_t flen;
    assert_int_equal(kl_frame_peek(in, got, &h, &flen), KL_OK);
    assert_int_equal(h.id, 77);
    SSL_SESSION *out = SSL_get1_session(ssl);
    assert_non_null(out);
    if (notify)
        (void)SSL_shutdown(ssl);
    else /* no alert goes out; only OpenSSL's own client-side rule that
            a session freed without shutdown is spoilt is kept off */
        SSL_set_shutdown(ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    SSL_free(ssl);
    close(fd);
    return out;
}

static void resume(int version, bool notify)
{
    SSL_CTX *ctx = tp_client_resume_ctx(NULL, version);
    bool reused;
    SSL_SESSION *s = one_connection(ctx, NULL, notify, &reused);
    assert_false(reused);
    for (int i = 0; i < 3; i++) { /* again and again from one session */
        SSL_SESSION *next = one_connection(ctx, s, notify, &reused);
        assert_true(reused);
        SSL_SESSION_free(s);
        s = next;
    }
    SSL_SESSION_free(s);
    SSL_CTX_free(ctx);
}

static void test_tls13_resumes_after_abrupt_close(void **state)
{
    (void)state;
    resume(TLS1_3_VERSION, false);
}

static void test_tls13_resumes_after_close_notify(void **state)
{
    (void)state;
    resume(TLS1_3_VERSION, true);
}

static void test_tls12_resumes_after_abrupt_close(void **state)
{
    (void)state;
    resume(TLS1_2_VERSION, false);
}

/* A session this server never issued (from another keylessd) is not
 * resumed: the handshake falls back to a full one and succeeds. */
static void test_foreign_session_is_full_handshake(void **state)
{
    (void)state;
    td_daemon other;
    td_opts o = {.name = "tls-resume-other",
                 .key_files = tp_path("keys/ecdsa-p256.key")};
    td_start(&other, &o);
    SSL_CTX *ctx = tp_client_resume_ctx(NULL, TLS1_3_VERSION);
    bool reused;
    uint16_t mine = d.port;
    d.port = other.port; /* a session from the other server */
    SSL_SESSION *s = one_connection(ctx, NULL, false, &reused);
    d.port = mine;
    SSL_SESSION *again = one_connection(ctx, s, false, &reused);
    assert_false(reused);
    SSL_SESSION_free(again);
    SSL_SESSION_free(s);
    SSL_CTX_free(ctx);
    assert_int_equal(td_stop(&other, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tls13_resumes_after_abrupt_close),
        cmocka_unit_test(test_tls13_resumes_after_close_notify),
        cmocka_unit_test(test_tls12_resumes_after_abrupt_close),
        cmocka_unit_test(test_foreign_session_is_full_handshake),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
