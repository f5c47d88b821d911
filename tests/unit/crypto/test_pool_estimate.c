/* SPDX-License-Identifier: Apache-2.0 */
/* kl_pool_wait_estimate for the blocking class (docs/DESIGN.md
 * "Deadlines"): the calls running and queued ahead spread over the token
 * sessions, plus the job's own call; and a job that finds a session free
 * is always taken, whatever the average, so that a token whose average a
 * hang inflated still gets calls and recovers. White-box: the counters the
 * estimate reads are set directly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "crypto/pool_int.h"

#define MS_NS 1000000ull

static kl_pool *pool_with(int sessions, uint64_t avg_ns, size_t queued,
                          int busy)
{
    kl_pool_opts o = kl_pool_defaults;
    o.workers = 1;
    o.blocking_workers = sessions;
    kl_pool *p = kl_pool_new(&o);
    assert_non_null(p);
    atomic_store(&p->cost.exec_ns[KL_COST_BLOCKING], avg_ns);
    atomic_store(&p->q[KL_COST_BLOCKING].len, queued);
    atomic_store(&p->blk.busy, busy);
    return p;
}

/* Puts the counters back so that kl_pool_free finds an idle pool. */
static void done(kl_pool *p)
{
    atomic_store(&p->q[KL_COST_BLOCKING].len, 0);
    atomic_store(&p->blk.busy, 0);
    kl_pool_free(p);
}

static void test_free_session_is_taken(void **state)
{
    (void)state;
    /* an average of 10 s (a token that hung): an idle session still
     * takes the next job */
    kl_pool *p = pool_with(2, 10000 * MS_NS, 0, 1);
    assert_int_equal(kl_pool_wait_estimate(p, KL_COST_BLOCKING), 0);
    done(p);
}

static void test_queue_over_sessions_plus_own(void **state)
{
    (void)state;
    /* one session busy, 4 queued, 20 ms a call: (4 + 1) x 20 + 20 */
    kl_pool *p = pool_with(1, 20 * MS_NS, 4, 1);
    assert_int_equal(kl_pool_wait_estimate(p, KL_COST_BLOCKING), 120 * MS_NS);
    done(p);
    /* two sessions, both busy, 3 queued: (3 + 2) x 20 / 2 + 20 */
    p = pool_with(2, 20 * MS_NS, 3, 2);
    assert_int_equal(kl_pool_wait_estimate(p, KL_COST_BLOCKING), 70 * MS_NS);
    done(p);
    /* all sessions busy, nothing queued: one call's wait, then its own */
    p = pool_with(1, 20 * MS_NS, 0, 1);
    assert_int_equal(kl_pool_wait_estimate(p, KL_COST_BLOCKING), 40 * MS_NS);
    done(p);
}

static void test_resize_changes_lanes(void **state)
{
    (void)state;
    kl_pool *p = pool_with(1, 20 * MS_NS, 4, 1);
    kl_pool_set_blocking_workers(p, 5);
    /* (4 + 1) x 20 / 5 + 20 */
    assert_int_equal(kl_pool_wait_estimate(p, KL_COST_BLOCKING), 40 * MS_NS);
    done(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_free_session_is_taken),
        cmocka_unit_test(test_queue_over_sessions_plus_own),
        cmocka_unit_test(test_resize_changes_lanes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
