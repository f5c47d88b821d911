/* SPDX-License-Identifier: Apache-2.0 */
/* Key, CSR and file writing for activation (enrol.h). */
#include "keys/enrol.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

/* RFC 5280's upper bound for a commonName */
#define CN_MAX 64

EVP_PKEY *kl_enrol_new_key(void)
{
    EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-384");
    ERR_clear_error();
    return k;
}

/* A DNS name as the Origin CA accepts it: letters, digits, '-', '.', and a
 * leading "*." wildcard. Anything else would be refused by the API after
 * the key was made, or worse, end up in a certificate. */
static bool valid_hostname(const char *h)
{
    size_t n = strlen(h);
    if (n == 0 || n > CN_MAX || h[0] == '.' || h[n - 1] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '-' || c == '.' ||
                  (c == '*' && i == 0 && h[1] == '.');
        if (!ok)
            return false;
    }
    return true;
}

/* The subjectAltName extension with one dNSName. */
static X509_EXTENSION *san_ext(const char *hostname)
{
    GENERAL_NAMES *gens = GENERAL_NAMES_new();
    GENERAL_NAME *gn = GENERAL_NAME_new();
    ASN1_IA5STRING *ia5 = ASN1_IA5STRING_new();
    X509_EXTENSION *ext = NULL;
    if (!gens || !gn || !ia5 || !ASN1_STRING_set(ia5, hostname, -1))
        goto out;
    GENERAL_NAME_set0_value(gn, GEN_DNS, ia5);
    ia5 = NULL;
    if (!sk_GENERAL_NAME_push(gens, gn))
        goto out;
    gn = NULL;
    ext = X509V3_EXT_i2d(NID_subject_alt_name, 0, gens);
out:
    ASN1_IA5STRING_free(ia5);
    GENERAL_NAME_free(gn);
    GENERAL_NAMES_free(gens);
    return ext;
}

/* The contents of a memory BIO as a malloc'd NUL-terminated string. */
static char *bio_text(BIO *b, size_t *len)
{
    char *data;
    long n = BIO_get_mem_data(b, &data);
    if (n <= 0)
        return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s)
        return NULL;
    memcpy(s, data, (size_t)n);
    s[n] = '\0';
    if (len)
        *len = (size_t)n;
    return s;
}

kl_status kl_enrol_make_csr(EVP_PKEY *key, const char *hostname, char **pem)
{
    *pem = NULL;
    KL_ENSURE(key && hostname && valid_hostname(hostname), KL_E_BAD_VALUE);
    kl_status st = KL_E_INTERNAL;
    X509_REQ *req = X509_REQ_new();
    STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
    X509_EXTENSION *ext = san_ext(hostname);
    BIO *b = BIO_new(BIO_s_mem());
    if (!req || !exts || !ext || !b)
        goto out;
    X509_NAME *name = X509_REQ_get_subject_name(req);
    if (!X509_REQ_set_version(req, X509_REQ_VERSION_1) ||
        !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                    (const unsigned char *)hostname, -1, -1,
                                    0) ||
        !X509_REQ_set_pubkey(req, key) || !sk_X509_EXTENSION_push(exts, ext))
        goto out;
    ext = NULL;
    if (!X509_REQ_add_extensions(req, exts) ||
        X509_REQ_sign(req, key, EVP_sha384()) <= 0 ||
        !PEM_write_bio_X509_REQ(b, req))
        goto out;
    *pem = bio_text(b, NULL);
    st = *pem ? KL_OK : KL_E_NOMEM;
out:
    ERR_clear_error();
    BIO_free(b);
    X509_EXTENSION_free(ext);
    sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
    X509_REQ_free(req);
    return st;
}

kl_status kl_enrol_key_pem(EVP_PKEY *key, char **pem, size_t *len)
{
    *pem = NULL;
    *len = 0;
    /* secure memory BIO: cleared when freed */
    BIO *b = BIO_new(BIO_s_secmem());
    KL_ENSURE(b, KL_E_NOMEM);
    kl_status st = KL_E_INTERNAL;
    if (PEM_write_bio_PrivateKey(b, key, NULL, NULL, 0, NULL, NULL)) {
        *pem = bio_text(b, len);
        st = *pem ? KL_OK : KL_E_NOMEM;
    }
    ERR_clear_error();
    BIO_free(b);
    return st;
}

void kl_enrol_free_secret(char *p, size_t len)
{
    if (!p)
        return;
    OPENSSL_cleanse(p, len);
    free(p);
}

/* Never prompt on the terminal for a passphrase: an encrypted auth_key is
 * an error, not a question. */
static int no_passphrase(char *buf, int size, int rw, void *u)
{
    (void)buf;
    (void)size;
    (void)rw;
    (void)u;
    return -1;
}

EVP_PKEY *kl_enrol_load_key(const char *path, char *err, size_t errlen)
{
    BIO *b = BIO_new_file(path, "r");
    if (!b) {
        int e = errno;
        ERR_clear_error();
        kl_errf(err, errlen, "cannot read: %s", strerror(e ? e : EIO));
        return NULL;
    }
    EVP_PKEY *k = PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL);
    ERR_clear_error();
    BIO_free(b);
    if (!k)
        kl_errf(
            err, errlen,
            "holds no usable private key (an unencrypted PEM key is needed)");
    return k;
}

