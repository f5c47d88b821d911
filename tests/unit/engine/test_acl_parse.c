/* SPDX-License-Identifier: Apache-2.0 */
/* The access-file parser (engine/acl.h): accepted forms, and every
 * malformed file refused with the file, the line and the problem. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

#include "engine/acl.h"

static kl_acl *parse(const char *text, char *err, size_t cap)
{
    err[0] = 0;
    return kl_acl_parse("access.yaml", (const uint8_t *)text, strlen(text), err,
                        cap);
}

static void test_accepts(void **state)
{
    char err[256];
    kl_acl *a = parse(
        "- clients: [cn:edge-1, san:a.example, \"*\"]\n"
        "  keys: [ski:00112233445566778899AABBCCDDEEFF00112233, dir:/k/a/]\n"
        "- clients:\n"
        "    - fp:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:"
        "00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff\n"
        "  keys: [\"*\", file:/k/b.key]\n",
        err, sizeof err);
    if (!a)
        fail_msg("%s", err);
    assert_int_equal(kl_acl_count(a), 2);
    /* no certificate: no rule */
    assert_int_equal(kl_acl_match_cert(a, NULL, 0), 0);
    assert_int_equal(kl_acl_match_cert(a, (const uint8_t *)"junk", 4), 0);
    kl_acl_free(a);
    /* an empty list is valid: no client may use any key */
    a = parse("[]\n", err, sizeof err);
    assert_non_null(a);
    assert_int_equal(kl_acl_count(a), 0);
    kl_acl_free(a);
    /* no access lists: everything allowed */
    kl_acl_grant g = {0};
    assert_true(kl_acl_allows(NULL, &g, NULL, NULL));
}

/* Reload: the new rules replace the old at once; a grant taken before
 * keeps its set alive until it is matched again or released; a grant
 * without a peer certificate matches nothing. */
static void test_replace(void **state)
{
    char err[256];
    kl_acl *a = parse("- {clients: [cn:a], keys: [\"*\"]}\n"
                      "- {clients: [cn:b], keys: [\"*\"]}\n",
                      err, sizeof err);
    assert_non_null(a);
    kl_acl_grant g = {0};
    kl_acl_grant_conn(a, &g, NULL);
    assert_non_null(g.set);
    assert_int_equal(g.rules, 0);
    kl_acl_set *before = g.set;
    kl_acl *b = parse("- {clients: [\"*\"], keys: [\"*\"]}\n", err, sizeof err);
    assert_non_null(b);
    kl_acl_replace(a, b); /* frees b */
    assert_int_equal(kl_acl_count(a), 1);
    assert_ptr_equal(g.set, before); /* still alive: the grant holds it */
    kl_acl_grant_conn(a, &g, NULL);  /* matched again: the new set */
    assert_ptr_not_equal(g.set, before);
    kl_acl_grant_release(&g);
    assert_null(g.set);
    kl_acl_grant_release(&g); /* twice is harmless */
    /* replacing with an identical copy and freeing while grants are out */
    kl_acl_grant h = {0};
    kl_acl_grant_conn(a, &h, NULL);
    kl_acl_free(a);
    kl_acl_grant_release(&h); /* the last reference frees the set */
}

/* A self-signed certificate (DER, malloc'd) whose subject CN is the cnlen
 * bytes at cn, stored as they are with ASN.1 type `type`. */
static unsigned char *cert_der_raw(const char *cn, int cnlen, int type,
                                   size_t *len)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    assert_non_null(k);
    assert_non_null(x);
    X509_NAME *name = X509_NAME_new();
    assert_int_equal(X509_NAME_add_entry_by_txt(name, "CN", type,
                                                (const unsigned char *)cn,
                                                cnlen, -1, 0),
                     1);
    assert_int_equal(X509_set_version(x, 2), 1);
    assert_int_equal(ASN1_INTEGER_set(X509_get_serialNumber(x), 7), 1);
    assert_int_equal(X509_set_subject_name(x, name), 1);
    assert_int_equal(X509_set_issuer_name(x, name), 1);
    assert_non_null(X509_gmtime_adj(X509_getm_notBefore(x), 0));
    assert_non_null(X509_gmtime_adj(X509_getm_notAfter(x), 3600));
    assert_int_equal(X509_set_pubkey(x, k), 1);
    assert_true(X509_sign(x, k, EVP_sha256()) > 0);
    unsigned char *der = NULL;
    int n = i2d_X509(x, &der);
    assert_true(n > 0);
    *len = (size_t)n;
    X509_NAME_free(name);
    X509_free(x);
    EVP_PKEY_free(k);
    return der;
}

