/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-cli against a running keylessd: ping, sign for each operation
 * family, decrypt --encrypt-test - exit 0 and an "OK:" verdict; a key the
 * server does not have, a stopped server and bad flags - non-zero with a
 * clear message. */
#include "daemon.h"
#include "pki.h"
#include "testutil.h"
#include "tool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/pem.h>

static td_daemon d;
static char *dir;
static tt_tool cli; /* keyless-cli with the test PKI's TLS flags */
static char server[64];
/* Paths copied once: tp_path and tu_vector_path return rotating or shared
 * static buffers. */
static char rsa_pub[1024], p256_pub[1024], p384_pub[1024], ed_pub[1024];
static char rsa3072_crt[1024], ref_rsa[1024], ref_ec[1024], ed_crt[1024];

static int setup(void **state)
{
    dir = tp_tempdir("cli");
    static const char *const demo[] = {"rsa-2048", "ecdsa-p256", "ecdsa-p384",
                                       "ed25519"};
    char rel[64];
    for (size_t i = 0; i < 4; i++) {
        snprintf(rel, sizeof rel, "keys/%s.key", demo[i]);
        tp_copy_key(dir, tp_path(rel));
    }
    /* a vector key too, for --cert-file with its certificate */
    tp_copy_key(dir, tu_vector_path("keys/rsa-3072.key"));
    td_opts o = {.name = "cli", .key_dirs = dir};
    td_start(&d, &o);
    snprintf(server, sizeof server, "127.0.0.1:%u", d.port);
    tt_tool_init(&cli, "keyless-cli", "--");
    tt_keep(rsa_pub, tp_path("pubkeys/rsa-2048.pem"));
    tt_keep(p256_pub, tp_path("pubkeys/ecdsa-p256.pem"));
    tt_keep(p384_pub, tp_path("pubkeys/ecdsa-p384.pem"));
    tt_keep(ed_pub, tp_path("pubkeys/ed25519.pem"));
    tt_keep(rsa3072_crt, tu_vector_path("certs/rsa-3072.crt"));
    tt_keep(ref_rsa, tu_vector_path("reference-keys/rsa.key"));
    tt_keep(ref_ec, tu_vector_path("reference-keys/ecdsa.pubkey"));
    tt_keep(ed_crt, tu_vector_path("certs/ed25519.crt"));
    return 0;
}

