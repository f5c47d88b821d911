/* SPDX-License-Identifier: Apache-2.0 */
/* The etcd client (src/fleet/etcd.h) against a real etcd started on
 * loopback by the test (tests/support/etcdproc.h): binary keys and values,
 * paging over a few thousand keys at one revision, delete, leases (TTL,
 * keepalive, expiry, revoke), the watch (order, resume after the client
 * dropped, compaction), and etcd down then back: calls fail within their
 * timeout with a clear error and work again, the watch resumes without
 * losing or repeating an event. docs/DESIGN.md "etcd client (src/fleet)". */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon.h"
#include "etcdproc.h"
#include "fleet/etcd.h"
#include "testutil.h"

#include "etcd_common.h"

static te_cluster cluster;
static kl_etcd *cl;

static int setup(void **state)
{
    (void)state;
    te_start(&cluster, 1, false);
    cl = ec_client(&cluster, 2000);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kl_etcd_free(cl);
    cl = NULL;
    te_stop(&cluster);
    return 0;
}

static void test_put_get_binary(void **state)
{
    (void)state;
    char err[512] = "";
    static const uint8_t key[] = {'b', 0, 0xff, '\n', '"'};
    uint8_t val[1000];
    for (size_t i = 0; i < sizeof val; i++)
        val[i] = (uint8_t)(i * 7);
    int64_t r1, r2, rg;
    ec_ok(kl_etcd_put(cl, key, sizeof key, val, sizeof val, 0, &r1, err,
                      sizeof err),
          err);
    ec_ok(kl_etcd_put(cl, key, sizeof key, "", 0, 0, &r2, err, sizeof err),
          err);
    assert_true(r1 > 0 && r2 == r1 + 1);
    kl_etcd_kv kv;
    ec_ok(kl_etcd_get(cl, key, sizeof key, &kv, &rg, err, sizeof err), err);
    assert_int_equal(kv.key_len, sizeof key);
    assert_memory_equal(kv.key, key, sizeof key);
    assert_int_equal(kv.value_len, 0); /* an empty value is still a key */
    assert_int_equal(kv.mod_revision, r2);
    assert_int_equal(kv.create_revision, r1);
    assert_int_equal(kv.version, 2);
    assert_int_equal(rg, r2);
    kl_etcd_kv_clear(&kv);
    ec_ok(kl_etcd_put(cl, key, sizeof key, val, sizeof val, 0, NULL, err,
                      sizeof err),
          err);
    ec_ok(kl_etcd_get(cl, key, sizeof key, &kv, NULL, err, sizeof err), err);
    assert_int_equal(kv.value_len, sizeof val);
    assert_memory_equal(kv.value, val, sizeof val);
    kl_etcd_kv_clear(&kv);

    /* absent: not found, with the revision read at */
    assert_int_equal(kl_etcd_get(cl, "absent", 6, &kv, &rg, err, sizeof err),
                     KL_E_NOT_FOUND);
    assert_true(rg >= r2);
    /* too large for a request: refused here, before etcd */
    size_t big = KL_ETCD_MAX_VALUE + 1;
    uint8_t *b = calloc(1, big);
    assert_non_null(b);
    assert_int_equal(kl_etcd_put(cl, "k", 1, b, big, 0, NULL, err, sizeof err),
                     KL_E_TOO_LARGE);
    ec_expect(err, "more than");
    /* the largest value etcd takes by default goes through */
    ec_ok(kl_etcd_put(cl, "big", 3, b, KL_ETCD_MAX_VALUE - 3, 0, NULL, err,
                      sizeof err),
          err);
    free(b);
    assert_int_equal(kl_etcd_put(cl, "", 0, "v", 1, 0, NULL, err, sizeof err),
                     KL_E_BAD_VALUE);
}

#define NKEYS 2000

