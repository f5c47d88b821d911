/* SPDX-License-Identifier: Apache-2.0 */
/* certificate_expiration_timestamp_seconds: the reference's labels and
 * their formats, from an X509 and from a PEM file; replacement, forgetting,
 * the size bound, and files that hold no certificate; without identities
 * (metrics_identities: false). */
#include "testutil.h"

#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include "mtest.h"

static void add_ext(X509 *x, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
    X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    assert_non_null(e);
    assert_int_equal(X509_add_ext(x, e, -1), 1);
    X509_EXTENSION_free(e);
}

/* A self-signed Ed25519 certificate; eku NULL for none. */
static X509 *make_cert(const char *cn, const char *serial_dec,
                       const char *not_after, const char *san, bool ca,
                       const char *eku)
{
    EVP_PKEY *pk = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    assert_non_null(pk);
    X509 *x = X509_new();
    X509_set_version(x, X509_VERSION_3);
    BIGNUM *bn = NULL;
    assert_true(BN_dec2bn(&bn, serial_dec) > 0);
    assert_non_null(BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)));
    BN_free(bn);
    X509_NAME *n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "O", MBSTRING_UTF8,
                               (const unsigned char *)"org", -1, -1, 0);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_UTF8,
                               (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(x, n);
    assert_int_equal(
        ASN1_TIME_set_string(X509_getm_notBefore(x), "20200101000000Z"), 1);
    assert_int_equal(ASN1_TIME_set_string(X509_getm_notAfter(x), not_after), 1);
    X509_set_pubkey(x, pk);
    if (san)
        add_ext(x, NID_subject_alt_name, san);
    add_ext(x, NID_basic_constraints, ca ? "critical,CA:TRUE" : "CA:FALSE");
    if (eku)
        add_ext(x, NID_ext_key_usage, eku);
    assert_true(X509_sign(x, pk, NULL) > 0);
    EVP_PKEY_free(pk);
    return x;
}

static void test_labels_from_x509(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    X509 *a =
        make_cert("we \"quote\" \\ it", "123456789012345678901234567890",
                  "20300101000000Z", "DNS:b.example,IP:10.0.0.1,DNS:a.example",
                  true, "serverAuth,clientAuth");
    X509 *b =
        make_cert("client1", "7", "20300101000000Z", NULL, false, "clientAuth");
    X509 *c = make_cert("any", "8", "20300101000000Z", "DNS:x", false,
                        "anyExtendedKeyUsage");
    kl_metrics_cert_expiry_add(m, "listener: 127.0.0.1:2407", a);
    kl_metrics_cert_expiry_add(m, "listener: 127.0.0.1:2407", b);
    kl_metrics_cert_expiry_add(m, "/etc/keyless/any.pem", c);
    /* Seen again (the next connection): one series, not two. */
    kl_metrics_cert_expiry_add(m, "listener: 127.0.0.1:2407", b);
    char *s = mt_scrape(m);
    /* Labels sorted by name, SANs sorted and DNS only, serial in decimal,
     * "1"/"0" flags, notAfter 2030-01-01 = 1893456000. */
    mt_assert_line(s, "certificate_expiration_timestamp_seconds{ca=\"1\","
                      "client=\"1\",cn=\"we \\\"quote\\\" \\\\ it\","
                      "hostnames=\"a.example,b.example\","
                      "serial_no=\"123456789012345678901234567890\","
                      "server=\"1\",source=\"listener: 127.0.0.1:2407\"} "
                      "1893456000");
    mt_assert_line(s, "certificate_expiration_timestamp_seconds{ca=\"0\","
                      "client=\"1\",cn=\"client1\",hostnames=\"\","
                      "serial_no=\"7\",server=\"0\",source=\"listener: "
                      "127.0.0.1:2407\"} 1893456000");
    mt_assert_line(s, "certificate_expiration_timestamp_seconds{ca=\"0\","
                      "client=\"1\",cn=\"any\",hostnames=\"x\","
                      "serial_no=\"8\",server=\"1\",source=\"/etc/keyless/"
                      "any.pem\"} 1893456000");
    const char *p = s;
    int n = 0;
    while ((p = strstr(p, "\ncertificate_expiration_timestamp_seconds{")))
        n++, p++;
    assert_int_equal(n, 3);
    free(s);

    kl_metrics_cert_expiry_forget(m, "listener: 127.0.0.1:2407");
    s = mt_scrape(m);
    assert_null(strstr(s, "listener: "));
    assert_non_null(strstr(s, "source=\"/etc/keyless/any.pem\""));
    free(s);
    X509_free(a);
    X509_free(b);
    X509_free(c);
    kl_metrics_free(m);
}

/* A name holding a NUL is shown in full, the NUL as \x00 (a C string
 * stopped there: "edge-1\0.attacker" showed as edge-1; docs/SECURITY.md). */
