/* SPDX-License-Identifier: Apache-2.0 */
/* src/tls over a socketpair: the P1 profile, client-certificate rules, and
 * context errors that name the file. Certificates are made with the openssl
 * CLI in a temporary directory. */
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tls/tls.h"
#include "tlstest.h"

/* A CA, a server cert, a client cert (clientAuth), a serverAuth-only
 * client cert, and a client cert from another CA. */
static int make_pki(void **state)
{
    (void)state;
    if (tt_mkdir("/tmp/kl-tls-XXXXXX") != 0)
        return -1;
    tt_ca("ca", "test-ca");
    tt_ca("other", "other-ca");
    const char *san = "DNS:localhost,IP:127.0.0.1";
    tt_leaf("server", "localhost", "serverAuth", san, "ca");
    tt_leaf("client", "edge-client", "clientAuth", san, "ca");
    tt_leaf("srvonly", "wrong-eku", "serverAuth", san, "ca");
    tt_leaf("stranger", "stranger", "clientAuth", san, "other");
    tu_sh_in(tt_dir, "openssl genpkey -algorithm ed25519 -out unrelated.key");
    tu_sh_in(tt_dir, "echo 'not a certificate' > junk.pem");
    return 0;
}

/* Drives both ends of a non-blocking socketpair until both finish or one
 * fails. Returns the server's and the client's final results. */
static void handshake_pair(kl_tls_ctx *sctx, kl_tls_ctx *cctx, kl_io *sres,
                           kl_io *cres, char *serr, size_t serrlen, char *peer,
                           size_t peerlen)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    kl_tls_conn *s = kl_tls_conn_new(sctx, sv[0], true, NULL);
    kl_tls_conn *c = kl_tls_conn_new(cctx, sv[1], false, "localhost");
    assert_non_null(s);
    assert_non_null(c);
    kl_io rs = KL_IO_WANT_READ, rc = KL_IO_WANT_READ;
    bool sdone = false, cdone = false;
    for (int i = 0; i < 200 && !(sdone && cdone); i++) {
        if (!cdone) {
            rc = kl_tls_handshake(c);
            cdone = rc != KL_IO_WANT_READ && rc != KL_IO_WANT_WRITE;
        }
        if (!sdone) {
            rs = kl_tls_handshake(s);
            sdone = rs != KL_IO_WANT_READ && rs != KL_IO_WANT_WRITE;
        }
        if (sdone && rs != KL_IO_OK)
            break;
    }
    /* TLS 1.3: the client finishes first; the server's verdict on the
     * client certificate comes with its last flight. Give the client a
     * read so that it sees a refusal alert. */
    if (rs == KL_IO_OK && rc == KL_IO_OK) {
        const char ping[] = "x";
        size_t n;
        assert_int_equal(kl_tls_write(c, ping, 1, &n), KL_IO_OK);
        char buf[8];
        kl_io r = KL_IO_WANT_READ;
        for (int i = 0; i < 50 && r == KL_IO_WANT_READ; i++)
            r = kl_tls_read(s, buf, sizeof buf, &n);
        assert_int_equal(r, KL_IO_OK);
        assert_int_equal(n, 1);
        snprintf(peer, peerlen, "%s", kl_tls_peer_name(s));
    }
    snprintf(serr, serrlen, "%s", rs == KL_IO_OK ? "" : kl_tls_last_error(s));
    *sres = rs;
    *cres = rc;
    kl_tls_conn_free(s);
    kl_tls_conn_free(c);
    close(sv[0]);
    close(sv[1]);
}

static kl_tls_ctx *server_ctx(bool no13)
{
    kl_tls_opts o = {.cert_file = tt_path("server.pem"),
                     .key_file = tt_path("server.key"),
                     .ca_file = tt_path("ca.pem"),
                     .disable_tls13 = no13};
    char err[512];
    kl_tls_ctx *ctx = kl_tls_server_ctx_new(&o, err, sizeof err);
    if (!ctx)
        fail_msg("server ctx: %s", err);
    return ctx;
}

static kl_tls_ctx *client_ctx(const char *who, bool tls12)
{
    char cert[64], key[64];
    snprintf(cert, sizeof cert, "%s.pem", who);
    snprintf(key, sizeof key, "%s.key", who);
    kl_tls_opts o = {.cert_file = who ? tt_path(cert) : NULL,
                     .key_file = who ? tt_path(key) : NULL,
                     .ca_file = tt_path("ca.pem"),
                     .tls12_only = tls12};
    char err[512];
    kl_tls_ctx *ctx = kl_tls_client_ctx_new(&o, err, sizeof err);
    if (!ctx)
        fail_msg("client ctx: %s", err);
    return ctx;
}

