/* SPDX-License-Identifier: Apache-2.0 */
/* Explaining certificate setup errors (certcheck.h). Every message names
 * the option and the file, says what was found and what to do. */
#include "tls/certcheck.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "core/log.h"
#include "tls/certscan.h"

#define DAY 86400LL
#define MAX_DEPTH 32

typedef struct ctx {
    const kl_certcheck *c;
    int errors;
} ctx;

__attribute__((format(printf, 3, 4))) static void say(ctx *x, int level,
                                                      const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (level >= KL_LOG_ERROR)
        x->errors++;
    if (x->c->report)
        x->c->report(x->c->arg, level, msg);
}

/* What a file holds instead of what was expected, in words. */
static const char *holds(const kl_scan *s)
{
    if (s->keys || s->der_key)
        return "a private key";
    if (s->csrs)
        return "a certificate signing request (CSR)";
    if (s->pubkeys)
        return "a public key";
    if (s->other)
        return "PEM data of another kind";
    return "nothing in PEM form";
}

/* ---- auth_cert ---- */

static void check_validity(ctx *x, X509 *leaf)
{
    const kl_certcheck *c = x->c;
    long long now = c->now ? c->now : (long long)time(NULL);
    int warn_days = c->warn_days > 0 ? c->warn_days : 30;
    char nb[64], na[64];
    long long tb = 0, ta = 0;
    bool okb = kl_scan_time(X509_get0_notBefore(leaf), nb, sizeof nb, &tb);
    bool oka = kl_scan_time(X509_get0_notAfter(leaf), na, sizeof na, &ta);
    if (okb && now < tb)
        say(x, KL_LOG_ERROR,
            "auth_cert %s is not valid yet: valid from %s. Check this "
            "machine's clock, or use a certificate that is valid now",
            c->cert_file, nb);
    if (oka && now > ta)
        say(x, KL_LOG_ERROR,
            "auth_cert %s expired on %s. Put a renewed certificate (and its "
            "key) in place, then reload (SIGHUP)",
            c->cert_file, na);
    else if (oka && now + warn_days * DAY > ta)
        say(x, KL_LOG_WARN,
            "auth_cert %s expires on %s, in %lld day(s): renew it soon (a "
            "reload with SIGHUP picks the new one up)",
            c->cert_file, na, (ta - now + DAY - 1) / DAY);
}

static void check_usage(ctx *x, X509 *leaf)
{
    /* No extendedKeyUsage means any usage; one without serverAuth means
     * TLS clients (Cloudflare's edge) refuse it as a server certificate. */
    uint32_t xku = X509_get_extended_key_usage(leaf);
    if (xku == UINT32_MAX || (xku & XKU_SSL_SERVER))
        return;
    say(x, KL_LOG_ERROR,
        "auth_cert %s lacks the serverAuth extended key usage%s, so clients "
        "will refuse it. It must be the key server's own certificate, "
        "issued for its hostname with extendedKeyUsage serverAuth",
        x->c->cert_file,
        (xku & XKU_SSL_CLIENT) ? " (it is a client certificate: clientAuth)"
                               : "");
}

/* The same rule as for the keys served (src/keys/load.c, docs/OPERATIONS.md
 * "Key files"): a private key that group or others can read is refused.
 * 1 when refused. */
static int key_too_open(ctx *x)
{
    const kl_certcheck *c = x->c;
    struct stat st;
    if (c->allow_group_readable || stat(c->key_file, &st) != 0 ||
        !(st.st_mode & (S_IRGRP | S_IROTH)))
        return 0;
    say(x, KL_LOG_ERROR,
        "auth_key %s is readable by %s (mode %03o): run chmod 600 on it, or "
        "allow group-readable key files in the configuration",
        c->key_file, (st.st_mode & S_IROTH) ? "others" : "its group",
        (unsigned)(st.st_mode & 0777));
    return 1;
}

