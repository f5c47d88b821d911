/* SPDX-License-Identifier: Apache-2.0 */
/* Registration (src/fleet/member.h, docs/FLEET.md "Registration") against
 * a real etcd on loopback: the record appears on a lease and stays while
 * the thread renews it; an update is written; a revoked lease (what an
 * expiry looks like to the server) is followed by a new lease and the
 * record again; etcd killed and restarted: the state says unreachable,
 * then registered, with the record in place; a clean stop removes the
 * record at once; an etcd that never answers does not block start or
 * stop; bad options are refused with the fix named. */
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_common.h"
#include "fleet/member.h"

#define TTL_S 2

static te_cluster cluster;
static kl_etcd *cl;

static int setup(void **state)
{
    (void)state;
    te_start(&cluster, 1, false);
    cl = ec_client(&cluster, 3000);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kl_etcd_free(cl);
    te_stop(&cluster);
    return 0;
}

static void record(kl_fleet_server *s, const char *name)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->region, sizeof s->region, "eu");
    snprintf(s->host, sizeof s->host, "127.0.0.1");
    s->port = 2407;
    s->role = KL_FLEET_ROLE_KEYS;
    s->priority = 100;
    s->started = 1764800000;
    char err[128];
    assert_int_equal(kl_fleet_server_add_set(s, "payments", err, sizeof err),
                     KL_OK);
}

static kl_fleet_member *start(const char *name, const char *const *urls,
                              size_t n)
{
    kl_fleet_server s;
    record(&s, name);
    kl_fleet_member_opts o = {.etcd = {.endpoints = urls, .n_endpoints = n},
                              .prefix = "/t/",
                              .ttl_s = TTL_S,
                              .record = &s};
    kl_fleet_member *m;
    char err[512] = "";
    ec_ok(kl_fleet_member_start(&o, &m, err, sizeof err), err);
    kl_fleet_server_clear(&s);
    return m;
}

static void wait_state(kl_fleet_member *m, kl_fleet_member_state want,
                       int timeout_ms, kl_fleet_member_status *st)
{
    double until = td_now_ms() + timeout_ms;
    do {
        kl_fleet_member_status_get(m, st);
        if (st->state == want)
            return;
        ec_sleep_ms(20);
    } while (td_now_ms() < until);
    fail_msg("member state %s after %d ms, want %s",
             kl_fleet_member_state_name(st->state), timeout_ms,
             kl_fleet_member_state_name(want));
}

/* The record under name as etcd holds it; false when absent. */
static bool read_record(const char *name, kl_fleet_server *s, int64_t *lease)
{
    char key[128], err[512] = "";
    assert_int_equal(kl_fleet_key_server("/t/", name, key, sizeof key), KL_OK);
    kl_etcd_kv kv;
    kl_status st =
        kl_etcd_get(cl, key, strlen(key), &kv, NULL, err, sizeof err);
    if (st == KL_E_NOT_FOUND)
        return false;
    ec_ok(st, err);
    ec_ok(kl_fleet_server_parse(kv.value, kv.value_len, s, err, sizeof err),
          err);
    *lease = kv.lease;
    kl_etcd_kv_clear(&kv);
    return true;
}

static void wait_record(const char *name, bool present, int timeout_ms)
{
    double until = td_now_ms() + timeout_ms;
    kl_fleet_server s;
    int64_t lease;
    for (;;) {
        bool got = read_record(name, &s, &lease);
        if (got)
            kl_fleet_server_clear(&s);
        if (got == present)
            return;
        if (td_now_ms() > until)
            fail_msg("record %s still %s after %d ms", name,
                     present ? "absent" : "present", timeout_ms);
        ec_sleep_ms(20);
    }
}

static void test_register_renew_update_stop(void **state)
{
    (void)state;
    const char *urls[TE_MAX_MEMBERS];
    te_endpoints(&cluster, urls);
    kl_fleet_member *m = start("a-1", urls, 1);
    kl_fleet_member_status st;
    wait_state(m, KL_FLEET_MEMBER_REGISTERED, 3000, &st);
    assert_true(st.lease != 0);
    assert_int_equal(st.registrations, 1);
    kl_fleet_server s;
    int64_t lease = 0;
    assert_true(read_record("a-1", &s, &lease));
    assert_int_equal(lease, st.lease); /* on the lease, so it can expire */
    assert_string_equal(s.region, "eu");
    assert_int_equal(s.nsets, 1);
    kl_fleet_server_clear(&s);

    /* three TTLs later: renewed, the same lease, the record still there */
    ec_sleep_ms(3 * TTL_S * 1000);
    assert_true(read_record("a-1", &s, &lease));
    kl_fleet_server_clear(&s);
    assert_int_equal(lease, st.lease);

    /* an update is written on the same lease */
    record(&s, "a-1");
    s.health = KL_FLEET_HEALTH_DRAINING;
    char err[512] = "";
    ec_ok(kl_fleet_member_update(m, &s, err, sizeof err), err);
    snprintf(s.name, sizeof s.name, "b-2");
    assert_int_equal(kl_fleet_member_update(m, &s, err, sizeof err),
                     KL_E_BAD_VALUE);
    ec_expect(err, "cannot change");
    kl_fleet_server_clear(&s);
    double until = td_now_ms() + 2000;
    kl_fleet_server got = {0};
    do {
        kl_fleet_server_clear(&got);
        assert_true(read_record("a-1", &got, &lease));
    } while (got.health != KL_FLEET_HEALTH_DRAINING && td_now_ms() < until);
    assert_int_equal(got.health, KL_FLEET_HEALTH_DRAINING);
    assert_int_equal(lease, st.lease);
    kl_fleet_server_clear(&got);

    /* a clean stop: the record goes at once, not after the TTL */
    kl_fleet_member_stop(m);
    assert_false(read_record("a-1", &got, &lease));
}

