/* SPDX-License-Identifier: Apache-2.0 */
/* Key reference bodies (provider/keyref.h): a full reference round-trips
 * byte for byte, and every malformed body is refused with a reason. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "provider/keyref.h"

static const uint8_t spki[] = {0x30, 0x03, 0x02, 0x01, 0x01};

static kl_keyref sample(void)
{
    static char s1[] = "127.0.0.1:2407", s2[] = "[::1]:2407";
    kl_keyref r;
    memset(&r, 0, sizeof r);
    for (int i = 0; i < 20; i++)
        r.ski[i] = (uint8_t)(i + 1);
    r.servers[0] = s1;
    r.servers[1] = s2;
    r.nservers = 2;
    r.cert_file = "/etc/keyless/client.crt";
    r.key_file = "/etc/keyless/client.key";
    r.ca_file = "/etc/keyless/ca.crt";
    r.server_name = "keyless.example";
    r.fallback_key = "/etc/keyless/fallback.key";
    r.timeout_ms = 2500;
    r.spki = (uint8_t *)spki;
    r.spki_len = sizeof spki;
    return r;
}

static void test_roundtrip(void **state)
{
    kl_keyref in = sample(), out;
    uint8_t *body, *again;
    size_t len, len2;
    char err[128];
    assert_int_equal(kl_keyref_encode(&in, &body, &len), KL_OK);
    assert_memory_equal(body, "KLR1", 4);
    assert_int_equal(kl_keyref_parse(body, len, &out, err, sizeof err), KL_OK);
    assert_memory_equal(out.ski, in.ski, 20);
    assert_int_equal(out.nservers, 2);
    assert_string_equal(out.servers[1], "[::1]:2407");
    assert_string_equal(out.cert_file, in.cert_file);
    assert_string_equal(out.key_file, in.key_file);
    assert_string_equal(out.ca_file, in.ca_file);
    assert_string_equal(out.server_name, in.server_name);
    assert_string_equal(out.fallback_key, in.fallback_key);
    assert_int_equal(out.timeout_ms, 2500);
    assert_int_equal(out.spki_len, sizeof spki);
    assert_memory_equal(out.spki, spki, sizeof spki);
    assert_int_equal(kl_keyref_encode(&out, &again, &len2), KL_OK);
    assert_int_equal(len2, len);
    assert_memory_equal(again, body, len);
    kl_keyref_clear(&out);
    free(body);
    free(again);
}

/* Minimal: SKI, one server, the public key; optional tags are skipped. */
static void test_minimal_and_extensions(void **state)
{
    static const uint8_t b[] = {'K',  'L', 'R', '1',  0x01, 0,  20, 1,    2,
                                3,    4,   5,   6,    7,    8,  9,  10,   11,
                                12,   13,  14,  15,   16,   17, 18, 19,   20,
                                0x02, 0,   1,   'h',  0x80, 0,  2,  0xAA, 0xBB,
                                0x09, 0,   2,   0x30, 0x00};
    kl_keyref r;
    char err[128];
    assert_int_equal(kl_keyref_parse(b, sizeof b, &r, err, sizeof err), KL_OK);
    assert_string_equal(r.servers[0], "h");
    assert_null(r.cert_file);
    assert_int_equal(r.timeout_ms, 0);
    kl_keyref_clear(&r);
}

static void expect_bad(const uint8_t *b, size_t n, const char *why)
{
    kl_keyref r;
    char err[128];
    assert_int_equal(kl_keyref_parse(b, n, &r, err, sizeof err),
                     KL_E_BAD_VALUE);
    if (!strstr(err, why))
        fail_msg("expected \"%s\", got \"%s\"", why, err);
    assert_int_equal(r.nservers, 0);
    assert_null(r.spki);
}

