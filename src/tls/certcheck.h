/* SPDX-License-Identifier: Apache-2.0 */
/* The most common setup error is confusing the key server's own TLS
 * identity (auth_cert/auth_key, issued for its hostname) with the keys it
 * serves, or the CA its clients chain to with either. This module reads the
 * three files the way an operator would and explains each problem naming
 * the files (docs/OPERATIONS.md "Certificates"): certificate and key do not
 * match; the certificate expired, is not yet valid or expires within 30 days;
 * it lacks the serverAuth usage; a private key where a certificate belongs or
 * the reverse; a CA file without a CA; certificates inside a key directory. It
 * uses X509/PEM calls only (no SSL_*) and loads nothing into a TLS context:
 * kl_tls_server_ctx_new does that once the files pass. */
#ifndef KL_TLS_CERTCHECK_H
#define KL_TLS_CERTCHECK_H

#include <stdbool.h>
#include <stddef.h>

/* One finding: level is KL_LOG_WARN or KL_LOG_ERROR (core/log.h); msg is
 * one line without a trailing newline. */
typedef void (*kl_cert_report_fn)(void *arg, int level, const char *msg);

typedef struct kl_certcheck {
    const char *cert_file; /* auth_cert: PEM chain, own certificate first */
    const char *key_file;  /* auth_key */
    const char *ca_file;   /* cloudflare_ca_cert */
    long long now;         /* seconds since 1970; 0: the current time */
    int warn_days;         /* warn this long before expiry; 0: 30 */
    /* allow_group_readable_keys: an auth_key that group or others can
     * read is refused unless set (as the keys served are) */
    bool allow_group_readable;
    kl_cert_report_fn report;
    void *arg;
} kl_certcheck;

/* Checks the identity and the CA file. Returns the number of errors
 * reported (warnings are reported but not counted). */
int kl_certcheck_identity(const kl_certcheck *c);

/* Reports (as warnings) every certificate or CSR file below a key
 * directory, recursively (real subdirectories only, as the key store
 * walks). Returns the number of warnings. */
int kl_certcheck_key_dir(const char *dir, kl_cert_report_fn report, void *arg);

/* The certificate a TLS client presents (the router's identity toward
 * remote key servers, docs/ROUTING.md "The router's certificate"): it is
 * readable PEM, usable for client authentication (extendedKeyUsage absent
 * or with clientAuth; keyUsage absent or with digitalSignature), not
 * expired, and matches its key. Messages name cert_option and the file
 * (cert_note, e.g. " (router_cert is unset)", follows the file name) and
 * end with fix where the certificate must be replaced. Returns the number
 * of errors reported. */
typedef struct kl_client_certcheck {
    const char *cert_option, *cert_file, *cert_note;
    const char *key_option, *key_file; /* key_file NULL: not checked */
    const char *fix;
    long long now; /* seconds since 1970; 0: the current time */
    kl_cert_report_fn report;
    void *arg;
} kl_client_certcheck;
int kl_certcheck_client(const kl_client_certcheck *c);

#endif
