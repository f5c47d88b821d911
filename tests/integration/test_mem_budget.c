/* SPDX-License-Identifier: Apache-2.0 */
/* Memory bounded by configuration, and output buffered per connection
 * that never grows memory (docs/SECURITY.md "Network: authenticated
 * clients"): many connections pipeline pings with
 * 64 KiB frames and never read the answers. keylessd's peak RSS (VmHWM)
 * stays within max_buffered_bytes plus a fixed cost per connection, far
 * below what max_output_per_conn alone would allow (NCONN x 8 MiB), and a
 * well-behaved client on the side is still served while the flooders stay
 * connected. */
#include "test_abuse_common.h"

enum {
    NCONN = 32,
    PLEN = 65000,            /* ping payload: frames of about 64 KiB */
    BUDGET_MB = 8,           /* --max-buffered-bytes */
    PER_CONN_KB = 320,       /* input buffer, TLS buffers, one answer */
    SLACK_MB = 24,           /* allocator and thread noise */
    MAX_REQS_PER_CONN = 4000 /* 256 MB of answers per connection */
};

static td_daemon d;
static char *dir;
static EVP_PKEY *ec_pub;
static uint8_t ec_ski[20];

static int setup(void **state)
{
    static const char *extra[] = {"--idle-timeout=60s",
                                  "--max-buffered-bytes=8388608", NULL};
    ha_raise_nofile();
    dir = tp_tempdir("mem-budget");
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    ec_pub = tp_load_pub(tp_path("pubkeys/ecdsa-p256.pem"));
    tp_ski(ec_pub, ec_ski);
    td_opts o = {.name = "mem-budget", .key_dirs = dir, .extra = extra};
    td_start(&d, &o);
    return 0;
}

static int teardown(void **state)
{
    int st = td_stop(&d, 0); /* a clean exit */
    EVP_PKEY_free(ec_pub);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

/* Peak resident memory of pid in KiB (VmHWM), -1 when unknown. */
static long hwm_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static void test_flood_without_reading(void **state)
{
    static uint8_t payload[PLEN], frame[PLEN + 64];
    static ha_tls t[NCONN];
    memset(payload, 0xab, sizeof payload);
    kl_request_spec spec = {
        .id = 1, .opcode = KL_OP_PING, .payload = payload, .payload_len = PLEN};
    size_t flen = 0;
    assert_int_equal(kl_request_encode(frame, sizeof frame, &spec, &flen),
                     KL_OK);

    ha_side side;
    ha_side_start(&side, &d, ec_ski, 5);
    long hwm0 = hwm_kb(d.pid);
    assert_true(hwm0 > 0);
    size_t total = 0;
    for (int i = 0; i < NCONN; i++) {
        ha_tls_connect(&t[i], d.port, NULL, NULL, 4096);
        ha_tls_send_timeout(&t[i], 300);
        size_t reqs = 0;
        while (reqs < MAX_REQS_PER_CONN && ha_tls_write(&t[i], frame, flen))
            reqs++;
        /* backpressure: the server stopped reading this one */
        assert_true(reqs < MAX_REQS_PER_CONN);
        total += reqs;
    }
    ha_sleep_ms(300); /* the last reads and answers */
    long hwm1 = hwm_kb(d.pid);
    long limit_kb = (BUDGET_MB + SLACK_MB) * 1024L + (long)NCONN * PER_CONN_KB;
    print_message("%d connections wrote %zu pings of %d bytes without "
                  "reading; keylessd VmHWM %ld -> %ld kB (bound: growth < "
                  "%ld kB; without a budget it could reach %d MB)\n",
                  NCONN, total, PLEN, hwm0, hwm1, limit_kb, NCONN * 8);
    HA_EXPECT_RSS_BELOW(hwm1 - hwm0, limit_kb);

    /* With every flooder still connected and holding its share, a new
     * well-behaved client gets its signature, and so does the side one. */
    ha_opts ho;
    ha_opts_make(&ho, &d);
    kl_client *c = ha_connect(&ho);
    assert_non_null(c);
    for (int i = 0; i < 20; i++)
        assert_true(ha_sign_ms(c, ec_ski) >= 0);
    kl_client_close(c);
    ha_side_stop(&side, "during the flood"); /* signed, no failure */
    for (int i = 0; i < NCONN; i++)
        ha_tls_close(&t[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flood_without_reading),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