static unsigned char *cert_der(const char *cn, size_t *len)
{
    return cert_der_raw(cn, -1, MBSTRING_ASC, len);
}

/* Names are compared in full (docs/SECURITY.md): a CN "edge-1\0.attacker"
 * is not cn:edge-1 (a C-string comparison stopped at the NUL), nor is a
 * CN "edge-1x"; a CN written as BMPString (UTF-16) is compared as UTF-8.
 * An entry holding a NUL is refused. */
static void test_full_length_names(void **state)
{
    (void)state;
    char err[256];
    kl_acl *a = parse("- {clients: [cn:edge-1], keys: [\"*\"]}\n"
                      "- {clients: [\"cn:edge-1\\0.attacker\"], "
                      "keys: [\"*\"]}\n",
                      err, sizeof err);
    assert_null(a);
    assert_non_null(strstr(err, "access.yaml:2"));
    assert_non_null(strstr(err, "NUL"));
    a = parse("- {clients: [cn:edge-1], keys: [\"*\"]}\n", err, sizeof err);
    if (!a)
        fail_msg("%s", err);
    static const char nul[] = "edge-1\0.attacker";
    size_t len;
    unsigned char *der =
        cert_der_raw(nul, (int)sizeof nul - 1, V_ASN1_UTF8STRING, &len);
    assert_int_equal(kl_acl_match_cert(a, der, len), 0);
    OPENSSL_free(der);
    der = cert_der_raw("edge-1x", 7, V_ASN1_UTF8STRING, &len);
    assert_int_equal(kl_acl_match_cert(a, der, len), 0);
    OPENSSL_free(der);
    der = cert_der_raw("edge-1", 6, V_ASN1_UTF8STRING, &len);
    assert_int_equal(kl_acl_match_cert(a, der, len), 1);
    OPENSSL_free(der);
    static const char bmp[] = "\0e\0d\0g\0e\0-\0001";
    der = cert_der_raw(bmp, (int)sizeof bmp - 1, V_ASN1_BMPSTRING, &len);
    assert_int_equal(kl_acl_match_cert(a, der, len), 1);
    OPENSSL_free(der);
    kl_acl_free(a);
}

/* A key held elsewhere is known by its SKI only: `ski:` and "*"
 * rules of the client's can grant it; `dir:` and `file:` rules (local
 * files) and other clients' rules cannot. */
