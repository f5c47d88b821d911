/* SPDX-License-Identifier: Apache-2.0 */
/* keylessd with geo routing (docs/ROUTING.md), through real
 * daemons and real clients:
 * - a key held here is served here, one held by a remote is forwarded and
 *   its signature verifies, an SKI nobody has is `key not found`;
 * - a forwarded request keeps SKI, opcode, payload, compliance region,
 *   request context (request_id, trace; hops + 1, deadline_ms) and span
 *   context, as an upstream written in this test sees it;
 * - a three-hop loop in the tables (A -> B -> C -> A) is stopped by the hop
 *   limit: `remote configuration error`, with exactly one hop refused;
 * - a client that disconnects cancels its forwarded requests: nothing more
 *   reaches any remote for them (counted at the proxies), while the same
 *   requests from a client that stays are retried on the second remote. */
#include "test_router_server_common.h"
#include "net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "tls/tls.h"

static char *tmp;
static uint8_t ski_p256[20], ski_p384[20];

static int setup(void **state)
{
    (void)state;
    tmp = tp_tempdir("router-server");
    rs_ski_of("ecdsa-p256", ski_p256);
    rs_ski_of("ecdsa-p384", ski_p384);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tp_rmtree(tmp);
    return 0;
}

static void table_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s.yaml", tmp, name);
}

/* A table with one server line per (name, port) pair serving skihex. */
static void write_table1(const char *path, const char *skihex, const char *name,
                         unsigned port, const char *extra)
{
    char text[2048];
    snprintf(text, sizeof text,
             "region_codes: {2: eu, 3: us}\n"
             "servers:\n"
             "  - {name: %s, address: \"127.0.0.1:%u\", region: eu, "
             "serves: [%s]}\n%s",
             name, port, skihex, extra ? extra : "");
    fp_write_file(path, text);
}

static void expect_ok(const td_daemon *d, kl_client *c, const uint8_t *ski,
                      const char *verify_with)
{
    kl_request_spec s = rs_sign_spec(ski);
    kl_client_result r;
    td_call(d, c, &s, &r);
    if (r.opcode != KL_OP_RESPONSE) {
        td_dump_log(d);
        fail_msg("expected a signature, got opcode 0x%02x error 0x%02x",
                 r.opcode, r.error);
    }
    assert_true(rs_verify(verify_with, r.payload, r.payload_len));
    kl_client_result_free(&r);
}

/* ---- local, forwarded, unknown ---------------------------------------- */

static void test_local_and_forwarded(void **state)
{
    (void)state;
    uint8_t s256[20], s384[20];
    char *kr = rs_keydir("rs-remote", "ecdsa-p256", s256);
    char *kl = rs_keydir("rs-local", "ecdsa-p384", s384);
    td_daemon remote, local;
    rs_start(&remote, "rs-remote", kr, NULL, NULL);
    char table[1100];
    table_path(table, sizeof table, "basic");
    write_table1(table, tp_ski_hex(s256), "r1", remote.port, NULL);
    rs_start(&local, "rs-local", kl, table, NULL);

    kl_client *c = td_connect(&local);
    expect_ok(&local, c, s384, "ecdsa-p384"); /* held here */
    expect_ok(&local, c, s256, "ecdsa-p256"); /* forwarded */
    uint8_t none[20];
    memset(none, 0x5a, sizeof none);
    kl_request_spec s = rs_sign_spec(none);
    td_expect_error(&local, c, &s, KL_ERR_KEY_NOT_FOUND);
    td_expect_ping(&local, c);
    kl_client_close(c);

    assert_int_equal(td_stop(&local, 0), 0);
    assert_int_equal(td_stop(&remote, 0), 0);
    /* the remote served exactly the one forwarded request */
    assert_int_equal(rs_log_count(&local, "router: 1 forwarded, 1 answered"),
                     1);
    tp_rmtree(kr);
    tp_rmtree(kl);
}

/* ---- access lists apply to forwarded keys ----------------------------- */

/* A client the access lists do not allow a key gets the same refusal
 * whether the key is held here or elsewhere - `key not found`, as for a key
 * nobody has - and a refused remote key is never forwarded. */
