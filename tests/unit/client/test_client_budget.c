/* SPDX-License-Identifier: Apache-2.0 */
/* The retry budget (at most 10% extra requests over a sliding 10 s) and
 * the reconnect backoff (exponential, capped, jittered) of libkeyless. */
#include "testutil.h"

#include "client/budget.h"

#define SEC 1000000000ull

static void test_no_requests_no_retries(void **state)
{
    kl_retry_budget b;
    kl_budget_init(&b, 10);
    assert_false(kl_budget_try_retry(&b, 5 * SEC));
    /* 9 requests: 10% of 9 is below one retry */
    for (int i = 0; i < 9; i++)
        kl_budget_request(&b, 5 * SEC);
    assert_false(kl_budget_try_retry(&b, 5 * SEC));
    kl_budget_request(&b, 5 * SEC);
    assert_true(kl_budget_try_retry(&b, 5 * SEC));
    assert_false(kl_budget_try_retry(&b, 5 * SEC));
}

static void test_ten_percent(void **state)
{
    kl_retry_budget b;
    kl_budget_init(&b, 10);
    for (int i = 0; i < 1000; i++)
        kl_budget_request(&b, 100 * SEC + (uint64_t)i * 1000000ull);
    int granted = 0;
    for (int i = 0; i < 500; i++)
        granted += kl_budget_try_retry(&b, 101 * SEC);
    assert_int_equal(granted, 100);
    uint64_t req, ret;
    kl_budget_window(&b, 101 * SEC, &req, &ret);
    assert_int_equal(req, 1000);
    assert_int_equal(ret, 100);
}

static void test_window_slides(void **state)
{
    kl_retry_budget b;
    kl_budget_init(&b, 10);
    for (int i = 0; i < 100; i++)
        kl_budget_request(&b, 50 * SEC);
    for (int i = 0; i < 10; i++)
        assert_true(kl_budget_try_retry(&b, 55 * SEC));
    assert_false(kl_budget_try_retry(&b, 59 * SEC + SEC / 2));
    /* 10 s later the old requests and retries are out of the window */
    uint64_t req, ret;
    kl_budget_window(&b, 60 * SEC, &req, &ret);
    assert_int_equal(req, 0);
    kl_budget_window(&b, 64 * SEC, &req, &ret);
    assert_int_equal(ret, 10);
    kl_budget_window(&b, 65 * SEC, &req, &ret);
    assert_int_equal(ret, 0);
    assert_false(kl_budget_try_retry(&b, 61 * SEC));
    for (int i = 0; i < 20; i++)
        kl_budget_request(&b, 66 * SEC);
    assert_true(kl_budget_try_retry(&b, 66 * SEC));
    assert_true(kl_budget_try_retry(&b, 66 * SEC));
    assert_false(kl_budget_try_retry(&b, 66 * SEC));
}

static void test_zero_ratio(void **state)
{
    kl_retry_budget b;
    kl_budget_init(&b, 0);
    for (int i = 0; i < 1000; i++)
        kl_budget_request(&b, SEC);
    assert_false(kl_budget_try_retry(&b, SEC));
}

static void test_backoff(void **state)
{
    const uint64_t base = 50000000ull, max = 5000000000ull;
    /* rnd 0 gives the lower end d/2, rnd = half the upper end d */
    assert_int_equal(kl_backoff_ns(1, base, max, 0), base / 2);
    assert_int_equal(kl_backoff_ns(1, base, max, base / 2), base);
    assert_int_equal(kl_backoff_ns(2, base, max, 0), base);
    assert_int_equal(kl_backoff_ns(3, base, max, 0), 2 * base);
    assert_int_equal(kl_backoff_ns(100, base, max, 0), max / 2);
    assert_int_equal(kl_backoff_ns(100, base, max, max / 2), max);
    /* always within [d/2, d] whatever the random value */
    uint64_t x = 88172645463325252ull;
    for (unsigned f = 1; f < 20; f++) {
        uint64_t d = base << (f - 1);
        if (d > max || f > 10)
            d = max;
        for (int i = 0; i < 100; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            uint64_t v = kl_backoff_ns(f, base, max, x);
            assert_true(v >= d - d / 2 && v <= d);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_requests_no_retries),
        cmocka_unit_test(test_ten_percent),
        cmocka_unit_test(test_window_slides),
        cmocka_unit_test(test_zero_ratio),
        cmocka_unit_test(test_backoff),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
