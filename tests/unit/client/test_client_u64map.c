/* SPDX-License-Identifier: Apache-2.0 */
/* The handle/id map of libkeyless: put, get, delete with backward shift,
 * growth, and a random workload checked against a plain array. */
#include "testutil.h"

#include <stdlib.h>

#include "client/u64map.h"

static void test_basic(void **state)
{
    kl_u64map m;
    int a, b;
    kl_u64map_init(&m);
    assert_null(kl_u64map_get(&m, 1));
    assert_null(kl_u64map_del(&m, 1));
    assert_int_equal(kl_u64map_put(&m, 1, &a), KL_OK);
    assert_int_equal(kl_u64map_put(&m, 0, &b), KL_OK); /* key 0 is fine */
    assert_ptr_equal(kl_u64map_get(&m, 1), &a);
    assert_ptr_equal(kl_u64map_get(&m, 0), &b);
    assert_int_equal(kl_u64map_put(&m, 1, &b), KL_OK); /* replace */
    assert_int_equal(kl_u64map_count(&m), 2);
    assert_ptr_equal(kl_u64map_del(&m, 1), &b);
    assert_null(kl_u64map_get(&m, 1));
    assert_int_equal(kl_u64map_put(&m, 5, NULL), KL_E_BAD_VALUE);
    assert_int_equal(kl_u64map_count(&m), 1);
    kl_u64map_free(&m);
}

#define N 5000

static void test_random_against_array(void **state)
{
    static void *ref[N];
    static int vals[N];
    kl_u64map m;
    kl_u64map_init(&m);
    srand(7);
    size_t live = 0;
    for (int step = 0; step < 200000; step++) {
        int k = rand() % N;
        /* keys that collide in the low bits stress the probe runs */
        uint64_t key = (uint64_t)k << 20;
        if (rand() % 3) {
            if (!ref[k])
                live++;
            ref[k] = &vals[k];
            assert_int_equal(kl_u64map_put(&m, key, &vals[k]), KL_OK);
        } else {
            void *got = kl_u64map_del(&m, key);
            assert_ptr_equal(got, ref[k]);
            if (ref[k])
                live--;
            ref[k] = NULL;
        }
        if (step % 997 == 0) {
            for (int i = 0; i < N; i++)
                assert_ptr_equal(kl_u64map_get(&m, (uint64_t)i << 20), ref[i]);
        }
    }
    assert_int_equal(kl_u64map_count(&m), live);
    kl_u64map_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_random_against_array),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
