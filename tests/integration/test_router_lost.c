/* SPDX-License-Identifier: Apache-2.0 */
/* A request lost alone on a connection that keeps answering
 * (docs/ROUTING.md "How it works", lost alone; src/router/stall.c). The
 * upstreams are tests/tools/lossyup.h servers: one answers every request but
 * swallows those whose payload starts with 0xdd, so its connection never goes
 * quiet and the silence rule cannot see the loss.
 * - with a second route: the lost request is answered by it about one
 *   timeout after later requests for the same key overtook it (not at its
 *   5 s deadline), and the lossy remote keeps everything else and stays up;
 * - with one route: it is sent to the same remote again and answered;
 * - requests for another key overtaking a slow one by far more than the
 *   timeout do not make it lost (a slow key is not a lost request);
 * - a late answer for a request declared lost is discarded: each request
 *   is answered exactly once. */
#include "../tools/lossyup.h"
#include "../tools/rtharness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOSE 0xdd
/* the attempt timeout floor (loopback p99 x 10 is less): high enough that
 * a test thread descheduled on this shared machine does not make the
 * silence rule fire */
#define FLOOR_MS 200
#define SLOW_MS 1000 /* a slow key: several timeouts */

static char *tmp;

static int setup(void **state)
{
    (void)state;
    tmp = tp_tempdir("router-lost");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tp_rmtree(tmp);
    return 0;
}

/* One request's outcome. */
typedef struct outcome {
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    unsigned answers; /* must end at exactly 1 */
    uint8_t err;
    char from[48];
    double t0, ms;
} outcome;

static void on_done(void *arg, kl_status err, const uint8_t *payload,
                    size_t len)
{
    outcome *o = arg;
    pthread_mutex_lock(o->mu);
    o->answers++;
    o->err = kl_status_to_p6(err); /* the byte the client would get */
    snprintf(o->from, sizeof o->from, "%.*s", (int)(len < 47 ? len : 47),
             (const char *)payload);
    o->ms = td_now_ms() - o->t0;
    pthread_cond_broadcast(o->cv);
    pthread_mutex_unlock(o->mu);
}

typedef struct run {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    outcome marked; /* the one to lose (or the slow one) */
    outcome normal[200];
    unsigned nnormal;
} run;

static void run_init(run *rn)
{
    memset(rn, 0, sizeof *rn);
    pthread_mutex_init(&rn->mu, NULL);
    pthread_cond_init(&rn->cv, NULL);
}

static void submit(kl_router *r, run *rn, outcome *o, const rh_req *q)
{
    o->mu = &rn->mu;
    o->cv = &rn->cv;
    o->t0 = td_now_ms();
    kl_route_req rr = {.req = &q->req, .ctx = NULL};
    kl_route_handle h;
    assert_int_equal(kl_router_route(r, &rr, on_done, o, &h), KL_OK);
}

/* A request for ski whose payload starts with first. */
static void make(rh_req *q, const uint8_t *ski, uint8_t first)
{
    uint8_t digest[32];
    memset(digest, 7, sizeof digest);
    digest[0] = first;
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                         .payload = digest,
                         .payload_len = sizeof digest,
                         .ski = ski};
    size_t len;
    assert_int_equal(kl_request_encode(q->msg, sizeof q->msg, &s, &len), KL_OK);
    assert_int_equal(kl_request_parse(q->msg + 8, len - 8, &q->req), KL_OK);
    q->has_ctx = false;
}

/* The marked request, then n requests of `normal` every 10 ms; waits for
 * every answer (up to 8 s) and a little more for duplicates. */
