/* SPDX-License-Identifier: Apache-2.0 */
/* The keyless provider inside OpenSSL async jobs, in-process: a
 * server SSL with SSL_MODE_ASYNC, driven the way HAProxy drives it
 * (SSL_ERROR_WANT_ASYNC, then poll the job's wait descriptors and call
 * SSL_do_handshake again).
 *  - a key operation pauses the job instead of blocking: the first call
 *    returns WANT_ASYNC at once, with one descriptor of ours that is
 *    reused across pauses and closed with the SSL;
 *  - a resume before the answer (spurious) pauses again;
 *  - handshakes on a slow key overlap: N of them take about one delay;
 *  - an SSL freed while its job waits (a client that went away) leaves no
 *    descriptor or memory of ours, its request is cancelled and the target
 *    serves on; the same for one freed after the answer came but before
 *    the resume;
 *  - no key server: the handshake fails with the provider's clear error;
 *  - after fork, the child's jobs are driven by a thread of its own.
 * The "slow" key is on a token that takes DELAY_MS per operation
 * (slowkey.h), with a session for each of the NPAR handshakes. */
#include "slowkey.h"
#include "test_provider_common.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/async.h>

#include "core/time.h"
#include "provider/async.h"

#define DELAY_MS 200
#define NPAR 6
#define NS_PER_MS 1000000ull

static SSL_CTX *cctx;

static int setup(void **state)
{
    dir = tp_tempdir("provider-async");
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    write_cert(path_in("ecdsa-p256.key"), "fast");
    const char *slow_key = tp_path("keys/ecdsa-p384.key");
    write_cert(slow_key, "slow");
    td_opts o = {.name = "provider-async-keylessd",
                 .key_dirs = dir,
                 .slow_key = td_slow_key(slow_key, DELAY_MS, NPAR),
                 .workers = NPAR + 2};
    td_start(&kd, &o);
    write_ref("fast", kd.port, NULL, 0);
    write_ref("slow", kd.port, NULL, 0);
    /* the same certificate, no key server */
    write_cert(path_in("ecdsa-p256.key"), "dead");
    write_ref("dead", dead_port(), NULL, 0);
    prov_setup_libctx();
    cctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(cctx);
    return 0;
}

static int teardown(void **state)
{
    SSL_CTX_free(cctx);
    prov_teardown_libctx();
    assert_int_equal(td_stop(&kd, 0), 0);
    tp_rmtree(dir);
    return 0;
}

static SSL_CTX *async_ctx(const char *name)
{
    char crt[256], ref[256];
    snprintf(crt, sizeof crt, "%s.crt", name);
    snprintf(ref, sizeof ref, "%s.ref", name);
    SSL_CTX *s = SSL_CTX_new_ex(lib, NULL, TLS_server_method());
    assert_non_null(s);
    assert_int_equal(SSL_CTX_use_certificate_chain_file(s, path_in(crt)), 1);
    EVP_PKEY *pk = read_key(path_in(ref));
    assert_non_null(pk);
    assert_int_equal(SSL_CTX_use_PrivateKey(s, pk), 1);
    EVP_PKEY_free(pk);
    SSL_CTX_set_mode(s, SSL_MODE_ASYNC);
    return s;
}

/* One connection: server and client over a BIO pair. */
typedef struct conn {
    SSL *s, *c;
    int pauses;  /* WANT_ASYNC returns */
    int wait_fd; /* the job's descriptor (-1: none seen) */
    int failed;  /* the server's handshake failed */
} conn;

static void conn_open(conn *k, SSL_CTX *sctx)
{
    memset(k, 0, sizeof *k);
    k->wait_fd = -1;
    k->s = SSL_new(sctx);
    k->c = SSL_new(cctx);
    BIO *sb, *cb;
    assert_int_equal(BIO_new_bio_pair(&sb, 0, &cb, 0), 1);
    SSL_set_bio(k->s, sb, sb);
    SSL_set_bio(k->c, cb, cb);
    SSL_set_accept_state(k->s);
    SSL_set_connect_state(k->c);
}

static void conn_close(conn *k)
{
    SSL_free(k->s);
    SSL_free(k->c);
}

static int done(const conn *k)
{
    return SSL_is_init_finished(k->s) && SSL_is_init_finished(k->c);
}

