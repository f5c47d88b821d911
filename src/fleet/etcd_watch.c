/* SPDX-License-Identifier: Apache-2.0 */
/* The watch (etcd.h): one long POST /v3/watch whose answer is a stream of
 * JSON messages, one a line, read through a libcurl multi handle so that a
 * step can be bounded in time. It remembers the revision after the last
 * event delivered and, after a disconnect, watches again from there on the
 * next endpoint: no event is lost or repeated. A start revision that etcd
 * has compacted cannot be resumed: that is reported as an event of its own
 * (docs/DESIGN.md "etcd client (src/fleet)"). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/time.h"
#include "fleet/etcd_int.h"

struct kl_etcd_watch {
    etcd_conf conf;
    uint8_t *prefix;
    size_t prefix_len;
    int64_t next_rev; /* 0: from the store's revision when created */
    int64_t floor;    /* events below it were delivered before */
    size_t ep;
    CURLM *m;
    CURL *h; /* NULL: not connected */
    int fd;  /* the stream's socket, -1: none yet */
    struct curl_slist *hdr;
    char detail[CURL_ERROR_SIZE];
    char *buf; /* the message being received */
    size_t len, cap;
    bool created, compacted, failed;
    kl_status fail_st;
    char fail_msg[512];
    kl_etcd_watch_cb cb; /* the step's */
    void *arg;
    etcd_auth auth;  /* its own token (first the client's) */
    bool auth_retry; /* etcd refused the token: a new one, at once */
};

kl_status kl_etcd_watch_new(const kl_etcd *c, const void *prefix,
                            size_t prefix_len, int64_t start_rev,
                            kl_etcd_watch **out, char *err, size_t errlen)
{
    *out = NULL;
    if (start_rev < 0 || prefix_len > KL_ETCD_MAX_VALUE) {
        kl_errf(err, errlen, "etcd watch: bad start revision or prefix");
        return KL_E_BAD_VALUE;
    }
    kl_etcd_watch *w = calloc(1, sizeof *w);
    if (!w)
        return KL_E_NOMEM;
    w->prefix = malloc(prefix_len + 1);
    if (!w->prefix || etcd_conf_copy(&w->conf, &c->conf) != KL_OK) {
        free(w->prefix);
        free(w);
        return KL_E_NOMEM;
    }
    if (prefix_len)
        memcpy(w->prefix, prefix, prefix_len);
    w->prefix_len = prefix_len;
    w->next_rev = start_rev;
    w->ep = c->cur;
    w->auth = c->auth;
    if (!(w->m = curl_multi_init())) {
        kl_etcd_watch_free(w);
        return KL_E_NOMEM;
    }
    *out = w;
    return KL_OK;
}

static void disconnect(kl_etcd_watch *w)
{
    if (w->h) {
        curl_multi_remove_handle(w->m, w->h);
        curl_easy_cleanup(w->h);
        w->h = NULL;
    }
    for (struct curl_slist *l = w->hdr; l; l = l->next)
        explicit_bzero(l->data, strlen(l->data)); /* the token */
    curl_slist_free_all(w->hdr);
    w->hdr = NULL;
    w->len = 0;
    w->created = false;
}

void kl_etcd_watch_free(kl_etcd_watch *w)
{
    if (!w)
        return;
    disconnect(w);
    if (w->m)
        curl_multi_cleanup(w->m);
    etcd_conf_clear(&w->conf);
    etcd_auth_drop(&w->auth);
    free(w->prefix);
    free(w->buf);
    free(w);
}

int64_t kl_etcd_watch_next_revision(const kl_etcd_watch *w)
{
    return w->next_rev;
}

void kl_etcd_watch_restart(kl_etcd_watch *w, int64_t start_rev)
{
    disconnect(w);
    w->compacted = false;
    w->next_rev = start_rev > 0 ? start_rev : 0;
}

int kl_etcd_watch_fd(const kl_etcd_watch *w)
{
    return w->h ? w->fd : -1;
}

/* libcurl tells a socket's number only through these two callbacks while
 * a transfer runs (CURLINFO_ACTIVESOCKET is for connect-only handles). */
