/* SPDX-License-Identifier: Apache-2.0 */
/* The per-thread context cache: hits, references held across a reload
 * (the cache never hands out an entry of a freed key), and growth when far
 * more keys are in rotation than slots. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include <openssl/evp.h>

#include "crypto/ctx_cache.h"

static int setups;

/* Counts misses; the entry needs no real context for these tests. */
static int count_setup(kl_ctx_entry *e)
{
    (void)e;
    setups++;
    return 1;
}

static int failing_setup(kl_ctx_entry *e)
{
    (void)e;
    return 0;
}

static void test_hit_and_reference(void **state)
{
    (void)state;
    setups = 0;
    EVP_PKEY *k = EVP_PKEY_new();
    assert_non_null(k);
    kl_ctx_entry *e = kl_ctx_cache_get(k, 1, NULL, count_setup);
    assert_non_null(e);
    assert_ptr_equal(e->pkey, k);
    assert_ptr_equal(kl_ctx_cache_get(k, 1, NULL, count_setup), e);
    assert_int_equal(setups, 1);
    /* a reload frees the key: the cache's own reference keeps it alive,
     * so its address cannot come back as another key while cached (only
     * the test looks it up after that; the server never does) */
    EVP_PKEY_free(k);
    assert_ptr_equal(kl_ctx_cache_get(k, 1, NULL, count_setup)->pkey, k);
    assert_int_equal(setups, 1);
    /* another opcode is another entry */
    EVP_PKEY *o = EVP_PKEY_new();
    assert_non_null(o);
    assert_non_null(kl_ctx_cache_get(o, 1, NULL, count_setup));
    assert_non_null(kl_ctx_cache_get(o, 2, NULL, count_setup));
    assert_int_equal(setups, 3);
    EVP_PKEY_free(o);
    /* a failed setup leaves no entry behind */
    EVP_PKEY *f = EVP_PKEY_new();
    assert_null(kl_ctx_cache_get(f, 3, NULL, failing_setup));
    EVP_PKEY_free(f);
    kl_ctx_cache_thread_free();
    assert_int_equal(kl_ctx_cache_slots(), 0);
}

#define MANY 20000

/* 20,000 keys in round-robin: the 512 starting slots are full and every
 * miss evicts, so the table grows until the keys fit and later rounds
 * mostly hit; every entry still names its own key after the moves. */
static void test_grows_under_many_keys(void **state)
{
    (void)state;
    EVP_PKEY **k = calloc(MANY, sizeof *k);
    assert_non_null(k);
    for (int i = 0; i < MANY; i++)
        assert_non_null(k[i] = EVP_PKEY_new());
    assert_non_null(kl_ctx_cache_get(k[0], 1, NULL, count_setup));
    size_t start = kl_ctx_cache_slots();
    assert_int_equal(start, 512);
    for (int round = 0; round < 12; round++)
        for (int i = 0; i < MANY; i++)
            assert_ptr_equal(kl_ctx_cache_get(k[i], 1, NULL, count_setup)->pkey,
                             k[i]);
    size_t grown = kl_ctx_cache_slots();
    assert_true(grown >= 3 * (size_t)MANY);
    assert_true(grown <= 256u * 1024u);
    setups = 0;
    for (int i = 0; i < MANY; i++)
        assert_ptr_equal(kl_ctx_cache_get(k[i], 1, NULL, count_setup)->pkey,
                         k[i]);
    /* at >= 3 slots per key every key has its entry: few misses */
    assert_true(setups < MANY / 3);
    /* one key does not grow a fresh table */
    kl_ctx_cache_thread_free();
    for (int i = 0; i < 3 * 4096; i++)
        assert_non_null(kl_ctx_cache_get(k[0], 1, NULL, count_setup));
    assert_int_equal(kl_ctx_cache_slots(), 512);
    kl_ctx_cache_thread_free();
    for (int i = 0; i < MANY; i++)
        EVP_PKEY_free(k[i]);
    free(k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_and_reference),
        cmocka_unit_test(test_grows_under_many_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