static void test_range_paging(void **state)
{
    (void)state;
    char err[512] = "";
    double t0 = td_now_ms();
    /* neighbours that a prefix must not catch */
    ec_ok(kl_etcd_put(cl, "pag", 3, "x", 1, 0, NULL, err, sizeof err), err);
    ec_ok(kl_etcd_put(cl, "pagf", 4, "x", 1, 0, NULL, err, sizeof err), err);
    for (int i = 0; i < NKEYS; i++) {
        char k[32], v[32];
        int kl = snprintf(k, sizeof k, "page/%05d", i);
        int vl = snprintf(v, sizeof v, "value-%d", i * 3);
        ec_ok(kl_etcd_put(cl, k, (size_t)kl, v, (size_t)vl, 0, NULL, err,
                          sizeof err),
              err);
    }
    fprintf(stderr, "# %d puts in %.0f ms\n", NKEYS, td_now_ms() - t0);

    /* pages of 300 at the first page's revision; a key written between
     * two pages is not in the snapshot */
    int seen = 0, pages = 0;
    int64_t at = 0;
    char last[32] = "";
    size_t last_len = 0;
    for (;;) {
        kl_etcd_page p;
        ec_ok(kl_etcd_range(cl, "page/", 5, seen ? last : NULL, last_len, 300,
                            at, &p, err, sizeof err),
              err);
        if (pages == 0) {
            at = p.revision;
            assert_int_equal(p.count, NKEYS);
            ec_ok(kl_etcd_put(cl, "page/00000x", 11, "late", 4, 0, NULL, err,
                              sizeof err),
                  err);
        }
        pages++;
        assert_true(p.revision >= at); /* the store's, not the page's */
        for (size_t i = 0; i < p.n; i++) {
            char want[32];
            snprintf(want, sizeof want, "page/%05d", seen);
            assert_int_equal(p.kvs[i].key_len, strlen(want));
            assert_memory_equal(p.kvs[i].key, want, strlen(want));
            char wv[32];
            snprintf(wv, sizeof wv, "value-%d", seen * 3);
            assert_string_equal((const char *)p.kvs[i].value, wv);
            seen++;
        }
        if (p.n) {
            last_len = p.kvs[p.n - 1].key_len;
            memcpy(last, p.kvs[p.n - 1].key, last_len);
        }
        bool more = p.more;
        kl_etcd_page_clear(&p);
        if (!more)
            break;
        assert_true(pages < 100);
    }
    assert_int_equal(seen, NKEYS);
    assert_int_equal(pages, (NKEYS + 299) / 300);

    /* at the latest revision the late key is there; limit 0: all */
    kl_etcd_page p;
    ec_ok(kl_etcd_range(cl, "page/", 5, NULL, 0, 0, 0, &p, err, sizeof err),
          err);
    assert_int_equal(p.n, NKEYS + 1);
    assert_false(p.more);
    assert_memory_equal(p.kvs[1].key, "page/00000x", 11);
    kl_etcd_page_clear(&p);

    /* an answer over max_response is refused, not read */
    kl_etcd *small = ec_client_max(&cluster, 2000, 4096);
    assert_int_equal(
        kl_etcd_range(small, "page/", 5, NULL, 0, 0, 0, &p, err, sizeof err),
        KL_E_TOO_LARGE);
    ec_expect(err, "larger than 4096 bytes");
    /* ... and the client goes on working after it */
    ec_ok(kl_etcd_range(small, "page/", 5, NULL, 0, 5, 0, &p, err, sizeof err),
          err);
    assert_int_equal(p.n, 5);
    assert_true(p.more);
    kl_etcd_page_clear(&p);
    kl_etcd_free(small);

    /* the empty prefix: every key */
    ec_ok(kl_etcd_range(cl, "", 0, NULL, 0, 3, 0, &p, err, sizeof err), err);
    assert_int_equal(p.n, 3);
    assert_true(p.count >= NKEYS + 3);
    kl_etcd_page_clear(&p);
}