static int on_sockopt(void *arg, curl_socket_t s, curlsocktype purpose)
{
    kl_etcd_watch *w = arg;
    if (purpose == CURLSOCKTYPE_IPCXN)
        w->fd = (int)s;
    return CURL_SOCKOPT_OK;
}

static int on_close(void *arg, curl_socket_t s)
{
    kl_etcd_watch *w = arg;
    if ((int)s == w->fd)
        w->fd = -1;
    return close(s);
}

bool kl_etcd_watch_connected(const kl_etcd_watch *w)
{
    return w->h && w->created;
}

__attribute__((format(printf, 3, 4))) static void
fail(kl_etcd_watch *w, kl_status st, const char *fmt, ...)
{
    if (w->failed)
        return; /* the first cause is the one to tell */
    w->failed = true;
    w->fail_st = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->fail_msg, sizeof w->fail_msg, fmt, ap);
    va_end(ap);
}

/* Between the parser and the caller: drops what an earlier stream
 * delivered, advances the resume point. */
static void deliver(void *arg, const kl_etcd_event *ev)
{
    kl_etcd_watch *w = arg;
    if (ev->mod_revision < w->floor)
        return;
    if (w->cb)
        w->cb(w->arg, ev);
    if (ev->mod_revision >= w->next_rev)
        w->next_rev = ev->mod_revision + 1;
}

static void on_message(kl_etcd_watch *w, const char *line, size_t len)
{
    const char *ep = w->conf.endpoints[w->ep];
    kl_etcd_watch_msg m;
    char err[256];
    static const char cn[] = "CommonName of client";
    if (memmem(line, len, cn, sizeof cn - 1)) {
        /* etcd.c's http_error says why */
        fail(w, KL_E_CONFIG,
             "etcd at %s refuses a client certificate with a CommonName "
             "through its gateway while auth is enabled: give this client "
             "an etcd certificate without a CN (docs/FLEET.md \"etcd roles "
             "(operator's setup)\")",
             ep);
        return;
    }
    kl_status st =
        kl_etcd_parse_watch(line, len, &m, deliver, w, err, sizeof err);
    if (st != KL_OK) {
        fail(w, st, "etcd at %s: watch: %s", ep, err);
    } else if (m.error.code >= 0) {
        fail(w, KL_E_IO, "etcd at %s: watch: %s (code %d)", ep, m.error.message,
             m.error.code);
    } else if (m.compact_revision > 0) {
        w->compacted = true;
        kl_etcd_event ev = {.type = KL_ETCD_COMPACTED,
                            .key = (const uint8_t *)"",
                            .value = (const uint8_t *)"",
                            .mod_revision = m.compact_revision};
        if (w->cb)
            w->cb(w->arg, &ev);
        fail(w, KL_E_CLOSED,
             "etcd at %s: watch from revision %" PRId64
             " is compacted (up to %" PRId64 "): re-read and restart",
             ep, w->next_rev, m.compact_revision);
    } else if (m.canceled && etcd_auth_refused(m.cancel_reason)) {
        /* the token expired (or auth was turned on): a new one */
        if (w->conf.user) {
            w->auth_retry = true;
            fail(w, KL_E_CLOSED, "etcd at %s refused the watch's token: %s", ep,
                 m.cancel_reason);
        } else
            fail(w, KL_E_CONFIG,
                 "etcd at %s has authentication enabled: configure an etcd "
                 "user and its password file (docs/FLEET.md \"etcd roles "
                 "(operator's setup)\")",
                 ep);
    } else if (m.canceled && strstr(m.cancel_reason, "permission denied")) {
        fail(w, KL_E_CONFIG,
             "etcd at %s: permission denied: %s%s%s may not watch %.*s; grant "
             "it a role that may read there (docs/FLEET.md \"etcd roles "
             "(operator's setup)\")",
             ep, w->conf.user ? "etcd user \"" : "",
             w->conf.user ? w->conf.user : "this client",
             w->conf.user ? "\"" : "", (int)w->prefix_len, w->prefix);
    } else if (m.canceled) {
        fail(w, KL_E_CLOSED, "etcd at %s canceled the watch%s%s", ep,
             m.cancel_reason[0] ? ": " : "", m.cancel_reason);
    } else if (m.created) {
        w->created = true;
        if (w->next_rev == 0)
            w->next_rev = m.revision + 1;
        w->floor = w->next_rev;
    } else if (m.n_events == 0 && w->created && m.revision >= w->next_rev) {
        /* a progress notice: nothing changed up to its revision */
        w->next_rev = m.revision + 1;
    }
}

