/* SPDX-License-Identifier: Apache-2.0 */
/* Session resumption across a reload (reconnect storms after a
 * reload or a network blip; docs/DESIGN.md "Limits and backpressure"):
 *  - a SIGHUP with the same TLS files (rewritten, so their times change)
 *    and reloads for a key directory or the access lists keep the
 *    server's TLS context and so its session cache: a client with a
 *    cached session resumes, TLS 1.3 and TLS 1.2;
 *  - a changed client CA file starts a new context with an empty cache: a
 *    CA added means a full handshake that succeeds; a CA removed means a
 *    client holding a session made under it is refused (no resumption
 *    past a CA removal), while a client of the new CA is served;
 *  - a changed server certificate (same CA) starts a new context too: the
 *    documented choice (docs/DESIGN.md) is a full handshake.
 * A raw OpenSSL client, so that the sessions are the test's. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
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

static char *dir;
static char cert[1100], key[1100], ca[1100], keys[1100], acl[1100];
static td_daemon d;
static unsigned reloads; /* the daemon's generation after the last one */

/* An access file of n rules, each letting everyone use every key. */
static void write_acl(int n)
{
    FILE *f = fopen(acl, "w");
    assert_non_null(f);
    for (int i = 0; i < n; i++)
        fputs("- clients: [\"*\"]\n  keys: [\"*\"]\n", f);
    fclose(f);
}

/* A fresh daemon serving copies of the test PKI's files (which the tests
 * then rewrite), with one key in a watched directory. */
static int setup(void **state)
{
    (void)state;
    dir = tp_tempdir("tls-resume-reload");
    snprintf(cert, sizeof cert, "%s/server.pem", dir);
    snprintf(key, sizeof key, "%s/server-key.pem", dir);
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    snprintf(keys, sizeof keys, "%s/keys", dir);
    tu_sh("cp %s %s", tp_path("server.crt"), cert);
    tu_sh("cp %s %s", tp_path("server.key"), key);
    tu_sh("chmod 600 %s%s", key, "");
    tu_sh("cp %s %s", tp_path("ca.crt"), ca);
    tu_sh("mkdir -p %s && chmod 700 %s", keys, keys);
    tp_copy_key(keys, tp_path("keys/ecdsa-p256.key"));
    snprintf(acl, sizeof acl, "%s/access.yaml", dir);
    write_acl(1);
    static char acl_flag[1200];
    snprintf(acl_flag, sizeof acl_flag, "--access-file=%s", acl);
    td_opts o = {.name = "tls-resume-reload",
                 .key_dirs = keys,
                 .cert = cert,
                 .key = key,
                 .ca = ca,
                 .extra =
                     (const char *[]){"--watch-delay=50ms", acl_flag, NULL}};
    td_start(&d, &o);
    reloads = 1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(td_stop(&d, 0), 0);
    tp_rmtree(dir);
    return 0;
}

/* Waits (up to 10 s) until the log has a line containing what. */
static void wait_log(const char *what)
{
    double until = td_now_ms() + 10000;
    for (;;) {
        char *log = td_read_log(&d);
        bool found = strstr(log, what) != NULL;
        free(log);
        if (found)
            return;
        if (td_now_ms() > until) {
            td_dump_log(&d);
            fail_msg("\"%s\" did not appear in the log", what);
        }
        usleep(20000);
    }
}

/* Reloads (SIGHUP unless a watched directory already caused one) and
 * waits for the summary line, which says what happened to the TLS
 * context ("new certificate" or "unchanged certificate and CA ..."). */
static void reloaded(bool signal, const char *tls_outcome)
{
    if (signal)
        td_signal(&d, SIGHUP);
    char want[256];
    snprintf(want, sizeof want, "%s; generation %u", tls_outcome, ++reloads);
    wait_log(want);
}

typedef struct outcome {
    bool served;        /* handshake done and a ping answered */
    bool reused;        /* the session was resumed */
    SSL_SESSION *after; /* the connection's session when served */
} outcome;

/* Connects (offering sess when not NULL) and pings. A refused client
 * certificate shows in SSL_connect with TLS 1.2 and, with TLS 1.3 (where
 * the client's certificate follows the server's Finished), as the alert
 * that ends the first read. The connection ends without close_notify, as
 * an edge's often does. */
