/* SPDX-License-Identifier: Apache-2.0 */
/* Reload without restart (docs/DESIGN.md "Reload without dropping a
 * request"), under load: a client thread keeps
 * signing, pipelined, and another keeps opening new connections, while the
 * test sends SIGHUP a dozen times, adding and removing key files (one of
 * them broken). Not one request may fail; a key added becomes usable, a
 * key removed answers `key not found`, a broken key is reported and
 * skipped. systemd hears RELOADING=1 and READY=1 around each reload. */
#include "daemon.h"
#include "pki.h"
#include "testutil.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/pem.h>

#include "client/verify.h"

#define BATCH 64
#define RELOADS 12

static td_daemon d;
static char *dir;
static EVP_PKEY *ec_pub, *ed_pub;
static uint8_t ec_ski[20], ed_ski[20];
static atomic_bool stop;
static atomic_ulong ok_count, failed, conns;
static char failure[512];
static int notify_fd = -1;
/* the client's files, copied out of tp_path's rotating buffers (which are
 * not for threads) before the client threads start */
static char client_cert[1024], client_key[1024], ca_cert[1024];

static kl_client *connect_client(void)
{
    kl_client_opts o = {.host = "127.0.0.1",
                        .port = d.port,
                        .cert_file = client_cert,
                        .key_file = client_key,
                        .ca_file = ca_cert,
                        .connect_timeout_ms = 10000};
    kl_client *c = NULL;
    char err[256];
    return kl_client_connect(&o, &c, err, sizeof err) == KL_OK ? c : NULL;
}
static char notify_path[100];

