/* SPDX-License-Identifier: Apache-2.0 */
/* The keyless provider in-process: key references load through
 * PEM_read_bio_PrivateKey (alone and in a bundle), match their certificate
 * (SSL_CTX_check_private_key), and TLS servers complete handshakes with
 * them - TLS 1.3 with ECDSA, RSA-PSS and Ed25519, TLS 1.2 with ECDHE-ECDSA,
 * ECDHE-RSA (PSS and PKCS#1) and RSA key exchange - while the private keys
 * stay in keylessd. Ordinary keys work as before with the provider loaded,
 * and a process that forks after loading signs in the child. */
#include "test_provider_common.h"

#include <sys/wait.h>
#include <unistd.h>

static const char *const names[] = {"rsa-2048", "ecdsa-p256", "ecdsa-p384",
                                    "ed25519"};

static int setup(void **state)
{
    dir = tp_tempdir("provider-tls");
    for (size_t i = 0; i < 4; i++) {
        char key[256];
        snprintf(key, sizeof key, "keys/%s.key", names[i]);
        tp_copy_key(dir, tp_path(key));
        write_cert(path_in(strchr(key, '/') + 1), names[i]);
    }
    start_keylessd();
    for (size_t i = 0; i < 4; i++) {
        write_ref(names[i], kd.port, NULL, 0);
        write_ref(names[i], kd.port, NULL, 1);
    }
    prov_setup_libctx();
    return 0;
}

static int teardown(void **state)
{
    prov_teardown_libctx();
    assert_int_equal(td_stop(&kd, 0), 0);
    tp_rmtree(dir);
    return 0;
}

static SSL_CTX *server_ctx(const char *name, const char *keyfile)
{
    char crt[256];
    snprintf(crt, sizeof crt, "%s.crt", name);
    SSL_CTX *s = SSL_CTX_new_ex(lib, NULL, TLS_server_method());
    assert_non_null(s);
    assert_int_equal(SSL_CTX_use_certificate_chain_file(s, path_in(crt)), 1);
    EVP_PKEY *pk = read_key(keyfile);
    assert_non_null(pk);
    assert_int_equal(SSL_CTX_use_PrivateKey(s, pk), 1);
    assert_int_equal(SSL_CTX_check_private_key(s), 1);
    EVP_PKEY_free(pk);
    return s;
}

typedef struct hs_result {
    int ok;
    int version;
    int sig_nid;
    char cipher[64];
} hs_result;

/* One handshake over a BIO pair; the client verifies the server's
 * signature as part of the handshake (the chain is not checked). */
static hs_result handshake(SSL_CTX *sctx, int version, const char *ciphers,
                           const char *sigalgs)
{
    hs_result r = {0};
    SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(cctx, version);
    SSL_CTX_set_max_proto_version(cctx, version);
    if (ciphers)
        assert_int_equal(SSL_CTX_set_cipher_list(cctx, ciphers), 1);
    if (sigalgs)
        assert_int_equal(SSL_CTX_set1_sigalgs_list(cctx, sigalgs), 1);
    SSL *s = SSL_new(sctx), *c = SSL_new(cctx);
    BIO *sb, *cb;
    assert_int_equal(BIO_new_bio_pair(&sb, 0, &cb, 0), 1);
    SSL_set_bio(s, sb, sb);
    SSL_set_bio(c, cb, cb);
    SSL_set_accept_state(s);
    SSL_set_connect_state(c);
    int sdone = 0, cdone = 0;
    for (int i = 0; i < 50 && !(sdone && cdone); i++) {
        int rc;
        if (!cdone && (rc = SSL_do_handshake(c)) != 1 &&
            SSL_get_error(c, rc) != SSL_ERROR_WANT_READ)
            break;
        cdone |= SSL_is_init_finished(c);
        if (!sdone && (rc = SSL_do_handshake(s)) != 1 &&
            SSL_get_error(s, rc) != SSL_ERROR_WANT_READ)
            break;
        sdone |= SSL_is_init_finished(s);
    }
    r.ok = sdone && cdone;
    if (!r.ok)
        ERR_print_errors_fp(stderr);
    r.version = SSL_version(c);
    SSL_get_peer_signature_type_nid(c, &r.sig_nid);
    snprintf(r.cipher, sizeof r.cipher, "%s", SSL_get_cipher_name(c));
    SSL_free(s);
    SSL_free(c);
    SSL_CTX_free(cctx);
    return r;
}

