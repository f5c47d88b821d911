/* SPDX-License-Identifier: Apache-2.0 */
/* Reload of the key server's own certificate and of watched key
 * directories:
 *  - a broken auth_cert at reload keeps the old one: new connections still
 *    succeed, and the log says why;
 *  - a new auth_cert is served to connections made after the reload, while
 *    a connection made before it keeps working;
 *  - with watch_key_dirs, a key copied into the directory is served and a
 *    key removed answers `key not found`, without any signal. */
#include "daemon.h"
#include "pki.h"
#include "testutil.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *dir;

static int setup(void **state)
{
    dir = tp_tempdir("reload-tls");
    return 0;
}

static int teardown(void **state)
{
    tp_rmtree(dir);
    return 0;
}

/* Waits (up to 10 s) until the log has `count` lines containing what. */
static void wait_log(const td_daemon *d, const char *what, int count)
{
    double until = td_now_ms() + 10000;
    for (;;) {
        char *log = td_read_log(d);
        int n = 0;
        for (const char *p = log; (p = strstr(p, what)); p++)
            n++;
        free(log);
        if (n >= count)
            return;
        if (td_now_ms() > until) {
            td_dump_log(d);
            fail_msg("\"%s\" did not appear %d time(s) in the log", what,
                     count);
        }
        usleep(20000);
    }
}

/* The subject of the certificate the server presents now. */
static char *served_subject(const td_daemon *d)
{
    char connect[64], script[4096];
    snprintf(connect, sizeof connect, "127.0.0.1:%u", d->port);
    snprintf(script, sizeof script,
             "openssl s_client -connect %s -cert %s -key %s -CAfile %s "
             "</dev/null 2>/dev/null | grep '^subject='",
             connect, tp_path("client.crt"), tp_path("client.key"),
             tp_path("ca.crt"));
    char *out = NULL;
    assert_int_equal(
        td_run((const char *[]){"/bin/sh", "-c", script, NULL}, &out, 20000),
        0);
    return out;
}

static void test_certificate_reload(void **state)
{
    char cert[1024], key[1024];
    snprintf(cert, sizeof cert, "%s/server.pem", dir);
    snprintf(key, sizeof key, "%s/server-key.pem", dir);
    tu_sh("cp %s %s", tp_path("server.crt"), cert);
    tu_sh("cp %s %s", tp_path("server.key"), key);
    tu_sh("chmod 600 %s%s", key, "");
    td_daemon d;
    td_opts o = {.name = "reload-tls", .cert = cert, .key = key};
    td_start(&d, &o);
    char *subj = served_subject(&d);
    assert_non_null(strstr(subj, "CN = localhost"));
    free(subj);
    kl_client *before = td_connect(&d);

    /* a broken certificate: reported, the old one stays */
    tu_sh("echo garbage > %s%s", cert, "");
    td_signal(&d, SIGHUP);
    wait_log(&d, "reload: keeping the previous auth_cert, auth_key and CA", 1);
    char want[1200];
    snprintf(want, sizeof want, "auth_cert %s holds nothing in PEM form", cert);
    wait_log(&d, want, 1);
    kl_client *c = td_connect(&d);
    td_expect_ping(&d, c);
    kl_client_close(c);

    /* a new certificate (and key) for the same name, signed by the CA */
    tu_sh("openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "
          "%s 2>/dev/null && chmod 600 %s",
          key, key);
    tp_issue_server_cert(dir, key, "/O=reload test/CN=reloaded", 20, cert);
    td_signal(&d, SIGHUP);
    wait_log(&d, "new certificate; generation 3", 1);
    /* checked on reload too: 20 days left is worth a warning */
    wait_log(&d, ", in 20 day(s): renew it soon", 1);
    subj = served_subject(&d);
    if (!strstr(subj, "CN = reloaded"))
        fail_msg("new connections still get the old certificate: %s", subj);
    free(subj);
    /* the connection made before both reloads is still served */
    td_expect_ping(&d, before);
    kl_client_close(before);
    assert_int_equal(td_stop(&d, 0), 0);
}

static void test_watched_directory(void **state)
{
    char keys[1100];
    snprintf(keys, sizeof keys, "%s/keys", dir);
    tu_sh("mkdir -p %s && chmod 700 %s", keys, keys);
    tp_copy_key(keys, tp_path("keys/ecdsa-p256.key"));
    td_daemon d;
    td_opts o = {.name = "reload-watch",
                 .key_dirs = keys,
                 .extra = (const char *[]){"--watch-delay=50ms", NULL}};
    td_start(&d, &o);
    kl_client *c = td_connect(&d);
    EVP_PKEY *pub = tp_load_pub(tp_path("pubkeys/rsa-2048.pem"));
    uint8_t ski[20];
    tp_ski(pub, ski);
    EVP_PKEY_free(pub);
    static const uint8_t digest[32] = {9};
    kl_request_spec s = {.opcode = KL_OP_RSA_SIGN_SHA256,
                         .payload = digest,
                         .payload_len = 32,
                         .ski = ski};
    td_expect_error(&d, c, &s, KL_ERR_KEY_NOT_FOUND);

    tp_copy_key(keys, tp_path("keys/rsa-2048.key"));
    wait_log(&d, "reloading (a key directory changed)", 1);
    wait_log(&d, "reloaded: 2 keys (1 added, 0 removed, 0 failed)", 1);
    kl_client_result r;
    td_call(&d, c, &s, &r);
    assert_int_equal(r.opcode, KL_OP_RESPONSE);
    kl_client_result_free(&r);

    char path[1200];
    snprintf(path, sizeof path, "%s/rsa-2048.key", keys);
    assert_int_equal(unlink(path), 0);
    wait_log(&d, "reloaded: 1 keys (0 added, 1 removed, 0 failed)", 1);
    td_expect_error(&d, c, &s, KL_ERR_KEY_NOT_FOUND);
    kl_client_close(c);
    assert_int_equal(td_stop(&d, 0), 0);
}

/* The file is read again: a restart-only option is reported, not applied;
 * a broken file keeps the running configuration. */
static void test_config_file_reload(void **state)
{
    char conf[1100], flag[1200];
    snprintf(conf, sizeof conf, "%s/gokeyless.yaml", dir);
    FILE *f = fopen(conf, "w");
    fputs("max_inflight: 100\n", f);
    fclose(f);
    snprintf(flag, sizeof flag, "--config-file=%s", conf);
    td_daemon d;
    td_opts o = {.name = "reload-conf", .extra = (const char *[]){flag, NULL}};
    td_start(&d, &o);
    f = fopen(conf, "w");
    fputs("max_inflight: 200\n", f);
    fclose(f);
    td_signal(&d, SIGHUP);
    wait_log(&d,
             "[warning] reload: max_inflight changed from \"100\" to "
             "\"200\", which takes a restart; still using \"100\"",
             1);
    f = fopen(conf, "w");
    fputs("max_inflight: [\n", f);
    fclose(f);
    td_signal(&d, SIGHUP);
    char want[1300];
    snprintf(want, sizeof want, "[error] reload: %s:2: not valid YAML", conf);
    wait_log(&d, want, 1);
    wait_log(&d, "keeping the running configuration", 1);
    wait_log(&d, "reloaded: ", 2);
    kl_client *c = td_connect(&d);
    td_expect_ping(&d, c);
    kl_client_close(c);
    assert_int_equal(td_stop(&d, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_certificate_reload),
        cmocka_unit_test(test_watched_directory),
        cmocka_unit_test(test_config_file_reload),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