/* The server's descriptors; asserts there is exactly one (ours). */
static int the_fd(conn *k)
{
    OSSL_ASYNC_FD fds[4];
    size_t n = 0;
    assert_int_equal(SSL_get_all_async_fds(k->s, NULL, &n), 1);
    assert_int_equal(n, 1);
    assert_int_equal(SSL_get_all_async_fds(k->s, fds, &n), 1);
    if (k->wait_fd >= 0) /* reused across pauses */
        assert_int_equal(fds[0], k->wait_fd);
    k->wait_fd = fds[0];
    return fds[0];
}

/* Runs client and server until the server pauses, fails or both are done.
 * Returns 1 when the server is paused (WANT_ASYNC). */
static int step(conn *k)
{
    for (int i = 0; i < 20 && !done(k) && !k->failed; i++) {
        int rc = SSL_do_handshake(k->c);
        if (rc != 1 && SSL_get_error(k->c, rc) != SSL_ERROR_WANT_READ)
            return 0;
        rc = SSL_do_handshake(k->s);
        if (rc == 1)
            continue;
        int e = SSL_get_error(k->s, rc);
        if (e == SSL_ERROR_WANT_ASYNC) {
            k->pauses++;
            the_fd(k);
            return 1;
        }
        if (e != SSL_ERROR_WANT_READ)
            k->failed = 1;
    }
    return 0;
}

