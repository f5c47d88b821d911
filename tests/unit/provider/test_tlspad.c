/* SPDX-License-Identifier: Apache-2.0 */
/* The constant-time TLS premaster check (provider/tlspad.h): a good block
 * gives its premaster; every kind of bad block gives the random one. */
#include "testutil.h"

#include <string.h>

#include "provider/tlspad.h"

#define K 256

static const uint8_t rnd[48] = {
    0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE,
    0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE,
    0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE,
    0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE};

/* 00 02 PS 00 03 03 || 46 bytes. */
static void good_block(uint8_t em[K])
{
    em[0] = 0;
    em[1] = 2;
    for (size_t i = 2; i < K - 49; i++)
        em[i] = (uint8_t)(1 + i % 255);
    em[K - 49] = 0;
    em[K - 48] = 3;
    em[K - 47] = 3;
    for (size_t i = K - 46; i < K; i++)
        em[i] = (uint8_t)i;
}

static void expect(const uint8_t em[K], unsigned cv, unsigned alt, int good)
{
    uint8_t out[48];
    assert_int_equal(klp_tls_premaster(em, K, cv, alt, rnd, out),
                     (unsigned)good);
    if (good)
        assert_memory_equal(out, em + K - 48, 48);
    else
        assert_memory_equal(out, rnd, 48);
}

static void test_good(void **state)
{
    uint8_t em[K];
    good_block(em);
    expect(em, 0x0303, 0, 1);
    /* The rollback workaround: the negotiated version is accepted too. */
    em[K - 47] = 1;
    expect(em, 0x0303, 0x0301, 1);
    expect(em, 0x0303, 0, 0);
}

static void test_bad(void **state)
{
    uint8_t em[K];
    good_block(em);
    em[0] = 1;
    expect(em, 0x0303, 0, 0);
    good_block(em);
    em[1] = 1;
    expect(em, 0x0303, 0, 0);
    good_block(em);
    em[100] = 0; /* a zero inside PS: the message would be too long */
    expect(em, 0x0303, 0, 0);
    good_block(em);
    em[2] = 0; /* no padding at all */
    expect(em, 0x0303, 0, 0);
    good_block(em);
    em[K - 49] = 7; /* no separator where a 48-byte message needs it */
    expect(em, 0x0303, 0, 0);
    good_block(em);
    em[K - 48] = 2; /* version */
    expect(em, 0x0303, 0, 0);
    good_block(em);
    expect(em, 0x0302, 0, 0);
    /* A key too small to hold a premaster at all. */
    uint8_t out[48];
    assert_int_equal(klp_tls_premaster(em, 58, 0x0303, 0, rnd, out), 0);
    assert_memory_equal(out, rnd, 48);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good),
        cmocka_unit_test(test_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
