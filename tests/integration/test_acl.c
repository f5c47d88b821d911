/* SPDX-License-Identifier: Apache-2.0 */
/* Authorisation beyond mutual TLS: access lists (engine/acl.h,
 * docs/SECURITY.md). Clients matched by subject CN, by SAN and by SHA-256
 * fingerprint; keys by directory and by SKI. An allowed request is served;
 * a refused one is answered `key not found` and logged with the client's
 * name; a client that no rule lists may use no key (pings still work). A
 * broken access file stops the start with a message naming it. On SIGHUP
 * the file is re-read: new rules apply at once, to connections already
 * open too; a broken file is reported (file, line, fix) and the rules in
 * effect stay. Names are compared in full: a CA-signed certificate whose
 * CN is "edge-1\0.attacker" (or holds ESC, CR, or a SAN with a NUL) is
 * refused at the handshake and cannot use edge-1's keys
 * (docs/SECURITY.md). */
#include "test_abuse_common.h"

#include <signal.h>
#include <sys/stat.h>

static td_daemon d;
static char *dir, *dir_a, *dir_b, *certs;
static uint8_t ski_p256[20], ski_p384[20], ski_rsa[20];
static char acl_path[1024];

static void load_ski(const char *name, uint8_t ski[20])
{
    char rel[128];
    snprintf(rel, sizeof rel, "pubkeys/%s.pem", name);
    EVP_PKEY *pk = tp_load_pub(tp_path(rel));
    tp_ski(pk, ski);
    EVP_PKEY_free(pk);
}

/* A client certificate from the test CA: CN name, optional SAN. */
static void make_client(const char *name, const char *san)
{
    char script[4096];
    snprintf(script, sizeof script,
             "set -e; cd '%s'; umask 077;"
             "printf 'basicConstraints=critical,CA:FALSE\\n"
             "keyUsage=critical,digitalSignature\\n"
             "extendedKeyUsage=clientAuth\\n%s%s\\n' > %s.ext;"
             "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
             "-nodes -keyout %s.key -subj '/O=keylessd test/CN=%s' "
             "2>/dev/null | openssl x509 -req -CA '%s' -CAkey '%s' "
             "-CAcreateserial -days 30 -extfile %s.ext -out %s.crt "
             "2>/dev/null",
             certs, san ? "subjectAltName=" : "", san ? san : "", name, name,
             name, tp_path("ca.crt"), tp_path("ca.key"), name, name);
    char *out = NULL;
    int st =
        td_run((const char *[]){"/bin/sh", "-c", script, NULL}, &out, 20000);
    if (st != 0)
        fail_msg("making the %s certificate failed: %s", name, out);
    free(out);
}

/* SHA-256 of a certificate as XX:XX:... (openssl's form). */
static void fingerprint(const char *name, char *out, size_t cap)
{
    char crt[1100], *text = NULL;
    snprintf(crt, sizeof crt, "%s/%s.crt", certs, name);
    assert_int_equal(
        td_run((const char *[]){"/usr/bin/env", "openssl", "x509", "-in", crt,
                                "-noout", "-fingerprint", "-sha256", NULL},
               &text, 10000),
        0);
    const char *eq = strchr(text, '=');
    assert_non_null(eq);
    snprintf(out, cap, "%s", eq + 1);
    out[strcspn(out, "\r\n")] = 0;
    free(text);
}