static outcome connect_once(SSL_CTX *ctx, SSL_SESSION *sess)
{
    outcome out = {0};
    int fd = tn_tcp_from(NULL, d.port);
    SSL *ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (sess)
        assert_int_equal(SSL_set_session(ssl, sess), 1);
    if (SSL_connect(ssl) == 1) {
        out.reused = SSL_session_reused(ssl) == 1;
        kl_request_spec ping = {.opcode = KL_OP_PING, .id = 78};
        uint8_t msg[2048], in[2048];
        size_t len, got = 0;
        assert_int_equal(kl_request_encode(msg, sizeof msg, &ping, &len),
                         KL_OK);
        if (SSL_write(ssl, msg, (int)len) == (int)len) {
            while (got < KL_HEADER_LEN) {
                int n = SSL_read(ssl, in + got, (int)(sizeof in - got));
                if (n <= 0)
                    break;
                got += (size_t)n;
            }
        }
        kl_header h;
        size_t flen;
        out.served = got >= KL_HEADER_LEN &&
                     kl_frame_peek(in, got, &h, &flen) == KL_OK && h.id == 78;
    }
    ERR_clear_error();
    if (out.served) {
        out.after = SSL_get1_session(ssl);
        assert_non_null(out.after);
        SSL_set_shutdown(ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    }
    SSL_free(ssl);
    close(fd);
    return out;
}

/* A session from a full handshake. */
static SSL_SESSION *fresh_session(SSL_CTX *ctx)
{
    outcome o = connect_once(ctx, NULL);
    assert_true(o.served);
    assert_false(o.reused);
    return o.after;
}

/* Offers *sess; expects it resumed (or not) and served; *sess becomes the
 * session of the new connection. */
static void expect_resume(SSL_CTX *ctx, SSL_SESSION **sess, bool reused,
                          const char *when)
{
    outcome o = connect_once(ctx, *sess);
    if (!o.served)
        fail_msg("%s: the connection was not served", when);
    if (o.reused != reused)
        fail_msg("%s: session %s", when,
                 reused ? "not resumed" : "resumed, but must not be");
    SSL_SESSION_free(*sess);
    *sess = o.after;
}

static void test_unchanged_files_keep_sessions(void **state)
{
    (void)state;
    SSL_CTX *c13 = tp_client_resume_ctx("client", TLS1_3_VERSION);
    SSL_CTX *c12 = tp_client_resume_ctx("client", TLS1_2_VERSION);
    SSL_SESSION *s13 = fresh_session(c13), *s12 = fresh_session(c12);

    /* the same bytes, written again: new times, same material */
    sleep(1);
    tu_sh("cp %s %s", tp_path("server.crt"), cert);
    tu_sh("cp %s %s", tp_path("ca.crt"), ca);
    tu_sh("cat %s > %s", tp_path("server.key"), key);
    reloaded(true, "unchanged certificate and CA (TLS sessions kept)");
    expect_resume(c13, &s13, true, "TLS 1.3 after a SIGHUP");
    expect_resume(c12, &s12, true, "TLS 1.2 after a SIGHUP");

    /* a key added to a watched directory: a reload of its own */
    tp_copy_key(keys, tp_path("keys/rsa-2048.key"));
    reloaded(false, "unchanged certificate and CA (TLS sessions kept)");
    wait_log("reloaded: 2 keys (1 added, 0 removed, 0 failed)");
    expect_resume(c13, &s13, true, "TLS 1.3 after a key reload");
    expect_resume(c12, &s12, true, "TLS 1.2 after a key reload");

    /* new access lists: a SIGHUP that takes them up */
    write_acl(2);
    reloaded(true, "unchanged certificate and CA (TLS sessions kept)");
    wait_log("reload: access lists: 2 rule(s)");
    expect_resume(c13, &s13, true, "TLS 1.3 after an access-list reload");
    expect_resume(c12, &s12, true, "TLS 1.2 after an access-list reload");

    SSL_SESSION_free(s13);
    SSL_SESSION_free(s12);
    SSL_CTX_free(c13);
    SSL_CTX_free(c12);
}

static void test_changed_ca_drops_sessions(void **state)
{
    (void)state;
    SSL_CTX *c13 = tp_client_resume_ctx("client", TLS1_3_VERSION);
    SSL_CTX *c12 = tp_client_resume_ctx("client", TLS1_2_VERSION);
    SSL_SESSION *s13 = fresh_session(c13), *s12 = fresh_session(c12);

    /* a CA added: the client's certificate is still accepted, after a
     * full handshake */
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cat %s %s > %s", tp_path("ca.crt"),
             tp_path("other-ca.crt"), ca);
    tu_sh("%s%s", cmd, "");
    reloaded(true, "new certificate");
    expect_resume(c13, &s13, false, "TLS 1.3 after a CA was added");
    expect_resume(c12, &s12, false, "TLS 1.2 after a CA was added");
    /* and the new context resumes its own sessions */
    expect_resume(c13, &s13, true, "TLS 1.3 under the new CA set");
    expect_resume(c12, &s12, true, "TLS 1.2 under the new CA set");

    /* the client's CA removed: its sessions, made when the CA was
     * trusted, must not let it in */
    tu_sh("cp %s %s", tp_path("other-ca.crt"), ca);
    reloaded(true, "new certificate");
    outcome o = connect_once(c13, s13);
    if (o.served)
        fail_msg("TLS 1.3: a client of a removed CA was served (%s)",
                 o.reused ? "resumed" : "full handshake");
    o = connect_once(c12, s12);
    if (o.served)
        fail_msg("TLS 1.2: a client of a removed CA was served (%s)",
                 o.reused ? "resumed" : "full handshake");
    wait_log("certificate verify failed");
    /* a client of the CA now configured is served */
    SSL_CTX *other = tp_client_resume_ctx("client-other-ca", TLS1_3_VERSION);
    SSL_SESSION_free(fresh_session(other));
    SSL_CTX_free(other);

    SSL_SESSION_free(s13);
    SSL_SESSION_free(s12);
    SSL_CTX_free(c13);
    SSL_CTX_free(c12);
}

static void test_changed_identity_drops_sessions(void **state)
{
    (void)state;
    SSL_CTX *c13 = tp_client_resume_ctx("client", TLS1_3_VERSION);
    SSL_SESSION *s13 = fresh_session(c13);
    /* a new certificate for the same key, from the same CA */
    tp_issue_server_cert(dir, key, "/CN=reissued", 200, cert);
    reloaded(true, "new certificate");
    expect_resume(c13, &s13, false, "after a new server certificate");
    expect_resume(c13, &s13, true, "under the new server certificate");
    SSL_SESSION_free(s13);
    SSL_CTX_free(c13);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unchanged_files_keep_sessions,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_changed_ca_drops_sessions, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_changed_identity_drops_sessions,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