static EVP_PKEY *load_key(ctx *x)
{
    const kl_certcheck *c = x->c;
    kl_scan s;
    kl_scan_file(c->key_file, &s);
    EVP_PKEY *pkey = NULL;
    if (s.open_errno) {
        say(x, KL_LOG_ERROR,
            "auth_key %s: cannot read: %s. Set auth_key to the private key "
            "of auth_cert %s",
            c->key_file, strerror(s.open_errno), c->cert_file);
    } else if (s.keys == 0 && (s.ncerts > 0)) {
        say(x, KL_LOG_ERROR,
            "auth_key %s holds a certificate, not a private key. auth_key is "
            "the private key of auth_cert %s: are the two swapped?",
            c->key_file, c->cert_file);
    } else if (s.keys == 0 && !s.der_key) {
        say(x, KL_LOG_ERROR,
            "auth_key %s holds %s, not a private key: set auth_key to the "
            "private key of auth_cert %s (PEM)",
            c->key_file, holds(&s), c->cert_file);
    } else if (key_too_open(x)) {
        /* reported; the pair is not checked with a refused key */
    } else if (s.encrypted_keys) {
        say(x, KL_LOG_ERROR,
            "auth_key %s is encrypted; keylessd reads unencrypted PEM keys "
            "(decrypt it with `openssl pkey -in %s -out NEW`, mode 0600)",
            c->key_file, c->key_file);
    } else if (s.der_key) {
        say(x, KL_LOG_ERROR,
            "auth_key %s is in DER form; convert it to PEM with `openssl "
            "pkey -inform DER -in %s -out NEW`",
            c->key_file, c->key_file);
    } else {
        FILE *f = fopen(c->key_file, "r");
        if (f) {
            pkey = PEM_read_PrivateKey(f, NULL, NULL, NULL);
            fclose(f);
        }
        ERR_clear_error();
        if (!pkey)
            say(x, KL_LOG_ERROR,
                "auth_key %s: the private key cannot be decoded (corrupt or "
                "unsupported)",
                c->key_file);
    }
    kl_scan_free(&s);
    return pkey;
}

static void check_pair(ctx *x, kl_scan *cert, EVP_PKEY *pkey)
{
    const kl_certcheck *c = x->c;
    X509 *leaf = cert->certs[0];
    if (X509_check_private_key(leaf, pkey) == 1) {
        ERR_clear_error();
        return;
    }
    ERR_clear_error();
    for (size_t i = 1; i < cert->ncerts; i++) {
        if (X509_check_private_key(cert->certs[i], pkey) == 1) {
            ERR_clear_error();
            say(x, KL_LOG_ERROR,
                "auth_cert %s: auth_key %s belongs to certificate #%zu of "
                "the file, not the first. Put the key server's own "
                "certificate first, then the CAs that issued it",
                c->cert_file, c->key_file, i + 1);
            return;
        }
        ERR_clear_error();
    }
    char subj[256];
    kl_scan_subject(leaf, subj, sizeof subj);
    say(x, KL_LOG_ERROR,
        "auth_cert %s (%s) does not match auth_key %s: the certificate was "
        "issued for another key. Use the key the certificate was issued for "
        "(compare `openssl x509 -noout -pubkey -in CERT` with `openssl pkey "
        "-pubout -in KEY`)",
        c->cert_file, subj, c->key_file);
}

static void check_identity(ctx *x)
{
    const kl_certcheck *c = x->c;
    kl_scan s;
    kl_scan_file(c->cert_file, &s);
    if (s.open_errno) {
        say(x, KL_LOG_ERROR,
            "auth_cert %s: cannot read: %s. Put the key server's own "
            "certificate (PEM) there, or set auth_cert to its path",
            c->cert_file, strerror(s.open_errno));
    } else if (s.ncerts == 0 && s.keys) {
        say(x, KL_LOG_ERROR,
            "auth_cert %s holds a private key, not a certificate. auth_cert "
            "is the key server's certificate and auth_key %s its private "
            "key: are the two swapped?",
            c->cert_file, c->key_file);
    } else if (s.ncerts == 0 && s.csrs) {
        say(x, KL_LOG_ERROR,
            "auth_cert %s holds a certificate signing request (CSR), not a "
            "certificate: have it signed and put the signed certificate "
            "there",
            c->cert_file);
    } else if (s.ncerts == 0) {
        say(x, KL_LOG_ERROR,
            "auth_cert %s holds %s, not a certificate: put the key server's "
            "own certificate there (PEM)",
            c->cert_file, holds(&s));
    } else if (s.der_cert) {
        say(x, KL_LOG_ERROR,
            "auth_cert %s is a DER certificate; keylessd reads PEM: convert "
            "it with `openssl x509 -inform DER -in %s -out NEW`",
            c->cert_file, c->cert_file);
    }
    if (s.ncerts > 0 && !s.der_cert) {
        if (s.keys)
            say(x, KL_LOG_WARN,
                "auth_cert %s also holds a private key; keylessd uses the key "
                "in auth_key %s. Keep private keys out of certificate files",
                c->cert_file, c->key_file);
        check_validity(x, s.certs[0]);
        check_usage(x, s.certs[0]);
    }
    EVP_PKEY *pkey = load_key(x);
    if (pkey && s.ncerts > 0 && !s.der_cert)
        check_pair(x, &s, pkey);
    EVP_PKEY_free(pkey);
    kl_scan_free(&s);
}