static void test_acl_applies_to_forwarded_keys(void **state)
{
    (void)state;
    uint8_t s256[20], s384[20], srsa[20];
    /* the remote holds P-256 (allowed to everyone) and P-384 (allowed to
     * a client that does not exist); here: RSA (the same) */
    char *kr = rs_keydir("rs-acl-remote", "ecdsa-p256", s256);
    tp_copy_key(kr, tp_path("keys/ecdsa-p384.key"));
    rs_ski_of("ecdsa-p384", s384);
    char *kl = rs_keydir("rs-acl-local", "rsa-2048", srsa);
    td_daemon remote, local;
    rs_start(&remote, "rs-acl-remote", kr, NULL, NULL);
    char table[1100], extra_rows[256], acl[1100], text[1024], flag[1200];
    table_path(table, sizeof table, "acl");
    snprintf(extra_rows, sizeof extra_rows,
             "  - {name: r2, address: \"127.0.0.1:%u\", region: eu, "
             "serves: [%s]}\n",
             remote.port, tp_ski_hex(s384));
    write_table1(table, tp_ski_hex(s256), "r1", remote.port, extra_rows);
    snprintf(acl, sizeof acl, "%s/access.yaml", tmp);
    int n =
        snprintf(text, sizeof text, "- clients: [\"*\"]\n  keys: [ski:%s]\n",
                 tp_ski_hex(s256));
    n += snprintf(text + n, sizeof text - (size_t)n,
                  "- clients: [cn:nobody-here]\n  keys: [ski:%s, ",
                  tp_ski_hex(s384));
    snprintf(text + n, sizeof text - (size_t)n, "ski:%s]\n", tp_ski_hex(srsa));
    fp_write_file(acl, text);
    snprintf(flag, sizeof flag, "--access-file=%s", acl);
    const char *extra[] = {flag, NULL};
    rs_start(&local, "rs-acl-local", kl, table, extra);

    kl_client *c = td_connect(&local);
    expect_ok(&local, c, s256, "ecdsa-p256"); /* allowed: forwarded */
    kl_request_spec s = rs_sign_spec(s384);   /* refused, held elsewhere */
    td_expect_error(&local, c, &s, KL_ERR_KEY_NOT_FOUND);
    s = rs_sign_spec(srsa); /* refused, held here */
    td_expect_error(&local, c, &s, KL_ERR_KEY_NOT_FOUND);
    uint8_t none[20];
    memset(none, 0x5a, sizeof none); /* nobody has it */
    s = rs_sign_spec(none);
    td_expect_error(&local, c, &s, KL_ERR_KEY_NOT_FOUND);
    kl_client_close(c);

    assert_int_equal(td_stop(&local, 0), 0);
    assert_int_equal(td_stop(&remote, 0), 0);
    /* both refusals logged alike, with the reason */
    assert_int_equal(rs_log_count(&local, "refused by the access lists"), 2);
    char line[128];
    snprintf(line, sizeof line, "%s: refused by the access lists",
             tp_ski_hex(s384));
    assert_int_equal(rs_log_count(&local, line), 1);
    /* only the allowed request left this server */
    assert_int_equal(rs_log_count(&local, "router: 1 forwarded, 1 answered"),
                     1);
    tp_rmtree(kr);
    tp_rmtree(kl);
}

/* ---- what a forwarded request carries --------------------------------- */

/* An upstream key server written here: mutual TLS with the test PKI,
 * pongs for pings, and for anything else it keeps the request and answers
 * a fixed payload. */
typedef struct upstream {
    int lfd;
    uint16_t port;
    kl_tls_ctx *ctx;
    pthread_t th;
    atomic_bool stop;
    pthread_mutex_t mu;
    uint8_t last[4096];
    size_t last_len;
    unsigned requests, bad;
} upstream;

static const uint8_t up_answer[] = "signature-from-upstream";

static bool up_write(kl_tls_conn *t, const uint8_t *p, size_t len)
{
    while (len) {
        size_t n = 0;
        if (kl_tls_write(t, p, len, &n) != KL_IO_OK)
            return false;
        p += n;
        len -= n;
    }
    return true;
}

