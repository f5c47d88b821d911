/* SPDX-License-Identifier: Apache-2.0 */
/* Abuse resistance at the connection level: a slow-loris client,
 * a flood of TCP connects without TLS, 10,000 connections opened at once,
 * and the connection cap. Each is bounded or disconnected while a
 * well-behaved client on the side keeps its latency (measured before and
 * during; bounds are generous for a shared 2-core machine). Past
 * max_handshaking, new connections wait (the listener stops accepting) and
 * are served as soon as slots free, on whichever shard they free. */
#include <pthread.h>
#include <stdatomic.h>

#define HA_ONE_KEY_DAEMON
#include "test_abuse_common.h"

static int setup_loris(void **state)
{
    static const char *extra[] = {"--handshake-timeout=2s",
                                  "--max-handshaking=60", NULL};
    start("abuse-loris", extra);
    return 0;
}

/* 40 clients sending one byte of a TLS record a second never finish their
 * handshake: each is closed at the handshake timeout (2 s), not kept alive
 * by its trickle. */
static void test_slow_loris(void **state)
{
    enum { N = 40 };
    static const uint8_t hello[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01,
                                    0x00, 0x01, 0xfc, 0x03, 0x03, 0x00};
    double before = baseline();
    ha_side s;
    ha_side_start(&s, &d, ec_ski, 2);
    int fd[N];
    double opened = td_now_ms(), closed_at[N];
    for (int i = 0; i < N; i++) {
        fd[i] = ha_tcp(d.port, false);
        assert_true(fd[i] >= 0);
        closed_at[i] = 0;
    }
    int open_left = N;
    for (int sec = 0; sec < 8 && open_left > 0; sec++) {
        for (int i = 0; i < N; i++)
            if (!closed_at[i])
                (void)send(fd[i], &hello[sec % sizeof hello], 1,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
        /* check every 50 ms within this second */
        for (int t = 0; t < 20; t++) {
            for (int i = 0; i < N; i++)
                if (!closed_at[i] && ha_peer_closed(fd[i])) {
                    closed_at[i] = td_now_ms() - opened;
                    open_left--;
                }
            ha_sleep_ms(50);
        }
    }
    double during = ha_side_stop(&s, "during slow loris");
    double first = 1e9, last = 0;
    for (int i = 0; i < N; i++) {
        close(fd[i]);
        if (!closed_at[i])
            fail_msg("slow-loris connection %d still open after 8 s", i);
        first = closed_at[i] < first ? closed_at[i] : first;
        last = closed_at[i] > last ? closed_at[i] : last;
    }
    print_message("slow-loris connections closed after %.0f..%.0f ms "
                  "(handshake timeout 2 s)\n",
                  first, last);
    assert_true(first >= 1500);
    assert_true(last <= 4500);
    ha_expect_latency(before, during, 50, 5);
    char *log = td_read_log(&d);
    assert_non_null(strstr(log, "TLS handshake timed out"));
    free(log);
}

static int setup_flood(void **state)
{
    static const char *extra[] = {"--handshake-timeout=2s",
                                  "--max-handshaking=100", NULL};
    start("abuse-flood", extra);
    return 0;
}

/* Clients that connect over TCP and never speak TLS, as fast as they can
 * for 3 s, holding up to 2000 connections: at most max_handshaking are in
 * their handshake (closed at its timeout), the rest wait in the listen
 * backlog or are gone before their turn, the server keeps serving, and
 * afterwards a new client connects at once. */
static void test_tcp_flood(void **state)
{
    enum { HOLD = 2000 };
    ha_raise_nofile();
    double before = baseline();
    ha_side s;
    ha_side_start(&s, &d, ec_ski, 2);
    int fds[HOLD];
    for (int i = 0; i < HOLD; i++)
        fds[i] = -1;
    size_t made = 0, refused = 0, next = 0;
    double end = td_now_ms() + 3000;
    while (td_now_ms() < end) {
        for (int b = 0; b < 50; b++) {
            if (fds[next] >= 0) {
                if (ha_peer_closed(fds[next]))
                    refused++;
                close(fds[next]);
            }
            fds[next] = ha_tcp(d.port, true);
            made += fds[next] >= 0;
            next = (next + 1) % HOLD;
        }
        ha_sleep_ms(1);
    }
    ha_sleep_ms(200);
    for (int i = 0; i < HOLD; i++)
        if (fds[i] >= 0) {
            refused += ha_peer_closed(fds[i]);
            close(fds[i]);
        }
    double during = ha_side_stop(&s, "during TCP flood");
    print_message("TCP flood: %zu connects in 3 s, %zu seen closed by the "
                  "server\n",
                  made, refused);
    assert_true(made >= 2000);
    ha_expect_latency(before, during, 50, 5);
    /* the held connections are gone: a new client is served at once */
    ha_sleep_ms(300);
    double t0 = td_now_ms();
    kl_client *c = td_connect(&d);
    assert_true(ha_sign_ms(c, ec_ski) >= 0);
    kl_client_close(c);
    print_message("new client after the flood: served in %.1f ms\n",
                  td_now_ms() - t0);
    char *log = td_read_log(&d);
    assert_non_null(strstr(log, "max_handshaking reached"));
    free(log);
}

static int setup_10k(void **state)
{
    /* one source: the per-source cap is raised to the global one, which
     * is what this test measures (test_abuse_sources.c has the other) */
    static const char *extra[] = {"--handshake-timeout=3s",
                                  "--max-handshaking-per-source=1000", NULL};
    start("abuse-10k", extra);
    return 0;
}

/* 10,000 connections that never speak TLS, opened at once (defaults:
 * max_connections 10000, max_handshaking 1000; handshake timeout 3 s): the
 * side client keeps being served; 1000 at a time are in their handshake
 * and closed at its timeout, the others wait in the listen backlog
 * (docs/SECURITY.md: none is closed at accept) - so about 1000 are closed at 3
 * s, 1000 more at 6 s. */
static void test_10k_connections(void **state)
{
    enum { N = 10000 };
    long lim = ha_raise_nofile();
    if (lim < N + 100) {
        print_message("open-file limit %ld: skipped (needs %d)\n", lim,
                      N + 100);
        skip();
    }
    double before = baseline();
    ha_side s;
    ha_side_start(&s, &d, ec_ski, 2);
    int *fd = calloc(N, sizeof *fd);
    double *closed_at = calloc(N, sizeof *closed_at);
    assert_non_null(fd);
    assert_non_null(closed_at);
    double t0 = td_now_ms();
    int made = 0;
    for (int i = 0; i < N; i++) {
        fd[i] = ha_tcp(d.port, true);
        made += fd[i] >= 0;
    }
    double open_ms = td_now_ms() - t0;
    int closed = 0;
    double until = t0 + 8000;
    while (td_now_ms() < until) {
        for (int i = 0; i < N; i++)
            if (fd[i] >= 0 && !closed_at[i] && ha_peer_closed(fd[i])) {
                closed_at[i] = td_now_ms() - t0;
                closed++;
            }
        if (closed >= made)
            break;
        ha_sleep_ms(100);
    }
    int fast = 0, by5 = 0;
    for (int i = 0; i < N; i++) {
        if (closed_at[i] && closed_at[i] < 2500)
            fast++;
        if (closed_at[i] && closed_at[i] < 5000)
            by5++;
        if (fd[i] >= 0)
            close(fd[i]);
    }
    double during = ha_side_stop(&s, "during 10k connections");
    print_message("10k: %d connects issued in %.0f ms; closed by the "
                  "server: %d within 2.5 s, %d within 5 s, %d within 8 s\n",
                  made, open_ms, fast, by5, closed);
    free(fd);
    free(closed_at);
    assert_int_equal(made, N);
    /* nobody is closed at accept: the first closes are handshake
     * timeouts, max_handshaking (1000) of them per timeout period */
    assert_true(fast <= 20);
    assert_true(by5 >= 1000 - 20 && by5 <= 1000 + 20);
    /* the next 1000 after the first timeouts (fewer when the listen
     * backlog was small and dropped SYNs come back late), never more */
    assert_true(closed >= 1500 && closed <= 2000 + 40);
    ha_expect_latency(before, during, 50, 5);
}

static int setup_wait(void **state)
{
    static const char *extra[] = {"--handshake-timeout=5s",
                                  "--max-handshaking=4", NULL};
    start("abuse-wait", extra);
    return 0;
}

enum { WAITERS = 8 };

typedef struct waiter {
    const ha_opts *h;
    double done_ms; /* td_now_ms() when its signature came back */
    bool ok;
} waiter;

static atomic_int waiters_done;

static void *waiter_main(void *arg)
{
    waiter *w = arg;
    kl_client *c = ha_connect(w->h);
    if (c) {
        w->ok = ha_sign_ms(c, ec_ski) >= 0;
        kl_client_close(c);
    }
    w->done_ms = td_now_ms();
    atomic_fetch_add(&waiters_done, 1);
    return NULL;
}

/* Accept back-pressure: 4 silent connections hold every
 * handshake slot (max_handshaking 4). 8 clients connecting now are not
 * closed: they wait - for as long as the slots are held - and each is
 * served once the silent ones go, long before the handshake timeout (5 s).
 * Two shards, 8 clients: both listeners stop, and slots freed on one
 * shard must wake the other. */
static void test_wait_for_slot(void **state)
{
    enum { HOLD = 4 };
    int fd[HOLD];
    for (int i = 0; i < HOLD; i++) {
        fd[i] = ha_tcp(d.port, false);
        assert_true(fd[i] >= 0);
    }
    ha_sleep_ms(200); /* accepted: every slot taken */
    atomic_store(&waiters_done, 0);
    static ha_opts h; /* made here: paths copied for the threads */
    ha_opts_make(&h, &d);
    h.o.connect_timeout_ms = 8000;
    waiter w[WAITERS] = {0};
    pthread_t th[WAITERS];
    for (int i = 0; i < WAITERS; i++) {
        w[i].h = &h;
        assert_int_equal(pthread_create(&th[i], NULL, waiter_main, &w[i]), 0);
    }
    ha_sleep_ms(1000);
    /* all still waiting, none refused */
    assert_int_equal(atomic_load(&waiters_done), 0);
    for (int i = 0; i < HOLD; i++)
        assert_false(ha_peer_closed(fd[i]));
    double released = td_now_ms();
    for (int i = 0; i < HOLD; i++)
        close(fd[i]);
    double last = 0;
    for (int i = 0; i < WAITERS; i++) {
        pthread_join(th[i], NULL);
        assert_true(w[i].ok);
        double ms = w[i].done_ms - released;
        last = ms > last ? ms : last;
    }
    print_message("8 clients past max_handshaking (4) waited 1 s, then all "
                  "were served within %.0f ms of the slots freeing\n",
                  last);
    assert_true(last < 2000);
    char *log = td_read_log(&d);
    assert_non_null(strstr(log, "max_handshaking reached (4): new "
                                "connections wait in the listen backlog"));
    free(log);
}

static int setup_cap(void **state)
{
    static const char *extra[] = {"--max-connections=20", NULL};
    start("abuse-cap", extra);
    return 0;
}

/* max_connections 20: 20 clients connect, the next ones are refused at
 * once (not left waiting), and a slot freed is usable again. */
static void test_max_connections(void **state)
{
    enum { N = 25 };
    kl_client *c[N];
    int ok = 0, refused = 0;
    for (int i = 0; i < N; i++) {
        kl_client_opts o = td_client_opts(&d);
        o.connect_timeout_ms = 3000;
        char err[256];
        double t0 = td_now_ms();
        c[i] = NULL;
        if (kl_client_connect(&o, &c[i], err, sizeof err) == KL_OK) {
            ok++;
            continue;
        }
        double ms = td_now_ms() - t0;
        refused++;
        if (ms > 1000)
            fail_msg("connection %d refused only after %.0f ms", i, ms);
    }
    print_message("max_connections 20: %d connected, %d refused\n", ok,
                  refused);
    assert_int_equal(ok, 20);
    assert_int_equal(refused, N - 20);
    for (int i = 0; i < N; i++)
        if (c[i])
            assert_true(ha_sign_ms(c[i], ec_ski) >= 0);
    kl_client_close(c[0]);
    c[0] = NULL;
    ha_sleep_ms(100);
    kl_client *again = td_connect(&d);
    assert_true(ha_sign_ms(again, ec_ski) >= 0);
    kl_client_close(again);
    for (int i = 0; i < N; i++)
        kl_client_close(c[i]);
    char *log = td_read_log(&d);
    assert_non_null(strstr(log, "max_connections reached"));
    free(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_slow_loris, setup_loris, stop),
        cmocka_unit_test_setup_teardown(test_tcp_flood, setup_flood, stop),
        cmocka_unit_test_setup_teardown(test_10k_connections, setup_10k, stop),
        cmocka_unit_test_setup_teardown(test_wait_for_slot, setup_wait, stop),
        cmocka_unit_test_setup_teardown(test_max_connections, setup_cap, stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
