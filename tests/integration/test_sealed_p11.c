/* SPDX-License-Identifier: Apache-2.0 */
/* A sealing key on a PKCS#11 token (docs/SEALING.md "Node identity",
 * docs/OPERATIONS.md "Sealing key on a token"), with a real SoftHSM2
 * token made here and the real tools: pkcs11-tool makes a P-256 key pair
 * on the token, `keyless-seal pubkey` prints its public half into the
 * fleet file, keyless-seal seals an ECDSA key to that node (P-256 suite),
 * and keylessd started with `sealing_key: pkcs11:...` opens it - the
 * token does the ECDH - and signs with it (verified with OpenSSL), also
 * after a reload. A file sealed to another node (P-256, another region)
 * and one sealed to an X25519 node are held elsewhere. `keyless-seal
 * open --key pkcs11:...` recovers the key. A wrong PIN, an absent token,
 * a missing key and a P-384 key each stop keylessd with one line naming
 * sealing_key, the reason and the fix, and never the PIN. */
#include "daemon.h"
#include "net.h"
#include "pki.h"
#include "slowkey.h"
#include "testutil.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>

/* PINs no log line can hold by chance: "4321" was found inside a random
 * key's SKI (hex) and failed the never-the-PIN check now and then */
#define PIN "Pin-Qz7w"
#define BAD_PIN "Bad-Qz7w"

static td_daemon d;
static char *dir;
static char keys[1100], seal[1100], module[512], uri[2048];
static EVP_PKEY *ec_pub, *far_pub, *x_pub;
static uint8_t ec_ski[20], far_ski[20], x_ski[20];

static const char *at(const char *rel)
{
    static char buf[4][1200];
    static int i;
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof buf[i], "%s/%s", dir, rel);
    return buf[i];
}

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc != 0)
        fail_msg("command failed (%d): %s", rc, cmd);
}

/* The URI of key object= on token=, with pin. */
static const char *uri_of(const char *token, const char *object,
                          const char *pin)
{
    static char buf[2][2048];
    static int i;
    i ^= 1;
    snprintf(buf[i], sizeof buf[i],
             "pkcs11:token=%s;object=%s?module-path=%s&pin-value=%s", token,
             object, module, pin);
    return buf[i];
}

