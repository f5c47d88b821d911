/* SPDX-License-Identifier: Apache-2.0 */
/* keylessd with an accelerator: the test accelerator provider
 * (tests/accel) loaded by openssl_providers (its module's path), preferred
 * for key operations (key_propquery) and named in async_providers, so its keys'
 * operations run as ASYNC jobs on the shard (docs/DESIGN.md "Accelerators:
 * ASYNC jobs").
 * - ECDSA and RSA-PSS signatures made on the device verify with OpenSSL;
 *   --keystore-debug says which keys are "async";
 * - 64 requests at once on one connection to a 50 ms device take about one
 *   device latency on one shard (blocking workers would need 64 / 4 x
 *   50 ms);
 * - completion through the provider's callback (the default: no wait fd
 *   in the shard's loop), through eventfds (callback=0), and a device
 *   whose queue refuses submissions (busy=: ASYNC_STATUS_EAGAIN, resumed
 *   and retried): every signature verifies, the metrics say which;
 * - an operation the device never answers ends at the request's deadline
 *   (P9 deadline_ms) with `internal error`, and the next one works;
 * - a device that stops does not stall what it does not hold: Ed25519 (the
 *   accelerator has none: OpenSSL's own code signs it) and pings answer at
 *   once. */
#include "daemon.h"
#include "accelctl.h"
#include "net.h"
#include "pki.h"
#include "testutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "client/verify.h"

#define LATENCY_MS 50
#define MANY 64

static td_daemon d;
static char a_providers[PATH_MAX + 32];
static uint16_t mport;
static char *dir;
static char ctl_path[PATH_MAX];
static EVP_PKEY *rsa_pub, *ec_pub, *ed_pub;
static uint8_t rsa_ski[20], ec_ski[20], ed_ski[20];

static void ctl(const char *text)
{
    accel_ctl(ctl_path, text);
}

static kl_request_spec sign_spec(uint8_t op, const uint8_t *ski,
                                 const uint8_t *dg, size_t dlen)
{
    return (kl_request_spec){
        .opcode = op, .payload = dg, .payload_len = dlen, .ski = ski};
}

static void expect_signed(kl_client_result *r, EVP_PKEY *pub, uint8_t op,
                          const uint8_t *in, size_t inlen)
{
    char why[256];
    assert_int_equal(r->opcode, KL_OP_RESPONSE);
    if (kl_verify_output(pub, op, in, inlen, r->payload, r->payload_len, why,
                         sizeof why) != KL_OK)
        fail_msg("signature does not verify: %s", why);
}

static void test_signs(void **state)
{
    (void)state;
    ctl("latency_us=1000\nslots=64\n");
    kl_client *c = td_connect(&d);
    uint8_t dg[32];
    assert_int_equal(RAND_bytes(dg, 32), 1);
    kl_client_result r;
    kl_request_spec s =
        sign_spec(KL_OP_ECDSA_SIGN_SHA256, ec_ski, dg, sizeof dg);
    td_call(&d, c, &s, &r);
    expect_signed(&r, ec_pub, s.opcode, dg, 32);
    kl_client_result_free(&r);
    s = sign_spec(KL_OP_RSA_PSS_SIGN_SHA256, rsa_ski, dg, sizeof dg);
    td_call(&d, c, &s, &r);
    expect_signed(&r, rsa_pub, s.opcode, dg, 32);
    kl_client_result_free(&r);
    kl_client_close(c);

    /* the key listing names the back end */
    char *out = NULL;
    char keys[PATH_MAX + 32];
    snprintf(keys, sizeof keys, "--private-key-dirs=%s/keys", dir);
    const char *argv[] = {"keylessd",
                          keys,
                          a_providers,
                          "--async-providers=kl_accel",
                          "--key-propquery=?provider=kl_accel",
                          "--keystore-debug",
                          NULL};
    char bin[PATH_MAX];
    snprintf(bin, sizeof bin, "%s/keylessd", tu_bin_dir());
    argv[0] = bin;
    assert_int_equal(td_run(argv, &out, 20000), 0);
    assert_non_null(strstr(out, "async"));
    assert_non_null(strstr(out, "file")); /* Ed25519 */
    free(out);
}

/* MANY signatures at once on one connection; all must verify. Returns
 * the ms from the first request sent to the last answer. */
