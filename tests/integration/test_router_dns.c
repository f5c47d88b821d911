/* SPDX-License-Identifier: Apache-2.0 */
/* `dns:` routes follow their records' TTL (src/router/dns.c,
 * control.c). A tiny DNS responder in this process, on 127.0.0.1, answers
 * the router (router_dns_server points at it): nothing leaves loopback and
 * the answers, their TTLs and failures are ours to set.
 * - A 3 s TTL is honoured although dns_refresh_ms is 100 ms: no second
 *   query before it runs out, and a changed answer is picked up after it.
 * - A failing name server keeps the previous addresses (the routes stay),
 *   retried until it answers again.
 * - The ceiling bounds a long TTL; the floor bounds a zero one. */
#include "../tools/rtharness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- the responder ----------------------------------------------------- */

typedef struct dns_srv {
    int fd;
    uint16_t port;
    pthread_t th;
    atomic_bool stop;
    pthread_mutex_t mu;
    /* what to answer for A queries of pool.test (AAAA: no records) */
    uint8_t addrs[4][4];
    unsigned naddrs;
    uint32_t ttl;
    bool servfail;
    unsigned a_queries, other_queries;
} dns_srv;

static dns_srv D;

/* Answers one query: the question echoed, then the A records. */
static void answer(dns_srv *d, const uint8_t *q, size_t n,
                   const struct sockaddr_in *from)
{
    if (n < 12 + 5)
        return;
    size_t at = 12; /* the question's name: plain labels from a stub */
    while (at < n && q[at])
        at += q[at] + 1u;
    if (at + 5 > n)
        return;
    size_t qend = at + 5;
    uint16_t qtype = (uint16_t)(q[at + 1] << 8 | q[at + 2]);
    uint8_t out[512];
    memcpy(out, q, qend);
    pthread_mutex_lock(&d->mu);
    bool is_a = qtype == 1;
    if (is_a)
        d->a_queries++;
    else
        d->other_queries++;
    unsigned an = is_a && !d->servfail ? d->naddrs : 0;
    out[2] = 0x81;                                    /* QR, RD */
    out[3] = (uint8_t)(0x80 | (d->servfail ? 2 : 0)); /* RA, SERVFAIL */
    out[6] = 0;
    out[7] = (uint8_t)an;
    memset(out + 8, 0, 4);
    size_t len = qend;
    for (unsigned i = 0; i < an; i++) {
        const uint8_t rr[12] = {0xC0,
                                12,
                                0,
                                1,
                                0,
                                1,
                                (uint8_t)(d->ttl >> 24),
                                (uint8_t)(d->ttl >> 16),
                                (uint8_t)(d->ttl >> 8),
                                (uint8_t)d->ttl,
                                0,
                                4};
        memcpy(out + len, rr, sizeof rr);
        memcpy(out + len + 12, d->addrs[i], 4);
        len += 16;
    }
    pthread_mutex_unlock(&d->mu);
    (void)sendto(d->fd, out, len, 0, (const struct sockaddr *)from,
                 sizeof *from);
}

static void *dns_main(void *arg)
{
    dns_srv *d = arg;
    while (!atomic_load(&d->stop)) {
        struct pollfd pf = {.fd = d->fd, .events = POLLIN};
        if (poll(&pf, 1, 20) <= 0)
            continue;
        uint8_t q[512];
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        ssize_t n =
            recvfrom(d->fd, q, sizeof q, 0, (struct sockaddr *)&from, &fl);
        if (n > 0)
            answer(d, q, (size_t)n, &from);
    }
    return NULL;
}

static void dns_start(dns_srv *d)
{
    memset(d, 0, sizeof *d);
    pthread_mutex_init(&d->mu, NULL);
    d->fd = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(d->fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(d->fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t al = sizeof a;
    assert_int_equal(getsockname(d->fd, (struct sockaddr *)&a, &al), 0);
    d->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&d->th, NULL, dns_main, d), 0);
}

