/* SPDX-License-Identifier: Apache-2.0 */
/* The etcd client (src/fleet/etcd.h) with a three-member etcd cluster
 * started by the test: the member the client talks to is killed and the
 * client goes on through the others (calls and the watch, no event lost
 * or repeated); with two members down there is no quorum and calls fail
 * within their timeout; and etcd behind mutual TLS (the test PKI): the
 * right certificates work, a missing client certificate or a wrong CA is
 * a clear TLS failure. docs/DESIGN.md "etcd client (src/fleet)". */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "etcd_common.h"
#include "fleet/etcd_int.h"

static te_cluster cluster;

static int start3(void **state)
{
    (void)state;
    double t0 = td_now_ms();
    te_start(&cluster, 3, false);
    fprintf(stderr, "# three members serving after %.0f ms\n",
            td_now_ms() - t0);
    return 0;
}

static int start_tls(void **state)
{
    (void)state;
    te_start(&cluster, 1, true);
    return 0;
}

static int stop(void **state)
{
    (void)state;
    te_stop(&cluster);
    return 0;
}

static int member_of(const char *url)
{
    for (int i = 0; i < cluster.n; i++)
        if (strcmp(cluster.m[i].url, url) == 0)
            return i;
    fail_msg("endpoint %s is not a member", url);
    return -1;
}

/* The member that leads, from /v3/maintenance/status on each (its
 * header's member_id equals "leader" on the leader). */
static int leader(void)
{
    for (int i = 0; i < cluster.n; i++) {
        if (cluster.m[i].pid <= 0)
            continue;
        const char *url[1] = {cluster.m[i].url};
        kl_etcd_opts o = {.endpoints = url, .n_endpoints = 1};
        kl_etcd *c;
        char err[512] = "", *body;
        size_t len;
        ec_ok(kl_etcd_new(&o, &c, err, sizeof err), err);
        ec_ok(etcd_post(c, "/v3/maintenance/status", "{}", &body, &len, err,
                        sizeof err),
              err);
        json_t *j = json_loadb(body, len, 0, NULL);
        assert_non_null(j);
        const char *me = json_string_value(
            json_object_get(json_object_get(j, "header"), "member_id"));
        const char *lead = json_string_value(json_object_get(j, "leader"));
        bool is = me && lead && strcmp(me, lead) == 0;
        json_decref(j);
        free(body);
        kl_etcd_free(c);
        if (is)
            return i;
    }
    fail_msg("no member leads");
    return -1;
}

static void test_member_killed(void **state)
{
    (void)state;
    char err[512] = "";
    /* the leader first: its death is the harder case (an election) */
    int lead = leader();
    const char *urls[3];
    for (int i = 0; i < 3; i++)
        urls[i] = cluster.m[(lead + i) % 3].url;
    kl_etcd_opts o = {.endpoints = urls, .n_endpoints = 3, .timeout_ms = 3000};
    kl_etcd *c;
    ec_ok(kl_etcd_new(&o, &c, err, sizeof err), err);
    int64_t r1, r2, r3;
    ec_ok(kl_etcd_put(c, "m/1", 3, "a", 1, 0, &r1, err, sizeof err), err);
    kl_etcd_watch *w;
    ec_ok(kl_etcd_watch_new(c, "m/", 2, r1, &w, err, sizeof err), err);
    ec_events ev = {0};
    ec_wait_events(w, &ev, 1, 5000);
    int64_t lease, ttl;
    ec_ok(kl_etcd_lease_grant(c, 30, &lease, NULL, err, sizeof err), err);
    ec_ok(kl_etcd_put(c, "m/leased", 8, "x", 1, lease, NULL, err, sizeof err),
          err);
    ec_wait_events(w, &ev, 2, 5000);

    /* kill the member the client uses (the watch started on it too) */
    int used = member_of(kl_etcd_endpoint(c));
    assert_int_equal(used, lead);
    fprintf(stderr, "# killing the leader %s (%s)\n", cluster.m[used].name,
            cluster.m[used].url);
    te_kill(&cluster, used, SIGKILL);
    /* a follower's death costs nothing; the leader's, an election (1-2 s
     * with etcd's defaults), during which etcd holds writes: the client
     * retries as a caller would, each call bounded by its timeout */
    double t0 = td_now_ms();
    kl_status st;
    int failures = 0;
    while ((st = kl_etcd_put(c, "m/2", 3, "b", 1, 0, &r2, err, sizeof err)) !=
           KL_OK) {
        fprintf(stderr, "# put after the kill: %s\n", err);
        assert_true(++failures < 5 && td_now_ms() - t0 < 15000);
    }
    fprintf(stderr, "# first put after the kill: %.0f ms via %s\n",
            td_now_ms() - t0, kl_etcd_endpoint(c));
    assert_int_not_equal(member_of(kl_etcd_endpoint(c)), used);
    kl_etcd_kv kv;
    ec_ok(kl_etcd_get(c, "m/1", 3, &kv, NULL, err, sizeof err), err);
    kl_etcd_kv_clear(&kv);
    ec_ok(kl_etcd_lease_keepalive(c, lease, &ttl, err, sizeof err), err);
    assert_true(ttl > 0);
    kl_etcd_page p;
    ec_ok(kl_etcd_range(c, "m/", 2, NULL, 0, 0, 0, &p, err, sizeof err), err);
    assert_int_equal(p.n, 3);
    kl_etcd_page_clear(&p);
    /* the watch moves to another member and resumes after m/leased; a
     * put that timed out during the election may have been applied too
     * (etcd held it), so m/2 may come twice, in revision order */
    ec_wait_rev(w, &ev, r2, 10000);
    ec_check(&ev, 0, KL_ETCD_PUT, "m/1", "a", r1);
    ec_check(&ev, ev.n - 1, KL_ETCD_PUT, "m/2", "b", r2);
    ec_check_order(&ev);
    assert_true(ev.n == 3 || ev.n == 4);
    assert_true(kl_etcd_watch_connected(w));

    /* a new client whose first endpoint is the dead one */
    kl_etcd *c2;
    ec_ok(kl_etcd_new(&o, &c2, err, sizeof err), err);
    ec_ok(kl_etcd_get(c2, "m/2", 3, &kv, NULL, err, sizeof err), err);
    kl_etcd_kv_clear(&kv);
    kl_etcd_free(c2);

    /* a second member down: no quorum; calls fail within the timeout */
    int other = (used + 1) % 3;
    if (member_of(kl_etcd_endpoint(c)) == other)
        other = (used + 2) % 3;
    te_kill(&cluster, other, SIGKILL);
    t0 = td_now_ms();
    st = kl_etcd_put(c, "m/3", 3, "c", 1, 0, NULL, err, sizeof err);
    double took = td_now_ms() - t0;
    fprintf(stderr, "# no quorum: %.0f ms, status %d: %s\n", took, st, err);
    assert_int_not_equal(st, KL_OK);
    assert_true(took < 3000 + 1000);

    /* both back: the client and the watch carry on */
    te_restart(&cluster, used);
    te_restart(&cluster, other);
    double until = td_now_ms() + 10000;
    while ((st = kl_etcd_put(c, "m/3", 3, "c", 1, 0, &r3, err, sizeof err)) !=
               KL_OK &&
           td_now_ms() < until)
        ec_sleep_ms(100);
    ec_ok(st, err);
    /* the put that failed for want of quorum may have been applied once
     * the members came back: the watch sees m/3 once or twice */
    ec_wait_rev(w, &ev, r3, 10000);
    ec_check(&ev, ev.n - 1, KL_ETCD_PUT, "m/3", "c", r3);
    ec_check_order(&ev);
    kl_etcd_watch_free(w);
    kl_etcd_free(c);
}

