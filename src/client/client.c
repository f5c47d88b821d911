/* SPDX-License-Identifier: Apache-2.0 */
/* kl_client: one connection driven by blocking calls. The steps (connect,
 * handshake, moving bytes between TLS and the pipeline) are the link's
 * (link.c), shared with the asynchronous target; this file adds the waits.
 * The socket is non-blocking and every wait is a poll() with a deadline, so
 * each call is bounded and a write that would block still reads (a deep
 * pipeline must never deadlock against a server that stops reading while
 * its responses wait to be read - protocol P8 backpressure). */
#include "keyless/client.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/link.h"
#include "core/time.h"
#include "tls/tls.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 10000
/* Responses kept while kl_client_call waits for another id. */
typedef struct kept_queue {
    kl_client_result *items;
    size_t head, count, cap;
} kept_queue;

struct kl_client {
    kl_tls_ctx *ctx;
    kl_link ln; /* socket, TLS, pipeline */
    kept_queue kept;
    kl_status dead; /* KL_OK while usable; else why it is not */
    char err[256];
};

static void set_err(kl_client *c, const char *fmt, const char *a)
{
    snprintf(c->err, sizeof c->err, fmt, a ? a : "");
}

/* ---- time -------------------------------------------------------------- */

static uint64_t deadline_after(int timeout_ms)
{
    if (timeout_ms < 0)
        return UINT64_MAX;
    return kl_now_ns() + kl_ms_to_ns((uint64_t)timeout_ms);
}

/* Milliseconds left until deadline for poll(): -1 forever, 0 passed. */
static int ms_left(uint64_t deadline)
{
    if (deadline == UINT64_MAX)
        return -1;
    uint64_t now = kl_now_ns();
    if (now >= deadline)
        return 0;
    uint64_t ms = (deadline - now + KL_NS_PER_MS - 1) / KL_NS_PER_MS;
    return ms > 60000000ull ? 60000000 : (int)ms;
}

/* Waits for events on fd until deadline: KL_OK when ready, KL_E_TIMEOUT. */
static kl_status wait_fd(int fd, short events, uint64_t deadline)
{
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = events};
        int left = ms_left(deadline);
        int r = poll(&pfd, 1, left);
        if (r > 0)
            return KL_OK;
        if (r == 0)
            return KL_E_TIMEOUT;
        if (errno != EINTR)
            return KL_E_IO;
    }
}

/* ---- connect ----------------------------------------------------------- */

/* Waits for one step of the link: writable after a connect, or what the
 * handshake wants. */
static kl_status link_wait(kl_client *c, short ev, uint64_t deadline,
                           const char *what)
{
    kl_status st = wait_fd(c->ln.fd, ev, deadline);
    if (st == KL_E_TIMEOUT)
        set_err(c, "%s timed out", what);
    else if (st != KL_OK)
        set_err(c, "poll: %s", strerror(errno));
    return st;
}

/* TCP to each address in turn until one accepts, within the deadline. */
static kl_status tcp_connect(kl_client *c, const char *host, uint16_t port,
                             uint64_t deadline, char *err, size_t errlen)
{
    struct addrinfo *res = NULL;
    KL_GUARD(kl_link_resolve(host, port, &res, err, errlen));
    kl_status st = KL_E_IO;
    snprintf(c->err, sizeof c->err, "no address");
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        st = kl_link_connect(&c->ln, ai, c->err, sizeof c->err);
        while (st == KL_OK) {
            st = link_wait(c, POLLOUT, deadline, "connect");
            if (st == KL_OK)
                st = kl_link_connected(&c->ln, c->err, sizeof c->err);
            if (st == KL_OK)
                break;
            if (st == KL_E_AGAIN)
                st = KL_OK; /* keep waiting */
        }
        if (st == KL_OK)
            break;
        kl_link_reset(&c->ln, false);
        if (ms_left(deadline) == 0)
            break;
    }
    freeaddrinfo(res);
    if (st != KL_OK)
        snprintf(err, errlen, "cannot connect to %s port %u: %s", host,
                 (unsigned)port, c->err);
    return st == KL_OK || st == KL_E_TIMEOUT ? st : KL_E_IO;
}

static kl_status handshake(kl_client *c, uint64_t deadline)
{
    for (;;) {
        short want;
        kl_status st = kl_link_handshake(&c->ln, &want);
        if (st == KL_OK)
            return KL_OK;
        if (st == KL_E_AGAIN) {
            KL_GUARD(link_wait(c, want, deadline, "TLS handshake"));
            continue;
        }
        set_err(c, "TLS handshake failed: %s", kl_link_why(&c->ln, st));
        return st;
    }
}