static void up_serve(upstream *u, int fd)
{
    kl_tls_conn *t = kl_tls_conn_new(u->ctx, fd, true, NULL);
    if (!t || kl_tls_handshake(t) != KL_IO_OK) {
        kl_tls_conn_free(t);
        return;
    }
    static uint8_t buf[2 * KL_MAX_MESSAGE];
    size_t have = 0;
    while (!atomic_load(&u->stop)) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 50) <= 0)
            continue;
        size_t n = 0;
        if (kl_tls_read(t, buf + have, sizeof buf - have, &n) != KL_IO_OK)
            break;
        have += n;
        kl_header h;
        size_t flen;
        while (kl_frame_peek(buf, have, &h, &flen) == KL_OK) {
            /* no cmocka assertion off the main thread: problems are
             * counted and checked there */
            kl_request req;
            static uint8_t out[KL_MAX_MESSAGE];
            size_t olen = 0;
            kl_status st = kl_request_parse(buf + 8, flen - 8, &req);
            if (st == KL_OK && req.opcode == KL_OP_PING) {
                st =
                    kl_response_encode(out, sizeof out, h.id, KL_OP_PONG,
                                       req.payload.ptr, req.payload.len, &olen);
            } else if (st == KL_OK) {
                pthread_mutex_lock(&u->mu);
                memcpy(u->last, buf, flen < sizeof u->last ? flen : 0);
                u->last_len = flen;
                u->requests++;
                pthread_mutex_unlock(&u->mu);
                st = kl_response_encode(out, sizeof out, h.id, KL_OP_RESPONSE,
                                        up_answer, sizeof up_answer, &olen);
            }
            if (st != KL_OK) {
                pthread_mutex_lock(&u->mu);
                u->bad++;
                pthread_mutex_unlock(&u->mu);
                goto done;
            }
            if (!up_write(t, out, olen))
                goto done;
            memmove(buf, buf + flen, have - flen);
            have -= flen;
        }
    }
done:
    kl_tls_conn_free(t);
}

/* One connection at a time is enough: the router keeps one per remote
 * below its in-flight threshold. */