static void test_allows_ski(void **state)
{
    (void)state;
    uint8_t named[KL_SKI_LEN], other[KL_SKI_LEN];
    memset(named, 0xab, sizeof named);
    memset(other, 0x42, sizeof other);
    char err[256];
    kl_acl *a = parse(
        "- clients: [cn:edge-1]\n"
        "  keys: [ski:ABABABABABABABABABABABABABABABABABABABAB, dir:/k/a,\n"
        "         file:/k/b.key]\n"
        "- clients: [cn:edge-2]\n"
        "  keys: [\"*\"]\n",
        err, sizeof err);
    if (!a)
        fail_msg("%s", err);
    size_t len;
    unsigned char *der = cert_der("edge-1", &len);
    kl_acl_grant g = {0};
    kl_acl_grant_conn(a, &g, NULL);
    g.rules = kl_acl_match_cert(a, der, len);
    assert_int_equal(g.rules, 1); /* rule 0 names edge-1 */
    assert_true(kl_acl_allows_ski(a, &g, NULL, named));
    assert_false(kl_acl_allows_ski(a, &g, NULL, other));
    OPENSSL_free(der);
    /* edge-2's "*" rule grants any SKI */
    der = cert_der("edge-2", &len);
    g.rules = kl_acl_match_cert(a, der, len);
    assert_int_equal(g.rules, 2);
    assert_true(kl_acl_allows_ski(a, &g, NULL, named));
    assert_true(kl_acl_allows_ski(a, &g, NULL, other));
    OPENSSL_free(der);
    /* a reload: the grant is matched again against the new lists - here
     * without a peer certificate, which no rule names */
    kl_acl *b = parse("- {clients: [\"*\"], keys: [ski:ABABABABABABABABABAB"
                      "ABABABABABABABABABAB]}\n",
                      err, sizeof err);
    assert_non_null(b);
    kl_acl_replace(a, b);
    assert_false(kl_acl_allows_ski(a, &g, NULL, named));
    assert_int_equal(g.rules, 0);
    der = cert_der("edge-3", &len); /* anyone with a certificate */
    g.rules = kl_acl_match_cert(a, der, len);
    OPENSSL_free(der);
    assert_true(kl_acl_allows_ski(a, &g, NULL, named));
    assert_false(kl_acl_allows_ski(a, &g, NULL, other));
    kl_acl_grant_release(&g);
    kl_acl_free(a);
    /* no access lists: everything allowed */
    assert_true(kl_acl_allows_ski(NULL, &g, NULL, other));
}

static void expect_error(const char *text, const char *where, const char *what)
{
    char err[256];
    kl_acl *a = parse(text, err, sizeof err);
    if (a) {
        kl_acl_free(a);
        fail_msg("accepted: %s", text);
    }
    if (!strstr(err, where) || !strstr(err, what))
        fail_msg("for %s: got \"%s\", want \"%s\" and \"%s\"", text, err, where,
                 what);
}

static void test_rejects(void **state)
{
    expect_error("clients: [cn:a]\n", "access.yaml:1", "list of rules");
    expect_error("- clients: [cn:a]\n", "access.yaml:1", "both clients");
    expect_error("- keys: [\"*\"]\n", "access.yaml:1", "both clients");
    expect_error("- clients: [cn:a]\n  keys: [ski:12]\n", "access.yaml:2",
                 "ski:HEX");
    expect_error("- clients: [cn:a]\n  keys: [ski:zz]\n", ":2", "ski:HEX");
    expect_error("- clients: [cn:a]\n  keys: [\"dir:\"]\n", ":2", "dir:PATH");
    expect_error("- clients: [cn:a]\n  keys: [key:x]\n", ":2", "dir:PATH");
    expect_error("- clients: [\"cn:\"]\n  keys: [\"*\"]\n", ":1", "cn:NAME");
    expect_error("- clients: [fp:1234]\n  keys: [\"*\"]\n", ":1", "fp:HEX");
    expect_error("- clients: [name:a]\n  keys: [\"*\"]\n", ":1", "cn:NAME");
    expect_error("- clients: cn:a\n  keys: [\"*\"]\n", ":1", "must be a list");
    expect_error("- clients: []\n  keys: [\"*\"]\n", ":1", "is empty");
    expect_error("- clients: [[cn:a]]\n  keys: [\"*\"]\n", ":1",
                 "entries must be text");
    expect_error("- clients: [cn:a]\n  keys: [\"*\"]\n  extra: 1\n", ":3",
                 "unknown member");
    expect_error("- clients: [cn:a]\n  clients: [cn:b]\n  keys: [\"*\"]\n",
                 ":2", "twice");
    expect_error("- [cn:a]\n", ":1", "must be a map");
    expect_error("- clients: [cn:a\n", "access.yaml:", "");
    expect_error("", "access.yaml:1", "list of rules");
    /* 65 rules */
    static char many[65 * 40 + 1];
    many[0] = 0;
    for (int i = 0; i < 65; i++)
        strcat(many, "- {clients: [cn:a], keys: [\"*\"]}\n");
    expect_error(many, "access.yaml:", "more than 64 rules");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_replace),
        cmocka_unit_test(test_allows_ski),
        cmocka_unit_test(test_full_length_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