static void test_mutual_tls(void **state)
{
    (void)state;
    char err[512] = "";
    kl_etcd *c = ec_client(&cluster, 3000);
    int64_t r;
    ec_ok(kl_etcd_put(c, "t/1", 3, "tls", 3, 0, &r, err, sizeof err), err);
    kl_etcd_kv kv;
    ec_ok(kl_etcd_get(c, "t/1", 3, &kv, NULL, err, sizeof err), err);
    assert_string_equal((const char *)kv.value, "tls");
    kl_etcd_kv_clear(&kv);
    kl_etcd_watch *w;
    ec_ok(kl_etcd_watch_new(c, "t/", 2, r, &w, err, sizeof err), err);
    ec_events ev = {0};
    ec_wait_events(w, &ev, 1, 5000);
    ec_check(&ev, 0, KL_ETCD_PUT, "t/1", "tls", r);
    kl_etcd_watch_free(w);
    kl_etcd_free(c);

    /* no client certificate: etcd refuses the connection */
    const char *urls[1] = {cluster.m[0].url};
    kl_etcd_opts o = {.endpoints = urls,
                      .n_endpoints = 1,
                      .timeout_ms = 3000,
                      .ca_file = tp_path("ca.crt")};
    ec_ok(kl_etcd_new(&o, &c, err, sizeof err), err);
    kl_status st = kl_etcd_get(c, "t/1", 3, &kv, NULL, err, sizeof err);
    fprintf(stderr, "# no client certificate: %s\n", err);
    ec_status(st, KL_E_TLS, err);
    ec_expect(err, "bad certificate");
    kl_etcd_free(c);
    /* a CA that did not sign etcd's certificate */
    o.ca_file = tp_path("other-ca.crt");
    o.cert_file = tp_path("client.crt");
    o.key_file = tp_path("client.key");
    ec_ok(kl_etcd_new(&o, &c, err, sizeof err), err);
    st = kl_etcd_get(c, "t/1", 3, &kv, NULL, err, sizeof err);
    fprintf(stderr, "# wrong CA: %s\n", err);
    ec_status(st, KL_E_TLS, err);
    ec_expect(err, "TLS failed");
    kl_etcd_free(c);
    /* options that cannot work are refused up front */
    o.key_file = NULL;
    assert_int_equal(kl_etcd_new(&o, &c, err, sizeof err), KL_E_CONFIG);
    o.key_file = "/nonexistent/key.pem";
    assert_int_equal(kl_etcd_new(&o, &c, err, sizeof err), KL_E_CONFIG);
    ec_expect(err, "/nonexistent/key.pem");
    urls[0] = "127.0.0.1:2379";
    o.key_file = tp_path("client.key");
    assert_int_equal(kl_etcd_new(&o, &c, err, sizeof err), KL_E_CONFIG);
    ec_expect(err, "not an http:// or https:// URL");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_member_killed, start3, stop),
        cmocka_unit_test_setup_teardown(test_mutual_tls, start_tls, stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
