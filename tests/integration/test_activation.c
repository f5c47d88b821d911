/* SPDX-License-Identifier: Apache-2.0 */
/* Activation (activation/activate.h) against a mock Origin CA: a
 * libmicrohttpd endpoint on 127.0.0.1 inside this test records what
 * keylessd sends and answers as told - signing the CSR with a CA made here,
 * or failing in each way the real API can. Real keylessd processes:
 * enrolment then serving with the issued certificate (the client trusts
 * only the mock's CA), --manual-activation, every error path (exit 1, the
 * right message, nothing written), the API's TLS verified, --config-only
 * and --check. Renewal: test_activation_renew.c; the mock and the helpers:
 * activation_mock.h. */
#include "activation_mock.h"

/* No auth_cert, no auth_key, credentials set: keylessd enrols, writes the
 * files with their modes, and serves with the certificate. */
static void test_enrol_and_serve(void **state)
{
    (void)state;
    files f;
    files_init(&f, "enrol");
    mock_set(MOCK_SIGN);
    int before = mock_requests();
    td_daemon d;
    const char *extra[] = {
        f.a_csr,           "--hostname=" HOST, "--origin-ca-api-key=" API_KEY,
        "--zone-id=" ZONE, endpoint,           NULL};
    td_opts o = {.name = "activation-enrol",
                 .cert = f.cert,
                 .key = f.key,
                 .key_dirs = tp_path("keys"),
                 .extra = extra};
    td_start(&d, &o);
    expect_serves_with_issued_cert(&d);
    char *log = td_read_log(&d);
    expect(log, "activation: asking http://127.0.0.1:");
    expect(log, "is plain http (accepted for a loopback address only)");
    expect(log, "activation: wrote auth_cert ");
    if (strstr(log, API_KEY))
        fail_msg("the Origin CA key appears in the log:\n%s", log);
    free(log);
    assert_int_equal(td_stop(&d, 0), 0);

    /* the request */
    assert_int_equal(mock_requests(), before + 1);
    assert_string_equal(M.method, "POST");
    assert_string_equal(M.url, PATH);
    assert_string_equal(M.api_key, API_KEY);
    assert_string_equal(M.content_type, "application/json");
    json_error_t je;
    json_t *body = json_loads(M.body, JSON_REJECT_DUPLICATES, &je);
    assert_non_null(body);
    assert_int_equal(json_object_size(body), 5);
    json_t *names = json_object_get(body, "hostnames");
    assert_int_equal(json_array_size(names), 1);
    assert_string_equal(json_string_value(json_array_get(names, 0)), HOST);
    assert_string_equal(
        json_string_value(json_object_get(body, "request_type")),
        "keyless-certificate");
    assert_int_equal(
        json_integer_value(json_object_get(body, "requested_validity")), 5475);
    assert_string_equal(json_string_value(json_object_get(body, "zone_id")),
                        ZONE);

    /* the files: key 0600, CSR and certificate 0644, all of one key */
    assert_int_equal(mode_of(f.key), 0600);
    assert_int_equal(mode_of(f.csr), 0644);
    assert_int_equal(mode_of(f.cert), 0644);
    EVP_PKEY *key = read_key(f.key);
    check_csr(json_string_value(json_object_get(body, "csr")), key);
    size_t len;
    char *csr_file = tu_read_file(f.csr, &len);
    assert_string_equal(csr_file,
                        json_string_value(json_object_get(body, "csr")));
    free(csr_file);
    json_decref(body);
    EVP_PKEY_free(key);
    assert_int_equal(count_entries(f.dir, NULL), 3); /* no temp files left */

    /* a second start finds a usable identity: no new request */
    td_start(&d, &o);
    expect_serves_with_issued_cert(&d);
    assert_int_equal(td_stop(&d, 0), 0);
    assert_int_equal(mock_requests(), before + 1);
}

