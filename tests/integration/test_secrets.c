/* SPDX-License-Identifier: Apache-2.0 */
/* Secrets: core dumps off by default (and on only when asked),
 * key files readable by group or others refused end to end (at start and
 * at reload) unless allowed, and no key bytes ever in the log: keylessd
 * runs at loglevel 0 through every operation and error path (bad
 * requests, refused handshakes, reloads with keys added, removed, broken
 * and too readable) and its whole log - and a /metrics scrape when the
 * build serves one - is searched for every 16-byte window of each private
 * key: its PEM text, its DER (raw and as hex) and its private components
 * (hex, both cases). */
#include "test_abuse_common.h"

#include <ctype.h>
#include <signal.h>
#include <sys/stat.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

static const char *const key_names[] = {"rsa-2048", "ecdsa-p256", "ecdsa-p384",
                                        "ed25519"};
#define NKEYS 4

static td_daemon d;
static char *dir;
static uint8_t skis[NKEYS][20];

static int teardown_dir(void **state)
{
    if (d.pid > 0)
        td_stop(&d, 0);
    tp_rmtree(dir);
    return 0;
}

static void key_path(char *out, size_t cap, const char *base, const char *name)
{
    snprintf(out, cap, "%s/%s.key", base, name);
}

static void load_skis(void)
{
    for (int i = 0; i < NKEYS; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "pubkeys/%s.pem", key_names[i]);
        EVP_PKEY *pk = tp_load_pub(tp_path(rel));
        tp_ski(pk, skis[i]);
        EVP_PKEY_free(pk);
    }
}

/* ---- core dumps ---- */

/* "Max core file size" soft limit of a process, -2 unknown, -1 unlimited */
static long core_limit(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/limits", (int)pid);
    FILE *f = fopen(path, "r");
    long v = -2;
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "Max core file size", 18) != 0)
            continue;
        char soft[32];
        if (sscanf(line + 18, "%31s", soft) == 1)
            v = strcmp(soft, "unlimited") == 0 ? -1 : atol(soft);
    }
    if (f)
        fclose(f);
    return v;
}

static void test_core_dumps(void **state)
{
    /* let the daemon inherit a non-zero core limit */
    struct rlimit r;
    assert_int_equal(getrlimit(RLIMIT_CORE, &r), 0);
    r.rlim_cur = r.rlim_max;
    if (r.rlim_cur == 0) {
        print_message("hard core limit 0 here: only the default is tested\n");
    }
    (void)setrlimit(RLIMIT_CORE, &r);
    dir = tp_tempdir("secrets-core");
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    td_opts o = {.name = "secrets-core", .key_dirs = dir};
    td_start(&d, &o);
    assert_int_equal(core_limit(d.pid), 0);
    assert_int_equal(td_stop(&d, 0), 0);
    if (r.rlim_cur != 0 && !HA_ASAN) { /* ASan turns core dumps off */
        static const char *extra[] = {"--allow-core-dumps=true", NULL};
        td_opts o2 = {
            .name = "secrets-core-on", .key_dirs = dir, .extra = extra};
        td_start(&d, &o2);
        assert_int_not_equal(core_limit(d.pid), 0);
        char *log = td_read_log(&d);
        assert_non_null(strstr(log, "allow_core_dumps is set"));
        free(log);
        assert_int_equal(td_stop(&d, 0), 0);
    }
}

/* ---- key file permissions, end to end ---- */

static int run_keylessd(const char *keydir, const char *extra, char **out)
{
    char bin[1100], a_cert[1200], a_key[1200], a_ca[1200], kd[1200];
    snprintf(bin, sizeof bin, "%s/keylessd", tu_bin_dir());
    snprintf(a_cert, sizeof a_cert, "--auth-cert=%s", tp_path("server.crt"));
    snprintf(a_key, sizeof a_key, "--auth-key=%s", tp_path("server.key"));
    snprintf(a_ca, sizeof a_ca, "--cloudflare-ca-cert=%s", tp_path("ca.crt"));
    snprintf(kd, sizeof kd, "--private-key-dirs=%s", keydir);
    return td_run((const char *[]){bin, a_cert, a_key, a_ca, kd,
                                   "--listen-address=127.0.0.1", "--port=1",
                                   extra, NULL},
                  out, 10000);
}

