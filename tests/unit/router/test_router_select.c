/* SPDX-License-Identifier: Apache-2.0 */
/* Choosing remotes (src/router/select.c, remote.c latency,
 * forward.c): latency ordering must actually reorder (the reference
 * client's sort was a no-op), health first, ties within the tolerance go
 * by priority, the EWMA follows a degradation, the per-attempt timeout is
 * the p99 x 10 within its floor and ceiling, candidates obey compliance
 * regions and key policies, and the forwarded request keeps everything
 * with hops + 1. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/time.h"
#include "router/router_int.h"

static kl_router R;

static int setup(void **state)
{
    memset(&R, 0, sizeof R);
    /* the defaults, written out: the assertions below depend on them */
    R.o = kl_router_defaults;
    R.o.ewma_weight_pct = 20;
    R.o.latency_tolerance_pct = 10;
    R.o.timeout_floor_ns = 20 * KL_NS_PER_MS;
    R.o.timeout_ceiling_ns = 2000 * KL_NS_PER_MS;
    R.o.timeout_p99_factor = 10;
    return 0;
}

static kl_remote *rem(const char *name, double ms, int prio, bool up)
{
    kl_remote *rm = calloc(1, sizeof *rm);
    rm->r = &R;
    snprintf(rm->name, sizeof rm->name, "%s", name);
    rm->priority = prio;
    rm->up = up;
    if (ms >= 0) {
        rm->measured = true;
        rm->ewma_ns = ms * 1e6;
    }
    return rm;
}

static void test_latency_reorders(void **state)
{
    /* given slow first and with the better priority, the fast one must
     * still come first */
    kl_remote *slow = rem("slow", 80, 1, true),
              *fast = rem("fast", 20, 50, true);
    kl_remote *v[2] = {slow, fast};
    kl_rt_order(v, 2, 10);
    assert_ptr_equal(v[0], fast);
    assert_ptr_equal(v[1], slow);
    /* within 10%: a tie, priority decides */
    fast->ewma_ns = 21e6;
    slow->ewma_ns = 20e6;
    slow->priority = 60;
    v[0] = slow;
    v[1] = fast;
    kl_rt_order(v, 2, 10);
    assert_ptr_equal(v[0], fast); /* priority 50 < 60 */
    /* health before latency */
    kl_remote *down = rem("down", 1, 1, false);
    kl_remote *fresh = rem("fresh", -1, 1, true); /* not measured yet */
    kl_remote *w[4] = {down, fresh, slow, fast};
    kl_rt_order(w, 4, 10);
    assert_ptr_equal(w[0], fast);
    assert_ptr_equal(w[1], slow);
    assert_ptr_equal(w[2], fresh);
    assert_ptr_equal(w[3], down);
    free(slow);
    free(fast);
    free(down);
    free(fresh);
}

static void test_ewma_and_timeout(void **state)
{
    kl_remote *a = rem("a", -1, 1, true), *b = rem("b", -1, 1, true);
    assert_int_equal(kl_remote_timeout_ms(a), 2000); /* nothing measured */
    for (int i = 0; i < 20; i++) {
        kl_remote_sample(a, 20000000ull);
        kl_remote_sample(b, 80000000ull);
    }
    assert_true(a->ewma_ns > 19.9e6 && a->ewma_ns < 20.1e6);
    assert_int_equal(kl_remote_timeout_ms(a), 200); /* p99 20 ms x 10 */
    kl_remote *v[2] = {b, a};
    kl_rt_order(v, 2, 10);
    assert_ptr_equal(v[0], a);
    /* a degrades to 150 ms: after 3 samples its EWMA (83 ms) passes b's
     * 80 ms but within the 10% tolerance (a tie: name order keeps a);
     * after 5 (107 ms) b is clearly better */
    for (int i = 0; i < 3; i++)
        kl_remote_sample(a, 150000000ull);
    assert_true(a->ewma_ns > 80e6 && a->ewma_ns < 88e6);
    kl_rt_order(v, 2, 10);
    assert_ptr_equal(v[0], a);
    for (int i = 0; i < 2; i++)
        kl_remote_sample(a, 150000000ull);
    assert_true(a->ewma_ns > 88e6);
    kl_rt_order(v, 2, 10);
    assert_ptr_equal(v[0], b);
    /* the timeout follows the p99, within the ceiling */
    for (int i = 0; i < 128; i++)
        kl_remote_sample(a, 500000000ull);
    assert_int_equal(kl_remote_timeout_ms(a), 2000);
    /* and the floor, once the slow samples have left the window */
    for (int i = 0; i < 2 * KL_RT_SAMPLES; i++)
        kl_remote_sample(b, 300000ull);
    assert_int_equal(kl_remote_timeout_ms(b), 20);
    free(a);
    free(b);
}

