/* SPDX-License-Identifier: Apache-2.0 */
/* "Did you mean ...?" (core/suggest.h): the edit distance with swaps of
 * neighbours, case ignored, and the nearest candidate only when it is near
 * enough to be a typing mistake. */
#include "testutil.h"

#include <stdint.h>
#include <string.h>

#include "core/suggest.h"

static void test_distance(void **state)
{
    (void)state;
    assert_int_equal(kl_edit_distance("", ""), 0);
    assert_int_equal(kl_edit_distance("serves", "serves"), 0);
    assert_int_equal(kl_edit_distance("", "abc"), 3);
    assert_int_equal(kl_edit_distance("abc", ""), 3);
    assert_int_equal(kl_edit_distance("serve", "serves"), 1);      /* insert */
    assert_int_equal(kl_edit_distance("address", "adress"), 1);    /* delete */
    assert_int_equal(kl_edit_distance("region", "regoin"), 1);     /* swap */
    assert_int_equal(kl_edit_distance("priority", "pryority"), 1); /* subst */
    assert_int_equal(kl_edit_distance("Serves", "serves"), 0);     /* case */
    assert_int_equal(kl_edit_distance("kitten", "sitting"), 3);
    assert_int_equal(kl_edit_distance("ca", "abc"), 3); /* OSA, not 2 */
    char longer[KL_SUGGEST_MAX_LEN + 2];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = 0;
    assert_true(kl_edit_distance(longer, "a") == SIZE_MAX);
}

static const char *best(const char *word, const char *const *cands)
{
    static kl_suggest sg;
    kl_suggest_init(&sg, word);
    for (; *cands; cands++)
        kl_suggest_add(&sg, *cands);
    return kl_suggest_best(&sg);
}

static void test_nearest(void **state)
{
    (void)state;
    static const char *const server[] = {"name",     "address", "dns", "region",
                                         "priority", "serves",  NULL};
    assert_string_equal(best("serve", server), "serves");
    assert_string_equal(best("server", server), "serves");
    assert_string_equal(best("adress", server), "address");
    assert_string_equal(best("Region", server), "region");
    assert_string_equal(best("nmae", server), "name");
    /* not a typing mistake: no suggestion */
    assert_null(best("color", server));
    assert_null(best("x", server));
    assert_null(best("", server));
    /* the word itself is not "meant" */
    assert_null(best("dns", (const char *const[]){"dns", NULL}));
    /* the first of equally near candidates */
    assert_string_equal(best("cat", (const char *const[]){"bat", "car", NULL}),
                        "bat");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distance),
        cmocka_unit_test(test_nearest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