static void test_group_readable_refused(void **state)
{
    load_skis();
    dir = tp_tempdir("secrets-perm");
    char p[1100];
    tp_copy_key(dir, tp_path("keys/ecdsa-p256.key"));
    tp_copy_key(dir, tp_path("keys/ecdsa-p384.key"));
    key_path(p, sizeof p, dir, "ecdsa-p384");
    assert_int_equal(chmod(p, 0640), 0);
    /* at start: refused, keylessd does not start */
    char *out = NULL;
    assert_int_equal(run_keylessd(dir, "--check", &out), 1);
    assert_non_null(strstr(out, "ecdsa-p384.key"));
    assert_non_null(strstr(out, "readable by its group (mode 640)"));
    free(out);
    td_opts o = {.name = "secrets-perm", .key_dirs = dir};
    /* (td_start would fail the test: run it by hand and expect exit 1) */
    out = NULL;
    int st = run_keylessd(dir, "--loglevel=1", &out);
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, "readable by its group"));
    free(out);

    /* allowed explicitly: starts and serves the key */
    static const char *allow[] = {"--allow-group-readable-keys=true", NULL};
    o.extra = allow;
    td_start(&d, &o);
    kl_client *c = td_connect(&d);
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA384,
                         .payload = (const uint8_t[48]){1},
                         .payload_len = 48,
                         .ski = skis[2]};
    kl_client_result r;
    td_call(&d, c, &s, &r);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    kl_client_result_free(&r);
    kl_client_close(c);
    assert_int_equal(td_stop(&d, 0), 0);

    /* at reload: a key made readable by others is dropped, the others
     * stay */
    assert_int_equal(chmod(p, 0600), 0);
    o.extra = NULL;
    td_start(&d, &o);
    c = td_connect(&d);
    td_call(&d, c, &s, &r);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    kl_client_result_free(&r);
    assert_int_equal(chmod(p, 0644), 0);
    td_signal(&d, SIGHUP);
    double until = td_now_ms() + 5000;
    bool dropped = false;
    while (!dropped && td_now_ms() < until) {
        ha_sleep_ms(100);
        td_call(&d, c, &s, &r);
        dropped = r.opcode == KL_OP_ERROR && r.error == KL_ERR_KEY_NOT_FOUND;
        kl_client_result_free(&r);
    }
    assert_true(dropped);
    s.opcode = KL_OP_ECDSA_SIGN_SHA256;
    s.payload_len = 32;
    s.ski = skis[1];
    td_call(&d, c, &s, &r);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    kl_client_result_free(&r);
    kl_client_close(c);
    char *log = td_read_log(&d);
    assert_non_null(strstr(log, "readable by others (mode 644)"));
    free(log);
    assert_int_equal(td_stop(&d, 0), 0);
}

/* ---- no key bytes in logs or metrics ---- */

typedef struct needles {
    uint8_t **v;
    size_t *len;
    size_t n, cap;
    const char **what;
} needles;

static void add(needles *nd, const void *p, size_t len, const char *what)
{
    if (nd->n == nd->cap) {
        nd->cap = nd->cap ? nd->cap * 2 : 1024;
        nd->v = realloc(nd->v, nd->cap * sizeof *nd->v);
        nd->len = realloc(nd->len, nd->cap * sizeof *nd->len);
        nd->what = realloc(nd->what, nd->cap * sizeof *nd->what);
        assert_non_null(nd->v);
        assert_non_null(nd->len);
        assert_non_null(nd->what);
    }
    nd->v[nd->n] = malloc(len);
    memcpy(nd->v[nd->n], p, len);
    nd->len[nd->n] = len;
    nd->what[nd->n] = what;
    nd->n++;
}

/* Every window of w bytes of s. */
static void windows(needles *nd, const uint8_t *s, size_t len, size_t w,
                    const char *what)
{
    for (size_t i = 0; i + w <= len; i++)
        add(nd, s + i, w, what);
}