static int setup(void **state)
{
    static char flag[1100];
    static const char *extra[2];
    dir = tp_tempdir("acl");
    char path[1100];
    snprintf(path, sizeof path, "%s/a", dir);
    dir_a = strdup(path);
    snprintf(path, sizeof path, "%s/b", dir);
    dir_b = strdup(path);
    snprintf(path, sizeof path, "%s/certs", dir);
    certs = strdup(path);
    assert_int_equal(mkdir(dir_a, 0700), 0);
    assert_int_equal(mkdir(dir_b, 0700), 0);
    assert_int_equal(mkdir(certs, 0700), 0);
    tp_copy_key(dir_a, tp_path("keys/ecdsa-p256.key"));
    tp_copy_key(dir_b, tp_path("keys/ecdsa-p384.key"));
    tp_copy_key(dir_b, tp_path("keys/rsa-2048.key"));
    load_ski("ecdsa-p256", ski_p256);
    load_ski("ecdsa-p384", ski_p384);
    load_ski("rsa-2048", ski_rsa);
    make_client("edge-1", NULL);
    make_client("edge-2", "DNS:edge-2.example.com,IP:192.0.2.7");
    make_client("edge-3", NULL);
    char fp3[160];
    fingerprint("edge-3", fp3, sizeof fp3);

    snprintf(acl_path, sizeof acl_path, "%s/access.yaml", dir);
    FILE *f = fopen(acl_path, "w");
    assert_non_null(f);
    fprintf(f,
            "# rule 0: edge-1 by name, every key of directory a\n"
            "- clients: [cn:edge-1]\n"
            "  keys: [dir:%s]\n"
            "# rule 1: edge-2 by SAN, edge-3 by fingerprint: the P-384 key\n"
            "- clients: [san:edge-2.example.com, \"fp:%s\"]\n"
            "  keys: [ski:%s]\n",
            dir_a, fp3, tp_ski_hex(ski_p384));
    fclose(f);
    snprintf(flag, sizeof flag, "--access-file=%s", acl_path);
    extra[0] = flag;
    char dirs[2300];
    snprintf(dirs, sizeof dirs, "%s,%s", dir_a, dir_b);
    td_opts o = {.name = "acl", .key_dirs = dirs, .extra = extra};
    td_start(&d, &o);
    return 0;
}

static int teardown(void **state)
{
    int st = td_stop(&d, 0);
    free(dir_a);
    free(dir_b);
    free(certs);
    tp_rmtree(dir);
    return st == 0 ? 0 : -1;
}

static kl_client *connect_as(const char *name)
{
    char crt[1100], key[1100];
    kl_client_opts o = td_client_opts(&d);
    if (name) {
        snprintf(crt, sizeof crt, "%s/%s.crt", certs, name);
        snprintf(key, sizeof key, "%s/%s.key", certs, name);
        o.cert_file = crt;
        o.key_file = key;
    }
    kl_client *c = NULL;
    char err[256];
    if (kl_client_connect(&o, &c, err, sizeof err) != KL_OK)
        fail_msg("connect as %s: %s", name ? name : "client", err);
    return c;
}

/* KL_ERR_NONE when signed, else the error code. */
static uint8_t sign(kl_client *c, const uint8_t ski[20], uint8_t op)
{
    kl_request_spec s = {.opcode = op,
                         .payload = ha_digest,
                         .payload_len = sizeof ha_digest,
                         .ski = ski};
    kl_client_result r;
    td_call(&d, c, &s, &r);
    uint8_t e = r.opcode == KL_OP_RESPONSE ? KL_ERR_NONE : r.error;
    assert_true(r.opcode == KL_OP_RESPONSE || r.opcode == KL_OP_ERROR);
    kl_client_result_free(&r);
    return e;
}

#define EC KL_OP_ECDSA_SIGN_SHA256
#define RSA KL_OP_RSA_SIGN_SHA256

static void test_allowed_by_cn_and_dir(void **state)
{
    kl_client *c = connect_as("edge-1");
    assert_int_equal(sign(c, ski_p256, EC), KL_ERR_NONE);
    assert_int_equal(sign(c, ski_p384, EC), KL_ERR_KEY_NOT_FOUND);
    assert_int_equal(sign(c, ski_rsa, RSA), KL_ERR_KEY_NOT_FOUND);
    kl_client_close(c);
}

static void test_allowed_by_san_and_fingerprint(void **state)
{
    const char *who[] = {"edge-2", "edge-3"};
    for (int i = 0; i < 2; i++) {
        kl_client *c = connect_as(who[i]);
        assert_int_equal(sign(c, ski_p384, EC), KL_ERR_NONE);
        assert_int_equal(sign(c, ski_p256, EC), KL_ERR_KEY_NOT_FOUND);
        assert_int_equal(sign(c, ski_rsa, RSA), KL_ERR_KEY_NOT_FOUND);
        kl_client_close(c);
    }
}

/* The test PKI's usual client is in no rule: no key, but pings work. */
static void test_unlisted_client(void **state)
{
    kl_client *c = connect_as(NULL);
    td_expect_ping(&d, c);
    assert_int_equal(sign(c, ski_p256, EC), KL_ERR_KEY_NOT_FOUND);
    assert_int_equal(sign(c, ski_p384, EC), KL_ERR_KEY_NOT_FOUND);
    assert_int_equal(sign(c, ski_rsa, RSA), KL_ERR_KEY_NOT_FOUND);
    kl_client_close(c);
}

