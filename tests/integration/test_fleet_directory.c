/* SPDX-License-Identifier: Apache-2.0 */
/* The fleet directory's reader (src/fleet/directory.h) against a real etcd
 * on loopback, through the views it hands over:
 * - the first view is the whole directory; a change comes as one view
 *   after the debounce; a burst of changes as few views;
 * - a record that does not parse is skipped, the rest still comes; a set
 *   generation whose chunks do not match its meta keeps the previous one;
 * - compaction past the watch's revision (the watch cut off while its
 *   thread was busy, changes made and compacted meanwhile): a full
 *   re-read, and the view has every change, none lost;
 * - a directory emptied of servers is not handed over once it had some;
 * - etcd frozen (SIGSTOP: its connections stay open, the watch does not
 *   end): out of sync within the liveness read's period and timeout,
 *   in sync again after SIGCONT, and a change made then arrives;
 * - etcd replaced by an empty store (its revision back to 1): the empty
 *   directory is not handed over, and the new store's changes arrive. */
#include <pthread.h>
#include <signal.h>

#include "etcd_common.h"
#include "fleet/directory.h"
#include "fleet/publish.h"

#define PFX "/dir-test/"

static te_cluster cluster;
static kl_etcd *cl;

/* What the last view held, and a gate that holds the directory's thread
 * inside the callback. */
typedef struct rec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool hold, held;
    unsigned views;
    char servers[512]; /* names, space-separated */
    size_t nservers;
    int64_t set_gen, set_keys;
    uint8_t first_ski[20];
    char code2[KL_FLEET_NAME_MAX + 1]; /* dir/regions' byte 2 */
} rec;

static rec R = {.mu = PTHREAD_MUTEX_INITIALIZER,
                .cv = PTHREAD_COND_INITIALIZER};

static void on_view(void *arg, const kl_fleet_view *v)
{
    (void)arg;
    pthread_mutex_lock(&R.mu);
    R.views++;
    R.servers[0] = 0;
    for (size_t i = 0; i < v->nservers; i++)
        snprintf(R.servers + strlen(R.servers),
                 sizeof R.servers - strlen(R.servers), "%s%s", i ? " " : "",
                 v->servers[i].name);
    R.nservers = v->nservers;
    R.set_gen = v->nsets ? v->sets[0].meta.generation : 0;
    R.set_keys = v->nsets ? v->sets[0].meta.keys : 0;
    if (v->nsets && v->sets[0].meta.keys)
        memcpy(R.first_ski, v->sets[0].skis, 20);
    snprintf(R.code2, sizeof R.code2, "%s",
             v->regions ? v->regions->name[2] : "");
    R.held = R.hold;
    pthread_cond_broadcast(&R.cv);
    while (R.hold)
        pthread_cond_wait(&R.cv, &R.mu);
    R.held = false;
    pthread_mutex_unlock(&R.mu);
}

/* Waits until the last view's servers are want. */
static void wait_servers(const char *want, int timeout_ms)
{
    double until = td_now_ms() + timeout_ms;
    pthread_mutex_lock(&R.mu);
    while (strcmp(R.servers, want) != 0 && td_now_ms() < until) {
        pthread_mutex_unlock(&R.mu);
        ec_sleep_ms(10);
        pthread_mutex_lock(&R.mu);
    }
    if (strcmp(R.servers, want) != 0)
        fail_msg("view has servers \"%s\", want \"%s\"", R.servers, want);
    pthread_mutex_unlock(&R.mu);
}

static void put_server(const char *name)
{
    char key[128], val[256], err[512] = "";
    assert_int_equal(kl_fleet_key_server(PFX, name, key, sizeof key), KL_OK);
    snprintf(val, sizeof val,
             "{\"v\":1,\"name\":\"%s\",\"region\":\"eu\",\"host\":"
             "\"127.0.0.1\",\"port\":2407,\"role\":\"keys\",\"sets\":[\"s\"]}",
             name);
    ec_ok(kl_etcd_put(cl, key, strlen(key), val, strlen(val), 0, NULL, err,
                      sizeof err),
          err);
}

static void del_key(const char *name)
{
    char key[128], err[512] = "";
    assert_int_equal(kl_fleet_key_server(PFX, name, key, sizeof key), KL_OK);
    ec_ok(kl_etcd_delete(cl, key, strlen(key), false, NULL, NULL, err,
                         sizeof err),
          err);
}

static void publish(size_t n, uint8_t first)
{
    uint8_t *skis = calloc(n, 20);
    for (size_t i = 0; i < n; i++) {
        skis[i * 20] = first;
        skis[i * 20 + 1] = (uint8_t)(i >> 8);
        skis[i * 20 + 2] = (uint8_t)i;
    }
    kl_fleet_publish p = {
        .prefix = PFX, .set = "s", .skis = skis, .n = n, .chunk_skis = 100};
    kl_fleet_publish_result res;
    char err[512] = "";
    ec_ok(kl_fleet_publish_set(cl, &p, &res, err, sizeof err), err);
    free(skis);
}

