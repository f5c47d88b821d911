/* SPDX-License-Identifier: Apache-2.0 */
/* Connections of libkeyless (client issue): several key servers per
 * target with failover - a server that refuses connections is skipped, a
 * server killed mid-run leaves every request answered (result or error)
 * and the later ones go to the survivor, a server that stops answering is
 * found out by the idle ping - and idle pings keep a healthy pooled
 * connection without reconnecting. */
#include "daemon.h"
#include "net.h"
#include "pki.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char *dir;
static uint8_t ec_ski[20];

static int setup(void **state)
{
    dir = tp_tempdir("client-failover");
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    EVP_PKEY *pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    tp_ski(pub, ec_ski);
    EVP_PKEY_free(pub);
    return 0;
}

static int teardown(void **state)
{
    tp_rmtree(dir);
    return 0;
}

static void start(td_daemon *d, const char *name)
{
    td_opts o = {.name = name, .key_dirs = dir};
    td_start(d, &o);
}

typedef struct outcome {
    int calls;
    kl_status status;
    uint8_t opcode;
    int server;
    double submitted_ms;
} outcome;

static void on_result(void *arg, const kl_result *res)
{
    outcome *o = arg;
    o->calls++;
    o->status = res->status;
    o->opcode = res->opcode;
    o->server = res->server;
}

static kl_request_spec sign_spec(void)
{
    static const uint8_t digest[32] = {7};
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                         .payload = digest,
                         .payload_len = 32,
                         .ski = ec_ski};
    return s;
}

static void pump(kl_target *t, int ms)
{
    struct pollfd p = {.fd = kl_async_fd(t), .events = POLLIN};
    (void)poll(&p, 1, ms);
    assert_int_equal(kl_async_process(t), KL_OK);
}

static void test_refused_server_is_skipped(void **state)
{
    td_daemon b;
    start(&b, "failover-b");
    char first[32], second[32];
    snprintf(first, sizeof first, "127.0.0.1:%u", (unsigned)tn_free_port());
    snprintf(second, sizeof second, "127.0.0.1:%u", (unsigned)b.port);
    const char *servers[] = {first, second};
    td_addrs addrs;
    const td_daemon *ds[] = {&b};
    kl_target_opts o = td_target_opts(ds, 1, &addrs);
    o.servers = servers;
    o.nservers = 2;
    kl_target *t = NULL;
    assert_int_equal(kl_target_new(&o, &t, NULL, 0), KL_OK);
    kl_request_spec s = sign_spec();
    kl_client_result r;
    assert_int_equal(kl_target_call(t, &s, 3000, &r), KL_OK);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    kl_client_result_free(&r);
    assert_int_equal(kl_target_active_server(t), 1);
    kl_target_stats st;
    kl_target_get_stats(t, &st);
    assert_int_equal(st.connect_failures, 1);
    assert_int_equal(st.connects, 1);
    assert_int_equal(st.written, 1); /* nothing was written to the dead one */
    kl_target_free(t);
    assert_int_equal(td_stop(&b, 0), 0);
}

/* kl_target_connect: up front, past the dead server to the live one, and
 * the connection described; with no live server, the last failure named. */