static void test_manual_activation(void **state)
{
    (void)state;
    files f;
    files_init(&f, "manual");
    int before = mock_requests();
    char *out;
    const char *manual[] = {"--manual-activation", NULL};
    assert_int_equal(run(&f, manual, &out), 0);
    expect(out, "--manual-activation: generated a new ECDSA P-384 auth_key");
    expect(out, "next: have the CSR signed");
    free(out);
    assert_int_equal(mock_requests(), before); /* no API call */
    assert_int_equal(mode_of(f.key), 0600);
    assert_int_equal(mode_of(f.csr), 0644);
    assert_int_equal(access(f.cert, F_OK), -1);
    EVP_PKEY *key = read_key(f.key);
    size_t len;
    char *csr = tu_read_file(f.csr, &len);
    check_csr(csr, key);
    free(csr);

    /* again: the key is kept, a CSR for it written */
    char *key_before = tu_read_file(f.key, &len);
    assert_int_equal(run(&f, manual, &out), 0);
    expect(out, "kept the existing auth_key");
    free(out);
    char *key_after = tu_read_file(f.key, &len);
    assert_string_equal(key_before, key_after);
    csr = tu_read_file(f.csr, &len);
    check_csr(csr, key);
    free(csr);
    free(key_before);
    free(key_after);
    EVP_PKEY_free(key);

    /* without hostname */
    char a_key[1200];
    snprintf(a_key, sizeof a_key, "--auth-key=%s/none.pem", f.dir);
    assert_int_equal(
        td_run((const char *[]){bin, "--manual-activation", a_key, NULL}, &out,
               10000),
        1);
    expect(out, "--manual-activation needs hostname");
    free(out);
}

/* Each failure of the API: exit 1, a message naming what went wrong,
 * nothing written at all. */