/* ---- cloudflare_ca_cert ---- */

static void check_ca(ctx *x)
{
    const kl_certcheck *c = x->c;
    kl_scan s;
    kl_scan_file(c->ca_file, &s);
    if (s.open_errno) {
        say(x, KL_LOG_ERROR,
            "cloudflare_ca_cert %s: cannot read: %s. Put the CA certificate "
            "that signs the clients' certificates there (for Cloudflare: the "
            "Keyless CA, keyless_cacert.pem)",
            c->ca_file, strerror(s.open_errno));
        return;
    }
    if (s.keys)
        say(x, KL_LOG_ERROR,
            "cloudflare_ca_cert %s holds a private key: the CA file needs "
            "only CA certificates, and no private key belongs in it",
            c->ca_file);
    if (s.ncerts == 0 || s.der_cert) {
        say(x, KL_LOG_ERROR,
            "cloudflare_ca_cert %s holds %s, not a CA certificate: put the "
            "PEM certificate of the CA that signs the clients' certificates "
            "there",
            c->ca_file, s.der_cert ? "a DER certificate" : holds(&s));
        kl_scan_free(&s);
        return;
    }
    size_t cas = 0;
    for (size_t i = 0; i < s.ncerts; i++)
        if (X509_check_ca(s.certs[i]) == 1 ||
            (X509_get_extension_flags(s.certs[i]) & EXFLAG_CA))
            cas++;
    if (cas == 0) {
        char subj[256];
        kl_scan_subject(s.certs[0], subj, sizeof subj);
        say(x, KL_LOG_ERROR,
            "cloudflare_ca_cert %s holds no CA certificate: \"%s\"%s is not "
            "a CA (no basicConstraints CA:TRUE). Put the certificate of the "
            "CA that signs the clients' certificates there, not a server or "
            "client certificate",
            c->ca_file, subj, s.ncerts > 1 ? " and the others" : "");
    } else if (cas < s.ncerts) {
        say(x, KL_LOG_WARN,
            "cloudflare_ca_cert %s: %zu of its %zu certificates are not CAs "
            "and are ignored for client verification",
            c->ca_file, s.ncerts - cas, s.ncerts);
    }
    kl_scan_free(&s);
}

int kl_certcheck_identity(const kl_certcheck *c)
{
    ctx x = {.c = c};
    check_identity(&x);
    check_ca(&x);
    return x.errors;
}

/* ---- the router's client identity ---- */

/* What a client certificate lacks (usage), in words; "" when usable. */
static const char *client_usage_problem(X509 *leaf)
{
    uint32_t xku = X509_get_extended_key_usage(leaf);
    if (xku != UINT32_MAX && !(xku & XKU_SSL_CLIENT))
        return (xku & XKU_SSL_SERVER) ? "its extendedKeyUsage is serverAuth "
                                        "without clientAuth"
                                      : "its extendedKeyUsage lacks clientAuth";
    uint32_t ku = X509_get_key_usage(leaf);
    if (ku != UINT32_MAX && !(ku & KU_DIGITAL_SIGNATURE))
        return "its keyUsage lacks digitalSignature";
    return "";
}