static void test_connect_ahead(void **state)
{
    td_daemon b;
    start(&b, "failover-c");
    char dead[32], live[32];
    snprintf(dead, sizeof dead, "127.0.0.1:%u", (unsigned)tn_free_port());
    snprintf(live, sizeof live, "127.0.0.1:%u", (unsigned)b.port);
    const char *servers[] = {dead, live};
    td_addrs addrs;
    const td_daemon *ds[] = {&b};
    kl_target_opts o = td_target_opts(ds, 1, &addrs);
    o.servers = servers;
    o.nservers = 2;
    kl_target *t = NULL;
    char err[256] = "x";
    kl_conn_info ci;
    assert_int_equal(kl_target_new(&o, &t, NULL, 0), KL_OK);
    kl_target_conn_info(t, &ci);
    assert_int_equal(ci.server, -1); /* nothing opened before use */
    assert_int_equal(kl_target_connect(t, 3000, err, sizeof err), KL_OK);
    assert_string_equal(err, "");
    kl_target_conn_info(t, &ci);
    assert_int_equal(ci.server, 1);
    assert_int_equal(ci.port, b.port);
    assert_string_equal(ci.tls_version, "TLSv1.3");
    assert_non_null(strstr(ci.cipher, "TLS_"));
    assert_non_null(strstr(ci.last_error, "refused"));
    kl_target_stats st;
    kl_target_get_stats(t, &st);
    assert_int_equal(st.written, 0); /* connecting wrote no request */
    assert_int_equal(st.connects, 1);
    kl_target_free(t);

    o.tls12_only = true;
    assert_int_equal(kl_target_new(&o, &t, NULL, 0), KL_OK);
    assert_int_equal(kl_target_connect(t, 3000, err, sizeof err), KL_OK);
    kl_target_conn_info(t, &ci);
    assert_string_equal(ci.tls_version, "TLSv1.2");
    assert_string_equal(ci.cipher, "ECDHE-ECDSA-AES256-GCM-SHA384");
    kl_target_free(t);

    o.tls12_only = false;
    o.nservers = 1; /* the dead one only */
    assert_int_equal(kl_target_new(&o, &t, NULL, 0), KL_OK);
    double t0 = td_now_ms();
    assert_int_equal(kl_target_connect(t, 3000, err, sizeof err), KL_E_IO);
    assert_true(td_now_ms() - t0 < 2000); /* a refusal is not a timeout */
    char port_part[48];
    snprintf(port_part, sizeof port_part, "port %s", strchr(dead, ':') + 1);
    assert_non_null(strstr(err, port_part));
    assert_non_null(strstr(err, "refused"));
    kl_target_free(t);
    assert_int_equal(td_stop(&b, 0), 0);
}

/* A request to servers that all refuse fails at once with the refusal,
 * not at its deadline as a timeout (docs/PROVIDER.md "Failures"). */
static void test_all_refused_fails_fast(void **state)
{
    (void)state;
    char d1[32], d2[32];
    snprintf(d1, sizeof d1, "127.0.0.1:%u", (unsigned)tn_free_port());
    snprintf(d2, sizeof d2, "127.0.0.1:%u", (unsigned)tn_free_port());
    const char *servers[] = {d1, d2};
    kl_target_opts o = {.servers = servers,
                        .cert_file = tp_path("client.crt"),
                        .key_file = tp_path("client.key"),
                        .ca_file = tp_path("ca.crt")};
    for (size_t n = 1; n <= 2; n++) {
        o.nservers = n;
        kl_target *t = NULL;
        assert_int_equal(kl_target_new(&o, &t, NULL, 0), KL_OK);
        kl_request_spec s = sign_spec();
        kl_client_result r;
        /* twice: the second call finds every server in backoff */
        for (int round = 0; round < 2; round++) {
            double t0 = td_now_ms();
            assert_int_equal(kl_target_call(t, &s, 3000, &r), KL_E_IO);
            double took = td_now_ms() - t0;
            assert_true(took < 1000);
        }
        kl_conn_info ci;
        kl_target_conn_info(t, &ci);
        assert_non_null(strstr(ci.last_error, "refused"));
        kl_target_stats st;
        kl_target_get_stats(t, &st);
        assert_int_equal(st.unreachable, 2);
        assert_int_equal(st.timed_out + st.expired_unsent, 0);
        assert_int_equal(st.written, 0);
        kl_target_free(t);
    }
}

#define NREQ 600
#define KILL_AT 200