static double sign_many(void)
{
    kl_client *c = td_connect(&d);
    static uint8_t dg[MANY][32];
    uint32_t ids[MANY];
    double t0 = td_now_ms();
    for (int i = 0; i < MANY; i++) {
        assert_int_equal(RAND_bytes(dg[i], 32), 1);
        kl_request_spec s =
            sign_spec(KL_OP_ECDSA_SIGN_SHA256, ec_ski, dg[i], 32);
        assert_int_equal(kl_client_send(c, &s, &ids[i]), KL_OK);
    }
    assert_int_equal(kl_client_flush(c, 5000), KL_OK);
    for (int n = 0; n < MANY; n++) {
        kl_client_result r;
        assert_int_equal(kl_client_recv(c, 10000, &r), KL_OK);
        int i = 0;
        while (i < MANY && ids[i] != r.id)
            i++;
        assert_true(i < MANY);
        expect_signed(&r, ec_pub, KL_OP_ECDSA_SIGN_SHA256, dg[i], 32);
        kl_client_result_free(&r);
    }
    double took = td_now_ms() - t0;
    kl_client_close(c);
    return took;
}

static void test_many_at_once(void **state)
{
    (void)state;
    char text[128];
    snprintf(text, sizeof text, "latency_us=%d\nslots=128\n",
             LATENCY_MS * 1000);
    ctl(text);
    double took = sign_many();
    printf("%d signatures on a %d ms device: %.0f ms\n", MANY, LATENCY_MS,
           took);
    assert_true(took >= LATENCY_MS - 1);
    /* one shard, no more threads: far below 64 / 4 x 50 ms = 800 ms */
    assert_true(took < 8 * LATENCY_MS);
}

/* A shard-0 series of docs/METRICS.md "Accelerators" once it satisfies
 * ok (the gauges are set at the end of the shard's turn: bounded wait). */
static double async_metric(const char *name, bool (*ok)(double))
{
    char key[128];
    snprintf(key, sizeof key, "%s{shard=\"0\"} ", name);
    double v = -1;
    for (int i = 0; i < 40; i++) {
        char *body = NULL;
        assert_int_equal(tn_http_get(mport, "/metrics", &body), 200);
        const char *p = strstr(body, key);
        if (!p)
            fail_msg("no %s in:\n%s", key, body);
        v = strtod(p + strlen(key), NULL);
        free(body);
        if (ok(v))
            break;
        usleep(25 * 1000);
    }
    return v;
}

static bool is_zero(double v)
{
    return v == 0;
}
static bool positive(double v)
{
    return v > 0;
}
static bool at_least_8(double v)
{
    return v >= 8;
}

static void test_completion_paths(void **state)
{
    (void)state;
    /* the provider calls back: no descriptor in the shard's loop */
    ctl("latency_us=5000\nslots=64\n");
    sign_many();
    assert_int_equal(async_metric("keylessd_async_wait_fds", is_zero), 0);
    double retried0 = async_metric("keylessd_async_retried_total", is_zero);
    assert_int_equal(retried0, 0);

    /* eventfds instead: they join the loop (one per slot, kept) */
    ctl("latency_us=5000\nslots=64\ncallback=0\n");
    sign_many();
    double fds = async_metric("keylessd_async_wait_fds", positive);
    assert_true(fds >= 1 && fds <= 256);

    /* callbacks again, and a full queue for the next 8 submissions: those
     * pause with ASYNC_STATUS_EAGAIN, are resumed and submit again */
    ctl("latency_us=5000\nslots=64\nbusy=8\n");
    sign_many();
    assert_int_equal(async_metric("keylessd_async_retried_total", at_least_8),
                     8);
}

static void test_deadline(void **state)
{
    (void)state;
    ctl("latency_us=1000\ntimeout_ms=4000\nlose=1\n");
    kl_client *c = td_connect(&d);
    uint8_t dg[32] = {7};
    kl_request_spec s =
        sign_spec(KL_OP_ECDSA_SIGN_SHA256, ec_ski, dg, sizeof dg);
    s.req_context = "{\"deadline_ms\":300}";
    kl_client_result r;
    double t0 = td_now_ms();
    td_call(&d, c, &s, &r);
    double took = td_now_ms() - t0;
    printf("lost operation answered after %.0f ms\n", took);
    assert_int_equal(r.opcode, KL_OP_ERROR);
    assert_int_equal(r.error, KL_ERR_INTERNAL);
    assert_true(took >= 290 && took < 2000);
    kl_client_result_free(&r);
    /* the device answers the next one */
    s.req_context = NULL;
    td_call(&d, c, &s, &r);
    expect_signed(&r, ec_pub, s.opcode, dg, 32);
    kl_client_result_free(&r);
    kl_client_close(c);

    /* docs/METRICS.md "Accelerators": the early answer counted; the lost
     * operation stays in progress until the device's timeout (4 s). The
     * gauges are set at the end of the shard's turn: read until they
     * settle (bounded) */
    char *body = NULL;
    for (int i = 0; i < 40; i++) {
        free(body);
        body = NULL;
        assert_int_equal(tn_http_get(mport, "/metrics", &body), 200);
        if (strstr(body, "keylessd_async_jobs{shard=\"0\"} 1\n"))
            break;
        usleep(25 * 1000);
    }
    const char *a = strstr(body, "keylessd_async");
    if (!a || !strstr(body, "keylessd_async_jobs{shard=\"0\"} 1\n") ||
        !strstr(body, "keylessd_async_expired_total{shard=\"0\"} 1\n") ||
        !strstr(body, "keylessd_async_paused_total{shard=\"0\"}"))
        fail_msg("metrics:\n%s", a ? a : body);
    /* it ran (the device had it): an error answer, not a shed request */
    const char *shed =
        strstr(body, "keylessd_requests_shed_total{reason=\"deadline\"} ");
    if (shed &&
        strtod(shed +
                   strlen("keylessd_requests_shed_total{reason=\"deadline\"} "),
               NULL) != 0)
        fail_msg("an operation that ran counted as shed:\n%.200s", shed);
    free(body);
}

