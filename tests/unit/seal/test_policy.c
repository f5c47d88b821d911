/* SPDX-License-Identifier: Apache-2.0 */
/* Sealing policies (seal/policy.h, docs/DESIGN.md "Sealing policies
 * (src/seal/policy.c)"): the examples the design starts from, precedence,
 * parentheses, 'not', 'in' sets, the canonical form and its round trip,
 * evaluation truth tables, every error with its position and message,
 * and randomized round trips checked against an evaluator of our own. */
#include "testutil.h"

#include "seal/policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef kl_policy_attr attr;

static kl_policy *parse_ok(const char *text)
{
    kl_policy *p = NULL;
    char err[256];
    size_t pos = 99;
    kl_status s =
        kl_policy_parse(text, strlen(text), &p, &pos, err, sizeof err);
    if (s != KL_OK)
        fail_msg("'%s': %s", text, err);
    assert_non_null(p);
    return p;
}

static char *print_ok(const kl_policy *p)
{
    static char buf[KL_POLICY_MAX_LEN + 1];
    size_t len = 0;
    assert_int_equal(kl_policy_print(p, buf, sizeof buf, &len), KL_OK);
    assert_int_equal(len, strlen(buf));
    return buf;
}

/* text parses, prints as want, and want parses to an equal policy that
 * prints the same bytes. */
static void canon(const char *text, const char *want)
{
    kl_policy *p = parse_ok(text);
    char *got = print_ok(p);
    if (strcmp(got, want) != 0)
        fail_msg("'%s' printed '%s', want '%s'", text, got, want);
    kl_policy *q = parse_ok(got);
    assert_true(kl_policy_equal(p, q));
    assert_string_equal(print_ok(q), want);
    kl_policy_free(p);
    kl_policy_free(q);
}

/* len bytes of text are refused with status want, at pos, with msg. */
static void bad_n(const char *text, size_t len, kl_status want, size_t pos,
                  const char *msg)
{
    kl_policy *p = (kl_policy *)1;
    char err[256], expect[256];
    size_t got_pos = 12345;
    kl_status s = kl_policy_parse(text, len, &p, &got_pos, err, sizeof err);
    snprintf(expect, sizeof expect, "at %zu: %s", pos, msg);
    if (s != want || got_pos != pos || strcmp(err, expect) != 0)
        fail_msg("'%.60s': got %d '%s' (pos %zu), want %d '%s'", text, s, err,
                 got_pos, want, expect);
    assert_null(p);
}

static void bad(const char *text, size_t pos, const char *msg)
{
    bad_n(text, strlen(text), KL_E_BAD_VALUE, pos, msg);
}

static bool eval(const char *text, const attr *a, size_t n)
{
    kl_policy *p = parse_ok(text);
    bool r = kl_policy_eval(p, a, n);
    kl_policy_free(p);
    return r;
}

/* ---- the examples, precedence, parentheses --------------------------------
 */

static void test_examples(void **state)
{
    (void)state;
    canon("region=eu-west or region=eu-central",
          "region=eu-west or region=eu-central");
    canon("country=us and not dc=sjc-3", "country=us and not dc=sjc-3");
    const attr west[] = {{"region", "eu-west"}, {"country", "ie"}};
    const attr central[] = {{"region", "eu-central"}};
    const attr us[] = {
        {"region", "us-west"}, {"country", "us"}, {"dc", "sjc-3"}};
    const attr us2[] = {
        {"region", "us-east"}, {"country", "us"}, {"dc", "iad-1"}};
    const char *eu = "region=eu-west or region=eu-central";
    const char *notsjc = "country=us and not dc=sjc-3";
    assert_true(eval(eu, west, 2));
    assert_true(eval(eu, central, 1));
    assert_false(eval(eu, us, 3));
    assert_false(eval(notsjc, us, 3));
    assert_true(eval(notsjc, us2, 3));
    assert_false(eval(notsjc, west, 2));
}