/* Queueing is not loss: answers that stream out of a burst (each one
 * arriving while the connection was answering others) move the EWMA that
 * orders routes, but not the window whose p99 sets the attempt timeout -
 * only the wait of a request for its connection's first answer after it
 * was sent does (stall.c). */
static void test_timeout_ignores_queueing(void **state)
{
    (void)state;
    kl_remote *a = rem("a", -1, 1, true);
    kl_upconn c;
    memset(&c, 0, sizeof c);
    c.rm = a;
    for (int i = 0; i < 20; i++)
        kl_remote_sample(a, 20000000ull); /* idle round trips: 20 ms */
    assert_int_equal(kl_remote_timeout_ms(a), 200);
    /* 1,000 sent at once 20 ms ago: the first answer is a sample */
    uint64_t sent = kl_now_ns() - 20000000ull;
    uint64_t w = kl_upconn_progress(&c, sent);
    assert_true(w >= 20000000ull && w < 1000000000ull);
    kl_remote_sample2(a, w, w);
    /* the rest stream out behind it, up to 500 ms late: no sample */
    for (int i = 0; i < 999; i++) {
        uint64_t w2 = kl_upconn_progress(&c, sent);
        assert_true(w2 == 0);
        kl_remote_sample2(a, 500000000ull, w2);
    }
    assert_true(a->ewma_ns > 400e6);                /* routing sees it */
    assert_int_equal(kl_remote_timeout_ms(a), 200); /* the timeout not */
    /* a request sent after the last answer waits for the next: a sample */
    c.progress_ns = kl_now_ns() - 50000000ull;
    w = kl_upconn_progress(&c, kl_now_ns() - 30000000ull);
    assert_true(w >= 30000000ull && w < 1000000000ull);
    free(a);
}

#define SKI_A "406550D87609ECAE021A83EF2C1F372C08F42699"

static void test_candidates(void **state)
{
    const char *text =
        "keys:\n"
        "  " SKI_A ": {regions: [eu, fedramp-high]}\n"
        "servers:\n"
        "  - {name: eu1, address: a, region: eu, serves: [" SKI_A "]}\n"
        "  - {name: us1, address: b, region: us, serves: [" SKI_A "]}\n"
        "  - {name: fed, address: c, region: fedramp-high, "
        "serves: [" SKI_A "]}\n";
    kl_rt_table *t = NULL;
    char err[256];
    assert_int_equal(kl_rt_table_parse("t.yaml", (const uint8_t *)text,
                                       strlen(text), NULL, NULL, &t, err,
                                       sizeof err),
                     KL_OK);
    kl_remote *eu = rem("eu1", 30, 1, true), *us = rem("us1", 5, 1, true),
              *fed = rem("fed", 10, 1, true);
    t->servers[0].remote = eu;
    t->servers[1].remote = us;
    t->servers[2].remote = fed;
    size_t n;
    uint8_t *a = tu_unhex(SKI_A, &n);
    const kl_rt_key *k = kl_rt_find(t, a);
    kl_remote *out[8];
    /* the key's policy excludes us1 although it is the fastest */
    n = kl_rt_candidates(&R, t, k, false, 0, NULL, 0, out, 8);
    assert_int_equal(n, 2);
    assert_ptr_equal(out[0], fed);
    assert_ptr_equal(out[1], eu);
    /* asked for one: the best, not the first in table order */
    assert_int_equal(kl_rt_candidates(&R, t, k, false, 0, NULL, 0, out, 1), 1);
    assert_ptr_equal(out[0], fed);
    /* compliance 0x01 (fedramp-high): only fed */
    n = kl_rt_candidates(&R, t, k, true, 0x01, NULL, 0, out, 8);
    assert_int_equal(n, 1);
    assert_ptr_equal(out[0], fed);
    /* an unmapped compliance byte: no candidate at all */
    assert_int_equal(kl_rt_candidates(&R, t, k, true, 0x42, NULL, 0, out, 8),
                     0);
    /* tried remotes are skipped */
    kl_remote *tried[1] = {fed};
    n = kl_rt_candidates(&R, t, k, false, 0, tried, 1, out, 8);
    assert_int_equal(n, 1);
    assert_ptr_equal(out[0], eu);
    free(a);
    free(eu);
    free(us);
    free(fed);
    kl_rt_table_free(t);
}

