/* SPDX-License-Identifier: Apache-2.0 */
/* `promtool check metrics` (Debian's prometheus package) on a scrape with
 * every family populated, escaped label values included. promtool parses
 * the exposition strictly (exit 1 on any format error) and then lints it
 * (exit 3 on style problems). The only lint problems allowed are the
 * reference's two counters without "_total", whose names dashboards depend
 * on and which therefore cannot change. */
#include "testutil.h"

#include <openssl/evp.h>
#include <openssl/x509.h>
#include <sys/wait.h>
#include <unistd.h>

#include "keyless/protocol.h"
#include "mtest.h"

static const char *const allowed_lint[] = {
    "keyless_failed_connection counter metrics should have \"_total\" suffix",
    "keyless_requests counter metrics should have \"_total\" suffix",
};

static bool promtool_found(void)
{
    return system("command -v promtool >/dev/null 2>&1") == 0;
}

static void populate(kl_metrics *m)
{
    kl_metrics_local *l = kl_metrics_local_new(m, 0);
    for (unsigned op = 0; op < 256; op += 7)
        kl_metrics_request(l, (uint8_t)op);
    for (uint8_t e = 0; e <= KL_ERR_MAX + 1; e++) {
        kl_metrics_exec_time(l, KL_OP_RSA_SIGN_SHA256, kl_status_from_p6(e),
                             1000ull * e * e);
        kl_metrics_total_time(l, KL_OP_ED25519_SIGN, kl_status_from_p6(e),
                              3000000000ull);
    }
    kl_metrics_key_load_time(l, 12345);
    kl_metrics_queue_wait(l, 2, 777);
    kl_metrics_failed_connection(l);
    kl_metrics_shed(l, KL_SHED_INFLIGHT);
    kl_metrics_handshake_failed(l, KL_HS_FAIL_TIMEOUT);
    kl_metrics_loop_busy(l, 123456789);
    /* back-pressure, a pause in progress included */
    kl_metrics_conn_refused(l, KL_REFUSE_MAX_CONNECTIONS);
    kl_metrics_conn_refused(l, KL_REFUSE_HANDSHAKING_PER_SOURCE);
    kl_metrics_accept_paused(l, true, 1);
    kl_metrics_set_read_pauses(l, 3);
    kl_metrics_set_buffered(l, 12345, 1u << 26);
    kl_metrics_reload_result(m, true, 1700000000);
    /* routes and tracing */
    kl_metrics_route r = {.name = "fra1",
                          .region = "eu",
                          .up = true,
                          .ewma_seconds = 0.01,
                          .requests = 5};
    kl_metrics_set_routes(m, &r, 1);
    kl_metrics_set_tracing(m, &(kl_metrics_tracing){.exported = 3});
    assert_int_equal(kl_metrics_cert_expiry_add_file(
                         m, tu_vector_path("certs/rsa-2048.crt")),
                     KL_OK);
    /* A peer certificate whose CN needs escaping. */
    EVP_PKEY *pk = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    X509 *x = X509_new();
    X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_UTF8,
                               (const unsigned char *)"a\"b\\c\nd", -1, -1, 0);
    ASN1_TIME_set_string(X509_getm_notBefore(x), "20200101000000Z");
    ASN1_TIME_set_string(X509_getm_notAfter(x), "20300101000000Z");
    X509_set_pubkey(x, pk);
    assert_true(X509_sign(x, pk, NULL) > 0);
    kl_metrics_cert_expiry_add(m, "listener: [::1]:2407", x);
    X509_free(x);
    EVP_PKEY_free(pk);
}

static void test_promtool(void **state)
{
    (void)state;
    if (!promtool_found()) {
        print_message("SKIP: promtool not found; install Debian's "
                      "`prometheus` package (scripts/install-deps.sh)\n");
        skip();
    }
    kl_metrics *m = kl_metrics_new();
    populate(m);
    char *s = mt_scrape(m);
    char in[] = "/tmp/kl-promtool-in-XXXXXX";
    char out[] = "/tmp/kl-promtool-out-XXXXXX";
    int fi = mkstemp(in), fo = mkstemp(out);
    assert_true(fi >= 0 && fo >= 0);
    assert_int_equal(write(fi, s, strlen(s)), (ssize_t)strlen(s));
    close(fi);
    close(fo);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "promtool check metrics <%s >%s 2>&1", in, out);
    int st = system(cmd);
    assert_true(WIFEXITED(st));
    int rc = WEXITSTATUS(st);
    size_t n = 0;
    char *report = tu_read_file(out, &n);
    unlink(in);
    unlink(out);
    if (rc != 0 && rc != 3)
        fail_msg("promtool rejected the exposition (exit %d):\n%s", rc, report);
    /* Every reported line must be one of the allowed lint problems. */
    for (char *line = strtok(report, "\n"); line; line = strtok(NULL, "\n")) {
        bool ok = false;
        for (size_t i = 0; i < sizeof allowed_lint / sizeof *allowed_lint; i++)
            ok |= strcmp(line, allowed_lint[i]) == 0;
        if (!ok)
            fail_msg("promtool: %s", line);
    }
    free(report);
    free(s);
    kl_metrics_free(m);
}

/* The checker itself must catch a broken exposition, or its pass above
 * would mean nothing. */
static void test_promtool_catches_errors(void **state)
{
    (void)state;
    if (!promtool_found())
        skip();
    int st = system("printf '# TYPE x gauge\\nx{a=\"b} 1\\n' | "
                    "promtool check metrics >/dev/null 2>&1");
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_promtool),
        cmocka_unit_test(test_promtool_catches_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
