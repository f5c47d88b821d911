/* SPDX-License-Identifier: Apache-2.0 */
/* Private to src/tls: what a PEM or DER file holds, read without trusting
 * its name (certcheck.c). */
#ifndef KL_TLS_CERTSCAN_H
#define KL_TLS_CERTSCAN_H

#include <stdbool.h>
#include <stddef.h>

#include <openssl/x509.h>

#define KL_SCAN_MAX_CERTS 16

typedef struct kl_scan {
    int open_errno; /* 0: read; else why the file could not be read */
    bool pem;       /* at least one PEM block */
    size_t ncerts;  /* certificates, in file order */
    X509 *certs[KL_SCAN_MAX_CERTS];
    size_t more_certs; /* beyond KL_SCAN_MAX_CERTS (counted only) */
    int keys;          /* private key blocks (any PEM label of a key) */
    int encrypted_keys;
    int csrs;      /* certificate requests */
    int pubkeys;   /* public keys */
    int other;     /* any other PEM block */
    bool der_cert; /* no PEM; the whole file is one DER certificate */
    bool der_key;  /* no PEM; the whole file is a DER private key */
} kl_scan;

/* Reads path (at most 1 MiB) and classifies what it holds. Never fails:
 * an unreadable file sets open_errno. */
void kl_scan_file(const char *path, kl_scan *out);
void kl_scan_free(kl_scan *s);

/* "2030-01-02 15:04:05 UTC" into out; false when t is unreadable, and
 * *unix_out gets the time in seconds since 1970. */
bool kl_scan_time(const ASN1_TIME *t, char *out, size_t cap,
                  long long *unix_out);
/* The subject as "CN=..., O=..." (one line) into out. */
void kl_scan_subject(X509 *x, char *out, size_t cap);

#endif
