/* SPDX-License-Identifier: Apache-2.0 */
/* The router's integration-test harness (header only): "data centres" -
 * keylessd daemons, each behind a faultproxy - a routing table written to
 * a file, and a driver that pushes requests through kl_router_route with
 * a bounded number in flight and tallies the answers. */
#ifndef KL_TEST_RTHARNESS_H
#define KL_TEST_RTHARNESS_H

#include <pthread.h>

#include "core/time.h"
#include "daemon.h"
#include "fpctl.h"
#include "pki.h"
#include "router/router.h"
#include "testutil.h"

typedef struct rh_dc {
    const char *name;
    td_daemon d;
    fp_proxy p;
} rh_dc;

static inline void rh_dc_start(rh_dc *dc, const char *name, const char *keydir,
                               unsigned oneway_ms)
{
    dc->name = name;
    td_opts o = {.name = name, .key_dirs = keydir};
    td_start(&dc->d, &o);
    fp_start(&dc->p, name, dc->d.port, oneway_ms);
}

static inline void rh_dc_stop(rh_dc *dc)
{
    fp_stop(&dc->p);
    if (dc->d.pid)
        (void)td_stop(&dc->d, 0);
}

/* One route: the test PKI's ECDSA P-256 key copied into keydir and served
 * by a data centre oneway_ms away (dc, named name), and a routing table
 * dir/routes.yaml (its path in table) naming dc as the key's one server,
 * region eu. The key's SKI goes to ski. */
static inline void rh_one_route(rh_dc *dc, const char *name, const char *dir,
                                const char *keydir, unsigned oneway_ms,
                                uint8_t ski[20], char *table, size_t cap)
{
    tp_copy_key(keydir, tp_path("keys/ecdsa-p256.key"));
    EVP_PKEY *pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    tp_ski(pub, ski);
    EVP_PKEY_free(pub);
    rh_dc_start(dc, name, keydir, oneway_ms);
    char text[512];
    snprintf(table, cap, "%s/routes.yaml", dir);
    snprintf(text, sizeof text,
             "servers:\n  - {name: %s, address: \"127.0.0.1:%u\", region: "
             "eu, serves: [%s]}\n",
             name, dc->p.port, tp_ski_hex(ski));
    fp_write_file(table, text);
}

/* Router options with the test PKI and short intervals. */
static inline kl_router_opts rh_opts(const char *table)
{
    kl_router_opts o = kl_router_defaults;
    o.table_file = table;
    o.cert_file = tp_path("client.crt");
    o.key_file = tp_path("client.key");
    o.ca_file = tp_path("ca.crt");
    o.ping_interval_ns = 100 * KL_NS_PER_MS;
    o.reload_poll_ns = 50 * KL_NS_PER_MS;
    /* the machine is shared (2 cores, other builds): a process can stall
     * for a few hundred ms, which is not a lost remote */
    o.timeout_floor_ns = 400 * KL_NS_PER_MS;
    return o;
}

static inline kl_router *rh_router(const kl_router_opts *o)
{
    kl_router *r = NULL;
    char err[512];
    if (kl_router_new(o, &r, err, sizeof err) != KL_OK)
        fail_msg("kl_router_new: %s", err);
    return r;
}

/* ---- the driver ---- */

typedef struct rh_batch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned inflight, done;
    unsigned by_err[256];
    double max_ms;
    double sum_ms;
    double slow_ms; /* answers slower than this are counted (0: off) */
    unsigned slow;
} rh_batch;

typedef struct rh_slot {
    rh_batch *b;
    double t0;
    kl_route_handle h;
} rh_slot;

static inline void rh_done(void *arg, kl_status err, const uint8_t *payload,
                           size_t len)
{
    (void)payload;
    (void)len;
    rh_slot *s = arg;
    rh_batch *b = s->b;
    double ms = td_now_ms() - s->t0;
    pthread_mutex_lock(&b->mu);
    b->inflight--;
    b->done++;
    b->by_err[kl_status_to_p6(err)]++; /* counted by the client's byte */
    if (ms > b->max_ms)
        b->max_ms = ms;
    b->sum_ms += ms;
    if (b->slow_ms > 0 && ms > b->slow_ms)
        b->slow++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    free(s);
}