static void test_load_and_match(void **state)
{
    for (size_t i = 0; i < 4; i++) {
        char ref[256], crt[256];
        snprintf(ref, sizeof ref, "%s.ref", names[i]);
        snprintf(crt, sizeof crt, "%s.crt", names[i]);
        EVP_PKEY *pk = read_key(path_in(ref));
        assert_non_null(pk);
        assert_string_equal(provider_of(pk), "keyless");
        EVP_PKEY *pub = tp_load_pub(path_in(crt));
        assert_int_equal(EVP_PKEY_eq(pub, pk), 1);
        assert_int_equal(EVP_PKEY_get_bits(pk), EVP_PKEY_get_bits(pub));
        assert_int_equal(EVP_PKEY_get_size(pk), EVP_PKEY_get_size(pub));
        /* A different key of the same type does not match. */
        if (i == 1) {
            EVP_PKEY *other = tp_load_pub(tp_path("pubkeys/ecdsa-p384.pem"));
            assert_int_not_equal(EVP_PKEY_eq(other, pk), 1);
            EVP_PKEY_free(other);
        }
        EVP_PKEY_free(pub);
        EVP_PKEY_free(pk);
    }
}

/* A HAProxy-style bundle: the certificate, then the reference. */
static void test_bundle(void **state)
{
    SSL_CTX *s = server_ctx("ecdsa-p256", path_in("ecdsa-p256.pem"));
    hs_result r = handshake(s, TLS1_3_VERSION, NULL, NULL);
    assert_true(r.ok);
    SSL_CTX_free(s);
}

static void test_tls13(void **state)
{
    static const struct {
        const char *name;
        int nid;
    } t[] = {{"ecdsa-p256", EVP_PKEY_EC},
             {"ecdsa-p384", EVP_PKEY_EC},
             {"rsa-2048", EVP_PKEY_RSA_PSS},
             {"ed25519", EVP_PKEY_ED25519}};
    for (size_t i = 0; i < 4; i++) {
        char ref[256];
        snprintf(ref, sizeof ref, "%s.ref", t[i].name);
        SSL_CTX *s = server_ctx(t[i].name, path_in(ref));
        hs_result r = handshake(s, TLS1_3_VERSION, NULL, NULL);
        assert_true(r.ok);
        assert_int_equal(r.version, TLS1_3_VERSION);
        assert_int_equal(r.sig_nid, t[i].nid);
        SSL_CTX_free(s);
    }
}

static void test_tls12(void **state)
{
    static const struct {
        const char *name, *ciphers, *sigalgs;
        int nid;
    } t[] = {
        {"ecdsa-p256", "ECDHE-ECDSA-AES128-GCM-SHA256", NULL, EVP_PKEY_EC},
        {"rsa-2048", "ECDHE-RSA-AES128-GCM-SHA256", NULL, EVP_PKEY_RSA_PSS},
        {"rsa-2048", "ECDHE-RSA-AES256-GCM-SHA384", "RSA+SHA384", EVP_PKEY_RSA},
        {"rsa-2048", "ECDHE-RSA-AES128-GCM-SHA256", "RSA+SHA512", EVP_PKEY_RSA},
        /* RSA key exchange: the premaster is decrypted remotely. */
        {"rsa-2048", "AES128-GCM-SHA256", NULL, NID_undef},
        {"ed25519", "ECDHE-ECDSA-AES256-GCM-SHA384", NULL, EVP_PKEY_ED25519},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char ref[256];
        snprintf(ref, sizeof ref, "%s.ref", t[i].name);
        SSL_CTX *s = server_ctx(t[i].name, path_in(ref));
        hs_result r = handshake(s, TLS1_2_VERSION, t[i].ciphers, t[i].sigalgs);
        assert_true(r.ok);
        assert_string_equal(r.cipher, t[i].ciphers);
        if (t[i].nid != NID_undef)
            assert_int_equal(r.sig_nid, t[i].nid);
        SSL_CTX_free(s);
    }
}

/* With the provider loaded, an ordinary key file still loads through the
 * default provider and serves TLS as before. */
static void test_ordinary_key(void **state)
{
    EVP_PKEY *pk = read_key(path_in("ecdsa-p256.key"));
    assert_non_null(pk);
    assert_string_equal(provider_of(pk), "default");
    EVP_PKEY_free(pk);
    SSL_CTX *s = server_ctx("rsa-2048", path_in("rsa-2048.key"));
    hs_result r = handshake(s, TLS1_2_VERSION, "AES128-GCM-SHA256", NULL);
    assert_true(r.ok);
    r = handshake(s, TLS1_3_VERSION, NULL, NULL);
    assert_true(r.ok);
    SSL_CTX_free(s);
}

/* Load and use a key, fork: the child's handshakes open their own
 * connection to keylessd (libkeyless's fork rule), the parent's go on. */
static void test_fork(void **state)
{
    SSL_CTX *s = server_ctx("ecdsa-p256", path_in("ecdsa-p256.ref"));
    assert_true(handshake(s, TLS1_3_VERSION, NULL, NULL).ok);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int ok = 1;
        for (int i = 0; i < 3; i++)
            ok &= handshake(s, TLS1_3_VERSION, NULL, NULL).ok;
        _exit(ok ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_true(handshake(s, TLS1_3_VERSION, NULL, NULL).ok);
    SSL_CTX_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_and_match), cmocka_unit_test(test_bundle),
        cmocka_unit_test(test_tls13),          cmocka_unit_test(test_tls12),
        cmocka_unit_test(test_ordinary_key),   cmocka_unit_test(test_fork),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