static void test_precedence(void **state)
{
    (void)state;
    /* not > and > or, checked by meaning as well as by printing */
    for (unsigned m = 0; m < 8; m++) {
        bool a = m & 1, b = m & 2, c = m & 4;
        attr at[3];
        size_t n = 0;
        if (a)
            at[n++] = (attr){"a", "1"};
        if (b)
            at[n++] = (attr){"b", "1"};
        if (c)
            at[n++] = (attr){"c", "1"};
        assert_int_equal(eval("a=1 or b=1 and c=1", at, n), a || (b && c));
        assert_int_equal(eval("a=1 and b=1 or c=1", at, n), (a && b) || c);
        assert_int_equal(eval("(a=1 or b=1) and c=1", at, n), (a || b) && c);
        assert_int_equal(eval("not a=1 and b=1", at, n), !a && b);
        assert_int_equal(eval("not a=1 or b=1", at, n), !a || b);
        assert_int_equal(eval("not (a=1 and b=1) or c=1", at, n),
                         !(a && b) || c);
        assert_int_equal(eval("not (a=1 or b=1 or c=1)", at, n),
                         !(a || b || c));
        assert_int_equal(eval("not not a=1", at, n), a);
        assert_int_equal(eval("a!=1 or b=1", at, n), !a || b);
        assert_int_equal(eval("a=1 and b=1 and c=1", at, n), a && b && c);
        assert_int_equal(eval("a=1 or b=1 or c=1", at, n), a || b || c);
        assert_int_equal(eval("a in (1, 2) and not b in (1)", at, n), a && !b);
    }
    canon("a=1 or b=2 and c=3", "a=1 or b=2 and c=3");
    canon("a=1 or (b=2 and c=3)", "a=1 or b=2 and c=3");
    canon("(a=1 and b=2) or c=3", "a=1 and b=2 or c=3");
    canon("(a=1 or b=2) and c=3", "(a=1 or b=2) and c=3");
    canon("a=1 and (b=2 or c=3) and d=4", "a=1 and (b=2 or c=3) and d=4");
    canon("not a=1 and b=2", "not a=1 and b=2");
    canon("not (a=1 and b=2)", "not (a=1 and b=2)");
    canon("not (a=1 or b=2)", "not (a=1 or b=2)");
}

static void test_parentheses(void **state)
{
    (void)state;
    canon("((a=1))", "a=1");
    canon("(((not a=1)))", "not a=1");
    canon("not (a=1)", "not a=1");
    canon("not(not(a=1))", "not not a=1");
    canon("a=1 and (b=2 and c=3)", "a=1 and b=2 and c=3");
    canon("(a=1 and b=2) and (c=3 and d=4)", "a=1 and b=2 and c=3 and d=4");
    canon("(a=1 or b=2) or (c=3 or (d=4))", "a=1 or b=2 or c=3 or d=4");
    canon("((a=1 or b=2) and c=3) or d=4", "(a=1 or b=2) and c=3 or d=4");
    canon("(a=1 or b=2)and(c=3 or d=4)", "(a=1 or b=2) and (c=3 or d=4)");
    canon("not ((a=1 or b=2) and c=3)", "not ((a=1 or b=2) and c=3)");
    /* the same meaning with other parentheses is the same policy */
    kl_policy *p = parse_ok("a=1 and b=2 and c=3");
    kl_policy *q = parse_ok("(a=1 and (b=2)) and ((c=3))");
    kl_policy *r = parse_ok("c=3 and b=2 and a=1");
    assert_true(kl_policy_equal(p, q));
    assert_false(kl_policy_equal(p, r)); /* order is kept as written */
    kl_policy_free(p);
    kl_policy_free(q);
    kl_policy_free(r);
}

static void test_spacing_and_words(void **state)
{
    (void)state;
    canon("  country = us\n\tand\r\n(not(dc=sjc-3))  ",
          "country=us and not dc=sjc-3");
    canon("a!=b", "a!=b");
    canon("a != b", "a!=b");
    canon("ip=10.0.0.1 or zone=us:east:1", "ip=10.0.0.1 or zone=us:east:1");
    canon("tier_2-x=v_1-.:", "tier_2-x=v_1-.:");
    canon("dc=3", "dc=3");
    canon("a=-", "a=-");
    /* keywords inside words are words */
    canon("android=notin or order=and1", "android=notin or order=and1");
    canon("innot in (orand, andor)", "innot in (andor, orand)");
    /* '!=' and 'not =' mean the same but are kept as written */
    kl_policy *p = parse_ok("a!=1"), *q = parse_ok("not a=1");
    assert_false(kl_policy_equal(p, q));
    const attr one[] = {{"a", "1"}}, two[] = {{"a", "2"}};
    assert_int_equal(kl_policy_eval(p, one, 1), kl_policy_eval(q, one, 1));
    assert_int_equal(kl_policy_eval(p, two, 1), kl_policy_eval(q, two, 1));
    assert_int_equal(kl_policy_eval(p, NULL, 0), kl_policy_eval(q, NULL, 0));
    kl_policy_free(p);
    kl_policy_free(q);
}

