/* SPDX-License-Identifier: Apache-2.0 */
/* The test PKI and test keys: see pki.h. */
#include "pki.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include "client/verify.h"
#include "daemon.h"
#include "keys/keystore.h"
#include "testutil.h"

static char *rotating(void)
{
    static char bufs[64][1024];
    static unsigned next;
    return bufs[next++ % 64];
}

static void mkdir_p(const char *path, mode_t mode)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            (void)mkdir(tmp, 0755);
            *p = '/';
        }
    }
    if (mkdir(tmp, mode) != 0 && errno != EEXIST)
        fail_msg("mkdir %s: %s", tmp, strerror(errno));
}

const char *tp_dir(void)
{
    static char dir[1024];
    if (dir[0])
        return dir;
    char lock[1100], stamp[1100], script[1100];
    snprintf(dir, sizeof dir, "%s/test-pki", tu_bin_dir());
    snprintf(lock, sizeof lock, "%s/test-pki.lock", tu_bin_dir());
    snprintf(stamp, sizeof stamp, "%s/.complete", dir);
    snprintf(script, sizeof script, "%s/scripts/dev-pki.sh", tu_src_dir());

    int fd = open(lock, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        fail_msg("cannot open %s: %s", lock, strerror(errno));
    /* Test programs run in parallel: one creates, the others wait. */
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR)
        ;
    if (access(stamp, F_OK) != 0) {
        const char *argv[] = {"bash", script, "--test-extras", dir, NULL};
        char *out = NULL;
        int st = td_run(argv, &out, 120000);
        if (st != 0) {
            fprintf(stderr, "%s", out ? out : "");
            free(out);
            close(fd);
            dir[0] = 0;
            fail_msg("dev-pki.sh failed with status %d", st);
        }
        free(out);
        FILE *f = fopen(stamp, "w");
        if (f)
            fclose(f);
    }
    close(fd); /* releases the lock */
    return dir;
}

const char *tp_path(const char *rel)
{
    char *b = rotating();
    snprintf(b, 1024, "%s/%s", tp_dir(), rel);
    return b;
}

char *tp_tempdir(const char *tag)
{
    char base[1024];
    snprintf(base, sizeof base, "%s/test-tmp", tu_bin_dir());
    mkdir_p(base, 0755);
    char *path = malloc(1100);
    assert_non_null(path);
    snprintf(path, 1100, "%s/%s.XXXXXX", base, tag);
    if (!mkdtemp(path))
        fail_msg("mkdtemp %s: %s", path, strerror(errno));
    chmod(path, 0700);
    return path;
}

void tp_rmtree(char *dir)
{
    if (!dir)
        return;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char p[2048];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            struct stat st;
            if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
                char *sub = strdup(p);
                tp_rmtree(sub);
            } else {
                unlink(p);
            }
        }
        closedir(d);
    }
    rmdir(dir);
    free(dir);
}

void tp_copy_key(const char *dir, const char *src)
{
    size_t len;
    char *data = tu_read_file(src, &len);
    const char *base = strrchr(src, '/');
    base = base ? base + 1 : src;
    char dst[2048];
    snprintf(dst, sizeof dst, "%s/%s", dir, base);
    int fd = open(dst, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0)
        fail_msg("cannot create %s: %s", dst, strerror(errno));
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
    free(data);
}

EVP_PKEY *tp_genkey(const char *dir, const char *name, const char *alg,
                    const char *group, unsigned bits)
{
    EVP_PKEY *pk = NULL;
    if (!strcmp(alg, "EC"))
        pk = EVP_PKEY_Q_keygen(NULL, NULL, "EC", group);
    else if (!strcmp(alg, "RSA"))
        pk = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)bits);
    else
        pk = EVP_PKEY_Q_keygen(NULL, NULL, alg);
    if (!pk)
        fail_msg("cannot generate a %s key", alg);
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0)
        fail_msg("cannot create %s: %s", path, strerror(errno));
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL), 1);
    fclose(f);
    return pk;
}

EVP_PKEY *tp_load_pub(const char *path)
{
    EVP_PKEY *pk = NULL;
    char err[256];
    if (kl_pubkey_load(path, &pk, err, sizeof err) != KL_OK)
        fail_msg("%s", err);
    return pk;
}