static size_t on_stream(char *p, size_t size, size_t n, void *arg)
{
    kl_etcd_watch *w = arg;
    size_t add = size * n;
    if (w->failed)
        return 0;
    if (add > w->conf.max_response - w->len) {
        fail(w, KL_E_TOO_LARGE,
             "etcd at %s: a watch message larger than %zu bytes "
             "(max_response)",
             w->conf.endpoints[w->ep], w->conf.max_response);
        return 0;
    }
    if (w->len + add > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->len + add)
            cap *= 2;
        char *b = realloc(w->buf, cap);
        if (!b) {
            fail(w, KL_E_NOMEM, "etcd watch: out of memory");
            return 0;
        }
        w->buf = b;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, p, add);
    w->len += add;
    /* one message a line (the gateway's delimiter) */
    size_t start = 0;
    for (size_t i = w->len - add; i < w->len && !w->failed; i++) {
        if (w->buf[i] != '\n')
            continue;
        if (i > start)
            on_message(w, w->buf + start, i - start);
        start = i + 1;
    }
    memmove(w->buf, w->buf + start, w->len - start);
    w->len -= start;
    return w->failed ? 0 : add;
}

/* A token for the watch, through its endpoints from the current one. */
static kl_status watch_auth(kl_etcd_watch *w, char *err, size_t errlen)
{
    kl_etcd tmp = {.conf = w->conf, .cur = w->ep, .h = curl_easy_init()};
    if (!tmp.h)
        return KL_E_NOMEM;
    kl_status st = etcd_authenticate(&tmp, &w->auth, err, errlen);
    curl_easy_cleanup(tmp.h);
    if (st == KL_OK)
        w->ep = tmp.cur;
    return st;
}

static kl_status connect_ep(kl_etcd_watch *w, char *err, size_t errlen)
{
    if (w->auth_retry) {
        etcd_auth_drop(&w->auth);
        w->auth.off = false;
        w->auth_retry = false;
    }
    if (w->conf.user && !w->auth.token[0] && !w->auth.off)
        KL_GUARD(watch_auth(w, err, errlen));
    size_t end_len;
    uint8_t *end = etcd_prefix_end(w->prefix, w->prefix_len, &end_len);
    /* an empty prefix: every key, from "\0" */
    char *key = kl_etcd_b64(w->prefix_len ? w->prefix : (const uint8_t *)"",
                            w->prefix_len ? w->prefix_len : 1);
    char *rend = end ? kl_etcd_b64(end, end_len) : NULL;
    free(end);
    char rev[24];
    snprintf(rev, sizeof rev, "%" PRId64, w->next_rev);
    json_t *req = NULL;
    if (key && rend)
        req = json_pack("{s:{s:s,s:s,s:s}}", "create_request", "key", key,
                        "range_end", rend, "start_revision", rev);
    free(key);
    free(rend);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    w->hdr = curl_slist_append(NULL, "Content-Type: application/json");
    if (w->hdr && w->auth.token[0]) {
        char a[KL_ETCD_TOKEN_MAX + 32];
        snprintf(a, sizeof a, "Authorization: %s", w->auth.token);
        struct curl_slist *n = curl_slist_append(w->hdr, a);
        explicit_bzero(a, sizeof a);
        if (!n) {
            curl_slist_free_all(w->hdr);
            w->hdr = NULL;
        } else
            w->hdr = n;
    }
    CURL *h = body && w->hdr ? curl_easy_init() : NULL;
    if (!h) {
        free(body);
        disconnect(w);
        return KL_E_NOMEM;
    }
    char url[2048];
    snprintf(url, sizeof url, "%s/v3/watch", w->conf.endpoints[w->ep]);
    etcd_curl_common(h, &w->conf);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, w->hdr);
    curl_easy_setopt(h, CURLOPT_COPYPOSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_stream);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, w);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, w->detail);
    curl_easy_setopt(h, CURLOPT_SOCKOPTFUNCTION, on_sockopt);
    curl_easy_setopt(h, CURLOPT_SOCKOPTDATA, w);
    curl_easy_setopt(h, CURLOPT_CLOSESOCKETFUNCTION, on_close);
    curl_easy_setopt(h, CURLOPT_CLOSESOCKETDATA, w);
    free(body);
    w->fd = -1;
    w->detail[0] = '\0';
    w->failed = false;
    w->len = 0;
    w->created = false;
    w->floor = w->next_rev;
    if (curl_multi_add_handle(w->m, h) != CURLM_OK) {
        curl_easy_cleanup(h);
        disconnect(w);
        return KL_E_NOMEM;
    }
    w->h = h;
    return KL_OK;
}