/* Refusals are logged with the client's name and the reason; an SKI that
 * no key has is not called a refusal. */
static void test_refusals_logged(void **state)
{
    static const uint8_t nokey[20] = {0xde, 0xad};
    kl_client *c = connect_as("edge-1");
    assert_int_equal(sign(c, nokey, EC), KL_ERR_KEY_NOT_FOUND);
    kl_client_close(c);
    ha_sleep_ms(100);
    char *log = td_read_log(&d);
    char want[256];
    snprintf(want, sizeof want, "(client edge-1)");
    const char *line = strstr(log, "refused by the access lists");
    assert_non_null(line);
    assert_non_null(strstr(log, want));
    assert_non_null(strstr(log, "(client keyless dev client)"));
    /* the unknown SKI's line has no refusal reason */
    const char *unk = strstr(log, "dead000000");
    assert_non_null(unk);
    const char *eol = strchr(unk, '\n');
    assert_true(eol && (size_t)(eol - unk) < 200);
    assert_null(memmem(unk, (size_t)(eol - unk), "refused", 7));
    assert_non_null(strstr(log, "access lists: 2 rule(s)"));
    free(log);
}

/* Connects as certs/NAME and asks for a signature with edge-1's key: the
 * handshake must be refused - no answer, the connection closed (in TLS 1.3
 * the client's side of the handshake completes first; the refusal arrives
 * afterwards). */
static void expect_refused_as(const char *name, bool tls12)
{
    char crt[1100], key[1100], err[512] = "";
    snprintf(crt, sizeof crt, "%s/%s.crt", certs, name);
    snprintf(key, sizeof key, "%s/%s.key", certs, name);
    kl_client_opts o = td_client_opts(&d);
    o.cert_file = crt;
    o.key_file = key;
    o.tls12_only = tls12;
    kl_client *c = NULL;
    const char *v = tls12 ? "TLS 1.2" : "TLS 1.3";
    if (kl_client_connect(&o, &c, err, sizeof err) == KL_OK) {
        kl_request_spec s = {.opcode = EC,
                             .payload = ha_digest,
                             .payload_len = sizeof ha_digest,
                             .ski = ski_p256};
        uint32_t id;
        kl_client_result r;
        assert_int_equal(kl_client_send(c, &s, &id), KL_OK);
        kl_status fst = kl_client_flush(c, 3000);
        (void)fst; /* may fail: the refusal is what we wait for */
        kl_status st = kl_client_recv(c, 3000, &r);
        if (st == KL_OK)
            fail_msg("%s (%s): answered (opcode 0x%02x, error 0x%02x): the "
                     "certificate was accepted",
                     name, v, r.opcode, r.error);
        if (st == KL_E_TIMEOUT)
            fail_msg("%s (%s): connection still open after 3 s", name, v);
        snprintf(err, sizeof err, "%s", kl_client_last_error(c));
        kl_client_close(c);
    }
    print_message("%s over %s: refused: %s\n", name, v, err);
}

static void test_hostile_names_refused(void **state)
{
    static const char nul[] = "edge-1\0.attacker";
    static const char esc[] = "edge-1\x1b[2J";
    static const char cr[] = "edge-1\r[error] forged";
    static const char san[] = "edge-2.example.com\0.attacker";
    tp_issue_client_raw(certs, "nul-cn", "ca", nul, sizeof nul - 1, NULL, 0);
    tp_issue_client_raw(certs, "esc-cn", "ca", esc, sizeof esc - 1, NULL, 0);
    tp_issue_client_raw(certs, "cr-cn", "ca", cr, sizeof cr - 1, NULL, 0);
    tp_issue_client_raw(certs, "nul-san", "ca", "edge-9", 6, san,
                        sizeof san - 1);
    const char *names[] = {"nul-cn", "esc-cn", "cr-cn", "nul-san"};
    for (int i = 0; i < 4; i++) {
        expect_refused_as(names[i], false);
        expect_refused_as(names[i], true);
    }
    /* edge-1 itself is still served */
    kl_client *c = connect_as("edge-1");
    assert_int_equal(sign(c, ski_p256, EC), KL_ERR_NONE);
    kl_client_close(c);
    /* each refusal is logged with the reason and the name, escaped */
    char *log = td_read_log(&d);
    static const char *const want[] = {
        "(client edge-1\\x00.attacker): TLS handshake failed: client "
        "certificate refused: its subject CN holds a control character (0x00 "
        "at byte 6); names must be plain text (docs/SECURITY.md)",
        "(client edge-1\\x1b[2J): TLS handshake failed: client certificate "
        "refused: its subject CN holds a control character (0x1b at byte 6)",
        "(client edge-1\\x0d[error] forged): TLS handshake failed: client "
        "certificate refused: its subject CN holds a control character (0x0d",
        "(client edge-9): TLS handshake failed: client certificate refused: "
        "its subjectAltName DNS holds a control character (0x00 at byte 18)",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(log, want[i])) {
            td_dump_log(&d);
            fail_msg("not in the log: %s", want[i]);
        }
    assert_null(strchr(log, '\x1b'));
    assert_null(strchr(log, '\r'));
    free(log);
}