static void test_kill_mid_run(void **state)
{
    static outcome out[NREQ];
    td_daemon a, b;
    start(&a, "failover-a");
    start(&b, "failover-b");
    const td_daemon *ds[] = {&a, &b};
    kl_target *t = td_target(ds, 2, NULL);
    kl_request_spec s = sign_spec();
    memset(out, 0, sizeof out);
    double kill_ms = 0;
    /* 600 requests, ~8 in flight at a time; server A dies at request 200 */
    int next = 0;
    double end = td_now_ms() + 30000;
    for (;;) {
        int done = 0, inflight = 0;
        for (int i = 0; i < next; i++) {
            done += out[i].calls > 0;
            inflight += out[i].calls == 0;
        }
        if (done == NREQ)
            break;
        assert_true(td_now_ms() < end);
        while (next < NREQ && inflight < 8) {
            if (next == KILL_AT && !kill_ms) {
                td_signal(&a, SIGKILL);
                kill_ms = td_now_ms();
            }
            out[next].submitted_ms = td_now_ms();
            assert_int_equal(
                kl_async_submit(t, &s, 3000, on_result, &out[next], NULL),
                KL_OK);
            next++;
            inflight++;
        }
        pump(t, 5);
    }
    int ok = 0, errors = 0, on_b_after = 0, late_on_a = 0;
    for (int i = 0; i < NREQ; i++) {
        assert_int_equal(out[i].calls, 1);
        if (out[i].status == KL_OK) {
            assert_int_equal(out[i].opcode, KL_OP_RESPONSE);
            ok++;
        } else {
            /* a connection error, never a hang until the deadline */
            assert_true(out[i].status == KL_E_CLOSED ||
                        out[i].status == KL_E_TLS || out[i].status == KL_E_IO);
            errors++;
        }
        if (i < KILL_AT - 8)
            assert_int_equal(out[i].server, 0);
        if (i >= KILL_AT + 8 && out[i].status == KL_OK) {
            on_b_after += out[i].server == 1;
            late_on_a += out[i].server == 0;
        }
    }
    kl_target_stats st;
    kl_target_get_stats(t, &st);
    fprintf(stderr,
            "failover: %d answered, %d errors, %llu retries, %llu written, "
            "%llu connects\n",
            ok, errors, (unsigned long long)st.retries,
            (unsigned long long)st.written, (unsigned long long)st.connects);
    /* everything after the switch went to the survivor */
    assert_int_equal(late_on_a, 0);
    assert_int_equal(on_b_after, NREQ - KILL_AT - 8);
    assert_int_equal(kl_target_active_server(t), 1);
    /* only the requests in flight at the kill could fail */
    assert_true(errors <= 8);
    assert_true(st.written <= NREQ + st.retries);
    assert_true(st.retries * 10 <= NREQ);
    kl_target_free(t);
    int rc = td_wait(&a, 5000);
    assert_int_equal(rc, 128 + SIGKILL);
    assert_int_equal(td_stop(&b, 0), 0);
}

static void test_idle_pings(void **state)
{
    td_daemon a;
    start(&a, "failover-ping");
    const td_daemon *ds[] = {&a};
    kl_target_opts ov = {.ping_interval_ms = 100, .ping_timeout_ms = 500};
    kl_target *t = td_target(ds, 1, &ov);
    kl_request_spec s = sign_spec();
    kl_client_result r;
    assert_int_equal(kl_target_call(t, &s, 3000, &r), KL_OK);
    kl_client_result_free(&r);
    double end = td_now_ms() + 550;
    while (td_now_ms() < end)
        pump(t, 20);
    kl_target_stats st;
    kl_target_get_stats(t, &st);
    assert_true(st.pings >= 3 && st.pings <= 6);
    assert_int_equal(st.connects, 1);
    assert_int_equal(st.connect_failures, 0);
    assert_int_equal(kl_target_active_server(t), 0);
    /* the pinged connection is the one still used */
    assert_int_equal(kl_target_call(t, &s, 3000, &r), KL_OK);
    kl_client_result_free(&r);
    kl_target_get_stats(t, &st);
    assert_int_equal(st.connects, 1);
    kl_target_free(t);
    assert_int_equal(td_stop(&a, 0), 0);
}

/* A server that stops answering (SIGSTOP: its connections stay open) is
 * found out by the unanswered ping; requests move to the next server. */
static void test_hung_server_found_by_ping(void **state)
{
    td_daemon a, b;
    start(&a, "failover-hung-a");
    start(&b, "failover-hung-b");
    const td_daemon *ds[] = {&a, &b};
    kl_target_opts ov = {.ping_interval_ms = 100, .ping_timeout_ms = 200};
    kl_target *t = td_target(ds, 2, &ov);
    kl_request_spec s = sign_spec();
    kl_client_result r;
    assert_int_equal(kl_target_call(t, &s, 3000, &r), KL_OK);
    kl_client_result_free(&r);
    assert_int_equal(kl_target_active_server(t), 0);
    td_freeze(&a);
    double end = td_now_ms() + 600;
    while (td_now_ms() < end && kl_target_active_server(t) == 0)
        pump(t, 20);
    assert_int_not_equal(kl_target_active_server(t), 0);
    assert_int_equal(kl_target_call(t, &s, 3000, &r), KL_OK);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    kl_client_result_free(&r);
    assert_int_equal(kl_target_active_server(t), 1);
    kl_target_free(t);
    td_signal(&a, SIGCONT);
    assert_int_equal(td_stop(&a, 0), 0);
    assert_int_equal(td_stop(&b, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_server_is_skipped),
        cmocka_unit_test(test_all_refused_fails_fast),
        cmocka_unit_test(test_connect_ahead),
        cmocka_unit_test(test_kill_mid_run),
        cmocka_unit_test(test_idle_pings),
        cmocka_unit_test(test_hung_server_found_by_ping),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
