/* SPDX-License-Identifier: Apache-2.0 */
/* libkeyless's two ways in (client issue): the blocking call and the
 * asynchronous API driven from a poll loop, the fork rule (a target used
 * before fork works in the child and still in the parent), cancel and
 * deadlines dropping requests before they are written. */
#include "daemon.h"
#include "pki.h"
#include "slowkey.h"
#include "testutil.h"

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/target_int.h"
#include "client/verify.h"

static td_daemon d;
static char *dir;
static EVP_PKEY *ec_pub;
static uint8_t ec_ski[20];

static int setup(void **state)
{
    dir = tp_tempdir("client-async");
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    ec_pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    tp_ski(ec_pub, ec_ski);
    /* the RSA key on a token that takes 300 ms per operation (slowkey.h):
     * a slow key to queue behind */
    td_opts o = {.name = "client-async",
                 .key_dirs = dir,
                 .slow_key = td_slow_key(tp_path("keys/rsa-2048.key"), 300, 1)};
    td_start(&d, &o);
    return 0;
}

static int teardown(void **state)
{
    int st = td_stop(&d, 0);
    EVP_PKEY_free(ec_pub);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

static kl_request_spec ec_sign(const uint8_t digest[32])
{
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                         .payload = digest,
                         .payload_len = 32,
                         .ski = ec_ski};
    return s;
}

static void check_sig(const uint8_t digest[32], const uint8_t *sig, size_t len)
{
    char why[256] = "";
    kl_status st = kl_verify_output(ec_pub, KL_OP_ECDSA_SIGN_SHA256, digest, 32,
                                    sig, len, why, sizeof why);
    if (st != KL_OK)
        fail_msg("signature does not verify: %s", why);
}

/* One blocking ECDSA signature; returns 0 when it verifies (usable in a
 * child process, where cmocka's asserts must not be used). */
static int sign_once(kl_target *t, uint8_t seed)
{
    uint8_t digest[32];
    memset(digest, seed, sizeof digest);
    kl_request_spec s = ec_sign(digest);
    kl_client_result r;
    if (kl_target_call(t, &s, 5000, &r) != KL_OK)
        return 1;
    int bad = r.opcode != KL_OP_RESPONSE;
    char why[256];
    if (!bad)
        bad = kl_verify_output(ec_pub, KL_OP_ECDSA_SIGN_SHA256, digest, 32,
                               r.payload, r.payload_len, why,
                               sizeof why) != KL_OK;
    kl_client_result_free(&r);
    return bad;
}

static void test_blocking(void **state)
{
    const td_daemon *ds[] = {&d};
    kl_target *t = td_target(ds, 1, NULL);
    /* nothing is opened before the first use */
    kl_target_stats st;
    kl_target_get_stats(t, &st);
    assert_int_equal(st.connects, 0);
    assert_int_equal(kl_target_active_server(t), -1);
    for (int i = 0; i < 5; i++)
        assert_int_equal(sign_once(t, (uint8_t)i), 0);
    /* a ping through the same call */
    kl_request_spec ping = {.opcode = KL_OP_PING,
                            .payload = (const uint8_t *)"abc",
                            .payload_len = 3};
    kl_client_result r;
    assert_int_equal(kl_target_call(t, &ping, 2000, &r), KL_OK);
    assert_int_equal(r.opcode, KL_OP_PONG);
    assert_int_equal(r.payload_len, 3);
    assert_memory_equal(r.payload, "abc", 3);
    kl_client_result_free(&r);
    kl_target_get_stats(t, &st);
    assert_int_equal(st.connects, 1);
    assert_int_equal(st.submitted, 6);
    assert_int_equal(st.written, 6);
    assert_int_equal(st.answered, 6);
    assert_int_equal(kl_target_active_server(t), 0);
    kl_target_free(t);
}

/* ---- the async API from a poll loop ---- */

#define NASYNC 300

typedef struct slot {
    uint8_t digest[32];
    int calls;
    kl_status status;
    uint8_t sig[128];
    size_t siglen;
} slot;