static void test_stopped_device(void **state)
{
    (void)state;
    ctl("latency_us=1000\ntimeout_ms=1500\nstopped=1\n");
    kl_client *c = td_connect(&d);
    uint8_t dg[32] = {9};
    kl_request_spec held =
        sign_spec(KL_OP_ECDSA_SIGN_SHA256, ec_ski, dg, sizeof dg);
    uint32_t held_id;
    assert_int_equal(kl_client_send(c, &held, &held_id), KL_OK);
    assert_int_equal(kl_client_flush(c, 2000), KL_OK);
    double t0 = td_now_ms();
    static const uint8_t msg[] = "not on the device";
    kl_request_spec ed =
        sign_spec(KL_OP_ED25519_SIGN, ed_ski, msg, sizeof msg - 1);
    kl_client_result r;
    assert_int_equal(kl_client_call(c, &ed, 5000, &r), KL_OK);
    expect_signed(&r, ed_pub, ed.opcode, msg, sizeof msg - 1);
    kl_client_result_free(&r);
    td_expect_ping(&d, c);
    double took = td_now_ms() - t0;
    printf("Ed25519 and a ping beside a stopped device: %.0f ms\n", took);
    assert_true(took < 500);
    /* the held one ends with the driver's timeout, as an error */
    assert_int_equal(kl_client_recv(c, 5000, &r), KL_OK);
    assert_int_equal(r.id, held_id);
    assert_int_equal(r.opcode, KL_OP_ERROR);
    kl_client_result_free(&r);
    ctl("latency_us=1000\n");
    kl_client_close(c);
}

static int setup(void **state)
{
    (void)state;
    const char *module = getenv("KL_ACCEL");
    assert_non_null(module);
    dir = tp_tempdir("accel-server");
    char keys[PATH_MAX];
    snprintf(keys, sizeof keys, "%s/keys", dir);
    tu_sh("mkdir -p %s", keys);
    tp_copy_key(keys, tp_path("keys/ecdsa-p256.key"));
    tp_copy_key(keys, tp_path("keys/rsa-2048.key"));
    tp_copy_key(keys, tp_path("keys/ed25519.key"));
    rsa_pub = tp_load_pub(tp_path("pubkeys/rsa-2048.pem"));
    ec_pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    ed_pub = tp_load_pub(tp_path("pubkeys/ed25519.pem"));
    tp_ski(rsa_pub, rsa_ski);
    tp_ski(ec_pub, ec_ski);
    tp_ski(ed_pub, ed_ski);
    snprintf(ctl_path, sizeof ctl_path, "%s/accel.ctl", dir);
    /* keylessd inherits it */
    setenv("KL_ACCEL_CTL", ctl_path, 1);
    snprintf(a_providers, sizeof a_providers, "--openssl-providers=%s", module);
    ctl("latency_us=1000\n");
    static char a_mport[64];
    mport = tn_free_port();
    snprintf(a_mport, sizeof a_mport, "--metrics-port=%u", mport);
    static const char *extra[] = {a_providers, "--async-providers=kl_accel",
                                  "--key-propquery=?provider=kl_accel", a_mport,
                                  NULL};
    td_opts o = {
        .name = "accel-server", .key_dirs = keys, .extra = extra, .shards = 1};
    td_start(&d, &o);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(td_stop(&d, 10000), 0);
    EVP_PKEY_free(rsa_pub);
    EVP_PKEY_free(ec_pub);
    EVP_PKEY_free(ed_pub);
    tp_rmtree(dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signs),
        cmocka_unit_test(test_many_at_once),
        cmocka_unit_test(test_completion_paths),
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_stopped_device),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
