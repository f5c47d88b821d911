/* SPDX-License-Identifier: Apache-2.0 */
/* Soak: for KL_SOAK_SECONDS (20 s in CI; `make soak
 * SOAK_SECONDS=600` on demand) keylessd serves, at once,
 * - a well-behaved asynchronous client (kl_target) with mixed operations
 *   (RSA-2048, ECDSA P-256, Ed25519, and a key that comes and goes);
 * - clients that pipeline requests and vanish without reading;
 * - clients that send malformed frames, and random bytes;
 * - reloads by SIGHUP, and key files added and removed (inotify),
 * and must: never crash (a clean exit at the end), answer every request of
 * the well-behaved client (result, or `key not found` for the key that
 * comes and goes - never a timeout or a broken connection), and keep its
 * memory stable after the warm-up. */
#include "test_abuse_common.h"

#include <signal.h>

#include <openssl/rand.h>

static td_daemon d;
static char *dir;
static uint8_t ski_rsa[20], ski_ec[20], ski_ed[20], ski_churn[20];
static atomic_bool stop_all;
static ha_opts opts; /* made in the main thread */

/* Failures here are expected (the server may close first). */
#define IGNORE(x)                                                              \
    do {                                                                       \
        kl_status ignored_ = (x);                                              \
        (void)ignored_;                                                        \
    } while (0)

static void load_ski(const char *name, uint8_t ski[20])
{
    char rel[128];
    snprintf(rel, sizeof rel, "pubkeys/%s.pem", name);
    EVP_PKEY *pk = tp_load_pub(tp_path(rel));
    tp_ski(pk, ski);
    EVP_PKEY_free(pk);
}

/* ---- the well-behaved client ---- */

typedef struct good {
    kl_target *t;
    uint64_t submitted, ok, churn_missing, bad, timeouts, failed;
    uint8_t last_bad_err;
    int inflight;
} good;

static const uint8_t dg[64] = {0x61, 0x62, 0x63};

static void on_good(void *arg, const kl_result *r);

static void submit_one(good *g, unsigned i)
{
    kl_request_spec s = {.payload = dg};
    switch (i % 8) {
    case 0:
        s.opcode = KL_OP_RSA_SIGN_SHA256;
        s.ski = ski_rsa;
        s.payload_len = 32;
        break;
    case 1:
    case 2:
    case 3:
        s.opcode = KL_OP_ECDSA_SIGN_SHA256;
        s.ski = ski_ec;
        s.payload_len = 32;
        break;
    case 4:
    case 5:
        s.opcode = KL_OP_ED25519_SIGN;
        s.ski = ski_ed;
        s.payload_len = 64;
        break;
    case 6:
        s.opcode = KL_OP_PING;
        s.payload_len = 16;
        break;
    default: /* the key that comes and goes */
        s.opcode = KL_OP_ECDSA_SIGN_SHA384;
        s.ski = ski_churn;
        s.payload_len = 48;
        break;
    }
    void *tag = (void *)(uintptr_t)(i % 8 == 7);
    assert_int_equal(kl_async_submit(g->t, &s, 3000, on_good,
                                     (void *)((uintptr_t)g | (uintptr_t)tag),
                                     NULL),
                     KL_OK);
    g->submitted++;
    g->inflight++;
}

static void on_good(void *arg, const kl_result *r)
{
    bool churn = (uintptr_t)arg & 1;
    good *g = (good *)((uintptr_t)arg & ~(uintptr_t)1);
    g->inflight--;
    if (r->status == KL_E_TIMEOUT)
        g->timeouts++;
    else if (r->status != KL_OK)
        g->failed++;
    else if (r->opcode == KL_OP_RESPONSE || r->opcode == KL_OP_PONG)
        g->ok++;
    else if (churn && r->error == KL_ERR_KEY_NOT_FOUND)
        g->churn_missing++;
    else {
        g->bad++;
        g->last_bad_err = r->error;
    }
}

