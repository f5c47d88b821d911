/* SPDX-License-Identifier: Apache-2.0 */
/* P4/P6 names and classification, for every one of the 256 opcode values
 * and every error code. */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

#include "keyless/protocol.h"

typedef struct op_row {
    uint8_t op;
    const char *name;
    const char *type;
    kl_op_class cls;
    size_t digest;
} op_row;

static const op_row known_ops[] = {
    {0x01, "OpRSADecrypt", "rsa", KL_OPC_RSA, 0},
    {0x02, "OpRSASignMD5SHA1", "rsa", KL_OPC_RSA, 36},
    {0x03, "OpRSASignSHA1", "rsa", KL_OPC_RSA, 20},
    {0x04, "OpRSASignSHA224", "rsa", KL_OPC_RSA, 28},
    {0x05, "OpRSASignSHA256", "rsa", KL_OPC_RSA, 32},
    {0x06, "OpRSASignSHA384", "rsa", KL_OPC_RSA, 48},
    {0x07, "OpRSASignSHA512", "rsa", KL_OPC_RSA, 64},
    {0x12, "OpECDSASignMD5SHA1", "ecdsa", KL_OPC_ECDSA, 36},
    {0x13, "OpECDSASignSHA1", "ecdsa", KL_OPC_ECDSA, 20},
    {0x14, "OpECDSASignSHA224", "ecdsa", KL_OPC_ECDSA, 28},
    {0x15, "OpECDSASignSHA256", "ecdsa", KL_OPC_ECDSA, 32},
    {0x16, "OpECDSASignSHA384", "ecdsa", KL_OPC_ECDSA, 48},
    {0x17, "OpECDSASignSHA512", "ecdsa", KL_OPC_ECDSA, 64},
    {0x18, "OpEd25519Sign", "ed25519", KL_OPC_ED25519, 0},
    {0x21, "OpSeal", "other", KL_OPC_SEAL, 0},
    {0x22, "OpUnseal", "other", KL_OPC_SEAL, 0},
    {0x23, "OpRPC", "rpc", KL_OPC_RPC, 0},
    {0x24, "OpCustom", "custom", KL_OPC_CUSTOM, 0},
    {0x35, "OpRSAPSSSignSHA256", "rsa", KL_OPC_RSA_PSS, 32},
    {0x36, "OpRSAPSSSignSHA384", "rsa", KL_OPC_RSA_PSS, 48},
    {0x37, "OpRSAPSSSignSHA512", "rsa", KL_OPC_RSA_PSS, 64},
    {0xF0, "OpResponse", "other", KL_OPC_RESPONSE_ONLY, 0},
    {0xF1, "OpPing", "other", KL_OPC_PING, 0},
    {0xF2, "OpPong", "other", KL_OPC_RESPONSE_ONLY, 0},
    {0xFF, "OpError", "other", KL_OPC_RESPONSE_ONLY, 0},
};

static void test_every_opcode(void **state)
{
    size_t n_known = sizeof known_ops / sizeof known_ops[0];
    (void)state;
    for (unsigned op = 0; op < 256; op++) {
        const op_row *row = NULL;
        for (size_t i = 0; i < n_known; i++)
            if (known_ops[i].op == op)
                row = &known_ops[i];
        if (row) {
            assert_string_equal(kl_op_name((uint8_t)op), row->name);
            assert_string_equal(kl_op_type((uint8_t)op), row->type);
            assert_int_equal(kl_op_classify((uint8_t)op), row->cls);
            assert_int_equal(kl_op_digest_len((uint8_t)op), row->digest);
        } else {
            char want[16];
            snprintf(want, sizeof want, "Op(%u)", op);
            assert_string_equal(kl_op_name((uint8_t)op), want);
            assert_string_equal(kl_op_type((uint8_t)op), "unknown");
            assert_int_equal(kl_op_classify((uint8_t)op), KL_OPC_INVALID);
            assert_int_equal(kl_op_digest_len((uint8_t)op), 0);
        }
        /* Static strings: the same pointer every time. */
        assert_ptr_equal(kl_op_name((uint8_t)op), kl_op_name((uint8_t)op));
    }
    /* The ones P4 calls out. */
    assert_string_equal(kl_op_name(0x00), "Op(0)");
    assert_string_equal(kl_op_name(0x08), "Op(8)");
    assert_string_equal(kl_op_name(0x99), "Op(153)");
    assert_int_equal(kl_op_classify(KL_OP_RSA_DECRYPT_RAW), KL_OPC_INVALID);
}

static void test_error_texts(void **state)
{
    static const char *const texts[] = {
        "no error",
        "cryptography error",
        "key not found due to no matching SKI/SNI/ServerIP",
        "read failure",
        "version mismatch",
        "bad opcode",
        "unexpected opcode",
        "malformed message",
        "internal error",
        "certificate not found",
        "sealing key expired",
        "remote configuration error",
    };
    static const char *const names[] = {
        "none",
        "crypto",
        "key_not_found",
        "read",
        "version_mismatch",
        "bad_opcode",
        "unexpected_opcode",
        "format",
        "internal",
        "cert_not_found",
        "expired",
        "remote_config",
    };
    (void)state;
    assert_int_equal(KL_ERR_MAX + 1, sizeof texts / sizeof texts[0]);
    for (unsigned e = 0; e <= KL_ERR_MAX; e++) {
        assert_string_equal(kl_err_text((uint8_t)e), texts[e]);
        assert_string_equal(kl_err_name((uint8_t)e), names[e]);
    }
    for (unsigned e = KL_ERR_MAX + 1; e < 256; e++) {
        assert_string_equal(kl_err_text((uint8_t)e), "unknown error");
        assert_string_equal(kl_err_name((uint8_t)e), "unknown");
    }
    /* Names are distinct, so they can key a config table. */
    for (unsigned a = 0; a <= KL_ERR_MAX; a++)
        for (unsigned b = a + 1; b <= KL_ERR_MAX; b++)
            assert_string_not_equal(kl_err_name((uint8_t)a),
                                    kl_err_name((uint8_t)b));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_opcode),
        cmocka_unit_test(test_error_texts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