static void test_in_sets(void **state)
{
    (void)state;
    canon("region in (eu-west, eu-central)", "region in (eu-central, eu-west)");
    canon("a in(z,a,m,a,z)", "a in (a, m, z)");
    canon("a in ( x )", "a in (x)");
    canon("a in (b, a) or c in (d)", "a in (a, b) or c in (d)");
    canon("not a in (x, y)", "not a in (x, y)");
    /* bytewise order: digits and '-' before letters */
    canon("v in (b, a, 1, -, a.b, a-b, a:b, a_b)",
          "v in (-, 1, a, a-b, a.b, a:b, a_b, b)");
    kl_policy *p = parse_ok("a in (y, x, x)"), *q = parse_ok("a in (x,y)");
    assert_true(kl_policy_equal(p, q));
    kl_policy_free(p);
    kl_policy_free(q);
    const char *pol = "tier in (edge, core)";
    const attr core[] = {{"tier", "core"}}, x[] = {{"tier", "x"}},
               multi[] = {{"tier", "x"}, {"tier", "edge"}},
               other[] = {{"name", "edge"}};
    assert_true(eval(pol, core, 1));
    assert_false(eval(pol, x, 1));
    assert_true(eval(pol, multi, 2));
    assert_false(eval(pol, other, 1));
    assert_false(eval(pol, NULL, 0));
}

/* ---- evaluation --------------------------------------------------------- */

static void test_eval_rules(void **state)
{
    (void)state;
    const attr none[] = {{"x", "y"}};
    const attr sjc[] = {{"dc", "sjc-3"}};
    const attr iad[] = {{"dc", "iad-1"}};
    const attr both[] = {{"dc", "iad-1"}, {"dc", "sjc-3"}};
    /* '=': some pair matches; a missing attribute never does */
    assert_false(eval("dc=sjc-3", none, 1));
    assert_true(eval("dc=sjc-3", sjc, 1));
    assert_false(eval("dc=sjc-3", iad, 1));
    assert_true(eval("dc=sjc-3", both, 2));
    /* '!=': no pair matches, so exactly 'not =' */
    assert_true(eval("dc!=sjc-3", none, 1));
    assert_false(eval("dc!=sjc-3", sjc, 1));
    assert_true(eval("dc!=sjc-3", iad, 1));
    assert_false(eval("dc!=sjc-3", both, 2));
    assert_true(eval("dc!=sjc-3", NULL, 0));
    /* names and values compare exactly */
    const attr upper[] = {{"DC", "sjc-3"}, {"dc", "SJC-3"}, {"dc ", "sjc-3"}};
    assert_false(eval("dc=sjc-3", upper, 3));
    /* pairs with a NULL half are skipped, a NULL policy admits nobody */
    const attr holes[] = {{NULL, "sjc-3"}, {"dc", NULL}, {"dc", "sjc-3"}};
    assert_true(eval("dc=sjc-3", holes, 3));
    assert_false(eval("dc=sjc-3", holes, 2));
    assert_false(kl_policy_eval(NULL, sjc, 1));
    kl_policy *p = parse_ok("dc!=x");
    assert_true(kl_policy_eval(p, NULL, 5)); /* no array: no attributes */
    kl_policy_free(p);
}

/* ---- printing ------------------------------------------------------------ */

static void test_print_buffer(void **state)
{
    (void)state;
    kl_policy *p = parse_ok("a in (c, b)");
    const char *want = "a in (b, c)";
    size_t n = strlen(want), len = 0;
    char buf[32];
    assert_int_equal(kl_policy_print(p, NULL, 0, &len), KL_E_TOO_LARGE);
    assert_int_equal(len, n);
    len = 0;
    assert_int_equal(kl_policy_print(p, NULL, 64, &len), KL_E_TOO_LARGE);
    assert_int_equal(len, n); /* no buffer is no room, whatever cap says */
    memset(buf, 'x', sizeof buf);
    assert_int_equal(kl_policy_print(p, buf, n, &len), KL_E_TOO_LARGE);
    assert_int_equal(len, n);
    assert_int_equal(buf[n - 1], 0); /* terminated even when cut */
    assert_int_equal(kl_policy_print(p, buf, n + 1, &len), KL_OK);
    assert_string_equal(buf, want);
    assert_int_equal(kl_policy_print(p, buf, sizeof buf, NULL), KL_OK);
    assert_int_equal(kl_policy_print(NULL, buf, sizeof buf, &len),
                     KL_E_BAD_VALUE);
    kl_policy_free(p);
    kl_policy_free(NULL);
    assert_true(kl_policy_equal(NULL, NULL));
}