/* Runs keyless-seal; fails the test unless it exits with want. */
static char *seal_run(int want, const char *const *args)
{
    const char *argv[16] = {seal};
    size_t n = 1;
    for (; args[n - 1] && n < 15; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    char *out = NULL;
    int st = td_run(argv, &out, 60000);
    if (st != want)
        fail_msg("keyless-seal %s: exit %d, not %d:\n%s", args[0], st, want,
                 out);
    return out;
}

/* The PEM public key in a tool's output, into at(rel). */
static void keep_pem(const char *out, const char *rel)
{
    const char *b = strstr(out, "-----BEGIN PUBLIC KEY-----");
    const char *e = b ? strstr(b, "-----END PUBLIC KEY-----") : NULL;
    if (!e)
        fail_msg("no public key in:\n%s", out);
    FILE *f = fopen(at(rel), "w");
    assert_non_null(f);
    fprintf(f, "%.*s-----END PUBLIC KEY-----\n", (int)(e - b), b);
    fclose(f);
}

static void fleet_node(FILE *f, const char *name, const char *region,
                       const char *pub_rel)
{
    size_t len = 0;
    char *pem = tu_read_file(at(pub_rel), &len);
    fprintf(f, "  - name: %s\n    attributes: {region: %s}\n", name, region);
    fputs("    sealing_key: |\n", f);
    for (char *line = strtok(pem, "\n"); line; line = strtok(NULL, "\n"))
        fprintf(f, "      %s\n", line);
    free(pem);
}

/* A key pair, its private half in at(name), its public half and SKI. */
static EVP_PKEY *new_key(const char *name, uint8_t ski[20])
{
    EVP_PKEY *k = tp_genkey(dir, name, "EC", "P-256", 0);
    unsigned char *der = NULL;
    int n = i2d_PUBKEY(k, &der);
    const unsigned char *p = der;
    EVP_PKEY *pub = d2i_PUBKEY(NULL, &p, n);
    OPENSSL_free(der);
    EVP_PKEY_free(k);
    tp_ski(pub, ski);
    return pub;
}

static int setup(void **state)
{
    (void)state;
    const char *m = tp_softhsm_module();
    if (!m)
        fail_msg("SoftHSM2 is not installed (scripts/install-deps.sh)");
    snprintf(module, sizeof module, "%s", m);
    dir = tp_tempdir("sealed-p11");
    snprintf(keys, sizeof keys, "%s/keys", dir);
    assert_int_equal(mkdir(keys, 0700), 0);
    assert_int_equal(mkdir(at("tokens"), 0700), 0);
    snprintf(seal, sizeof seal, "%s/keyless-seal", tu_bin_dir());

    /* a token of this test's own; keylessd inherits SOFTHSM2_CONF */
    FILE *f = fopen(at("softhsm2.conf"), "w");
    assert_non_null(f);
    fprintf(f,
            "directories.tokendir = %s\nobjectstore.backend = file\n"
            "log.level = ERROR\n",
            at("tokens"));
    fclose(f);
    setenv("SOFTHSM2_CONF", at("softhsm2.conf"), 1);
    sh("softhsm2-util --init-token --free --label seal-node --so-pin 0000 "
       "--pin " PIN " >/dev/null");
    /* the node's sealing key, made on the token (docs/OPERATIONS.md) */
    sh("pkcs11-tool --module %s --token-label seal-node --login --pin " PIN
       " --keypairgen --key-type EC:prime256v1 --usage-derive --label node "
       "--id 01 >/dev/null 2>&1",
       module);
    /* and a key of another curve, refused as a sealing key */
    sh("pkcs11-tool --module %s --token-label seal-node --login --pin " PIN
       " --keypairgen --key-type EC:secp384r1 --usage-derive --label p384 "
       "--id 02 >/dev/null 2>&1",
       module);
    snprintf(uri, sizeof uri, "%s", uri_of("seal-node", "node", PIN));

    /* the fleet: this node (the token's key) in eu-west, a P-256 file
     * node in us-east, an X25519 file node in ap-south */
    char *out = seal_run(0, (const char *[]){"pubkey", "--key", uri, NULL});
    assert_non_null(strstr(out, "on a token (P-256)"));
    keep_pem(out, "node.pub");
    free(out);
    static const char *const other[2][3] = {{"far", "p256", "far.pub"},
                                            {"x", "x25519", "x.pub"}};
    for (size_t i = 0; i < 2; i++) {
        char key[32];
        snprintf(key, sizeof key, "%s.key", other[i][0]);
        out = seal_run(0, (const char *[]){"keygen", "--out", at(key), "--kem",
                                           other[i][1], NULL});
        keep_pem(out, other[i][2]);
        free(out);
    }
    f = fopen(at("fleet.yaml"), "w");
    assert_non_null(f);
    fputs("nodes:\n", f);
    fleet_node(f, "hsm-node", "eu-west", "node.pub");
    fleet_node(f, "far-node", "us-east", "far.pub");
    fleet_node(f, "x-node", "ap-south", "x.pub");
    fclose(f);

    ec_pub = new_key("ec.pem", ec_ski);
    far_pub = new_key("far-ec.pem", far_ski);
    x_pub = new_key("x-ec.pem", x_ski);
    static const char *const sealings[3][3] = {
        {"region=eu-west", "ec.pem", "keys/ec.sealed"},
        {"region=us-east", "far-ec.pem", "keys/far.sealed"},
        {"region=ap-south", "x-ec.pem", "keys/x.sealed"}};
    for (size_t i = 0; i < 3; i++)
        free(seal_run(0, (const char *[]){"seal", "--policy", sealings[i][0],
                                          "--fleet", at("fleet.yaml"),
                                          at(sealings[i][1]), "-o",
                                          at(sealings[i][2]), NULL}));
    static char a_key[2100];
    snprintf(a_key, sizeof a_key, "--sealing-key=%s", uri);
    td_opts o = {.name = "sealed-p11",
                 .key_dirs = keys,
                 .extra =
                     (const char *[]){a_key, "--watch-key-dirs=false", NULL}};
    td_start(&d, &o);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int st = td_stop(&d, 0);
    EVP_PKEY_free(ec_pub);
    EVP_PKEY_free(far_pub);
    EVP_PKEY_free(x_pub);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

static bool log_has(const char *needle)
{
    char *log = td_read_log(&d);
    bool yes = strstr(log, needle) != NULL;
    free(log);
    return yes;
}

/* An ECDSA-SHA256 signature by the key of ski, verified with OpenSSL. */
static void expect_signs(const uint8_t ski[20], EVP_PKEY *pub)
{
    uint8_t dg[32];
    for (size_t i = 0; i < sizeof dg; i++)
        dg[i] = (uint8_t)(i * 5 + 3);
    kl_client *c = td_connect(&d);
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                         .payload = dg,
                         .payload_len = sizeof dg,
                         .ski = ski};
    kl_client_result r;
    td_call(&d, c, &s, &r);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    EVP_PKEY_CTX *v = EVP_PKEY_CTX_new(pub, NULL);
    assert_non_null(v);
    assert_int_equal(EVP_PKEY_verify_init(v), 1);
    assert_int_equal(EVP_PKEY_CTX_set_signature_md(v, EVP_sha256()), 1);
    assert_int_equal(
        EVP_PKEY_verify(v, r.payload, r.payload_len, dg, sizeof dg), 1);
    EVP_PKEY_CTX_free(v);
    kl_client_result_free(&r);
    kl_client_close(c);
}

static void expect_not_found(const uint8_t ski[20])
{
    static const uint8_t dg[32] = {1};
    kl_client *c = td_connect(&d);
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                         .payload = dg,
                         .payload_len = sizeof dg,
                         .ski = ski};
    td_expect_error(&d, c, &s, KL_ERR_KEY_NOT_FOUND);
    kl_client_close(c);
}