static void test_delete(void **state)
{
    (void)state;
    char err[512] = "";
    for (int i = 0; i < 10; i++) {
        char k[16];
        int n = snprintf(k, sizeof k, "del/%d", i);
        ec_ok(kl_etcd_put(cl, k, (size_t)n, "v", 1, 0, NULL, err, sizeof err),
              err);
    }
    ec_ok(kl_etcd_put(cl, "dem", 3, "v", 1, 0, NULL, err, sizeof err), err);
    int64_t deleted, rev;
    ec_ok(
        kl_etcd_delete(cl, "del/3", 5, false, &deleted, &rev, err, sizeof err),
        err);
    assert_int_equal(deleted, 1);
    assert_true(rev > 0);
    kl_etcd_kv kv;
    assert_int_equal(kl_etcd_get(cl, "del/3", 5, &kv, NULL, err, sizeof err),
                     KL_E_NOT_FOUND);
    ec_ok(
        kl_etcd_delete(cl, "del/3", 5, false, &deleted, NULL, err, sizeof err),
        err);
    assert_int_equal(deleted, 0);
    ec_ok(kl_etcd_delete(cl, "del/", 4, true, &deleted, NULL, err, sizeof err),
          err);
    assert_int_equal(deleted, 9);
    ec_ok(kl_etcd_get(cl, "dem", 3, &kv, NULL, err, sizeof err), err);
    kl_etcd_kv_clear(&kv);
}

static bool key_exists(const char *k)
{
    char err[512] = "";
    kl_etcd_kv kv;
    kl_status st = kl_etcd_get(cl, k, strlen(k), &kv, NULL, err, sizeof err);
    if (st == KL_OK) {
        kl_etcd_kv_clear(&kv);
        return true;
    }
    ec_status(st, KL_E_NOT_FOUND, err);
    return false;
}

static void test_lease(void **state)
{
    (void)state;
    char err[512] = "";
    int64_t id, granted, ttl;
    ec_ok(kl_etcd_lease_grant(cl, 2, &id, &granted, err, sizeof err), err);
    assert_true(id != 0);
    assert_true(granted >= 2);
    ec_ok(kl_etcd_put(cl, "lease/a", 7, "up", 2, id, NULL, err, sizeof err),
          err);
    kl_etcd_kv kv;
    ec_ok(kl_etcd_get(cl, "lease/a", 7, &kv, NULL, err, sizeof err), err);
    assert_int_equal(kv.lease, id);
    kl_etcd_kv_clear(&kv);

    /* kept alive for longer than its TTL: still there */
    double until = td_now_ms() + (double)granted * 1000 + 1500;
    while (td_now_ms() < until) {
        ec_ok(kl_etcd_lease_keepalive(cl, id, &ttl, err, sizeof err), err);
        assert_true(ttl > 0 && ttl <= granted);
        ec_sleep_ms(400);
    }
    assert_true(key_exists("lease/a"));

    /* not kept alive: gone after the TTL (etcd checks every 500 ms) */
    double t0 = td_now_ms();
    while (key_exists("lease/a")) {
        assert_true(td_now_ms() - t0 < (double)granted * 1000 + 5000);
        ec_sleep_ms(100);
    }
    double gone = td_now_ms() - t0;
    fprintf(stderr, "# key gone %.0f ms after the last keepalive (TTL %ld s)\n",
            gone, (long)granted);
    assert_true(gone > (double)granted * 1000 - 1000);
    assert_int_equal(kl_etcd_lease_keepalive(cl, id, &ttl, err, sizeof err),
                     KL_E_NOT_FOUND);
    assert_int_equal(ttl, 0);
    ec_expect(err, "is gone");
    /* a put on a lease that is gone is refused */
    assert_int_equal(
        kl_etcd_put(cl, "lease/b", 7, "x", 1, id, NULL, err, sizeof err),
        KL_E_NOT_FOUND);
    ec_expect(err, "lease not found");

    /* revoke: the keys go at once; twice: not found */
    ec_ok(kl_etcd_lease_grant(cl, 60, &id, NULL, err, sizeof err), err);
    ec_ok(kl_etcd_put(cl, "lease/c", 7, "x", 1, id, NULL, err, sizeof err),
          err);
    ec_ok(kl_etcd_put(cl, "lease/d", 7, "x", 1, id, NULL, err, sizeof err),
          err);
    ec_ok(kl_etcd_lease_revoke(cl, id, err, sizeof err), err);
    assert_false(key_exists("lease/c"));
    assert_false(key_exists("lease/d"));
    assert_int_equal(kl_etcd_lease_revoke(cl, id, err, sizeof err),
                     KL_E_NOT_FOUND);
    assert_int_equal(kl_etcd_lease_grant(cl, 0, &id, NULL, err, sizeof err),
                     KL_E_BAD_VALUE);
}

