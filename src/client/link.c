/* SPDX-License-Identifier: Apache-2.0 */
/* A client connection's socket and bytes: see link.h. */
#include "client/link.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void kl_link_init(kl_link *l)
{
    memset(l, 0, sizeof *l);
    l->fd = -1;
    kl_pipeline_init(&l->pipe);
}

void kl_link_reset(kl_link *l, bool notify)
{
    if (l->tls) {
        if (notify)
            kl_tls_shutdown(l->tls);
        kl_tls_conn_free(l->tls); /* memory only: SSL_free writes nothing */
    }
    l->tls = NULL;
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
    l->split_left = l->split_next = 0;
    kl_pipeline_free(&l->pipe);
    kl_pipeline_init(&l->pipe);
}

void kl_link_free(kl_link *l)
{
    kl_link_reset(l, false);
    kl_pipeline_free(&l->pipe);
}

kl_status kl_link_resolve(const char *host, uint16_t port,
                          struct addrinfo **res, char *err, size_t errlen)
{
    struct addrinfo hints;
    char portstr[8];
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_ADDRCONFIG;
    snprintf(portstr, sizeof portstr, "%u", (unsigned)port);
    *res = NULL;
    int gr = getaddrinfo(host, portstr, &hints, res);
    if (gr != 0) {
        hints.ai_flags = 0;
        gr = getaddrinfo(host, portstr, &hints, res);
    }
    if (gr != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(gr));
        return KL_E_IO;
    }
    return KL_OK;
}

kl_status kl_link_connect(kl_link *l, const struct addrinfo *ai, char *why,
                          size_t whylen)
{
    l->fd =
        socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
               ai->ai_protocol);
    if (l->fd < 0) {
        snprintf(why, whylen, "socket: %s", strerror(errno));
        return KL_E_IO;
    }
    int nodelay = l->split ? 0 : 1;
    (void)setsockopt(l->fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof nodelay);
    if (connect(l->fd, ai->ai_addr, ai->ai_addrlen) != 0 &&
        errno != EINPROGRESS) {
        snprintf(why, whylen, "%s", strerror(errno));
        close(l->fd);
        l->fd = -1;
        return KL_E_IO;
    }
    return KL_OK;
}

kl_status kl_link_connected(kl_link *l, char *why, size_t whylen)
{
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr) {
        snprintf(why, whylen, "%s", strerror(soerr ? soerr : errno));
        return KL_E_IO;
    }
    struct pollfd p = {.fd = l->fd, .events = POLLOUT};
    return poll(&p, 1, 0) > 0 ? KL_OK : KL_E_AGAIN;
}

kl_status kl_link_tls_start(kl_link *l, kl_tls_ctx *ctx,
                            const char *server_name)
{
    l->tls = kl_tls_conn_new(ctx, l->fd, false, server_name);
    return l->tls ? KL_OK : KL_E_TLS;
}

static kl_status io_failure(kl_io r)
{
    return r == KL_IO_EOF ? KL_E_CLOSED : KL_E_TLS;
}

kl_status kl_link_handshake(kl_link *l, short *want)
{
    kl_io r = kl_tls_handshake(l->tls);
    *want = 0;
    if (r == KL_IO_OK)
        return KL_OK;
    if (r == KL_IO_WANT_READ || r == KL_IO_WANT_WRITE) {
        *want = r == KL_IO_WANT_READ ? POLLIN : POLLOUT;
        return KL_E_AGAIN;
    }
    return io_failure(r);
}

/* How much of the len bytes at p the next write may take: everything,
 * except in split mode, where a message's header and body are two
 * pieces. */
static size_t piece(kl_link *l, const uint8_t *p, size_t len)
{
    if (!l->split)
        return len;
    if (!l->split_left) {
        kl_header h;
        if (l->split_next) {
            l->split_left = l->split_next; /* the body */
            l->split_next = 0;
        } else if (kl_header_decode(p, len, &h) == KL_OK) {
            l->split_left = KL_HEADER_LEN; /* the header alone */
            l->split_next = h.length;
        } else {
            l->split_left = len;
        }
    }
    return len > l->split_left ? l->split_left : len;
}

kl_status kl_link_write(kl_link *l, short *want, bool *wrote)
{
    *want = 0;
    for (;;) {
        size_t len, n = 0;
        const uint8_t *p = kl_pipeline_out(&l->pipe, &len);
        if (!len)
            return KL_OK;
        /* Every queued message in one write: each is contiguous, and the
         * TLS layer cuts records, never messages into header and body. */
        kl_io r = kl_tls_write(l->tls, p, piece(l, p, len), &n);
        if (r == KL_IO_OK) {
            kl_pipeline_out_done(&l->pipe, n);
            if (l->split)
                l->split_left -= n;
            *wrote = true;
            continue;
        }
        if (r == KL_IO_WANT_WRITE || r == KL_IO_WANT_READ) {
            *want = r == KL_IO_WANT_WRITE ? POLLOUT : POLLIN;
            return KL_OK;
        }
        return io_failure(r);
    }
}

kl_status kl_link_read(kl_link *l, bool *got)
{
    for (;;) {
        uint8_t *dst;
        size_t cap, n = 0;
        if (kl_pipeline_in_space(&l->pipe, &dst, &cap) != KL_OK)
            return KL_E_TOO_LARGE;
        kl_io r = kl_tls_read(l->tls, dst, cap, &n);
        if (r == KL_IO_OK) {
            kl_pipeline_in_commit(&l->pipe, n);
            *got = true;
            continue;
        }
        if (r == KL_IO_WANT_READ || r == KL_IO_WANT_WRITE)
            return KL_OK;
        return io_failure(r);
    }
}

const char *kl_link_why(const kl_link *l, kl_status st)
{
    switch (st) {
    case KL_E_CLOSED: return "connection closed by the server";
    case KL_E_TOO_LARGE: return "too many unread responses";
    case KL_E_TLS:
        return l->tls ? kl_tls_last_error(l->tls)
                      : "cannot create a TLS connection";
    default: return kl_status_str(st);
    }
}
