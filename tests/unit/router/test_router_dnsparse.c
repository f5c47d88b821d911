/* SPDX-License-Identifier: Apache-2.0 */
/* The DNS answer reader of the router's `dns:` entries
 * (src/router/dns.c): addresses and the smallest TTL of a response, with
 * name compression, CNAME chains, other classes and types skipped, and
 * every malformed response refused without reading past its end. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/dns.h"

typedef struct msg {
    uint8_t b[1024];
    size_t n;
} msg;

static void u8(msg *m, unsigned v)
{
    m->b[m->n++] = (uint8_t)v;
}
static void u16(msg *m, unsigned v)
{
    u8(m, v >> 8);
    u8(m, v & 0xff);
}
static void u32(msg *m, uint32_t v)
{
    u16(m, v >> 16);
    u16(m, v & 0xffff);
}
static void name(msg *m, const char *dotted)
{
    while (*dotted) {
        size_t l = strcspn(dotted, ".");
        u8(m, (unsigned)l);
        memcpy(m->b + m->n, dotted, l);
        m->n += l;
        dotted += l;
        if (*dotted == '.')
            dotted++;
    }
    u8(m, 0);
}

/* A response header and the question "pool.test" of type qtype. */
static void head(msg *m, unsigned flags, unsigned an, unsigned qtype)
{
    m->n = 0;
    u16(m, 0x1234);
    u16(m, flags);
    u16(m, 1);
    u16(m, an);
    u16(m, 0);
    u16(m, 0);
    name(m, "pool.test");
    u16(m, qtype);
    u16(m, 1);
}

/* An answer owned by the question's name (pointer to offset 12). */
static void rr(msg *m, unsigned type, unsigned klass, uint32_t ttl,
               const uint8_t *rdata, unsigned rdlen)
{
    u16(m, 0xC00C);
    u16(m, type);
    u16(m, klass);
    u32(m, ttl);
    u16(m, rdlen);
    memcpy(m->b + m->n, rdata, rdlen);
    m->n += rdlen;
}

static const uint8_t A2[4] = {127, 0, 0, 2}, A3[4] = {127, 0, 0, 3};
static const uint8_t V6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

static kl_status parse(const msg *m, uint16_t qtype, char (*out)[64], size_t *n,
                       uint32_t *ttl)
{
    return kl_rt_dns_parse(m->b, m->n, qtype, out, 8, n, ttl);
}

static void test_a_records_and_min_ttl(void **state)
{
    (void)state;
    msg m;
    head(&m, 0x8180, 3, KL_RT_DNS_TYPE_A);
    rr(&m, KL_RT_DNS_TYPE_A, 1, 300, A2, 4);
    rr(&m, KL_RT_DNS_TYPE_A, 1, 60, A3, 4);
    rr(&m, KL_RT_DNS_TYPE_A, 1, 10, A2, 4); /* a duplicate: once */
    char out[8][64];
    size_t n = 0;
    uint32_t ttl = KL_RT_DNS_NO_TTL;
    assert_int_equal(parse(&m, KL_RT_DNS_TYPE_A, out, &n, &ttl), KL_OK);
    assert_int_equal(n, 2);
    assert_string_equal(out[0], "127.0.0.2");
    assert_string_equal(out[1], "127.0.0.3");
    assert_int_equal(ttl, 10);
    /* AAAA appended to what is there; the smaller TTL wins across both */
    head(&m, 0x8180, 1, KL_RT_DNS_TYPE_AAAA);
    rr(&m, KL_RT_DNS_TYPE_AAAA, 1, 5, V6, 16);
    assert_int_equal(parse(&m, KL_RT_DNS_TYPE_AAAA, out, &n, &ttl), KL_OK);
    assert_int_equal(n, 3);
    assert_string_equal(out[2], "::1");
    assert_int_equal(ttl, 5);
}

static void test_cname_class_type_and_top_bit(void **state)
{
    (void)state;
    msg m;
    /* CNAME (ttl 7) -> target; the A record behind it has ttl 100: the
     * alias expires first. A CH-class record and an AAAA in an A answer
     * are skipped. */
    head(&m, 0x8180, 4, KL_RT_DNS_TYPE_A);
    msg target = {.n = 0};
    name(&target, "real.test");
    rr(&m, KL_RT_DNS_TYPE_CNAME, 1, 7, target.b, (unsigned)target.n);
    rr(&m, KL_RT_DNS_TYPE_A, 3, 1, A3, 4);
    rr(&m, KL_RT_DNS_TYPE_AAAA, 1, 1, V6, 16);
    rr(&m, KL_RT_DNS_TYPE_A, 1, 100, A2, 4);
    char out[8][64];
    size_t n = 0;
    uint32_t ttl = KL_RT_DNS_NO_TTL;
    assert_int_equal(parse(&m, KL_RT_DNS_TYPE_A, out, &n, &ttl), KL_OK);
    assert_int_equal(n, 1);
    assert_string_equal(out[0], "127.0.0.2");
    assert_int_equal(ttl, 7);
    /* RFC 2181: a TTL with the top bit set is 0 */
    head(&m, 0x8180, 1, KL_RT_DNS_TYPE_A);
    rr(&m, KL_RT_DNS_TYPE_A, 1, 0x80000010u, A2, 4);
    n = 0;
    ttl = KL_RT_DNS_NO_TTL;
    assert_int_equal(parse(&m, KL_RT_DNS_TYPE_A, out, &n, &ttl), KL_OK);
    assert_int_equal(ttl, 0);
    /* no record of the type: OK, nothing added, TTL untouched */
    head(&m, 0x8180, 0, KL_RT_DNS_TYPE_A);
    n = 0;
    ttl = KL_RT_DNS_NO_TTL;
    assert_int_equal(parse(&m, KL_RT_DNS_TYPE_A, out, &n, &ttl), KL_OK);
    assert_int_equal(n, 0);
    assert_int_equal(ttl, KL_RT_DNS_NO_TTL);
}