static void test_names_in_full(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    X509 *x = make_cert("placeholder", "9", "20300101000000Z", NULL, false,
                        "clientAuth");
    X509_NAME *n = X509_get_subject_name(x);
    static const char cn[] = "edge-1\0.attacker";
    X509_NAME_add_entry_by_txt(n, "CN", V_ASN1_UTF8STRING,
                               (const unsigned char *)cn, sizeof cn - 1, -1, 0);
    GENERAL_NAMES *gens = GENERAL_NAMES_new();
    GENERAL_NAME *g = GENERAL_NAME_new();
    ASN1_IA5STRING *s = ASN1_IA5STRING_new();
    assert_int_equal(ASN1_STRING_set(s, "a.example\0.evil", 15), 1);
    GENERAL_NAME_set0_value(g, GEN_DNS, s);
    sk_GENERAL_NAME_push(gens, g);
    assert_int_equal(X509_add1_ext_i2d(x, NID_subject_alt_name, gens, 0, 0), 1);
    GENERAL_NAMES_free(gens);
    kl_metrics_cert_expiry_add(m, "listener: 127.0.0.1:2407", x);
    char *text = mt_scrape(m);
    /* the last CN (as Go keeps it), the label escaping \ as \\ */
    mt_assert_line(text, "certificate_expiration_timestamp_seconds{ca=\"0\","
                         "client=\"1\",cn=\"edge-1\\\\x00.attacker\","
                         "hostnames=\"a.example\\\\x00.evil\","
                         "serial_no=\"9\",server=\"0\",source=\"listener: "
                         "127.0.0.1:2407\"} 1893456000");
    free(text);
    X509_free(x);
    kl_metrics_free(m);
}

static void test_pem_file(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    const char *path = tu_vector_path("certs/ecdsa-p256.crt");
    assert_int_equal(kl_metrics_cert_expiry_add_file(m, path), KL_OK);
    char *s = mt_scrape(m);
    /* openssl x509 -serial: 48E3D88BB771DAE829D52DE7DA5BB3F4B6F1389F;
     * notAfter Nov 27 14:15:52 2036 GMT; no extendedKeyUsage. */
    mt_assert_line(s,
                   "certificate_expiration_timestamp_seconds{ca=\"0\","
                   "client=\"0\",cn=\"localhost\",hostnames=\"localhost\","
                   "serial_no=\"416128468456233052154465002443285179310013495"
                   "455\",server=\"0\",source=\"%s\"} 2111408152",
                   path);
    free(s);

    assert_int_equal(kl_metrics_cert_expiry_add_file(m, "/nonexistent/x.pem"),
                     KL_E_IO);
    char tmp[] = "/tmp/kl-metrics-XXXXXX";
    int fd = mkstemp(tmp);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "not a pem\n", 10), 10);
    close(fd);
    assert_int_equal(kl_metrics_cert_expiry_add_file(m, tmp), KL_E_BAD_VALUE);
    unlink(tmp);
    kl_metrics_free(m);
}

static void test_bounded(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    X509 *x = make_cert("c", "1", "20300101000000Z", NULL, false, NULL);
    char src[64];
    for (int i = 0; i < KL_METRICS_MAX_CERTS + 5; i++) {
        snprintf(src, sizeof src, "listener: 10.0.0.%d:1", i);
        kl_metrics_cert_expiry_add(m, src, x);
    }
    char *s = mt_scrape(m);
    mt_assert_line(s, "keylessd_cert_series_dropped_total 5");
    free(s);
    /* A full table still updates the series it has. */
    kl_metrics_cert_expiry_forget(m, "listener: 10.0.0.0:1");
    char longsrc[700];
    memset(longsrc, 'p', sizeof longsrc - 1);
    longsrc[sizeof longsrc - 1] = '\0';
    kl_metrics_cert_expiry_add(m, longsrc, x);
    s = mt_scrape(m);
    /* Longer than any formatting scratch buffer. */
    assert_non_null(strstr(s, longsrc));
    mt_assert_line(s, "keylessd_cert_series_dropped_total 5");
    free(s);
    X509_free(x);
    kl_metrics_free(m);
}

/* metrics_identities: false (docs/METRICS.md, Identities in the series):
 * no CN, SAN or serial number in the labels, the file's source as given
 * (the option name), and two certificates with the same remaining labels
 * share one series showing the first to expire. */
static void test_without_identities(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    kl_metrics_set_identities(m, false);
    X509 *late = make_cert("edge-1.example", "77", "20310101000000Z",
                           "DNS:edge-1.example", false, "clientAuth");
    X509 *early = make_cert("edge-2.example", "78", "20300101000000Z",
                            "DNS:edge-2.example", false, "clientAuth");
    kl_metrics_cert_expiry_add(m, "listener: 127.0.0.1:2407", late);
    kl_metrics_cert_expiry_add(m, "listener: 127.0.0.1:2407", early);
    kl_metrics_cert_expiry_add(m, "listener: 127.0.0.1:2407", late);
    const char *path = tu_vector_path("certs/ecdsa-p256.crt");
    assert_int_equal(kl_metrics_cert_expiry_add_file_as(m, path, "auth_cert"),
                     KL_OK);
    char *s = mt_scrape(m);
    mt_assert_line(s, "certificate_expiration_timestamp_seconds{ca=\"0\","
                      "client=\"1\",cn=\"\",hostnames=\"\",serial_no=\"\","
                      "server=\"0\",source=\"listener: 127.0.0.1:2407\"} "
                      "1893456000");
    mt_assert_line(s, "certificate_expiration_timestamp_seconds{ca=\"0\","
                      "client=\"0\",cn=\"\",hostnames=\"\",serial_no=\"\","
                      "server=\"0\",source=\"auth_cert\"} 2111408152");
    assert_null(strstr(s, "edge-"));
    assert_null(strstr(s, "localhost"));
    assert_null(strstr(s, "serial_no=\"7"));
    assert_null(strstr(s, path));
    const char *p = s;
    int n = 0;
    while ((p = strstr(p, "\ncertificate_expiration_timestamp_seconds{")))
        n++, p++;
    assert_int_equal(n, 2);
    free(s);
    X509_free(late);
    X509_free(early);
    kl_metrics_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_labels_from_x509),
        cmocka_unit_test(test_pem_file),
        cmocka_unit_test(test_names_in_full),
        cmocka_unit_test(test_bounded),
        cmocka_unit_test(test_without_identities),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
