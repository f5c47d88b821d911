/* SPDX-License-Identifier: Apache-2.0 */
/* Activation (docs/OPERATIONS.md "Activation"): obtaining the key server's own
 * certificate (auth_cert) from Cloudflare's Origin CA, as the reference server
 * does. keylessd makes an ECDSA P-384 key and a CSR for `hostname`
 * (keys/enrol.h), POSTs the CSR with the Origin CA key to `init_endpoint`,
 * and stores the certificate it gets back. The request and the answer
 * (activate_api.c) are pure functions so that they can be unit-tested and
 * fuzzed; the HTTP call (activate_http.c) is libcurl; the policy - when to
 * enrol, when to renew, when to refuse - is activate.c. See
 * docs/OPERATIONS.md, "Activation". */
#ifndef KL_ACTIVATION_ACTIVATE_H
#define KL_ACTIVATION_ACTIVATE_H

#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"
#include "core/status.h"
#include "core/log.h"

/* The validity keylessd asks for, in days. The reference sends none, so
 * the API's default applies, which is 15 years (5475 days, the longest of
 * the values the API accepts: 7, 30, 90, 365, 730, 1095, 5475); keylessd
 * asks for the same explicitly. */
#define KL_ACTIVATE_VALIDITY_DAYS 5475

/* The Origin CA "create certificate" request body (JSON, malloc'd):
 * {"hostnames": [hostname], "request_type": "keyless-certificate",
 *  "requested_validity": days, "csr": PEM, "zone_id": id}; zone_id only
 * when set. NULL when out of memory. */
char *kl_activate_body(const char *hostname, const char *zone_id,
                       const char *csr_pem, int validity_days);

/* Interprets the API's answer: HTTP status and body. KL_OK with *cert_pem
 * (malloc'd) when the status is 2xx, the body a JSON object with
 * "success": true and a non-empty string "result"."certificate".
 * Otherwise KL_E_BAD_VALUE and one line for an operator in err: the
 * status, and the API's own errors[] (code and message, quoted, control
 * characters replaced) when the body has them. */
KL_WUR kl_status kl_activate_parse(long http_status, const char *body,
                                   size_t len, char **cert_pem, char *err,
                                   size_t errlen);

/* Checks init_endpoint: https://, or http:// to a loopback address only
 * (a test or a local relay; *plain_http is set so that the caller warns).
 * KL_E_CONFIG with the reason in err otherwise. */
KL_WUR kl_status kl_activate_check_endpoint(const char *url, bool *plain_http,
                                            char *err, size_t errlen);

typedef struct kl_activate_call {
    const char *endpoint; /* init_endpoint */
    const char *api_key;  /* origin_ca_api_key: sent, never logged */
    const char *body;     /* kl_activate_body */
    long timeout_ms;      /* the whole call */
} kl_activate_call;

/* POSTs body to the endpoint with the X-Auth-User-Service-Key header,
 * TLS verified against the system's CAs, no redirects followed (the key
 * must not travel to another host), at most 1 MiB of answer, within
 * timeout_ms. Then kl_activate_parse. err says what went wrong: cannot
 * connect, timed out, TLS verification, the HTTP status, the API's
 * errors. */
KL_WUR kl_status kl_activate_post(const kl_activate_call *c, char **cert_pem,
                                  char *err, size_t errlen);

/* ---- the policy (activate.c) ---- */

/* At startup, before the identity is loaded: enrols when auth_cert and
 * auth_key are missing (or only auth_key exists) and hostname and
 * origin_ca_api_key are set; renews an expired or unusable auth_cert
 * (keeping the old files as *.bak) only with --renew or auto_renew, and
 * otherwise refuses. Returns 0 to go on (the identity is then checked as
 * usual), 1 to exit (every reason logged). */
int kl_activate_startup(const kl_config *cfg);

/* --check: logs what a start would do about the identity, changing
 * nothing. Returns true when a start would enrol or renew, so that the
 * caller does not count the missing or expired files as errors (a refusal
 * is counted in p). */
bool kl_activate_check(const kl_config *cfg, kl_problems *p);

/* --manual-activation: writes a new auth_key (0600; an existing usable one
 * is kept) and a CSR for hostname to auth_csr (0644), says what to do with
 * it, and returns the exit status. */
int kl_activate_manual(const kl_config *cfg);

#endif
