/* SPDX-License-Identifier: Apache-2.0 */
/* Established connections lose their client's trust (docs/SECURITY.md
 * "Revocation and expiry"):
 *  - a reload whose client CA file no longer holds a client's CA closes
 *    that client's open connections within a second or two, after the
 *    request in flight got its signature; a client of a CA still trusted
 *    keeps its connection and keeps signing;
 *  - a connection whose client certificate's notAfter passes is closed,
 *    idle or not, and a request read after notAfter gets no signature.
 *  - connections made by resuming a session are verified again from the
 *    session's certificate: a CA added keeps them, a CA removed closes
 *    those of its clients (TLS 1.3 and 1.2).
 * Both are counted in keylessd_connections_closed_total{reason} and
 * logged per connection. */
#include "daemon.h"
#include "keyless/protocol.h"
#include "net.h"
#include "pki.h"
#include "slowkey.h"
#include "testutil.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/time.h>

/* how long every request for the RSA key takes (on a slow token,
 * slowkey.h): long enough to be in flight while the reload runs */
#define SLOW_MS 1500

static char *dir;
static td_daemon d;
static uint16_t mport;
static uint8_t ec_ski[20], rsa_ski[20];
static const char *rsa_key; /* on the slow token */

static int setup(void **state)
{
    (void)state;
    dir = tp_tempdir("reload-trust");
    char keys[1200];
    snprintf(keys, sizeof keys, "%s/keys", dir);
    tu_sh("mkdir -p %s && chmod 700 %s", keys, keys);
    tp_copy_key(keys, tp_path("keys/ecdsa-p256.key"));
    rsa_key = td_slow_key(tp_path("keys/rsa-2048.key"), SLOW_MS, 1);
    EVP_PKEY *pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    tp_ski(pub, ec_ski);
    EVP_PKEY_free(pub);
    pub = tp_load_pub(tp_path("pubkeys/rsa-2048.pem"));
    tp_ski(pub, rsa_ski);
    EVP_PKEY_free(pub);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tp_rmtree(dir);
    return 0;
}

static void wait_log(const char *what, int count);

/* keylessd with the keys above, the client CA file ca and a metrics
 * endpoint on loopback. */
static void start(const char *name, const char *ca)
{
    static char a_port[64], keys[1200];
    mport = tn_free_port();
    snprintf(a_port, sizeof a_port, "--metrics-port=%u", mport);
    snprintf(keys, sizeof keys, "%s/keys", dir);
    const char *extra[] = {"--metrics-address=127.0.0.1", a_port, NULL};
    td_opts o = {.name = name,
                 .key_dirs = keys,
                 .slow_key = rsa_key,
                 .ca = ca,
                 .extra = extra};
    td_start(&d, &o);
    wait_log("metrics: http://127.0.0.1:", 1); /* once the keys loaded */
}

static int count_in_log(const char *what)
{
    char *log = td_read_log(&d);
    int n = 0;
    for (const char *p = log; p && (p = strstr(p, what)); p++)
        n++;
    free(log);
    return n;
}

/* Waits (up to 10 s) until the log has `count` lines containing what. */
static void wait_log(const char *what, int count)
{
    double until = td_now_ms() + 10000;
    while (count_in_log(what) < count) {
        if (td_now_ms() > until) {
            td_dump_log(&d);
            fail_msg("\"%s\" did not appear %d time(s) in the log", what,
                     count);
        }
        usleep(20000);
    }
}

/* The value of one series (written exactly so) on /metrics; NAN when
 * absent. */