static void *up_main(void *arg)
{
    upstream *u = arg;
    while (!atomic_load(&u->stop)) {
        struct pollfd pf = {.fd = u->lfd, .events = POLLIN};
        if (poll(&pf, 1, 50) <= 0)
            continue;
        int fd = accept(u->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        up_serve(u, fd);
        close(fd);
    }
    return NULL;
}

static void up_start(upstream *u)
{
    memset(u, 0, sizeof *u);
    atomic_init(&u->stop, false);
    pthread_mutex_init(&u->mu, NULL);
    char err[512];
    kl_tls_opts o = {.cert_file = tp_path("server.crt"),
                     .key_file = tp_path("server.key"),
                     .ca_file = tp_path("ca.crt")};
    u->ctx = kl_tls_server_ctx_new(&o, err, sizeof err);
    if (!u->ctx)
        fail_msg("upstream TLS: %s", err);
    u->lfd = tn_listen(8, &u->port);
    pthread_create(&u->th, NULL, up_main, u);
}

static void up_stop(upstream *u)
{
    atomic_store(&u->stop, true);
    pthread_join(u->th, NULL);
    close(u->lfd);
    kl_tls_ctx_free(u->ctx);
    pthread_mutex_destroy(&u->mu);
}

static void test_forwarded_request_keeps_everything(void **state)
{
    (void)state;
    upstream u;
    up_start(&u);
    uint8_t ski[20];
    memset(ski, 0x42, sizeof ski);
    char skihex[41];
    snprintf(skihex, sizeof skihex, "%s", tp_ski_hex(ski));
    char table[1100];
    table_path(table, sizeof table, "fields");
    write_table1(table, skihex, "up", u.port, NULL);
    td_daemon local;
    rs_start(&local, "rs-fields", NULL, table, NULL);

    static const uint8_t payload[48] = {9, 8, 7, 6, 5, 4, 3, 2, 1};
    static const uint8_t span[] = "0123456789abcdef0123456789abcdef:"
                                  "1122334455667788:0:01";
    static const uint8_t cip[4] = {192, 0, 2, 7}, sip[4] = {198, 51, 100, 9};
    kl_request_spec s = {
        .opcode = KL_OP_ECDSA_SIGN_SHA384,
        .payload = payload,
        .payload_len = sizeof payload,
        .ski = ski,
        .client_ip = cip,
        .client_ip_len = 4,
        .server_ip = sip,
        .server_ip_len = 4,
        .sni = "www.example.com",
        .span_context = span,
        .span_context_len = sizeof span - 1,
        .req_context = "{\"request_id\":\"req-42\",\"trace\":"
                       "\"00-0af7651916cd43dd8448eb211c80319c-"
                       "b7ad6b7169203331-01\",\"deadline_ms\":1500}",
        .has_compliance = true,
        .compliance = 2, /* eu: the upstream's region */
    };
    kl_client *c = td_connect(&local);
    kl_client_result r;
    td_call(&local, c, &s, &r);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    assert_int_equal(r.payload_len, sizeof up_answer);
    assert_memory_equal(r.payload, up_answer, sizeof up_answer);
    kl_client_result_free(&r);

    /* a compliance region the upstream is not in: refused here, never
     * sent (protocol P9) */
    s.compliance = 3;
    td_expect_error(&local, c, &s, KL_ERR_REMOTE_CONFIG);
    kl_client_close(c);

    pthread_mutex_lock(&u.mu);
    assert_int_equal(u.bad, 0);
    assert_int_equal(u.requests, 1);
    kl_header h;
    size_t flen;
    assert_int_equal(kl_frame_peek(u.last, u.last_len, &h, &flen), KL_OK);
    kl_request got;
    assert_int_equal(kl_request_parse(u.last + 8, flen - 8, &got), KL_OK);
    assert_int_equal(got.opcode, KL_OP_ECDSA_SIGN_SHA384);
    assert_memory_equal(got.ski, ski, 20);
    assert_int_equal(got.payload.len, sizeof payload);
    assert_memory_equal(got.payload.ptr, payload, sizeof payload);
    assert_true(got.has_compliance);
    assert_int_equal(got.compliance, 2);
    assert_int_equal(got.span_context.len, sizeof span - 1);
    assert_memory_equal(got.span_context.ptr, span, sizeof span - 1);
    assert_int_equal(got.sni.len, strlen("www.example.com"));
    assert_memory_equal(got.sni.ptr, "www.example.com", got.sni.len);
    assert_int_equal(got.client_ip.len, 4);
    assert_memory_equal(got.client_ip.ptr, cip, 4);
    assert_int_equal(got.server_ip.len, 4);
    assert_memory_equal(got.server_ip.ptr, sip, 4);
    kl_req_context ctx;
    assert_int_equal(
        kl_req_context_parse(got.req_context.ptr, got.req_context.len, &ctx),
        KL_OK);
    assert_string_equal(ctx.request_id, "req-42");
    assert_string_equal(ctx.trace,
                        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-"
                        "01");
    assert_true(ctx.has_hops);
    assert_int_equal(ctx.hops, 1); /* P9: one more than the client's 0 */
    /* P9: the budget left when it left, never more than the client's */
    assert_true(ctx.has_deadline);
    assert_true(ctx.deadline_ms > 0 && ctx.deadline_ms <= 1500);
    pthread_mutex_unlock(&u.mu);

    assert_int_equal(td_stop(&local, 0), 0);
    up_stop(&u);
}

/* ---- a loop in the tables --------------------------------------------- */

static void test_three_hop_loop_stopped(void **state)
{
    (void)state;
    uint8_t s384[20];
    /* each holds some other key, none holds P-256 */
    char *kd = rs_keydir("rs-loop", "ecdsa-p384", s384);
    const char *names[3] = {"loop-a", "loop-b", "loop-c"};
    char tables[3][1100];
    td_daemon d[3];
    const char *extra[] = {"--router-reload-poll=0s", NULL};
    for (int i = 0; i < 3; i++) {
        table_path(tables[i], sizeof tables[i], names[i]);
        fp_write_file(tables[i], "servers: []\n");
    }
    for (int i = 0; i < 3; i++)
        rs_start(&d[i], names[i], kd, tables[i], extra);
    /* A -> B -> C -> A, re-read on SIGHUP */
    for (int i = 0; i < 3; i++) {
        write_table1(tables[i], tp_ski_hex(ski_p256), names[(i + 1) % 3],
                     d[(i + 1) % 3].port, NULL);
        td_signal(&d[i], SIGHUP);
    }
    for (int i = 0; i < 3; i++)
        rs_wait_log(&d[i], "reload: routing table re-read", 1, 5000);

    kl_client *c = td_connect(&d[0]);
    kl_request_spec s = rs_sign_spec(ski_p256);
    double t0 = td_now_ms();
    td_expect_error(&d[0], c, &s, KL_ERR_REMOTE_CONFIG);
    double took = td_now_ms() - t0;
    fprintf(stderr, "three-hop loop answered in %.1f ms\n", took);
    kl_client_close(c);
    for (int i = 0; i < 3; i++)
        assert_int_equal(td_stop(&d[i], 0), 0);
    /* A forwarded the client's request (hops 0 -> 1), B (1 -> 2), C
     * (2 -> 3), and A refused the one that came back with 3 hops: one hop
     * refused in all, nothing went round again. */
    assert_int_equal(
        rs_log_count(&d[0], "router: 2 forwarded, 0 answered, 0 without a "
                            "route, 1 past the hop limit"),
        1);
    for (int i = 1; i < 3; i++)
        assert_int_equal(rs_log_count(&d[i], "router: 1 forwarded, 0 "
                                             "answered, 0 without a route, 0 "
                                             "past the hop limit"),
                         1);
    tp_rmtree(kd);
}

/* ---- disconnect cancels ----------------------------------------------- */

static void test_disconnect_cancels(void **state)
{
    (void)state;
    uint8_t s256[20], s384[20];
    char *kr = rs_keydir("rs-cancel-r", "ecdsa-p256", s256);
    char *kl = rs_keydir("rs-cancel-l", "ecdsa-p384", s384);
    rh_dc r1, r2;
    rh_dc_start(&r1, "cancel-r1", kr, 5);  /* best: 10 ms */
    rh_dc_start(&r2, "cancel-r2", kr, 40); /* second: 80 ms */
    char table[1100], second[256];
    table_path(table, sizeof table, "cancel");
    snprintf(second, sizeof second,
             "  - {name: r2, address: \"127.0.0.1:%u\", region: eu, "
             "serves: [%s]}\n",
             r2.p.port, tp_ski_hex(s256));
    write_table1(table, tp_ski_hex(s256), "r1", r1.p.port, second);
    /* no probes during the test (they would also cross the proxies), an
     * attempt timeout of 1 s */
    const char *extra[] = {"--router-ping-interval=60s",
                           "--router-timeout-floor=1s",
                           "--router-timeout-ceiling=1s", NULL};
    td_daemon local;
    rs_start(&local, "rs-cancel", kl, table, extra);
    rs_wait_log(&local, "router: remote r1 measured", 1, 5000);
    rs_wait_log(&local, "router: remote r2 measured", 1, 5000);

    kl_client *c = td_connect(&local);
    expect_ok(&local, c, s256, "ecdsa-p256"); /* to r1, the faster */

    /* r1 swallows everything from now on */
    fp_set(&r1.p, "latency_ms=5\nblackhole=1\n");
    fp_stats before2 = fp_read_stats(&r2.p);
    kl_request_spec s = rs_sign_spec(s256);
    for (int i = 0; i < 20; i++) {
        uint32_t id;
        assert_int_equal(kl_client_send(c, &s, &id), KL_OK);
    }
    assert_int_equal(kl_client_flush(c, 2000), KL_OK);
    fp_sleep_ms(300);
    fp_stats in1 = fp_read_stats(&r1.p);
    assert_true(in1.blackholed > 0); /* they went to r1 */
    kl_client_close(c);              /* and the client leaves */
    fp_sleep_ms(100);
    fp_stats gone1 = fp_read_stats(&r1.p);
    fp_sleep_ms(1500); /* past the 1 s attempt timeout */
    fp_stats after1 = fp_read_stats(&r1.p), after2 = fp_read_stats(&r2.p);
    fprintf(stderr,
            "cancel: r1 black-holed %llu bytes in flight, +%llu after the "
            "disconnect; r2 got +%llu bytes\n",
            in1.blackholed, after1.blackholed - gone1.blackholed,
            after2.bytes_up - before2.bytes_up);
    assert_int_equal(after2.bytes_up, before2.bytes_up);
    assert_int_equal(after2.accepted, before2.accepted);
    assert_int_equal(after1.blackholed, gone1.blackholed);

    /* Control: the same from a client that stays is retried on r2 after
     * r1's timeout and answered. */
    c = td_connect(&local);
    double t0 = td_now_ms();
    for (int i = 0; i < 5; i++)
        expect_ok(&local, c, s256, "ecdsa-p256");
    fprintf(stderr, "control: 5 answered via r2 in %.0f ms\n",
            td_now_ms() - t0);
    fp_stats ctl2 = fp_read_stats(&r2.p);
    assert_true(ctl2.bytes_up > after2.bytes_up);
    kl_client_close(c);

    assert_int_equal(td_stop(&local, 0), 0);
    assert_int_equal(rs_log_count(&local, "20 cancelled"), 1);
    rh_dc_stop(&r1);
    rh_dc_stop(&r2);
    tp_rmtree(kr);
    tp_rmtree(kl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_and_forwarded),
        cmocka_unit_test(test_forwarded_request_keeps_everything),
        cmocka_unit_test(test_acl_applies_to_forwarded_keys),
        cmocka_unit_test(test_three_hop_loop_stopped),
        cmocka_unit_test(test_disconnect_cancels),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