static void test_token_key_opens_sealed_file(void **state)
{
    (void)state;
    expect_signs(ec_ski, ec_pub);
    expect_not_found(far_ski);
    expect_not_found(x_ski);
    assert_true(log_has("far.sealed: sealed key "));
    assert_true(log_has("x.sealed: sealed key "));
    assert_true(log_has("held elsewhere (not wrapped to this server; "
                        "policy: region=us-east)"));
    assert_true(log_has("held elsewhere (not wrapped to this server; "
                        "policy: region=ap-south)"));
    assert_false(log_has("sealed key refused"));
    assert_false(log_has(PIN));
    /* a reload opens the token again and the key stays */
    td_signal(&d, SIGHUP);
    for (int i = 0; i < 500 && !log_has("reloaded: "); i++)
        usleep(20000);
    if (!log_has("reloaded: 1 keys")) {
        td_dump_log(&d);
        fail_msg("no reload with the one key");
    }
    expect_signs(ec_ski, ec_pub);
}

/* keyless-seal open with the token key: the key comes back; a file not
 * sealed to the token is refused, saying so, without the PIN. */
static void test_seal_tool_opens_with_token(void **state)
{
    (void)state;
    free(
        seal_run(0, (const char *[]){"open", "--key", uri, at("keys/ec.sealed"),
                                     "-o", at("ec.out.pem"), NULL}));
    FILE *f = fopen(at("ec.out.pem"), "r");
    assert_non_null(f);
    EVP_PKEY *k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(k);
    assert_int_equal(EVP_PKEY_eq(k, ec_pub), 1);
    EVP_PKEY_free(k);
    char *out =
        seal_run(1, (const char *[]){"open", "--key", uri, at("keys/x.sealed"),
                                     "-o", at("x.out.pem"), NULL});
    if (!strstr(out, "not sealed to") || !strstr(out, "X25519") ||
        strstr(out, "pin-value=" PIN))
        fail_msg("keyless-seal open of an X25519 file:\n%s", out);
    free(out);
}

/* keylessd with a sealing_key it cannot use exits at start: one line
 * naming the option, the reason and the fix; never the PIN. */
static void expect_start_error(const char *key_uri, const char *reason,
                               const char *fix)
{
    char a_key[2100], a_dirs[1200], a_port[64], kd[1100];
    snprintf(a_key, sizeof a_key, "--sealing-key=%s", key_uri);
    snprintf(a_dirs, sizeof a_dirs, "--private-key-dirs=%s", keys);
    snprintf(a_port, sizeof a_port, "--port=%u", tn_free_port());
    snprintf(kd, sizeof kd, "%s/keylessd", tu_bin_dir());
    const char *argv[] = {kd,
                          a_key,
                          a_dirs,
                          a_port,
                          "--auth-cert",
                          tp_path("server.crt"),
                          "--auth-key",
                          tp_path("server.key"),
                          "--cloudflare-ca-cert",
                          tp_path("ca.crt"),
                          "--metrics-port=0",
                          NULL};
    char *out = NULL;
    int st = td_run(argv, &out, 60000);
    if (st != 1 || !strstr(out, "sealing_key pkcs11:token=") ||
        !strstr(out, "pin-value=REDACTED") || !strstr(out, reason) ||
        !strstr(out, fix) || strstr(out, "pin-value=" BAD_PIN) ||
        strstr(out, "pin-value=" PIN))
        fail_msg("keylessd with sealing_key %s: exit %d:\n%s", reason, st, out);
    print_message("  %.*s\n", (int)strcspn(strstr(out, "sealing_key "), "\n"),
                  strstr(out, "sealing_key "));
    free(out);
}

static void test_start_errors(void **state)
{
    (void)state;
    /* --output-config shows the URI without its PIN */
    char a_key[2100], kd[1100];
    snprintf(a_key, sizeof a_key, "--sealing-key=%s", uri);
    snprintf(kd, sizeof kd, "%s/keylessd", tu_bin_dir());
    const char *argv[] = {kd, a_key, "--output-config", NULL};
    char *out = NULL;
    int st = td_run(argv, &out, 30000);
    if (st != 0 || !strstr(out, "sealing_key: \"pkcs11:token=seal-node") ||
        !strstr(out, "pin-value=REDACTED") || strstr(out, "pin-value=" PIN))
        fail_msg("keylessd --output-config: exit %d:\n%s", st, out);
    free(out);
    expect_start_error(uri_of("seal-node", "node", BAD_PIN),
                       "CKR_PIN_INCORRECT", "the PIN (pin-value= or");
    expect_start_error(uri_of("no-such-token", "node", PIN),
                       "no token with label \"no-such-token\"",
                       "check module-path=, the token");
    expect_start_error(uri_of("seal-node", "missing", PIN),
                       "no private key with this object label",
                       "name an EC P-256 key");
    expect_start_error(uri_of("seal-node", "p384", PIN), "not an EC P-256 key",
                       "name an EC P-256 key");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_key_opens_sealed_file),
        cmocka_unit_test(test_seal_tool_opens_with_token),
        cmocka_unit_test(test_start_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
