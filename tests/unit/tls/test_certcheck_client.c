/* SPDX-License-Identifier: Apache-2.0 */
/* kl_certcheck_client (docs/ROUTING.md, "The router's certificate"): the
 * certificate a router presents to remote key servers must be usable for
 * TLS client authentication - extendedKeyUsage absent or with clientAuth,
 * keyUsage absent or with digitalSignature - unexpired, readable, and
 * matching its key; each problem is one error naming the option and the
 * file. Certificates are made with the openssl CLI. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "tls/certcheck.h"
#include "tlstest.h"

/* A leaf NAME.key / NAME.pem from the CA with the extension lines given
 * (printf-ready, separated by \n). */
static void leaf_ext(const char *name, const char *ext)
{
    tu_sh_in(tt_dir,
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
             "-subj /CN=%s -keyout %s.key -out %s.csr && "
             "printf '%s\\n' > %s.ext && "
             "openssl x509 -req -in %s.csr -CA ca.pem -CAkey ca.key "
             "-CAcreateserial -days 2 -extfile %s.ext -out %s.pem",
             name, name, name, ext, name, name, name, name);
}

static int make_pki(void **state)
{
    (void)state;
    if (tt_mkdir("/tmp/kl-certcheck-client-XXXXXX") != 0)
        return -1;
    tt_ca("ca", "test-ca");
    tt_leaf("server", "localhost", "serverAuth", "DNS:localhost", "ca");
    tt_leaf("client", "router", "clientAuth", "DNS:router", "ca");
    tt_leaf("both", "router", "serverAuth,clientAuth", "DNS:router", "ca");
    leaf_ext("noeku", "basicConstraints=CA:FALSE");
    leaf_ext("kuenc", "basicConstraints=CA:FALSE\\nkeyUsage=critical,"
                      "keyEncipherment\\nextendedKeyUsage=clientAuth");
    leaf_ext("kusig", "basicConstraints=CA:FALSE\\nkeyUsage=critical,"
                      "digitalSignature\\nextendedKeyUsage=clientAuth");
    return 0;
}

typedef struct found {
    int errors;
    char last[2048];
} found;

static void report(void *arg, int level, const char *msg)
{
    found *f = arg;
    if (level >= KL_LOG_ERROR)
        f->errors++;
    snprintf(f->last, sizeof f->last, "%s", msg);
}

/* Checks NAME.pem (with key, when given); returns the errors, the last
 * message in *f. */
static int check(const char *name, const char *key, long long now, found *f)
{
    char cert[64], keyf[64];
    snprintf(cert, sizeof cert, "%s.pem", name);
    snprintf(keyf, sizeof keyf, "%s.key", key ? key : name);
    memset(f, 0, sizeof *f);
    kl_client_certcheck c = {
        .cert_option = "router_cert",
        .cert_file = tt_path(cert),
        .key_option = "router_key",
        .key_file = key ? tt_path(keyf) : NULL,
        .fix = "THE FIX",
        .now = now,
        .report = report,
        .arg = f,
    };
    int n = kl_certcheck_client(&c);
    assert_int_equal(n, f->errors);
    return n;
}

static void expect_in(const found *f, const char *want)
{
    if (!strstr(f->last, want))
        fail_msg("expected \"%s\" in \"%s\"", want, f->last);
}

static void test_usable(void **state)
{
    (void)state;
    found f;
    assert_int_equal(check("client", "client", 0, &f), 0);
    assert_int_equal(check("both", "both", 0, &f), 0);
    assert_int_equal(check("noeku", "noeku", 0, &f), 0);
    assert_int_equal(check("kusig", "kusig", 0, &f), 0);
}

static void test_server_only(void **state)
{
    (void)state;
    found f;
    assert_int_equal(check("server", NULL, 0, &f), 1);
    expect_in(&f, "router_cert ");
    expect_in(&f, "server.pem cannot be used as a TLS client certificate: "
                  "its extendedKeyUsage is serverAuth without clientAuth, "
                  "so remote key servers refuse it (\"unsuitable certificate "
                  "purpose\") and every forwarded request fails. THE FIX");
}

static void test_key_usage(void **state)
{
    (void)state;
    found f;
    assert_int_equal(check("kuenc", NULL, 0, &f), 1);
    expect_in(&f, "its keyUsage lacks digitalSignature");
}

static void test_expired(void **state)
{
    (void)state;
    found f;
    long long later = (long long)time(NULL) + 10LL * 86400;
    assert_int_equal(check("client", NULL, later, &f), 1);
    expect_in(&f, "client.pem expired on ");
    expect_in(&f, "THE FIX");
}

static void test_wrong_or_missing_files(void **state)
{
    (void)state;
    found f;
    assert_int_equal(check("client", "server", 0, &f), 1);
    expect_in(&f, "does not match router_key ");
    assert_int_equal(check("nosuch", NULL, 0, &f), 1);
    expect_in(&f, "nosuch.pem: cannot read: No such file or directory");
    /* a key where the certificate belongs */
    memset(&f, 0, sizeof f);
    kl_client_certcheck c = {.cert_option = "router_cert",
                             .cert_file = tt_path("client.key"),
                             .fix = "",
                             .report = report,
                             .arg = &f};
    assert_int_equal(kl_certcheck_client(&c), 1);
    expect_in(&f, "holds a private key");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usable),
        cmocka_unit_test(test_server_only),
        cmocka_unit_test(test_key_usage),
        cmocka_unit_test(test_expired),
        cmocka_unit_test(test_wrong_or_missing_files),
    };
    return cmocka_run_group_tests(tests, make_pki, tt_remove);
}