static void drive(kl_router *r, run *rn, const rh_req *marked,
                  const rh_req *normal, unsigned n)
{
    submit(r, rn, &rn->marked, marked);
    for (unsigned i = 0; i < n; i++) {
        fp_sleep_ms(10);
        submit(r, rn, &rn->normal[rn->nnormal++], normal);
    }
    double until = td_now_ms() + 8000;
    pthread_mutex_lock(&rn->mu);
    for (;;) {
        bool all = rn->marked.answers > 0;
        for (unsigned i = 0; i < rn->nnormal; i++)
            all &= rn->normal[i].answers > 0;
        if (all || td_now_ms() > until)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&rn->cv, &rn->mu, &ts);
    }
    pthread_mutex_unlock(&rn->mu);
    fp_sleep_ms(200); /* a second answer would come now */
    pthread_mutex_lock(&rn->mu);
    assert_int_equal(rn->marked.answers, 1);
    for (unsigned i = 0; i < rn->nnormal; i++) {
        assert_int_equal(rn->normal[i].answers, 1);
        assert_int_equal(rn->normal[i].err, KL_ERR_NONE);
    }
    pthread_mutex_unlock(&rn->mu);
}

static kl_remote_stats stats_of(kl_router *r, const char *name)
{
    kl_remote_stats st[4];
    size_t n = kl_router_remote_stats(r, st, 4);
    for (size_t i = 0; i < n && i < 4; i++)
        if (!strcmp(st[i].name, name))
            return st[i];
    fail_msg("no remote %s", name);
    kl_remote_stats none = {0};
    return none;
}

/* servers: lossy (direct), and spare (behind p, 5 ms each way) when p. */
static void write_table(const char *path, const uint8_t *ski, unsigned lossy,
                        unsigned spare)
{
    char text[1024];
    int n = snprintf(text, sizeof text,
                     "servers:\n  - {name: lossy, address: \"127.0.0.1:%u\", "
                     "region: eu, serves: [%s]}\n",
                     lossy, tp_ski_hex(ski));
    if (spare)
        snprintf(text + n, sizeof text - (size_t)n,
                 "  - {name: spare, address: \"127.0.0.1:%u\", region: eu, "
                 "serves: [%s]}\n",
                 spare, tp_ski_hex(ski));
    fp_write_file(path, text);
}

static kl_router *router_for(const char *table, size_t remotes)
{
    kl_router_opts o = rh_opts(table);
    o.timeout_floor_ns = (uint64_t)FLOOR_MS * KL_NS_PER_MS;
    o.default_deadline_ns = 5000 * KL_NS_PER_MS;
    kl_router *r = rh_router(&o);
    rh_wait_measured(r, remotes);
    return r;
}

/* The two-route setup: lossy (direct) and spare (behind a faultproxy, 5 ms
 * each way), both serving ski, and a router that has measured both. */
typedef struct two_routes {
    lu_server lossy, spare;
    fp_proxy p;
    kl_router *r;
} two_routes;

static void two_routes_start(two_routes *t, const char *proxy_name,
                             const char *table_name, const uint8_t *ski)
{
    lu_start(&t->lossy, "lossy");
    lu_start(&t->spare, "spare");
    fp_start(&t->p, proxy_name, t->spare.port, 5);
    char table[1100];
    snprintf(table, sizeof table, "%s/%s", tmp, table_name);
    write_table(table, ski, t->lossy.port, t->p.port);
    t->r = router_for(table, 2);
}

static void two_routes_stop(two_routes *t)
{
    kl_router_free(t->r);
    fp_stop(&t->p);
    lu_stop(&t->lossy);
    lu_stop(&t->spare);
}

