/* SPDX-License-Identifier: Apache-2.0 */
/* Operation names on command lines: short names, the protocol's names as
 * the reference tools print them, numbers - and what is refused. */
#include "testutil.h"

#include <string.h>

#include "client/opnames.h"
#include "keyless/protocol.h"

static void expect(const char *s, uint8_t want)
{
    uint8_t op = 0;
    if (!kl_op_parse(s, &op))
        fail_msg("\"%s\" refused", s);
    if (op != want)
        fail_msg("\"%s\" gave 0x%02x, want 0x%02x", s, op, want);
}

static void test_names(void **state)
{
    expect("ecdsa-sha256", KL_OP_ECDSA_SIGN_SHA256);
    expect("ECDSA_SHA256", KL_OP_ECDSA_SIGN_SHA256);
    expect("OpECDSASignSHA256", KL_OP_ECDSA_SIGN_SHA256);
    expect("rsa-pss-sha384", KL_OP_RSA_PSS_SIGN_SHA384);
    expect("OpRSAPSSSignSHA512", KL_OP_RSA_PSS_SIGN_SHA512);
    expect("rsa-md5sha1", KL_OP_RSA_SIGN_MD5SHA1);
    expect("OpRSADecrypt", KL_OP_RSA_DECRYPT);
    expect("rsa-decrypt", KL_OP_RSA_DECRYPT);
    expect("Ed25519", KL_OP_ED25519_SIGN);
    expect("OpEd25519Sign", KL_OP_ED25519_SIGN);
    expect("ping", KL_OP_PING);
    expect("0x15", KL_OP_ECDSA_SIGN_SHA256);
    expect("24", KL_OP_ED25519_SIGN);
    /* every short name comes back as itself */
    for (unsigned v = 0; v < 256; v++) {
        const char *n = kl_op_short((uint8_t)v);
        if (n) {
            expect(n, (uint8_t)v);
            assert_non_null(strstr(kl_op_short_list(), n));
        }
    }
    assert_string_equal(kl_op_short(KL_OP_RSA_PSS_SIGN_SHA256),
                        "rsa-pss-sha256");
    assert_null(kl_op_short(KL_OP_RESPONSE));
}

static void test_refused(void **state)
{
    uint8_t op = 0x77;
    const char *bad[] = {"",      "rsa-sha999", "ecdsa",  "0x100",
                         "-1",    "256",        "sha256", "op",
                         "12abc", "rsa--",      "ed448",  NULL};
    for (size_t i = 0; bad[i]; i++)
        if (kl_op_parse(bad[i], &op))
            fail_msg("\"%s\" accepted as 0x%02x", bad[i], op);
    assert_false(kl_op_parse(NULL, &op));
    char longname[200];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    assert_false(kl_op_parse(longname, &op));
    assert_int_equal(op, 0x77); /* untouched on failure */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
