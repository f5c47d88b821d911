/* SPDX-License-Identifier: Apache-2.0 */
/* One kl_target shared by several threads (client issue: TSan-clean under
 * concurrent use): blocking callers take turns driving the target while
 * another thread submits asynchronously and a third runs the poll loop;
 * every answer must be the right one (each signature verifies against the
 * digest that thread sent). Run under -DKL_SANITIZE=thread in CI. */
#include "daemon.h"
#include "pki.h"
#include "testutil.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "client/verify.h"

#define NTHREADS 4
#define PER_THREAD 150
#define NASYNC 400

static td_daemon d;
static char *dir;
static EVP_PKEY *ec_pub;
static uint8_t ec_ski[20];
static kl_target *shared;
static atomic_int failures;
static atomic_int async_done;
static atomic_bool stop_loop;

static int setup(void **state)
{
    dir = tp_tempdir("client-threads");
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    ec_pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    tp_ski(ec_pub, ec_ski);
    td_opts o = {.name = "client-threads", .key_dirs = dir};
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

static bool verifies(const uint8_t digest[32], const uint8_t *sig, size_t len)
{
    char why[128];
    return kl_verify_output(ec_pub, KL_OP_ECDSA_SIGN_SHA256, digest, 32, sig,
                            len, why, sizeof why) == KL_OK;
}

static void *blocking_caller(void *arg)
{
    int me = (int)(intptr_t)arg;
    for (int i = 0; i < PER_THREAD; i++) {
        uint8_t digest[32];
        for (int b = 0; b < 32; b++)
            digest[b] = (uint8_t)(me * 31 + i + b);
        kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                             .payload = digest,
                             .payload_len = 32,
                             .ski = ec_ski};
        kl_client_result r;
        if (kl_target_call(shared, &s, 10000, &r) != KL_OK ||
            r.opcode != KL_OP_RESPONSE ||
            !verifies(digest, r.payload, r.payload_len))
            atomic_fetch_add(&failures, 1);
        kl_client_result_free(&r);
    }
    return NULL;
}

typedef struct aslot {
    uint8_t digest[32];
} aslot;

static void on_async(void *arg, const kl_result *res)
{
    aslot *s = arg;
    if (res->status != KL_OK || res->opcode != KL_OP_RESPONSE ||
        !verifies(s->digest, res->payload, res->payload_len))
        atomic_fetch_add(&failures, 1);
    atomic_fetch_add(&async_done, 1);
}

static void *async_submitter(void *arg)
{
    aslot *slots = arg;
    for (int i = 0; i < NASYNC; i++) {
        for (int b = 0; b < 32; b++)
            slots[i].digest[b] = (uint8_t)(200 + i * 3 + b);
        kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                             .payload = slots[i].digest,
                             .payload_len = 32,
                             .ski = ec_ski};
        uint64_t h;
        if (kl_async_submit(shared, &s, 10000, on_async, &slots[i], &h) !=
            KL_OK)
            atomic_fetch_add(&failures, 1);
        /* cancel a few right away: their callbacks never run */
        if (i % 50 == 49 && kl_async_cancel(shared, h) == KL_OK)
            atomic_fetch_add(&async_done, 1);
    }
    return NULL;
}

static void *poll_loop(void *arg)
{
    while (!atomic_load(&stop_loop)) {
        struct pollfd p = {.fd = kl_async_fd(shared), .events = POLLIN};
        (void)poll(&p, 1, 10);
        if (kl_async_process(shared) != KL_OK)
            atomic_fetch_add(&failures, 1);
    }
    return NULL;
}

static void test_shared_target(void **state)
{
    static aslot slots[NASYNC];
    const td_daemon *ds[] = {&d};
    shared = td_target(ds, 1, NULL);
    pthread_t th[NTHREADS], sub, loop;
    assert_int_equal(pthread_create(&loop, NULL, poll_loop, NULL), 0);
    assert_int_equal(pthread_create(&sub, NULL, async_submitter, slots), 0);
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(
            pthread_create(&th[i], NULL, blocking_caller, (void *)(intptr_t)i),
            0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    pthread_join(sub, NULL);
    double end = td_now_ms() + 20000;
    while (atomic_load(&async_done) < NASYNC && td_now_ms() < end) {
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
    atomic_store(&stop_loop, true);
    pthread_join(loop, NULL);
    assert_int_equal(atomic_load(&async_done), NASYNC);
    assert_int_equal(atomic_load(&failures), 0);
    kl_target_stats st;
    kl_target_get_stats(shared, &st);
    assert_int_equal(st.submitted, NTHREADS * PER_THREAD + NASYNC);
    assert_int_equal(st.answered + st.cancelled, st.submitted);
    assert_int_equal(st.connects, 1);
    kl_target_free(shared);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_target),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
