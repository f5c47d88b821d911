/* SPDX-License-Identifier: Apache-2.0 */
/* PKCS#11 URI rules of the key store, without a module: what is
 * accepted and how it is read, each rule's refusal, PIN redaction. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#include "keys/p11uri.h"

#define MOD "?module-path=/m.so"

static void test_full_uri(void **state)
{
    (void)state;
    kl_p11_uri u;
    char why[256] = "";
    assert_int_equal(
        kl_p11_uri_parse("pkcs11:token=My%20Token;object=web;id=%01%ff"
                         "?module-path=/usr/lib/m.so&pin-value=12%2634"
                         "&max-sessions=8",
                         &u, why, sizeof why),
        KL_OK);
    assert_string_equal(u.module_path, "/usr/lib/m.so");
    assert_true(u.has_token && !u.has_serial && !u.has_slot_id);
    assert_string_equal(u.token, "My Token");
    assert_string_equal(u.object, "web");
    assert_int_equal(u.id_len, 2);
    assert_memory_equal(u.id, "\x01\xff", 2);
    assert_string_equal(u.pin, "12&34");
    assert_null(u.pin_source);
    assert_int_equal(u.max_sessions, 8);
    assert_null(strstr(u.redacted, "12%2634"));
    assert_non_null(strstr(u.redacted, "pin-value=***&max-sessions=8"));
    kl_p11_uri_clear(&u);

    assert_int_equal(kl_p11_uri_parse("pkcs11:serial=0123abcd;id=%02" MOD
                                      "&pin-source=/etc/pin",
                                      &u, why, sizeof why),
                     KL_OK);
    assert_true(u.has_serial && !u.has_token);
    assert_string_equal(u.serial, "0123abcd");
    assert_null(u.object);
    assert_string_equal(u.pin_source, "/etc/pin");
    assert_null(u.pin);
    assert_int_equal(u.max_sessions, KL_P11_DEFAULT_SESSIONS);
    kl_p11_uri_clear(&u);

    assert_int_equal(
        kl_p11_uri_parse("pkcs11:slot-id=7;object=k" MOD, &u, why, sizeof why),
        KL_OK);
    assert_true(u.has_slot_id);
    assert_int_equal(u.slot_id, 7);
    assert_null(u.pin);
    kl_p11_uri_clear(&u);
}

static void refused(const char *uri, const char *reason)
{
    kl_p11_uri u;
    char why[256] = "";
    assert_int_equal(kl_p11_uri_parse(uri, &u, why, sizeof why), KL_E_CONFIG);
    if (!strstr(why, reason))
        fail_msg("%s: \"%s\" lacks \"%s\"", uri, why, reason);
    assert_null(strstr(why, "s3cret")); /* never the PIN */
    assert_null(u.module_path);
    assert_null(u.redacted);
}

static void test_refusals(void **state)
{
    (void)state;
    refused(NULL, "no URI");
    refused("", "not a valid PKCS#11 URI");
    refused("pkcs12:token=a;object=b" MOD, "not a valid PKCS#11 URI");
    refused("pkcs11:token=a;object=b%zz" MOD, "not a valid PKCS#11 URI");
    refused("pkcs11:token=a;object=b?pin-value=s3cret", "no module-path");
    refused("pkcs11:token=a;object=b?module-path=&pin-value=s3cret",
            "no module-path");
    refused("pkcs11:object=b" MOD, "no token");
    refused("pkcs11:serial=1;slot-id=2;object=b" MOD, "more than once");
    refused("pkcs11:token=a;serial=1;object=b" MOD, "more than once");
    refused("pkcs11:token=a" MOD "&pin-value=s3cret", "no key named");
    refused("pkcs11:token=a;object=b%00c" MOD, "NUL byte");
    refused("pkcs11:token=a;object=b" MOD "&pin-value=s3cret&pin-source=/p",
            "both pin-value and pin-source");
    refused("pkcs11:token=a;object=b" MOD "&max-sessions=0", "max-sessions");
    refused("pkcs11:token=a;object=b" MOD "&max-sessions=257", "max-sessions");
    refused("pkcs11:token=a;object=b" MOD "&max-sessions=-1", "max-sessions");
    refused("pkcs11:token=a;object=b" MOD "&max-sessions=4x", "max-sessions");
    refused("pkcs11:token=a;object=b" MOD "&max-sessions=", "max-sessions");
    refused("pkcs11:token=a;object=b;colour=red" MOD, "does not know");
}

