/* SPDX-License-Identifier: Apache-2.0 */
/* The bounded cursor: every read either completes or fails without moving. */
#include "testutil.h"

#include "core/cursor.h"

static void test_reads_big_endian(void **state)
{
    (void)state;
    const uint8_t in[] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07};
    kl_cursor c;
    kl_cursor_init(&c, in, sizeof in);
    uint8_t a;
    uint16_t b;
    uint32_t d;
    assert_int_equal(kl_read_u8(&c, &a), KL_OK);
    assert_int_equal(a, 1);
    assert_int_equal(kl_read_u16(&c, &b), KL_OK);
    assert_int_equal(b, 0x0203);
    assert_int_equal(kl_read_u32(&c, &d), KL_OK);
    assert_int_equal(d, 0x04050607);
    assert_int_equal(kl_cursor_left(&c), 0);
}

static void test_short_reads_fail_without_moving(void **state)
{
    (void)state;
    const uint8_t in[] = {0xAA, 0xBB, 0xCC};
    kl_cursor c;
    kl_cursor_init(&c, in, sizeof in);
    uint32_t d;
    const uint8_t *p;
    kl_cursor sub;
    assert_int_equal(kl_read_u32(&c, &d), KL_E_TRUNCATED);
    assert_int_equal(kl_cursor_left(&c), 3);
    assert_int_equal(kl_read_bytes(&c, 4, &p), KL_E_TRUNCATED);
    assert_int_equal(kl_read_sub(&c, 4, &sub), KL_E_TRUNCATED);
    assert_int_equal(kl_cursor_left(&c), 3);
    assert_int_equal(kl_read_sub(&c, 2, &sub), KL_OK);
    assert_int_equal(kl_cursor_left(&sub), 2);
    assert_int_equal(kl_cursor_left(&c), 1);
    uint16_t w;
    assert_int_equal(kl_read_u16(&c, &w), KL_E_TRUNCATED);
    /* an empty cursor refuses even a u8 */
    kl_cursor_init(&c, NULL, 0);
    uint8_t b;
    assert_int_equal(kl_read_u8(&c, &b), KL_E_TRUNCATED);
}

static void test_writer_refuses_overflow(void **state)
{
    (void)state;
    uint8_t out[5];
    kl_writer w;
    kl_writer_init(&w, out, sizeof out);
    assert_int_equal(kl_write_u32(&w, 0x01020304), KL_OK);
    assert_int_equal(kl_write_u16(&w, 0x0506), KL_E_TOO_LARGE);
    assert_int_equal(w.len, 4);
    assert_int_equal(kl_write_bytes(&w, "xy", 2), KL_E_TOO_LARGE);
    assert_int_equal(kl_write_zeros(&w, 1), KL_OK);
    assert_int_equal(kl_write_u8(&w, 1), KL_E_TOO_LARGE);
    assert_memory_equal(out, "\x01\x02\x03\x04\x00", 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_big_endian),
        cmocka_unit_test(test_short_reads_fail_without_moving),
        cmocka_unit_test(test_writer_refuses_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