static void test_watch_order(void **state)
{
    (void)state;
    char err[512] = "";
    kl_etcd_watch *w;
    ec_ok(kl_etcd_watch_new(cl, "w/", 2, 0, &w, err, sizeof err), err);
    ec_events ev = {0};
    ec_wait_connected(w, &ev);
    int64_t r0 = kl_etcd_watch_next_revision(w);
    assert_true(kl_etcd_watch_fd(w) >= 0);
    int64_t r1, r2, r3, r4;
    ec_ok(kl_etcd_put(cl, "w/a", 3, "1", 1, 0, &r1, err, sizeof err), err);
    ec_ok(kl_etcd_put(cl, "x/outside", 9, "1", 1, 0, NULL, err, sizeof err),
          err);
    ec_ok(kl_etcd_put(cl, "w/b", 3, "2", 1, 0, &r2, err, sizeof err), err);
    ec_ok(kl_etcd_delete(cl, "w/a", 3, false, NULL, &r3, err, sizeof err), err);
    ec_ok(kl_etcd_put(cl, "w/b", 3, "3", 1, 0, &r4, err, sizeof err), err);
    ec_wait_events(w, &ev, 4, 5000);
    assert_true(r1 >= r0);
    ec_check(&ev, 0, KL_ETCD_PUT, "w/a", "1", r1);
    ec_check(&ev, 1, KL_ETCD_PUT, "w/b", "2", r2);
    ec_check(&ev, 2, KL_ETCD_DELETE, "w/a", "", r3);
    ec_check(&ev, 3, KL_ETCD_PUT, "w/b", "3", r4);
    assert_int_equal(kl_etcd_watch_next_revision(w), r4 + 1);
    /* nothing more arrives */
    ec_ok(kl_etcd_watch_step(w, 300, ec_collect, &ev, err, sizeof err), err);
    assert_int_equal(ev.n, 4);

    /* driven as an event loop would: poll the socket, then a step that
     * does not wait */
    int64_t r5;
    ec_ok(kl_etcd_put(cl, "w/c", 3, "5", 1, 0, &r5, err, sizeof err), err);
    double until = td_now_ms() + 5000;
    while (ev.n < 5 && td_now_ms() < until) {
        struct pollfd pfd = {.fd = kl_etcd_watch_fd(w), .events = POLLIN};
        assert_true(pfd.fd >= 0);
        (void)poll(&pfd, 1, 100);
        ec_ok(kl_etcd_watch_step(w, 0, ec_collect, &ev, err, sizeof err), err);
    }
    assert_int_equal(ev.n, 5);
    ec_check(&ev, 4, KL_ETCD_PUT, "w/c", "5", r5);
    kl_etcd_watch_free(w);
    ec_events_clear(&ev);
}

