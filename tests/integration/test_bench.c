/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-bench against a keylessd, about a second per mode: closed loop
 * with the reference tool's flags and lines, open loop at a fixed rate, a
 * mix of every kind of operation verified answer by answer, JSON, threads,
 * idle connections - outputs parsed, counts plausible, no errors; and the
 * negative controls: a key the server lacks counts errors and fails, bad
 * flags are named; -ski-file spreads requests over a list of keys. */
#include "daemon.h"
#include "pki.h"
#include "testutil.h"
#include "tool.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/pem.h>

#include "godur.h"

static td_daemon d;
static char *dir;
static tt_tool bench; /* keyless-bench with the test PKI's TLS flags */
static char server[64], port[16];
static char p256[1024], p384[1024], rsa[1024], ed[1024], p256_ski[41];

static int setup(void **state)
{
    dir = tp_tempdir("bench");
    static const char *const keys[] = {"rsa-2048", "ecdsa-p256", "ed25519"};
    char rel[64];
    for (size_t i = 0; i < 3; i++) {
        snprintf(rel, sizeof rel, "keys/%s.key", keys[i]);
        tp_copy_key(dir, tp_path(rel));
    }
    td_opts o = {.name = "bench", .key_dirs = dir};
    td_start(&d, &o);
    snprintf(server, sizeof server, "127.0.0.1:%u", d.port);
    snprintf(port, sizeof port, "%u", d.port);
    tt_tool_init(&bench, "keyless-bench", "-");
    tt_keep(p256, tp_path("pubkeys/ecdsa-p256.pem"));
    tt_keep(p384, tp_path("pubkeys/ecdsa-p384.pem"));
    tt_keep(rsa, tp_path("pubkeys/rsa-2048.pem"));
    tt_keep(ed, tp_path("pubkeys/ed25519.pem"));
    EVP_PKEY *pk = tp_load_pub(p256);
    uint8_t ski[20];
    tp_ski(pk, ski);
    EVP_PKEY_free(pk);
    snprintf(p256_ski, sizeof p256_ski, "%s", tp_ski_hex(ski));
    return 0;
}

static int teardown(void **state)
{
    int st = td_stop(&d, 0);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

/* Runs keyless-bench with the TLS flags plus args (NULL-terminated);
 * returns the exit status, output in *out. */
static int run(char **out, const char *const *args)
{
    return tt_tool_run(&bench, NULL, args, out, 60000);
}

static void run_ok(char **out, const char *const *args)
{
    int st = run(out, args);
    if (st != 0) {
        td_dump_log(&d);
        fail_msg("keyless-bench exit %d:\n%s", st, *out);
    }
}

/* The number after "label" in the output; fails when absent. */
static double number_after(const char *out, const char *label)
{
    const char *p = strstr(out, label);
    if (!p)
        fail_msg("no \"%s\" in:\n%s", label, out);
    return strtod(p + strlen(label), NULL);
}

/* The duration after "label" (Go syntax, as printed). */
static uint64_t duration_after(const char *out, const char *label)
{
    const char *p = strstr(out, label);
    if (!p)
        fail_msg("no \"%s\" in:\n%s", label, out);
    p += strlen(label);
    char word[64];
    size_t n = strcspn(p, ",\n ");
    assert_true(n < sizeof word);
    memcpy(word, p, n);
    word[n] = 0;
    uint64_t ns;
    if (kl_dur_parse(word, &ns) != KL_OK)
        fail_msg("\"%s\" after \"%s\" is not a duration", word, label);
    return ns;
}

/* Sums the reference histogram's lines "[ a, b) n | ===" and checks their
 * shape; returns the total. *lines gets the number of lines. */
static uint64_t histogram_total(const char *out, int *lines)
{
    uint64_t total = 0;
    *lines = 0;
    for (const char *p = out; (p = strstr(p, "\n[")) != NULL; p++) {
        char a[32], b[32], bar[64] = "";
        unsigned long long n;
        int got =
            sscanf(p + 2, " %31[^,], %31[^)]) %llu | %63s", a, b, &n, bar);
        if (got < 3)
            fail_msg("histogram line does not parse: %.80s", p + 1);
        uint64_t x;
        assert_int_equal(kl_dur_parse(a, &x), KL_OK);
        if (strcmp(b, "inf") != 0)
            assert_int_equal(kl_dur_parse(b, &x), KL_OK);
        assert_true(n == 0 || bar[0] == '=');
        total += n;
        (*lines)++;
    }
    return total;
}

static json_t *parse_json(const char *out)
{
    const char *brace = strchr(out, '{');
    if (!brace)
        fail_msg("no JSON in:\n%s", out);
    json_error_t e;
    json_t *j = json_loads(brace, 0, &e);
    if (!j)
        fail_msg("JSON does not parse (%s):\n%s", e.text, out);
    return j;
}

static double jnum(json_t *j, const char *path)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *v = j;
    for (char *save, *k = strtok_r(buf, ".", &save); k;
         k = strtok_r(NULL, ".", &save)) {
        /* "p99.9" is one key: rejoin the remainder when the last dot
         * split it */
        if (!strcmp(k, "p99")) {
            char *rest = strtok_r(NULL, "", &save);
            if (rest) {
                char key[16];
                snprintf(key, sizeof key, "p99.%s", rest);
                v = json_object_get(v, key);
                break;
            }
        }
        v = json_object_get(v, k);
    }
    if (!json_is_number(v))
        fail_msg("JSON field %s missing or not a number", path);
    return json_number_value(v);
}