static void test_charsets(void **state)
{
    (void)state;
    assert_true(kl_policy_name_ok("region", 6));
    assert_true(kl_policy_name_ok("a1-_", 4));
    assert_false(kl_policy_name_ok("1a", 2));
    assert_false(kl_policy_name_ok("-a", 2));
    assert_false(kl_policy_name_ok("a.b", 3));
    assert_false(kl_policy_name_ok("Region", 6));
    assert_false(kl_policy_name_ok("and", 3));
    assert_false(kl_policy_name_ok("", 0));
    assert_false(kl_policy_name_ok(NULL, 3));
    assert_true(kl_policy_value_ok("10.0.0.1", 8));
    assert_true(kl_policy_value_ok("us:east", 7));
    assert_false(kl_policy_value_ok("EU", 2));
    assert_false(kl_policy_value_ok("in", 2));
    assert_false(kl_policy_value_ok("a b", 3));
    assert_false(kl_policy_value_ok("a\0b", 3));
    char w[KL_POLICY_MAX_WORD + 1];
    memset(w, 'a', sizeof w);
    assert_true(kl_policy_name_ok(w, KL_POLICY_MAX_WORD));
    assert_false(kl_policy_name_ok(w, KL_POLICY_MAX_WORD + 1));
    assert_true(kl_policy_value_ok(w, KL_POLICY_MAX_WORD));
    assert_false(kl_policy_value_ok(w, KL_POLICY_MAX_WORD + 1));
}

/* ---- errors -------------------------------------------------------------- */

#define PRIMARY "expected a comparison, '(' or 'not'"

static void test_err_empty_dangling(void **state)
{
    (void)state;
    bad("", 0, "empty policy");
    bad("  \n\t", 4, "empty policy");
    bad_n(NULL, 0, KL_E_BAD_VALUE, 0, "empty policy");
    bad("region=eu-west or", 17, PRIMARY " after 'or', found the end");
    bad("region=eu and and dc=x", 14, PRIMARY " after 'and', found 'and'");
    bad("a=1 and or b=1", 8, PRIMARY " after 'and', found 'or'");
    bad("(a=1 or)", 7, PRIMARY " after 'or', found ')'");
    bad("not", 3, PRIMARY " after 'not', found the end");
    bad("not and a=1", 4, PRIMARY " after 'not', found 'and'");
    bad("or a=b", 0, PRIMARY ", found 'or'");
    bad("and", 0, PRIMARY ", found 'and'");
    bad("in (a)", 0, PRIMARY ", found 'in'");
    bad("=x", 0, PRIMARY ", found '='");
    bad(",", 0, PRIMARY ", found ','");
}

static void test_err_parentheses(void **state)
{
    (void)state;
    bad("(a=b or c=d", 11, "'(' at 0 is not closed");
    bad("((a=b)", 6, "'(' at 0 is not closed");
    bad("a=1 and (b=1 or (c=1)", 21, "'(' at 8 is not closed");
    bad("a=b)", 3, "')' without a matching '('");
    bad("(a=b))", 5, "')' without a matching '('");
    bad(")", 0, PRIMARY ", found ')'");
    bad("()", 1, PRIMARY ", found ')'");
    bad("(a=1 b=2)", 5, "expected 'and', 'or' or ')', found 'b'");
}