static void hex_windows(needles *nd, const uint8_t *b, size_t len,
                        const char *what)
{
    char *lo = malloc(2 * len + 1), *up = malloc(2 * len + 1);
    for (size_t i = 0; i < len; i++) {
        snprintf(lo + 2 * i, 3, "%02x", b[i]);
        snprintf(up + 2 * i, 3, "%02X", b[i]);
    }
    /* 16 bytes = 32 hex digits, at every byte offset */
    for (size_t i = 0; i + 32 <= 2 * len; i += 2) {
        add(nd, lo + i, 32, what);
        add(nd, up + i, 32, what);
    }
    free(lo);
    free(up);
}

static void bn_windows(needles *nd, EVP_PKEY *pk, const char *param,
                       const char *what)
{
    BIGNUM *bn = NULL;
    if (!EVP_PKEY_get_bn_param(pk, param, &bn))
        return;
    int n = BN_num_bytes(bn);
    uint8_t *b = malloc((size_t)n);
    BN_bn2bin(bn, b);
    windows(nd, b, (size_t)n, 16, what);
    hex_windows(nd, b, (size_t)n, what);
    free(b);
    BN_clear_free(bn);
}

static void key_needles(needles *nd, const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "keys/%s.key", name);
    size_t len = 0;
    char *pem = tu_read_file(tp_path(rel), &len);
    assert_non_null(pem);
    /* the PEM body as one line of base64 */
    char *b64 = malloc(len + 1);
    size_t bl = 0;
    for (char *line = strtok(pem, "\n"); line; line = strtok(NULL, "\n"))
        if (strncmp(line, "-----", 5) != 0)
            for (char *q = line; *q; q++)
                if (!isspace((unsigned char)*q))
                    b64[bl++] = *q;
    windows(nd, (const uint8_t *)b64, bl, 16, "PEM base64");
    free(b64);
    free(pem);

    FILE *f = fopen(tp_path(rel), "r");
    assert_non_null(f);
    EVP_PKEY *pk = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(pk);
    unsigned char *der = NULL;
    int dl = i2d_PrivateKey(pk, &der);
    assert_true(dl > 0);
    windows(nd, der, (size_t)dl, 16, "DER");
    hex_windows(nd, der, (size_t)dl, "DER hex");
    OPENSSL_clear_free(der, (size_t)dl);
    bn_windows(nd, pk, OSSL_PKEY_PARAM_PRIV_KEY, "EC private scalar");
    bn_windows(nd, pk, OSSL_PKEY_PARAM_RSA_D, "RSA d");
    bn_windows(nd, pk, OSSL_PKEY_PARAM_RSA_FACTOR1, "RSA p");
    bn_windows(nd, pk, OSSL_PKEY_PARAM_RSA_FACTOR2, "RSA q");
    uint8_t raw[64];
    size_t rl = sizeof raw;
    if (EVP_PKEY_get_raw_private_key(pk, raw, &rl)) {
        windows(nd, raw, rl, 16, "raw private key");
        hex_windows(nd, raw, rl, "raw private key");
    }
    EVP_PKEY_free(pk);
}

static void expect_no_needle(const needles *nd, const char *text, size_t len,
                             const char *where)
{
    for (size_t i = 0; i < nd->n; i++)
        if (memmem(text, len, nd->v[i], nd->len[i]))
            fail_msg("%s contains 16 bytes of a private key (%s)", where,
                     nd->what[i]);
}

static uint8_t call(kl_client *c, uint8_t op, const uint8_t *ski,
                    const uint8_t *payload, size_t plen)
{
    kl_request_spec s = {
        .opcode = op, .payload = payload, .payload_len = plen, .ski = ski};
    kl_client_result r;
    td_call(&d, c, &s, &r);
    uint8_t e = r.opcode == KL_OP_RESPONSE ? 0 : r.error;
    kl_client_result_free(&r);
    return e;
}

/* HTTP GET /metrics on port; NULL when nothing listens. */
static char *scrape(uint16_t port)
{
    int fd = ha_tcp(port, false);
    if (fd < 0)
        return NULL;
    const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) {
        close(fd);
        return NULL;
    }
    size_t cap = 1 << 20, n = 0;
    char *b = malloc(cap + 1);
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t got;
    while (n < cap && (got = read(fd, b + n, cap - n)) > 0)
        n += (size_t)got;
    b[n] = 0;
    close(fd);
    return b;
}