static void on_result(void *arg, const kl_result *res)
{
    slot *s = arg;
    s->calls++;
    s->status = res->status;
    if (res->status == KL_OK && res->opcode == KL_OP_RESPONSE &&
        res->payload_len <= sizeof s->sig) {
        memcpy(s->sig, res->payload, res->payload_len);
        s->siglen = res->payload_len;
    }
}

/* Polls the target's descriptor and processes until every slot completed
 * or timeout_ms passed. */
static void drive(kl_target *t, slot *slots, size_t n, int timeout_ms)
{
    double end = td_now_ms() + timeout_ms;
    for (;;) {
        size_t done = 0;
        for (size_t i = 0; i < n; i++)
            done += slots[i].calls > 0;
        if (done == n || td_now_ms() > end)
            return;
        struct pollfd p = {.fd = kl_async_fd(t), .events = POLLIN};
        assert_true(p.fd >= 0);
        (void)poll(&p, 1, 50);
        assert_int_equal(kl_async_process(t), KL_OK);
    }
}

static void test_async_poll_loop(void **state)
{
    static slot slots[NASYNC];
    const td_daemon *ds[] = {&d};
    kl_target *t = td_target(ds, 1, NULL);
    memset(slots, 0, sizeof slots);
    for (int i = 0; i < NASYNC; i++) {
        for (int b = 0; b < 32; b++)
            slots[i].digest[b] = (uint8_t)(i * 7 + b);
        kl_request_spec s = ec_sign(slots[i].digest);
        uint64_t h = 0;
        assert_int_equal(
            kl_async_submit(t, &s, 10000, on_result, &slots[i], &h), KL_OK);
        assert_true(h != 0);
    }
    drive(t, slots, NASYNC, 20000);
    for (int i = 0; i < NASYNC; i++) {
        assert_int_equal(slots[i].calls, 1);
        assert_int_equal(slots[i].status, KL_OK);
        check_sig(slots[i].digest, slots[i].sig, slots[i].siglen);
    }
    kl_target_stats st;
    kl_target_get_stats(t, &st);
    assert_int_equal(st.written, NASYNC);
    assert_int_equal(st.answered, NASYNC);
    assert_int_equal(st.retries, 0);
    kl_target_free(t);
}

/* keyless-bench's way in (target_int.h): requests submitted without the
 * eventfd wake-up leave the target's descriptor quiet, kl_tgt_flush writes
 * them all at once without reading, and the answers then come through the
 * ordinary poll loop. */
static void test_local_submit_then_flush(void **state)
{
    enum { N = 16 };
    static slot slots[N];
    const td_daemon *ds[] = {&d};
    kl_target *t = td_target(ds, 1, NULL);
    memset(slots, 0, sizeof slots);
    assert_int_equal(sign_once(t, 9), 0); /* connected, nothing in flight */
    kl_tgt_set_sigpipe_ignored(t);        /* a promise; nothing breaks here */
    for (int i = 0; i < N; i++) {
        for (int b = 0; b < 32; b++)
            slots[i].digest[b] = (uint8_t)(i * 11 + b);
        kl_request_spec s = ec_sign(slots[i].digest);
        assert_int_equal(
            kl_tgt_submit_local(t, &s, 10000, on_result, &slots[i]), KL_OK);
    }
    struct pollfd p = {.fd = kl_async_fd(t), .events = POLLIN};
    assert_int_equal(poll(&p, 1, 0), 0); /* no wake-up written */
    kl_target_stats st;
    kl_target_get_stats(t, &st);
    assert_int_equal(st.written, 1); /* the first signature's only */
    assert_int_equal(kl_tgt_flush(t), KL_OK);
    kl_target_get_stats(t, &st);
    assert_int_equal(st.written, 1 + N); /* all of them, in this call */
    for (int i = 0; i < N; i++)
        assert_int_equal(slots[i].calls, 0); /* nothing read yet */
    drive(t, slots, N, 20000);
    for (int i = 0; i < N; i++) {
        assert_int_equal(slots[i].calls, 1);
        assert_int_equal(slots[i].status, KL_OK);
        check_sig(slots[i].digest, slots[i].sig, slots[i].siglen);
    }
    kl_target_free(t);
}