kl_status kl_client_connect(const kl_client_opts *o, kl_client **out, char *err,
                            size_t errlen)
{
    char dummy[8];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = 0;
    *out = NULL;
    const char *host = o->host && *o->host ? o->host : "127.0.0.1";
    uint16_t port = o->port ? o->port : KL_DEFAULT_PORT;
    int tmo = o->connect_timeout_ms > 0 ? o->connect_timeout_ms
                                        : DEFAULT_CONNECT_TIMEOUT_MS;
    uint64_t deadline = deadline_after(tmo);

    kl_client *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return KL_E_NOMEM;
    }
    kl_link_init(&c->ln);

    kl_tls_opts topts = {.cert_file = o->cert_file,
                         .key_file = o->key_file,
                         .ca_file = o->ca_file,
                         .tls12_only = o->tls12_only};
    c->ctx = kl_tls_client_ctx_new(&topts, err, errlen);
    if (!c->ctx) {
        kl_client_close(c);
        return KL_E_CONFIG;
    }
    kl_status st = tcp_connect(c, host, port, deadline, err, errlen);
    if (st != KL_OK) {
        kl_client_close(c);
        return st;
    }
    const char *sn = o->server_name && *o->server_name ? o->server_name : host;
    if (kl_link_tls_start(&c->ln, c->ctx, sn) != KL_OK) {
        snprintf(err, errlen, "cannot create a TLS connection");
        kl_client_close(c);
        return KL_E_TLS;
    }
    st = handshake(c, deadline);
    if (st != KL_OK) {
        snprintf(err, errlen, "%s port %u: %s", host, (unsigned)port, c->err);
        kl_client_close(c);
        return st;
    }
    *out = c;
    return KL_OK;
}

/* ---- queueing ----------------------------------------------------------- */

kl_status kl_client_send(kl_client *c, const kl_request_spec *spec,
                         uint32_t *id_out)
{
    KL_ENSURE(c->dead == KL_OK, c->dead);
    return kl_pipeline_queue(&c->ln.pipe, spec, true, id_out, kl_now_ns());
}

kl_status kl_client_send_with_id(kl_client *c, const kl_request_spec *spec)
{
    KL_ENSURE(c->dead == KL_OK, c->dead);
    return kl_pipeline_queue(&c->ln.pipe, spec, false, NULL, kl_now_ns());
}

kl_status kl_client_send_raw(kl_client *c, const void *bytes, size_t len)
{
    KL_ENSURE(c->dead == KL_OK, c->dead);
    return kl_pipeline_queue_raw(&c->ln.pipe, bytes, len, kl_now_ns());
}

kl_status kl_client_cancel(kl_client *c, uint32_t id)
{
    return kl_reqtable_cancel(&c->ln.pipe.reqs, id);
}

size_t kl_client_outstanding(const kl_client *c)
{
    return kl_reqtable_count(&c->ln.pipe.reqs);
}

size_t kl_client_unsent(const kl_client *c)
{
    size_t n;
    (void)kl_pipeline_out(&c->ln.pipe, &n);
    return n;
}

/* ---- moving bytes ------------------------------------------------------ */

static kl_status mark_dead(kl_client *c, kl_status st, const char *why)
{
    if (c->dead == KL_OK) {
        c->dead = st;
        set_err(c, "%s", why);
    }
    return st;
}

/* Reads whatever TLS has for us without blocking. *progress tells whether
 * any byte arrived. A close by the server marks the connection dead but is
 * reported only once its last complete responses have been returned. */
static void read_some(kl_client *c, bool *progress)
{
    kl_status st = kl_link_read(&c->ln, progress);
    if (st != KL_OK)
        mark_dead(c, st, kl_link_why(&c->ln, st));
}

/* Hands queued bytes to TLS without blocking. *want is the event a retry
 * waits for (0 when everything was written). */
static kl_status write_some(kl_client *c, bool *progress, short *want)
{
    kl_status st = kl_link_write(&c->ln, want, progress);
    return st == KL_OK ? KL_OK : mark_dead(c, st, kl_link_why(&c->ln, st));
}

/* One round of I/O: write what we can, read what there is; when neither
 * moved, wait until the socket is ready (readable too when need_read or
 * while a write is blocked) or the deadline passes. */
static kl_status pump(kl_client *c, uint64_t deadline, bool need_read)
{
    bool progress = false;
    short want = 0;

    if (c->dead == KL_OK)
        KL_GUARD(write_some(c, &progress, &want));
    if (c->dead == KL_OK)
        read_some(c, &progress);
    if (progress || c->dead != KL_OK)
        return KL_OK;
    if (kl_tls_pending(c->ln.tls) > 0)
        return KL_OK; /* decrypted bytes wait inside TLS: read them */
    short ev = want;
    if (need_read || want == POLLOUT)
        ev |= POLLIN; /* while a write blocks, keep draining responses */
    if (!ev)
        return KL_OK;
    kl_status st = wait_fd(c->ln.fd, ev, deadline);
    if (st == KL_E_IO)
        return mark_dead(c, KL_E_IO, strerror(errno));
    return st;
}