static void test_lease_lost_reregisters(void **state)
{
    (void)state;
    const char *urls[TE_MAX_MEMBERS];
    te_endpoints(&cluster, urls);
    kl_fleet_member *m = start("a-2", urls, 1);
    kl_fleet_member_status st, st2;
    wait_state(m, KL_FLEET_MEMBER_REGISTERED, 3000, &st);
    char err[512] = "";
    /* what an expiry does: the lease and the record are gone */
    ec_ok(kl_etcd_lease_revoke(cl, st.lease, err, sizeof err), err);
    wait_record("a-2", false, 1000);
    /* found at the next renewal (TTL/3), registered again at once */
    wait_record("a-2", true, TTL_S * 1000);
    double until = td_now_ms() + 2000;
    do {
        kl_fleet_member_status_get(m, &st2);
    } while (st2.registrations < 2 && td_now_ms() < until);
    assert_int_equal(st2.registrations, 2);
    assert_int_equal(st2.state, KL_FLEET_MEMBER_REGISTERED);
    assert_true(st2.lease != 0 && st2.lease != st.lease);
    kl_fleet_server s;
    int64_t lease;
    assert_true(read_record("a-2", &s, &lease));
    kl_fleet_server_clear(&s);
    assert_int_equal(lease, st2.lease);
    kl_fleet_member_stop(m);
}

static void test_etcd_outage(void **state)
{
    (void)state;
    const char *urls[TE_MAX_MEMBERS];
    te_endpoints(&cluster, urls);
    kl_fleet_member *m = start("a-3", urls, 1);
    kl_fleet_member_status st;
    wait_state(m, KL_FLEET_MEMBER_REGISTERED, 3000, &st);
    te_kill(&cluster, 0, SIGKILL);
    wait_state(m, KL_FLEET_MEMBER_UNREACHABLE, 3 * TTL_S * 1000, &st);
    /* an update while etcd is away waits for it with the backoff: no
     * busy retry (CPU of this process over the outage stays small) */
    kl_fleet_server up;
    record(&up, "a-3");
    up.health = KL_FLEET_HEALTH_DRAINING;
    char err[512] = "";
    ec_ok(kl_fleet_member_update(m, &up, err, sizeof err), err);
    kl_fleet_server_clear(&up);
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    ec_sleep_ms(2 * TTL_S * 1000); /* longer than the TTL */
    getrusage(RUSAGE_SELF, &r1);
    double cpu_ms = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec +
                             r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) *
                        1000 +
                    (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec +
                             r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) /
                        1000;
    fprintf(stderr, "etcd away %d s with an update pending: %.0f ms CPU\n",
            2 * TTL_S, cpu_ms);
    assert_true(cpu_ms < 300);
    te_restart(&cluster, 0);
    /* back: the lease renewed (etcd extends leases on a new leader) or,
     * if it expired, a new one; the record is there either way */
    wait_state(m, KL_FLEET_MEMBER_REGISTERED, 5000, &st);
    wait_record("a-3", true, 2000);
    kl_fleet_server s;
    int64_t lease;
    double until = td_now_ms() + 2000;
    kl_fleet_health h;
    do { /* the update pending since the outage is written */
        assert_true(read_record("a-3", &s, &lease));
        h = s.health;
        kl_fleet_server_clear(&s);
    } while (h != KL_FLEET_HEALTH_DRAINING && td_now_ms() < until);
    assert_true(read_record("a-3", &s, &lease));
    assert_int_equal(s.health, KL_FLEET_HEALTH_DRAINING);
    kl_fleet_server_clear(&s);
    kl_fleet_member_status_get(m, &st);
    assert_int_equal(lease, st.lease);
    kl_fleet_member_stop(m);
    wait_record("a-3", false, 500);
}

static void test_unreachable_start_and_bad_options(void **state)
{
    (void)state;
    /* nothing listens there: start returns, the thread keeps trying, and
     * stop does not wait for etcd */
    static const char *const dead[] = {"http://127.0.0.1:1"};
    kl_fleet_member *m = start("a-4", dead, 1);
    kl_fleet_member_status st;
    ec_sleep_ms(500);
    kl_fleet_member_status_get(m, &st);
    assert_int_equal(st.state, KL_FLEET_MEMBER_JOINING);
    assert_int_equal(st.lease, 0);
    double t0 = td_now_ms();
    kl_fleet_member_stop(m);
    assert_true(td_now_ms() - t0 < 3000);

    kl_fleet_server s;
    record(&s, "a-5");
    kl_fleet_member_opts o = {.etcd = {.endpoints = dead, .n_endpoints = 1},
                              .prefix = "/t",
                              .record = &s};
    char err[512] = "";
    assert_int_equal(kl_fleet_member_start(&o, &m, err, sizeof err),
                     KL_E_CONFIG);
    ec_expect(err, "must end with '/'");
    o.prefix = NULL;
    snprintf(s.host, sizeof s.host, "bad host");
    assert_int_equal(kl_fleet_member_start(&o, &m, err, sizeof err),
                     KL_E_CONFIG);
    ec_expect(err, "\"host\"");
    snprintf(s.host, sizeof s.host, "h");
    static const char *const bad_url[] = {"ftp://x"};
    o.etcd.endpoints = bad_url;
    assert_int_equal(kl_fleet_member_start(&o, &m, err, sizeof err),
                     KL_E_CONFIG);
    assert_true(err[0] != 0);
    kl_fleet_server_clear(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_renew_update_stop),
        cmocka_unit_test(test_lease_lost_reregisters),
        cmocka_unit_test(test_etcd_outage),
        cmocka_unit_test(test_unreachable_start_and_bad_options),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