int kl_certcheck_client(const kl_client_certcheck *c)
{
    ctx x = {.c = &(kl_certcheck){.report = c->report, .arg = c->arg}};
    char what[1400];
    snprintf(what, sizeof what, "%s %s%s", c->cert_option, c->cert_file,
             c->cert_note ? c->cert_note : "");
    kl_scan s;
    kl_scan_file(c->cert_file, &s);
    if (s.open_errno || s.ncerts == 0 || s.der_cert) {
        say(&x, KL_LOG_ERROR,
            "%s: %s%s, so remote key servers cannot be reached. Set %s to "
            "the PEM certificate the router presents to them",
            what, s.open_errno ? "cannot read: " : "holds ",
            s.open_errno ? strerror(s.open_errno)
            : s.der_cert ? "a DER certificate (keylessd reads PEM)"
                         : holds(&s),
            c->cert_option);
        kl_scan_free(&s);
        return x.errors;
    }
    X509 *leaf = s.certs[0];
    const char *usage = client_usage_problem(leaf);
    if (*usage)
        say(&x, KL_LOG_ERROR,
            "%s cannot be used as a TLS client certificate: %s, so remote "
            "key servers refuse it (\"unsuitable certificate purpose\") and "
            "every forwarded request fails. %s",
            what, usage, c->fix);
    long long now = c->now ? c->now : (long long)time(NULL);
    char na[64];
    long long ta = 0;
    if (kl_scan_time(X509_get0_notAfter(leaf), na, sizeof na, &ta) && now > ta)
        say(&x, KL_LOG_ERROR,
            "%s expired on %s, so remote key servers refuse it. %s", what, na,
            c->fix);
    if (c->key_file) {
        EVP_PKEY *pkey = NULL;
        FILE *f = fopen(c->key_file, "r");
        if (f) {
            pkey = PEM_read_PrivateKey(f, NULL, NULL, NULL);
            fclose(f);
        }
        ERR_clear_error();
        if (!pkey)
            say(&x, KL_LOG_ERROR,
                "%s %s: %s; set it to the private key of %s (PEM, "
                "unencrypted)",
                c->key_option, c->key_file,
                f ? "not a readable PEM private key" : "cannot read",
                c->cert_file);
        else if (X509_check_private_key(leaf, pkey) != 1)
            say(&x, KL_LOG_ERROR,
                "%s does not match %s %s: use the key the certificate was "
                "issued for",
                what, c->key_option, c->key_file);
        ERR_clear_error();
        EVP_PKEY_free(pkey);
    }
    kl_scan_free(&s);
    return x.errors;
}

/* ---- certificates in key directories ---- */

static int walk(const char *dir, int depth, kl_cert_report_fn report, void *arg)
{
    if (depth > MAX_DEPTH)
        return 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0; /* the key store reports unreadable directories */
    int warned = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' &&
            (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        char path[4096];
        struct stat st;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >=
                sizeof path ||
            lstat(path, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            warned += walk(path, depth + 1, report, arg);
            continue;
        }
        if (!S_ISREG(st.st_mode))
            continue;
        size_t n = strlen(e->d_name);
        /* The key store explains a .key that is no key, and a .sealed
         * that is no sealed key file (docs/SEALING.md); scanning either
         * here would only repeat its work - for a sealed file, a DER
         * private-key decode that cost ~1.2 ms (docs/SEALING.md "Cost,
         * measured"). */
        if ((n >= 4 && strcmp(e->d_name + n - 4, ".key") == 0) ||
            (n >= 7 && strcmp(e->d_name + n - 7, ".sealed") == 0))
            continue;
        kl_scan s;
        kl_scan_file(path, &s);
        if (s.ncerts || s.csrs) {
            char msg[8192 + 512];
            snprintf(msg, sizeof msg,
                     "%s: a %s in the key directory %s: keylessd serves "
                     "only private keys (*.key) and does not need it. The "
                     "key server's own certificate is auth_cert; keep "
                     "certificates out of key directories",
                     path, s.ncerts ? "certificate" : "certificate request",
                     dir);
            if (report)
                report(arg, KL_LOG_WARN, msg);
            warned++;
        }
        kl_scan_free(&s);
    }
    closedir(d);
    return warned;
}

int kl_certcheck_key_dir(const char *dir, kl_cert_report_fn report, void *arg)
{
    return walk(dir, 0, report, arg);
}