static void *good_main(void *arg)
{
    good *g = arg;
    int fd = kl_async_fd(g->t);
    unsigned i = 0;
    double next = td_now_ms();
    while (!atomic_load(&stop_all) || g->inflight > 0) {
        /* ~800 requests a second, at most 64 in flight */
        while (!atomic_load(&stop_all) && td_now_ms() >= next &&
               g->inflight < 64) {
            submit_one(g, i++);
            next += 1.25;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        (void)poll(&p, 1, 1);
        if (kl_async_process(g->t) != KL_OK)
            g->failed++;
    }
    return NULL;
}

/* ---- the misbehaving clients ---- */

static void *vanish_main(void *arg)
{
    unsigned *count = arg;
    unsigned seed = 7;
    while (!atomic_load(&stop_all)) {
        kl_client *c = ha_connect(&opts);
        if (!c)
            continue;
        int n = 1 + (int)(rand_r(&seed) % 64);
        for (int i = 0; i < n; i++) {
            kl_request_spec s = {.opcode = i % 2 ? KL_OP_RSA_SIGN_SHA256
                                                 : KL_OP_ECDSA_SIGN_SHA256,
                                 .payload = dg,
                                 .payload_len = 32,
                                 .ski = i % 2 ? ski_rsa : ski_ec};
            uint32_t id;
            IGNORE(kl_client_send(c, &s, &id));
        }
        IGNORE(kl_client_flush(c, 1000));
        if (rand_r(&seed) % 2) {
            /* hard close: reset with requests in flight */
            struct linger lg = {1, 0};
            setsockopt(kl_client_fd(c), SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        }
        kl_client_close(c);
        (*count)++;
        ha_sleep_ms((int)(rand_r(&seed) % 20));
    }
    return NULL;
}

static void *garbage_main(void *arg)
{
    unsigned *count = arg;
    uint8_t junk[4096];
    unsigned seed = 11;
    while (!atomic_load(&stop_all)) {
        kl_client *c = ha_connect(&opts);
        if (!c)
            continue;
        if (rand_r(&seed) % 3 == 0) {
            /* random bytes, then gone */
            (void)RAND_bytes(junk, sizeof junk);
            IGNORE(
                kl_client_send_raw(c, junk, 1 + rand_r(&seed) % sizeof junk));
            IGNORE(kl_client_flush(c, 500));
        } else {
            /* a malformed frame: answered `format error`, connection kept */
            uint8_t m[14] = {1, 0, 0, 6, 0, 0, 0, 42, 0x11, 0xff, 0xff, 1, 2};
            IGNORE(kl_client_send_raw(c, m, sizeof m));
            kl_client_result r;
            if (kl_client_recv(c, 3000, &r) == KL_OK) {
                if (r.error != KL_ERR_FORMAT)
                    fprintf(stderr, "malformed frame answered %u\n", r.error);
                kl_client_result_free(&r);
            }
        }
        kl_client_close(c);
        (*count)++;
        ha_sleep_ms((int)(rand_r(&seed) % 30));
    }
    return NULL;
}

/* ---- the test ---- */

static void test_soak(void **state)
{
    const char *env = getenv("KL_SOAK_SECONDS");
    int secs = env && atoi(env) > 0 ? atoi(env) : 20;
    dir = tp_tempdir("soak");
    tp_copy_key(dir, tp_path("keys/rsa-2048.key"));
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    tp_copy_key(dir, tp_path("keys/ed25519.key"));
    load_ski("rsa-2048", ski_rsa);
    load_ski("ecdsa-p256", ski_ec);
    load_ski("ed25519", ski_ed);
    load_ski("ecdsa-p384", ski_churn);
    /* The TLS session cache holds max_connections sessions (~9 KB each with
     * the client certificate) and, since reloads keep an unchanged TLS
     * context, is no longer emptied by the SIGHUPs: with the default 10,000
     * it would still be filling (+20 MB) when the memory is compared. 256
     * (far above the few connections open at once here) fills it during
     * the warm-up, so growth after it means a leak. */
    static const char *extra[] = {"--watch-delay=200ms", "--loglevel=1",
                                  "--max-connections=256", NULL};
    td_opts o = {.name = "soak", .key_dirs = dir, .extra = extra};
    td_start(&d, &o);
    ha_opts_make(&opts, &d);

    const td_daemon *ds[] = {&d};
    kl_target_opts over = {.retry_budget_pct = -1};
    good g = {.t = td_target(ds, 1, &over)};
    unsigned vanished = 0, garbage = 0;
    atomic_init(&stop_all, false);
    pthread_t tg, tv, tgb;
    assert_int_equal(pthread_create(&tg, NULL, good_main, &g), 0);
    assert_int_equal(pthread_create(&tv, NULL, vanish_main, &vanished), 0);
    assert_int_equal(pthread_create(&tgb, NULL, garbage_main, &garbage), 0);

    char churn[1100];
    snprintf(churn, sizeof churn, "%s/ecdsa-p384.key", dir);
    long rss_warm = 0, rss_max = 0, rss_first = ha_rss_kb(d.pid);
    unsigned reloads = 0, churns = 0;
    double t0 = td_now_ms();
    for (int tick = 0; td_now_ms() - t0 < 1000.0 * secs; tick++) {
        ha_sleep_ms(250);
        if (tick % 3 == 0) {
            /* a key file added or removed: the watcher reloads */
            if (access(churn, F_OK) == 0)
                unlink(churn);
            else
                tp_copy_key(dir, tp_path("keys/ecdsa-p384.key"));
            churns++;
        }
        if (tick % 4 == 1) {
            td_signal(&d, SIGHUP);
            reloads++;
        }
        long rss = ha_rss_kb(d.pid);
        assert_true(rss > 0); /* still running */
        double el = td_now_ms() - t0;
        if (!rss_warm && el >= 250.0 * secs)
            rss_warm = rss;
        if (rss_warm && rss > rss_max)
            rss_max = rss;
    }
    atomic_store(&stop_all, true);
    pthread_join(tg, NULL);
    pthread_join(tv, NULL);
    pthread_join(tgb, NULL);
    kl_target_stats ts;
    kl_target_get_stats(g.t, &ts);
    kl_target_free(g.t);

    print_message(
        "soak %d s: %llu requests (%llu answered, %llu `key not found` for "
        "the key that comes and goes, %llu other errors, %llu timed out, "
        "%llu failed; %llu retries), %u vanishing clients, %u garbage "
        "clients, %u SIGHUPs, %u key files added/removed; RSS %ld kB at "
        "start, %ld after warm-up, max %ld after\n",
        secs, (unsigned long long)g.submitted, (unsigned long long)g.ok,
        (unsigned long long)g.churn_missing, (unsigned long long)g.bad,
        (unsigned long long)g.timeouts, (unsigned long long)g.failed,
        (unsigned long long)ts.retries, vanished, garbage, reloads, churns,
        rss_first, rss_warm, rss_max);
    if (g.bad)
        print_message("last unexpected error code: %u\n", g.last_bad_err);
    assert_true(g.submitted > 100u * (unsigned)secs);
    assert_int_equal(g.ok + g.churn_missing, g.submitted);
    assert_int_equal(g.timeouts + g.failed + g.bad, 0);
    assert_true(g.churn_missing > 0);
    assert_true(vanished > 10 && garbage > 10);
    /* stable: no more than 16 MB above the warm-up level */
    HA_EXPECT_RSS_BELOW(rss_max - rss_warm, 16 * 1024);
    assert_int_equal(td_stop(&d, 0), 0);
    char *log = td_read_log(&d);
    assert_non_null(strstr(log, "reloaded"));
    free(log);
    tp_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_soak),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