/* Closed loop with the reference tool's flags and output lines. */
static void test_closed_loop_reference_flags(void **state)
{
    char *out = NULL;
    const char *a[] = {"-server",
                       "127.0.0.1",
                       "-port",
                       port,
                       "-ski",
                       p256_ski,
                       "-op",
                       "OpECDSASignSHA256",
                       "-workers",
                       "2",
                       "-duration",
                       "1s",
                       "-histogram-min",
                       "0",
                       "-histogram-max",
                       "2ms",
                       "-histogram-step",
                       "200\xc2\xb5s",
                       NULL};
    run_ok(&out, a);
    print_message("%s", out);
    double ops = number_after(out, "Total operations completed: ");
    assert_true(ops > 100);
    /* duration / operations */
    uint64_t avg = duration_after(out, "Average operation duration: ");
    double want = 1e9 / ops;
    assert_true(avg > want * 0.98 && avg < want * 1.02);
    /* the reference tool's line, as runbooks grep it */
    assert_non_null(strstr(out, "\n[ 200\xc2\xb5s, 400\xc2\xb5s) "));
    int lines;
    uint64_t total = histogram_total(out, &lines);
    assert_int_equal(total, (uint64_t)ops);  /* every answer in a bucket */
    assert_true(lines >= 10 && lines <= 12); /* 10 + under/over when used */
    assert_int_equal(number_after(out, "Errors: "), 0);
    assert_non_null(strstr(out, "2 connections x 1 in flight"));
    uint64_t p50 = duration_after(out, "p50 "),
             p99 = duration_after(out, "p99 ");
    uint64_t mx = duration_after(out, "max ");
    assert_true(p50 > 0 && p50 <= p99 && p99 <= mx);
    assert_non_null(strstr(out, "Client CPU: "));
    free(out);
}

/* Open loop: as many requests as the rate asks for, latency from the
 * intended send times, JSON fields present. */
static void test_open_loop_json(void **state)
{
    char *out = NULL;
    const char *a[] = {"-server",   server, "-pubkey",      p256,
                       "-rate",     "500",  "-connections", "2",
                       "-duration", "1s",   "-json",        NULL};
    run_ok(&out, a);
    json_t *j = parse_json(out);
    assert_string_equal(json_string_value(json_object_get(j, "mode")), "open");
    double ops = jnum(j, "operations");
    /* 500 intended sends in the second; a few at its edges may fall out */
    assert_true(ops >= 450 && ops <= 510);
    assert_int_equal(jnum(j, "errors"), 0);
    assert_true(jnum(j, "rate") == 500);
    double p50 = jnum(j, "latency_us.p50"), p90 = jnum(j, "latency_us.p90"),
           p99 = jnum(j, "latency_us.p99"), p999 = jnum(j, "latency_us.p99.9"),
           mx = jnum(j, "latency_us.max");
    assert_true(p50 > 0 && p50 <= p90 && p90 <= p99 && p99 <= p999 &&
                p999 <= mx);
    assert_true(jnum(j, "client_cpu.user_s") >= 0);
    assert_true(jnum(j, "client_cpu.us_per_op") > 0);
    assert_true(jnum(j, "avg_op_duration_us") > 0);
    assert_true(json_array_size(json_object_get(j, "histogram")) == 20);
    assert_string_equal(json_string_value(json_object_get(j, "tls_version")),
                        "TLSv1.3");
    json_decref(j);
    free(out);
}

