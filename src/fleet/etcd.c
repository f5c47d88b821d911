/* SPDX-License-Identifier: Apache-2.0 */
/* The etcd client's connection side (etcd.h): options, one POST with
 * failover across the endpoints, and how a failure is told
 * (docs/DESIGN.md "etcd client (src/fleet)"). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/time.h"
#include "fleet/etcd_int.h"

#define DEFAULT_TIMEOUT_MS 5000
#define DEFAULT_CONNECT_MS 1000
#define DEFAULT_MAX_RESPONSE (16u << 20)

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

void etcd_conf_clear(etcd_conf *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->endpoints[i]);
    free(c->ca);
    free(c->cert);
    free(c->key);
    memset(c, 0, sizeof *c);
}

static bool dup_opt(char **dst, const char *src)
{
    *dst = src ? strdup(src) : NULL;
    return !src || *dst;
}

kl_status etcd_conf_copy(etcd_conf *dst, const etcd_conf *src)
{
    *dst = *src;
    dst->n = 0;
    dst->ca = dst->cert = dst->key = NULL;
    for (size_t i = 0; i < src->n; i++) {
        if (!(dst->endpoints[i] = strdup(src->endpoints[i]))) {
            etcd_conf_clear(dst);
            return KL_E_NOMEM;
        }
        dst->n++;
    }
    if (!dup_opt(&dst->ca, src->ca) || !dup_opt(&dst->cert, src->cert) ||
        !dup_opt(&dst->key, src->key)) {
        etcd_conf_clear(dst);
        return KL_E_NOMEM;
    }
    return KL_OK;
}

static kl_status check_file(const char *what, const char *path, char *err,
                            size_t errlen)
{
    if (!path || access(path, R_OK) == 0)
        return KL_OK;
    kl_errf(err, errlen, "etcd %s %s cannot be read", what, path);
    return KL_E_CONFIG;
}

kl_status kl_etcd_new(const kl_etcd_opts *o, kl_etcd **out, char *err,
                      size_t errlen)
{
    *out = NULL;
    if (!o || o->n_endpoints == 0 || !o->endpoints) {
        kl_errf(err, errlen, "no etcd endpoint (e.g. http://127.0.0.1:2379)");
        return KL_E_CONFIG;
    }
    if (o->n_endpoints > KL_ETCD_MAX_ENDPOINTS) {
        kl_errf(err, errlen, "%zu etcd endpoints: at most %d", o->n_endpoints,
                KL_ETCD_MAX_ENDPOINTS);
        return KL_E_CONFIG;
    }
    if (o->timeout_ms < 0 || o->connect_timeout_ms < 0) {
        kl_errf(err, errlen, "etcd timeouts must not be negative");
        return KL_E_CONFIG;
    }
    if (!o->cert_file != !o->key_file) {
        kl_errf(err, errlen,
                "an etcd client certificate needs its key and "
                "a key its certificate");
        return KL_E_CONFIG;
    }
    KL_GUARD(check_file("CA file", o->ca_file, err, errlen));
    KL_GUARD(check_file("client certificate", o->cert_file, err, errlen));
    KL_GUARD(check_file("client key", o->key_file, err, errlen));
    for (size_t i = 0; i < o->n_endpoints; i++) {
        const char *e = o->endpoints[i];
        if (!e ||
            (strncmp(e, "http://", 7) != 0 && strncmp(e, "https://", 8) != 0)) {
            kl_errf(err, errlen,
                    "etcd endpoint %s is not an http:// or https:// URL",
                    e ? e : "(null)");
            return KL_E_CONFIG;
        }
    }
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) {
        kl_errf(err, errlen, "libcurl: %s", curl_easy_strerror(curl_init_rc));
        return KL_E_INTERNAL;
    }

    kl_etcd *c = calloc(1, sizeof *c);
    if (!c)
        return KL_E_NOMEM;
    etcd_conf *f = &c->conf;
    f->timeout_ms = o->timeout_ms ? o->timeout_ms : DEFAULT_TIMEOUT_MS;
    f->connect_ms =
        o->connect_timeout_ms ? o->connect_timeout_ms : DEFAULT_CONNECT_MS;
    f->max_response = o->max_response ? o->max_response : DEFAULT_MAX_RESPONSE;
    for (size_t i = 0; i < o->n_endpoints; i++) {
        char *e = strdup(o->endpoints[i]);
        if (!e)
            goto nomem;
        size_t n = strlen(e);
        while (n > 0 && e[n - 1] == '/')
            e[--n] = '\0';
        f->endpoints[f->n++] = e;
    }
    if (!dup_opt(&f->ca, o->ca_file) || !dup_opt(&f->cert, o->cert_file) ||
        !dup_opt(&f->key, o->key_file) || !(c->h = curl_easy_init()))
        goto nomem;
    *out = c;
    return KL_OK;
nomem:
    kl_etcd_free(c);
    return KL_E_NOMEM;
}

void kl_etcd_free(kl_etcd *c)
{
    if (!c)
        return;
    if (c->h)
        curl_easy_cleanup(c->h);
    etcd_conf_clear(&c->conf);
    free(c);
}

const char *kl_etcd_endpoint(const kl_etcd *c)
{
    return c->conf.endpoints[c->cur];
}

void etcd_curl_common(CURL *h, const etcd_conf *c)
{
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    /* the gateway on etcd's client port: over TLS, ALPN "h2" would be
     * taken for gRPC, so HTTP/1.1 whatever the scheme */
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->connect_ms);
    /* a peer host that vanished without a FIN is found by the kernel */
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 10L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 5L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    if (c->ca)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca);
    if (c->cert) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert);
        curl_easy_setopt(h, CURLOPT_SSLKEY, c->key);
    }
}

