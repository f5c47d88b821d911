/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-bench's command line: Go-style flags with one or two dashes, the
 * reference tool's names and durations, -mix lists - and what is refused. */
#include "testutil.h"

#include <string.h>

#include "bench.h"

static int parse(bench *b, const char *const *args)
{
    char *argv[64];
    int n = 0;
    argv[n++] = "keyless-bench";
    for (int i = 0; args[i]; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    bench_defaults(b);
    return bench_parse_args(b, n, argv);
}

static void test_flags(void **state)
{
    bench b;
    const char *a[] = {"-server",
                       "keys.example:2408",
                       "-workers",
                       "16",
                       "-duration",
                       "1m30s",
                       "--pause=0.5ms",
                       "-histogram-min",
                       "0",
                       "-histogram-max",
                       "2ms",
                       "-histogram-step",
                       "20\xc2\xb5s",
                       "-json",
                       "-verify=false",
                       "-gmp=2",
                       "-timeout",
                       "250ms",
                       "-op",
                       "OpRSASignSHA256",
                       "-sni",
                       "www.example",
                       NULL};
    assert_int_equal(parse(&b, a), BENCH_EXIT_OK);
    assert_string_equal(b.server, "keys.example:2408");
    assert_int_equal(b.ref_workers, 16);
    assert_int_equal(b.duration_ns, 90000000000ull);
    assert_int_equal(b.pause_ns, 500000);
    assert_int_equal(b.hist_step, 20000);
    assert_int_equal(b.hist_max, 2000000);
    assert_true(b.hist_set);
    assert_true(b.json);
    assert_false(b.verify);
    assert_int_equal(b.threads, 2); /* -gmp is -threads */
    assert_int_equal(b.timeout_ms, 250);
    assert_string_equal(b.op_name, "OpRSASignSHA256");
    assert_string_equal(b.sni, "www.example");
    assert_false(b.connections_set);

    const char *c[] = {"--connections", "8",      "-depth=64",
                       "-rate",         "2500.5", NULL};
    assert_int_equal(parse(&b, c), BENCH_EXIT_OK);
    assert_int_equal(b.connections, 8);
    assert_int_equal(b.depth, 64);
    assert_true(b.connections_set && b.depth_set);
    assert_true(b.rate == 2500.5);
    /* defaults */
    const char *none[] = {NULL};
    assert_int_equal(parse(&b, none), BENCH_EXIT_OK);
    assert_int_equal(b.port, 2407);
    assert_int_equal(b.duration_ns, 10000000000ull);
    assert_int_equal(b.connections, 1);
    assert_int_equal(b.progress_flag, -1);
}

static void test_flags_refused(void **state)
{
    bench b;
    const char *const bad[][4] = {
        {"-duration", "10", NULL},    /* Go durations need a unit */
        {"-bogus", NULL},             /* unknown */
        {"-workers", NULL},           /* value missing */
        {"-json=maybe", NULL},        /* not a boolean */
        {"-rate", "0", NULL},         /* not > 0 */
        {"-rate", "fast", NULL},      /* not a number */
        {"-connections", "-3", NULL}, /* negative */
        {"-timeout", "10us", NULL},   /* below 1 ms */
        {"stray", NULL},              /* not a flag */
        {"-", NULL},                  /* neither */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (parse(&b, bad[i]) != BENCH_EXIT_USAGE)
            fail_msg("\"%s %s\" accepted", bad[i][0],
                     bad[i][1] ? bad[i][1] : "");
    const char *h[] = {"--help", NULL};
    assert_int_equal(parse(&b, h), BENCH_EXIT_HELP);
}

static void test_mix(void **state)
{
    bench b;
    char err[256];
    bench_defaults(&b);
    assert_int_equal(
        bench_parse_mix(&b,
                        "ecdsa-sha256@/k/ec.pem:8,ping,"
                        "OpRSASignSHA256@"
                        "406550d87609ecae021a83ef2c1f372c08f42699:3",
                        err, sizeof err),
        BENCH_EXIT_OK);
    assert_int_equal(b.nops, 3);
    assert_int_equal(b.total_weight, 12);
    assert_int_equal(b.ops[0].op, KL_OP_ECDSA_SIGN_SHA256);
    assert_int_equal(b.ops[0].weight, 8);
    assert_string_equal(b.ops[0].key_arg, "/k/ec.pem");
    assert_string_equal(b.ops[0].label, "ecdsa-sha256");
    assert_int_equal(b.ops[1].op, KL_OP_PING);
    assert_int_equal(b.ops[1].weight, 1);
    assert_string_equal(b.ops[1].key_arg, "");
    assert_int_equal(b.ops[2].op, KL_OP_RSA_SIGN_SHA256);
    assert_string_equal(b.ops[2].key_arg,
                        "406550d87609ecae021a83ef2c1f372c08f42699");
    /* a file name with a colon keeps it when no weight follows */
    assert_int_equal(
        bench_parse_mix(&b, "ed25519@c:/keys/ed.pem", err, sizeof err),
        BENCH_EXIT_OK);
    assert_string_equal(b.ops[0].key_arg, "c:/keys/ed.pem");

    const char *bad[] = {
        "",    "nosuchop", "ecdsa-sha256:0", "ping:9999999", "ecdsa-sha256@",
        ",,,", NULL};
    for (size_t i = 0; bad[i]; i++)
        if (bench_parse_mix(&b, bad[i], err, sizeof err) == BENCH_EXIT_OK)
            fail_msg("mix \"%s\" accepted", bad[i]);
    char many[512] = "";
    for (int i = 0; i < BENCH_MAX_OPS + 1; i++)
        strcat(many, "ping,");
    assert_int_equal(bench_parse_mix(&b, many, err, sizeof err),
                     BENCH_EXIT_USAGE);
    assert_non_null(strstr(err, "at most"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_flags_refused),
        cmocka_unit_test(test_mix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
