/* SPDX-License-Identifier: Apache-2.0 */
/* Classifying the contents of certificate and key files (certscan.h). The
 * bytes of private key blocks are wiped once looked at. */
#include "tls/certscan.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>

#define MAX_FILE (1u << 20)

static unsigned char *slurp(const char *path, size_t *len, int *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *err = errno;
        return NULL;
    }
    unsigned char *buf = OPENSSL_malloc(MAX_FILE + 1);
    size_t n = buf ? fread(buf, 1, MAX_FILE + 1, f) : 0;
    bool bad = ferror(f) || n > MAX_FILE;
    fclose(f);
    if (!buf || bad) {
        OPENSSL_clear_free(buf, MAX_FILE + 1);
        *err = buf ? (n > MAX_FILE ? EFBIG : EIO) : ENOMEM;
        return NULL;
    }
    *len = n;
    return buf;
}

static bool label_is_key(const char *name)
{
    size_t n = strlen(name);
    return n >= 11 && strcmp(name + n - 11, "PRIVATE KEY") == 0;
}

static void add_cert(kl_scan *s, X509 *x)
{
    if (!x)
        return;
    if (s->ncerts < KL_SCAN_MAX_CERTS)
        s->certs[s->ncerts++] = x;
    else {
        s->more_certs++;
        X509_free(x);
    }
}

static void scan_pem(kl_scan *s, const unsigned char *buf, size_t len)
{
    BIO *b = BIO_new_mem_buf(buf, (int)len);
    if (!b)
        return;
    for (;;) {
        char *name = NULL, *header = NULL;
        unsigned char *data = NULL;
        long dlen = 0;
        if (PEM_read_bio(b, &name, &header, &data, &dlen) != 1)
            break;
        s->pem = true;
        if (strcmp(name, "CERTIFICATE") == 0 ||
            strcmp(name, "X509 CERTIFICATE") == 0 ||
            strcmp(name, "TRUSTED CERTIFICATE") == 0) {
            const unsigned char *p = data;
            add_cert(s, d2i_X509(NULL, &p, dlen));
        } else if (label_is_key(name)) {
            s->keys++;
            if (strstr(name, "ENCRYPTED") || strstr(header, "ENCRYPTED"))
                s->encrypted_keys++;
        } else if (strstr(name, "CERTIFICATE REQUEST")) {
            s->csrs++;
        } else if (strstr(name, "PUBLIC KEY")) {
            s->pubkeys++;
        } else {
            s->other++;
        }
        OPENSSL_free(name);
        OPENSSL_free(header);
        OPENSSL_clear_free(data, (size_t)dlen);
    }
    BIO_free(b);
    ERR_clear_error(); /* the loop ends on "no start line" */
}

void kl_scan_file(const char *path, kl_scan *s)
{
    memset(s, 0, sizeof *s);
    size_t len = 0;
    unsigned char *buf = slurp(path, &len, &s->open_errno);
    if (!buf)
        return;
    scan_pem(s, buf, len);
    if (!s->pem && len > 0) {
        const unsigned char *p = buf;
        X509 *x = d2i_X509(NULL, &p, (long)len);
        if (x && p == buf + len) {
            s->der_cert = true;
            add_cert(s, x);
        } else {
            X509_free(x);
            p = buf;
            EVP_PKEY *k = d2i_AutoPrivateKey(NULL, &p, (long)len);
            s->der_key = k != NULL;
            EVP_PKEY_free(k);
        }
        ERR_clear_error();
    }
    OPENSSL_clear_free(buf, MAX_FILE + 1);
}

void kl_scan_free(kl_scan *s)
{
    for (size_t i = 0; i < s->ncerts; i++)
        X509_free(s->certs[i]);
    s->ncerts = 0;
}

bool kl_scan_time(const ASN1_TIME *t, char *out, size_t cap,
                  long long *unix_out)
{
    struct tm tm;
    if (!t || ASN1_TIME_to_tm(t, &tm) != 1) {
        snprintf(out, cap, "(unreadable time)");
        return false;
    }
    strftime(out, cap, "%Y-%m-%d %H:%M:%S UTC", &tm);
    *unix_out = (long long)timegm(&tm);
    return true;
}

void kl_scan_subject(X509 *x, char *out, size_t cap)
{
    out[0] = 0;
    BIO *b = BIO_new(BIO_s_mem());
    if (!b)
        return;
    X509_NAME_print_ex(b, X509_get_subject_name(x), 0,
                       XN_FLAG_ONELINE & ~ASN1_STRFLGS_ESC_MSB);
    char *p;
    long n = BIO_get_mem_data(b, &p);
    snprintf(out, cap, "%.*s", (int)(n > 0 ? n : 0), p);
    BIO_free(b);
}
