/* SPDX-License-Identifier: Apache-2.0 */
/* src/engine dispatch: kl_dispatch_context reads the tag-0x16 request
 * context (protocol P3, P9) exactly as kl_req_context_parse does - its
 * fast path for {"deadline_ms":N} included - for the form keylessd's
 * clients send, its near misses, and random mutations of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dispatch.h"
#include "testutil.h"

/* Both readers agree: same status, and on KL_OK the same fields. */
static void same(const char *what, const uint8_t *p, size_t len)
{
    kl_req_context a, b;
    kl_status sa = kl_dispatch_context(p, len, &a);
    kl_status sb = kl_req_context_parse(p, len, &b);
    if (sa != sb)
        fail_msg("%s (%zu bytes): status %d, the JSON parser says %d", what,
                 len, sa, sb);
    if (sa != KL_OK)
        return;
    if (a.has_deadline != b.has_deadline || a.deadline_ms != b.deadline_ms ||
        a.has_hops != b.has_hops || a.hops != b.hops ||
        strcmp(a.request_id, b.request_id) != 0 || strcmp(a.trace, b.trace))
        fail_msg("%s: fields differ (deadline %d/%u vs %d/%u)", what,
                 a.has_deadline, a.deadline_ms, b.has_deadline, b.deadline_ms);
}

static void same_str(const char *s)
{
    same(s, (const uint8_t *)s, strlen(s));
}

static void test_fast_path_values(void **state)
{
    (void)state;
    struct {
        const char *text;
        uint32_t ms;
    } ok[] = {
        {"{\"deadline_ms\":0}", 0},
        {"{\"deadline_ms\":7}", 7},
        {"{\"deadline_ms\":1500}", 1500},
        {"{\"deadline_ms\":4294967295}", UINT32_MAX},
        {"{\"deadline_ms\":4294967296}", UINT32_MAX}, /* clamped */
        {"{\"deadline_ms\":9999999999}", UINT32_MAX},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        kl_req_context c;
        memset(&c, 0xAA, sizeof c);
        assert_int_equal(kl_dispatch_context((const uint8_t *)ok[i].text,
                                             strlen(ok[i].text), &c),
                         KL_OK);
        assert_true(c.has_deadline);
        assert_int_equal(c.deadline_ms, ok[i].ms);
        assert_false(c.has_hops);
        assert_string_equal(c.request_id, "");
        assert_string_equal(c.trace, "");
        same_str(ok[i].text);
    }
}

/* Near misses leave the fast path; the answer is still the parser's. */
static void test_near_misses(void **state)
{
    (void)state;
    const char *texts[] = {
        "{\"deadline_ms\":}",
        "{\"deadline_ms\":01}",
        "{\"deadline_ms\":00}",
        "{\"deadline_ms\":-1}",
        "{\"deadline_ms\":+1}",
        "{\"deadline_ms\":1.5}",
        "{\"deadline_ms\":1e3}",
        "{\"deadline_ms\": 12}",
        "{\"deadline_ms\":12 }",
        "{ \"deadline_ms\":12}",
        "{\"deadline_ms\":12}\n",
        "{\"deadline_ms\":12",
        "{\"deadline_ms\":\"12\"}",
        "{\"deadline_ms\":99999999999}",
        "{\"deadline_ms\":99999999999999999999999}",
        "{\"deadline_ms\":12,\"hops\":3}",
        "{\"request_id\":\"abc\",\"deadline_ms\":12}",
        "{\"deadline_ms\":12,\"deadline_ms\":13}",
        "{\"deadline_mS\":12}",
        "{\"deadline_ms\":1a}",
        "{\"deadline_ms\":12}}",
        "{}",
        "[1]",
        "{",
        "",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        same_str(texts[i]);
    /* a NUL inside the number */
    static const uint8_t nul[] = "{\"deadline_ms\":1\0002}";
    same("embedded NUL", nul, sizeof nul - 1);
    kl_req_context c;
    assert_int_equal(kl_dispatch_context(NULL, 0, &c), KL_E_BAD_VALUE);
}

/* Every one-byte change of the fast form (each position, every value),
 * then random multi-byte mutations: the two readers never disagree. */
static void test_mutations(void **state)
{
    (void)state;
    const char *base = "{\"deadline_ms\":4294967295}";
    size_t n = strlen(base);
    uint8_t buf[64];
    for (size_t pos = 0; pos < n; pos++) {
        for (unsigned v = 0; v < 256; v++) {
            memcpy(buf, base, n);
            buf[pos] = (uint8_t)v;
            same("one byte changed", buf, n);
        }
    }
    /* shorter and longer forms */
    for (size_t len = 0; len <= n; len++)
        same("truncated", (const uint8_t *)base, len);
    srand(5);
    for (int round = 0; round < 20000; round++) {
        size_t len = 15 + (size_t)rand() % 14;
        memcpy(buf, base, n);
        for (size_t i = n; i < len; i++)
            buf[i] = (uint8_t)('0' + rand() % 10);
        int changes = 1 + rand() % 3;
        for (int k = 0; k < changes; k++) {
            size_t pos = 14 + (size_t)rand() % (len - 14);
            const char pick[] = "0123456789}-+. \"e";
            buf[pos] = (uint8_t)pick[rand() % (int)(sizeof pick - 1)];
        }
        same("random", buf, len);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fast_path_values),
        cmocka_unit_test(test_near_misses),
        cmocka_unit_test(test_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