static kl_fleet_dir *start_dir(void)
{
    const char *urls[TE_MAX_MEMBERS];
    te_endpoints(&cluster, urls);
    kl_fleet_dir_opts o = {.etcd = {.endpoints = urls, .n_endpoints = 1},
                           .prefix = PFX,
                           .sync_check_ms = 300,
                           .fn = on_view};
    kl_fleet_dir *d;
    char err[512] = "";
    ec_ok(kl_fleet_dir_start(&o, &d, err, sizeof err), err);
    return d;
}

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

/* R.code2 read under the lock (the directory's thread writes it) */
static bool code2_is(const char *want)
{
    pthread_mutex_lock(&R.mu);
    bool same = strcmp(R.code2, want) == 0;
    pthread_mutex_unlock(&R.mu);
    return same;
}

static void test_views(void **state)
{
    (void)state;
    publish(250, 0x10);
    put_server("a");
    put_server("b");
    kl_fleet_dir *d = start_dir();
    wait_servers("a b", 3000);
    assert_int_equal(R.set_gen, 1);
    assert_int_equal(R.set_keys, 250);
    assert_int_equal(R.first_ski[0], 0x10);

    /* a burst of ten changes: the debounce makes few views of it */
    unsigned before = R.views;
    char name[16];
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "n%d", i);
        put_server(name);
    }
    wait_servers("a b n0 n1 n2 n3 n4 n5 n6 n7 n8 n9", 3000);
    ec_sleep_ms(300);
    fprintf(stderr, "ten changes: %u views\n", R.views - before);
    assert_true(R.views - before <= 3);
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "n%d", i);
        del_key(name);
    }
    wait_servers("a b", 3000);

    /* region codes: taken; a bad version keeps them; deleted: gone */
    char rkey[128];
    assert_int_equal(kl_fleet_key_regions(PFX, rkey, sizeof rkey), KL_OK);
    static const char codes[] = "{\"v\":1,\"codes\":{\"2\":\"eu\"}}";
    char e1[512] = "";
    ec_ok(kl_etcd_put(cl, rkey, strlen(rkey), codes, sizeof codes - 1, 0, NULL,
                      e1, sizeof e1),
          e1);
    double until = td_now_ms() + 3000;
    while (!code2_is("eu") && td_now_ms() < until)
        ec_sleep_ms(10);
    assert_true(code2_is("eu"));
    static const char bad_codes[] = "{\"v\":1,\"codes\":{\"0\":1}}";
    ec_ok(kl_etcd_put(cl, rkey, strlen(rkey), bad_codes, sizeof bad_codes - 1,
                      0, NULL, e1, sizeof e1),
          e1);
    put_server("r");
    wait_servers("a b r", 3000);
    assert_true(code2_is("eu"));
    ec_ok(kl_etcd_delete(cl, rkey, strlen(rkey), false, NULL, NULL, e1,
                         sizeof e1),
          e1);
    del_key("r");
    wait_servers("a b", 3000);
    assert_true(code2_is(""));

    /* a record that does not parse: skipped, the others stay */
    char key[128], err[512] = "";
    assert_int_equal(kl_fleet_key_server(PFX, "bad", key, sizeof key), KL_OK);
    ec_ok(kl_etcd_put(cl, key, strlen(key), "{\"v\":1,\"name\":\"bad\"}", 20, 0,
                      NULL, err, sizeof err),
          err);
    put_server("c");
    wait_servers("a b c", 3000);
    del_key("bad");

    /* a generation whose chunks do not match: the previous one stays */
    assert_int_equal(kl_fleet_key_set(PFX, "s", key, sizeof key), KL_OK);
    static const char lie[] =
        "{\"v\":1,\"generation\":9,\"keys\":5,\"chunk_skis\":100,\"chunks\":1,"
        "\"sha256\":\"00000000000000000000000000000000000000000000000000000000"
        "00000000\"}";
    ec_ok(kl_etcd_put(cl, key, strlen(key), lie, sizeof lie - 1, 0, NULL, err,
                      sizeof err),
          err);
    del_key("c");
    wait_servers("a b", 3000);
    assert_int_equal(R.set_gen, 1);
    assert_int_equal(R.set_keys, 250);
    kl_fleet_dir_stop(d);
}