static void test_err_names_values(void **state)
{
    (void)state;
    const char *names = "names are lower-case letters, digits, '-' and '_', "
                        "starting with a letter";
    const char *values = "values are lower-case letters, digits, '-', '_', "
                         "'.' and ':'";
    char m[256];
    snprintf(m, sizeof m, "bad attribute name 'Region': %s", names);
    bad("Region=eu", 0, m);
    snprintf(m, sizeof m, "bad attribute name '3dc': %s", names);
    bad("a=1 or 3dc=x", 7, m);
    snprintf(m, sizeof m, "bad attribute name 'dc.x': %s", names);
    bad("dc.x=1", 0, m);
    snprintf(m, sizeof m, "bad attribute name '_a': %s", names);
    bad("_a=1", 0, m);
    snprintf(m, sizeof m, "bad value 'EU': %s", values);
    bad("region=EU", 7, m);
    snprintf(m, sizeof m, "bad value 'eu-West': %s", values);
    bad("region in (eu-West)", 11, m);
    bad("region=", 7, "expected a value after '=', found the end");
    bad("region!=)", 8, "expected a value after '!=', found ')'");
    bad("region= and x=y", 8, "'and' is a keyword and cannot be a value");
    bad("region=not", 7, "'not' is a keyword and cannot be a value");
    bad("region", 6,
        "expected '=', '!=' or 'in' after the attribute name, found the end");
    bad("region or x=y", 7,
        "expected '=', '!=' or 'in' after the attribute name, found 'or'");
    bad("a==b", 1, "'==' is not an operator; write '='");
    bad("a= =b", 3, "expected a value after '=', found '='");
    bad("a!==b", 3, "expected a value after '!=', found '='");
    bad("a=\"eu\"", 2, "expected a value after '=', found '\"'");
    bad("a=eu/west", 4, "expected 'and', 'or' or the end, found '/'");
    bad("a=\xc3\xa9", 2, "expected a value after '=', found byte 0xc3");
    bad("a in ()", 6, "expected a value in the 'in' list, found ')'");
    bad("a in (x,)", 8, "expected a value after ',', found ')'");
    bad("a in x", 5, "expected '(' after 'in', found 'x'");
    bad("a in (x y)", 8, "expected ',' or ')' in the 'in' list, found 'y'");
    bad("a in (x", 7, "expected ',' or ')' in the 'in' list, found the end");
    bad("a in (in)", 6, "'in' is a keyword and cannot be a value");
    /* words are shown cut at 32 bytes */
    char name[80];
    memset(name, 'A', 40);
    strcpy(name + 40, "=x");
    snprintf(m, sizeof m, "bad attribute name '%.32s': %s", name, names);
    bad(name, 0, m);
}

static void test_err_keywords(void **state)
{
    (void)state;
    bad("a=b xor c=d", 4, "expected 'and', 'or' or the end, found 'xor'");
    bad("a=b AND c=d", 4, "'AND': keywords are lower case; write 'and'");
    bad("a=b Or c=d", 4, "'Or': keywords are lower case; write 'or'");
    bad("NOT a=b", 0, "'NOT': keywords are lower case; write 'not'");
    bad("a IN (x)", 2, "'IN': keywords are lower case; write 'in'");
    bad("a=b && c=d", 4, "'&&' is not an operator; write 'and'");
    bad("a=b & c=d", 4, "'&' is not an operator; write 'and'");
    bad("a=b || c=d", 4, "'||' is not an operator; write 'or'");
    bad("a=b | c=d", 4, "'|' is not an operator; write 'or'");
    bad("!a=b", 0, "'!' is not an operator; write 'not'");
    bad("a=b and !c=d", 8, "'!' is not an operator; write 'not'");
    bad("a nin (x)", 2,
        "expected '=', '!=' or 'in' after the attribute name, found 'nin'");
    bad("a=b;", 3, "expected 'and', 'or' or the end, found ';'");
    bad("a=b c=d", 4, "expected 'and', 'or' or the end, found 'c'");
}

static void test_err_nul(void **state)
{
    (void)state;
    bad_n("a=b\0 or c=d", 11, KL_E_BAD_VALUE, 3, "NUL byte inside the policy");
    bad_n("\0", 1, KL_E_BAD_VALUE, 0, "NUL byte inside the policy");
    bad_n("a=b (\0", 6, KL_E_BAD_VALUE, 5, "NUL byte inside the policy");
    /* no output arguments: a status, no crash */
    kl_policy *p = NULL;
    assert_int_equal(kl_policy_parse("a=", 2, &p, NULL, NULL, 0),
                     KL_E_BAD_VALUE);
    assert_int_equal(kl_policy_parse("a=b", 3, NULL, NULL, NULL, 0),
                     KL_E_BAD_VALUE);
    char small[8];
    assert_int_equal(kl_policy_parse("a=", 2, &p, NULL, small, sizeof small),
                     KL_E_BAD_VALUE);
    assert_int_equal(strlen(small), sizeof small - 1);
}

static char *repeat(const char *head, const char *unit, size_t n,
                    const char *tail)
{
    size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail);
    char *s = malloc(hl + ul * n + tl + 1);
    assert_non_null(s);
    memcpy(s, head, hl);
    for (size_t i = 0; i < n; i++)
        memcpy(s + hl + i * ul, unit, ul);
    memcpy(s + hl + n * ul, tail, tl + 1);
    return s;
}

