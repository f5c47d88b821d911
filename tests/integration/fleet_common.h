/* SPDX-License-Identifier: Apache-2.0 */
/* What the fleet's routing tests share: real keylessd "data centres"
 * (tests/tools/rtharness.h) registered in a real etcd, a router fed by the
 * directory (router/table_fleet.h), and a load thread that counts every
 * answer. Included by tests/integration/test_fleet_*.c only. */
#ifndef KL_TEST_FLEET_COMMON_H
#define KL_TEST_FLEET_COMMON_H

#include "../tools/rtharness.h"

#include <stdatomic.h>

#include "etcd_common.h"
#include "fleet/member.h"
#include "fleet/publish.h"
#include "router/table_fleet.h"

#define FC_PREFIX "/fleet-test/"
#define FC_TTL_S 2

/* Registers dc (its proxy's port) in region, serving set. */
static inline kl_fleet_member *fc_register(const te_cluster *c, const rh_dc *dc,
                                           const char *region, const char *set)
{
    const char *urls[TE_MAX_MEMBERS];
    te_endpoints(c, urls);
    kl_fleet_server s;
    memset(&s, 0, sizeof s);
    snprintf(s.name, sizeof s.name, "%s", dc->name);
    snprintf(s.region, sizeof s.region, "%s", region);
    snprintf(s.host, sizeof s.host, "127.0.0.1");
    s.port = dc->p.port;
    s.role = KL_FLEET_ROLE_KEYS;
    s.priority = 100;
    char err[512] = "";
    ec_ok(kl_fleet_server_add_set(&s, set, err, sizeof err), err);
    kl_fleet_member_opts o = {
        .etcd = {.endpoints = urls, .n_endpoints = (size_t)c->n},
        .prefix = FC_PREFIX,
        .ttl_s = FC_TTL_S,
        .record = &s};
    kl_fleet_member *m;
    ec_ok(kl_fleet_member_start(&o, &m, err, sizeof err), err);
    kl_fleet_server_clear(&s);
    return m;
}

static inline void fc_wait_registered(kl_fleet_member *m)
{
    kl_fleet_member_status st;
    double until = td_now_ms() + 5000;
    do {
        kl_fleet_member_status_get(m, &st);
        if (st.state == KL_FLEET_MEMBER_REGISTERED)
            return;
        ec_sleep_ms(10);
    } while (td_now_ms() < until);
    fail_msg("not registered: %s", kl_fleet_member_state_name(st.state));
}

/* Publishes set with the SKI and 999 others (so the index is not one
 * key). */
static inline void fc_publish(kl_etcd *cl, const char *set,
                              const uint8_t ski[20])
{
    uint8_t *skis = calloc(1000, 20);
    memcpy(skis, ski, 20);
    for (int i = 1; i < 1000; i++) {
        skis[i * 20] = (uint8_t)i;
        skis[i * 20 + 1] = (uint8_t)(i >> 8);
        skis[i * 20 + 19] = 0xee;
    }
    kl_fleet_publish p = {
        .prefix = FC_PREFIX,
        .set = set,
        .skis = skis,
        .n = 1000,
        .chunk_skis = 300}; /* four chunks: the paged read is exercised */
    kl_fleet_publish_result res;
    char err[512] = "";
    ec_ok(kl_fleet_publish_set(cl, &p, &res, err, sizeof err), err);
    assert_int_equal(res.keys, 1000);
    assert_int_equal(res.chunks, 4);
    free(skis);
}

/* A router without a table file, fed by the directory. */
static inline kl_router *fc_router(const te_cluster *c, kl_rt_fleet_feed **f)
{
    kl_router_opts o = rh_opts(NULL);
    kl_router *r = rh_router(&o);
    const char *urls[TE_MAX_MEMBERS];
    te_endpoints(c, urls);
    kl_fleet_dir_opts d = {
        .etcd = {.endpoints = urls, .n_endpoints = (size_t)c->n},
        .prefix = FC_PREFIX,
        .sync_check_ms = 500};
    char err[512] = "";
    ec_ok(kl_rt_fleet_feed_start(r, &d, NULL, false, f, err, sizeof err), err);
    return r;
}

/* The remote named name: in the table (and up), or absent/draining. */
static inline bool fc_in_table(kl_router *r, const char *name)
{
    kl_remote_stats st[16];
    size_t n = kl_router_remote_stats(r, st, 16);
    for (size_t i = 0; i < n && i < 16; i++)
        if (!strcmp(st[i].name, name))
            return st[i].in_table;
    return false;
}

/* Load in the background: one request at a time per thread, answers
 * counted by error code. */
typedef struct fc_load {
    kl_router *r;
    rh_req q;
    rh_batch b;
    atomic_bool stop;
    pthread_t th;
} fc_load;

static inline void *fc_load_main(void *arg)
{
    fc_load *l = arg;
    while (!atomic_load(&l->stop))
        rh_run(l->r, &l->b, &l->q, 20, 4);
    return NULL;
}

static inline void fc_load_start(fc_load *l, kl_router *r, const uint8_t *ski,
                                 int comp)
{
    memset(l, 0, sizeof *l);
    l->r = r;
    rh_req_make(&l->q, ski, comp, NULL);
    rh_batch_init(&l->b);
    assert_int_equal(pthread_create(&l->th, NULL, fc_load_main, l), 0);
}

/* Stops the load; returns the requests answered, *failed those that were
 * not answered KL_ERR_NONE. */
static inline unsigned fc_load_stop(fc_load *l, unsigned *failed)
{
    atomic_store(&l->stop, true);
    pthread_join(l->th, NULL);
    *failed = l->b.done - l->b.by_err[KL_ERR_NONE];
    for (int e = 1; e < 256; e++)
        if (l->b.by_err[e])
            fprintf(stderr, "  %u answers with error 0x%02x\n", l->b.by_err[e],
                    e);
    return l->b.done;
}

#endif