static void test_forward_spec(void **state)
{
    /* a request with everything: SKI, payload, compliance, span context,
     * request context with an id, a deadline and 1 hop */
    uint8_t ski[20] = {1, 2, 3};
    uint8_t span[37] = {0xaa};
    const char *json = "{\"request_id\":\"r-7\",\"deadline_ms\":250,"
                       "\"hops\":1}";
    kl_request_spec in = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                          .payload = (const uint8_t *)"0123456789abcdef",
                          .payload_len = 16,
                          .ski = ski,
                          .sni = "example.com",
                          .span_context = span,
                          .span_context_len = sizeof span,
                          .req_context = json,
                          .has_compliance = true,
                          .compliance = 1};
    uint8_t msg[2048];
    size_t len;
    assert_int_equal(kl_request_encode(msg, sizeof msg, &in, &len), KL_OK);
    kl_request req;
    assert_int_equal(kl_request_parse(msg + 8, len - 8, &req), KL_OK);
    kl_req_context ctx;
    assert_int_equal(
        kl_req_context_parse(req.req_context.ptr, req.req_context.len, &ctx),
        KL_OK);
    kl_request_spec out;
    char cj[1024];
    assert_int_equal(kl_router_forward_spec(&req, &ctx, &out, cj, sizeof cj),
                     KL_OK);
    assert_int_equal(out.opcode, KL_OP_ECDSA_SIGN_SHA256);
    assert_memory_equal(out.ski, ski, 20);
    assert_int_equal(out.payload_len, 16);
    assert_memory_equal(out.payload, "0123456789abcdef", 16);
    assert_true(out.has_compliance);
    assert_int_equal(out.compliance, 1);
    assert_int_equal(out.span_context_len, sizeof span);
    assert_memory_equal(out.span_context, span, sizeof span);
    assert_string_equal(out.sni, "example.com");
    /* hops + 1; the deadline is libkeyless's to write at send time */
    assert_string_equal(out.req_context, "{\"request_id\":\"r-7\",\"hops\":2}");
    /* without a context: hops 1 */
    assert_int_equal(kl_router_forward_spec(&req, NULL, &out, cj, sizeof cj),
                     KL_OK);
    assert_string_equal(out.req_context, "{\"hops\":1}");
    /* a context that does not fit the buffer is an error, not a cut */
    assert_int_equal(kl_router_forward_spec(&req, &ctx, &out, cj, 8),
                     KL_E_TOO_LARGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_latency_reorders, setup),
        cmocka_unit_test_setup(test_ewma_and_timeout, setup),
        cmocka_unit_test_setup(test_timeout_ignores_queueing, setup),
        cmocka_unit_test_setup(test_candidates, setup),
        cmocka_unit_test_setup(test_forward_spec, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