static void test_err_limits(void **state)
{
    (void)state;
    /* depth: 32 '(' or 'not' around a comparison, not 33 */
    char *s = repeat("", "(", 32, "a=b");
    char *t = repeat(s, ")", 32, "");
    kl_policy_free(parse_ok(t));
    free(s);
    free(t);
    s = repeat("", "(", 33, "a=b");
    t = repeat(s, ")", 33, "");
    bad_n(t, strlen(t), KL_E_TOO_LARGE, 32, "nested deeper than 32");
    free(s);
    free(t);
    s = repeat("", "not ", 32, "a=b");
    kl_policy_free(parse_ok(s));
    free(s);
    s = repeat("", "not ", 33, "a=b");
    bad_n(s, strlen(s), KL_E_TOO_LARGE, 128, "nested deeper than 32");
    free(s);
    s = repeat("x=1 and ", "not (", 16, "a=b");
    t = repeat(s, ")", 16, "");
    kl_policy_free(parse_ok(t));
    free(s);
    free(t);
    s = repeat("x=1 and ", "not (", 17, "a=b");
    t = repeat(s, ")", 17, "");
    bad_n(t, strlen(t), KL_E_TOO_LARGE, 8 + 16 * 5, "nested deeper than 32");
    free(s);
    free(t);
    /* flattening keeps the canonical form within what was accepted */
    s = repeat("", "a=1 and (", 31, "a=2");
    t = repeat(s, ")", 31, "");
    kl_policy *p = parse_ok(t);
    assert_null(strchr(print_ok(p), '('));
    kl_policy_free(p);
    free(s);
    free(t);

    /* length: 4096 bytes is accepted, 4097 is not */
    s = malloc(KL_POLICY_MAX_LEN + 2);
    assert_non_null(s);
    memset(s, ' ', KL_POLICY_MAX_LEN + 1);
    memcpy(s, "a=b", 3);
    s[KL_POLICY_MAX_LEN + 1] = 0;
    p = NULL;
    assert_int_equal(kl_policy_parse(s, KL_POLICY_MAX_LEN, &p, NULL, NULL, 0),
                     KL_OK);
    kl_policy_free(p);
    bad_n(s, KL_POLICY_MAX_LEN + 1, KL_E_TOO_LARGE, KL_POLICY_MAX_LEN,
          "policy longer than 4096 bytes");
    free(s);

    /* terms: 256 values compared, not 257 */
    s = repeat("a=b", " or a=b", 255, "");
    kl_policy_free(parse_ok(s));
    free(s);
    s = repeat("a=b", " or a=b", 256, "");
    bad_n(s, strlen(s), KL_E_TOO_LARGE, 3 + 255 * 7 + 6,
          "more than 256 values compared");
    free(s);
    s = repeat("a in (b", ",b", 256, ")");
    bad_n(s, strlen(s), KL_E_TOO_LARGE, 6 + 256 * 2,
          "more than 256 values compared");
    free(s);

    /* names and values: 64 bytes */
    char w[200];
    memset(w, 'a', 65);
    strcpy(w + 65, "=b");
    bad_n(w, strlen(w), KL_E_TOO_LARGE, 0,
          "attribute name longer than 64 bytes");
    kl_policy_free(parse_ok(w + 1));
    strcpy(w, "a in (x, ");
    memset(w + 9, 'v', 65);
    strcpy(w + 9 + 65, ")");
    bad_n(w, strlen(w), KL_E_TOO_LARGE, 9, "value longer than 64 bytes");

    /* the canonical form is held to the length limit too: 256 distinct
     * 14-byte values written "a in(v,v,...)" take 3845 bytes and print
     * as "a in (v, v, ...)", 4101 */
    s = malloc(KL_POLICY_MAX_LEN + 1);
    assert_non_null(s);
    size_t n = (size_t)sprintf(s, "a in(");
    for (int i = 0; i < 256; i++)
        n += (size_t)sprintf(s + n, "%sv%013d", i ? "," : "", i);
    n += (size_t)sprintf(s + n, ")");
    assert_int_equal(n, 3845);
    bad_n(s, n, KL_E_TOO_LARGE, 3845,
          "canonical form of 4101 bytes is longer than 4096");
    free(s);
}

/* ---- randomized round trips ---------------------------------------------- */

static uint64_t rng;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)((rng >> 11) % n);
}

static const char *const gnames[] = {"region", "country", "dc", "tier"};
static const char *const gvals[] = {"eu-west", "eu-central", "us",
                                    "sjc-3",   "a.b",        "x:1"};

/* Our own tree: G_IN holds n values, possibly repeated; chains may nest
 * their own kind (the parser flattens them). */
