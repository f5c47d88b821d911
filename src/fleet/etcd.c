/* SPDX-License-Identifier: Apache-2.0 */
/* The etcd client's connection side (etcd.h): options, one POST with
 * failover across the endpoints, and how a failure is told
 * (docs/DESIGN.md "etcd client (src/fleet)"). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

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
    free(c->user);
    free(c->password_file);
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
    dst->ca = dst->cert = dst->key = dst->user = dst->password_file = NULL;
    for (size_t i = 0; i < src->n; i++) {
        if (!(dst->endpoints[i] = strdup(src->endpoints[i]))) {
            etcd_conf_clear(dst);
            return KL_E_NOMEM;
        }
        dst->n++;
    }
    if (!dup_opt(&dst->ca, src->ca) || !dup_opt(&dst->cert, src->cert) ||
        !dup_opt(&dst->key, src->key) || !dup_opt(&dst->user, src->user) ||
        !dup_opt(&dst->password_file, src->password_file)) {
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

/* The password: the first line of the file (without its line end) into
 * pw (cap > KL_ETCD_PASSWORD_MAX). The caller wipes pw. */
static kl_status read_password(const char *path, bool any_mode, char *pw,
                               size_t cap, char *err, size_t errlen)
{
    pw[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        kl_errf(err, errlen, "etcd password file %s cannot be read: %s", path,
                strerror(errno));
        return KL_E_CONFIG;
    }
    struct stat st;
    char buf[KL_ETCD_PASSWORD_MAX + 2];
    ssize_t n = -1;
    kl_status s = KL_E_CONFIG;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        kl_errf(err, errlen, "etcd password file %s is not a regular file",
                path);
    else if ((st.st_mode & (S_IRGRP | S_IROTH)) && !any_mode)
        kl_errf(err, errlen,
                "etcd password file %s is readable by %s (mode %03o): run "
                "chmod 600 on it, or allow group-readable key files in the "
                "configuration",
                path, (st.st_mode & S_IROTH) ? "others" : "its group",
                (unsigned)(st.st_mode & 0777));
    else if ((n = read(fd, buf, sizeof buf - 1)) < 0)
        kl_errf(err, errlen, "etcd password file %s cannot be read: %s", path,
                strerror(errno));
    else {
        buf[n] = '\0';
        size_t len = strcspn(buf, "\r\n");
        if (len == 0 || len > KL_ETCD_PASSWORD_MAX || len >= cap ||
            memchr(buf, '\0', len))
            kl_errf(err, errlen,
                    "etcd password file %s: its first line must be the "
                    "password (1 to %d bytes)",
                    path, KL_ETCD_PASSWORD_MAX);
        else {
            memcpy(pw, buf, len);
            pw[len] = '\0';
            s = KL_OK;
        }
    }
    explicit_bzero(buf, sizeof buf);
    close(fd);
    return s;
}

kl_status kl_etcd_password_check(const char *path, bool any_mode, char *err,
                                 size_t errlen)
{
    char pw[KL_ETCD_PASSWORD_MAX + 1];
    kl_status s = read_password(path, any_mode, pw, sizeof pw, err, errlen);
    explicit_bzero(pw, sizeof pw);
    return s;
}

static bool user_ok(const char *u)
{
    size_t n = strlen(u);
    if (n == 0 || n > KL_ETCD_USER_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)u[i] < 0x20 || u[i] == 0x7f)
            return false;
    return true;
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
    if (o->user && !user_ok(o->user)) {
        kl_errf(err, errlen,
                "etcd user name: 1 to %d printable bytes (\"%.64s\")",
                KL_ETCD_USER_MAX, o->user);
        return KL_E_CONFIG;
    }
    if (!o->user != !o->password_file) {
        kl_errf(err, errlen,
                "an etcd user needs its password file and a "
                "password file its user");
        return KL_E_CONFIG;
    }
    if (o->password_file)
        KL_GUARD(kl_etcd_password_check(o->password_file, o->password_any_mode,
                                        err, errlen));
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
    f->any_mode = o->password_any_mode;
    if (!dup_opt(&f->ca, o->ca_file) || !dup_opt(&f->cert, o->cert_file) ||
        !dup_opt(&f->key, o->key_file) || !dup_opt(&f->user, o->user) ||
        !dup_opt(&f->password_file, o->password_file) ||
        !(c->h = curl_easy_init()))
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
    etcd_auth_drop(&c->auth);
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
    G_PERMISSION_DENIED = 7,
    G_DEADLINE = 4,
    G_NOT_FOUND = 5,
    G_OUT_OF_RANGE = 11,
    G_UNAVAILABLE = 14
};

/* An HTTP answer that is not 200: the gateway's error. Sets *next when
 * another member may do better (this one has no leader, or is stopping). */
