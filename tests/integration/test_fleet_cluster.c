/* SPDX-License-Identifier: Apache-2.0 */
/* The fleet on a three-member etcd cluster (docs/FLEET.md "How it is
 * tested"): a router fed by the directory in front of real keylessd
 * remotes, their records kept by registration; one etcd member killed
 * (SIGKILL) under load, then each of the others in turn with the first
 * back: not one request fails, registration and the directory stay (or
 * come back) in sync within seconds, and a server that joins while a
 * member is down is routed to. */
#include "fleet_common.h"

#include <signal.h>

static te_cluster cluster;
static kl_etcd *cl;
static char *keydir;
static uint8_t ski[20];
static rh_dc a, b;

static int setup(void **state)
{
    (void)state;
    te_start(&cluster, 3, false);
    cl = ec_client(&cluster, 5000);
    keydir = tp_tempdir("fleet-cluster-keys");
    tp_copy_key(keydir, tp_path("keys/ecdsa-p256.key"));
    EVP_PKEY *pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    tp_ski(pub, ski);
    EVP_PKEY_free(pub);
    rh_dc_start(&a, "dca", keydir, 1);
    rh_dc_start(&b, "dcb", keydir, 1);
    fc_publish(cl, "web", ski);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    rh_dc_stop(&a);
    rh_dc_stop(&b);
    tp_rmtree(keydir);
    kl_etcd_free(cl);
    te_stop(&cluster);
    return 0;
}

static void wait_in_sync(kl_rt_fleet_feed *f, int ms)
{
    kl_fleet_dir_status ds;
    double until = td_now_ms() + ms;
    do {
        kl_rt_fleet_feed_status(f, &ds);
        if (ds.in_sync)
            return;
        ec_sleep_ms(20);
    } while (td_now_ms() < until);
    fail_msg("directory not in sync after %d ms", ms);
}

static void test_member_killed(void **state)
{
    (void)state;
    kl_fleet_member *ma = fc_register(&cluster, &a, "us", "web");
    fc_wait_registered(ma);
    kl_rt_fleet_feed *f;
    kl_router *r = fc_router(&cluster, &f);
    double until = td_now_ms() + 3000;
    while (!fc_in_table(r, "dca") && td_now_ms() < until)
        ec_sleep_ms(10);
    assert_true(fc_in_table(r, "dca"));
    rh_wait_measured(r, 1);

    fc_load load;
    fc_load_start(&load, r, ski, -1);
    for (int victim = 0; victim < 3; victim++) {
        te_kill(&cluster, victim, SIGKILL);
        ec_sleep_ms(2500); /* longer than the lease TTL */
        wait_in_sync(f, 8000);
        fc_wait_registered(ma);
        assert_true(fc_in_table(r, "dca"));
        if (victim == 0) { /* a join while a member is down */
            kl_fleet_member *mb = fc_register(&cluster, &b, "us", "web");
            fc_wait_registered(mb);
            until = td_now_ms() + 3000;
            while (!fc_in_table(r, "dcb") && td_now_ms() < until)
                ec_sleep_ms(10);
            assert_true(fc_in_table(r, "dcb"));
            kl_fleet_member_stop(mb);
        }
        te_restart(&cluster, victim);
        fprintf(stderr, "member %d killed and restarted: routing went on\n",
                victim);
    }
    unsigned failed = 0, done = fc_load_stop(&load, &failed);
    fprintf(stderr, "three members killed in turn: %u requests, %u failed\n",
            done, failed);
    assert_true(done > 200);
    assert_int_equal(failed, 0);
    kl_rt_fleet_feed_stop(f);
    kl_router_free(r);
    kl_fleet_member_stop(ma);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_member_killed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