/* ---- fork ---- */

static void test_fork(void **state)
{
    const td_daemon *ds[] = {&d};
    kl_target *t = td_target(ds, 1, NULL);
    /* the parent connects and signs before forking */
    assert_int_equal(sign_once(t, 1), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* the child drops the inherited connection and connects afresh */
        int bad = 0;
        for (int i = 0; i < 3; i++)
            bad |= sign_once(t, (uint8_t)(10 + i));
        kl_target_stats st;
        kl_target_get_stats(t, &st);
        bad |= st.connects != 2; /* the parent's one, counted before fork */
        kl_target_free(t);
        _exit(bad ? 3 : 0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* the parent's connection was not touched by the child (no close_notify,
     * no shared state): it still works, without reconnecting */
    for (int i = 0; i < 3; i++)
        assert_int_equal(sign_once(t, (uint8_t)(20 + i)), 0);
    kl_target_stats st;
    kl_target_get_stats(t, &st);
    assert_int_equal(st.connects, 1);
    kl_target_free(t);
}

/* A target created (and never used) before fork: both processes use it. */
static void test_fork_before_use(void **state)
{
    const td_daemon *ds[] = {&d};
    kl_target *t = td_target(ds, 1, NULL);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int bad = sign_once(t, 5);
        kl_target_free(t);
        _exit(bad ? 3 : 0);
    }
    assert_int_equal(sign_once(t, 6), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    kl_target_free(t);
}

/* ---- cancel and unsent deadlines ---- */

static kl_request_spec rsa_sign(const uint8_t digest[32])
{
    static uint8_t rsa_ski[20];
    EVP_PKEY *rsa = tp_load_pub(tp_path("pubkeys/rsa-2048.pem"));
    tp_ski(rsa, rsa_ski);
    EVP_PKEY_free(rsa);
    kl_request_spec s = {.opcode = KL_OP_RSA_SIGN_SHA256,
                         .payload = digest,
                         .payload_len = 32,
                         .ski = rsa_ski};
    return s;
}

static void test_cancel_unsent(void **state)
{
    const td_daemon *ds[] = {&d};
    kl_target *t = td_target(ds, 1, NULL);
    slot s;
    memset(&s, 0, sizeof s);
    kl_request_spec spec = ec_sign(s.digest);
    uint64_t h;
    assert_int_equal(kl_async_submit(t, &spec, 5000, on_result, &s, &h), KL_OK);
    assert_int_equal(kl_async_cancel(t, h), KL_OK);
    assert_int_equal(kl_async_cancel(t, h), KL_E_NOT_FOUND);
    for (int i = 0; i < 5; i++) {
        struct pollfd p = {.fd = kl_async_fd(t), .events = POLLIN};
        (void)poll(&p, 1, 20);
        assert_int_equal(kl_async_process(t), KL_OK);
    }
    assert_int_equal(s.calls, 0);
    kl_target_stats st;
    kl_target_get_stats(t, &st);
    assert_int_equal(st.written, 0);
    assert_int_equal(st.cancelled, 1);
    assert_int_equal(st.connects, 0); /* no work: no connection either */
    kl_target_free(t);
}

/* With one request allowed in flight and it stuck on the slow key, the
 * requests queued behind it pass their short deadline unsent: they are
 * answered KL_E_TIMEOUT at their deadline and never written. */
static void test_deadline_drops_unsent(void **state)
{
    kl_target_opts ov = {.max_inflight = 1};
    const td_daemon *ds[] = {&d};
    kl_target *t = td_target(ds, 1, &ov);
    slot slow, quick[5];
    memset(&slow, 0, sizeof slow);
    memset(quick, 0, sizeof quick);
    kl_request_spec s = rsa_sign(slow.digest);
    assert_int_equal(kl_async_submit(t, &s, 3000, on_result, &slow, NULL),
                     KL_OK);
    /* the slow one is written first */
    assert_int_equal(kl_async_process(t), KL_OK);
    double t0 = td_now_ms();
    for (int i = 0; i < 5; i++) {
        kl_request_spec q = ec_sign(quick[i].digest);
        assert_int_equal(kl_async_submit(t, &q, 60, on_result, &quick[i], NULL),
                         KL_OK);
    }
    drive(t, quick, 5, 2000);
    double took = td_now_ms() - t0;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(quick[i].calls, 1);
        assert_int_equal(quick[i].status, KL_E_TIMEOUT);
    }
    /* answered at the deadline, not when the slow one finished */
    assert_true(took >= 55 && took < 250);
    drive(t, &slow, 1, 3000);
    assert_int_equal(slow.status, KL_OK);
    kl_target_stats st;
    kl_target_get_stats(t, &st);
    assert_int_equal(st.written, 1);
    assert_int_equal(st.expired_unsent, 5);
    assert_int_equal(st.timed_out, 5);
    kl_target_free(t);
}