/* The minimal body with one change. */
static size_t variant(uint8_t *out, const uint8_t *extra, size_t n, int drop)
{
    static const uint8_t ski[] = {0x01, 0,  20, 1,  2,  3,  4,  5,
                                  6,    7,  8,  9,  10, 11, 12, 13,
                                  14,   15, 16, 17, 18, 19, 20};
    static const uint8_t srv[] = {0x02, 0, 1, 'h'};
    static const uint8_t key[] = {0x09, 0, 2, 0x30, 0x00};
    size_t len = 0;
    memcpy(out, "KLR1", 4);
    len = 4;
    if (drop != 1)
        memcpy(out + len, ski, sizeof ski), len += sizeof ski;
    if (drop != 2)
        memcpy(out + len, srv, sizeof srv), len += sizeof srv;
    if (drop != 3)
        memcpy(out + len, key, sizeof key), len += sizeof key;
    if (n)
        memcpy(out + len, extra, n);
    return len + n;
}

static void test_malformed(void **state)
{
    uint8_t b[256];
    expect_bad((const uint8_t *)"KLR2", 4, "not a keyless key reference");
    expect_bad((const uint8_t *)"KL", 2, "not a keyless key reference");
    expect_bad(b, variant(b, NULL, 0, 1), "no SKI");
    expect_bad(b, variant(b, NULL, 0, 2), "no key server");
    expect_bad(b, variant(b, NULL, 0, 3), "no public key");
    const uint8_t trunc[] = {0x03, 0, 9, 'a'};
    expect_bad(b, variant(b, trunc, sizeof trunc, 0), "truncated item");
    const uint8_t half[] = {0x03, 0};
    expect_bad(b, variant(b, half, sizeof half, 0), "truncated item");
    const uint8_t dup[] = {0x09, 0, 1, 0x30};
    expect_bad(b, variant(b, dup, sizeof dup, 0), "appears twice");
    const uint8_t unknown[] = {0x33, 0, 0};
    expect_bad(b, variant(b, unknown, sizeof unknown, 0), "unknown item 0x33");
    const uint8_t empty[] = {0x05, 0, 0};
    expect_bad(b, variant(b, empty, sizeof empty, 0), "1..4095 byte string");
    const uint8_t nul[] = {0x06, 0, 3, 'a', 0, 'b'};
    expect_bad(b, variant(b, nul, sizeof nul, 0), "1..4095 byte string");
    const uint8_t tmo[] = {0x07, 0, 2, 1, 0};
    expect_bad(b, variant(b, tmo, sizeof tmo, 0), "timeout is 2 bytes");
    const uint8_t tmo0[] = {0x07, 0, 4, 0, 0, 0, 0};
    expect_bad(b, variant(b, tmo0, sizeof tmo0, 0), "out of 1..600000");
    const uint8_t certonly[] = {0x03, 0, 1, 'c'};
    expect_bad(b, variant(b, certonly, sizeof certonly, 0), "needs its key");
    uint8_t nine[4 * 9], *p = nine;
    for (int i = 0; i < 9; i++, p += 4)
        memcpy(p, (const uint8_t[]){0x02, 0, 1, 'x'}, 4);
    expect_bad(b, variant(b, nine, sizeof nine - 4, 0), "more than 8");
    uint8_t ski19[] = {'K', 'L', 'R', '1', 0x01, 0, 19};
    expect_bad(ski19, sizeof ski19, "truncated");
}

static void test_encode_refuses(void **state)
{
    kl_keyref r = sample();
    uint8_t *body;
    size_t len;
    r.nservers = 0;
    assert_int_equal(kl_keyref_encode(&r, &body, &len), KL_E_BAD_VALUE);
    r = sample();
    r.key_file = NULL;
    assert_int_equal(kl_keyref_encode(&r, &body, &len), KL_E_BAD_VALUE);
    r = sample();
    r.server_name = "";
    assert_int_equal(kl_keyref_encode(&r, &body, &len), KL_E_BAD_VALUE);
    r = sample();
    r.spki = NULL;
    assert_int_equal(kl_keyref_encode(&r, &body, &len), KL_E_BAD_VALUE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_minimal_and_extensions),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_encode_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
