/* SPDX-License-Identifier: Apache-2.0 */
/* The fault-injection proxy (tests/tools/faultproxy.c) is what
 * the router's tests stand on, so its faults are checked first, through
 * it to a real keylessd over mutual TLS: injected latency shows in the
 * round trip (50 ms each way -> ~100 ms), changes at run time, jitter
 * keeps the byte order (TLS survives), a black hole swallows requests, a
 * drop resets the connection, refuse closes new ones, and the bandwidth
 * limit slows a burst down to its rate. */
#include "../tools/fpctl.h"
#include "daemon.h"
#include "pki.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static td_daemon d;
static char *dir;
static fp_proxy p;

static int setup(void **state)
{
    dir = tp_tempdir("router-fp");
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    td_opts o = {.name = "router-fp", .key_dirs = dir};
    td_start(&d, &o);
    fp_start(&p, "basic", d.port, 50);
    return 0;
}

static int teardown(void **state)
{
    fp_stop(&p);
    int st = td_stop(&d, 0);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

static kl_client *connect_proxy(void)
{
    kl_client_opts o = td_client_opts(&d);
    o.port = p.port;
    kl_client *c = NULL;
    char err[512];
    if (kl_client_connect(&o, &c, err, sizeof err) != KL_OK)
        fail_msg("connect through faultproxy: %s", err);
    return c;
}

static const kl_request_spec ping = {
    .opcode = KL_OP_PING, .payload = (const uint8_t *)"fp", .payload_len = 2};

/* Median round trip of n sequential pings, in ms. */
static double ping_ms(kl_client *c, int n)
{
    double ms[32];
    for (int i = 0; i < n; i++) {
        kl_client_result r;
        double t0 = td_now_ms();
        assert_int_equal(kl_client_call(c, &ping, 5000, &r), KL_OK);
        ms[i] = td_now_ms() - t0;
        assert_int_equal(r.opcode, KL_OP_PONG);
        kl_client_result_free(&r);
    }
    for (int i = 1; i < n; i++) /* insertion sort: n is small */
        for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
            double x = ms[j];
            ms[j] = ms[j - 1];
            ms[j - 1] = x;
        }
    return ms[n / 2];
}

static void test_latency(void **state)
{
    fp_set(&p, "latency_ms=50\n");
    kl_client *c = connect_proxy();
    double rtt = ping_ms(c, 9);
    fprintf(stderr, "50 ms each way: ping round trip %.1f ms\n", rtt);
    assert_true(rtt >= 98.0 && rtt < 130.0);
    /* changed at run time, on the same connection */
    fp_set(&p, "latency_up_ms=5\nlatency_down_ms=15\n");
    rtt = ping_ms(c, 9);
    fprintf(stderr, "5 ms up, 15 ms down: ping round trip %.1f ms\n", rtt);
    assert_true(rtt >= 19.0 && rtt < 45.0);
    fp_set(&p, "latency_ms=0\n");
    rtt = ping_ms(c, 9);
    fprintf(stderr, "no latency: ping round trip %.1f ms\n", rtt);
    assert_true(rtt < 10.0);
    kl_client_close(c);
}

/* Jitter of 0..20 ms per chunk must never reorder bytes: 200 pipelined
 * pings over TLS all come back intact. */
static void test_jitter_keeps_order(void **state)
{
    fp_set(&p, "latency_ms=5\njitter_ms=20\n");
    kl_client *c = connect_proxy();
    for (int i = 0; i < 200; i++) {
        uint32_t id;
        assert_int_equal(kl_client_send(c, &ping, &id), KL_OK);
        assert_int_equal(kl_client_flush(c, 5000), KL_OK);
    }
    for (int i = 0; i < 200; i++) {
        kl_client_result r;
        assert_int_equal(kl_client_recv(c, 5000, &r), KL_OK);
        assert_int_equal(r.opcode, KL_OP_PONG);
        kl_client_result_free(&r);
    }
    kl_client_close(c);
}

static void test_blackhole_and_drop(void **state)
{
    fp_set(&p, "latency_ms=1\n");
    kl_client *c = connect_proxy();
    (void)ping_ms(c, 1);
    fp_stats before = fp_read_stats(&p);
    fp_set(&p, "latency_ms=1\nblackhole=1\n");
    kl_client_result r;
    assert_int_equal(kl_client_call(c, &ping, 300, &r), KL_E_TIMEOUT);
    fp_stats after = fp_read_stats(&p);
    /* the ping left the client and reached no server */
    assert_true(after.blackholed >= 1024);
    assert_true(after.bytes_up == before.bytes_up);
    kl_client_close(c);

    /* drop: an open connection is reset */
    fp_set(&p, "latency_ms=1\n");
    c = connect_proxy();
    (void)ping_ms(c, 1);
    fp_drop(&p);
    kl_status st = kl_client_call(c, &ping, 2000, &r);
    fprintf(stderr, "after drop: %s\n", kl_status_str(st));
    assert_true(st == KL_E_CLOSED || st == KL_E_TLS || st == KL_E_IO);
    kl_client_close(c);

    /* refuse: new connections are closed at once */
    fp_set(&p, "refuse=1\n");
    kl_client_opts o = td_client_opts(&d);
    o.port = p.port;
    o.connect_timeout_ms = 2000;
    char err[256];
    assert_int_not_equal(kl_client_connect(&o, &c, err, sizeof err), KL_OK);
    fp_set(&p, "latency_ms=0\n");
}

/* 100 pipelined 1 KiB pings at 800 kbit/s (100 KB/s, burst ~26 KB) take
 * at least ~0.7 s; without the limit they take milliseconds. */
static void test_bandwidth(void **state)
{
    fp_set(&p, "bandwidth_kbps=800\n");
    kl_client *c = connect_proxy();
    (void)ping_ms(c, 1);
    fp_sleep_ms(300); /* let the bucket refill */
    double t0 = td_now_ms();
    for (int i = 0; i < 100; i++) {
        uint32_t id;
        assert_int_equal(kl_client_send(c, &ping, &id), KL_OK);
    }
    assert_int_equal(kl_client_flush(c, 10000), KL_OK);
    for (int i = 0; i < 100; i++) {
        kl_client_result r;
        assert_int_equal(kl_client_recv(c, 10000, &r), KL_OK);
        kl_client_result_free(&r);
    }
    double ms = td_now_ms() - t0;
    fprintf(stderr, "100 KiB each way at 800 kbit/s: %.0f ms\n", ms);
    assert_true(ms >= 600.0 && ms < 3000.0);
    kl_client_close(c);
    fp_set(&p, "latency_ms=0\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_latency),
        cmocka_unit_test(test_jitter_keeps_order),
        cmocka_unit_test(test_blackhole_and_drop),
        cmocka_unit_test(test_bandwidth),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
