/* SPDX-License-Identifier: Apache-2.0 */
/* Routing from the fleet directory (docs/FLEET.md "Routing from the
 * directory"), with a real etcd and real keylessd remotes on loopback: a
 * router without a table file, fed by the directory's watch; the remotes'
 * records kept by registration (fleet/member.h) in this process on their
 * behalf.
 *
 * - join: a server in a region no one served: the region's requests are
 *   answered within 2 s of its registration;
 * - death: a remote killed (SIGKILL) under load and its lease left to
 *   expire: the router drops it within the TTL (+ 1 s for the watch and
 *   the debounce) and no request fails while another remote serves;
 * - etcd killed under load for 6 s (KL_FLEET_OUTAGE_SECONDS; `make
 *   fleet-outage` runs the 30 s): 0 failed requests, the table kept,
 *   the directory out of sync meanwhile (the sync age grows); etcd back:
 *   in sync, registration renewed, and a change made after is routed. */
#include "fleet_common.h"

#include <signal.h>

static te_cluster cluster;
static kl_etcd *cl;
static char *keydir;
static uint8_t ski[20];
static rh_dc a, b, c;

static int setup(void **state)
{
    (void)state;
    te_start(&cluster, 1, false);
    cl = ec_client(&cluster, 3000);
    keydir = tp_tempdir("fleet-keys");
    tp_copy_key(keydir, tp_path("keys/ecdsa-p256.key"));
    EVP_PKEY *pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    tp_ski(pub, ski);
    EVP_PKEY_free(pub);
    rh_dc_start(&a, "dca", keydir, 1);
    rh_dc_start(&b, "dcb", keydir, 1);
    rh_dc_start(&c, "dcc", keydir, 1);
    fc_publish(cl, "web", ski);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    rh_dc_stop(&a);
    rh_dc_stop(&b);
    rh_dc_stop(&c);
    tp_rmtree(keydir);
    kl_etcd_free(cl);
    te_stop(&cluster);
    return 0;
}

/* One request; its P6 answer. */
static uint8_t one(kl_router *r, int comp)
{
    rh_req q;
    rh_req_make(&q, ski, comp, NULL);
    rh_batch bt;
    rh_batch_init(&bt);
    rh_run(r, &bt, &q, 1, 1);
    for (int e = 0; e < 256; e++)
        if (bt.by_err[e])
            return (uint8_t)e;
    return 0xff;
}

static void test_join_death_outage(void **state)
{
    (void)state;
    kl_rt_fleet_feed *f;
    kl_fleet_member *ma = fc_register(&cluster, &a, "us", "web");
    fc_wait_registered(ma);
    kl_router *r = fc_router(&cluster, &f);
    double until = td_now_ms() + 3000;
    while (!fc_in_table(r, "dca") && td_now_ms() < until)
        ec_sleep_ms(10);
    assert_true(fc_in_table(r, "dca"));
    assert_int_equal(one(r, -1), KL_ERR_NONE);
    /* tag 0x17 byte 1 is fedramp-high: no server there yet */
    assert_int_equal(one(r, 1), KL_ERR_REMOTE_CONFIG);

    /* join */
    kl_fleet_member *mb = fc_register(&cluster, &b, "fedramp-high", "web");
    fc_wait_registered(mb);
    double t0 = td_now_ms(), joined = -1;
    while (td_now_ms() - t0 < 5000) {
        if (one(r, 1) == KL_ERR_NONE) {
            joined = td_now_ms() - t0;
            break;
        }
        ec_sleep_ms(5);
    }
    fprintf(stderr, "join: the region's requests answered after %.0f ms\n",
            joined);
    assert_true(joined >= 0 && joined <= 2000);

    /* death: c joins "us" beside a, then c is killed under load */
    kl_fleet_member *mc = fc_register(&cluster, &c, "us", "web");
    fc_wait_registered(mc);
    until = td_now_ms() + 3000;
    while (!fc_in_table(r, "dcc") && td_now_ms() < until)
        ec_sleep_ms(10);
    rh_wait_measured(r, 3);
    fc_load load;
    fc_load_start(&load, r, ski, -1);
    ec_sleep_ms(300);
    uint64_t sent_c = rh_sent(r, "dcc");
    td_signal(&c.d, SIGKILL);
    kl_fleet_member_abandon(mc); /* its lease runs out, as on a crash */
    t0 = td_now_ms();
    double gone = -1;
    while (td_now_ms() - t0 < 10000) {
        if (!fc_in_table(r, "dcc")) {
            gone = td_now_ms() - t0;
            break;
        }
        ec_sleep_ms(20);
    }
    uint64_t sent_c_gone = rh_sent(r, "dcc");
    ec_sleep_ms(500);
    unsigned failed = 0, done = fc_load_stop(&load, &failed);
    fprintf(stderr,
            "death: dcc dropped %.0f ms after the kill (TTL %d s); %u "
            "requests, %u failed; dcc had %llu attempts before the kill\n",
            gone, FC_TTL_S, done, failed, (unsigned long long)sent_c);
    rh_print_remotes(r);
    assert_true(gone >= 0 && gone <= FC_TTL_S * 1000 + 1000);
    assert_true(done > 100);
    assert_int_equal(failed, 0);
    assert_int_equal(rh_sent(r, "dcc"), sent_c_gone); /* not chosen after */

    /* etcd down under load: 6 s in the suite */
    const char *env = getenv("KL_FLEET_OUTAGE_SECONDS");
    int outage_ms = env && atoi(env) > 0 ? atoi(env) * 1000 : 6000;
    kl_fleet_dir_status ds;
    uint64_t installs = kl_rt_fleet_feed_installs(f);
    fc_load_start(&load, r, ski, -1);
    ec_sleep_ms(200);
    te_kill(&cluster, 0, SIGKILL);
    ec_sleep_ms(outage_ms);
    kl_rt_fleet_feed_status(f, &ds);
    fprintf(stderr, "outage: in sync %d, sync age %llu ms\n", ds.in_sync,
            (unsigned long long)ds.sync_age_ms);
    assert_false(ds.in_sync);
    assert_true(ds.sync_age_ms >= (uint64_t)outage_ms - 2000);
    assert_int_equal(kl_rt_fleet_feed_installs(f), installs); /* kept */
    assert_true(fc_in_table(r, "dca") && fc_in_table(r, "dcb"));
    te_restart(&cluster, 0);
    until = td_now_ms() + 8000;
    do {
        kl_rt_fleet_feed_status(f, &ds);
        if (ds.in_sync)
            break;
        ec_sleep_ms(20);
    } while (td_now_ms() < until);
    assert_true(ds.in_sync);
    fc_wait_registered(ma);
    fc_wait_registered(mb);
    failed = 0;
    done = fc_load_stop(&load, &failed);
    fprintf(stderr, "outage: %u requests, %u failed\n", done, failed);
    assert_true(done > 100);
    assert_int_equal(failed, 0);
    /* the watch resumed: a change after the outage is routed */
    kl_fleet_member_stop(mb); /* revoked: gone at once */
    until = td_now_ms() + 3000;
    while (fc_in_table(r, "dcb") && td_now_ms() < until)
        ec_sleep_ms(10);
    assert_false(fc_in_table(r, "dcb"));
    assert_int_equal(one(r, 1), KL_ERR_REMOTE_CONFIG);
    assert_int_equal(one(r, -1), KL_ERR_NONE);

    kl_rt_fleet_feed_stop(f);
    kl_router_free(r);
    kl_fleet_member_stop(ma);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_join_death_outage),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