static void test_watch_resume_after_drop(void **state)
{
    (void)state;
    char err[512] = "";
    int64_t r1, r;
    ec_ok(kl_etcd_put(cl, "r/0", 3, "a", 1, 0, &r1, err, sizeof err), err);
    /* from a past revision: the history first */
    kl_etcd_watch *w;
    ec_ok(kl_etcd_watch_new(cl, "r/", 2, r1, &w, err, sizeof err), err);
    ec_events ev = {0};
    ec_wait_events(w, &ev, 1, 5000);
    ec_check(&ev, 0, KL_ETCD_PUT, "r/0", "a", r1);
    int64_t next = kl_etcd_watch_next_revision(w);
    assert_int_equal(next, r1 + 1);
    kl_etcd_watch_free(w); /* the client drops */

    int64_t revs[5];
    for (int i = 0; i < 5; i++) {
        char k[8];
        snprintf(k, sizeof k, "r/%d", i + 1);
        ec_ok(kl_etcd_put(cl, k, 3, "b", 1, 0, &revs[i], err, sizeof err), err);
    }
    ec_ok(kl_etcd_delete(cl, "r/1", 3, false, NULL, &r, err, sizeof err), err);
    /* a new watch from where the old one stopped sees exactly the rest */
    ec_ok(kl_etcd_watch_new(cl, "r/", 2, next, &w, err, sizeof err), err);
    ec_wait_events(w, &ev, 7, 5000);
    for (int i = 0; i < 5; i++) {
        char k[8];
        snprintf(k, sizeof k, "r/%d", i + 1);
        ec_check(&ev, 1 + (size_t)i, KL_ETCD_PUT, k, "b", revs[i]);
    }
    ec_check(&ev, 6, KL_ETCD_DELETE, "r/1", "", r);
    ec_ok(kl_etcd_watch_step(w, 200, ec_collect, &ev, err, sizeof err), err);
    assert_int_equal(ev.n, 7);
    kl_etcd_watch_free(w);
    ec_events_clear(&ev);
}

static void test_watch_compacted(void **state)
{
    (void)state;
    char err[512] = "";
    int64_t r1, r2;
    ec_ok(kl_etcd_put(cl, "c/k", 3, "1", 1, 0, &r1, err, sizeof err), err);
    ec_ok(kl_etcd_put(cl, "c/k", 3, "2", 1, 0, NULL, err, sizeof err), err);
    ec_ok(kl_etcd_put(cl, "c/k", 3, "3", 1, 0, &r2, err, sizeof err), err);
    ec_ok(kl_etcd_compact(cl, r2, err, sizeof err), err);

    kl_etcd_watch *w;
    ec_ok(kl_etcd_watch_new(cl, "c/", 2, r1, &w, err, sizeof err), err);
    ec_events ev = {0};
    double until = td_now_ms() + 5000;
    kl_status st = KL_OK;
    while (ev.n == 0 && td_now_ms() < until)
        st = kl_etcd_watch_step(w, 100, ec_collect, &ev, err, sizeof err);
    assert_int_equal(ev.n, 1);
    assert_int_equal(ev.e[0].type, KL_ETCD_COMPACTED);
    assert_int_equal(ev.e[0].rev, r2);
    ec_status(st, KL_E_CLOSED, err);
    ec_expect(err, "compacted");
    /* it stays stopped until restarted */
    assert_int_equal(
        kl_etcd_watch_step(w, 10, ec_collect, &ev, err, sizeof err),
        KL_E_CLOSED);
    /* a paged read at the compacted revision is refused too */
    kl_etcd_page p;
    assert_int_equal(
        kl_etcd_range(cl, "c/", 2, NULL, 0, 0, r1, &p, err, sizeof err),
        KL_E_NOT_FOUND);
    ec_expect(err, "compacted");
    /* the full re-read, then the watch from just after it */
    ec_ok(kl_etcd_range(cl, "c/", 2, NULL, 0, 0, 0, &p, err, sizeof err), err);
    assert_int_equal(p.n, 1);
    assert_string_equal((const char *)p.kvs[0].value, "3");
    kl_etcd_watch_restart(w, p.revision + 1);
    kl_etcd_page_clear(&p);
    ec_events_clear(&ev);
    int64_t r3;
    ec_ok(kl_etcd_put(cl, "c/k", 3, "4", 1, 0, &r3, err, sizeof err), err);
    ec_wait_events(w, &ev, 1, 5000);
    ec_check(&ev, 0, KL_ETCD_PUT, "c/k", "4", r3);
    kl_etcd_watch_free(w);
    ec_events_clear(&ev);
}