void tp_ski(EVP_PKEY *pk, uint8_t ski[20])
{
    assert_int_equal(kl_ski_from_pkey(pk, ski), KL_OK);
}

const char *tp_ski_hex(const uint8_t ski[20])
{
    char *b = rotating();
    kl_ski_hex(ski, b);
    return b;
}

SSL_CTX *tp_client_ssl_ctx(const char *name)
{
    char crt[128], key[128];
    snprintf(crt, sizeof crt, "%s.crt", name ? name : "client");
    snprintf(key, sizeof key, "%s.key", name ? name : "client");
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(ctx);
    assert_int_equal(SSL_CTX_use_certificate_chain_file(ctx, tp_path(crt)), 1);
    assert_int_equal(
        SSL_CTX_use_PrivateKey_file(ctx, tp_path(key), SSL_FILETYPE_PEM), 1);
    assert_int_equal(
        SSL_CTX_load_verify_locations(ctx, tp_path("ca.crt"), NULL), 1);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    return ctx;
}

SSL_CTX *tp_client_resume_ctx(const char *name, int version)
{
    SSL_CTX *ctx = tp_client_ssl_ctx(name);
    SSL_CTX_set_min_proto_version(ctx, version);
    SSL_CTX_set_max_proto_version(ctx, version);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT |
                                            SSL_SESS_CACHE_NO_INTERNAL);
    return ctx;
}

void tp_issue_server_cert(const char *dir, const char *key, const char *subj,
                          int days, const char *cert)
{
    char ext[1100];
    snprintf(ext, sizeof ext, "%s/ext.cnf", dir);
    FILE *f = fopen(ext, "w");
    assert_non_null(f);
    fputs("basicConstraints=critical,CA:FALSE\n"
          "keyUsage=critical,digitalSignature\n"
          "extendedKeyUsage=serverAuth\n"
          "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
          f);
    assert_int_equal(fclose(f), 0);
    tu_sh("openssl req -new -key %s -subj '%s' 2>/dev/null | "
          "openssl x509 -req -CA %s -CAkey %s -days %d -extfile %s -out %s "
          "2>/dev/null",
          key, subj, tp_path("ca.crt"), tp_path("ca.key"), days, ext, cert);
}

static X509 *read_cert(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s: %s", path, strerror(errno));
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    if (!x)
        fail_msg("%s holds no certificate", path);
    return x;
}

static void add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX v3;
    X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
    X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
    assert_non_null(e);
    assert_int_equal(X509_add_ext(x, e, -1), 1);
    X509_EXTENSION_free(e);
}

/* The test PKI's CA `ca` ("ca" or "other-ca"): its certificate and key. */
static void load_ca(const char *ca, X509 **cert, EVP_PKEY **key)
{
    char rel[128];
    snprintf(rel, sizeof rel, "%s.crt", ca);
    *cert = read_cert(tp_path(rel));
    snprintf(rel, sizeof rel, "%s.key", ca);
    FILE *f = fopen(tp_path(rel), "r");
    assert_non_null(f);
    *key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(*key);
}

/* dir/name.crt from x, then x freed. */
static void write_cert(const char *dir, const char *name, X509 *x)
{
    char path[2048];
    snprintf(path, sizeof path, "%s/%s.crt", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_X509(f, x), 1);
    assert_int_equal(fclose(f), 0);
    X509_free(x);
}