enum { G_OR, G_AND, G_NOT, G_EQ, G_NE, G_IN };
typedef struct gnode {
    int k, n, name, vals[3];
    struct gnode *kids[3];
} gnode;

static gnode *gen(int depth)
{
    gnode *g = calloc(1, sizeof *g);
    assert_non_null(g);
    g->k = depth > 0 ? (int)rnd(6) : G_EQ + (int)rnd(3);
    g->name = (int)rnd(4);
    switch (g->k) {
    case G_OR:
    case G_AND:
        g->n = 2 + (int)rnd(2);
        for (int i = 0; i < g->n; i++)
            g->kids[i] = gen(depth - 1);
        break;
    case G_NOT:
        g->n = 1;
        g->kids[0] = gen(depth - 1);
        break;
    default:
        g->n = g->k == G_IN ? 1 + (int)rnd(3) : 1;
        for (int i = 0; i < g->n; i++)
            g->vals[i] = (int)rnd(6);
    }
    return g;
}

static void gfree(gnode *g)
{
    if (g->k <= G_NOT)
        for (int i = 0; i < g->n; i++)
            gfree(g->kids[i]);
    free(g);
}

static bool ghas(const attr *a, size_t n, int name, int val)
{
    for (size_t i = 0; i < n; i++)
        if (a[i].name == gnames[name] && a[i].value == gvals[val])
            return true;
    return false;
}

/* The rules of docs/DESIGN.md, written again without the parser's code. */
static bool geval(const gnode *g, const attr *a, size_t n)
{
    bool r;
    switch (g->k) {
    case G_OR:
        r = false;
        for (int i = 0; i < g->n; i++)
            r = r || geval(g->kids[i], a, n);
        return r;
    case G_AND:
        r = true;
        for (int i = 0; i < g->n; i++)
            r = r && geval(g->kids[i], a, n);
        return r;
    case G_NOT: return !geval(g->kids[0], a, n);
    case G_EQ: return ghas(a, n, g->name, g->vals[0]);
    case G_NE: return !ghas(a, n, g->name, g->vals[0]);
    default:
        for (int i = 0; i < g->n; i++)
            if (ghas(a, n, g->name, g->vals[i]))
                return true;
        return false;
    }
}

typedef struct text {
    char b[KL_POLICY_MAX_LEN];
    size_t n;
} text;

static void emit(text *t, const char *s)
{
    size_t l = strlen(s);
    assert_true(t->n + l < sizeof t->b);
    memcpy(t->b + t->n, s, l);
    t->n += l;
}

/* Whitespace: at least min of ' ', '\t', '\n', up to min + 2. */
static void ws(text *t, int min)
{
    static const char *const w[] = {" ", "\t", "\n", "  "};
    int n = min + (int)rnd(3);
    for (int i = 0; i < n; i++)
        emit(t, w[rnd(4)]);
}

static int prec(const gnode *g)
{
    return g->k == G_OR ? 1 : g->k == G_AND ? 2 : 3;
}

/* Writes g where an operand of precedence need is wanted: parentheses
 * where the grammar needs them, and now and then where it does not. */
static void gprint(text *t, const gnode *g, int need)
{
    bool paren = prec(g) < need || rnd(5) == 0;
    if (paren) {
        emit(t, "(");
        ws(t, 0);
    }
    switch (g->k) {
    case G_OR:
    case G_AND:
        for (int i = 0; i < g->n; i++) {
            if (i) {
                ws(t, 1);
                emit(t, g->k == G_OR ? "or" : "and");
                ws(t, 1);
            }
            gprint(t, g->kids[i], g->k == G_OR ? 2 : 3);
        }
        break;
    case G_NOT:
        emit(t, "not");
        ws(t, 1);
        gprint(t, g->kids[0], 3);
        break;
    case G_EQ:
    case G_NE:
        emit(t, gnames[g->name]);
        ws(t, 0);
        emit(t, g->k == G_EQ ? "=" : "!=");
        ws(t, 0);
        emit(t, gvals[g->vals[0]]);
        break;
    default:
        emit(t, gnames[g->name]);
        ws(t, 1);
        emit(t, "in");
        ws(t, 0);
        emit(t, "(");
        for (int i = 0; i < g->n; i++) {
            ws(t, 0);
            if (i) {
                emit(t, ",");
                ws(t, 0);
            }
            emit(t, gvals[g->vals[i]]);
        }
        ws(t, 0);
        emit(t, ")");
    }
    if (paren) {
        ws(t, 0);
        emit(t, ")");
    }
}