/* An in-flight request past its deadline is answered KL_E_TIMEOUT then,
 * and the late answer is dropped without disturbing the connection.
 * (keylessd answers a request on the slow key itself at its deadline, with
 * an error, so the server is frozen with SIGSTOP instead, after the
 * request was written.) */
static void test_deadline_in_flight(void **state)
{
    const td_daemon *ds[] = {&d};
    kl_target *t = td_target(ds, 1, NULL);
    assert_int_equal(sign_once(t, 8), 0); /* connected */
    slot slow;
    memset(&slow, 0, sizeof slow);
    kl_request_spec s = ec_sign(slow.digest);
    td_freeze(&d);
    double t0 = td_now_ms();
    assert_int_equal(kl_async_submit(t, &s, 100, on_result, &slow, NULL),
                     KL_OK);
    drive(t, &slow, 1, 2000);
    assert_int_equal(slow.status, KL_E_TIMEOUT);
    assert_true(td_now_ms() - t0 < 250);
    /* the late answer (a shed: its deadline passed) arrives while this
     * call waits; it is dropped */
    assert_int_equal(kill(d.pid, SIGCONT), 0);
    usleep(300 * 1000);
    assert_int_equal(sign_once(t, 9), 0);
    kl_target_stats st;
    kl_target_get_stats(t, &st);
    assert_int_equal(st.written, 3);
    assert_int_equal(st.timed_out, 1);
    assert_int_equal(st.connects, 1);
    kl_target_free(t);
}

static void test_bad_options(void **state)
{
    kl_target *t = NULL;
    char err[256];
    kl_target_opts o = {0};
    assert_int_equal(kl_target_new(&o, &t, err, sizeof err), KL_E_CONFIG);
    assert_null(t);
    const char *bad[] = {"127.0.0.1:99999"};
    o.servers = bad;
    o.nservers = 1;
    assert_int_equal(kl_target_new(&o, &t, err, sizeof err), KL_E_CONFIG);
    assert_non_null(strstr(err, "99999"));
    const char *ok[] = {"[::1]:2407", "localhost", "127.0.0.1:1"};
    o.servers = ok;
    o.nservers = 3;
    assert_int_equal(kl_target_new(&o, &t, err, sizeof err), KL_OK);
    kl_target_free(t);
    /* a request context that is not JSON is refused at submit */
    const td_daemon *ds[] = {&d};
    t = td_target(ds, 1, NULL);
    uint8_t digest[32] = {0};
    kl_request_spec s = ec_sign(digest);
    s.req_context = "not json";
    assert_int_equal(kl_async_submit(t, &s, 100, on_result, NULL, NULL),
                     KL_E_BAD_VALUE);
    kl_target_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocking),
        cmocka_unit_test(test_async_poll_loop),
        cmocka_unit_test(test_local_submit_then_flush),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_fork_before_use),
        cmocka_unit_test(test_cancel_unsent),
        cmocka_unit_test(test_deadline_drops_unsent),
        cmocka_unit_test(test_deadline_in_flight),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