/* A broken access file: keylessd does not start, and says why. */
static void test_bad_access_file(void **state)
{
    char bad[1100], flag[1200], bin[1100];
    snprintf(bad, sizeof bad, "%s/bad.yaml", dir);
    FILE *f = fopen(bad, "w");
    assert_non_null(f);
    fprintf(f, "- clients: [cn:x]\n  keys: [ski:1234]\n");
    fclose(f);
    snprintf(flag, sizeof flag, "--access-file=%s", bad);
    snprintf(bin, sizeof bin, "%s/keylessd", tu_bin_dir());
    char a_cert[1200], a_key[1200], a_ca[1200];
    snprintf(a_cert, sizeof a_cert, "--auth-cert=%s", tp_path("server.crt"));
    snprintf(a_key, sizeof a_key, "--auth-key=%s", tp_path("server.key"));
    snprintf(a_ca, sizeof a_ca, "--cloudflare-ca-cert=%s", tp_path("ca.crt"));
    char *out = NULL;
    int st = td_run((const char *[]){bin, a_cert, a_key, a_ca, "--port=1",
                                     "--listen-address=127.0.0.1", flag, NULL},
                    &out, 10000);
    print_message("bad access file: exit %d: %s", st, out);
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, "bad.yaml:2"));
    assert_non_null(strstr(out, "ski:HEX"));
    free(out);
}

static size_t count_in_log(const char *want)
{
    char *log = td_read_log(&d);
    size_t n = 0;
    for (const char *p = log; (p = strstr(p, want)); p += strlen(want))
        n++;
    free(log);
    return n;
}

/* Waits until the log holds want at least n times. */
static void wait_log(const char *want, size_t n)
{
    double end = td_now_ms() + 10000;
    while (count_in_log(want) < n) {
        if (td_now_ms() > end) {
            td_dump_log(&d);
            fail_msg("no %zu x \"%s\" in the log", n, want);
        }
        ha_sleep_ms(20);
    }
}

static void write_acl(const char *text)
{
    /* written beside and renamed, as an editor or a deployment would */
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.new", acl_path);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(rename(tmp, acl_path), 0);
}

/* SIGHUP re-reads the access file: a broken one is reported and changes
 * nothing; a good one applies at once, also to a connection opened before
 * (it is matched again at its next key request). */