static void test_compaction_and_empty(void **state)
{
    (void)state;
    pthread_mutex_lock(&R.mu);
    R.servers[0] = 0;
    R.views = 0;
    pthread_mutex_unlock(&R.mu);
    kl_fleet_dir *d = start_dir();
    wait_servers("a b", 3000);
    assert_int_equal(R.views, 1);
    assert_int_equal(R.set_keys, 0); /* generation 9 refused, none before */
    kl_fleet_dir_status st0;
    kl_fleet_dir_status_get(d, &st0);

    /* hold the thread inside its next view */
    pthread_mutex_lock(&R.mu);
    R.hold = true;
    pthread_mutex_unlock(&R.mu);
    put_server("x");
    pthread_mutex_lock(&R.mu);
    while (!R.held)
        pthread_cond_wait(&R.cv, &R.mu);
    pthread_mutex_unlock(&R.mu);
    /* its watch cut off; changes made, then compacted away */
    te_kill(&cluster, 0, SIGKILL);
    te_restart(&cluster, 0);
    kl_etcd_free(cl);
    cl = ec_client(&cluster, 3000);
    put_server("y");
    del_key("x");
    del_key("a");
    publish(40, 0x20);
    int64_t rev = 0;
    char err[512] = "";
    kl_etcd_kv kv;
    if (kl_etcd_get(cl, "/", 1, &kv, &rev, err, sizeof err) == KL_OK)
        kl_etcd_kv_clear(&kv);
    ec_ok(kl_etcd_compact(cl, rev, err, sizeof err), err);
    pthread_mutex_lock(&R.mu);
    R.hold = false;
    pthread_cond_broadcast(&R.cv);
    pthread_mutex_unlock(&R.mu);

    wait_servers("b y", 8000);
    /* the refused generation 9 of test_views was current in etcd */
    assert_int_equal(R.set_gen, 10);
    assert_int_equal(R.set_keys, 40);
    assert_int_equal(R.first_ski[0], 0x20);
    kl_fleet_dir_status st;
    kl_fleet_dir_status_get(d, &st);
    fprintf(stderr, "snapshots %llu -> %llu, revision %lld\n",
            (unsigned long long)st0.snapshots, (unsigned long long)st.snapshots,
            (long long)st.revision);
    assert_int_equal(st0.snapshots, 1);
    assert_true(st.snapshots >= 2); /* the full re-read */
    assert_true(st.revision >= rev);

    /* emptied: not handed over */
    unsigned views = R.views;
    del_key("b");
    del_key("y");
    ec_sleep_ms(800);
    assert_int_equal(R.views, views);
    assert_string_equal(R.servers, "b y");
    put_server("z");
    wait_servers("z", 3000);
    kl_fleet_dir_stop(d);
}

static void wait_sync(kl_fleet_dir *d, bool want, int ms, double *took)
{
    double t0 = td_now_ms();
    kl_fleet_dir_status st;
    do {
        kl_fleet_dir_status_get(d, &st);
        if (st.in_sync == want) {
            *took = td_now_ms() - t0;
            return;
        }
        ec_sleep_ms(20);
    } while (td_now_ms() - t0 < ms);
    fail_msg("directory in_sync still %d after %d ms", st.in_sync, ms);
}

static void test_frozen_etcd(void **state)
{
    (void)state;
    kl_fleet_dir *d = start_dir();
    wait_servers("z", 3000);
    double took;
    wait_sync(d, true, 3000, &took);
    kill(cluster.m[0].pid, SIGSTOP);
    /* a read every 300 ms, each bounded by the client's 3 s timeout */
    wait_sync(d, false, 6000, &took);
    fprintf(stderr, "etcd frozen: out of sync after %.0f ms\n", took);
    kl_fleet_dir_status st;
    kl_fleet_dir_status_get(d, &st);
    assert_true(st.sync_age_ms > 0);
    kill(cluster.m[0].pid, SIGCONT);
    wait_sync(d, true, 8000, &took);
    fprintf(stderr, "etcd thawed: in sync after %.0f ms\n", took);
    put_server("w");
    wait_servers("w z", 3000);

    /* etcd replaced by an empty one on the same address (revision back
     * to 1): the empty directory is not handed over, and what is written
     * to the new store is seen - not waited for at the old revision */
    te_kill(&cluster, 0, SIGKILL);
    char data[1200];
    snprintf(data, sizeof data, "%s/%s.data", cluster.dir, cluster.m[0].name);
    tp_rmtree(strdup(data)); /* it frees the path */
    te_restart(&cluster, 0);
    kl_etcd_free(cl);
    cl = ec_client(&cluster, 3000);
    ec_sleep_ms(1000);
    assert_string_equal(R.servers, "w z");
    put_server("fresh");
    wait_servers("fresh", 5000);
    kl_fleet_dir_stop(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_views),
        cmocka_unit_test(test_compaction_and_empty),
        cmocka_unit_test(test_frozen_etcd),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
