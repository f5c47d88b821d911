/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the in-process provider tests (test_provider_*.c): the keyless
 * provider added as a built-in to a library context of its own (so it runs
 * under the test's sanitizers, which a keyless.so loaded into a system
 * openssl could not), a keylessd holding the real keys, certificates and
 * key references written to a temporary directory, and TLS handshakes over
 * a BIO pair. Static functions: each test program includes it once. */
#ifndef TEST_PROVIDER_COMMON_H
#define TEST_PROVIDER_COMMON_H

#include "daemon.h"
#include "pki.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/provider.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "provider/keyref_pem.h"
#include "provider/prov.h"

static OSSL_LIB_CTX *lib; /* default + keyless */
static OSSL_PROVIDER *p_default, *p_keyless;
static char *dir; /* keys for keylessd, certs, references */
static td_daemon kd;

static void prov_setup_libctx(void)
{
    lib = OSSL_LIB_CTX_new();
    assert_non_null(lib);
    assert_int_equal(
        OSSL_PROVIDER_add_builtin(lib, "keyless", OSSL_provider_init), 1);
    /* The order of openssl.cnf: default first, then keyless. */
    p_default = OSSL_PROVIDER_load(lib, "default");
    p_keyless = OSSL_PROVIDER_load(lib, "keyless");
    assert_non_null(p_default);
    assert_non_null(p_keyless);
}

static void prov_teardown_libctx(void)
{
    OSSL_PROVIDER_unload(p_keyless);
    OSSL_PROVIDER_unload(p_default);
    OSSL_LIB_CTX_free(lib);
}

static char *path_in(const char *name)
{
    static char b[8][2200];
    static unsigned n;
    char *p = b[n++ % 8];
    snprintf(p, 2200, "%s/%s", dir, name);
    return p;
}

static EVP_PKEY *load_private(const char *path)
{
    BIO *b = BIO_new_file(path, "r");
    assert_non_null(b);
    EVP_PKEY *pk = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
    BIO_free(b);
    assert_non_null(pk);
    return pk;
}

/* A self-signed certificate for the key in keyfile, written to NAME.crt. */
static void write_cert(const char *keyfile, const char *name)
{
    EVP_PKEY *pk = load_private(keyfile);
    X509 *x = X509_new();
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_NAME *n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC,
                               (const unsigned char *)"localhost", -1, -1, 0);
    X509_set_issuer_name(x, n);
    X509_set_pubkey(x, pk);
    const EVP_MD *md = EVP_PKEY_is_a(pk, "ED25519") ? NULL : EVP_sha256();
    assert_true(X509_sign(x, pk, md) > 0);
    char f[1100];
    snprintf(f, sizeof f, "%s.crt", name);
    FILE *out = fopen(path_in(f), "w");
    assert_non_null(out);
    PEM_write_X509(out, x);
    fclose(out);
    X509_free(x);
    EVP_PKEY_free(pk);
}

/* NAME.ref for the certificate NAME.crt, naming `port` (and a fallback
 * key when given); with bundle, NAME.pem holds the certificate first. */
static void write_ref(const char *name, uint16_t port, const char *fallback,
                      int bundle)
{
    char f[1100], server[32];
    snprintf(f, sizeof f, "%s.crt", name);
    EVP_PKEY *pub = tp_load_pub(path_in(f));
    snprintf(server, sizeof server, "127.0.0.1:%u", port);
    kl_keyref r;
    memset(&r, 0, sizeof r);
    r.servers[0] = server;
    r.nservers = 1;
    r.cert_file = (char *)tp_path("client.crt");
    r.key_file = (char *)tp_path("client.key");
    r.ca_file = (char *)tp_path("ca.crt");
    r.server_name = "localhost";
    r.timeout_ms = 1500;
    r.fallback_key = (char *)fallback;
    assert_int_equal(kl_keyref_set_pubkey(&r, pub), KL_OK);
    snprintf(f, sizeof f, "%s.%s", name, bundle ? "pem" : "ref");
    BIO *out = BIO_new_file(path_in(f), "w");
    assert_non_null(out);
    if (bundle) {
        char c[1100];
        snprintf(c, sizeof c, "%s.crt", name);
        size_t len;
        char *pem = tu_read_file(path_in(c), &len);
        BIO_write(out, pem, (int)len);
        free(pem);
    }
    assert_int_equal(kl_keyref_write_pem(out, &r), KL_OK);
    BIO_free(out);
    free(r.spki);
    EVP_PKEY_free(pub);
}

/* PEM_read_bio_PrivateKey in our library context. */
static EVP_PKEY *read_key(const char *path)
{
    BIO *b = BIO_new_file(path, "r");
    assert_non_null(b);
    EVP_PKEY *pk = PEM_read_bio_PrivateKey_ex(b, NULL, NULL, NULL, lib, NULL);
    BIO_free(b);
    return pk;
}

__attribute__((unused)) static const char *provider_of(const EVP_PKEY *pk)
{
    return OSSL_PROVIDER_get0_name(EVP_PKEY_get0_provider(pk));
}

/* Every error on the queue as one string (malloc'd), queue cleared. */
__attribute__((unused)) static char *errors_text(void)
{
    BIO *m = BIO_new(BIO_s_mem());
    ERR_print_errors(m);
    char *p;
    long n = BIO_get_mem_data(m, &p);
    char *s = malloc((size_t)n + 1);
    memcpy(s, p, (size_t)n);
    s[n] = '\0';
    BIO_free(m);
    return s;
}

/* The keylessd with the test keys (and any generated into dir). */
__attribute__((unused)) static void start_keylessd(void)
{
    td_opts o = {.name = "provider-keylessd", .key_dirs = dir};
    td_start(&kd, &o);
}

/* A port on which nothing listens. */
__attribute__((unused)) static uint16_t dead_port(void)
{
    return 9; /* discard: not served here */
}

#endif