/* A random server: each name with none, one or two of the values. */
static size_t gattrs(attr *a)
{
    size_t n = 0;
    for (int i = 0; i < 4; i++)
        for (int j = 0, k = (int)rnd(3); j < k; j++)
            a[n++] = (attr){gnames[i], gvals[rnd(6)]};
    return n;
}

static void test_random_round_trip(void **state)
{
    (void)state;
    const char *seed = getenv("KL_POLICY_SEED");
    rng = seed ? strtoull(seed, NULL, 0) : 0x9e3779b97f4a7c15ull;
    if (!rng)
        rng = 1;
    print_message("seed 0x%llx (KL_POLICY_SEED to repeat)\n",
                  (unsigned long long)rng);
    static text t;
    static char first[KL_POLICY_MAX_LEN + 1];
    for (int iter = 0; iter < 3000; iter++) {
        gnode *g = gen((int)rnd(4));
        t.n = 0;
        ws(&t, 0);
        gprint(&t, g, 1);
        ws(&t, 0);
        kl_policy *p = NULL, *q = NULL;
        char err[256];
        if (kl_policy_parse(t.b, t.n, &p, NULL, err, sizeof err) != KL_OK)
            fail_msg("'%.*s': %s", (int)t.n, t.b, err);
        strcpy(first, print_ok(p));
        if (kl_policy_parse(first, strlen(first), &q, NULL, err, sizeof err) !=
            KL_OK)
            fail_msg("canonical '%s': %s", first, err);
        assert_true(kl_policy_equal(p, q));
        assert_string_equal(print_ok(q), first);
        for (int j = 0; j < 8; j++) {
            attr a[8];
            size_t n = gattrs(a);
            bool want = geval(g, a, n);
            if (kl_policy_eval(p, a, n) != want ||
                kl_policy_eval(q, a, n) != want)
                fail_msg("'%.*s' (canonical '%s') evaluated wrongly", (int)t.n,
                         t.b, first);
        }
        kl_policy_free(p);
        kl_policy_free(q);
        gfree(g);
    }
}

/* Random strings of the language's tokens and a few strangers: whatever
 * parses round-trips, whatever does not names a position inside the text
 * (or just after it). */
static void test_random_tokens(void **state)
{
    (void)state;
    static const char *const toks[] = {
        "a",   "b",  "dc",  "=", "!=", "in", "(", ")",   ",", " ",  " ",   " ",
        "and", "or", "not", "x", "1",  "&&", "!", "AND", ".", "\t", "e-w", ":"};
    rng = 0x2545f4914f6cdd1dull;
    char s[128], err[256];
    int ok = 0;
    for (int iter = 0; iter < 50000; iter++) {
        size_t n = 0;
        for (int k = (int)rnd(14); k > 0; k--) {
            const char *w = toks[rnd(sizeof toks / sizeof *toks)];
            size_t l = strlen(w);
            if (n + l + 1 >= sizeof s)
                break;
            memcpy(s + n, w, l);
            n += l;
            if (rnd(2))
                s[n++] = ' ';
        }
        s[n] = 0;
        kl_policy *p = NULL;
        size_t pos = 0;
        kl_status st = kl_policy_parse(s, n, &p, &pos, err, sizeof err);
        if (st != KL_OK) {
            assert_null(p);
            assert_true(pos <= n);
            assert_true(strncmp(err, "at ", 3) == 0);
            continue;
        }
        ok++;
        kl_policy *q = NULL;
        char *c = print_ok(p);
        assert_int_equal(kl_policy_parse(c, strlen(c), &q, NULL, NULL, 0),
                         KL_OK);
        assert_true(kl_policy_equal(p, q));
        kl_policy_free(p);
        kl_policy_free(q);
    }
    assert_true(ok > 100); /* the test reached the round trip */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_examples),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_parentheses),
        cmocka_unit_test(test_spacing_and_words),
        cmocka_unit_test(test_in_sets),
        cmocka_unit_test(test_eval_rules),
        cmocka_unit_test(test_print_buffer),
        cmocka_unit_test(test_charsets),
        cmocka_unit_test(test_err_empty_dangling),
        cmocka_unit_test(test_err_parentheses),
        cmocka_unit_test(test_err_names_values),
        cmocka_unit_test(test_err_keywords),
        cmocka_unit_test(test_err_nul),
        cmocka_unit_test(test_err_limits),
        cmocka_unit_test(test_random_round_trip),
        cmocka_unit_test(test_random_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
