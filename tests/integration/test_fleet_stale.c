/* SPDX-License-Identifier: Apache-2.0 */
/* The stale-list outage, before and after (docs/FLEET.md "How it is
 * tested"): the same scenario - a pool's two servers replaced one by one
 * under load, each old one killed (SIGKILL) once its replacement runs -
 * with a hand-kept routing table file that nobody updates, and with the
 * fleet directory. Counted for each: requests, failed requests, retries
 * (attempts after the first) and attempt failures. The directory must
 * lose no request; the list ends with every listed server dead, so its
 * requests fail, which is what the test prints for comparison. */
#include "fleet_common.h"

#include <signal.h>

static te_cluster cluster;
static kl_etcd *cl;
static char *dir, *keydir;
static uint8_t ski[20];

static int setup(void **state)
{
    (void)state;
    te_start(&cluster, 1, false);
    cl = ec_client(&cluster, 3000);
    dir = tp_tempdir("fleet-stale");
    keydir = tp_tempdir("fleet-stale-keys");
    tp_copy_key(keydir, tp_path("keys/ecdsa-p256.key"));
    EVP_PKEY *pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    tp_ski(pub, ski);
    EVP_PKEY_free(pub);
    fc_publish(cl, "web", ski);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tp_rmtree(dir);
    tp_rmtree(keydir);
    kl_etcd_free(cl);
    te_stop(&cluster);
    return 0;
}

typedef struct outcome {
    unsigned done, failed;
    uint64_t retries, attempt_failures;
} outcome;

/* Replaces old[0], old[1] by fresh[0], fresh[1] one at a time under load;
 * with members (the directory) the new ones register and the old ones'
 * leases are left to expire. */
static outcome replace_under_load(kl_router *r, rh_dc *old, rh_dc *fresh,
                                  kl_fleet_member **mold,
                                  kl_fleet_member **mfresh, const char *tag)
{
    static const char *names[2][2] = {{"n1", "n2"}, {"m1", "m2"}};
    int set = tag[0] == 'l' ? 0 : 1;
    fc_load load;
    fc_load_start(&load, r, ski, -1);
    ec_sleep_ms(300);
    for (int i = 0; i < 2; i++) {
        rh_dc_start(&fresh[i], names[set][i], keydir, 1);
        if (mold) {
            mfresh[i] = fc_register(&cluster, &fresh[i], "us", "web");
            fc_wait_registered(mfresh[i]);
        }
        ec_sleep_ms(500);
        td_signal(&old[i].d, SIGKILL);
        if (mold)
            kl_fleet_member_abandon(mold[i]); /* as a crash leaves it */
        ec_sleep_ms(FC_TTL_S * 1000 + 1000);
    }
    outcome o = {0};
    o.done = fc_load_stop(&load, &o.failed);
    kl_router_stats st;
    kl_router_get_stats(r, &st);
    o.retries = st.retries;
    kl_remote_stats rs[16];
    size_t n = kl_router_remote_stats(r, rs, 16);
    for (size_t i = 0; i < n && i < 16; i++)
        o.attempt_failures += rs[i].failed;
    fprintf(stderr,
            "%s: %u requests, %u failed, %llu retries, %llu attempts "
            "failed\n",
            tag, o.done, o.failed, (unsigned long long)o.retries,
            (unsigned long long)o.attempt_failures);
    return o;
}

static void test_stale_list_vs_directory(void **state)
{
    (void)state;
    rh_dc old[2], fresh[2];
    /* the hand-kept list: the two servers as they were */
    rh_dc_start(&old[0], "o1", keydir, 1);
    rh_dc_start(&old[1], "o2", keydir, 1);
    char table[1200], text[1024];
    snprintf(table, sizeof table, "%s/routes.yaml", dir);
    snprintf(text, sizeof text,
             "servers:\n"
             "  - {name: o1, address: \"127.0.0.1:%u\", region: us, serves: "
             "[%s]}\n"
             "  - {name: o2, address: \"127.0.0.1:%u\", region: us, serves: "
             "[%s]}\n",
             old[0].p.port, tp_ski_hex(ski), old[1].p.port, tp_ski_hex(ski));
    fp_write_file(table, text);
    kl_router_opts o = rh_opts(table);
    kl_router *r = rh_router(&o);
    rh_wait_measured(r, 2);
    outcome list = replace_under_load(r, old, fresh, NULL, NULL, "list");
    kl_router_free(r);
    for (int i = 0; i < 2; i++) {
        rh_dc_stop(&old[i]);
        rh_dc_stop(&fresh[i]);
    }

    /* the directory: the same, with each server registered */
    rh_dc_start(&old[0], "p1", keydir, 1);
    rh_dc_start(&old[1], "p2", keydir, 1);
    kl_fleet_member *mold[2] = {fc_register(&cluster, &old[0], "us", "web"),
                                fc_register(&cluster, &old[1], "us", "web")};
    fc_wait_registered(mold[0]);
    fc_wait_registered(mold[1]);
    kl_rt_fleet_feed *f;
    r = fc_router(&cluster, &f);
    rh_wait_measured(r, 2);
    kl_fleet_member *mfresh[2];
    outcome d = replace_under_load(r, old, fresh, mold, mfresh, "directory");
    kl_rt_fleet_feed_stop(f);
    kl_fleet_member_stop(mfresh[0]);
    kl_fleet_member_stop(mfresh[1]);
    kl_router_free(r);
    for (int i = 0; i < 2; i++) {
        rh_dc_stop(&old[i]);
        rh_dc_stop(&fresh[i]);
    }

    assert_true(d.done > 200);
    assert_int_equal(d.failed, 0);
    /* the list went stale: once both listed servers were dead, every
     * request failed */
    assert_true(list.failed > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stale_list_vs_directory),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
