/* SPDX-License-Identifier: Apache-2.0 */
/* Activation renewal against the mock Origin CA (activation_mock.h): an
 * expired auth_cert is refused without --renew and renewed with it (new
 * files, the old ones kept); one that expires within 30 days is kept with a
 * hint unless renewal is asked for. */
#include "activation_mock.h"

/* An expired auth_cert with credentials: refused without --renew, with
 * the file, the date and both fixes; --check reports the same and what
 * --renew would do; with --renew new files, the old ones kept. */
static void test_renewal(void **state)
{
    (void)state;
    files f;
    files_init(&f, "renew");
    EVP_PKEY *old = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    X509_NAME *n = X509_NAME_new();
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC,
                               (const unsigned char *)HOST, -1, -1, 0);
    X509 *x = new_cert(n, old, -10L * 86400, -86400, false, HOST);
    X509_NAME_free(n);
    FILE *fp = fopen(f.cert, "w");
    PEM_write_X509(fp, x);
    fclose(fp);
    fp = fopen(f.key, "w");
    fchmod(fileno(fp), 0600);
    PEM_write_PrivateKey(fp, old, NULL, NULL, 0, NULL, NULL);
    fclose(fp);
    X509_free(x);
    EVP_PKEY_free(old);
    size_t len;
    char *old_cert = tu_read_file(f.cert, &len);
    char *old_key = tu_read_file(f.key, &len);

    mock_set(MOCK_SIGN);
    int before = mock_requests();
    char *out, want[1400];
    assert_int_equal(run(&f, NULL, &out), 1);
    snprintf(want, sizeof want, "auth_cert %s: it expired on ", f.cert);
    expect(out, want);
    expect(out, "Either start once with --renew, or set auto_renew: true");
    expect(out, "or put a valid certificate for auth_key");
    free(out);
    assert_int_equal(mock_requests(), before);

    const char *check[] = {"--check", NULL};
    assert_int_equal(run(&f, check, &out), 1);
    expect(out, "Either start once with --renew");
    free(out);
    const char *check_renew[] = {"--check", "--renew", NULL};
    assert_int_equal(run(&f, check_renew, &out), 0);
    expect(out, "a start would renew auth_cert with a new key");
    free(out);
    assert_int_equal(mock_requests(), before);
    assert_int_equal(count_entries(f.dir, NULL), 2);

    td_daemon d;
    const char *extra[] = {
        f.a_csr,   "--hostname=" HOST, "--origin-ca-api-key=" API_KEY,
        "--renew", endpoint,           NULL};
    td_opts o = {.name = "activation-renew",
                 .cert = f.cert,
                 .key = f.key,
                 .extra = extra};
    td_start(&d, &o);
    expect_serves_with_issued_cert(&d);
    char *log = td_read_log(&d);
    expect(log, "activation: kept the previous auth_key as ");
    expect(log, "activation: kept the previous auth_cert as ");
    free(log);
    assert_int_equal(td_stop(&d, 0), 0);
    assert_int_equal(mock_requests(), before + 1);

    char *new_key = tu_read_file(f.key, &len);
    assert_string_not_equal(new_key, old_key);
    free(new_key);
    assert_int_equal(mode_of(f.key), 0600);
    /* server.pem, server-key.pem, server.csr and two backups */
    assert_int_equal(count_entries(f.dir, NULL), 5);
    assert_int_equal(count_entries(f.dir, ".bak"), 2);
    DIR *dd = opendir(f.dir);
    struct dirent *e;
    while ((e = readdir(dd))) {
        if (!strstr(e->d_name, ".bak"))
            continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", f.dir, e->d_name);
        char *text = tu_read_file(p, &len);
        if (strncmp(e->d_name, "server-key.pem.", 15) == 0) {
            assert_string_equal(text, old_key);
            assert_int_equal(mode_of(p), 0600);
        } else {
            assert_int_equal(strncmp(e->d_name, "server.pem.", 11), 0);
            assert_string_equal(text, old_cert);
        }
        free(text);
    }
    closedir(dd);
    free(old_cert);
    free(old_key);
}

/* A certificate that expires within 30 days: kept (with a hint) unless
 * renewal is asked for; --config-only --renew renews it. */
static void test_renew_expiring(void **state)
{
    (void)state;
    files f;
    files_init(&f, "expiring");
    EVP_PKEY *old = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    X509_NAME *n = X509_NAME_new();
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC,
                               (const unsigned char *)HOST, -1, -1, 0);
    X509 *x = new_cert(n, old, -86400, 10L * 86400, false, HOST);
    X509_NAME_free(n);
    FILE *fp = fopen(f.cert, "w");
    PEM_write_X509(fp, x);
    fclose(fp);
    fp = fopen(f.key, "w");
    fchmod(fileno(fp), 0600);
    PEM_write_PrivateKey(fp, old, NULL, NULL, 0, NULL, NULL);
    fclose(fp);
    X509_free(x);
    EVP_PKEY_free(old);
    mock_set(MOCK_SIGN);
    int before = mock_requests();
    char *out;
    assert_int_equal(run(&f, (const char *[]){"--config-only", NULL}, &out), 0);
    expect(out, "start with --renew (or set auto_renew: true) to have "
                "keylessd renew it");
    expect(out, "already configured");
    free(out);
    assert_int_equal(mock_requests(), before);
    assert_int_equal(
        run(&f, (const char *[]){"--config-only", "--auto-renew=true", NULL},
            &out),
        0);
    expect(out, "to renew auth_cert, with a new key");
    expect(out, "activation: kept the previous auth_cert as ");
    free(out);
    assert_int_equal(mock_requests(), before + 1);
    assert_int_equal(count_entries(f.dir, ".bak"), 2);
    assert_int_equal(count_entries(f.dir, NULL), 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_renewal),
        cmocka_unit_test(test_renew_expiring),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
