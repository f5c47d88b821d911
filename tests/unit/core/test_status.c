/* SPDX-License-Identifier: Apache-2.0 */
/* Statuses and P6 codes (core/status.h, docs/DESIGN.md "Errors"): every
 * code a key server can send has one status and comes back from it
 * unchanged, so what the router passes through and what the encoder writes
 * are the bytes the old code wrote. */
#include "testutil.h"

#include <string.h>

#include "core/status.h"
#include "keyless/protocol.h"

/* Every byte: code -> status -> the same code. */
static void test_round_trip_every_code(void **state)
{
    (void)state;
    for (int code = 0; code <= 0xFF; code++) {
        kl_status s = kl_status_from_p6((uint8_t)code);
        if (code == KL_ERR_NONE)
            assert_int_equal(s, KL_OK);
        else
            assert_int_not_equal(s, KL_OK);
        assert_int_equal(kl_status_to_p6(s), code);
        /* the text is one of ours, never the fallback */
        assert_string_not_equal(kl_status_str(s), "unknown status");
    }
}

/* The named statuses are the P6 codes the server sends (docs/PROTOCOL.md
 * P6), and each code's status is the named one. */
static void test_named_statuses(void **state)
{
    (void)state;
    static const struct {
        kl_status s;
        uint8_t code;
        const char *text;
    } named[] = {
        {KL_OK, KL_ERR_NONE, "ok"},
        {KL_E_CRYPTO, KL_ERR_CRYPTO, "cryptography error"},
        {KL_E_KEY_NOT_FOUND, KL_ERR_KEY_NOT_FOUND, "key not found"},
        {KL_E_READ, KL_ERR_READ, "read failure"},
        {KL_E_VERSION_MISMATCH, KL_ERR_VERSION_MISMATCH, "version mismatch"},
        {KL_E_BAD_OPCODE, KL_ERR_BAD_OPCODE, "bad opcode"},
        {KL_E_UNEXPECTED_OPCODE, KL_ERR_UNEXPECTED_OPCODE, "unexpected opcode"},
        {KL_E_FORMAT, KL_ERR_FORMAT, "malformed message"},
        {KL_E_INTERNAL, KL_ERR_INTERNAL, "internal error"},
        {KL_E_CERT_NOT_FOUND, KL_ERR_CERT_NOT_FOUND, "certificate not found"},
        {KL_E_EXPIRED, KL_ERR_EXPIRED, "sealing key expired"},
        {KL_E_REMOTE_CONFIG, KL_ERR_REMOTE_CONFIG,
         "remote configuration error"},
    };
    assert_int_equal(sizeof named / sizeof named[0], KL_ERR_MAX + 1);
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        assert_int_equal(named[i].code, i); /* every code, in order */
        assert_int_equal(kl_status_to_p6(named[i].s), named[i].code);
        assert_int_equal(kl_status_from_p6(named[i].code), named[i].s);
        assert_string_equal(kl_status_str(named[i].s), named[i].text);
        for (size_t j = 0; j < i; j++) /* distinct values and texts */
            assert_string_not_equal(kl_status_str(named[j].s), named[i].text);
    }
    /* a code no keylessd sends, as a remote answered it */
    assert_string_equal(kl_status_str(kl_status_from_p6(0x42)),
                        "unknown error code from a remote key server");
}

/* What the peer sent wrong is `format error`; every other local failure
 * is `internal error` (docs/PROTOCOL.md P3, P6). */
static void test_local_statuses(void **state)
{
    (void)state;
    static const kl_status format[] = {
        KL_E_TRUNCATED,      KL_E_ITEM_OVERRUN, KL_E_DUP_TAG,   KL_E_OPCODE_LEN,
        KL_E_COMPLIANCE_LEN, KL_E_IP_LEN,       KL_E_TOO_LARGE, KL_E_BAD_VALUE,
    };
    for (size_t i = 0; i < sizeof format / sizeof format[0]; i++)
        assert_int_equal(kl_status_to_p6(format[i]), KL_ERR_FORMAT);
    static const kl_status internal[] = {
        KL_E_AGAIN,       KL_E_NOMEM,   KL_E_IO,        KL_E_CONFIG,
        KL_E_KEY,         KL_E_TLS,     KL_E_INTERNAL,  KL_E_NOT_FOUND,
        KL_E_TIMEOUT,     KL_E_CLOSED,  (kl_status)-99, (kl_status)-356,
        (kl_status)-1000, (kl_status)1,
    };
    for (size_t i = 0; i < sizeof internal / sizeof internal[0]; i++)
        assert_int_equal(kl_status_to_p6(internal[i]), KL_ERR_INTERNAL);
    /* the public statuses keep their texts */
    assert_string_equal(kl_status_str(KL_E_NOMEM), "out of memory");
    assert_string_equal(kl_status_str((kl_status)-1000), "unknown status");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_every_code),
        cmocka_unit_test(test_named_statuses),
        cmocka_unit_test(test_local_statuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