kl_status kl_enrol_cert_matches(const char *pem, size_t len, EVP_PKEY *key,
                                char *err, size_t errlen)
{
    if (len > INT_MAX)
        len = INT_MAX;
    BIO *b = BIO_new_mem_buf(pem, (int)len);
    KL_ENSURE(b, KL_E_NOMEM);
    X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
    BIO_free(b);
    ERR_clear_error();
    if (!x) {
        kl_errf(err, errlen, "it holds no PEM certificate");
        return KL_E_BAD_VALUE;
    }
    EVP_PKEY *pub = X509_get0_pubkey(x);
    bool same = pub && key && EVP_PKEY_eq(pub, key) == 1;
    ERR_clear_error();
    X509_free(x);
    if (!same) {
        kl_errf(err, errlen,
                "its public key is not the one of the key keylessd generated "
                "(the API returned a certificate for another key)");
        return KL_E_BAD_VALUE;
    }
    return KL_OK;
}

/* ---- files ---- */

/* The directory part of path ("." when it has none), malloc'd. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

static void sync_dir(const char *path)
{
    char *dir = dir_of(path);
    if (!dir)
        return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd); /* best effort: some file systems refuse */
        close(fd);
    }
    free(dir);
}

/* Creates "<dir>/.<base>.<pid>.<n>.tmp" with O_EXCL; the name in tmp. */
static int open_temp(const char *path, mode_t mode, char *tmp, size_t cap)
{
    char *dir = dir_of(path);
    if (!dir) {
        errno = ENOMEM;
        return -1;
    }
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int fd = -1;
    for (unsigned n = 0; n < 100 && fd < 0; n++) {
        if ((size_t)snprintf(tmp, cap, "%s/.%s.%ld.%u.tmp", dir, base,
                             (long)getpid(), n) >= cap) {
            errno = ENAMETOOLONG;
            break;
        }
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  mode);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    free(dir);
    return fd;
}

kl_status kl_enrol_write_file(const char *path, const void *data, size_t len,
                              mode_t mode, unsigned flags, char *err,
                              size_t errlen)
{
    char tmp[4200];
    int fd = open_temp(path, mode, tmp, sizeof tmp);
    if (fd < 0) {
        kl_errf(err, errlen, "%s: cannot create a file in its directory: %s",
                path, strerror(errno));
        return KL_E_IO;
    }
    /* the umask may only have narrowed the mode; make it exact */
    const char *what = "write";
    bool ok = fchmod(fd, mode) == 0;
    const uint8_t *p = data;
    for (size_t left = len; ok && left > 0;) {
        ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        ok = n > 0;
        if (ok) {
            p += n;
            left -= (size_t)n;
        }
    }
    if (ok && fsync(fd) != 0) {
        what = "fsync";
        ok = false;
    }
    int e = errno;
    if (close(fd) != 0 && ok) {
        e = errno;
        ok = false;
    }
    if (ok) {
        what = (flags & KL_ENROL_NO_REPLACE) ? "link" : "rename";
        ok = (flags & KL_ENROL_NO_REPLACE) ? link(tmp, path) == 0
                                           : rename(tmp, path) == 0;
        e = errno;
    }
    if (!ok || (flags & KL_ENROL_NO_REPLACE))
        unlink(tmp);
    if (!ok) {
        if (e == EEXIST)
            kl_errf(err, errlen,
                    "%s exists already; keylessd does not overwrite it", path);
        else
            kl_errf(err, errlen, "%s: cannot %s it: %s", path, what,
                    strerror(e ? e : EIO));
        return KL_E_IO;
    }
    sync_dir(path);
    return KL_OK;
}

kl_status kl_enrol_backup(const char *path, long long now, char **backup,
                          char *err, size_t errlen)
{
    if (backup)
        *backup = NULL;
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT)
            return KL_OK;
        kl_errf(err, errlen, "%s: cannot keep a copy: %s", path,
                strerror(errno));
        return KL_E_IO;
    }
    time_t t = (time_t)(now ? now : (long long)time(NULL));
    struct tm tm;
    char stamp[32];
    gmtime_r(&t, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    char name[4200];
    for (unsigned n = 0; n < 100; n++) {
        int w = n ? snprintf(name, sizeof name, "%s.%s.%u.bak", path, stamp, n)
                  : snprintf(name, sizeof name, "%s.%s.bak", path, stamp);
        if (w < 0 || (size_t)w >= sizeof name)
            break;
        if (link(path, name) == 0) {
            sync_dir(path);
            if (backup && !(*backup = strdup(name)))
                return KL_E_NOMEM;
            return KL_OK;
        }
        if (errno != EEXIST) {
            kl_errf(err, errlen, "%s: cannot keep a copy as %s: %s", path, name,
                    strerror(errno));
            return KL_E_IO;
        }
    }
    kl_errf(err, errlen, "%s: cannot find a free name for its backup", path);
    return KL_E_IO;
}