static inline void rh_batch_init(rh_batch *b)
{
    memset(b, 0, sizeof *b);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
}

/* A parsed ECDSA request for ski (compliance when comp >= 0; the request
 * context text when ctx_json). */
typedef struct rh_req {
    uint8_t msg[2048];
    kl_request req;
    kl_req_context ctx;
    bool has_ctx;
} rh_req;

static inline void rh_req_make(rh_req *q, const uint8_t *ski, int comp,
                               const char *ctx_json)
{
    static const uint8_t digest[32] = {7, 7, 7};
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                         .payload = digest,
                         .payload_len = 32,
                         .ski = ski,
                         .req_context = ctx_json,
                         .has_compliance = comp >= 0,
                         .compliance = (uint8_t)(comp < 0 ? 0 : comp)};
    size_t len;
    assert_int_equal(kl_request_encode(q->msg, sizeof q->msg, &s, &len), KL_OK);
    assert_int_equal(kl_request_parse(q->msg + 8, len - 8, &q->req), KL_OK);
    q->has_ctx = false;
    if (ctx_json) {
        assert_int_equal(kl_req_context_parse(q->req.req_context.ptr,
                                              q->req.req_context.len, &q->ctx),
                         KL_OK);
        q->has_ctx = true;
    }
}

static inline rh_slot *rh_submit(kl_router *r, rh_batch *b, const rh_req *q)
{
    rh_slot *s = calloc(1, sizeof *s);
    s->b = b;
    s->t0 = td_now_ms();
    pthread_mutex_lock(&b->mu);
    b->inflight++;
    pthread_mutex_unlock(&b->mu);
    kl_route_req rr = {.req = &q->req, .ctx = q->has_ctx ? &q->ctx : NULL};
    assert_int_equal(kl_router_route(r, &rr, rh_done, s, &s->h), KL_OK);
    return s;
}

/* Sends n requests with at most conc in flight; waits for all. */
static inline void rh_run(kl_router *r, rh_batch *b, const rh_req *q,
                          unsigned n, unsigned conc)
{
    for (unsigned i = 0; i < n; i++) {
        pthread_mutex_lock(&b->mu);
        while (b->inflight >= conc)
            pthread_cond_wait(&b->cv, &b->mu);
        pthread_mutex_unlock(&b->mu);
        (void)rh_submit(r, b, q);
    }
    pthread_mutex_lock(&b->mu);
    while (b->inflight)
        pthread_cond_wait(&b->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
}

/* Attempts sent to the remote named name so far (0 if unknown). */
static inline uint64_t rh_sent(kl_router *r, const char *name)
{
    kl_remote_stats st[16];
    size_t n = kl_router_remote_stats(r, st, 16);
    for (size_t i = 0; i < n && i < 16; i++)
        if (!strcmp(st[i].name, name))
            return st[i].sent;
    return 0;
}

static inline void rh_print_remotes(kl_router *r)
{
    kl_remote_stats st[16];
    size_t n = kl_router_remote_stats(r, st, 16);
    for (size_t i = 0; i < n && i < 16; i++)
        fprintf(stderr,
                "  remote %-6s %s%s ewma %.1f ms p99 %.1f ms timeout %d ms "
                "conns %u sent %llu ok %llu failed %llu lost %llu\n",
                st[i].name, st[i].up ? "up" : "DOWN",
                st[i].in_table ? "" : " (removed)", st[i].ewma_ms, st[i].p99_ms,
                st[i].timeout_ms, st[i].conns, (unsigned long long)st[i].sent,
                (unsigned long long)st[i].ok, (unsigned long long)st[i].failed,
                (unsigned long long)st[i].lost);
}

/* Waits until every remote has a latency measured (probes). */
static inline void rh_wait_measured(kl_router *r, size_t want)
{
    for (int i = 0; i < 300; i++) {
        kl_remote_stats st[16];
        size_t n = kl_router_remote_stats(r, st, 16), ok = 0;
        for (size_t k = 0; k < n && k < 16; k++)
            ok += st[k].up && st[k].ewma_ms >= 0;
        if (ok >= want)
            return;
        fp_sleep_ms(20);
    }
    rh_print_remotes(r);
    fail_msg("remotes not measured after 6 s");
}

#endif
