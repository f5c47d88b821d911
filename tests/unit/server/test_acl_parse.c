/* The access-file parser (server/acl.h): accepted forms, and every
 * malformed file refused with the file, the line and the problem. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "server/acl.h"

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
    /* no access lists: everything allowed */
    assert_true(kl_acl_allows(NULL, 0, NULL));
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