static void test_no_key_bytes_in_logs(void **state)
{
    load_skis();
    dir = tp_tempdir("secrets-log");
    for (int i = 0; i < NKEYS; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "keys/%s.key", key_names[i]);
        tp_copy_key(dir, tp_path(rel));
    }
    /* a metrics port of our own (the scrape is skipped when the build
     * does not serve /metrics) */
    static char mport[32];
    uint16_t metrics_port = (uint16_t)(20000 + getpid() % 20000);
    snprintf(mport, sizeof mport, "--metrics-port=%u", metrics_port);
    static const char *extra[] = {mport, NULL};
    td_opts o = {.name = "secrets-log", .key_dirs = dir, .extra = extra};
    td_start(&d, &o);

    kl_client *c = td_connect(&d);
    static uint8_t dg[64] = {0x42, 0x43};
    /* every operation */
    static const uint8_t rsa_ops[] = {
        KL_OP_RSA_SIGN_MD5SHA1,    KL_OP_RSA_SIGN_SHA1,
        KL_OP_RSA_SIGN_SHA224,     KL_OP_RSA_SIGN_SHA256,
        KL_OP_RSA_SIGN_SHA384,     KL_OP_RSA_SIGN_SHA512,
        KL_OP_RSA_PSS_SIGN_SHA256, KL_OP_RSA_PSS_SIGN_SHA384,
        KL_OP_RSA_PSS_SIGN_SHA512};
    static const size_t rsa_len[] = {36, 20, 28, 32, 48, 64, 32, 48, 64};
    for (size_t i = 0; i < sizeof rsa_ops; i++)
        assert_int_equal(call(c, rsa_ops[i], skis[0], dg, rsa_len[i]), 0);
    for (int k = 1; k <= 2; k++) {
        assert_int_equal(call(c, KL_OP_ECDSA_SIGN_SHA256, skis[k], dg, 32), 0);
        assert_int_equal(call(c, KL_OP_ECDSA_SIGN_SHA384, skis[k], dg, 48), 0);
        assert_int_equal(call(c, KL_OP_ECDSA_SIGN_SHA512, skis[k], dg, 64), 0);
    }
    assert_int_equal(call(c, KL_OP_ED25519_SIGN, skis[3], dg, 64), 0);
    /* RSA decryption: of a real ciphertext, and of garbage */
    EVP_PKEY *rsa = tp_load_pub(tp_path("pubkeys/rsa-2048.pem"));
    EVP_PKEY_CTX *ec = EVP_PKEY_CTX_new(rsa, NULL);
    uint8_t ct[256], secret[48] = {3, 1, 4};
    size_t ctl = sizeof ct;
    assert_int_equal(EVP_PKEY_encrypt_init(ec), 1);
    assert_int_equal(EVP_PKEY_encrypt(ec, ct, &ctl, secret, sizeof secret), 1);
    EVP_PKEY_CTX_free(ec);
    EVP_PKEY_free(rsa);
    assert_int_equal(call(c, KL_OP_RSA_DECRYPT, skis[0], ct, ctl), 0);
    memset(ct, 0x77, sizeof ct);
    (void)call(c, KL_OP_RSA_DECRYPT, skis[0], ct, sizeof ct);
    /* error paths */
    assert_int_not_equal(call(c, KL_OP_ECDSA_SIGN_SHA256, skis[0], dg, 32), 0);
    assert_int_not_equal(call(c, KL_OP_RSA_SIGN_SHA256, skis[1], dg, 32), 0);
    assert_int_not_equal(call(c, KL_OP_RSA_SIGN_SHA256, skis[0], dg, 7), 0);
    assert_int_not_equal(call(c, KL_OP_ECDSA_SIGN_SHA256, skis[3], dg, 32), 0);
    assert_int_not_equal(call(c, 0x99, skis[0], dg, 32), 0);
    assert_int_equal(call(c, KL_OP_ECDSA_SIGN_SHA256, (uint8_t[20]){9}, dg, 32),
                     KL_ERR_KEY_NOT_FOUND);
    static const uint8_t junk[] = {1,  0,    0,    6,    0, 0, 0,
                                   77, 0x11, 0xff, 0xff, 1, 2, 3};
    assert_int_equal(kl_client_send_raw(c, junk, sizeof junk), KL_OK);
    kl_client_result r;
    assert_int_equal(kl_client_recv(c, 5000, &r), KL_OK);
    assert_int_equal(r.error, KL_ERR_FORMAT);
    kl_client_result_free(&r);
    /* refused handshake: a client from another CA */
    kl_client_opts bad = td_client_opts(&d);
    bad.cert_file = tp_path("client-other-ca.crt");
    bad.key_file = tp_path("client-other-ca.key");
    kl_client *bc = NULL;
    char err[256];
    if (kl_client_connect(&bad, &bc, err, sizeof err) == KL_OK) {
        kl_request_spec ps = {.opcode = KL_OP_PING};
        kl_client_result pr;
        assert_int_not_equal(kl_client_call(bc, &ps, 2000, &pr), KL_OK);
        kl_client_close(bc);
    }
    /* reloads: a broken key file, a too-readable one, a key removed and
     * one added */
    char p[1100];
    snprintf(p, sizeof p, "%s/broken.key", dir);
    FILE *f = fopen(p, "w");
    fputs("-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n", f);
    fclose(f);
    chmod(p, 0600);
    key_path(p, sizeof p, dir, "ecdsa-p384");
    chmod(p, 0644);
    td_signal(&d, SIGHUP);
    ha_sleep_ms(700);
    key_path(p, sizeof p, dir, "ed25519");
    unlink(p);
    td_signal(&d, SIGHUP);
    ha_sleep_ms(700);
    tp_copy_key(dir, tp_path("keys/ed25519.key"));
    key_path(p, sizeof p, dir, "ecdsa-p384");
    chmod(p, 0600);
    td_signal(&d, SIGHUP);
    /* the key is back once the reload is done (slow under valgrind) */
    double until = td_now_ms() + 15000;
    uint8_t e;
    while ((e = call(c, KL_OP_ED25519_SIGN, skis[3], dg, 64)) != 0 &&
           td_now_ms() < until)
        ha_sleep_ms(100);
    assert_int_equal(e, 0);
    kl_client_close(c);
    char *metrics = scrape(metrics_port);
    assert_int_equal(td_stop(&d, 0), 0);

    needles nd = {0};
    for (int i = 0; i < NKEYS; i++)
        key_needles(&nd, key_names[i]);
    /* negative control: the search finds a key in a text that holds one */
    {
        size_t kl = 0;
        char *kt = tu_read_file(tp_path("keys/ecdsa-p256.key"), &kl);
        bool found = false;
        for (size_t i = 0; i < nd.n && !found; i++)
            found = memmem(kt, kl, nd.v[i], nd.len[i]) != NULL;
        assert_true(found);
        free(kt);
    }
    char *log = td_read_log(&d);
    size_t loglen = strlen(log);
    print_message("searched a %zu-byte log (loglevel 0) for %zu windows of "
                  "private key bytes\n",
                  loglen, nd.n);
    /* the run did go through the paths it should have */
    assert_non_null(strstr(log, "broken.key"));
    assert_non_null(strstr(log, "readable by others"));
    assert_non_null(strstr(log, "TLS handshake failed"));
    assert_true(loglen > 2000);
    expect_no_needle(&nd, log, loglen, "the log");
    free(log);
    if (metrics && strstr(metrics, "200")) {
        print_message("searched /metrics (%zu bytes) too\n", strlen(metrics));
        expect_no_needle(&nd, metrics, strlen(metrics), "/metrics");
    } else {
        print_message("no /metrics served by this build: not searched\n");
    }
    free(metrics);
    for (size_t i = 0; i < nd.n; i++)
        free(nd.v[i]);
    free(nd.v);
    free(nd.len);
    free(nd.what);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_core_dumps, teardown_dir),
        cmocka_unit_test_teardown(test_group_readable_refused, teardown_dir),
        cmocka_unit_test_teardown(test_no_key_bytes_in_logs, teardown_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