bool etcd_curl_failover(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_OPERATION_TIMEDOUT: return true;
    default: return false;
    }
}

kl_status etcd_curl_explain(CURLcode rc, const char *detail,
                            const char *endpoint, size_t max_response,
                            char *err, size_t errlen)
{
    const char *d = detail && detail[0] ? detail : curl_easy_strerror(rc);
    switch (rc) {
    case CURLE_OPERATION_TIMEDOUT:
        kl_errf(err, errlen, "etcd at %s: no answer in time (%s)", endpoint, d);
        return KL_E_TIMEOUT;
    case CURLE_WRITE_ERROR:
        kl_errf(err, errlen,
                "etcd at %s: the answer is larger than %zu bytes "
                "(max_response)",
                endpoint, max_response);
        return KL_E_TOO_LARGE;
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CONNECT_ERROR:
        kl_errf(err, errlen,
                "etcd at %s: TLS failed (%s): check the CA file and the "
                "client certificate",
                endpoint, d);
        return KL_E_TLS;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
        /* TLS 1.3: a refused client certificate is an alert on the first
         * read, after the handshake */
        if (strstr(d, "alert")) {
            kl_errf(err, errlen,
                    "etcd at %s: TLS failed (%s): check the client "
                    "certificate and that etcd's CA signed it",
                    endpoint, d);
            return KL_E_TLS;
        }
        kl_errf(err, errlen, "etcd at %s: %s", endpoint, d);
        return KL_E_IO;
    case CURLE_OUT_OF_MEMORY:
        kl_errf(err, errlen, "etcd at %s: out of memory", endpoint);
        return KL_E_NOMEM;
    default:
        kl_errf(err, errlen, "etcd at %s: %s", endpoint, d);
        return KL_E_IO;
    }
}

typedef struct sink {
    char *data;
    size_t len, max;
} sink;

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    sink *s = arg;
    size_t add = size * n;
    if (add > s->max - s->len)
        return 0; /* CURLE_WRITE_ERROR: too large */
    char *d = realloc(s->data, s->len + add + 1);
    if (!d)
        return 0;
    memcpy(d + s->len, p, add);
    s->len += add;
    d[s->len] = '\0';
    s->data = d;
    return add;
}

/* gRPC status codes the gateway puts into an error answer */
enum {
    G_DEADLINE = 4,
    G_NOT_FOUND = 5,
    G_OUT_OF_RANGE = 11,
    G_UNAVAILABLE = 14
};

/* An HTTP answer that is not 200: the gateway's error. Sets *next when
 * another member may do better (this one has no leader, or is stopping). */
