/* SPDX-License-Identifier: Apache-2.0 */
/* Protocol P1, the TLS 1.2 compatibility profile: a TLS 1.2 client offering
 * only ECDHE-ECDSA-AES256-GCM-SHA384 (what the reference's clients use) is
 * served; one offering only an AES-128-GCM suite is refused. The client
 * here is plain OpenSSL, configured suite by suite, independent of
 * src/tls. */
#include "daemon.h"
#include "pki.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

static td_daemon d;
static char *dir;

static int setup(void **state)
{
    dir = tp_tempdir("tls12");
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    td_opts o = {.name = "tls12", .key_dirs = dir};
    td_start(&d, &o);
    return 0;
}

static int teardown(void **state)
{
    int st = td_stop(&d, 0);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

typedef struct conn {
    int fd;
    SSL_CTX *ctx;
    SSL *ssl;
} conn;

/* A blocking TLS 1.2 handshake offering exactly `ciphers`; returns
 * whether it completed. */
static bool tls12_connect(conn *k, const char *ciphers)
{
    memset(k, 0, sizeof *k);
    k->ctx = tp_client_ssl_ctx(NULL);
    assert_int_equal(SSL_CTX_set_min_proto_version(k->ctx, TLS1_2_VERSION), 1);
    assert_int_equal(SSL_CTX_set_max_proto_version(k->ctx, TLS1_2_VERSION), 1);
    assert_int_equal(SSL_CTX_set_cipher_list(k->ctx, ciphers), 1);

    k->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(k->fd >= 0);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(k->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(d.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(k->fd, (struct sockaddr *)&a, sizeof a), 0);
    k->ssl = SSL_new(k->ctx);
    assert_non_null(k->ssl);
    SSL_set_fd(k->ssl, k->fd);
    SSL_set1_host(k->ssl, "localhost");
    SSL_set_tlsext_host_name(k->ssl, "localhost");
    bool ok = SSL_connect(k->ssl) == 1;
    if (!ok) {
        char e[256];
        ERR_error_string_n(ERR_peek_last_error(), e, sizeof e);
        print_message("TLS 1.2 with %s refused: %s\n", ciphers, e);
    }
    ERR_clear_error();
    return ok;
}

static void conn_free(conn *k)
{
    SSL_free(k->ssl);
    SSL_CTX_free(k->ctx);
    close(k->fd);
}

/* One ping over a raw SSL connection, one write for the whole message. */
static void ping_over(conn *k)
{
    static const uint8_t p[] = "tls12";
    uint8_t msg[1100], resp[1100];
    size_t n, got = 0;
    kl_request_spec s = {.id = 4242,
                         .opcode = KL_OP_PING,
                         .payload = p,
                         .payload_len = sizeof p};
    assert_int_equal(kl_request_encode(msg, sizeof msg, &s, &n), KL_OK);
    assert_int_equal(SSL_write(k->ssl, msg, (int)n), (int)n);
    while (got < 1024) {
        int r = SSL_read(k->ssl, resp + got, (int)(sizeof resp - got));
        assert_true(r > 0);
        got += (size_t)r;
    }
    kl_header h;
    size_t fl;
    kl_response rp;
    assert_int_equal(kl_frame_peek(resp, got, &h, &fl), KL_OK);
    assert_int_equal(fl, 1024);
    assert_int_equal(h.id, 4242);
    assert_int_equal(kl_response_parse(&h, resp + 8, fl - 8, &rp), KL_OK);
    assert_int_equal(rp.opcode, KL_OP_PONG);
    assert_int_equal(rp.payload.len, sizeof p);
    assert_memory_equal(rp.payload.ptr, p, sizeof p);
}

static void test_ecdhe_ecdsa_aes256_gcm_served(void **state)
{
    conn k;
    assert_true(tls12_connect(&k, "ECDHE-ECDSA-AES256-GCM-SHA384"));
    assert_string_equal(SSL_get_version(k.ssl), "TLSv1.2");
    assert_string_equal(SSL_get_cipher_name(k.ssl),
                        "ECDHE-ECDSA-AES256-GCM-SHA384");
    ping_over(&k);
    conn_free(&k);
}

static void test_aes128_gcm_refused(void **state)
{
    conn k;
    assert_false(tls12_connect(&k, "ECDHE-ECDSA-AES128-GCM-SHA256"));
    conn_free(&k);
    assert_false(tls12_connect(&k, "ECDHE-RSA-AES128-GCM-SHA256"));
    conn_free(&k);
    /* neither CBC nor ChaCha20 belongs to the profile */
    assert_false(tls12_connect(&k, "ECDHE-ECDSA-AES256-SHA384"));
    conn_free(&k);
    assert_false(tls12_connect(&k, "ECDHE-ECDSA-CHACHA20-POLY1305"));
    conn_free(&k);
}

/* The project's own client negotiates the profile with tls12_only, and
 * TLS 1.3 by default. */
static void test_kl_client_versions(void **state)
{
    kl_client_opts o = td_client_opts(&d);
    kl_client *c;
    char err[512];
    o.tls12_only = true;
    assert_int_equal(kl_client_connect(&o, &c, err, sizeof err), KL_OK);
    assert_string_equal(kl_client_tls_version(c), "TLSv1.2");
    assert_string_equal(kl_client_tls_cipher(c),
                        "ECDHE-ECDSA-AES256-GCM-SHA384");
    td_expect_ping(&d, c);
    kl_client_close(c);
    o.tls12_only = false;
    assert_int_equal(kl_client_connect(&o, &c, err, sizeof err), KL_OK);
    assert_string_equal(kl_client_tls_version(c), "TLSv1.3");
    td_expect_ping(&d, c);
    kl_client_close(c);
}

/* The client verifies the server: the name must match the certificate
 * (localhost, 127.0.0.1, ::1) and the CA must be the configured one. */
static void test_kl_client_verifies_server(void **state)
{
    kl_client_opts o = td_client_opts(&d);
    kl_client *c = NULL;
    char err[512];
    o.server_name = "localhost";
    assert_int_equal(kl_client_connect(&o, &c, err, sizeof err), KL_OK);
    kl_client_close(c);
    o.server_name = "keyless.wrong.example";
    assert_int_equal(kl_client_connect(&o, &c, err, sizeof err), KL_E_TLS);
    print_message("wrong name: %s\n", err);
    assert_non_null(strstr(err, "verify"));
    o.server_name = NULL;
    o.ca_file = tp_path("other-ca.crt");
    assert_int_equal(kl_client_connect(&o, &c, err, sizeof err), KL_E_TLS);
    print_message("wrong CA: %s\n", err);
    assert_null(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ecdhe_ecdsa_aes256_gcm_served),
        cmocka_unit_test(test_aes128_gcm_refused),
        cmocka_unit_test(test_kl_client_versions),
        cmocka_unit_test(test_kl_client_verifies_server),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