static int setup(void **state)
{
    dir = tp_tempdir("reload");
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    tp_copy_key(dir, tp_path("keys/ed25519.key"));
    ec_pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    ed_pub = tp_load_pub(tp_path("pubkeys/ed25519.pem"));
    tp_ski(ec_pub, ec_ski);
    tp_ski(ed_pub, ed_ski);
    snprintf(client_cert, sizeof client_cert, "%s", tp_path("client.crt"));
    snprintf(client_key, sizeof client_key, "%s", tp_path("client.key"));
    snprintf(ca_cert, sizeof ca_cert, "%s", tp_path("ca.crt"));
    /* the service manager's socket (sd_notify) */
    snprintf(notify_path, sizeof notify_path, "%s/notify.sock", dir);
    notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(notify_fd >= 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", notify_path);
    assert_int_equal(bind(notify_fd, (struct sockaddr *)&a, sizeof a), 0);
    setenv("NOTIFY_SOCKET", notify_path, 1);
    td_opts o = {.name = "reload",
                 .key_dirs = dir,
                 .extra = (const char *[]){"--watch-key-dirs=false", NULL}};
    td_start(&d, &o);
    unsetenv("NOTIFY_SOCKET");
    return 0;
}

static int teardown(void **state)
{
    int st = td_stop(&d, 0);
    EVP_PKEY_free(ec_pub);
    EVP_PKEY_free(ed_pub);
    close(notify_fd);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

/* The next sd_notify datagram (waits up to 10 s). */
static void expect_notify(const char *prefix)
{
    struct timeval tv = {10, 0};
    setsockopt(notify_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[256];
    ssize_t n = recv(notify_fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        fail_msg("no sd_notify message (wanted %s)", prefix);
    buf[n] = 0;
    if (strncmp(buf, prefix, strlen(prefix)) != 0)
        fail_msg("sd_notify: got \"%s\", wanted \"%s...\"", buf, prefix);
}

static void fail_once(const char *fmt, const char *a, unsigned b)
{
    if (atomic_fetch_add(&failed, 1) == 0)
        snprintf(failure, sizeof failure, fmt, a, b);
}

/* Signs in pipelined batches on one connection until told to stop; every
 * answer must be a signature that verifies. */
static void *signer(void *arg)
{
    kl_client *c = connect_client();
    if (!c) {
        fail_once("signer cannot connect%s%u", "", 0);
        return NULL;
    }
    uint8_t in[BATCH][32];
    uint8_t ops[BATCH + 1];
    uint32_t base = 0;
    while (!atomic_load(&stop)) {
        uint32_t first = 0;
        for (int i = 0; i < BATCH; i++) {
            for (int b = 0; b < 32; b++)
                in[i][b] = (uint8_t)(base + (uint32_t)i * 13 + (uint32_t)b);
            uint8_t op = i % 2 ? KL_OP_ED25519_SIGN : KL_OP_ECDSA_SIGN_SHA256;
            kl_request_spec s = {.opcode = op,
                                 .payload = in[i],
                                 .payload_len = 32,
                                 .ski = i % 2 ? ed_ski : ec_ski};
            uint32_t id;
            if (kl_client_send(c, &s, &id) != KL_OK) {
                fail_once("send: %s%u", kl_client_last_error(c), 0);
                goto out;
            }
            if (i == 0)
                first = id;
            ops[i] = op;
        }
        for (int k = 0; k < BATCH; k++) {
            kl_client_result r;
            kl_status st = kl_client_recv(c, 30000, &r);
            if (st != KL_OK) {
                fail_once("recv: %s (%u)", kl_status_str(st), (unsigned)k);
                goto out;
            }
            int i = (int)(r.id - first);
            char why[256];
            if (i < 0 || i >= BATCH || r.opcode != KL_OP_RESPONSE)
                fail_once("request failed: %s (id %u)", kl_err_text(r.error),
                          r.id);
            else if (kl_verify_output(ops[i] == KL_OP_ED25519_SIGN ? ed_pub
                                                                   : ec_pub,
                                      ops[i], in[i], 32, r.payload,
                                      r.payload_len, why, sizeof why) != KL_OK)
                fail_once("bad signature: %s (id %u)", why, r.id);
            else
                atomic_fetch_add(&ok_count, 1);
            kl_client_result_free(&r);
        }
        base += 7;
    }
out:
    kl_client_close(c);
    return NULL;
}

/* New connections during reloads: each must complete its handshake (with
 * whichever certificate is current) and answer. */
static void *connector(void *arg)
{
    while (!atomic_load(&stop)) {
        kl_client *c = connect_client();
        if (!c) {
            fail_once("connect failed%s%u", "", 0);
            return NULL;
        }
        static const uint8_t p[] = "hello";
        kl_request_spec s = {
            .opcode = KL_OP_PING, .payload = p, .payload_len = 5};
        kl_client_result r;
        if (kl_client_call(c, &s, 30000, &r) != KL_OK || r.opcode != KL_OP_PONG)
            fail_once("ping on a new connection failed%s%u", "", 0);
        else
            kl_client_result_free(&r);
        kl_client_close(c);
        atomic_fetch_add(&conns, 1);
        usleep(5000);
    }
    return NULL;
}

/* Asks for a signature with key ski until the answer is `want` (an error
 * code, or KL_ERR_NONE for a signature), for up to 15 s. */
static void wait_for(kl_client *c, const uint8_t *ski, uint8_t op, uint8_t want)
{
    static const uint8_t digest[32] = {1, 2, 3};
    double until = td_now_ms() + 15000;
    for (;;) {
        kl_request_spec s = {
            .opcode = op, .payload = digest, .payload_len = 32, .ski = ski};
        kl_client_result r;
        td_call(&d, c, &s, &r);
        uint8_t got = r.opcode == KL_OP_ERROR ? r.error : KL_ERR_NONE;
        kl_client_result_free(&r);
        if (got == want)
            return;
        if (td_now_ms() > until) {
            td_dump_log(&d);
            fail_msg("key %s: still 0x%02x, wanted 0x%02x", tp_ski_hex(ski),
                     got, want);
        }
        usleep(20000);
    }
}

static void test_reload_under_load(void **state)
{
    static const struct {
        const char *file;
        uint8_t op;
    } extra[] = {{"rsa-2048", KL_OP_RSA_SIGN_SHA256},
                 {"ecdsa-p384", KL_OP_ECDSA_SIGN_SHA256}};
    expect_notify("READY=1");
    atomic_store(&stop, false);
    kl_client *c = td_connect(&d);
    pthread_t t1, t2;
    assert_int_equal(pthread_create(&t1, NULL, signer, NULL), 0);
    assert_int_equal(pthread_create(&t2, NULL, connector, NULL), 0);
    char path[1024], src[1024];
    for (int i = 0; i < RELOADS; i++) {
        const char *name = extra[i % 2].file;
        snprintf(src, sizeof src, "keys/%s.key", name);
        snprintf(path, sizeof path, "pubkeys/%s.pem", name);
        EVP_PKEY *pub = tp_load_pub(tp_path(path));
        uint8_t ski[20];
        tp_ski(pub, ski);
        EVP_PKEY_free(pub);
        /* added: usable after the reload; a broken file beside it is
         * skipped */
        tp_copy_key(dir, tp_path(src));
        if (i == 4) {
            snprintf(path, sizeof path, "%s/broken.key", dir);
            FILE *f = fopen(path, "w");
            fputs("not a key\n", f);
            fclose(f);
            chmod(path, 0600); /* a decoding failure, not a mode one */
        }
        td_signal(&d, SIGHUP);
        expect_notify("RELOADING=1\nMONOTONIC_USEC=");
        expect_notify("READY=1");
        wait_for(c, ski, extra[i % 2].op, KL_ERR_NONE);
        if (i == 4) {
            snprintf(path, sizeof path, "%s/broken.key", dir);
            unlink(path);
        }
        /* removed: `key not found` after the next reload */
        snprintf(path, sizeof path, "%s/%s.key", dir, name);
        assert_int_equal(unlink(path), 0);
        td_signal(&d, SIGHUP);
        expect_notify("RELOADING=1");
        expect_notify("READY=1");
        wait_for(c, ski, extra[i % 2].op, KL_ERR_KEY_NOT_FOUND);
        usleep(30000); /* let the load run between reloads too */
    }
    /* keep the load on a little after the last swap */
    usleep(200000);
    atomic_store(&stop, true);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    kl_client_close(c);
    print_message("%lu signatures and %lu new connections across %d "
                  "reloads, %lu failed\n",
                  atomic_load(&ok_count), atomic_load(&conns), 2 * RELOADS,
                  atomic_load(&failed));
    if (atomic_load(&failed)) {
        td_dump_log(&d);
        fail_msg("%lu requests failed; first: %s", atomic_load(&failed),
                 failure);
    }
    assert_true(atomic_load(&ok_count) > 0);
    assert_true(atomic_load(&conns) > 0);
    char *log = td_read_log(&d);
    size_t reloads = 0;
    for (const char *p = log; (p = strstr(p, "reloaded: ")); p++)
        reloads++;
    assert_int_equal(reloads, 2 * RELOADS);
    snprintf(path, sizeof path, "%s/broken.key: ", dir);
    assert_non_null(strstr(log, path));
    assert_non_null(strstr(log, "1 failed"));
    free(log);
}

/* A key file pieced together from two keys (its private part X's, its
 * public part Y's) that sorts before the genuine Y: at a reload it is
 * refused, naming the file, and Y's SKI signs with Y's key - before, the
 * pieced file took Y's SKI and every signature failed to verify
 * (docs/OPERATIONS.md "Key files"). Reload and the directory watch share
 * the load. */
static void test_reload_refuses_pieced_key(void **state)
{
    EVP_PKEY *x = EVP_EC_gen("P-256");
    EVP_PKEY *y = tp_genkey(dir, "y-genuine.key", "EC", "P-256", 0);
    assert_non_null(x);
    OSSL_PARAM *px = NULL, *py = NULL;
    assert_int_equal(EVP_PKEY_todata(x, EVP_PKEY_KEYPAIR, &px), 1);
    assert_int_equal(EVP_PKEY_todata(y, EVP_PKEY_PUBLIC_KEY, &py), 1);
    OSSL_PARAM *pub = OSSL_PARAM_locate(px, OSSL_PKEY_PARAM_PUB_KEY);
    const OSSL_PARAM *ypub =
        OSSL_PARAM_locate_const(py, OSSL_PKEY_PARAM_PUB_KEY);
    assert_non_null(pub);
    assert_non_null(ypub);
    assert_int_equal(pub->data_size, ypub->data_size);
    memcpy(pub->data, ypub->data, ypub->data_size);
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    EVP_PKEY *pieced = NULL;
    assert_int_equal(EVP_PKEY_fromdata_init(ctx), 1);
    assert_int_equal(EVP_PKEY_fromdata(ctx, &pieced, EVP_PKEY_KEYPAIR, px), 1);
    char path[1200];
    snprintf(path, sizeof path, "%s/a-pieced.key", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_PrivateKey(f, pieced, NULL, NULL, 0, NULL, NULL),
                     1);
    fclose(f);
    assert_int_equal(chmod(path, 0600), 0);

    uint8_t ski[20];
    tp_ski(y, ski);
    td_signal(&d, SIGHUP);
    expect_notify("RELOADING=1");
    expect_notify("READY=1");
    kl_client *c = td_connect(&d);
    wait_for(c, ski, KL_OP_ECDSA_SIGN_SHA256, KL_ERR_NONE);
    static const uint8_t digest[32] = {9, 8, 7};
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                         .payload = digest,
                         .payload_len = 32,
                         .ski = ski};
    kl_client_result r;
    td_call(&d, c, &s, &r);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    char why[256];
    if (kl_verify_output(y, KL_OP_ECDSA_SIGN_SHA256, digest, 32, r.payload,
                         r.payload_len, why, sizeof why) != KL_OK)
        fail_msg("the signature for the genuine key's SKI does not verify: "
                 "%s",
                 why);
    kl_client_result_free(&r);
    kl_client_close(c);
    char *log = td_read_log(&d);
    char want[1400];
    snprintf(want, sizeof want,
             "%s: the private and public parts of the key do not match", path);
    if (!strstr(log, want)) {
        td_dump_log(&d);
        fail_msg("no \"%s\" in the log", want);
    }
    free(log);
    unlink(path);
    snprintf(path, sizeof path, "%s/y-genuine.key", dir);
    unlink(path);
    EVP_PKEY_CTX_free(ctx);
    OSSL_PARAM_free(px);
    OSSL_PARAM_free(py);
    EVP_PKEY_free(pieced);
    EVP_PKEY_free(x);
    EVP_PKEY_free(y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reload_under_load),
        cmocka_unit_test(test_reload_refuses_pieced_key),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