static int teardown(void **state)
{
    int st = td_stop(&d, 0);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

/* Runs keyless-cli with the connection flags plus args; returns the exit
 * status, output in *out. */
static int run(char **out, const char *const *args)
{
    const char *lead[] = {args[0] /* the command */, "--server", server, NULL};
    return tt_tool_run(&cli, lead, args + 1, out, 60000);
}

static void expect_ok(const char *const *args, const char *must_contain)
{
    char *out = NULL;
    int st = run(&out, args);
    if (st != 0 || strncmp(out, "OK: ", 4) != 0 ||
        (must_contain && !strstr(out, must_contain))) {
        td_dump_log(&d);
        fail_msg("keyless-cli %s: exit %d, output:\n%s", args[0], st, out);
    }
    print_message("%s", out);
    free(out);
}

static void expect_fail(int want_status, const char *const *args,
                        const char *must_contain)
{
    char *out = NULL;
    int st = run(&out, args);
    if (st != want_status || !strstr(out, must_contain))
        fail_msg("keyless-cli %s: exit %d (expected %d), output lacks "
                 "\"%s\":\n%s",
                 args[0], st, want_status, must_contain, out);
    print_message("(expected failure) %s", out);
    free(out);
}

static void expect_verbose(const char *const *args, const char *conn)
{
    char *out = NULL;
    int st = run(&out, args);
    if (st != 0 || !strstr(out, "OK: pong") || !strstr(out, "connected to") ||
        !strstr(out, conn))
        fail_msg("keyless-cli %s -v: exit %d, output lacks \"%s\":\n%s",
                 args[0], st, conn, out);
    free(out);
}

static void test_ping(void **state)
{
    const char *a[] = {"ping", NULL};
    expect_ok(a, "pong");
    const char *b[] = {"ping", "--payload", "hello", "--tls12", NULL};
    expect_ok(b, "echoed 5 bytes");
    /* -v describes the connection on stderr */
    const char *c[] = {"ping", "-v", NULL};
    expect_verbose(c, "with TLSv1.3 TLS_AES_");
    const char *e[] = {"ping", "-v", "--tls12", NULL};
    expect_verbose(e, "with TLSv1.2 ECDHE-");
}

static void test_sign_each_family(void **state)
{
    const char *rsa = rsa_pub, *p256 = p256_pub, *p384 = p384_pub, *ed = ed_pub;
    const char *const cases[][8] = {
        {"sign", "--op", "rsa-sha256", "--pubkey", rsa, "--message", "hi",
         NULL},
        {"sign", "--op", "rsa-md5sha1", "--pubkey", rsa, "--message", "hi",
         NULL},
        {"sign", "--op", "rsa-sha512", "--pubkey", rsa, "--message", "hi",
         NULL},
        {"sign", "--op", "rsa-pss-sha256", "--pubkey", rsa, "--message", "hi",
         NULL},
        {"sign", "--op", "rsa-pss-sha384", "--pubkey", rsa, "--message", "hi",
         NULL},
        {"sign", "--op", "ecdsa-sha256", "--pubkey", p256, "--message", "hi",
         NULL},
        {"sign", "--op", "0x16", "--pubkey", p384, "--message", "hi", NULL},
        {"sign", "--op", "ed25519", "--pubkey", ed, "--message", "hi", NULL},
        /* the operation chosen from the key type */
        {"sign", "--pubkey", p256, "--message", "default op", NULL},
        /* a certificate instead of a public key file */
        {"sign", "--cert-file", rsa3072_crt, "--message", "from a certificate",
         NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_ok(cases[i], "verified with key");
}

static void test_sign_digest_and_file(void **state)
{
    /* SHA-256("abc") */
    const char *a[] = {
        "sign",
        "--op",
        "ecdsa-sha256",
        "--pubkey",
        p256_pub,
        "--digest",
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61"
        "f20015ad",
        NULL};
    expect_ok(a, "ECDSA-P-256 signature");
    char path[1200];
    snprintf(path, sizeof path, "%s/message.bin", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("a message in a file", f);
    fclose(f);
    const char *b[] = {"sign", "--op", "ed25519", "--pubkey",
                       ed_pub, "--in", path,      NULL};
    expect_ok(b, "Ed25519 signature (64 bytes");
}

static void test_decrypt_encrypt_test(void **state)
{
    const char *a[] = {"decrypt", "--pubkey", rsa_pub, "--encrypt-test", NULL};
    expect_ok(a, "00 02 PS 00");
}

/* The server does not hold the key: exit 1 and the error's text. */
static void test_unknown_key_fails(void **state)
{
    char path[1200];
    EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    snprintf(path, sizeof path, "%s/unknown.pub.pem", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_PUBKEY(f, k), 1);
    fclose(f);
    EVP_PKEY_free(k);
    const char *a[] = {"sign", "--pubkey", path, "--message", "x", NULL};
    expect_fail(1, a, "key not found");
}

/* A digest the key server signs, checked against another public key: the
 * signature does not verify, exit 1. The SKI selects the P-256 key, the
 * public key given is the P-384 one. */
static void test_wrong_public_key_fails(void **state)
{
    char ski[64];
    EVP_PKEY *p256 = tp_load_pub(p256_pub);
    uint8_t s[20];
    tp_ski(p256, s);
    snprintf(ski, sizeof ski, "%s", tp_ski_hex(s));
    EVP_PKEY_free(p256);
    const char *a[] = {"sign",   "--ski",     ski, "--pubkey",
                       p384_pub, "--message", "x", NULL};
    /* the CLI refuses an SKI that does not belong to the public key */
    expect_fail(2, a, "does not match");
}

static void test_stopped_server_fails(void **state)
{
    char *out = NULL;
    /* a port nothing listens on */
    const char *argv[] = {cli.path, "ping", "--server", "127.0.0.1:1",
                          "--ca",   cli.ca, NULL};
    int st = td_run(argv, &out, 30000);
    if (st != 3 || !strstr(out, "FAIL: cannot connect"))
        fail_msg("ping to a stopped server: exit %d:\n%s", st, out);
    free(out);
}

static void test_bad_flags_named(void **state)
{
    const char *a[] = {"sign",   "--op",     "ecdsa-sha256", "--pubkey",
                       p256_pub, "--digest", "zz",           NULL};
    expect_fail(2, a, "--digest");
    const char *b[] = {"sign",  "--op",      "rsa-sha999", "--pubkey",
                       rsa_pub, "--message", "x",          NULL};
    expect_fail(2, b, "--op rsa-sha999");
    const char *c[] = {"sign",      "--pubkey", "/nonexistent.pem",
                       "--message", "x",        NULL};
    expect_fail(2, c, "--pubkey");
    const char *e[] = {"sign",  "--op",     "rsa-sha256", "--pubkey",
                       rsa_pub, "--digest", "0011",       NULL};
    expect_fail(2, e, "--digest");
    const char *f[] = {"decrypt", "--pubkey", p256_pub, "--encrypt-test", NULL};
    expect_fail(2, f, "does not fit");
    const char *g[] = {"ping", "--bogus", NULL};
    expect_fail(2, g, "--bogus");

    char *out = NULL;
    const char *h[] = {cli.path, "--help", NULL};
    assert_int_equal(td_run(h, &out, 10000), 0);
    assert_non_null(strstr(out, "usage: keyless-cli"));
    free(out);
}

static void test_ski_command(void **state)
{
    char *out = NULL;
    const char *a[] = {cli.path, "ski", ref_rsa, ref_ec, ed_crt, NULL};
    assert_int_equal(td_run(a, &out, 10000), 0);
    /* protocol P7 test vectors */
    assert_non_null(strstr(out, "406550d87609ecae021a83ef2c1f372c08f42699"));
    assert_non_null(strstr(out, "d9c69b8e23abba7c26fd5d0e282f3dd679741036"));
    assert_non_null(strstr(out, "16913a8bfd34883606daf05bb9cb8b3e25160c81"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ping),
        cmocka_unit_test(test_sign_each_family),
        cmocka_unit_test(test_sign_digest_and_file),
        cmocka_unit_test(test_decrypt_encrypt_test),
        cmocka_unit_test(test_unknown_key_fails),
        cmocka_unit_test(test_wrong_public_key_fails),
        cmocka_unit_test(test_stopped_server_fails),
        cmocka_unit_test(test_bad_flags_named),
        cmocka_unit_test(test_ski_command),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