static kl_status http_error(long code, const sink *s, const char *ep,
                            bool *next, kl_etcd_error *ge, char *err,
                            size_t errlen)
{
    kl_etcd_error e;
    *next = code == 502 || code == 503;
    if (s->data && code == 400 && strstr(s->data, "CommonName of client")) {
        /* etcd 3.4 with auth on refuses, through its gateway, a client
         * certificate that has a CommonName (it would not map it to a
         * user as it does over gRPC) */
        kl_errf(err, errlen,
                "etcd at %s refuses a client certificate with a CommonName "
                "through its gateway while auth is enabled: give this client "
                "an etcd certificate without a CN (docs/FLEET.md \"etcd roles "
                "(operator's setup)\")",
                ep);
        return KL_E_CONFIG;
    }
    if (!s->data || !kl_etcd_parse_error(s->data, s->len, &e)) {
        kl_errf(err, errlen,
                "etcd at %s: HTTP %ld without an etcd error "
                "(not an etcd gateway?)",
                ep, code);
        return KL_E_KEY;
    }
    kl_errf(err, errlen, "etcd at %s: %s (code %d)", ep, e.message, e.code);
    *ge = e;
    switch (e.code) {
    case G_NOT_FOUND:
    case G_OUT_OF_RANGE: return KL_E_NOT_FOUND;
    case G_DEADLINE: return KL_E_TIMEOUT;
    case G_UNAVAILABLE: *next = true; return KL_E_IO;
    default: return KL_E_BAD_VALUE;
    }
}

/* The request's headers: JSON, no "Expect", and the token when there is
 * one. NULL: out of memory. */
static struct curl_slist *headers(const char *token)
{
    char auth[KL_ETCD_TOKEN_MAX + 32];
    struct curl_slist *h = NULL, *n;
    if (!(n = curl_slist_append(h, "Content-Type: application/json")))
        goto fail;
    h = n;
    if (!(n = curl_slist_append(h, "Expect:")))
        goto fail;
    h = n;
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: %s", token);
        n = curl_slist_append(h, auth);
        explicit_bzero(auth, sizeof auth);
        if (!n)
            goto fail;
        h = n;
    }
    return h;
fail:
    curl_slist_free_all(h);
    return NULL;
}

/* One POST with failover; *ge gets etcd's error when etcd answered one
 * (code -1: none). */
static kl_status post_all(kl_etcd *c, const char *path, const char *json,
                          const char *token, char **body, size_t *len,
                          kl_etcd_error *ge, char *err, size_t errlen)
{
    *body = NULL;
    *len = 0;
    ge->code = -1;
    ge->message[0] = '\0';
    etcd_conf *f = &c->conf;
    uint64_t deadline = kl_now_ms() + (uint64_t)f->timeout_ms;
    struct curl_slist *hdr = headers(token);
    if (!hdr)
        return KL_E_NOMEM;
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
            st = http_error(code, &s, f->endpoints[ep], &next, ge, one,
                            sizeof one);
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
    /* the list holds a copy of the token: wipe it before it is freed */
    for (struct curl_slist *l = hdr; l; l = l->next)
        explicit_bzero(l->data, strlen(l->data));
    curl_slist_free_all(hdr);
    return st;
}

void etcd_auth_drop(etcd_auth *a)
{
    explicit_bzero(a->token, sizeof a->token);
}

bool etcd_auth_refused(const char *message)
{
    return strstr(message, "invalid auth token") ||
           strstr(message, "user name is empty");
}

/* {"name":..,"password":..} with JSON's escapes, into a malloc'd buffer
 * the caller wipes (no copy of the password is left elsewhere). */
static char *auth_request(const char *user, const char *pw)
{
    size_t cap = 32 + 6 * (strlen(user) + strlen(pw));
    char *b = malloc(cap);
    if (!b)
        return NULL;
    size_t n = 0;
    const char *parts[4] = {"{\"name\":\"", user, "\",\"password\":\"", pw};
    for (int p = 0; p < 4; p++) {
        for (const char *s = parts[p]; *s; s++) {
            unsigned char ch = (unsigned char)*s;
            if (p % 2 == 0)
                b[n++] = (char)ch;
            else if (ch == '"' || ch == '\\') {
                b[n++] = '\\';
                b[n++] = (char)ch;
            } else if (ch < 0x20 || ch == 0x7f)
                n += (size_t)snprintf(b + n, cap - n, "\\u%04x", ch);
            else
                b[n++] = (char)ch;
        }
    }
    b[n++] = '"';
    b[n++] = '}';
    b[n] = '\0';
    return b;
}

