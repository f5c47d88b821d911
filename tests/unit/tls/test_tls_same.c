/* SPDX-License-Identifier: Apache-2.0 */
/* kl_tls_ctx_same (resumption across a reload, docs/DESIGN.md
 * "Limits and backpressure"): two server
 * contexts are "the same" exactly when what they were built from is -
 * options, own chain, trusted CAs as loaded - and not when only a file
 * name, the order of the CAs in the file or the PEM text around them
 * differs. A reload keeps the serving context (and its sessions) on
 * "same", so a false "same" after a CA change would let sessions survive
 * a CA removal. Certificates are made with the openssl CLI. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tls/tls.h"
#include "tlstest.h"

/* Two CAs, two server certificates from the first, and CA bundles. */
static int make_pki(void **state)
{
    (void)state;
    if (tt_mkdir("/tmp/kl-tls-same-XXXXXX") != 0)
        return -1;
    tt_ca("ca", "test-ca");
    tt_ca("other", "other-ca");
    tt_leaf("server", "localhost", "serverAuth", "DNS:localhost", "ca");
    tt_leaf("server2", "localhost", "serverAuth", "DNS:localhost", "ca");
    tu_sh_in(tt_dir, "cp ca.pem ca-copy.pem");
    tu_sh_in(tt_dir, "cat ca.pem other.pem > both.pem && "
                     "cat other.pem ca.pem > both-reversed.pem");
    /* the same certificate with text around it, as `openssl x509 -text`
     * writes it */
    tu_sh_in(tt_dir, "openssl x509 -in ca.pem -text > ca-text.pem");
    return 0;
}

typedef struct variant {
    const char *cert, *ca;
    bool no13;
    long long verify_time;
    long session_cache;
} variant;

static kl_tls_ctx *build(variant v)
{
    kl_tls_opts o = {
        .cert_file = tt_path(v.cert ? v.cert : "server.pem"),
        .ca_file = tt_path(v.ca ? v.ca : "ca.pem"),
        .disable_tls13 = v.no13,
        .verify_time = v.verify_time,
        .session_cache = v.session_cache,
    };
    char key[64];
    snprintf(key, sizeof key, "%.*s.key",
             (int)(strlen(v.cert ? v.cert : "server.pem") - 4),
             v.cert ? v.cert : "server.pem");
    o.key_file = tt_path(key);
    char err[512];
    kl_tls_ctx *t = kl_tls_server_ctx_new(&o, err, sizeof err);
    if (!t)
        fail_msg("%s", err);
    return t;
}

static bool same(variant a, variant b)
{
    kl_tls_ctx *x = build(a), *y = build(b);
    bool r = kl_tls_ctx_same(x, y);
    assert_true(kl_tls_ctx_same(y, x) == r);
    kl_tls_ctx_free(x);
    kl_tls_ctx_free(y);
    return r;
}

static void test_same_material_is_same(void **state)
{
    (void)state;
    variant base = {0};
    assert_true(same(base, base));
    /* another file with the same bytes */
    assert_true(same(base, (variant){.ca = "ca-copy.pem"}));
    /* the same certificate with other PEM text around it */
    assert_true(same(base, (variant){.ca = "ca-text.pem"}));
    /* the same CAs in another order */
    assert_true(same((variant){.ca = "both.pem"},
                     (variant){.ca = "both-reversed.pem"}));
    /* the default session cache size, spelt out */
    assert_true(same(base, (variant){.session_cache = 20480}));
}

static void test_changed_material_differs(void **state)
{
    (void)state;
    variant base = {0};
    /* a CA added, a CA replaced */
    assert_false(same(base, (variant){.ca = "both.pem"}));
    assert_false(same(base, (variant){.ca = "other.pem"}));
    /* another server identity from the same CA */
    assert_false(same(base, (variant){.cert = "server2.pem"}));
    /* options */
    assert_false(same(base, (variant){.no13 = true}));
    assert_false(same(base, (variant){.verify_time = 1700000000}));
    assert_false(same(base, (variant){.session_cache = 100}));
}

static bool same_trust(variant a, variant b)
{
    kl_tls_ctx *x = build(a), *y = build(b);
    bool r = kl_tls_ctx_same_trust(x, y);
    assert_true(kl_tls_ctx_same_trust(y, x) == r);
    kl_tls_ctx_free(x);
    kl_tls_ctx_free(y);
    return r;
}

/* kl_tls_ctx_same_trust (docs/SECURITY.md "Revocation and expiry"): a
 * reload re-verifies the open connections' clients exactly when the
 * trusted CAs (or the verification time) changed - not for a new own
 * certificate or other options, which a client's trust does not depend
 * on. */
static void test_same_trust(void **state)
{
    (void)state;
    variant base = {0};
    assert_true(same_trust(base, base));
    assert_true(same_trust(base, (variant){.ca = "ca-text.pem"}));
    assert_true(same_trust((variant){.ca = "both.pem"},
                           (variant){.ca = "both-reversed.pem"}));
    assert_true(same_trust(base, (variant){.cert = "server2.pem"}));
    assert_true(same_trust(base, (variant){.no13 = true}));
    assert_true(same_trust(base, (variant){.session_cache = 100}));
    /* a CA removed, added or replaced; another verification time */
    assert_false(same_trust((variant){.ca = "both.pem"}, base));
    assert_false(same_trust(base, (variant){.ca = "other.pem"}));
    assert_false(same_trust(base, (variant){.verify_time = 1700000000}));
    kl_tls_ctx *x = build(base);
    assert_false(kl_tls_ctx_same_trust(x, NULL));
    kl_tls_ctx_free(x);
}

static void test_no_context_is_never_same(void **state)
{
    (void)state;
    kl_tls_ctx *x = build((variant){0});
    assert_false(kl_tls_ctx_same(x, NULL));
    assert_false(kl_tls_ctx_same(NULL, x));
    /* a client context from the same files is not a server context */
    kl_tls_opts o = {.cert_file = tt_path("server.pem"),
                     .key_file = tt_path("server.key"),
                     .ca_file = tt_path("ca.pem")};
    char err[512];
    kl_tls_ctx *c = kl_tls_client_ctx_new(&o, err, sizeof err);
    assert_non_null(c);
    assert_false(kl_tls_ctx_same(x, c));
    kl_tls_ctx_free(c);
    kl_tls_ctx_free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_material_is_same),
        cmocka_unit_test(test_changed_material_differs),
        cmocka_unit_test(test_no_context_is_never_same),
        cmocka_unit_test(test_same_trust),
    };
    return cmocka_run_group_tests(tests, make_pki, tt_remove);
}
