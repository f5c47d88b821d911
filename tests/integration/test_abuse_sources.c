/* SPDX-License-Identifier: Apache-2.0 */
/* Abuse resistance per source and before authentication:
 *  - max_handshaking_per_source: many handshakes from one address are
 *    capped (the rest closed at accept) while another address still gets
 *    in at once, a well-behaved client keeps its latency, and the slots
 *    come back when the flood's connections go;
 *  - max_handshake_bytes: a client that streams handshake bytes without
 *    completing TLS is disconnected once it passes the cap, long before
 *    its handshake timeout; an ordinary mutual-TLS handshake fits.
 * Sources are different loopback addresses (127.0.0.2, 127.0.0.3: the whole
 * of 127/8 reaches lo), chosen by binding the client socket. */
#include "net.h"
#define HA_ONE_KEY_DAEMON
#include "test_abuse_common.h"

/* A mutual-TLS handshake from src with the test client certificate, then
 * one ping answered: true when all of it worked; *ms: how long it took. */
static bool tls_from(const char *src, double *ms)
{
    double t0 = td_now_ms();
    SSL_CTX *ctx = tp_client_ssl_ctx(NULL);
    int fd = tn_tcp_from(src, d.port);
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    SSL *ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    SSL_set1_host(ssl, "localhost");
    bool ok = SSL_connect(ssl) == 1;
    if (ok) {
        uint8_t frame[2048], resp[2048];
        size_t n = ha_ping_frame(frame, sizeof frame, 7, 4), got = 0;
        ok = SSL_write_ex(ssl, frame, n, &got) == 1 && got == n;
        size_t have = 0, want = KL_HEADER_LEN;
        while (ok && have < want) {
            size_t r = 0;
            ok = SSL_read_ex(ssl, resp + have, want - have, &r) == 1;
            have += r;
            if (ok && have == KL_HEADER_LEN && want == KL_HEADER_LEN)
                want += (size_t)resp[2] << 8 | resp[3];
            ok = ok && want <= sizeof resp;
        }
        /* a pong with the ping's id */
        kl_header h;
        kl_response rsp;
        ok = ok && kl_header_decode(resp, have, &h) == KL_OK &&
             kl_response_parse(&h, resp + KL_HEADER_LEN, have - KL_HEADER_LEN,
                               &rsp) == KL_OK &&
             h.id == 7 && rsp.opcode == KL_OP_PONG;
    }
    ERR_clear_error();
    SSL_free(ssl);
    close(fd);
    SSL_CTX_free(ctx);
    *ms = td_now_ms() - t0;
    return ok;
}

static size_t count_closed(const int *fd, size_t n)
{
    size_t closed = 0;
    for (size_t i = 0; i < n; i++)
        closed += ha_peer_closed(fd[i]);
    return closed;
}

static int setup_per_source(void **state)
{
    static const char *extra[] = {"--handshake-timeout=5s",
                                  "--max-handshaking=200",
                                  "--max-handshaking-per-source=20", NULL};
    start("abuse-sources", extra);
    return 0;
}

/* 100 connections from 127.0.0.2 that never speak TLS: 20 are kept in
 * their handshake, 80 closed at once. Meanwhile 127.0.0.3 connects and is
 * served at once, 127.0.0.2 cannot, and a client on 127.0.0.1 keeps its
 * latency. When the flood goes, 127.0.0.2 gets in again. */