static void test_lost_fails_over(void **state)
{
    (void)state;
    uint8_t ski[20];
    memset(ski, 0x42, sizeof ski);
    two_routes t;
    two_routes_start(&t, "lost-spare", "two.yaml", ski);
    pthread_mutex_lock(&t.lossy.mu);
    t.lossy.lose_byte = LOSE;
    t.lossy.lose_budget = -1; /* it never answers a marked request */
    pthread_mutex_unlock(&t.lossy.mu);
    int timeout = stats_of(t.r, "lossy").timeout_ms;

    rh_req marked, normal;
    make(&marked, ski, LOSE);
    make(&normal, ski, 1);
    static run rn;
    run_init(&rn);
    drive(t.r, &rn, &marked, &normal, 60);
    kl_remote_stats ls = stats_of(t.r, "lossy"), ss = stats_of(t.r, "spare");
    rh_print_remotes(t.r);
    fprintf(stderr,
            "lost on lossy (timeout %d ms): answered by %s after %.0f ms "
            "(deadline 5000 ms); lossy lost %llu, up %d; the stub swallowed "
            "%u, spare saw %u\n",
            timeout, rn.marked.from, rn.marked.ms, (unsigned long long)ls.lost,
            ls.up, lu_get(&t.lossy, &t.lossy.lost),
            lu_get(&t.spare, &t.spare.requests));
    assert_int_equal(rn.marked.err, KL_ERR_NONE);
    assert_string_equal(rn.marked.from, "from-spare");
    /* overtaken one timeout after it was sent, caught within half a
     * timeout, then the spare's 10 ms: far from the deadline (room for
     * this shared machine) */
    assert_true(rn.marked.ms < 2.0 * timeout + 600);
    for (unsigned i = 0; i < rn.nnormal; i++)
        assert_string_equal(rn.normal[i].from, "from-lossy");
    assert_int_equal(ls.lost, 1);
    assert_true(ls.up); /* it answers: not marked down */
    assert_int_equal(lu_get(&t.lossy, &t.lossy.lost), 1);
    assert_int_equal(lu_get(&t.spare, &t.spare.requests), 1);
    assert_int_equal(ss.sent, 1);
    assert_int_equal(lu_get(&t.lossy, &t.lossy.bad), 0);

    two_routes_stop(&t);
}

static void test_lost_retried_on_the_one_route(void **state)
{
    (void)state;
    uint8_t ski[20];
    memset(ski, 0x52, sizeof ski);
    lu_server lossy;
    lu_start(&lossy, "lossy");
    char table[1100];
    snprintf(table, sizeof table, "%s/one.yaml", tmp);
    write_table(table, ski, lossy.port, 0);
    kl_router *r = router_for(table, 1);
    pthread_mutex_lock(&lossy.mu);
    lossy.lose_byte = LOSE;
    lossy.lose_budget = 1; /* lost once, answered when sent again */
    pthread_mutex_unlock(&lossy.mu);
    int timeout = stats_of(r, "lossy").timeout_ms;

    rh_req marked, normal;
    make(&marked, ski, LOSE);
    make(&normal, ski, 1);
    static run rn;
    run_init(&rn);
    drive(r, &rn, &marked, &normal, 60);
    kl_remote_stats ls = stats_of(r, "lossy");
    fprintf(stderr,
            "lost on the only route (timeout %d ms): answered by %s after "
            "%.0f ms; lost %llu; the stub saw the marked request %u times\n",
            timeout, rn.marked.from, rn.marked.ms, (unsigned long long)ls.lost,
            lu_get(&lossy, &lossy.marked));
    assert_int_equal(rn.marked.err, KL_ERR_NONE);
    assert_string_equal(rn.marked.from, "from-lossy");
    assert_true(rn.marked.ms < 2.0 * timeout + 600);
    assert_int_equal(ls.lost, 1);
    assert_int_equal(lu_get(&lossy, &lossy.marked), 2);
    kl_router_free(r);
    lu_stop(&lossy);
}

/* A slow key (its answers SLOW_MS late, say 175 ms away behind an egress)
 * overtaken by a fast key's requests sent long after it: not lost - it is
 * answered once, by its first remote, and never sent to the spare. (The
 * fast key's last requests may go to the spare: the slow answer raises
 * the lossy remote's latency average - routing, not loss.) */
