/* SPDX-License-Identifier: Apache-2.0 */
/* Abuse resistance after the handshake: a client that pipelines
 * thousands of requests and never reads its responses (backpressure: the
 * server stops reading it, its memory stays bounded, and the connection
 * is closed by idle_timeout + drain_timeout), and garbage after a valid
 * handshake (answered `format error` or closed; the server never crashes;
 * the client on the side is unaffected). */
#include "test_abuse_common.h"

#include <openssl/rand.h>
#include <signal.h>

static td_daemon d;
static char *dir;
static EVP_PKEY *ec_pub;
static uint8_t ec_ski[20];

static int setup(void **state)
{
    static const char *extra[] = {"--idle-timeout=2s", "--drain-timeout=1s",
                                  "--max-output-per-conn=65536", NULL};
    dir = tp_tempdir("abuse-io");
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    ec_pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    tp_ski(ec_pub, ec_ski);
    td_opts o = {.name = "abuse-io", .key_dirs = dir, .extra = extra};
    td_start(&d, &o);
    return 0;
}

static int teardown(void **state)
{
    /* a clean exit: nothing crashed along the way */
    int st = td_stop(&d, 0);
    EVP_PKEY_free(ec_pub);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

static bool log_has(const char *needle)
{
    char *log = td_read_log(&d);
    bool yes = strstr(log, needle) != NULL;
    free(log);
    return yes;
}

static void test_never_reads(void **state)
{
    enum { PLEN = 16000 };
    static uint8_t frame[PLEN + 64];
    ha_side s;
    ha_side_start(&s, &d, ec_ski, 2);
    long rss0 = ha_rss_kb(d.pid);
    ha_tls t;
    ha_tls_connect(&t, d.port, NULL, NULL, 4096);
    ha_tls_send_timeout(&t, 1000);
    size_t len = ha_ping_frame(frame, sizeof frame, 1, PLEN);
    size_t sent = 0, reqs = 0;
    double t0 = td_now_ms();
    /* 20,000 pings of 16 kB would be 320 MB of responses */
    while (reqs < 20000 && ha_tls_write(&t, frame, len)) {
        sent += len;
        reqs++;
    }
    double stalled = td_now_ms();
    long rss1 = ha_rss_kb(d.pid);
    print_message("never-reader: %zu requests (%zu kB) written before the "
                  "server stopped reading (%.0f ms); server RSS %ld -> %ld "
                  "kB\n",
                  reqs, sent / 1024, stalled - t0, rss0, rss1);
    if (reqs == 20000)
        fail_msg("the server read 20000 requests whose responses nobody "
                 "reads: no backpressure");
    /* bounded: socket buffers, the input buffer, 64 kB of output */
    HA_EXPECT_RSS_BELOW(rss1 - rss0, 48 * 1024);
    /* closed after idle_timeout (2 s) + drain_timeout (1 s) */
    bool closed = false;
    while (!closed && td_now_ms() - stalled < 8000) {
        ha_sleep_ms(100);
        closed = log_has("drain time over with unsent responses");
    }
    double gone = td_now_ms() - stalled;
    print_message("never-reader closed by the server %.0f ms after it "
                  "stalled\n",
                  gone);
    assert_true(closed);
    assert_true(gone < 6000);
    ha_tls_close(&t);
    double p99 = ha_side_stop(&s, "during never-reader");
    ha_expect_latency(0, p99, 50, 1);
}

/* Reads what the server sends until it closes or 3 s pass; counts the
 * error responses with code err. Returns false when still open. */
static bool drain(ha_tls *t, size_t *errors, uint8_t err)
{
    static uint8_t buf[1 << 18];
    size_t have = 0;
    double until = td_now_ms() + 3000;
    struct timeval tv = {0, 200000};
    setsockopt(t->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    while (td_now_ms() < until) {
        size_t n = 0;
        if (SSL_read_ex(t->ssl, buf + have, sizeof buf - have, &n) != 1) {
            int e = SSL_get_error(t->ssl, 0);
            if (e == SSL_ERROR_WANT_READ ||
                (e == SSL_ERROR_SYSCALL && (errno == EAGAIN)))
                continue;
            return true; /* closed */
        }
        have += n;
        size_t off = 0, flen;
        kl_header h;
        while (kl_frame_peek(buf + off, have - off, &h, &flen) == KL_OK) {
            kl_response r;
            if (kl_response_parse(&h, buf + off + KL_HEADER_LEN,
                                  flen - KL_HEADER_LEN, &r) == KL_OK &&
                r.opcode == KL_OP_ERROR && r.error == err)
                (*errors)++;
            off += flen;
        }
        memmove(buf, buf + off, have - off);
        have -= off;
    }
    return false;
}

static void test_garbage_after_handshake(void **state)
{
    static uint8_t junk[1 << 16];
    ha_side s;
    ha_side_start(&s, &d, ec_ski, 2);

    /* 1. random bytes: cut as frames of random lengths, answered or
     * closed, within bounded time */
    for (int round = 0; round < 5; round++) {
        ha_tls t;
        ha_tls_connect(&t, d.port, NULL, NULL, 0);
        assert_int_equal(RAND_bytes(junk, sizeof junk), 1);
        (void)ha_tls_write(&t, junk, sizeof junk);
        size_t errs = 0;
        (void)drain(&t, &errs, KL_ERR_FORMAT);
        ha_tls_close(&t);
        assert_int_equal(kill(d.pid, 0), 0);
    }

    /* 2. well-framed messages with random bodies: every one is answered,
     * `format error` for those that do not parse, on a connection that
     * stays usable */
    ha_tls t;
    ha_tls_connect(&t, d.port, NULL, NULL, 0);
    size_t frames = 0, off = 0;
    while (off + 8 + 300 < sizeof junk) {
        uint8_t *m = junk + off;
        uint16_t blen = 16 + (uint16_t)(frames * 7 % 280);
        assert_int_equal(RAND_bytes(m + 8, blen), 1);
        m[0] = 1;
        m[1] = 0;
        m[2] = (uint8_t)(blen >> 8);
        m[3] = (uint8_t)blen;
        uint32_t id = (uint32_t)frames + 1;
        memcpy(m + 4, (uint8_t[]){id >> 24, id >> 16, id >> 8, id}, 4);
        /* a tag that claims more bytes than the body has: P3 overrun */
        m[8] = 0x11;
        m[9] = 0xff;
        m[10] = 0xff;
        off += 8 + blen;
        frames++;
    }
    assert_true(ha_tls_write(&t, junk, off));
    size_t errs = 0;
    bool closed = drain(&t, &errs, KL_ERR_FORMAT);
    print_message("%zu framed garbage requests: %zu `format error` answers, "
                  "connection %s\n",
                  frames, errs, closed ? "closed" : "kept");
    assert_int_equal(errs, frames);
    ha_tls_close(&t);

    /* 3. a header announcing 65535 bytes, then the client goes away */
    ha_tls_connect(&t, d.port, NULL, NULL, 0);
    uint8_t big[8] = {1, 0, 0xff, 0xff, 0, 0, 0, 9};
    assert_true(ha_tls_write(&t, big, sizeof big));
    assert_true(ha_tls_write(&t, junk, 30000));
    ha_tls_close(&t);

    double p99 = ha_side_stop(&s, "during garbage");
    ha_expect_latency(0, p99, 50, 1);
    assert_int_equal(kill(d.pid, 0), 0);
    kl_client *c = td_connect(&d);
    assert_true(ha_sign_ms(c, ec_ski) >= 0);
    kl_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_never_reads),
        cmocka_unit_test(test_garbage_after_handshake),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
