/* SPDX-License-Identifier: Apache-2.0 */
/* The per-source handshake table (engine/limits.h): the cap per
 * source, counts given back, and the open-addressing table's deletion -
 * checked against a plain model through many random takes and puts on a
 * table small enough that probe runs collide and wrap. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/limits.h"

static void addr_of(unsigned i, uint8_t out[16])
{
    memset(out, 0, 16);
    out[10] = out[11] = 0xff;
    out[12] = 127;
    out[14] = (uint8_t)(i >> 8);
    out[15] = (uint8_t)i;
}

static void test_cap_and_release(void **state)
{
    bool oom = true;
    kl_src_table *t = kl_src_table_new(100, 3, &oom);
    assert_non_null(t);
    assert_false(oom);
    uint8_t a[16], b[16];
    addr_of(1, a);
    addr_of(2, b);
    for (int i = 0; i < 3; i++)
        assert_true(kl_src_take(t, a));
    assert_false(kl_src_take(t, a)); /* a is at its cap */
    assert_true(kl_src_take(t, b));  /* b is not */
    assert_int_equal(kl_src_count(t, a), 3);
    kl_src_put(t, a);
    assert_true(kl_src_take(t, a));
    for (int i = 0; i < 3; i++)
        kl_src_put(t, a);
    assert_int_equal(kl_src_count(t, a), 0);
    kl_src_put(t, a); /* not present: harmless */
    assert_int_equal(kl_src_count(t, b), 1);
    kl_src_table_free(t);
    /* a per-source cap at or above the global one is not tracked */
    assert_null(kl_src_table_new(10, 10, &oom));
    assert_false(oom);
}

/* Up to 8 sources of 64 live at once (max_handshaking 8: a 16-slot
 * table), each with up to 2 handshakes, in 20,000 random steps. */
static void test_random_against_model(void **state)
{
    enum { SOURCES = 64, LIVE_MAX = 8, CAP = 2 };
    bool oom;
    kl_src_table *t = kl_src_table_new(LIVE_MAX, CAP, &oom);
    assert_non_null(t);
    unsigned model[SOURCES] = {0}, total = 0;
    srand(12345);
    for (int step = 0; step < 20000; step++) {
        unsigned i = (unsigned)rand() % SOURCES;
        uint8_t a[16];
        addr_of(i * 257u, a);
        bool take = rand() % 2 && total < LIVE_MAX;
        if (take) {
            bool ok = kl_src_take(t, a);
            assert_int_equal(ok, model[i] < CAP);
            if (ok) {
                model[i]++;
                total++;
            }
        } else if (model[i]) {
            kl_src_put(t, a);
            model[i]--;
            total--;
        }
        if (step % 97 == 0)
            for (unsigned j = 0; j < SOURCES; j++) {
                addr_of(j * 257u, a);
                assert_int_equal(kl_src_count(t, a), model[j]);
            }
    }
    kl_src_table_free(t);
}

/* Shards share one table behind its mutex: threads taking and giving back
 * on overlapping sources leave every count where it started (and TSan
 * sees every access to the map under the lock). */
enum { T_THREADS = 4, T_SOURCES = 32, T_STEPS = 20000 };

static kl_src_table *shared;

static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (int step = 0; step < T_STEPS; step++) {
        uint8_t a[16];
        addr_of((unsigned)rand_r(&seed) % T_SOURCES, a);
        if (kl_src_take(shared, a))
            kl_src_put(shared, a);
    }
    return NULL;
}

static void test_threads_share_the_table(void **state)
{
    (void)state;
    bool oom;
    shared = kl_src_table_new(T_THREADS * 2, T_THREADS, &oom);
    assert_non_null(shared);
    pthread_t th[T_THREADS];
    for (uintptr_t i = 0; i < T_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, churn, (void *)(i + 1)),
                         0);
    for (int i = 0; i < T_THREADS; i++)
        pthread_join(th[i], NULL);
    for (unsigned j = 0; j < T_SOURCES; j++) {
        uint8_t a[16];
        addr_of(j, a);
        assert_int_equal(kl_src_count(shared, a), 0);
    }
    kl_src_table_free(shared);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cap_and_release),
        cmocka_unit_test(test_random_against_model),
        cmocka_unit_test(test_threads_share_the_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