static void dns_stop(dns_srv *d)
{
    atomic_store(&d->stop, true);
    pthread_join(d->th, NULL);
    close(d->fd);
    pthread_mutex_destroy(&d->mu);
}

/* Sets the answer: n addresses 127.0.0.<last[i]>, ttl seconds. */
static void dns_set(dns_srv *d, const uint8_t *last, unsigned n, uint32_t ttl,
                    bool servfail)
{
    pthread_mutex_lock(&d->mu);
    for (unsigned i = 0; i < n; i++) {
        d->addrs[i][0] = 127;
        d->addrs[i][1] = 0;
        d->addrs[i][2] = 0;
        d->addrs[i][3] = last[i];
    }
    d->naddrs = n;
    d->ttl = ttl;
    d->servfail = servfail;
    pthread_mutex_unlock(&d->mu);
}

static unsigned dns_a_queries(dns_srv *d)
{
    pthread_mutex_lock(&d->mu);
    unsigned n = d->a_queries;
    pthread_mutex_unlock(&d->mu);
    return n;
}

/* ---- the router -----------------------------------------------------------
 */

static char *dir;
static char table[1100], server[64];

static int setup(void **state)
{
    (void)state;
    dns_start(&D);
    snprintf(server, sizeof server, "127.0.0.1:%u", D.port);
    dir = tp_tempdir("router-dns");
    snprintf(table, sizeof table, "%s/routes.yaml", dir);
    /* port 9 (discard): nothing listens; the routes are looked at, not
     * used */
    fp_write_file(table,
                  "servers:\n"
                  "  - {name: pool, dns: \"pool.test:9\", region: eu,\n"
                  "     serves: [406550D87609ECAE021A83EF2C1F372C08F42699]}\n");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    dns_stop(&D);
    tp_rmtree(dir);
    return 0;
}

static kl_router *router(int floor_ms, int ceiling_ms)
{
    kl_router_opts o = rh_opts(table);
    o.dns_server = server;
    o.dns_refresh_ns =
        100 * KL_NS_PER_MS; /* what a fixed interval would have done */
    o.dns_ttl_floor_ns = (uint64_t)floor_ms * KL_NS_PER_MS;
    o.dns_ttl_ceiling_ns = (uint64_t)ceiling_ms * KL_NS_PER_MS;
    o.connect_timeout_ns = 1000 * KL_NS_PER_MS;
    o.ping_interval_ns = 1000 * KL_NS_PER_MS;
    return rh_router(&o);
}

/* Routes in the table (remotes that left it are draining, not counted). */
static unsigned routes(kl_router *r)
{
    kl_remote_stats st[8];
    size_t n = kl_router_remote_stats(r, st, 8), in = 0;
    for (size_t i = 0; i < n && i < 8; i++)
        in += st[i].in_table;
    return (unsigned)in;
}

/* Waits up to ms for the table to hold want routes; how long it took. */
static double wait_routes(kl_router *r, unsigned want, int ms)
{
    double t0 = td_now_ms();
    while (td_now_ms() - t0 < ms) {
        if (routes(r) == want)
            return td_now_ms() - t0;
        fp_sleep_ms(20);
    }
    fail_msg("%u routes wanted, %u after %d ms", want, routes(r), ms);
    return -1;
}