kl_status etcd_authenticate(kl_etcd *c, etcd_auth *a, char *err, size_t errlen)
{
    etcd_conf *f = &c->conf;
    uint64_t now = kl_now_ms();
    if (now < a->next_ms) {
        kl_errf(err, errlen, "%s (tried again in %llu ms)", a->last_err,
                (unsigned long long)(a->next_ms - now));
        return a->last_st;
    }
    char pw[KL_ETCD_PASSWORD_MAX + 1];
    char why[512] = "";
    kl_status st = read_password(f->password_file, f->any_mode, pw, sizeof pw,
                                 why, sizeof why);
    char *req = st == KL_OK ? auth_request(f->user, pw) : NULL;
    explicit_bzero(pw, sizeof pw);
    if (st == KL_OK && !req)
        return KL_E_NOMEM;
    char *body = NULL;
    size_t len = 0;
    kl_etcd_error ge = {.code = -1};
    if (st == KL_OK) {
        st = post_all(c, "/v3/auth/authenticate", req, NULL, &body, &len, &ge,
                      why, sizeof why);
        explicit_bzero(req, strlen(req));
        free(req);
    }
    if (st == KL_OK) {
        st = kl_etcd_parse_auth(body, len, a->token, sizeof a->token, why,
                                sizeof why);
        explicit_bzero(body, len);
    }
    free(body);
    if (st == KL_OK) {
        a->backoff_ms = 0;
        a->next_ms = 0;
        return KL_OK;
    }
    etcd_auth_drop(a);
    if (ge.code >= 0 && strstr(ge.message, "authentication is not enabled")) {
        /* etcd runs without auth (yet): go on without a token; a later
         * refusal ("user name is empty") authenticates again */
        a->off = true;
        return KL_OK;
    }
    if (ge.code >= 0 && strstr(ge.message, "authentication failed")) {
        st = KL_E_CONFIG;
        kl_errf(why, sizeof why,
                "etcd at %s refused user \"%s\": wrong user name or "
                "password (the password file %s)",
                kl_etcd_endpoint(c), f->user, f->password_file);
    } else if (ge.code >= 0 && st != KL_E_IO && st != KL_E_TIMEOUT) {
        st = KL_E_CONFIG;
        kl_errf(err, errlen, "etcd: authenticating as \"%s\": %s", f->user,
                why);
        snprintf(why, sizeof why, "%s", err);
    }
    if (st == KL_E_CONFIG) {
        /* a refusal: no try again before the backoff, whoever calls */
        a->backoff_ms = a->backoff_ms ? a->backoff_ms * 2 : 1000;
        if (a->backoff_ms > 30000)
            a->backoff_ms = 30000;
        a->next_ms = kl_now_ms() + (uint64_t)a->backoff_ms;
        a->last_st = st;
        snprintf(a->last_err, sizeof a->last_err, "%s", why);
    }
    kl_errf(err, errlen, "%s", why);
    return st;
}

kl_status etcd_post(kl_etcd *c, const char *path, const char *json, char **body,
                    size_t *len, char *err, size_t errlen)
{
    etcd_conf *f = &c->conf;
    for (int attempt = 0;; attempt++) {
        if (f->user && !c->auth.token[0] && !c->auth.off)
            KL_GUARD(etcd_authenticate(c, &c->auth, err, errlen));
        kl_etcd_error ge;
        kl_status st =
            post_all(c, path, json, c->auth.token[0] ? c->auth.token : NULL,
                     body, len, &ge, err, errlen);
        if (ge.code < 0 || st == KL_OK)
            return st;
        if (ge.code == G_PERMISSION_DENIED) {
            kl_errf(err, errlen,
                    "etcd at %s: permission denied: %s%s%s may not %s "
                    "there; grant it a role that may (docs/FLEET.md \"etcd "
                    "roles (operator's setup)\")",
                    kl_etcd_endpoint(c), f->user ? "etcd user \"" : "",
                    f->user ? f->user : "this client", f->user ? "\"" : "",
                    strstr(path, "/kv/range") ? "read" : "write");
            return KL_E_CONFIG;
        }
        if (!etcd_auth_refused(ge.message))
            return st;
        /* etcd does not know the token (it expired) or wants one */
        if (!f->user) {
            kl_errf(err, errlen,
                    "etcd at %s has authentication enabled: configure an "
                    "etcd user and its password file (docs/FLEET.md \"etcd "
                    "roles (operator's setup)\")",
                    kl_etcd_endpoint(c));
            return KL_E_CONFIG;
        }
        if (attempt > 0) {
            kl_errf(err, errlen,
                    "etcd at %s refused a new token of user \"%s\": %s",
                    kl_etcd_endpoint(c), f->user, ge.message);
            return KL_E_CONFIG;
        }
        etcd_auth_drop(&c->auth);
        c->auth.off = false;
    }
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