static void test_malformed_refused(void **state)
{
    (void)state;
    char out[8][64];
    size_t n;
    uint32_t ttl;
    msg m, good;
    head(&good, 0x8180, 1, KL_RT_DNS_TYPE_A);
    rr(&good, KL_RT_DNS_TYPE_A, 1, 30, A2, 4);
    /* every truncation of a good response is refused, never overread */
    for (size_t cut = 0; cut < good.n; cut++) {
        n = 0;
        ttl = KL_RT_DNS_NO_TTL;
        kl_status st =
            kl_rt_dns_parse(good.b, cut, KL_RT_DNS_TYPE_A, out, 8, &n, &ttl);
        assert_int_not_equal(st, KL_OK);
        assert_int_equal(n, 0); /* nothing half-read is used */
        assert_int_equal(ttl, KL_RT_DNS_NO_TTL);
    }
    /* a query, not a response */
    head(&m, 0x0100, 1, KL_RT_DNS_TYPE_A);
    rr(&m, KL_RT_DNS_TYPE_A, 1, 30, A2, 4);
    n = 0;
    assert_int_equal(parse(&m, KL_RT_DNS_TYPE_A, out, &n, &ttl),
                     KL_E_BAD_VALUE);
    /* an error code: NXDOMAIN, SERVFAIL */
    head(&m, 0x8183, 0, KL_RT_DNS_TYPE_A);
    assert_int_equal(parse(&m, KL_RT_DNS_TYPE_A, out, &n, &ttl),
                     KL_E_NOT_FOUND);
    head(&m, 0x8182, 0, KL_RT_DNS_TYPE_A);
    assert_int_equal(parse(&m, KL_RT_DNS_TYPE_A, out, &n, &ttl),
                     KL_E_NOT_FOUND);
    /* an A record of 5 bytes */
    static const uint8_t five[5] = {127, 0, 0, 2, 9};
    head(&m, 0x8180, 1, KL_RT_DNS_TYPE_A);
    rr(&m, KL_RT_DNS_TYPE_A, 1, 30, five, 5);
    assert_int_equal(parse(&m, KL_RT_DNS_TYPE_A, out, &n, &ttl),
                     KL_E_BAD_VALUE);
    /* rdlength past the end */
    head(&m, 0x8180, 1, KL_RT_DNS_TYPE_A);
    rr(&m, KL_RT_DNS_TYPE_A, 1, 30, A2, 4);
    m.b[m.n - 5] = 40;
    assert_int_equal(parse(&m, KL_RT_DNS_TYPE_A, out, &n, &ttl),
                     KL_E_TRUNCATED);
    /* a reserved label form (0x40) in the question */
    head(&m, 0x8180, 0, KL_RT_DNS_TYPE_A);
    m.b[12] = 0x41;
    assert_int_equal(parse(&m, KL_RT_DNS_TYPE_A, out, &n, &ttl),
                     KL_E_BAD_VALUE);
    /* a name of more labels than a name may have */
    m.n = 0;
    u16(&m, 1);
    u16(&m, 0x8180);
    u16(&m, 1);
    u16(&m, 0);
    u16(&m, 0);
    u16(&m, 0);
    for (int i = 0; i < 200; i++) {
        u8(&m, 1);
        u8(&m, 'a');
    }
    u8(&m, 0);
    u32(&m, 0x00010001);
    assert_int_equal(parse(&m, KL_RT_DNS_TYPE_A, out, &n, &ttl),
                     KL_E_BAD_VALUE);
    /* more answers announced than present */
    head(&m, 0x8180, 2, KL_RT_DNS_TYPE_A);
    rr(&m, KL_RT_DNS_TYPE_A, 1, 30, A2, 4);
    n = 0;
    assert_int_equal(parse(&m, KL_RT_DNS_TYPE_A, out, &n, &ttl),
                     KL_E_TRUNCATED);
    assert_int_equal(n, 0);
}

static void test_server_address_and_literals(void **state)
{
    (void)state;
    assert_true(kl_rt_dns_server_valid("127.0.0.1:5353"));
    assert_true(kl_rt_dns_server_valid("127.0.0.1"));
    assert_false(kl_rt_dns_server_valid("localhost:53"));
    assert_false(kl_rt_dns_server_valid("127.0.0.1:0"));
    assert_false(kl_rt_dns_server_valid("127.0.0.1:70000"));
    assert_false(kl_rt_dns_server_valid("::1:53"));
    /* an address literal needs no query and has no TTL */
    char out[4][64];
    uint32_t ttl = 0;
    assert_int_equal(
        kl_rt_dns_resolve("127.0.0.1:9", 1000, "127.0.0.7", out, 4, &ttl), 1);
    assert_string_equal(out[0], "127.0.0.7");
    assert_int_equal(ttl, KL_RT_DNS_NO_TTL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_records_and_min_ttl),
        cmocka_unit_test(test_cname_class_type_and_top_bit),
        cmocka_unit_test(test_malformed_refused),
        cmocka_unit_test(test_server_address_and_literals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