static kl_status http_error(long code, const sink *s, const char *ep,
                            bool *next, char *err, size_t errlen)
{
    kl_etcd_error e;
    *next = code == 502 || code == 503;
    if (!s->data || !kl_etcd_parse_error(s->data, s->len, &e)) {
        kl_errf(err, errlen,
                "etcd at %s: HTTP %ld without an etcd error "
                "(not an etcd gateway?)",
                ep, code);
        return KL_E_KEY;
    }
    kl_errf(err, errlen, "etcd at %s: %s (code %d)", ep, e.message, e.code);
    switch (e.code) {
    case G_NOT_FOUND:
    case G_OUT_OF_RANGE: return KL_E_NOT_FOUND;
    case G_DEADLINE: return KL_E_TIMEOUT;
    case G_UNAVAILABLE: *next = true; return KL_E_IO;
    default: return KL_E_BAD_VALUE;
    }
}

kl_status etcd_post(kl_etcd *c, const char *path, const char *json, char **body,
                    size_t *len, char *err, size_t errlen)
{
    *body = NULL;
    *len = 0;
    etcd_conf *f = &c->conf;
    uint64_t deadline = kl_now_ms() + (uint64_t)f->timeout_ms;
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: "
                                                     "application/json");
    struct curl_slist *h2 = hdr ? curl_slist_append(hdr, "Expect:") : NULL;
    if (!h2) {
        curl_slist_free_all(hdr);
        return KL_E_NOMEM;
    }
    hdr = h2;
    /* why each endpoint failed, for the message when all did */
    char why[1024] = "";
    size_t wl = 0;
    kl_status st = KL_E_IO;
    for (size_t i = 0; i < f->n; i++) {
        size_t ep = (c->cur + i) % f->n;
        uint64_t now = kl_now_ms();
        if (now >= deadline) {
            st = KL_E_TIMEOUT;
            break;
        }
        long left = (long)(deadline - now);
        char url[2048], detail[CURL_ERROR_SIZE] = "";
        snprintf(url, sizeof url, "%s%s", f->endpoints[ep], path);
        sink s = {.max = f->max_response};
        CURL *h = c->h;
        curl_easy_reset(h);
        etcd_curl_common(h, f);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, json);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)strlen(json));
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, left);
        if (f->connect_ms > left)
            curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, left);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, detail);
        CURLcode rc = curl_easy_perform(h);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
        char one[512];
        bool next;
        if (rc == CURLE_OK) {
            long code = 0;
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
            if (code == 200) {
                c->cur = ep;
                *body = s.data ? s.data : strdup("");
                *len = s.len;
                st = *body ? KL_OK : KL_E_NOMEM;
                goto out;
            }
            st = http_error(code, &s, f->endpoints[ep], &next, one, sizeof one);
        } else {
            st = etcd_curl_explain(rc, detail, f->endpoints[ep],
                                   f->max_response, one, sizeof one);
            next = etcd_curl_failover(rc);
        }
        free(s.data);
        if (!next) {
            c->cur = ep; /* it answered: an answer, not a dead member */
            kl_errf(err, errlen, "%s", one);
            goto out;
        }
        int w =
            snprintf(why + wl, sizeof why - wl, "%s%s", wl ? "; " : "", one);
        if (w > 0)
            wl = wl + (size_t)w < sizeof why ? wl + (size_t)w : sizeof why - 1;
    }
    /* every endpoint failed, or the time ran out: start with the next
     * one on the next call */
    c->cur = (c->cur + 1) % f->n;
    if (st == KL_E_TIMEOUT || kl_now_ms() >= deadline) {
        st = KL_E_TIMEOUT;
        kl_errf(err, errlen, "etcd: no answer within %ld ms: %s", f->timeout_ms,
                wl ? why : "no endpoint tried");
    } else {
        if (st != KL_E_TLS)
            st = KL_E_IO;
        kl_errf(err, errlen, "etcd: no endpoint answered: %s", why);
    }
out:
    curl_slist_free_all(hdr);
    return st;
}

uint8_t *etcd_prefix_end(const void *prefix, size_t len, size_t *end_len)
{
    const uint8_t *p = prefix;
    size_t n = len;
    while (n > 0 && p[n - 1] == 0xff)
        n--;
    uint8_t *e = malloc(n ? n + 1 : 2);
    if (!e)
        return NULL;
    if (n == 0) {
        e[0] = 0;
        *end_len = 1;
        return e;
    }
    memcpy(e, p, n);
    e[n - 1]++;
    e[n] = 0;
    *end_len = n;
    return e;
}