static double metric(const char *series)
{
    char *body = NULL;
    assert_int_equal(tn_http_get(mport, "/metrics", &body), 200);
    double v = NAN;
    size_t n = strlen(series);
    for (const char *p = body; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (!strncmp(p, series, n) && p[n] == ' ') {
            v = strtod(p + n + 1, NULL);
            break;
        }
    free(body);
    return v;
}

/* Connects with the certificate crt / key. */
static kl_client *connect_as(const char *crt, const char *key)
{
    kl_client_opts co = td_client_opts(&d);
    co.cert_file = crt;
    co.key_file = key;
    kl_client *c = NULL;
    char err[512];
    if (kl_client_connect(&co, &c, err, sizeof err) != KL_OK) {
        td_dump_log(&d);
        fail_msg("cannot connect with %s: %s", crt, err);
    }
    return c;
}

static const uint8_t digest[32] = {7};

static kl_request_spec sign_spec(const uint8_t *ski)
{
    return (kl_request_spec){.opcode = ski == rsa_ski ? KL_OP_RSA_SIGN_SHA256
                                                      : KL_OP_ECDSA_SIGN_SHA256,
                             .payload = digest,
                             .payload_len = sizeof digest,
                             .ski = ski};
}

/* A signature comes back on c. */
static void expect_signature(kl_client *c, const uint8_t *ski)
{
    kl_request_spec s = sign_spec(ski);
    kl_client_result r;
    td_call(&d, c, &s, &r);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    assert_true(r.payload_len > 0);
    kl_client_result_free(&r);
}

/* Waits up to ms for the server to close c without sending anything more;
 * returns how long it took. */
static double expect_closed(kl_client *c, int ms, const char *what)
{
    double t0 = td_now_ms();
    kl_client_result r;
    kl_status st = kl_client_recv(c, ms, &r);
    if (st == KL_OK) {
        unsigned op = r.opcode;
        kl_client_result_free(&r);
        td_dump_log(&d);
        fail_msg("%s: an answer (opcode 0x%02x) instead of the close", what,
                 op);
    }
    if (st == KL_E_TIMEOUT) {
        td_dump_log(&d);
        fail_msg("%s: still open after %d ms", what, ms);
    }
    return td_now_ms() - t0;
}

static void test_ca_removed_at_reload(void **state)
{
    (void)state;
    /* the client CA file trusts both CAs; the reload drops other-ca */
    char ca[1200];
    snprintf(ca, sizeof ca, "%s/clients-ca.pem", dir);
    tu_sh("cat %s %s > %s", tp_path("ca.crt"), tp_path("other-ca.crt"), ca);
    start("reload-trust", ca);
    const char *other_crt = tp_path("client-other-ca.crt");
    const char *other_key = tp_path("client-other-ca.key");
    kl_client *busy = connect_as(other_crt, other_key);
    kl_client *idle = connect_as(other_crt, other_key);
    kl_client *kept = connect_as(tp_path("client.crt"), tp_path("client.key"));
    expect_signature(busy, ec_ski);
    expect_signature(idle, ec_ski);
    expect_signature(kept, ec_ski);

    /* a request in flight on `busy` while the CA goes */
    kl_request_spec slow = sign_spec(rsa_ski);
    uint32_t id;
    assert_int_equal(kl_client_send(busy, &slow, &id), KL_OK);
    assert_int_equal(kl_client_flush(busy, 5000), KL_OK);
    usleep(200 * 1000); /* read and queued (it runs SLOW_MS) */
    tu_sh("cp %s %s", tp_path("ca.crt"), ca);
    double t0 = td_now_ms();
    td_signal(&d, SIGHUP);

    /* the idle one is closed soon after the reload ... */
    double waited = expect_closed(idle, 10000, "idle connection of other-ca");
    double since = td_now_ms() - t0;
    if (since > 3000) {
        td_dump_log(&d);
        fail_msg("closed %.0f ms after SIGHUP (%.0f ms waited)", since, waited);
    }
    /* ... the busy one answers what it had in flight, then closes */
    kl_client_result r;
    assert_int_equal(kl_client_recv(busy, 10000, &r), KL_OK);
    assert_int_equal(r.id, id);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    assert_true(r.payload_len > 0);
    kl_client_result_free(&r);
    expect_closed(busy, 5000, "busy connection of other-ca");
    wait_log("client certificate no longer trusted after the client CA was "
             "reloaded",
             2);
    assert_int_equal(count_in_log("closing after 1 request(s) in flight"), 1);
    assert_int_equal(count_in_log("closing after 0 request(s) in flight"), 1);
    wait_log("the reloaded client CA no longer trusts", 1);
    assert_true(
        metric("keylessd_connections_closed_total{reason=\"untrusted\"}") == 2);
    assert_true(
        metric("keylessd_connections_closed_total{reason=\"cert_expired\"}") ==
        0);

    /* the client of the CA still trusted goes on, on the same connection */
    expect_signature(kept, ec_ski);
    expect_signature(kept, rsa_ski);
    /* and other-ca's clients cannot come back (in TLS 1.3 the server
     * refuses the certificate after the client's connect returned: the
     * first request fails) */
    kl_client_opts co = td_client_opts(&d);
    co.cert_file = other_crt;
    co.key_file = other_key;
    kl_client *again = NULL;
    char err[512];
    if (kl_client_connect(&co, &again, err, sizeof err) == KL_OK) {
        kl_request_spec s = sign_spec(ec_ski);
        kl_client_result res;
        kl_status st = kl_client_call(again, &s, 5000, &res);
        if (st == KL_OK)
            kl_client_result_free(&res);
        assert_int_not_equal(st, KL_OK);
        kl_client_close(again);
    }

    /* a reload with the same CA file re-verifies nothing */
    td_signal(&d, SIGHUP);
    wait_log("unchanged certificate and CA", 1);
    expect_signature(kept, ec_ski);
    assert_true(
        metric("keylessd_connections_closed_total{reason=\"untrusted\"}") == 2);
    kl_client_close(busy);
    kl_client_close(idle);
    kl_client_close(kept);
    assert_int_equal(td_stop(&d, 0), 0);
}

/* ---- resumed sessions: a raw OpenSSL client, so that the sessions are
 * the test's ---- */

typedef struct rconn {
    int fd;
    SSL *ssl;
} rconn;

static rconn rconnect(SSL_CTX *ctx, SSL_SESSION *sess)
{
    rconn r = {.fd = tn_tcp_from(NULL, d.port)};
    assert_true(r.fd >= 0);
    /* a bounded wait for every read below */
    struct timeval tv = {.tv_sec = 5};
    setsockopt(r.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    r.ssl = SSL_new(ctx);
    SSL_set_fd(r.ssl, r.fd);
    if (sess)
        assert_int_equal(SSL_set_session(r.ssl, sess), 1);
    assert_int_equal(SSL_connect(r.ssl), 1);
    return r;
}

/* 1: a pong came back; 0: the server closed the connection; fails the
 * test when nothing came within 5 s. */
static int rping(rconn *r)
{
    kl_request_spec ping = {.opcode = KL_OP_PING, .id = 91};
    uint8_t msg[2048], in[2048];
    size_t len, got = 0;
    assert_int_equal(kl_request_encode(msg, sizeof msg, &ping, &len), KL_OK);
    if (SSL_write(r->ssl, msg, (int)len) != (int)len) {
        ERR_clear_error();
        return 0;
    }
    while (got < KL_HEADER_LEN) {
        errno = 0;
        int n = SSL_read(r->ssl, in + got, (int)(sizeof in - got));
        if (n <= 0) {
            int e = SSL_get_error(r->ssl, n);
            ERR_clear_error();
            if (e == SSL_ERROR_WANT_READ ||
                (e == SSL_ERROR_SYSCALL && errno == EAGAIN))
                fail_msg("no answer and no close in 5 s");
            return 0;
        }
        got += (size_t)n;
    }
    kl_header h;
    size_t flen;
    assert_int_equal(kl_frame_peek(in, got, &h, &flen), KL_OK);
    assert_int_equal(h.id, 91);
    return 1;
}

static void rclose(rconn *r)
{
    /* freed without a shutdown, OpenSSL would make its session
     * unresumable */
    SSL_set_shutdown(r->ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    SSL_free(r->ssl);
    close(r->fd);
}

/* A connection that resumed a session of ctx's client, served. */
static rconn resumed(SSL_CTX *ctx)
{
    rconn first = rconnect(ctx, NULL);
    assert_int_equal(rping(&first), 1); /* the TLS 1.3 ticket arrived */
    SSL_SESSION *s = SSL_get1_session(first.ssl);
    assert_non_null(s);
    rclose(&first);
    rconn r = rconnect(ctx, s);
    SSL_SESSION_free(s);
    assert_int_equal(SSL_session_reused(r.ssl), 1);
    assert_int_equal(rping(&r), 1);
    return r;
}

/* Connections made by resuming a session are verified again like the
 * others: from the session's certificate and chain (no handshake sent
 * them). A CA added keeps both clients; a CA removed closes its clients'
 * resumed connections, TLS 1.3 and 1.2. */
static void test_resumed_connections(void **state)
{
    (void)state;
    char ca[1200];
    snprintf(ca, sizeof ca, "%s/clients-ca-2.pem", dir);
    tu_sh("cp %s %s", tp_path("ca.crt"), ca);
    start("reload-trust-resumed", ca);
    SSL_CTX *mine13 = tp_client_resume_ctx("client", TLS1_3_VERSION);
    SSL_CTX *mine12 = tp_client_resume_ctx("client", TLS1_2_VERSION);
    rconn a13 = resumed(mine13), a12 = resumed(mine12);

    /* other-ca added: a change of trust, everybody still trusted */
    tu_sh("cat %s %s > %s", tp_path("ca.crt"), tp_path("other-ca.crt"), ca);
    td_signal(&d, SIGHUP);
    wait_log("new certificate; generation 2", 1);
    assert_int_equal(rping(&a13), 1);
    assert_int_equal(rping(&a12), 1);
    SSL_CTX *other13 = tp_client_resume_ctx("client-other-ca", TLS1_3_VERSION);
    SSL_CTX *other12 = tp_client_resume_ctx("client-other-ca", TLS1_2_VERSION);
    rconn b13 = resumed(other13), b12 = resumed(other12);

    /* other-ca removed again: its resumed connections close, ours stay */
    tu_sh("cp %s %s", tp_path("ca.crt"), ca);
    td_signal(&d, SIGHUP);
    wait_log("new certificate; generation 3", 1);
    assert_int_equal(rping(&b13), 0);
    assert_int_equal(rping(&b12), 0);
    assert_int_equal(rping(&a13), 1);
    assert_int_equal(rping(&a12), 1);
    assert_true(
        metric("keylessd_connections_closed_total{reason=\"untrusted\"}") == 2);
    assert_int_equal(count_in_log("(client client of another CA): client "
                                  "certificate no longer trusted"),
                     2);
    rclose(&a13);
    rclose(&a12);
    rclose(&b13);
    rclose(&b12);
    SSL_CTX_free(mine13);
    SSL_CTX_free(mine12);
    SSL_CTX_free(other13);
    SSL_CTX_free(other12);
    assert_int_equal(td_stop(&d, 0), 0);
}

/* Seconds from now until the certificate's notAfter (as a wall-clock
 * time_t), from the file. */
static time_t not_after(const char *crt)
{
    FILE *f = fopen(crt, "r");
    assert_non_null(f);
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(x);
    ASN1_TIME *epoch = ASN1_TIME_set(NULL, 0);
    int days = 0, secs = 0;
    assert_int_equal(ASN1_TIME_diff(&days, &secs, epoch, X509_get0_notAfter(x)),
                     1);
    ASN1_TIME_free(epoch);
    X509_free(x);
    return (time_t)days * 86400 + secs;
}

/* Milliseconds from now until the wall-clock second t begins. */
static double ms_until(time_t t)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return ((double)t - (double)now.tv_sec) * 1000.0 -
           (double)now.tv_nsec / 1e6;
}

static void test_certificate_expires_idle(void **state)
{
    (void)state;
    start("cert-expiry", NULL);
    tp_issue_client_cert(dir, "short", "short-lived", "ca", 5);
    char crt[1200], key[1200];
    snprintf(crt, sizeof crt, "%s/short.crt", dir);
    snprintf(key, sizeof key, "%s/short.key", dir);
    time_t na = not_after(crt);
    kl_client *c = connect_as(crt, key);
    kl_client *other = td_connect(&d); /* the long-lived client.crt */
    expect_signature(c, ec_ski);
    expect_signature(other, ec_ski);
    assert_true(ms_until(na) > 500); /* the test itself was not too slow */

    /* closed once notAfter passed, although nothing was sent */
    expect_closed(c, 10000, "connection with the expired certificate");
    double late = -ms_until(na);
    if (late < -20 || late > 2000) {
        td_dump_log(&d);
        fail_msg("closed %.0f ms after notAfter", late);
    }
    wait_log("(client short-lived): client certificate expired (notAfter ", 1);
    assert_true(
        metric("keylessd_connections_closed_total{reason=\"cert_expired\"}") ==
        1);
    assert_true(
        metric("keylessd_connections_closed_total{reason=\"untrusted\"}") == 0);
    expect_signature(other, ec_ski);
    kl_client_close(c);
    kl_client_close(other);
    assert_int_equal(td_stop(&d, 0), 0);
}

/* The daemon is frozen across notAfter and a request arrives meanwhile:
 * when it runs again, the request is not signed. */
static void test_request_after_expiry(void **state)
{
    (void)state;
    start("cert-expiry-req", NULL);
    tp_issue_client_cert(dir, "shorter", "short-lived-2", "ca", 5);
    char crt[1200], key[1200];
    snprintf(crt, sizeof crt, "%s/shorter.crt", dir);
    snprintf(key, sizeof key, "%s/shorter.key", dir);
    time_t na = not_after(crt);
    kl_client *c = connect_as(crt, key);
    expect_signature(c, ec_ski);
    td_freeze(&d);
    double left = ms_until(na);
    if (left <= 0) {
        td_signal(&d, SIGCONT);
        fail_msg("the certificate expired before the daemon was frozen");
    }
    usleep((useconds_t)(left * 1000) + 300 * 1000);
    kl_request_spec s = sign_spec(ec_ski);
    uint32_t id;
    assert_int_equal(kl_client_send(c, &s, &id), KL_OK);
    assert_int_equal(kl_client_flush(c, 5000), KL_OK);
    td_signal(&d, SIGCONT);
    expect_closed(c, 5000, "request after notAfter");
    wait_log("(client short-lived-2): client certificate expired", 1);
    assert_true(
        metric("keylessd_connections_closed_total{reason=\"cert_expired\"}") ==
        1);
    kl_client_close(c);
    assert_int_equal(td_stop(&d, 0), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ca_removed_at_reload),
        cmocka_unit_test(test_resumed_connections),
        cmocka_unit_test(test_certificate_expires_idle),
        cmocka_unit_test(test_request_after_expiry),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
