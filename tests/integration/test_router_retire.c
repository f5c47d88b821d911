/* SPDX-License-Identifier: Apache-2.0 */
/* A reload storm under lookups from every shard (docs/ROUTING.md "Threads
 * and locks", reload and retired tables): kl_router_has_key runs without a lock
 * on every local key-store miss, so a replaced routing table is freed only once
 * no lookup can still hold it. Four threads look keys up without pause while
 * the table is replaced 300 times:
 * - every lookup of a key in every version of the table finds it (a freed
 *   or half-built table would not; ASan and TSan see the rest);
 * - no reload waits on the lookups: each one is installed within its
 *   bound (the router used to spin on sched_yield until a single reader
 *   count was seen at 0, which lookups from every shard may never allow);
 * - nothing leaks: once the lookups stop, every retired table is freed. */
#include "../tools/rtharness.h"
#include "net.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define READERS 4
#define RELOADS 300
#define KEYS 200 /* per table version, besides the one always there */

static char *tmp;

static int setup(void **state)
{
    (void)state;
    tmp = tp_tempdir("router-retire");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tp_rmtree(tmp);
    return 0;
}

typedef struct reader {
    pthread_t th;
    kl_router *r;
    const uint8_t *ski;
    atomic_bool *stop;
    unsigned long lookups, missed;
} reader;

static void *reader_main(void *arg)
{
    reader *rd = arg;
    while (!atomic_load(rd->stop)) {
        rd->lookups++;
        rd->missed += !kl_router_has_key(rd->r, rd->ski);
    }
    return NULL;
}

/* Version v of the table: one server serving `always` and KEYS keys of
 * its own (so that each version is a different allocation of some size). */
static void write_version(const char *path, unsigned port,
                          const uint8_t *always, unsigned v)
{
    size_t cap = 64 + (size_t)(KEYS + 1) * 44, n = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    n += (size_t)snprintf(text + n, cap - n,
                          "servers:\n  - {name: a, address: \"127.0.0.1:%u\", "
                          "region: eu, serves: [%s",
                          port, tp_ski_hex(always));
    for (unsigned k = 0; k < KEYS; k++) {
        uint8_t ski[20];
        memset(ski, 0, sizeof ski);
        ski[0] = 0x5a;
        ski[1] = (uint8_t)(v >> 8);
        ski[2] = (uint8_t)v;
        ski[3] = (uint8_t)k;
        n += (size_t)snprintf(text + n, cap - n, ", %s", tp_ski_hex(ski));
    }
    snprintf(text + n, cap - n, "]}\n");
    fp_write_file(path, text);
    free(text);
}

static void test_reload_storm_under_lookups(void **state)
{
    (void)state;
    uint8_t always[20];
    memset(always, 0x3c, sizeof always);
    unsigned port = tn_free_port(); /* nothing listens: lookups only */
    char table[1100];
    snprintf(table, sizeof table, "%s/table.yaml", tmp);
    write_version(table, port, always, 0);
    kl_router_opts o = rh_opts(table);
    o.reload_poll_ns = 0; /* never: reloads are this test's, one at a time */
    kl_router *r = rh_router(&o);

    atomic_bool stop = false;
    reader rd[READERS];
    for (int i = 0; i < READERS; i++) {
        rd[i] = (reader){.r = r, .ski = always, .stop = &stop};
        assert_int_equal(pthread_create(&rd[i].th, NULL, reader_main, &rd[i]),
                         0);
    }
    double worst = 0, t0 = td_now_ms();
    unsigned most_retired = 0;
    for (unsigned v = 1; v <= RELOADS; v++) {
        write_version(table, port, always, v);
        char err[512];
        double s = td_now_ms();
        assert_int_equal(kl_router_reload(r, err, sizeof err), KL_OK);
        double ms = td_now_ms() - s;
        if (ms > worst)
            worst = ms;
        kl_router_stats st;
        kl_router_get_stats(r, &st);
        if (st.retired > most_retired)
            most_retired = st.retired;
    }
    double storm = td_now_ms() - t0;
    atomic_store(&stop, true);
    unsigned long lookups = 0, missed = 0;
    for (int i = 0; i < READERS; i++) {
        pthread_join(rd[i].th, NULL);
        lookups += rd[i].lookups;
        missed += rd[i].missed;
    }
    kl_router_stats st;
    kl_router_get_stats(r, &st);
    /* the router thread frees what is left when it next looks: it wakes
     * at least every ping interval */
    double until = td_now_ms() + 2000;
    while (st.retired && td_now_ms() < until) {
        fp_sleep_ms(20);
        kl_router_get_stats(r, &st);
    }
    fprintf(stderr,
            "%d reloads in %.0f ms under %d lookup threads (%lu lookups): "
            "slowest reload %.1f ms, at most %u retired tables waiting, %u "
            "left after the lookups stopped; generation %u\n",
            RELOADS, storm, READERS, lookups, worst, most_retired, st.retired,
            st.generation);
    assert_int_equal(missed, 0);
    assert_true(lookups > 0);
    assert_int_equal(st.generation, RELOADS + 1);
    assert_int_equal(st.retired, 0);
    /* installed within the bound kl_router_reload itself waits (5 s) with
     * room to spare: a reload never waits for the lookups */
    assert_true(worst < 1000);
    kl_router_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reload_storm_under_lookups),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
