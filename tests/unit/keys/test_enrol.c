/* SPDX-License-Identifier: Apache-2.0 */
/* keys/enrol.h: the P-384 key, the CSR (CN and SAN = hostname, SHA-384,
 * self-signature valid), hostnames refused, the key PEM, the atomic
 * writer (mode exact despite the umask, never replaces with NO_REPLACE,
 * no temporary file left on failure) and backups. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "keys/enrol.h"
#include "pki.h"
#include "testutil.h"

static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static void test_key_and_csr(void **state)
{
    (void)state;
    EVP_PKEY *k = kl_enrol_new_key();
    assert_non_null(k);
    char group[32];
    size_t gl;
    assert_int_equal(EVP_PKEY_get_group_name(k, group, sizeof group, &gl), 1);
    assert_string_equal(group, "secp384r1");

    char *pem = NULL;
    assert_int_equal(kl_enrol_make_csr(k, "ks.example.com", &pem), KL_OK);
    BIO *b = BIO_new_mem_buf(pem, -1);
    X509_REQ *req = PEM_read_bio_X509_REQ(b, NULL, NULL, NULL);
    BIO_free(b);
    assert_non_null(req);
    EVP_PKEY *pub = X509_REQ_get_pubkey(req);
    assert_int_equal(EVP_PKEY_eq(pub, k), 1);
    assert_int_equal(X509_REQ_verify(req, pub), 1);
    assert_int_equal(X509_REQ_get_signature_nid(req), NID_ecdsa_with_SHA384);
    char cn[128];
    X509_NAME_get_text_by_NID(X509_REQ_get_subject_name(req), NID_commonName,
                              cn, sizeof cn);
    assert_string_equal(cn, "ks.example.com");
    /* exactly one subject entry: no O, C, ... the API would reject */
    assert_int_equal(X509_NAME_entry_count(X509_REQ_get_subject_name(req)), 1);
    EVP_PKEY_free(pub);
    X509_REQ_free(req);
    free(pem);

    /* wildcard is a DNS name; these are not */
    assert_int_equal(kl_enrol_make_csr(k, "*.example.com", &pem), KL_OK);
    free(pem);
    const char *bad[] = {"",     "a b",   "x\ny",         ".lead", "trail.",
                         "a*.b", "ab/cd", "name\"quoted", NULL};
    for (int i = 0; bad[i]; i++) {
        assert_int_equal(kl_enrol_make_csr(k, bad[i], &pem), KL_E_BAD_VALUE);
        assert_null(pem);
    }
    char long_name[80];
    memset(long_name, 'a', 65);
    long_name[65] = '\0';
    assert_int_equal(kl_enrol_make_csr(k, long_name, &pem), KL_E_BAD_VALUE);
    assert_int_equal(kl_enrol_make_csr(k, NULL, &pem), KL_E_BAD_VALUE);
    assert_int_equal(kl_enrol_make_csr(NULL, "a", &pem), KL_E_BAD_VALUE);

    size_t len;
    assert_int_equal(kl_enrol_key_pem(k, &pem, &len), KL_OK);
    assert_int_equal(strncmp(pem, "-----BEGIN PRIVATE KEY-----\n", 28), 0);
    assert_int_equal(strlen(pem), len);
    kl_enrol_free_secret(pem, len);
    kl_enrol_free_secret(NULL, 0);
    EVP_PKEY_free(k);
}

static void test_files(void **state)
{
    (void)state;
    char *dir = tp_tempdir("enrol");
    char path[1200], err[512];
    snprintf(path, sizeof path, "%s/key.pem", dir);
    mode_t old = umask(0077);
    assert_int_equal(kl_enrol_write_file(path, "one", 3, 0644,
                                         KL_ENROL_NO_REPLACE, err, sizeof err),
                     KL_OK);
    umask(old);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0644); /* exact despite the umask */

    /* NO_REPLACE never overwrites, and leaves no temporary file */
    assert_int_equal(kl_enrol_write_file(path, "two", 3, 0600,
                                         KL_ENROL_NO_REPLACE, err, sizeof err),
                     KL_E_IO);
    assert_non_null(strstr(err, "exists already"));
    size_t len;
    char *text = tu_read_file(path, &len);
    assert_string_equal(text, "one");
    free(text);
    assert_int_equal(entries(dir), 1);

    /* replacing takes the new mode */
    assert_int_equal(
        kl_enrol_write_file(path, "three", 5, 0600, 0, err, sizeof err), KL_OK);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    text = tu_read_file(path, &len);
    assert_string_equal(text, "three");
    free(text);
    assert_int_equal(entries(dir), 1);

    /* a directory that does not exist */
    char missing[1300];
    snprintf(missing, sizeof missing, "%s/nodir/key.pem", dir);
    assert_int_equal(
        kl_enrol_write_file(missing, "x", 1, 0600, 0, err, sizeof err),
        KL_E_IO);
    assert_non_null(strstr(err, "cannot create a file in its directory"));

    /* backups: a hard link, same mode, a numbered name the second time */
    char *bak1 = NULL, *bak2 = NULL;
    assert_int_equal(kl_enrol_backup(path, 1700000000, &bak1, err, sizeof err),
                     KL_OK);
    assert_int_equal(kl_enrol_backup(path, 1700000000, &bak2, err, sizeof err),
                     KL_OK);
    assert_non_null(strstr(bak1, "key.pem.20231114T221320Z.bak"));
    assert_non_null(strstr(bak2, "key.pem.20231114T221320Z.1.bak"));
    assert_int_equal(stat(bak1, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    free(bak1);
    free(bak2);
    char none[1300];
    snprintf(none, sizeof none, "%s/none.pem", dir);
    assert_int_equal(kl_enrol_backup(none, 0, &bak1, err, sizeof err), KL_OK);
    assert_null(bak1);
    tp_rmtree(dir);
}

static void test_load_and_match(void **state)
{
    (void)state;
    char err[512];
    EVP_PKEY *k = kl_enrol_load_key(tp_path("server.key"), err, sizeof err);
    assert_non_null(k);
    size_t len;
    char *cert = tu_read_file(tp_path("server.crt"), &len);
    assert_int_equal(kl_enrol_cert_matches(cert, len, k, err, sizeof err),
                     KL_OK);
    EVP_PKEY *other = kl_enrol_new_key();
    assert_int_equal(kl_enrol_cert_matches(cert, len, other, err, sizeof err),
                     KL_E_BAD_VALUE);
    assert_non_null(strstr(err, "not the one of the key keylessd generated"));
    assert_int_equal(
        kl_enrol_cert_matches("garbage", 7, other, err, sizeof err),
        KL_E_BAD_VALUE);
    assert_non_null(strstr(err, "no PEM certificate"));
    free(cert);
    EVP_PKEY_free(other);
    EVP_PKEY_free(k);

    assert_null(kl_enrol_load_key(tp_path("server.crt"), err, sizeof err));
    assert_non_null(strstr(err, "holds no usable private key"));
    assert_null(kl_enrol_load_key("/nonexistent/k.pem", err, sizeof err));
    assert_non_null(strstr(err, "cannot read: No such file"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_and_csr),
        cmocka_unit_test(test_files),
        cmocka_unit_test(test_load_and_match),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