static void test_redact(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"pkcs11:token=a?pin-value=1234", "pkcs11:token=a?pin-value=***"},
        {"pkcs11:token=a?module-path=/m&pin-value=1&max-sessions=2",
         "pkcs11:token=a?module-path=/m&pin-value=***&max-sessions=2"},
        {"pkcs11:token=a?pin-value=&pin-value=x",
         "pkcs11:token=a?pin-value=***&pin-value=***"},
        /* only query attributes count; an object label is not a PIN */
        {"pkcs11:object=pin-value=9?x=1", "pkcs11:object=pin-value=9?x=1"},
        {"pkcs11:token=a?xpin-value=1", "pkcs11:token=a?xpin-value=1"},
        {"pin-value=1", "pin-value=1"},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *r = kl_p11_uri_redact(cases[i].in);
        assert_non_null(r);
        assert_string_equal(r, cases[i].out);
        free(r);
    }
}

static void test_pin_source(void **state)
{
    (void)state;
    char dir[] = "/tmp/kl-p11uri-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], uri[256], why[256] = "";
    snprintf(path, sizeof path, "%s/pin", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("9876\nsecond line\n", f);
    fclose(f);
    kl_p11_uri u;
    snprintf(uri, sizeof uri, "pkcs11:token=a;object=b" MOD "&pin-source=%s",
             path);
    assert_int_equal(kl_p11_uri_parse(uri, &u, why, sizeof why), KL_OK);
    assert_int_equal(kl_p11_uri_read_pin(&u, why, sizeof why), KL_OK);
    assert_string_equal(u.pin, "9876");
    kl_p11_uri_clear(&u);
    /* file: form */
    snprintf(uri, sizeof uri,
             "pkcs11:token=a;object=b" MOD "&pin-source=file:%s", path);
    assert_int_equal(kl_p11_uri_parse(uri, &u, why, sizeof why), KL_OK);
    assert_int_equal(kl_p11_uri_read_pin(&u, why, sizeof why), KL_OK);
    assert_string_equal(u.pin, "9876");
    kl_p11_uri_clear(&u);
    /* too long */
    f = fopen(path, "w");
    for (int i = 0; i < 300; i++)
        fputc('7', f);
    fclose(f);
    snprintf(uri, sizeof uri, "pkcs11:token=a;object=b" MOD "&pin-source=%s",
             path);
    assert_int_equal(kl_p11_uri_parse(uri, &u, why, sizeof why), KL_OK);
    assert_int_equal(kl_p11_uri_read_pin(&u, why, sizeof why), KL_E_CONFIG);
    assert_non_null(strstr(why, "longer than"));
    kl_p11_uri_clear(&u);
    unlink(path);
    rmdir(dir);
}

/* Every PKCS#11 URI that docs/OPERATIONS.md gives as an example (a quoted
 * "pkcs11:..." string) is one keylessd accepts, and together they show
 * each way to name the module, token, key and PIN. */
static void test_documented_uris(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/docs/OPERATIONS.md", tu_src_dir());
    char *doc = tu_read_file(path, NULL);
    assert_non_null(doc);
    const char *want[] = {
        "module-path=", "pin-value=", "pin-source=", "token=",       "serial=",
        "slot-id=",     "object=",    "id=",         "max-sessions="};
    bool seen[sizeof want / sizeof want[0]] = {false};
    int n = 0;
    for (const char *p = doc; (p = strstr(p, "\"pkcs11:")) != NULL;) {
        p++;
        const char *end = strchr(p, '"');
        assert_non_null(end);
        char uri[1024];
        assert_true((size_t)(end - p) < sizeof uri);
        memcpy(uri, p, (size_t)(end - p));
        uri[end - p] = 0;
        kl_p11_uri u;
        char why[256] = "";
        if (kl_p11_uri_parse(uri, &u, why, sizeof why) != KL_OK)
            fail_msg("docs/OPERATIONS.md example %s: %s", uri, why);
        kl_p11_uri_clear(&u);
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
            if (strstr(uri, want[i]))
                seen[i] = true;
        n++;
        p = end;
    }
    free(doc);
    if (n < 3)
        fail_msg("docs/OPERATIONS.md has %d PKCS#11 URI example(s)", n);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!seen[i])
            fail_msg("no PKCS#11 URI example in docs/OPERATIONS.md uses %s",
                     want[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_uri),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_redact),
        cmocka_unit_test(test_pin_source),
        cmocka_unit_test(test_documented_uris),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