static void test_other_keys_do_not_overtake(void **state)
{
    (void)state;
    uint8_t slow[20], fast[20];
    memset(slow, 0x61, sizeof slow);
    memset(fast, 0x62, sizeof fast);
    lu_server lossy, spare;
    lu_start(&lossy, "lossy");
    lu_start(&spare, "spare");
    fp_proxy p;
    fp_start(&p, "lost-spare2", spare.port, 5);
    char table[1100], text[1024];
    snprintf(table, sizeof table, "%s/keys.yaml", tmp);
    snprintf(text, sizeof text,
             "servers:\n  - {name: lossy, address: \"127.0.0.1:%u\", region: "
             "eu, serves: [%s, %s]}\n  - {name: spare, address: "
             "\"127.0.0.1:%u\", region: eu, serves: [%s, %s]}\n",
             lossy.port, tp_ski_hex(slow), tp_ski_hex(fast), p.port,
             tp_ski_hex(slow), tp_ski_hex(fast));
    fp_write_file(table, text);
    kl_router *r = router_for(table, 2);
    lu_server *both[2] = {&lossy, &spare};
    for (int i = 0; i < 2; i++) { /* counts the slow key's requests */
        pthread_mutex_lock(&both[i]->mu);
        memcpy(both[i]->slow_ski, slow, 20);
        both[i]->has_slow = true;
        both[i]->slow_ms = i == 0 ? SLOW_MS : 0;
        pthread_mutex_unlock(&both[i]->mu);
    }
    int timeout = stats_of(r, "lossy").timeout_ms;

    rh_req s, f;
    make(&s, slow, 1);
    make(&f, fast, 1);
    static run rn;
    run_init(&rn);
    drive(r, &rn, &s, &f, 120); /* outlasts the slow answer */
    kl_remote_stats ls = stats_of(r, "lossy");
    rh_print_remotes(r);
    fprintf(stderr,
            "slow key overtaken by another (timeout %d ms): answered by %s "
            "after %.0f ms; lost %llu; slow-key requests at lossy %u, at the "
            "spare %u\n",
            timeout, rn.marked.from, rn.marked.ms, (unsigned long long)ls.lost,
            lu_get(&lossy, &lossy.slow_seen), lu_get(&spare, &spare.slow_seen));
    assert_true(SLOW_MS > 3 * timeout); /* overtaken by far more than it */
    assert_int_equal(rn.marked.err, KL_ERR_NONE);
    assert_string_equal(rn.marked.from, "from-lossy");
    assert_true(rn.marked.ms >= SLOW_MS - 10);
    assert_int_equal(ls.lost, 0);
    assert_int_equal(lu_get(&lossy, &lossy.slow_seen), 1);
    assert_int_equal(lu_get(&spare, &spare.slow_seen), 0);
    kl_router_free(r);
    fp_stop(&p);
    lu_stop(&lossy);
    lu_stop(&spare);
}

/* Overtaking within a queue is not loss: 10 requests for a key wait
 * SLOW_MS at the remote while later requests for the same key are answered at
 * once (a keylessd's pool queue overtaken by what its shard runs inline).
 * Many attempts are then old at once - a queue: none is lost, each is
 * answered once by its first remote, none goes to the spare (when there
 * is one). With step_ms, the queue drains one answer every step_ms, so
 * that its last few are old and few for several checks: a queue's tail
 * is not a loss either. (With a spare, the router moves the fast requests
 * there once the first slow answer raises the remote's latency, and no
 * later answer on the lossy connection overtakes the tail; one route
 * keeps them there.) */
static void queue_case(bool spare, unsigned step_ms, uint8_t fill)
{
    uint8_t ski[20];
    memset(ski, fill, sizeof ski);
    two_routes t;
    memset(&t, 0, sizeof t);
    char table[1100];
    if (spare) {
        two_routes_start(&t, "lost-spare3", "queue.yaml", ski);
    } else {
        lu_start(&t.lossy, "lossy");
        snprintf(table, sizeof table, "%s/queue1.yaml", tmp);
        write_table(table, ski, t.lossy.port, 0);
        t.r = router_for(table, 1);
    }
    pthread_mutex_lock(&t.lossy.mu);
    memcpy(t.lossy.slow_ski, ski, 20);
    t.lossy.has_slow = true;
    t.lossy.slow_byte = 9;
    t.lossy.slow_ms = SLOW_MS;
    t.lossy.slow_step_ms = step_ms;
    pthread_mutex_unlock(&t.lossy.mu);
    int timeout = stats_of(t.r, "lossy").timeout_ms;

    rh_req queued, fast;
    make(&queued, ski, 9);
    make(&fast, ski, 1);
    static run rn, rq;
    run_init(&rn);
    run_init(&rq);
    outcome q[10];
    memset(q, 0, sizeof q);
    for (int i = 0; i < 10; i++)
        submit(t.r, &rq, &q[i], &queued);
    /* the same key, answered at once, until the queue has drained */
    drive(t.r, &rn, &fast, &fast, 120 + 10 * step_ms / 10);
    fp_sleep_ms(400);
    pthread_mutex_lock(&rq.mu);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(q[i].answers, 1);
        assert_int_equal(q[i].err, KL_ERR_NONE);
        assert_string_equal(q[i].from, "from-lossy");
        assert_true(q[i].ms >= SLOW_MS - 10);
    }
    pthread_mutex_unlock(&rq.mu);
    kl_remote_stats ls = stats_of(t.r, "lossy");
    fprintf(stderr,
            "10 queued 1 s (one answer every %u ms), overtaken by the same "
            "key (timeout %d ms%s): lost %llu, slow requests at lossy %u, "
            "spare saw %u\n",
            step_ms, timeout, spare ? "" : ", one route",
            (unsigned long long)ls.lost, lu_get(&t.lossy, &t.lossy.slow_seen),
            spare ? lu_get(&t.spare, &t.spare.requests) : 0);
    assert_true(SLOW_MS > 3 * timeout);
    assert_int_equal(ls.lost, 0);
    assert_int_equal(lu_get(&t.lossy, &t.lossy.slow_seen), 10);
    if (spare) {
        two_routes_stop(&t);
    } else {
        kl_router_free(t.r);
        lu_stop(&t.lossy);
    }
}