/* etcd down: calls fail within their timeout, naming the endpoint; a
 * stopped (frozen) etcd times out; back: calls work, the watch resumes. */
static void test_down_and_back(void **state)
{
    (void)state;
    char err[512] = "";
    kl_etcd *c = ec_client(&cluster, 1000);
    kl_etcd_watch *w;
    ec_ok(kl_etcd_watch_new(c, "d/", 2, 0, &w, err, sizeof err), err);
    ec_events ev = {0};
    ec_wait_connected(w, &ev);
    int64_t r1;
    ec_ok(kl_etcd_put(c, "d/1", 3, "a", 1, 0, &r1, err, sizeof err), err);
    ec_wait_events(w, &ev, 1, 5000);

    /* frozen: no answer, the call's timeout */
    td_daemon frozen = {.pid = cluster.m[0].pid, .name = "etcd n1"};
    td_freeze(&frozen); /* every thread stopped, not only signalled */
    double t0 = td_now_ms();
    /* outside the watched prefix: a write that timed out may still be
     * applied once etcd runs again */
    kl_status st = kl_etcd_put(c, "e/x", 3, "x", 1, 0, NULL, err, sizeof err);
    double took = td_now_ms() - t0;
    ec_status(st, KL_E_TIMEOUT, err);
    ec_expect(err, "within 1000 ms");
    fprintf(stderr, "# frozen etcd: %.0f ms: %s\n", took, err);
    assert_true(took >= 900 && took < 2500);
    kill(cluster.m[0].pid, SIGCONT);

    /* dead: refused at once */
    te_kill(&cluster, 0, SIGKILL);
    t0 = td_now_ms();
    st = kl_etcd_put(c, "d/x", 3, "x", 1, 0, NULL, err, sizeof err);
    took = td_now_ms() - t0;
    ec_status(st, KL_E_IO, err);
    ec_expect(err, "no endpoint answered");
    ec_expect(err, cluster.m[0].url);
    assert_true(took < 1500);
    kl_etcd_kv kv;
    ec_status(kl_etcd_get(c, "d/1", 3, &kv, NULL, err, sizeof err), KL_E_IO,
              err);
    st = kl_etcd_watch_step(w, 500, ec_collect, &ev, err, sizeof err);
    assert_int_not_equal(st, KL_OK);
    fprintf(stderr, "# watch while down: %s\n", err);
    assert_false(kl_etcd_watch_connected(w));
    st = kl_etcd_watch_step(w, 200, ec_collect, &ev, err, sizeof err);
    assert_int_not_equal(st, KL_OK);

    /* back, with a change made while the watch was away */
    te_restart(&cluster, 0);
    int64_t r2, r3;
    ec_ok(kl_etcd_put(c, "d/2", 3, "b", 1, 0, &r2, err, sizeof err), err);
    ec_ok(kl_etcd_get(c, "d/1", 3, &kv, NULL, err, sizeof err), err);
    kl_etcd_kv_clear(&kv);
    ec_wait_events(w, &ev, 2, 10000);
    ec_ok(kl_etcd_put(c, "d/3", 3, "c", 1, 0, &r3, err, sizeof err), err);
    ec_wait_events(w, &ev, 3, 5000);
    ec_check(&ev, 0, KL_ETCD_PUT, "d/1", "a", r1);
    ec_check(&ev, 1, KL_ETCD_PUT, "d/2", "b", r2);
    ec_check(&ev, 2, KL_ETCD_PUT, "d/3", "c", r3);
    kl_etcd_watch_free(w);
    ec_events_clear(&ev);
    kl_etcd_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_binary),
        cmocka_unit_test(test_range_paging),
        cmocka_unit_test(test_delete),
        cmocka_unit_test(test_lease),
        cmocka_unit_test(test_watch_order),
        cmocka_unit_test(test_watch_resume_after_drop),
        cmocka_unit_test(test_watch_compacted),
        cmocka_unit_test(test_down_and_back),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