static void test_ttl_followed(void **state)
{
    (void)state;
    static const uint8_t one[] = {2}, two[] = {2, 3};
    dns_set(&D, one, 1, 3, false);
    unsigned q0 = dns_a_queries(&D);
    kl_router *r = router(200, 60000);
    double t0 = td_now_ms();
    assert_int_equal(routes(r), 1);
    assert_int_equal(dns_a_queries(&D), q0 + 1);
    /* the answer changes at once, but the record said 3 s */
    dns_set(&D, two, 2, 1, false);
    fp_sleep_ms(2000);
    assert_int_equal(dns_a_queries(&D), q0 + 1); /* not every 100 ms */
    assert_int_equal(routes(r), 1);
    wait_routes(r, 2, 4000);
    double at = td_now_ms() - t0;
    fprintf(stderr,
            "TTL 3 s: the new address in the table after %.0f ms (%u "
            "queries)\n",
            at, dns_a_queries(&D) - q0);
    assert_true(at >= 2900);
    /* TTL 1 now: re-asked about once a second */
    unsigned q1 = dns_a_queries(&D);
    fp_sleep_ms(2500);
    unsigned asked = dns_a_queries(&D) - q1;
    fprintf(stderr, "TTL 1 s: %u queries in 2.5 s\n", asked);
    assert_true(asked >= 1 && asked <= 4);

    /* the name server fails: the routes stay, the name is retried (every
     * dns_refresh_ms, within the floor) */
    dns_set(&D, two, 2, 1, true);
    unsigned q2 = dns_a_queries(&D);
    fp_sleep_ms(2000);
    unsigned retries = dns_a_queries(&D) - q2;
    kl_router_stats rs;
    kl_router_get_stats(r, &rs);
    fprintf(stderr,
            "SERVFAIL: %u queries in 2 s, %llu failed builds, %u "
            "routes kept\n",
            retries, (unsigned long long)rs.reload_errors, routes(r));
    assert_int_equal(routes(r), 2);
    assert_true(rs.reload_errors >= 1);
    assert_true(retries >= 2);
    assert_true(retries <= 24); /* 200 ms floor: ~10 in 2 s, each maybe
                                 * asked twice by the resolver */
    /* it answers again, with one address */
    dns_set(&D, one, 1, 1, false);
    wait_routes(r, 1, 3000);
    kl_router_free(r);
}

static void test_ceiling_and_floor(void **state)
{
    (void)state;
    static const uint8_t one[] = {2};
    /* TTL one hour, ceiling 500 ms: asked again about twice a second */
    dns_set(&D, one, 1, 3600, false);
    kl_router *r = router(100, 500);
    unsigned q0 = dns_a_queries(&D);
    fp_sleep_ms(2000);
    unsigned asked = dns_a_queries(&D) - q0;
    fprintf(stderr, "TTL 3600 s, ceiling 500 ms: %u queries in 2 s\n", asked);
    assert_true(asked >= 2 && asked <= 6);
    kl_router_free(r);
    /* TTL 0, floor 700 ms: not more than about every 700 ms */
    dns_set(&D, one, 1, 0, false);
    r = router(700, 60000);
    q0 = dns_a_queries(&D);
    fp_sleep_ms(2000);
    asked = dns_a_queries(&D) - q0;
    fprintf(stderr, "TTL 0, floor 700 ms: %u queries in 2 s\n", asked);
    assert_true(asked >= 1 && asked <= 4);
    kl_router_free(r);
}

static void test_bad_server_option(void **state)
{
    (void)state;
    kl_router_opts o = rh_opts(table);
    o.dns_server = "localhost:53";
    kl_router *r = NULL;
    char err[512];
    assert_int_equal(kl_router_new(&o, &r, err, sizeof err), KL_E_CONFIG);
    assert_null(r);
    assert_non_null(strstr(err, "router_dns_server"));
    assert_non_null(strstr(err, "IPv4:port"));
    o.dns_server = server;
    o.dns_ttl_floor_ns = 10000 * KL_NS_PER_MS;
    o.dns_ttl_ceiling_ns = 5000 * KL_NS_PER_MS;
    assert_int_equal(kl_router_new(&o, &r, err, sizeof err), KL_E_CONFIG);
    assert_null(r);
    assert_non_null(strstr(err, "router_dns_ttl_floor (10000 ms) is above"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ttl_followed),
        cmocka_unit_test(test_ceiling_and_floor),
        cmocka_unit_test(test_bad_server_option),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
