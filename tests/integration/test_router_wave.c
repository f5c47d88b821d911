/* SPDX-License-Identifier: Apache-2.0 */
/* A data centre whose servers all die at once, under load: four near
 * remotes serve the key, a fifth farther away serves it too. The four are
 * SIGKILLed one after another, a few milliseconds apart, while 32
 * requests are in flight. A request whose remote dies moves to the next
 * best - the next of the four, which dies moments later - and without
 * care spends every attempt of max_attempts on the dying four. An attempt
 * whose connection is lost sooner than its remote has ever answered is
 * not counted (docs/ROUTING.md "How it works", Moving on), so every request
 * reaches the fifth remote: not one fails. */
#include "../tools/rtharness.h"
#include "net.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NEAR 4
#define TOTAL 6000
#define INFLIGHT 32

static char *tmp, *keydir;

static int setup(void **state)
{
    (void)state;
    tmp = tp_tempdir("router-wave");
    keydir = tp_tempdir("router-wave-keys");
    tp_copy_key(keydir, tp_path("keys/ecdsa-p256.key"));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tp_rmtree(keydir);
    tp_rmtree(tmp);
    return 0;
}

typedef struct load {
    kl_router *r;
    rh_batch *b;
    const rh_req *q;
} load;

static void *run_load(void *arg)
{
    load *l = arg;
    rh_run(l->r, l->b, l->q, TOTAL, INFLIGHT);
    return NULL;
}

static unsigned done_now(rh_batch *b)
{
    pthread_mutex_lock(&b->mu);
    unsigned d = b->done;
    pthread_mutex_unlock(&b->mu);
    return d;
}

static void test_dc_lost_at_once(void **state)
{
    (void)state;
    uint8_t ski[20];
    EVP_PKEY *pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    tp_ski(pub, ski);
    EVP_PKEY_free(pub);
    static rh_dc near[NEAR], far;
    char text[2048], name[NEAR][8];
    size_t at = (size_t)snprintf(text, sizeof text, "servers:\n");
    for (int i = 0; i < NEAR; i++) {
        snprintf(name[i], sizeof name[i], "near%d", i);
        rh_dc_start(&near[i], name[i], keydir, 0);
        at += (size_t)snprintf(text + at, sizeof text - at,
                               "  - {name: %s, address: \"127.0.0.1:%u\", "
                               "region: eu, serves: [%s]}\n",
                               name[i], near[i].p.port, tp_ski_hex(ski));
    }
    /* 3 ms each way: measured slower than the near four, so tried last */
    rh_dc_start(&far, "far", keydir, 3);
    snprintf(text + at, sizeof text - at,
             "  - {name: far, address: \"127.0.0.1:%u\", region: eu, "
             "serves: [%s]}\n",
             far.p.port, tp_ski_hex(ski));
    char table[512];
    snprintf(table, sizeof table, "%s/routes.yaml", tmp);
    fp_write_file(table, text);

    kl_router_opts o = rh_opts(table);
    assert_int_equal(o.max_attempts, 3); /* the default */
    kl_router *r = rh_router(&o);
    rh_wait_measured(r, NEAR + 1);
    rh_req q;
    rh_req_make(&q, ski, -1, NULL);
    rh_batch b;
    rh_batch_init(&b);
    load l = {r, &b, &q};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, run_load, &l), 0);
    while (done_now(&b) < TOTAL / 4)
        fp_sleep_ms(1);
    /* the data centre goes, one server after another */
    for (int i = 0; i < NEAR; i++) {
        td_signal(&near[i].d, SIGKILL);
        fp_sleep_ms(2);
    }
    pthread_join(th, NULL);
    rh_print_remotes(r);
    unsigned ok = b.by_err[0], failed = b.done - ok;
    fprintf(stderr,
            "%u requests, %u failed; far remote sent %llu after the near "
            "four were killed\n",
            b.done, failed, (unsigned long long)rh_sent(r, "far"));
    for (int e = 1; e < 256; e++)
        if (b.by_err[e])
            fprintf(stderr, "  %u answered with error 0x%02x\n", b.by_err[e],
                    e);
    assert_int_equal(b.done, TOTAL);
    assert_int_equal(failed, 0);
    assert_true(rh_sent(r, "far") > 0);
    kl_router_free(r);
    for (int i = 0; i < NEAR; i++) {
        (void)td_wait(&near[i].d, 5000);
        near[i].d.pid = 0;
        rh_dc_stop(&near[i]);
    }
    rh_dc_stop(&far);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dc_lost_at_once, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
