/* SPDX-License-Identifier: Apache-2.0 */
/* The latency histogram: exact for small values, within 1/64 above, never
 * above the largest sample, merge equals recording everything in one. */
#include "testutil.h"

#include <stdlib.h>

#include "lathist.h"

static int cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_small_values_exact(void **state)
{
    kl_lathist h;
    kl_lathist_init(&h);
    assert_int_equal(kl_lathist_quantile(&h, 0.5), 0);
    for (uint64_t v = 1; v <= 100; v++)
        kl_lathist_record(&h, v);
    assert_int_equal(h.count, 100);
    assert_int_equal(kl_lathist_quantile(&h, 0.5), 50);
    assert_int_equal(kl_lathist_quantile(&h, 0.99), 99);
    assert_int_equal(kl_lathist_quantile(&h, 1.0), 100);
    assert_int_equal(kl_lathist_quantile(&h, 0.0), 1);
    assert_int_equal(kl_lathist_mean(&h), 50); /* 5050 / 100 */
}

#define N 100000

static void test_against_sorted(void **state)
{
    static uint64_t v[N];
    kl_lathist h, a, b;
    kl_lathist_init(&h);
    kl_lathist_init(&a);
    kl_lathist_init(&b);
    srand(11);
    for (size_t i = 0; i < N; i++) {
        /* 1 µs .. ~1 s, log-spread like latencies */
        v[i] = (uint64_t)1000 << (rand() % 20);
        v[i] += (uint64_t)rand() % v[i];
        kl_lathist_record(&h, v[i]);
        kl_lathist_record(i % 2 ? &a : &b, v[i]);
    }
    kl_lathist_merge(&a, &b);
    qsort(v, N, sizeof v[0], cmp);
    const double qs[] = {0.5, 0.9, 0.99, 0.999};
    for (size_t i = 0; i < 4; i++) {
        uint64_t exact = v[(size_t)(qs[i] * N + 0.5) - 1];
        uint64_t got = kl_lathist_quantile(&h, qs[i]);
        assert_true(got >= exact);
        assert_true(got - exact <= exact / 64 + 1);
        assert_int_equal(kl_lathist_quantile(&a, qs[i]), got);
    }
    assert_int_equal(kl_lathist_quantile(&h, 1.0), v[N - 1]);
    assert_int_equal(h.max, v[N - 1]);
    assert_int_equal(h.min, v[0]);
    assert_int_equal(a.count, N);
    assert_int_equal(a.sum, h.sum);
}

static void test_huge_value_clamped(void **state)
{
    kl_lathist h;
    kl_lathist_init(&h);
    kl_lathist_record(&h, UINT64_MAX / 2);
    kl_lathist_record(&h, 5);
    assert_int_equal(kl_lathist_quantile(&h, 1.0), UINT64_MAX / 2);
    assert_int_equal(kl_lathist_quantile(&h, 0.5), 5);
}

static void test_bucket_bounds(void **state)
{
    uint64_t lo, hi, prev_hi = 0;
    kl_lathist_bucket_bounds(0, &lo, &hi);
    assert_int_equal(lo, 0);
    assert_int_equal(hi, 0);
    for (unsigned i = 1; i < KL_LATHIST_BUCKETS; i++) {
        kl_lathist_bucket_bounds(i, &lo, &hi);
        assert_int_equal(lo, prev_hi + 1); /* contiguous, no gaps */
        assert_true(hi >= lo);
        /* a bucket is at most 1/64 of its values wide */
        assert_true(hi - lo <= lo / 64);
        kl_lathist h;
        kl_lathist_init(&h);
        kl_lathist_record(&h, lo);
        kl_lathist_record(&h, hi);
        assert_int_equal(h.b[i], 2);
        prev_hi = hi;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_values_exact),
        cmocka_unit_test(test_against_sorted),
        cmocka_unit_test(test_huge_value_clamped),
        cmocka_unit_test(test_bucket_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