static void test_error_paths(void **state)
{
    (void)state;
    static const struct {
        mock_mode mode;
        const char *want;
    } cases[] = {
        {MOCK_403, "the certificate API answered HTTP 403 (not authorised: "
                   "check origin_ca_api_key"},
        {MOCK_403, "code 10000: \"Authentication error\""},
        {MOCK_500, "the certificate API answered HTTP 500: body "
                   "\"<html>internal server error</html>\""},
        {MOCK_GARBAGE, "is not a JSON object"},
        {MOCK_FALSE, "the certificate API refused the request: code 1010: "
                     "\"Invalid hostname: not in your zone\""},
        {MOCK_NO_CERT, "answered success but without a certificate"},
        {MOCK_OTHER_KEY, "its public key is not the one of the key keylessd "
                         "generated"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        files f;
        char tag[32];
        snprintf(tag, sizeof tag, "err%zu", i);
        files_init(&f, tag);
        mock_set(cases[i].mode);
        int before = mock_requests();
        char *out;
        assert_int_equal(run(&f, NULL, &out), 1);
        expect(out, cases[i].want);
        expect(out, "not starting: see the activation messages above");
        free(out);
        assert_int_equal(mock_requests(), before + 1);
        assert_int_equal(count_entries(f.dir, NULL), 0);
    }

    files f;
    files_init(&f, "down");
    char *out;
    /* endpoint down: a port nobody listens on */
    char down[256];
    snprintf(down, sizeof down, "--init-endpoint=http://127.0.0.1:1%s", PATH);
    assert_int_equal(run(&f, (const char *[]){down, NULL}, &out), 1);
    expect(out, "cannot connect to the certificate API at http://127.0.0.1:1");
    free(out);
    /* too slow */
    mock_set(MOCK_SLOW);
    assert_int_equal(
        run(&f, (const char *[]){"--activation-timeout=1s", NULL}, &out), 1);
    expect(out, "within 1000 ms (activation_timeout)");
    free(out);
    /* plain http to another host is refused before anything is sent */
    assert_int_equal(
        run(&f, (const char *[]){"--init-endpoint=http://192.0.2.1/x", NULL},
            &out),
        1);
    expect(out, "plain http would send the Origin CA key unencrypted");
    free(out);
    assert_int_equal(count_entries(f.dir, NULL), 0);
}

/* A TLS endpoint whose certificate this machine does not trust (the test
 * PKI's server.crt): activation must refuse it, not send the key. */
typedef struct tls_srv {
    int fd;
    SSL_CTX *ctx;
} tls_srv;

static void *tls_serve_one(void *arg)
{
    tls_srv *t = arg;
    int c = accept(t->fd, NULL, NULL);
    if (c >= 0) {
        SSL *ssl = SSL_new(t->ctx);
        SSL_set_fd(ssl, c);
        (void)SSL_accept(ssl); /* the client gives up on verification */
        SSL_free(ssl);
        close(c);
    }
    return NULL;
}

static void test_tls_verified(void **state)
{
    (void)state;
    tls_srv t = {.ctx = SSL_CTX_new(TLS_server_method())};
    assert_non_null(t.ctx);
    assert_int_equal(
        SSL_CTX_use_certificate_chain_file(t.ctx, tp_path("server.crt")), 1);
    assert_int_equal(SSL_CTX_use_PrivateKey_file(t.ctx, tp_path("server.key"),
                                                 SSL_FILETYPE_PEM),
                     1);
    t.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    assert_int_equal(bind(t.fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(t.fd, 4), 0);
    assert_int_equal(getsockname(t.fd, (struct sockaddr *)&a, &al), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, tls_serve_one, &t), 0);
    files f;
    files_init(&f, "tls");
    char url[256], *out;
    snprintf(url, sizeof url, "--init-endpoint=https://127.0.0.1:%u%s",
             (unsigned)ntohs(a.sin_port), PATH);
    assert_int_equal(run(&f, (const char *[]){url, NULL}, &out), 1);
    expect(out, "TLS with the certificate API at https://127.0.0.1:");
    expect(out, "verifies the API's certificate against this machine's CA "
                "store");
    free(out);
    pthread_join(th, NULL);
    close(t.fd);
    SSL_CTX_free(t.ctx);
    assert_int_equal(count_entries(f.dir, NULL), 0);
}

/* --config-only enrols as a start would, then exits 0 without serving. */
static void test_config_only_enrols(void **state)
{
    (void)state;
    files f;
    files_init(&f, "config-only");
    mock_set(MOCK_SIGN);
    int before = mock_requests();
    char *out;
    assert_int_equal(run(&f, (const char *[]){"--config-only", NULL}, &out), 0);
    expect(out, "activation: wrote auth_cert ");
    expect(out, "already configured: auth_cert ");
    free(out);
    assert_int_equal(mock_requests(), before + 1);
    assert_int_equal(mode_of(f.key), 0600);
    assert_int_equal(mode_of(f.cert), 0644);
    /* again: nothing to do */
    assert_int_equal(run(&f, (const char *[]){"--config-only", NULL}, &out), 0);
    free(out);
    assert_int_equal(mock_requests(), before + 1);
}

/* --check with nothing on disk and credentials: reports the plan, writes
 * nothing, calls nothing, and passes (the CA file is still checked). */
static void test_check_does_not_enrol(void **state)
{
    (void)state;
    files f;
    files_init(&f, "check");
    int before = mock_requests();
    char *out, kd[1200];
    snprintf(kd, sizeof kd, "--private-key-dirs=%s", tp_path("keys"));
    assert_int_equal(run(&f, (const char *[]){"--check", kd, NULL}, &out), 0);
    expect(out, "a start would enrol with a new key from http://127.0.0.1:");
    expect(out, "(--check changes nothing)");
    expect(out, "configuration OK");
    free(out);
    assert_int_equal(mock_requests(), before);
    assert_int_equal(count_entries(f.dir, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_enrol_and_serve),
        cmocka_unit_test(test_manual_activation),
        cmocka_unit_test(test_error_paths),
        cmocka_unit_test(test_check_does_not_enrol),
        cmocka_unit_test(test_tls_verified),
        cmocka_unit_test(test_config_only_enrols),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
