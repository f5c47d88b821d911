/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP endpoint over a real socket on 127.0.0.1: /metrics, /health,
 * /ready (both answers), 404, 405, HEAD, and start-up errors. */
#include "testutil.h"

#include <stdatomic.h>

#include "mhttp.h"
#include "mtest.h"

typedef struct readiness {
    atomic_bool ready;
} readiness;

static bool ready_fn(void *arg, char *reason, size_t len)
{
    readiness *r = arg;
    if (atomic_load(&r->ready))
        return true;
    snprintf(reason, len, "keys not loaded");
    return false;
}

static kl_metrics_http *start(kl_metrics *m, readiness *r)
{
    char err[256] = "";
    kl_metrics_http_opts o = {"127.0.0.1", 0, ready_fn, r, NULL, NULL};
    kl_metrics_http *h = kl_metrics_http_start(m, &o, err, sizeof err);
    if (!h)
        fail_msg("start: %s", err);
    assert_true(kl_metrics_http_port(h) != 0);
    return h;
}

static void test_endpoints(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    kl_metrics_local *l = kl_metrics_local_new(m, 0);
    kl_metrics_request(l, 0x15);
    kl_metrics_request(l, 0x15);
    readiness r = {false};
    kl_metrics_http *h = start(m, &r);
    uint16_t port = kl_metrics_http_port(h);
    mh_reply rep;

    assert_int_equal(mh_request(port, "GET", "/metrics", NULL, &rep), 0);
    assert_int_equal(rep.status, 200);
    assert_non_null(strstr(rep.head, "text/plain; version=0.0.4"));
    mt_assert_line(rep.body,
                   "keyless_requests{opcode=\"OpECDSASignSHA256\"} 2");
    mt_assert_line(rep.body, "# TYPE process_open_fds gauge");
    mh_free(&rep);

    assert_int_equal(mh_request(port, "GET", "/health", NULL, &rep), 0);
    assert_int_equal(rep.status, 200);
    assert_string_equal(rep.body, "ok\n");
    mh_free(&rep);

    assert_int_equal(mh_request(port, "GET", "/ready", NULL, &rep), 0);
    assert_int_equal(rep.status, 503);
    assert_string_equal(rep.body, "keys not loaded\n");
    mh_free(&rep);
    atomic_store(&r.ready, true);
    assert_int_equal(mh_request(port, "GET", "/ready", NULL, &rep), 0);
    assert_int_equal(rep.status, 200);
    assert_string_equal(rep.body, "ready\n");
    mh_free(&rep);

    assert_int_equal(mh_request(port, "GET", "/nope", NULL, &rep), 0);
    assert_int_equal(rep.status, 404);
    mh_free(&rep);
    assert_int_equal(mh_request(port, "GET", "/metrics/x", NULL, &rep), 0);
    assert_int_equal(rep.status, 404);
    mh_free(&rep);

    assert_int_equal(mh_request(port, "POST", "/metrics", "a=b", &rep), 0);
    assert_int_equal(rep.status, 405);
    assert_non_null(strstr(rep.head, "Allow: GET, HEAD"));
    mh_free(&rep);
    assert_int_equal(mh_request(port, "DELETE", "/health", NULL, &rep), 0);
    assert_int_equal(rep.status, 405);
    mh_free(&rep);

    /* HEAD: the GET's status, no body. */
    assert_int_equal(mh_request(port, "HEAD", "/health", NULL, &rep), 0);
    assert_int_equal(rep.status, 200);
    assert_int_equal(rep.body_len, 0);
    mh_free(&rep);

    /* Values move between scrapes: nothing is cached. */
    kl_metrics_request(l, 0x15);
    assert_int_equal(mh_request(port, "GET", "/metrics", NULL, &rep), 0);
    mt_assert_line(rep.body,
                   "keyless_requests{opcode=\"OpECDSASignSHA256\"} 3");
    mh_free(&rep);

    kl_metrics_http_stop(h);
    /* Stopped: the port no longer answers. */
    assert_int_equal(mh_request(port, "GET", "/health", NULL, &rep), -1);
    kl_metrics_free(m);
}

static void test_no_ready_callback(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    char err[256];
    kl_metrics_http_opts o = {"127.0.0.1", 0, NULL, NULL, NULL, NULL};
    kl_metrics_http *h = kl_metrics_http_start(m, &o, err, sizeof err);
    assert_non_null(h);
    mh_reply rep;
    assert_int_equal(
        mh_request(kl_metrics_http_port(h), "GET", "/ready", NULL, &rep), 0);
    assert_int_equal(rep.status, 200);
    mh_free(&rep);
    kl_metrics_http_stop(h);
    kl_metrics_free(m);
}

static void test_start_errors(void **state)
{
    (void)state;
    kl_metrics *m = kl_metrics_new();
    char err[256] = "";
    kl_metrics_http_opts bad = {"localhost", 0, NULL, NULL, NULL, NULL};
    assert_null(kl_metrics_http_start(m, &bad, err, sizeof err));
    assert_non_null(strstr(err, "\"localhost\""));

    /* The port is taken: the error names the address and port. */
    readiness r = {true};
    kl_metrics_http *h = start(m, &r);
    kl_metrics_http_opts dup = {
        "127.0.0.1", kl_metrics_http_port(h), NULL, NULL, NULL, NULL};
    err[0] = '\0';
    assert_null(kl_metrics_http_start(m, &dup, err, sizeof err));
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1 port %u", kl_metrics_http_port(h));
    if (!strstr(err, want))
        fail_msg("error \"%s\" does not name %s", err, want);
    kl_metrics_http_stop(h);
    kl_metrics_http_stop(NULL);
    kl_metrics_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_endpoints),
        cmocka_unit_test(test_no_ready_callback),
        cmocka_unit_test(test_start_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