static void test_queue_overtaken_is_not_lost(void **state)
{
    (void)state;
    queue_case(true, 0, 0x66);
}

static void test_queue_tail_is_not_lost(void **state)
{
    (void)state;
    queue_case(false, 40, 0x67);
}

/* The rule's limit: a request lost while only other keys' requests are
 * answered after it is not caught - it waits (here until the router is
 * freed, which answers it `internal error`; in service, its deadline) and
 * is not sent again. */
static void test_lost_needs_the_same_key(void **state)
{
    (void)state;
    uint8_t ka[20], kb[20];
    memset(ka, 0x71, sizeof ka);
    memset(kb, 0x72, sizeof kb);
    lu_server lossy;
    lu_start(&lossy, "lossy");
    char table[1100], text[1024];
    snprintf(table, sizeof table, "%s/limit.yaml", tmp);
    snprintf(text, sizeof text,
             "servers:\n  - {name: lossy, address: \"127.0.0.1:%u\", region: "
             "eu, serves: [%s, %s]}\n",
             lossy.port, tp_ski_hex(ka), tp_ski_hex(kb));
    fp_write_file(table, text);
    kl_router *r = router_for(table, 1);
    pthread_mutex_lock(&lossy.mu);
    lossy.lose_byte = LOSE;
    lossy.lose_budget = -1;
    pthread_mutex_unlock(&lossy.mu);
    rh_req m, f;
    make(&m, ka, LOSE);
    make(&f, kb, 1);
    static run rn;
    run_init(&rn);
    submit(r, &rn, &rn.marked, &m);
    for (int i = 0; i < 40; i++) {
        fp_sleep_ms(10);
        submit(r, &rn, &rn.normal[rn.nnormal++], &f);
    }
    fp_sleep_ms(300);
    pthread_mutex_lock(&rn.mu);
    assert_int_equal(rn.marked.answers, 0);
    for (unsigned i = 0; i < rn.nnormal; i++)
        assert_int_equal(rn.normal[i].answers, 1);
    pthread_mutex_unlock(&rn.mu);
    assert_int_equal(stats_of(r, "lossy").lost, 0);
    assert_int_equal(lu_get(&lossy, &lossy.marked), 1);
    kl_router_free(r);
    pthread_mutex_lock(&rn.mu);
    assert_int_equal(rn.marked.answers, 1);
    assert_int_equal(rn.marked.err, KL_ERR_INTERNAL);
    pthread_mutex_unlock(&rn.mu);
    lu_stop(&lossy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lost_fails_over),
        cmocka_unit_test(test_lost_retried_on_the_one_route),
        cmocka_unit_test(test_other_keys_do_not_overtake),
        cmocka_unit_test(test_queue_overtaken_is_not_lost),
        cmocka_unit_test(test_queue_tail_is_not_lost),
        cmocka_unit_test(test_lost_needs_the_same_key),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