void tp_issue_client_raw(const char *dir, const char *name, const char *ca,
                         const void *cn, size_t cnlen, const void *dns,
                         size_t dnslen)
{
    char path[1100];
    X509 *cacert;
    EVP_PKEY *cakey;
    load_ca(ca, &cacert, &cakey);

    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    assert_non_null(key);
    assert_non_null(x);
    assert_int_equal(X509_set_version(x, X509_VERSION_3), 1);
    unsigned char serial[8];
    assert_int_equal(RAND_bytes(serial, sizeof serial), 1);
    serial[0] &= 0x7f;
    BIGNUM *bn = BN_bin2bn(serial, sizeof serial, NULL);
    assert_non_null(BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)));
    BN_free(bn);
    assert_non_null(X509_gmtime_adj(X509_getm_notBefore(x), -3600));
    assert_non_null(X509_gmtime_adj(X509_getm_notAfter(x), 30L * 86400));
    assert_int_equal(X509_set_pubkey(x, key), 1);
    X509_NAME *subj = X509_get_subject_name(x);
    assert_int_equal(X509_NAME_add_entry_by_txt(
                         subj, "O", MBSTRING_ASC,
                         (const unsigned char *)"keylessd test", -1, -1, 0),
                     1);
    /* a plain type, not MBSTRING_*: the bytes are stored unchecked */
    assert_int_equal(X509_NAME_add_entry_by_NID(subj, NID_commonName,
                                                V_ASN1_UTF8STRING, cn,
                                                (int)cnlen, -1, 0),
                     1);
    assert_int_equal(X509_set_issuer_name(x, X509_get_subject_name(cacert)), 1);
    add_ext(x, cacert, NID_basic_constraints, "critical,CA:FALSE");
    add_ext(x, cacert, NID_key_usage, "critical,digitalSignature");
    add_ext(x, cacert, NID_ext_key_usage, "clientAuth");
    if (dns) {
        GENERAL_NAMES *gens = GENERAL_NAMES_new();
        GENERAL_NAME *g = GENERAL_NAME_new();
        ASN1_IA5STRING *s = ASN1_IA5STRING_new();
        assert_true(gens && g && s);
        assert_int_equal(ASN1_STRING_set(s, dns, (int)dnslen), 1);
        GENERAL_NAME_set0_value(g, GEN_DNS, s);
        assert_true(sk_GENERAL_NAME_push(gens, g) > 0);
        assert_int_equal(X509_add1_ext_i2d(x, NID_subject_alt_name, gens, 0, 0),
                         1);
        GENERAL_NAMES_free(gens);
    }
    assert_true(X509_sign(x, cakey, EVP_sha256()) > 0);

    snprintf(path, sizeof path, "%s/%s.key", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    assert_int_equal(PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL),
                     1);
    assert_int_equal(fclose(f), 0);
    write_cert(dir, name, x);
    EVP_PKEY_free(key);
    X509_free(cacert);
    EVP_PKEY_free(cakey);
}

void tp_issue_client_cert(const char *dir, const char *name, const char *cn,
                          const char *ca, long seconds)
{
    X509 *issuer;
    EVP_PKEY *ca_key;
    load_ca(ca, &issuer, &ca_key);

    char keyname[256];
    snprintf(keyname, sizeof keyname, "%s.key", name);
    EVP_PKEY *pk = tp_genkey(dir, keyname, "EC", "P-256", 0);
    X509 *x = X509_new();
    assert_non_null(x);
    assert_int_equal(X509_set_version(x, 2), 1);
    /* a serial number of its own, from the clock */
    assert_int_equal(
        ASN1_INTEGER_set_int64(X509_get_serialNumber(x), (int64_t)time(NULL)),
        1);
    X509_NAME *subj = X509_get_subject_name(x);
    assert_int_equal(X509_NAME_add_entry_by_txt(subj, "CN", MBSTRING_UTF8,
                                                (const unsigned char *)cn, -1,
                                                -1, 0),
                     1);
    assert_int_equal(X509_set_issuer_name(x, X509_get_subject_name(issuer)), 1);
    assert_non_null(X509_gmtime_adj(X509_getm_notBefore(x), -3600));
    assert_non_null(X509_gmtime_adj(X509_getm_notAfter(x), seconds));
    assert_int_equal(X509_set_pubkey(x, pk), 1);
    add_ext(x, issuer, NID_basic_constraints, "critical,CA:FALSE");
    add_ext(x, issuer, NID_key_usage, "critical,digitalSignature");
    add_ext(x, issuer, NID_ext_key_usage, "clientAuth");
    add_ext(x, issuer, NID_subject_key_identifier, "hash");
    add_ext(x, issuer, NID_authority_key_identifier, "keyid");
    assert_true(X509_sign(x, ca_key, EVP_sha256()) > 0);

    write_cert(dir, name, x);
    EVP_PKEY_free(pk);
    EVP_PKEY_free(ca_key);
    X509_free(issuer);
}
