/* SPDX-License-Identifier: Apache-2.0 */
/* A route whose server refuses connections (nothing listens on its port)
 * is not waited out to the attempt timeout: the refusal ends the attempt
 * at once: the request goes to the next route or is answered with an
 * error (docs/ROUTING.md "Moving on"). */
#include "../tools/rtharness.h"
#include "net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *tmp;

static int setup(void **state)
{
    (void)state;
    tmp = tp_tempdir("router-refused");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tp_rmtree(tmp);

    return 0;
}

static void test_refused_route_answers_at_once(void **state)
{
    (void)state;
    uint8_t ski[20];
    EVP_PKEY *pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    tp_ski(pub, ski);
    EVP_PKEY_free(pub);
    char table[512], text[512];
    snprintf(table, sizeof table, "%s/routes.yaml", tmp);
    snprintf(text, sizeof text,
             "servers:\n  - {name: gone, address: \"127.0.0.1:%u\", region: "
             "eu, serves: [%s]}\n",
             (unsigned)tn_free_port(), tp_ski_hex(ski));
    fp_write_file(table, text);
    kl_router_opts o = rh_opts(table);
    o.timeout_floor_ns =
        2000 * KL_NS_PER_MS; /* a timeout would be plain to see */
    o.timeout_ceiling_ns = 3000 * KL_NS_PER_MS;
    kl_router *r = rh_router(&o);
    rh_req q;
    rh_req_make(&q, ski, -1, NULL);
    rh_batch b;
    rh_batch_init(&b);
    /* one at a time, before and after the probes found the remote down */
    for (int i = 0; i < 5; i++) {
        rh_run(r, &b, &q, 1, 1);
        fp_sleep_ms(50);
    }
    fprintf(stderr, "5 requests to a refused route: slowest %.0f ms\n",
            b.max_ms);
    assert_int_equal(b.done, 5);
    assert_int_equal(b.by_err[KL_ERR_NONE], 0);
    assert_true(b.max_ms < 1000); /* the timeout is 2,000-3,000 ms */
    kl_router_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_route_answers_at_once),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
