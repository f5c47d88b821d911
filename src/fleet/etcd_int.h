/* SPDX-License-Identifier: Apache-2.0 */
/* Inside the etcd client (etcd.h): the options a client and a watch
 * share, and the HTTP plumbing over libcurl (etcd.c). */
#ifndef KL_FLEET_ETCD_INT_H
#define KL_FLEET_ETCD_INT_H

#include <curl/curl.h>

#include "fleet/etcd.h"

typedef struct etcd_conf {
    char *endpoints[KL_ETCD_MAX_ENDPOINTS]; /* without a trailing '/' */
    size_t n;
    char *ca, *cert, *key;
    long timeout_ms, connect_ms;
    size_t max_response;
    char *user, *password_file; /* NULL user: no auth */
    bool any_mode;
} etcd_conf;

/* Password auth's state (docs/DESIGN.md "etcd client (src/fleet)"): the
 * token, and the backoff after etcd refused the password, so that a wrong
 * one costs etcd (a bcrypt check and a raft write each) at most one try a
 * backoff whatever the callers' retries. A client and each watch keep
 * their own (they run on different threads). */
typedef struct etcd_auth {
    char token[KL_ETCD_TOKEN_MAX]; /* "": none yet */
    bool off;                      /* etcd said auth is not enabled */
    uint64_t next_ms;              /* no try before (after a refusal) */
    int backoff_ms;
    kl_status last_st;
    char last_err[512];
} etcd_auth;

struct kl_etcd {
    etcd_conf conf;
    size_t cur; /* the endpoint tried first */
    CURL *h;    /* kept: its connection to cur is reused */
    etcd_auth auth;
};

kl_status etcd_conf_copy(etcd_conf *dst, const etcd_conf *src);
void etcd_conf_clear(etcd_conf *c);

/* What every transfer sets: protocols, HTTP/1.1, TLS files, keepalives. */
void etcd_curl_common(CURL *h, const etcd_conf *c);

/* True for a libcurl failure after which the next endpoint may answer
 * (this one could not be reached or dropped the connection). */
bool etcd_curl_failover(CURLcode rc);
/* A sentence naming the endpoint and the failure; the status it maps to. */
kl_status etcd_curl_explain(CURLcode rc, const char *detail,
                            const char *endpoint, size_t max_response,
                            char *err, size_t errlen);

/* One POST of a JSON body to path (e.g. "/v3/kv/put") with failover over
 * the endpoints within the call's timeout. On KL_OK *body (malloc'd,
 * NUL-terminated, *len bytes) is a 200 answer; an error answer of the
 * gateway becomes its status and message. */
kl_status etcd_post(kl_etcd *c, const char *path, const char *json, char **body,
                    size_t *len, char *err, size_t errlen);

/* Gets a token into a (conf.user set, none held, auth not known to be
 * off): POST /v3/auth/authenticate through c's endpoints. */
kl_status etcd_authenticate(kl_etcd *c, etcd_auth *a, char *err, size_t errlen);
/* Forgets a token (etcd refused it) and wipes it. */
void etcd_auth_drop(etcd_auth *a);
/* A watch's cancel reason or an error message that means "authenticate
 * again": a token etcd does not know (expired), or none while auth is
 * on. */
bool etcd_auth_refused(const char *message);

/* The key after every key that starts with prefix: prefix with its last
 * byte below 0xff incremented and the rest dropped; "\0" (etcd: to the
 * end of the key space) for an empty or all-0xff prefix. malloc'd. */
uint8_t *etcd_prefix_end(const void *prefix, size_t len, size_t *end_len);

#endif