static int readable(int fd, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

/* Whole handshake, waiting on the descriptor at every pause. */
static void run(conn *k)
{
    while (step(k))
        assert_true(readable(k->wait_fd, 5000));
}

static int fd_open(int fd)
{
    return fcntl(fd, F_GETFD) != -1;
}

/* The slots alive once the completions that were running are done (one
 * may still hold its reference an instant after the job saw the answer). */
static long live_settled(long want)
{
    for (int i = 0; i < 200 && klp_async_live() != want; i++)
        usleep(5000);
    return klp_async_live();
}

static void test_pauses_not_blocks(void **state)
{
    SSL_CTX *s = async_ctx("fast");
    for (int v = 0; v < 2; v++) {
        SSL_CTX_set_max_proto_version(cctx, v ? TLS1_2_VERSION : 0);
        conn k;
        conn_open(&k, s);
        run(&k);
        assert_true(done(&k));
        assert_int_equal(k.pauses, 1); /* one signature, one pause */
        assert_int_equal(klp_async_live(), 1);
        int fd = k.wait_fd;
        assert_true(fd_open(fd));
        assert_false(readable(fd, 0)); /* reset after the resume */
        conn_close(&k);
        assert_false(fd_open(fd)); /* closed by the context's cleanup */
        assert_int_equal(live_settled(0), 0);
    }
    SSL_CTX_set_max_proto_version(cctx, 0);
    SSL_CTX_free(s);
}

static void test_spurious_resume(void **state)
{
    SSL_CTX *s = async_ctx("slow");
    conn k;
    conn_open(&k, s);
    uint64_t t0 = kl_now_ns();
    assert_true(step(&k));
    /* paused right away, not after the key server's delay */
    assert_true(kl_now_ns() - t0 < (DELAY_MS / 2) * NS_PER_MS);
    assert_false(readable(k.wait_fd, 0));
    /* resumed early: pauses again, same descriptor */
    assert_true(step(&k));
    assert_true(step(&k));
    assert_int_equal(k.pauses, 3);
    run(&k);
    assert_true(done(&k));
    assert_int_equal(k.pauses, 4);
    assert_true(kl_now_ns() - t0 >= DELAY_MS * NS_PER_MS);
    conn_close(&k);
    assert_int_equal(live_settled(0), 0);
    SSL_CTX_free(s);
}

/* NPAR handshakes on the slow key from one thread: all pause at once and
 * complete in about one delay, not NPAR of them. */
static void test_overlap(void **state)
{
    SSL_CTX *s = async_ctx("slow");
    conn k[NPAR];
    uint64_t t0 = kl_now_ns();
    for (int i = 0; i < NPAR; i++) {
        conn_open(&k[i], s);
        assert_true(step(&k[i]));
    }
    int left = NPAR;
    while (left > 0) {
        struct pollfd p[NPAR];
        int n = 0, idx[NPAR];
        for (int i = 0; i < NPAR; i++)
            if (!done(&k[i])) {
                p[n] = (struct pollfd){.fd = k[i].wait_fd, .events = POLLIN};
                idx[n++] = i;
            }
        assert_true(poll(p, (nfds_t)n, 5000) > 0);
        for (int j = 0; j < n; j++)
            if (p[j].revents & POLLIN) {
                conn *c = &k[idx[j]];
                if (!step(c)) {
                    assert_true(done(c));
                    left--;
                }
            }
    }
    uint64_t ms = (kl_now_ns() - t0) / NS_PER_MS;
    fprintf(stderr, "%d handshakes on a %d ms key: %llu ms\n", NPAR, DELAY_MS,
            (unsigned long long)ms);
    assert_true(ms >= DELAY_MS);
    assert_true(ms < 3 * DELAY_MS); /* serial would be NPAR * DELAY_MS */
    for (int i = 0; i < NPAR; i++)
        conn_close(&k[i]);
    assert_int_equal(live_settled(0), 0);
    SSL_CTX_free(s);
}

/* One abandoned SSL, in a child process (see test_abandoned): 0 when
 * nothing of ours outlived it. */
static int abandon_one(SSL_CTX *s, int late)
{
    conn k;
    /* First a whole handshake: the child's I/O thread and connection are
     * up, so no descriptor is being opened when ours is closed below (its
     * number could be reused at once, and the check would be wrong). */
    conn_open(&k, s);
    run(&k);
    int ok = done(&k);
    conn_close(&k);
    if (!ok || live_settled(0) != 0)
        return 7;
    conn_open(&k, s);
    if (!step(&k) || klp_async_live() != 1)
        return 1;
    int fd = k.wait_fd;
    if (late && !readable(fd, 5000)) /* the answer is in, never taken */
        return 2;
    conn_close(&k);
    if (fd_open(fd))
        return 3;
    if (live_settled(0) != 0)
        return 4;
    /* a cancelled request's answer arrives into nothing */
    usleep((DELAY_MS + 100) * 1000);
    if (klp_async_live() != 0)
        return 5;
    /* and the target still serves */
    conn_open(&k, s);
    run(&k);
    ok = done(&k);
    conn_close(&k);
    return ok ? 0 : 6;
}

/* Freed while paused, before and after the answer came - what HAProxy
 * does with a connection that goes away during a key operation. In a
 * child that leaves with _exit: OpenSSL cannot free a job that is never
 * resumed (SSL_free leaves the paused ASYNC_JOB and its stack allocated,
 * as in HAProxy), and the leak checker would report that at exit. */
static void test_abandoned(void **state)
{
    SSL_CTX *s = async_ctx("slow");
    for (int late = 0; late < 2; late++) {
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            _exit(abandon_one(s, late));
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    SSL_CTX_free(s);
}

static void test_no_key_server(void **state)
{
    SSL_CTX *s = async_ctx("dead");
    conn k;
    conn_open(&k, s);
    ERR_clear_error();
    run(&k);
    assert_false(done(&k));
    assert_true(k.failed);
    assert_true(k.pauses >= 1);
    char *e = errors_text();
    assert_non_null(strstr(e, "no keyless key server answered"));
    free(e);
    conn_close(&k);
    assert_int_equal(live_settled(0), 0);
    SSL_CTX_free(s);
}

static void test_fork(void **state)
{
    SSL_CTX *s = async_ctx("fast");
    conn k;
    conn_open(&k, s);
    run(&k);
    assert_true(done(&k));
    conn_close(&k);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int ok = 1;
        for (int i = 0; i < 3; i++) {
            conn_open(&k, s);
            run(&k);
            ok &= done(&k) && k.pauses == 1;
            if (!ok)
                fprintf(stderr, "child: done %d pauses %d failed %d\n",
                        done(&k), k.pauses, k.failed);
            conn_close(&k);
        }
        _exit(ok ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    conn_open(&k, s);
    run(&k);
    assert_true(done(&k));
    conn_close(&k);
    SSL_CTX_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pauses_not_blocks),
        cmocka_unit_test(test_spurious_resume),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_abandoned),
        cmocka_unit_test(test_no_key_server),
        cmocka_unit_test(test_fork),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