/* -tick batches the open loop's sends on a grid, and the wait for the
 * grid is charged: 500/s on a 50 ms grid leaves ~25 requests per tick,
 * each waiting 0-50 ms (median ~25 ms) before it is sent. */
static void test_open_loop_tick_charged(void **state)
{
    char *out = NULL;
    const char *a[] = {"-server", server, "-pubkey",   p256, "-rate", "500",
                       "-tick",   "50ms", "-duration", "1s", "-json", NULL};
    run_ok(&out, a);
    json_t *j = parse_json(out);
    double ops = jnum(j, "operations");
    assert_true(ops >= 450 && ops <= 510); /* the rate is kept */
    assert_int_equal(jnum(j, "errors"), 0);
    double p50 = jnum(j, "latency_us.p50"), mx = jnum(j, "latency_us.max");
    fprintf(stderr, "tick 50 ms: p50 %.1f ms, max %.1f ms\n", p50 / 1000,
            mx / 1000);
    assert_true(p50 >= 15000); /* waits for the grid counted */
    assert_true(mx >= 40000);
    json_decref(j);
    free(out);
}

/* A run whose process was stopped and resumed (SIGSTOP/SIGCONT: ^Z, or a
 * script stopping "every other process" for a quiet machine - the open
 * loop that "went idle" under load) goes on sending afterwards, and its
 * report says that its figures include the stop; a run nobody stopped
 * says nothing of the kind. */
static void test_stopped_run_is_flagged(void **state)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/stopped.json", dir);
    const char *argv[] = {bench.path, "-cert",        bench.cert, "-key",
                          bench.key,  "-ca",          bench.ca,   "-server",
                          server,     "-pubkey",      p256,       "-rate",
                          "400",      "-connections", "2",        "-duration",
                          "1.5s",     "-json",        NULL};
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        FILE *f = freopen(path, "w", stdout);
        if (!f)
            _exit(126);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    struct timespec ts = {0, 400 * 1000000L};
    nanosleep(&ts, NULL);
    assert_int_equal(kill(pid, SIGSTOP), 0);
    ts.tv_nsec = 300 * 1000000L;
    nanosleep(&ts, NULL);
    assert_int_equal(kill(pid, SIGCONT), 0);
    int wst;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_true(WIFEXITED(wst));
    char *out = tu_read_file(path, NULL);
    assert_non_null(out);
    if (WEXITSTATUS(wst) != 0)
        fail_msg("keyless-bench exit %d:\n%s", WEXITSTATUS(wst), out);
    json_t *j = parse_json(out);
    assert_true(json_is_true(json_object_get(j, "client_stopped")));
    /* the requests due during the stop leave late (charged) and the loop
     * keeps its rate afterwards: ~600 in 1.5 s */
    double ops = jnum(j, "operations");
    assert_true(ops >= 540 && ops <= 610);
    assert_true(jnum(j, "latency_us.max") >= 200000); /* the stop, charged */
    json_decref(j);
    free(out);

    const char *a[] = {"-server", server,      "-pubkey", p256,    "-rate",
                       "400",     "-duration", "0.5s",    "-json", NULL};
    run_ok(&out, a);
    j = parse_json(out);
    assert_true(json_is_false(json_object_get(j, "client_stopped")));
    json_decref(j);
    free(out);
}

/* Every kind of operation in one weighted mix, each answer verified. */
static void test_mix_verified(void **state)
{
    char mix[8192];
    snprintf(mix, sizeof mix,
             "ecdsa-sha256@%s:8,rsa-pss-sha256@%s:2,rsa-sha384@%s:1,"
             "ed25519@%s:2,rsa-decrypt@%s:1,ping:1",
             p256, rsa, rsa, ed, rsa);
    char *out = NULL;
    const char *a[] = {
        "-server",         server,      "-mix",      mix,  "-verify", "-json",
        "--connections=2", "--depth=4", "-duration", "1s", NULL};
    run_ok(&out, a);
    json_t *j = parse_json(out);
    assert_int_equal(jnum(j, "errors"), 0);
    assert_int_equal(jnum(j, "error_detail.verification_failures"), 0);
    json_t *ops = json_object_get(j, "ops");
    assert_int_equal(json_array_size(ops), 6);
    double total = jnum(j, "operations"), ecdsa = 0;
    for (size_t i = 0; i < 6; i++) {
        json_t *o = json_array_get(ops, i);
        double n = json_number_value(json_object_get(o, "operations"));
        if (n < 1)
            fail_msg("operation %s never completed",
                     json_string_value(json_object_get(o, "op")));
        assert_int_equal(json_number_value(json_object_get(o, "errors")), 0);
        if (i == 0)
            ecdsa = n;
    }
    /* weight 8 of 15: about half the requests (the fast ones complete
     * more often in a closed loop, so only a loose bound) */
    assert_true(ecdsa > total * 0.3);
    json_decref(j);
    free(out);
}