static void test_per_source_cap(void **state)
{
    enum { N = 100, CAP = 20 };
    double before = baseline();
    ha_side s;
    ha_side_start(&s, &d, ec_ski, 2);
    int fd[N];
    for (int i = 0; i < N; i++)
        fd[i] = tn_tcp_from("127.0.0.2", d.port);
    size_t closed = 0;
    double end = td_now_ms() + 5000;
    while ((closed = count_closed((const int *)fd, N)) < N - CAP &&
           td_now_ms() < end)
        ha_sleep_ms(20);
    ha_sleep_ms(100); /* nothing more is closed: the 20 are held */
    closed = count_closed(fd, N);
    print_message("100 connections from 127.0.0.2: %zu closed at once\n",
                  closed);
    assert_int_equal(closed, N - CAP);

    /* another source is served at once; this one is not */
    double ms;
    assert_true(tls_from("127.0.0.3", &ms));
    print_message("127.0.0.3 during the flood: handshake and ping in "
                  "%.1f ms\n",
                  ms);
    assert_true(ms < 1000);
    assert_false(tls_from("127.0.0.2", &ms));
    /* and 127.0.0.3 has its own 20 */
    int other[CAP];
    for (int i = 0; i < CAP; i++)
        other[i] = tn_tcp_from("127.0.0.3", d.port);
    ha_sleep_ms(200);
    assert_int_equal(count_closed(other, CAP), 0);
    for (int i = 0; i < CAP; i++)
        close(other[i]);
    double during = ha_side_stop(&s, "during the per-source flood");
    ha_expect_latency(before, during, 50, 5);

    /* the flood goes: its slots come back */
    for (int i = 0; i < N; i++)
        close(fd[i]);
    ha_sleep_ms(300);
    assert_true(tls_from("127.0.0.2", &ms));
    char *log = td_read_log(&d);
    assert_non_null(
        strstr(log, "max_handshaking_per_source reached (20) for 127.0.0.2"));
    free(log);
}

static int setup_bytes(void **state)
{
    static const char *extra[] = {"--max-handshake-bytes=4096", NULL};
    start("abuse-hsbytes", extra);
    return 0;
}

/* A ClientHello announced as 12,000 bytes and sent in 512-byte records, one
 * every 10 ms: OpenSSL would wait for all of it; keylessd closes the
 * connection once it has read more than 4096 bytes, well before the
 * handshake timeout (10 s). An ordinary mutual-TLS handshake fits in 4096
 * bytes, and the side client is not disturbed. */
static void test_handshake_bytes(void **state)
{
    enum { MSG = 12000, FRAG = 512 };
    double ms;
    assert_true(tls_from("127.0.0.1", &ms));
    double before = baseline();
    ha_side s;
    ha_side_start(&s, &d, ec_ski, 2);
    int fd = tn_tcp_from("127.0.0.2", d.port);
    uint8_t rec[5 + FRAG];
    memset(rec, 0, sizeof rec);
    size_t sent = 0; /* handshake message bytes */
    double t0 = td_now_ms(), closed_ms = 0;
    size_t closed_after = 0;
    while (sent < MSG) {
        size_t off = 5, len = FRAG;
        if (sent == 0) {
            /* ClientHello, 3-byte length; the rest is zeros (never parsed:
             * the message is not complete before the cap) */
            rec[5] = 0x01;
            rec[6] = (uint8_t)(MSG >> 16);
            rec[7] = (uint8_t)(MSG >> 8);
            rec[8] = (uint8_t)MSG;
        } else {
            memset(rec + 5, 0, 4);
        }
        rec[0] = 0x16; /* handshake record */
        rec[1] = 0x03;
        rec[2] = 0x01;
        rec[3] = (uint8_t)(len >> 8);
        rec[4] = (uint8_t)len;
        if (send(fd, rec, off + len, MSG_NOSIGNAL) != (ssize_t)(off + len) ||
            (ha_sleep_ms(10), ha_peer_closed(fd))) {
            closed_ms = td_now_ms() - t0;
            closed_after = sent + len;
            break;
        }
        sent += len;
    }
    close(fd);
    double during = ha_side_stop(&s, "during the handshake stream");
    print_message("streamed handshake: closed after %zu bytes, %.0f ms\n",
                  closed_after, closed_ms);
    assert_true(closed_after > 0); /* closed before the message was whole */
    assert_true(closed_after <= 4096 + 2 * (FRAG + 5));
    assert_true(closed_ms < 2000);
    ha_expect_latency(before, during, 50, 5);
    /* a full handshake still fits */
    assert_true(tls_from("127.0.0.2", &ms));
    char *log = td_read_log(&d);
    assert_non_null(strstr(log, "more than max_handshake_bytes, 4096"));
    free(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_per_source_cap, setup_per_source,
                                        stop),
        cmocka_unit_test_setup_teardown(test_handshake_bytes, setup_bytes,
                                        stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
