/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers for the key store tests: temporary directories, key files in
 * every encoding, and a report collector. Header-only (static) because each
 * tests/unit/keys/test_*.c is its own program. */
#ifndef KL_TEST_KEYTEST_H
#define KL_TEST_KEYTEST_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

#include "testutil.h"

#include "keys/keystore.h"

/* ---- temporary directories ---------------------------------------------- */

static char *tk_tmpdir(void)
{
    char *d = strdup("/tmp/kl-keys-XXXXXX");
    assert_non_null(d);
    assert_non_null(mkdtemp(d));
    return d;
}

static int tk_rm_one(const char *p, const struct stat *st, int flag,
                     struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

static void tk_rmrf(char *dir)
{
    nftw(dir, tk_rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

/* Writes data to dir/name with the given mode; returns a static path. */
static const char *tk_write(const char *dir, const char *name, const void *data,
                            size_t len, mode_t mode)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (len)
        assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
    assert_int_equal(chmod(path, mode), 0);
    return path;
}

/* ---- encodings ---------------------------------------------------------- */

typedef enum tk_form {
    TK_PEM_PKCS8,
    TK_PEM_TRAD, /* PKCS#1 / SEC1 (PKCS#8 for Ed25519) */
    TK_DER_PKCS8,
    TK_DER_TRAD,
    TK_PEM_PKCS8_ENCRYPTED,
    TK_DER_PKCS8_ENCRYPTED,
    TK_PEM_TRAD_ENCRYPTED, /* legacy Proc-Type: 4,ENCRYPTED */
    TK_PEM_PUBKEY,
    TK_DER_PUBKEY,
    TK_PEM_RSA_PUBKEY, /* "RSA PUBLIC KEY" (PKCS#1) */
    TK_DER_RSA_PUBKEY,
} tk_form;

static uint8_t *tk_bio_take(BIO *b, size_t *len)
{
    char *p;
    long n = BIO_get_mem_data(b, &p);
    assert_true(n > 0);
    uint8_t *out = malloc((size_t)n);
    assert_non_null(out);
    memcpy(out, p, (size_t)n);
    *len = (size_t)n;
    BIO_free(b);
    return out;
}

static uint8_t *tk_encode(EVP_PKEY *k, tk_form form, size_t *len)
{
    BIO *b = BIO_new(BIO_s_mem());
    unsigned char pass[] = "secret-pass";
    unsigned char *der = NULL;
    int n = 0;
    assert_non_null(b);
    switch (form) {
    case TK_PEM_PKCS8:
        assert_true(PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL));
        break;
    case TK_PEM_TRAD:
        assert_true(PEM_write_bio_PrivateKey_traditional(b, k, NULL, NULL, 0,
                                                         NULL, NULL));
        break;
    case TK_DER_PKCS8:
        assert_true(i2d_PKCS8PrivateKey_bio(b, k, NULL, NULL, 0, NULL, NULL));
        break;
    case TK_DER_TRAD:
        n = i2d_PrivateKey(k, &der);
        assert_true(n > 0);
        BIO_write(b, der, n);
        break;
    case TK_PEM_PKCS8_ENCRYPTED:
        assert_true(PEM_write_bio_PKCS8PrivateKey(
            b, k, EVP_aes_256_cbc(), (char *)pass, 11, NULL, NULL));
        break;
    case TK_DER_PKCS8_ENCRYPTED:
        assert_true(i2d_PKCS8PrivateKey_bio(b, k, EVP_aes_256_cbc(),
                                            (char *)pass, 11, NULL, NULL));
        break;
    case TK_PEM_TRAD_ENCRYPTED:
        assert_true(PEM_write_bio_PrivateKey_traditional(
            b, k, EVP_aes_128_cbc(), pass, 11, NULL, NULL));
        break;
    case TK_PEM_PUBKEY: assert_true(PEM_write_bio_PUBKEY(b, k)); break;
    case TK_DER_PUBKEY: assert_true(i2d_PUBKEY_bio(b, k)); break;
    case TK_PEM_RSA_PUBKEY:
    case TK_DER_RSA_PUBKEY:
        n = i2d_PublicKey(k, &der); /* RSA: PKCS#1 RSAPublicKey */
        assert_true(n > 0);
        if (form == TK_DER_RSA_PUBKEY)
            BIO_write(b, der, n);
        else
            assert_true(PEM_write_bio(b, "RSA PUBLIC KEY", "", der, n));
        break;
    }
    OPENSSL_free(der);
    return tk_bio_take(b, len);
}

static const char *tk_write_key(const char *dir, const char *name, EVP_PKEY *k,
                                tk_form form)
{
    size_t len;
    uint8_t *p = tk_encode(k, form, &len);
    const char *path = tk_write(dir, name, p, len, 0600);
    free(p);
    return path;
}

/* ---- reports ------------------------------------------------------------ */

typedef struct tk_reports {
    int n;
    int level[64];
    char line[64][1024]; /* "path: msg" */
} tk_reports;

static void tk_report(void *arg, int level, const char *path, const char *msg)
{
    tk_reports *r = arg;
    if (r->n < 64) {
        r->level[r->n] = level;
        snprintf(r->line[r->n], sizeof r->line[0], "%s: %s", path, msg);
        r->n++;
    }
}

/* Index of the first report containing all of a and b (b may be NULL),
 * or -1. */
static __attribute__((unused)) int tk_find(const tk_reports *r, const char *a,
                                           const char *b)
{
    for (int i = 0; i < r->n; i++)
        if (strstr(r->line[i], a) && (!b || strstr(r->line[i], b)))
            return i;
    return -1;
}

static kl_keystore *tk_store(tk_reports *r, bool allow_group, bool check)
{
    memset(r, 0, sizeof *r);
    kl_keystore_opts o = {.allow_group_readable = allow_group,
                          .check_mode = check,
                          .report = tk_report,
                          .report_arg = r};
    kl_keystore *ks = kl_keystore_new(&o);
    assert_non_null(ks);
    return ks;
}

static void tk_first(void *arg, const kl_key *k)
{
    EVP_PKEY **out = arg;
    if (!*out) {
        *out = kl_key_pkey(k);
        assert_int_equal(EVP_PKEY_up_ref(*out), 1);
    }
}

/* A key from the vectors, decoded through the store; the caller frees it. */
static EVP_PKEY *tk_vector_pkey(const char *rel)
{
    tk_reports r;
    kl_keystore *ks = tk_store(&r, true, false);
    assert_int_equal(kl_keystore_add_file(ks, tu_vector_path(rel)), KL_OK);
    EVP_PKEY *k = NULL;
    kl_keystore_foreach(ks, tk_first, &k);
    assert_non_null(k);
    kl_keystore_free(ks);
    return k;
}

/* Loads data as a key file and expects KL_E_KEY with a report naming the
 * path and containing why. The same store is used for everything, so the
 * decoder contexts also survive failures. */
static __attribute__((unused)) void
tk_expect_refused(kl_keystore *ks, tk_reports *r, const char *dir,
                  const void *data, size_t len, const char *why)
{
    r->n = 0;
    const char *p = tk_write(dir, "bad.key", data, len, 0600);
    size_t before = kl_keystore_count(ks);
    kl_status s = kl_keystore_add_file(ks, p);
    if (s != KL_E_KEY)
        fail_msg("expected refusal (%s), got %d", why, s);
    assert_int_equal(kl_keystore_count(ks), before);
    if (r->n != 1 || tk_find(r, p, why) < 0)
        fail_msg("expected a report with \"%s\", got %d: %s", why, r->n,
                 r->n ? r->line[0] : "");
    assert_int_equal(r->level[0], 3 /* error */);
}

static __attribute__((unused)) void
tk_expect_form_refused(kl_keystore *ks, tk_reports *r, const char *dir,
                       EVP_PKEY *k, tk_form f, const char *why)
{
    size_t n;
    uint8_t *p = tk_encode(k, f, &n);
    tk_expect_refused(ks, r, dir, p, n, why);
    free(p);
}

#endif