/* -threads: the connections shared by two event loops. */
static void test_threads(void **state)
{
    char *out = NULL;
    const char *a[] = {"-server",      server,    "-pubkey",  ed,
                       "-op",          "ed25519", "-threads", "2",
                       "-connections", "4",       "-depth",   "4",
                       "-duration",    "500ms",   "-verify",  NULL};
    run_ok(&out, a);
    assert_true(number_after(out, "Total operations completed: ") > 50);
    assert_int_equal(number_after(out, "Errors: "), 0);
    assert_non_null(strstr(out, "2 threads"));
    free(out);
}

/* Without -op the key says what to do, as with keyless-cli: rsa-sha256
 * for an RSA key, ed25519 for an Ed25519 one, ecdsa-sha256 for EC - each
 * answer verified against the key. */
static void test_op_from_key(void **state)
{
    (void)state;
    const char *keys[] = {rsa, ed, p256};
    const char *ops[] = {"rsa-sha256", "ed25519", "ecdsa-sha256"};
    for (size_t i = 0; i < 3; i++) {
        char *out = NULL;
        const char *a[] = {"-server", server,      "-pubkey",
                           keys[i],   "-duration", "300ms",
                           "-verify", "-json",     NULL};
        run_ok(&out, a);
        json_t *j = parse_json(out);
        char *text = json_dumps(j, JSON_COMPACT);
        if (!strstr(text, ops[i]))
            fail_msg("%s: no %s in:\n%s", keys[i], ops[i], text);
        assert_true(jnum(j, "operations") > 0);
        assert_int_equal(jnum(j, "errors"), 0);
        free(text);
        json_decref(j);
        free(out);
    }
}

static void test_idle_connections(void **state)
{
    char *out = NULL;
    const char *a[] = {"-server", server,      "-idle", "-connections",
                       "20",      "-duration", "300ms", NULL};
    run_ok(&out, a);
    assert_non_null(strstr(out, "Idle connections held: 20 for 300ms"));
    free(out);
}

/* A key the server does not hold: every answer is an error, counted, and
 * the exit status says so. */
static void test_unknown_key_counts_errors(void **state)
{
    char path[1200];
    EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    snprintf(path, sizeof path, "%s/unknown.pem", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_PUBKEY(f, k), 1);
    fclose(f);
    EVP_PKEY_free(k);
    char *out = NULL;
    const char *a[] = {"-server",   server,  "-pubkey", path,
                       "-duration", "300ms", NULL};
    assert_int_equal(run(&out, a), 1);
    assert_true(number_after(out, "Errors: ") > 10);
    assert_true(number_after(out, "error answers ") > 10);
    assert_int_equal(number_after(out, "Total operations completed: "), 0);
    assert_non_null(strstr(out, "Last error answer: key not found"));
    free(out);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* -ski-file: each request signs with one of the listed keys, picked at
 * random. A list of the server's P-256 key (in --keystore-debug's line
 * format) and a key it lacks: about half the answers are `key not found`,
 * the rest signatures; JSON says how many keys. */
static void test_ski_file(void **state)
{
    char path[1200], text[512];
    snprintf(path, sizeof path, "%s/skis.txt", dir);
    snprintf(text, sizeof text,
             "# SKIs\n\n%s  ECDSA-P-256    file   /keys/ecdsa-p256.key\n"
             "  %s\n",
             p256_ski, "abababababababababababababababababababab");
    write_file(path, text);
    char *out = NULL;
    const char *a[] = {"-server",      server, "-ski-file", path,
                       "-connections", "2",    "-depth",    "8",
                       "-duration",    "1s",   "-json",     NULL};
    assert_int_equal(run(&out, a), 1); /* the unknown key's errors */
    json_t *j = parse_json(out);
    assert_int_equal(jnum(j, "keys"), 2);
    double ok = jnum(j, "operations"), err = jnum(j, "errors");
    if (ok < 100 || err < 100 || ok / (ok + err) < 0.35 ||
        ok / (ok + err) > 0.65)
        fail_msg("expected about half errors: %g ok, %g errors", ok, err);
    json_decref(j);
    free(out);

    /* only keys the server holds: no error */
    snprintf(text, sizeof text, "%s\n%s\n", p256_ski, p256_ski);
    write_file(path, text);
    const char *b[] = {"-server",      server,      "-ski-file", path,    "-op",
                       "ecdsa-sha384", "-duration", "300ms",     "-json", NULL};
    run_ok(&out, b);
    j = parse_json(out);
    assert_true(jnum(j, "operations") > 10);
    assert_int_equal(jnum(j, "errors"), 0);
    json_decref(j);
    free(out);
}

