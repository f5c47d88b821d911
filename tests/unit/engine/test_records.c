/* SPDX-License-Identifier: Apache-2.0 */
/* The shard's request records (engine/internal.h kl_shard_records;
 * docs/DESIGN.md "Accelerators: ASYNC jobs", "Small things that added
 * up"): a freed record of up to KL_JOB_RECORD bytes is the next one
 * given, larger ones are not kept, at most KL_JOB_RECORDS are, and
 * kl_shard_records_free lets go of all of them. Under AddressSanitizer
 * nothing is kept, and the tests say so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine/internal.h"

static kl_shard shard;

static int reset(void **state)
{
    (void)state;
    kl_shard_records_free(&shard);
    memset(&shard, 0, sizeof shard);
    return 0;
}

/* A small record comes back for the next request, of any small size. */
static void test_reused(void **state)
{
    (void)state;
    size_t small = sizeof(kl_srv_job) + 32 + 72;
    kl_srv_job *a = kl_shard_job_new(&shard, small);
    assert_non_null(a);
    memset(a->data, 0xab, 32 + 72); /* all of it is ours */
    kl_shard_job_free(&shard, a);
    assert_int_equal(shard.records.n, KL_JOB_RECORDS ? 1 : 0);
    size_t other = KL_JOB_RECORD; /* the largest kept size */
    kl_srv_job *b = kl_shard_job_new(&shard, other);
    assert_non_null(b);
    if (KL_JOB_RECORDS)
        assert_ptr_equal(a, b);
    memset(b->data, 0xcd, other - sizeof *b);
    assert_int_equal(shard.records.n, 0);
    kl_shard_job_free(&shard, b);
}

/* Larger records are freed, not kept. */
static void test_large_not_kept(void **state)
{
    (void)state;
    size_t big = KL_JOB_RECORD + 1;
    kl_srv_job *a = kl_shard_job_new(&shard, big);
    assert_non_null(a);
    memset(a->data, 0xab, big - sizeof *a);
    kl_shard_job_free(&shard, a);
    assert_int_equal(shard.records.n, 0);
    assert_null(shard.records.free);
}

/* However many requests were in flight, at most KL_JOB_RECORDS stay. */
static void test_bounded(void **state)
{
    (void)state;
    enum { N = 1500 };
    static kl_srv_job *js[N];
    for (size_t i = 0; i < N; i++) {
        js[i] = kl_shard_job_new(&shard, 256);
        assert_non_null(js[i]);
    }
    for (size_t i = 0; i < N; i++)
        kl_shard_job_free(&shard, js[i]);
    assert_int_equal(shard.records.n, KL_JOB_RECORDS);
    unsigned counted = 0;
    for (kl_srv_job *r = shard.records.free; r; r = (kl_srv_job *)r->job.next)
        counted++;
    assert_int_equal(counted, KL_JOB_RECORDS);
    kl_shard_records_free(&shard);
    assert_int_equal(shard.records.n, 0);
    assert_null(shard.records.free);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_reused, reset),
        cmocka_unit_test_setup(test_large_not_kept, reset),
        cmocka_unit_test_setup(test_bounded, reset),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    kl_shard_records_free(&shard);
    return r;
}
