/* SPDX-License-Identifier: Apache-2.0 */
/* Text-format details: escaping, float formatting, bucket edges, and the
 * label tables against the protocol module's P6 names. */
#include "testutil.h"

#include <math.h>

#include "keyless/protocol.h"
#include "metrics/internal.h"
#include "mtest.h"

static char *take(mx_buf *b)
{
    assert_false(b->oom);
    char *s = b->p;
    b->p = NULL;
    b->len = b->cap = 0;
    return s;
}

static void test_label_escaping(void **state)
{
    (void)state;
    mx_buf b = {0};
    mx_put_label_value(&b, "a\"b\\c\nd\te");
    char *s = take(&b);
    /* Text format 0.0.4: only \, " and line feed are escaped. */
    assert_string_equal(s, "a\\\"b\\\\c\\nd\te");
    free(s);
    mx_family(&b, "x_total", "counter", "say \"hi\"\\\nbye");
    s = take(&b);
    /* HELP escapes \ and line feed but not quotes. */
    assert_string_equal(s, "# HELP x_total say \"hi\"\\\\\\nbye\n"
                           "# TYPE x_total counter\n");
    free(s);
}

static void test_doubles(void **state)
{
    (void)state;
    static const struct {
        double v;
        const char *text;
    } rows[] = {
        {0, "0"},
        {3, "3"},
        {20000, "20000"},
        {1700000100, "1700000100"},
        {0.25, "0.25"},
        {0.0003, "0.0003"},
        {1.5, "1.5"},
        {1e-9, "1e-09"},
        {0.1 + 0.2, "0.30000000000000004"},
        {INFINITY, "+Inf"},
        {-INFINITY, "-Inf"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        mx_buf b = {0};
        mx_put_double(&b, rows[i].v);
        char *s = take(&b);
        assert_string_equal(s, rows[i].text);
        free(s);
    }
    mx_buf b = {0};
    mx_put_double(&b, NAN);
    char *s = take(&b);
    assert_string_equal(s, "NaN");
    free(s);
}

static void test_bucket_edges(void **state)
{
    (void)state;
    /* "le" is inclusive: 100 us * 2^i belongs to bucket i. */
    assert_int_equal(mx_bucket_index(0), 0);
    uint64_t bound = 100000;
    for (int i = 0; i < KL_METRICS_BUCKETS; i++, bound *= 2) {
        assert_int_equal(mx_bucket_index(bound), i);
        assert_int_equal(mx_bucket_index(bound + 1), i + 1);
        assert_string_equal(mx_le_texts[i], mt_le[i]);
    }
    assert_int_equal(mx_bucket_index(1638400001), KL_METRICS_BUCKETS);
    assert_int_equal(mx_bucket_index(UINT64_MAX), KL_METRICS_BUCKETS);
}

static void test_labels_match_p6(void **state)
{
    (void)state;
    for (unsigned op = 0; op < 256; op++)
        assert_string_equal(mx_type_names[mx_type_index((uint8_t)op)],
                            kl_op_type((uint8_t)op));
    for (unsigned e = 0; e < 256; e++)
        assert_string_equal(
            mx_err_label(mx_err_index(kl_status_from_p6((uint8_t)e))),
            kl_err_text((uint8_t)e));
    /* The P6 texts themselves, as the reference writes them. */
    assert_string_equal(mx_err_label(0), "no error");
    assert_string_equal(mx_err_label(2),
                        "key not found due to no matching SKI/SNI/ServerIP");
    assert_string_equal(mx_err_label(11), "remote configuration error");
    assert_string_equal(mx_err_label(12), "unknown error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_label_escaping),
        cmocka_unit_test(test_doubles),
        cmocka_unit_test(test_bucket_edges),
        cmocka_unit_test(test_labels_match_p6),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