static void expect_usage(const char *const *args, const char *must_contain)
{
    char *out = NULL;
    int st = run(&out, args);
    if (st != 2 || !strstr(out, must_contain))
        fail_msg("expected exit 2 naming \"%s\", got %d:\n%s", must_contain, st,
                 out);
    free(out);
}

static void test_bad_flags(void **state)
{
    const char *a[] = {"-server",   server, "-pubkey", p256,
                       "-duration", "10",   NULL};
    expect_usage(a, "-duration 10");
    const char *b[] = {"-server", server,       "-pubkey", p256,
                       "-op",     "rsa-sha999", NULL};
    expect_usage(b, "rsa-sha999");
    const char *c[] = {"-server", server, "-pubkey",    p256,
                       "-rate",   "100",  "-bandwidth", NULL};
    expect_usage(c, "-rate");
    const char *t[] = {"-server", server, "-pubkey", p256,
                       "-tick",   "1ms",  NULL};
    expect_usage(t, "-tick");
    const char *e[] = {"-server", server,    "-pubkey", p256,
                       "-op",     "ed25519", NULL};
    expect_usage(e, "does not fit");
    const char *g[] = {"-server", server, "-ski", p256_ski,
                       "-pubkey", p384,   NULL};
    expect_usage(g, "does not match");
    const char *h[] = {"-server", server,   "-op", "rsa-decrypt",
                       "-ski",    p256_ski, NULL};
    expect_usage(h, "rsa-decrypt needs the public key");
    const char *i[] = {"-server", server, "-bogus", NULL};
    expect_usage(i, "-bogus");
    const char *m[] = {"-server", server,   "-mix", "ecdsa-sha256:0",
                       "-ski",    p256_ski, NULL};
    expect_usage(m, "weight");

    /* -ski-file: named file and line, and the flags it excludes */
    char path[1200], want[1300];
    snprintf(path, sizeof path, "%s/bad-skis.txt", dir);
    write_file(path, "# one good, one bad\n"
                     "abababababababababababababababababababab\n\n"
                     "abab\n");
    snprintf(want, sizeof want, "%s:4: expected an SKI", path);
    const char *s1[] = {"-server", server, "-ski-file", path, NULL};
    expect_usage(s1, want);
    write_file(path, "zzababababababababababababababababababab\n");
    expect_usage(s1, "is not an SKI");
    write_file(path, "# nothing\n\n");
    expect_usage(s1, "no SKI in the file");
    const char *s2[] = {"-server", server, "-ski-file", "/nonexistent/skis",
                        NULL};
    expect_usage(s2, "/nonexistent/skis: No such file");
    write_file(path, "abababababababababababababababababababab\n");
    const char *s3[] = {"-server", server, "-ski-file", path,
                        "-pubkey", p256,   NULL};
    expect_usage(s3, "-ski-file and -ski/-pubkey");
    const char *s4[] = {"-server", server, "-ski-file", path, "-verify", NULL};
    expect_usage(s4, "-verify needs -pubkey");

    char *out = NULL;
    const char *help[] = {bench.path, "-h", NULL};
    assert_int_equal(td_run(help, &out, 10000), 0);
    assert_non_null(strstr(out, "-histogram-step"));
    free(out);
    /* nothing listens there */
    const char *dead[] = {"-server",   "127.0.0.1:1", "-pubkey", p256,
                          "-duration", "100ms",       NULL};
    assert_int_equal(run(&out, dead), 3);
    assert_non_null(strstr(out, "refused"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_closed_loop_reference_flags),
        cmocka_unit_test(test_open_loop_json),
        cmocka_unit_test(test_open_loop_tick_charged),
        cmocka_unit_test(test_stopped_run_is_flagged),
        cmocka_unit_test(test_mix_verified),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_op_from_key),
        cmocka_unit_test(test_idle_connections),
        cmocka_unit_test(test_unknown_key_counts_errors),
        cmocka_unit_test(test_ski_file),
        cmocka_unit_test(test_bad_flags),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