/* The transfer ended: why, then the next endpoint for the next step. */
static kl_status ended(kl_etcd_watch *w, CURLcode rc, char *err, size_t errlen)
{
    const char *ep = w->conf.endpoints[w->ep];
    long code = 0;
    curl_easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &code);
    /* an error answer may end without a newline */
    if (!w->failed && w->len > 0)
        on_message(w, w->buf, w->len);
    kl_status st;
    if (w->failed) {
        st = w->fail_st;
        kl_errf(err, errlen, "%s", w->fail_msg);
    } else if (rc != CURLE_OK) {
        st = etcd_curl_explain(rc, w->detail, ep, w->conf.max_response, err,
                               errlen);
    } else if (code != 200) {
        st = KL_E_IO;
        kl_errf(err, errlen, "etcd at %s: watch: HTTP %ld", ep, code);
    } else {
        st = KL_E_CLOSED;
        kl_errf(err, errlen, "etcd at %s closed the watch stream", ep);
    }
    disconnect(w);
    /* a refused token is this endpoint's answer: a new token, same place */
    if (!w->compacted && !w->auth_retry)
        w->ep = (w->ep + 1) % w->conf.n;
    return st;
}

kl_status kl_etcd_watch_step(kl_etcd_watch *w, int timeout_ms,
                             kl_etcd_watch_cb cb, void *arg, char *err,
                             size_t errlen)
{
    if (w->compacted) {
        kl_errf(err, errlen,
                "etcd watch: revision %" PRId64 " is compacted: re-read and "
                "restart",
                w->next_rev);
        return KL_E_CLOSED;
    }
    if (!w->h)
        KL_GUARD(connect_ep(w, err, errlen));
    w->cb = cb;
    bool reauthed = false;
    w->arg = arg;
    uint64_t deadline =
        kl_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    kl_status st = KL_OK;
    for (;;) {
        int running = 0;
        if (curl_multi_perform(w->m, &running) != CURLM_OK) {
            kl_errf(err, errlen, "etcd watch: libcurl failed");
            st = KL_E_INTERNAL;
            break;
        }
        int left;
        CURLMsg *msg;
        bool done = false;
        while ((msg = curl_multi_info_read(w->m, &left))) {
            if (msg->msg == CURLMSG_DONE && msg->easy_handle == w->h) {
                st = ended(w, msg->data.result, err, errlen);
                done = true;
                break;
            }
        }
        /* etcd refused the token (it expired): once a step, a new token
         * and the stream again, without the caller seeing a failure */
        if (done && w->auth_retry && !reauthed) {
            reauthed = true;
            st = connect_ep(w, err, errlen);
            if (st != KL_OK)
                break;
            done = false;
            continue;
        }
        uint64_t now = kl_now_ms();
        if (done || now >= deadline)
            break;
        int wait = (int)(deadline - now);
        if (curl_multi_poll(w->m, NULL, 0, wait, NULL) != CURLM_OK) {
            kl_errf(err, errlen, "etcd watch: libcurl poll failed");
            st = KL_E_INTERNAL;
            break;
        }
    }
    w->cb = NULL;
    w->arg = NULL;
    return st;
}
