/* SPDX-License-Identifier: Apache-2.0 */
/* The outstanding-id table of a client connection (src/client/reqtable.c). */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "client/reqtable.h"

static void test_add_complete_unknown(void **state)
{
    kl_reqtable t;
    uint64_t sent;
    kl_reqtable_init(&t);
    assert_int_equal(kl_reqtable_complete(&t, 7, &sent), KL_REQ_UNKNOWN);
    assert_int_equal(kl_reqtable_add(&t, 7, 1000), KL_OK);
    assert_true(kl_reqtable_contains(&t, 7));
    assert_false(kl_reqtable_contains(&t, 8));
    assert_int_equal(kl_reqtable_count(&t), 1);
    assert_int_equal(kl_reqtable_complete(&t, 8, &sent), KL_REQ_UNKNOWN);
    assert_int_equal(sent, 0);
    assert_int_equal(kl_reqtable_complete(&t, 7, &sent), KL_REQ_MATCHED);
    assert_int_equal(sent, 1000);
    assert_int_equal(kl_reqtable_count(&t), 0);
    /* answered once: a second response with that id is unknown */
    assert_int_equal(kl_reqtable_complete(&t, 7, &sent), KL_REQ_UNKNOWN);
    kl_reqtable_free(&t);
}

/* Duplicate ids are legal on the wire (protocol P2): each request with the
 * id takes one response. */
static void test_duplicates(void **state)
{
    kl_reqtable t;
    kl_reqtable_init(&t);
    for (int i = 0; i < 3; i++)
        assert_int_equal(kl_reqtable_add(&t, 0, (uint64_t)i), KL_OK);
    assert_int_equal(kl_reqtable_count(&t), 3);
    assert_int_equal(t.used, 1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(kl_reqtable_complete(&t, 0, NULL), KL_REQ_MATCHED);
    assert_int_equal(kl_reqtable_complete(&t, 0, NULL), KL_REQ_UNKNOWN);
    assert_int_equal(t.used, 0);
    kl_reqtable_free(&t);
}

static void test_cancel(void **state)
{
    kl_reqtable t;
    kl_reqtable_init(&t);
    assert_int_equal(kl_reqtable_cancel(&t, 5), KL_E_NOT_FOUND);
    assert_int_equal(kl_reqtable_add(&t, 5, 1), KL_OK);
    assert_int_equal(kl_reqtable_add(&t, 5, 2), KL_OK);
    assert_int_equal(kl_reqtable_cancel(&t, 5), KL_OK);
    assert_int_equal(kl_reqtable_cancel(&t, 5), KL_OK);
    /* both are cancelled: a third cancel has nothing left */
    assert_int_equal(kl_reqtable_cancel(&t, 5), KL_E_NOT_FOUND);
    /* cancelled requests still count: the server will answer them */
    assert_int_equal(kl_reqtable_count(&t), 2);
    assert_int_equal(kl_reqtable_complete(&t, 5, NULL), KL_REQ_CANCELLED);
    assert_int_equal(kl_reqtable_complete(&t, 5, NULL), KL_REQ_CANCELLED);
    assert_int_equal(kl_reqtable_complete(&t, 5, NULL), KL_REQ_UNKNOWN);
    kl_reqtable_free(&t);
}

/* Random adds and completions against a plain reference count: exercises
 * growth and backward-shift deletion with colliding probe runs. */
static void test_random_against_reference(void **state)
{
    enum { IDS = 3000, ROUNDS = 200000 };
    static uint32_t ref[IDS];
    kl_reqtable t;
    size_t total = 0;
    memset(ref, 0, sizeof ref);
    kl_reqtable_init(&t);
    srand(12345);
    for (int r = 0; r < ROUNDS; r++) {
        /* ids spread over a large range so that hashes collide at random */
        uint32_t k = (uint32_t)(rand() % IDS);
        uint32_t id = k * 7919u + (k & 1 ? 0x80000000u : 0);
        if (rand() % 2) {
            assert_int_equal(kl_reqtable_add(&t, id, (uint64_t)r + 1), KL_OK);
            ref[k]++;
            total++;
        } else {
            kl_req_match m = kl_reqtable_complete(&t, id, NULL);
            assert_int_equal(m, ref[k] ? KL_REQ_MATCHED : KL_REQ_UNKNOWN);
            if (ref[k]) {
                ref[k]--;
                total--;
            }
        }
        assert_int_equal(kl_reqtable_count(&t), total);
    }
    for (uint32_t k = 0; k < IDS; k++) {
        uint32_t id = k * 7919u + (k & 1 ? 0x80000000u : 0);
        assert_int_equal(kl_reqtable_contains(&t, id), ref[k] != 0);
    }
    kl_reqtable_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_complete_unknown),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_random_against_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
