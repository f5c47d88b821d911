/* SPDX-License-Identifier: Apache-2.0 */
/* Go-style durations for keyless-bench's flags and output: the reference
 * tool's spellings parse to exact nanoseconds, formatting matches Go's
 * time.Duration.String, and malformed input is refused. */
#include "testutil.h"

#include <string.h>

#include "godur.h"

static void parses(const char *s, uint64_t want)
{
    uint64_t ns = 12345;
    if (kl_dur_parse(s, &ns) != KL_OK)
        fail_msg("\"%s\" refused", s);
    if (ns != want)
        fail_msg("\"%s\" = %llu ns, want %llu", s, (unsigned long long)ns,
                 (unsigned long long)want);
}

static void test_parse(void **state)
{
    parses("10s", 10000000000ull);
    parses("0.5ms", 500000ull);
    parses("20\xc2\xb5s", 20000ull); /* micro sign, as Go prints it */
    parses("20\xce\xbcs", 20000ull); /* Greek mu */
    parses("20us", 20000ull);
    parses("250ns", 250ull);
    parses("1m30s", 90000000000ull);
    parses("1h", 3600000000000ull);
    parses("1.5h", 5400000000000ull);
    parses("2m", 120000000000ull);
    parses("100ms", 100000000ull);
    parses(".5s", 500000000ull);
    parses("1s500ms", 1500000000ull);
    parses("0", 0);
    parses("0s", 0);
}

static void test_refused(void **state)
{
    const char *bad[] = {"",    "10", "s",    "10x",      "-1s",    "1.s.",
                         "1 s", "ms", "1e3s", "5000000h", "1.2.3s", NULL};
    uint64_t ns;
    for (size_t i = 0; bad[i]; i++)
        if (kl_dur_parse(bad[i], &ns) == KL_OK)
            fail_msg("\"%s\" accepted as %llu ns", bad[i],
                     (unsigned long long)ns);
    assert_int_equal(kl_dur_parse(NULL, &ns), KL_E_BAD_VALUE);
}

static void formats(uint64_t ns, const char *want)
{
    char buf[64];
    assert_string_equal(kl_dur_format(ns, buf, sizeof buf), want);
}

static void test_format(void **state)
{
    formats(0, "0s");
    formats(250, "250ns");
    formats(1500, "1.5\xc2\xb5s");
    formats(200000, "200\xc2\xb5s");
    formats(12345678, "12.345678ms");
    formats(1000000, "1ms");
    formats(10000000000ull, "10s");
    formats(1500000000ull, "1.5s");
    formats(90000000000ull, "1m30s");
    formats(7200000000000ull, "2h0m0s");
    /* what is printed parses back to the same value */
    const uint64_t vals[] = {1,       999,       1001,          123456,
                             7654321, 987654321, 61000000001ull};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        char buf[64];
        uint64_t back;
        assert_int_equal(
            kl_dur_parse(kl_dur_format(vals[i], buf, sizeof buf), &back),
            KL_OK);
        assert_int_equal(back, vals[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