kl_status kl_client_flush(kl_client *c, int timeout_ms)
{
    uint64_t deadline = deadline_after(timeout_ms);
    while (kl_client_unsent(c)) {
        KL_ENSURE(c->dead == KL_OK, c->dead);
        kl_status st = pump(c, deadline, false);
        if (st == KL_E_TIMEOUT) {
            set_err(c, "write timed out%s", NULL);
            return st;
        }
        KL_GUARD(st);
    }
    return KL_OK;
}

/* ---- kept responses ----------------------------------------------------- */

static kl_status keep(kl_client *c, kl_client_result *r)
{
    kept_queue *q = &c->kept;
    if (q->count == q->cap) {
        size_t ncap = q->cap ? q->cap * 2 : 16;
        kl_client_result *n = malloc(ncap * sizeof *n);
        KL_ENSURE(n != NULL, KL_E_NOMEM);
        for (size_t i = 0; i < q->count; i++)
            n[i] = q->items[(q->head + i) % q->cap];
        free(q->items);
        q->items = n;
        q->cap = ncap;
        q->head = 0;
    }
    q->items[(q->head + q->count) % q->cap] = *r;
    q->count++;
    memset(r, 0, sizeof *r);
    return KL_OK;
}

static bool take_kept(kl_client *c, kl_client_result *out)
{
    kept_queue *q = &c->kept;
    if (!q->count)
        return false;
    *out = q->items[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    return true;
}

/* The next response from the stream (not the kept queue). */
static kl_status next_from_stream(kl_client *c, uint64_t deadline,
                                  kl_client_result *out)
{
    for (;;) {
        kl_status st = kl_pipeline_next(&c->ln.pipe, out, kl_now_ns());
        if (st != KL_E_AGAIN)
            return st;
        if (c->dead != KL_OK)
            return c->dead;
        st = pump(c, deadline, true);
        if (st == KL_E_TIMEOUT && !kl_pipeline_has_frame(&c->ln.pipe)) {
            set_err(c, "no response in time%s", NULL);
            return st;
        }
        if (st != KL_OK && st != KL_E_TIMEOUT)
            return st;
    }
}

kl_status kl_client_recv(kl_client *c, int timeout_ms, kl_client_result *out)
{
    memset(out, 0, sizeof *out);
    if (take_kept(c, out))
        return KL_OK;
    return next_from_stream(c, deadline_after(timeout_ms), out);
}

kl_status kl_client_call(kl_client *c, const kl_request_spec *spec,
                         int timeout_ms, kl_client_result *out)
{
    uint64_t deadline = deadline_after(timeout_ms);
    uint32_t id;

    memset(out, 0, sizeof *out);
    KL_GUARD(kl_client_send(c, spec, &id));
    for (;;) {
        kl_client_result r;
        kl_status st = next_from_stream(c, deadline, &r);
        if (st == KL_E_TIMEOUT) {
            /* Nobody waits for it any more: drop its late answer. */
            kl_status cs = kl_client_cancel(c, id);
            (void)cs; /* cannot fail: the request is still outstanding */
            return st;
        }
        if (st == KL_E_BAD_VALUE)
            continue; /* someone else's malformed frame */
        KL_GUARD(st);
        if (r.tracked && r.id == id) {
            *out = r;
            return KL_OK;
        }
        st = keep(c, &r);
        if (st != KL_OK) {
            kl_client_result_free(&r);
            return st;
        }
    }
}

/* ---- introspection and close ------------------------------------------- */

int kl_client_fd(const kl_client *c)
{
    return c->ln.fd;
}

const char *kl_client_tls_version(const kl_client *c)
{
    return kl_tls_version(c->ln.tls);
}

const char *kl_client_tls_cipher(const kl_client *c)
{
    return kl_tls_cipher(c->ln.tls);
}

const char *kl_client_last_error(const kl_client *c)
{
    return c->err[0] ? c->err : "no error";
}

void kl_client_close(kl_client *c)
{
    if (!c)
        return;
    kl_link_reset(&c->ln, c->dead == KL_OK);
    kl_tls_ctx_free(c->ctx);
    kl_client_result r;
    while (take_kept(c, &r))
        kl_client_result_free(&r);
    free(c->kept.items);
    kl_link_free(&c->ln);
    free(c);
}
