/* SPDX-License-Identifier: Apache-2.0 */
/* The Origin CA API call over HTTP (activate.h), with libcurl
 * (docs/OPERATIONS.md "Activation"). The Origin CA key travels in one request
 * header and nowhere else: it is not in the URL, not in a log line, and
 * not sent on to a redirect target. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <openssl/crypto.h>

#include "core/log.h"
#include "core/status.h"
#include "activation/activate.h"

/* more than any certificate answer; a bigger body is not the API */
#define BODY_MAX (1u << 20)

static bool loopback_host(const char *h)
{
    if (strcmp(h, "localhost") == 0 || strcmp(h, "[::1]") == 0 ||
        strcmp(h, "::1") == 0)
        return true;
    /* 127.0.0.0/8, written as a dotted quad */
    unsigned a, b, c, d;
    char tail;
    return sscanf(h, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && a == 127 &&
           b < 256 && c < 256 && d < 256;
}

kl_status kl_activate_check_endpoint(const char *url, bool *plain_http,
                                     char *err, size_t errlen)
{
    *plain_http = false;
    CURLU *u = curl_url();
    KL_ENSURE(u, KL_E_NOMEM);
    char *scheme = NULL, *host = NULL, *user = NULL;
    kl_status st = KL_E_CONFIG;
    if (!url || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
        kl_errf(err, errlen,
                "init_endpoint %s is not a URL; the default is "
                "https://api.cloudflare.com/client/v4/certificates/",
                url ? url : "(unset)");
        goto out;
    }
    if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK) {
        kl_errf(
            err, errlen,
            "init_endpoint must not carry credentials in the URL; the Origin "
            "CA key belongs in origin_ca_api_key");
        goto out;
    }
    if (strcmp(scheme, "https") == 0) {
        st = KL_OK;
    } else if (strcmp(scheme, "http") == 0 && loopback_host(host)) {
        *plain_http = true;
        st = KL_OK;
    } else if (strcmp(scheme, "http") == 0) {
        kl_errf(err, errlen,
                "init_endpoint %s: plain http would send the Origin CA key "
                "unencrypted to %s; use https:// (http:// is accepted for "
                "loopback addresses only)",
                url, host);
    } else {
        kl_errf(err, errlen,
                "init_endpoint %s: scheme %s is not supported; use "
                "https://",
                url, scheme);
    }
out:
    curl_free(user);
    curl_free(host);
    curl_free(scheme);
    curl_url_cleanup(u);
    return st;
}

typedef struct sink {
    char *data;
    size_t len;
    bool too_big;
} sink;

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    sink *s = arg;
    size_t add = size * n;
    if (add > BODY_MAX - s->len) {
        s->too_big = true;
        return 0; /* aborts the transfer */
    }
    char *d = realloc(s->data, s->len + add + 1);
    if (!d)
        return 0;
    memcpy(d + s->len, p, add);
    s->len += add;
    d[s->len] = '\0';
    s->data = d;
    return add;
}

/* One line for an operator from a libcurl failure. */
static void explain(CURLcode rc, const char *detail, const kl_activate_call *c,
                    const sink *s, char *err, size_t errlen)
{
    const char *d = detail[0] ? detail : curl_easy_strerror(rc);
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        kl_errf(err, errlen,
                "cannot resolve the certificate API's host in init_endpoint %s "
                "(%s): check DNS on this machine",
                c->endpoint, d);
        break;
    case CURLE_COULDNT_CONNECT:
        kl_errf(err, errlen,
                "cannot connect to the certificate API at %s (%s): check the "
                "network, firewalls, a proxy (https_proxy) and init_endpoint",
                c->endpoint, d);
        break;
    case CURLE_OPERATION_TIMEDOUT:
        kl_errf(
            err, errlen,
            "no complete answer from the certificate API at %s within %ld ms "
            "(activation_timeout): %s",
            c->endpoint, c->timeout_ms, d);
        break;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CONNECT_ERROR:
        kl_errf(err, errlen,
                "TLS with the certificate API at %s failed (%s): keylessd "
                "verifies the API's certificate against this machine's CA "
                "store; a TLS-inspecting proxy must be trusted there",
                c->endpoint, d);
        break;
    case CURLE_WRITE_ERROR:
        if (s->too_big) {
            kl_errf(err, errlen,
                    "the answer of %s is larger than %u bytes: not the "
                    "certificate API (check init_endpoint)",
                    c->endpoint, BODY_MAX);
            break;
        }
        /* fall through */
    default:
        kl_errf(err, errlen,
                "the request to the certificate API at %s failed: %s",
                c->endpoint, d);
        break;
    }
}

kl_status kl_activate_post(const kl_activate_call *c, char **cert_pem,
                           char *err, size_t errlen)
{
    *cert_pem = NULL;
    bool plain;
    KL_GUARD(kl_activate_check_endpoint(c->endpoint, &plain, err, errlen));
    CURL *h = curl_easy_init();
    KL_ENSURE(h, KL_E_NOMEM);
    /* the key goes into a header built here and wiped below */
    static const char name[] = "X-Auth-User-Service-Key: ";
    size_t klen = strlen(name) + strlen(c->api_key) + 1;
    char *auth = malloc(klen);
    struct curl_slist *hdr = NULL, *t;
    kl_status st = KL_E_NOMEM;
    if (!auth)
        goto out;
    snprintf(auth, klen, "%s%s", name, c->api_key);
    if (!(t = curl_slist_append(hdr, auth)))
        goto out;
    hdr = t;
    if (!(t = curl_slist_append(hdr, "Content-Type: application/json")))
        goto out;
    hdr = t;
    if (!(t = curl_slist_append(hdr, "Accept: application/json")))
        goto out;
    hdr = t;
    /* no "Expect: 100-continue" round trip */
    if (!(t = curl_slist_append(hdr, "Expect:")))
        goto out;
    hdr = t;

    char detail[CURL_ERROR_SIZE] = "";
    sink s = {0};
    long connect_ms = c->timeout_ms < 10000 ? c->timeout_ms : 10000;
    curl_easy_setopt(h, CURLOPT_URL, c->endpoint);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                     (curl_off_t)strlen(c->body));
    curl_easy_setopt(h, CURLOPT_USERAGENT, "keylessd");
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, detail);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
    kl_debug("activation: POST %s (%zu bytes of JSON)", c->endpoint,
             strlen(c->body));
    CURLcode rc = curl_easy_perform(h);
    if (rc != CURLE_OK) {
        explain(rc, detail, c, &s, err, errlen);
        st = rc == CURLE_OPERATION_TIMEDOUT ? KL_E_TIMEOUT : KL_E_IO;
    } else {
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        kl_debug("activation: HTTP %ld, %zu bytes", status, s.len);
        st = kl_activate_parse(status, s.data, s.len, cert_pem, err, errlen);
    }
    free(s.data);
out:
    /* libcurl copied the header line: wipe both copies of the key */
    for (t = hdr; t; t = t->next)
        OPENSSL_cleanse(t->data, strlen(t->data));
    curl_slist_free_all(hdr);
    if (auth) {
        OPENSSL_cleanse(auth, klen);
        free(auth);
    }
    curl_easy_cleanup(h);
    return st;
}