static void test_reload(void **state)
{
    size_t len = 0;
    char *orig = tu_read_file(acl_path, &len);
    assert_non_null(orig);
    kl_client *a = connect_as("edge-1");
    assert_int_equal(sign(a, ski_p256, EC), KL_ERR_NONE);
    assert_int_equal(sign(a, ski_p384, EC), KL_ERR_KEY_NOT_FOUND);

    /* broken: line 3 has an SKI of the wrong length */
    size_t bad_before = count_in_log("keeping the 2 access rule(s) in effect");
    write_acl("- clients: [cn:edge-1]\n"
              "  keys: [\"*\"]\n"
              "- {clients: [cn:edge-2], keys: [ski:1234]}\n");
    td_signal(&d, SIGHUP);
    wait_log("keeping the 2 access rule(s) in effect", bad_before + 1);
    char want[1200];
    snprintf(want, sizeof want, "reload: access_file: %s:3: a key is",
             acl_path);
    assert_true(count_in_log(want) >= 1);
    assert_true(count_in_log("ski:HEX (40 hex digits)") >= 1);
    /* the rules in effect did not change, for old and new connections */
    assert_int_equal(sign(a, ski_p256, EC), KL_ERR_NONE);
    assert_int_equal(sign(a, ski_rsa, RSA), KL_ERR_KEY_NOT_FOUND);
    kl_client *b = connect_as("edge-1");
    assert_int_equal(sign(b, ski_p256, EC), KL_ERR_NONE);
    assert_int_equal(sign(b, ski_p384, EC), KL_ERR_KEY_NOT_FOUND);
    kl_client_close(b);

    /* good: edge-1 moves to directory b, edge-2 is no longer listed */
    size_t ok_before = count_in_log("reload: access lists: 1 rule(s)");
    snprintf(want, sizeof want,
             "- clients: [cn:edge-1, cn:edge-3]\n  keys: [dir:%s]\n", dir_b);
    write_acl(want);
    td_signal(&d, SIGHUP);
    wait_log("reload: access lists: 1 rule(s)", ok_before + 1);
    /* the connection opened before the reload gets the new rules */
    assert_int_equal(sign(a, ski_p256, EC), KL_ERR_KEY_NOT_FOUND);
    assert_int_equal(sign(a, ski_p384, EC), KL_ERR_NONE);
    assert_int_equal(sign(a, ski_rsa, RSA), KL_ERR_NONE);
    kl_client_close(a);
    kl_client *e2 = connect_as("edge-2");
    assert_int_equal(sign(e2, ski_p384, EC), KL_ERR_KEY_NOT_FOUND);
    td_expect_ping(&d, e2);
    kl_client_close(e2);

    /* back to the original rules for the tests after this one */
    size_t back_before = count_in_log("reload: access lists: 2 rule(s)");
    write_acl(orig);
    free(orig);
    td_signal(&d, SIGHUP);
    wait_log("reload: access lists: 2 rule(s)", back_before + 1);
    kl_client *c = connect_as("edge-1");
    assert_int_equal(sign(c, ski_p256, EC), KL_ERR_NONE);
    assert_int_equal(sign(c, ski_p384, EC), KL_ERR_KEY_NOT_FOUND);
    kl_client_close(c);
}

/* Reloads while a client signs without pause: every request is answered
 * under the lists in effect when it is read (both files allow it), none
 * fails, and (under TSan) the swap races no request. */
static void test_reload_under_load(void **state)
{
    char *orig = NULL;
    size_t len = 0;
    orig = tu_read_file(acl_path, &len);
    assert_non_null(orig);
    char a[1200], b[1200];
    snprintf(a, sizeof a, "- clients: [\"*\"]\n  keys: [\"*\"]\n");
    snprintf(b, sizeof b,
             "- clients: [\"cn:keyless dev client\"]\n  keys: [dir:%s]\n"
             "- clients: [cn:edge-1]\n  keys: [\"*\"]\n",
             dir_a);
    /* the side client (the test PKI's usual client) is allowed first */
    size_t first = count_in_log("reload: access lists: 1 rule(s)");
    write_acl(a);
    td_signal(&d, SIGHUP);
    wait_log("reload: access lists: 1 rule(s)", first + 1);
    ha_side s;
    ha_side_start(&s, &d, ski_p256, 0);
    for (int i = 1; i <= 10; i++) {
        const char *want = i % 2 ? "reload: access lists: 2 rule(s)"
                                 : "reload: access lists: 1 rule(s)";
        size_t before = count_in_log(want);
        write_acl(i % 2 ? b : a);
        td_signal(&d, SIGHUP);
        wait_log(want, before + 1);
        ha_sleep_ms(30);
    }
    ha_side_stop(&s, "during 10 reloads"); /* asserts no failure */
    size_t before = count_in_log("reload: access lists: 2 rule(s)");
    write_acl(orig);
    free(orig);
    td_signal(&d, SIGHUP);
    wait_log("reload: access lists: 2 rule(s)", before + 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allowed_by_cn_and_dir),
        cmocka_unit_test(test_allowed_by_san_and_fingerprint),
        cmocka_unit_test(test_unlisted_client),
        cmocka_unit_test(test_refusals_logged),
        cmocka_unit_test(test_hostile_names_refused),
        cmocka_unit_test(test_bad_access_file),
        cmocka_unit_test(test_reload),
        cmocka_unit_test(test_reload_under_load),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