static void check(const char *who, bool tls12, bool expect_ok)
{
    kl_tls_ctx *s = server_ctx(false), *c = client_ctx(who, tls12);
    kl_io rs, rc;
    char serr[300], peer[128] = "";
    handshake_pair(s, c, &rs, &rc, serr, sizeof serr, peer, sizeof peer);
    if (expect_ok) {
        assert_int_equal(rs, KL_IO_OK);
        assert_string_equal(peer, "edge-client");
    } else {
        assert_int_equal(rs, KL_IO_ERROR);
        assert_true(strlen(serr) > 0);
    }
    kl_tls_ctx_free(s);
    kl_tls_ctx_free(c);
}

static void test_good_client_tls13(void **st)
{
    (void)st;
    check("client", false, true);
}
static void test_good_client_tls12(void **st)
{
    (void)st;
    check("client", true, true);
}
static void test_no_cert_refused(void **st)
{
    (void)st;
    check(NULL, false, false);
    check(NULL, true, false);
}
static void test_other_ca_refused(void **st)
{
    (void)st;
    check("stranger", false, false);
    check("stranger", true, false);
}
static void test_server_auth_only_refused(void **st)
{
    (void)st;
    check("srvonly", false, false);
    check("srvonly", true, false);
}

static void test_tls12_profile_negotiated(void **st)
{
    (void)st;
    kl_tls_ctx *s = server_ctx(true), *c = client_ctx("client", false);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    kl_tls_conn *a = kl_tls_conn_new(s, sv[0], true, NULL);
    kl_tls_conn *b = kl_tls_conn_new(c, sv[1], false, "localhost");
    kl_io ra = KL_IO_WANT_READ, rb = KL_IO_WANT_READ;
    for (int i = 0; i < 100 && (ra != KL_IO_OK || rb != KL_IO_OK); i++) {
        if (rb != KL_IO_OK)
            rb = kl_tls_handshake(b);
        if (ra != KL_IO_OK)
            ra = kl_tls_handshake(a);
        assert_true(ra != KL_IO_ERROR && rb != KL_IO_ERROR);
    }
    assert_string_equal(kl_tls_version(a), "TLSv1.2");
    /* P1: the ECDSA server key picks the ECDSA suite of the profile */
    assert_string_equal(kl_tls_cipher(a), "ECDHE-ECDSA-AES256-GCM-SHA384");
    kl_tls_conn_free(a);
    kl_tls_conn_free(b);
    close(sv[0]);
    close(sv[1]);
    kl_tls_ctx_free(s);
    kl_tls_ctx_free(c);
}

static void expect_ctx_error(const char *cert, const char *key, const char *ca,
                             const char *needle)
{
    kl_tls_opts o = {.cert_file = cert ? tt_path(cert) : NULL,
                     .key_file = key ? tt_path(key) : NULL,
                     .ca_file = ca ? tt_path(ca) : NULL};
    char err[512] = "";
    kl_tls_ctx *ctx = kl_tls_server_ctx_new(&o, err, sizeof err);
    assert_null(ctx);
    if (!strstr(err, needle))
        fail_msg("error '%s' lacks '%s'", err, needle);
}

static void test_ctx_errors_name_files(void **st)
{
    (void)st;
    expect_ctx_error("server.pem", "unrelated.key", "ca.pem", "does not match");
    expect_ctx_error("server.pem", "unrelated.key", "ca.pem", "unrelated.key");
    expect_ctx_error("missing.pem", "server.key", "ca.pem", "missing.pem");
    expect_ctx_error("server.pem", "server.key", "junk.pem",
                     "holds no PEM certificate");
    expect_ctx_error("server.pem", "server.key", "nothere.pem", "nothere.pem");
    expect_ctx_error("server.pem", "server.key", NULL, "CA file");
    /* a key where the certificate belongs */
    expect_ctx_error("server.key", "server.key", "ca.pem", "server.key");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_client_tls13),
        cmocka_unit_test(test_good_client_tls12),
        cmocka_unit_test(test_no_cert_refused),
        cmocka_unit_test(test_other_ca_refused),
        cmocka_unit_test(test_server_auth_only_refused),
        cmocka_unit_test(test_tls12_profile_negotiated),
        cmocka_unit_test(test_ctx_errors_name_files),
    };
    return cmocka_run_group_tests(tests, make_pki, tt_remove);
}
