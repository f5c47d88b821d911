/* SPDX-License-Identifier: Apache-2.0 */
/* Non-blocking mutual-TLS client connections for the bench tools
 * (storm.c, flood.c): one epoll loop drives thousands of them in one
 * thread, each a small state machine - TCP connect, TLS handshake, then
 * whatever the tool does. Header-only so that each tool stays one
 * compile command (bench/run.sh builds them with cc).
 *
 * The wire format is protocol P2/P3: an 8-byte header (version 1.0,
 * body length, id) and TLV items. */
#ifndef KL_BENCH_TLSCONN_H
#define KL_BENCH_TLSCONN_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

enum { TC_IDLE, TC_CONNECTING, TC_HANDSHAKE, TC_READY, TC_CLOSED };

typedef struct tc {
    int fd;
    SSL *ssl;
    int state;
    unsigned events; /* what epoll watches now */
} tc;

static inline uint64_t tc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* As many descriptors as the hard limit allows (10,000 connections);
 * a peer that closes is an error to count, not a signal. */
static inline void tc_process_setup(void)
{
    signal(SIGPIPE, SIG_IGN);
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) == 0) {
        r.rlim_cur = r.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &r);
    }
}

/* "HOST:PORT" with an IPv4 HOST (the bench runs on 127.0.0.1). */
static inline int tc_parse_addr(const char *s, struct sockaddr_in *sa,
                                char *host, size_t hostlen)
{
    const char *colon = strrchr(s, ':');
    if (!colon || (size_t)(colon - s) >= hostlen)
        return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = 0;
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    int port = atoi(colon + 1);
    if (port < 1 || port > 65535 ||
        inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        return -1;
    sa->sin_port = htons((uint16_t)port);
    return 0;
}

/* The client context: our certificate, the CA the server must chain to,
 * the server's IP checked against its certificate. */
static inline SSL_CTX *tc_ctx_new(const char *cert, const char *key,
                                  const char *ca, const char *ip, bool tls12)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx)
        return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (tls12)
        SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1 ||
        !X509_VERIFY_PARAM_set1_ip_asc(SSL_CTX_get0_param(ctx), ip)) {
        ERR_print_errors_fp(stderr);
        SSL_CTX_free(ctx);
        return NULL;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    return ctx;
}

static inline void tc_watch(int ep, tc *c, unsigned events, void *ptr)
{
    if (c->events == events)
        return;
    struct epoll_event e = {.events = events, .data.ptr = ptr};
    (void)epoll_ctl(ep, c->events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &e);
    c->events = events;
}

/* The source address of new connections (tc_connect), when set: floods
 * from 127.0.0.2, .3, ... are separate sources for keylessd's
 * per-source handshake limit. */
static struct sockaddr_in tc_source;

/* Starts a non-blocking TCP connect; 0 or -1 (errno). */
static inline int tc_connect(tc *c, const struct sockaddr_in *sa)
{
    c->ssl = NULL;
    c->events = 0;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return -1;
    int one = 1;
    (void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (tc_source.sin_family &&
        bind(c->fd, (const struct sockaddr *)&tc_source, sizeof tc_source)) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    if (connect(c->fd, (const struct sockaddr *)sa, sizeof *sa) != 0 &&
        errno != EINPROGRESS) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    c->state = TC_CONNECTING;
    return 0;
}

/* Maps an SSL result to the events to wait for: 0 (done), or EPOLLIN /
 * EPOLLOUT, or -1 (the connection failed). */
static inline int tc_want(tc *c, int r)
{
    switch (SSL_get_error(c->ssl, r)) {
    case SSL_ERROR_WANT_READ: return EPOLLIN;
    case SSL_ERROR_WANT_WRITE: return EPOLLOUT;
    default: return -1;
    }
}

/* Drives connect + handshake. 1: ready; 0: waiting (watched); -1: failed.
 * sess, when given, is offered for resumption. */
static inline int tc_handshake(int ep, tc *c, SSL_CTX *ctx, SSL_SESSION *sess,
                               void *ptr)
{
    if (c->state == TC_CONNECTING) {
        int err = 0;
        socklen_t l = sizeof err;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l) != 0 || err)
            return -1;
        c->ssl = SSL_new(ctx);
        if (!c->ssl || SSL_set_fd(c->ssl, c->fd) != 1)
            return -1;
        if (sess) {
            /* a copy: a failed attempt must not spoil the kept session
             * for the retry (OpenSSL marks it not resumable) */
            SSL_SESSION *d = SSL_SESSION_dup(sess);
            int ok = d && SSL_set_session(c->ssl, d) == 1;
            SSL_SESSION_free(d);
            if (!ok)
                return -1;
        }
        SSL_set_connect_state(c->ssl);
        c->state = TC_HANDSHAKE;
    }
    if (c->state != TC_HANDSHAKE)
        return 1;
    ERR_clear_error();
    int r = SSL_do_handshake(c->ssl);
    if (r == 1) {
        c->state = TC_READY;
        return 1;
    }
    int w = tc_want(c, r);
    if (w < 0)
        return -1;
    tc_watch(ep, c, (unsigned)w, ptr);
    return 0;
}

static inline void tc_close(int ep, tc *c)
{
    if (c->fd >= 0) {
        if (c->events)
            (void)epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
    }
    SSL_free(c->ssl);
    c->ssl = NULL;
    c->fd = -1;
    c->events = 0;
    c->state = TC_CLOSED;
}

/* ---- frames (protocol P2, P3) ---------------------------------------- */

static inline size_t tc_item(uint8_t *p, uint8_t tag, const void *d, size_t len)
{
    p[0] = tag;
    p[1] = (uint8_t)(len >> 8);
    p[2] = (uint8_t)len;
    if (len)
        memcpy(p + 3, d, len);
    return 3 + len;
}

static inline void tc_header(uint8_t *p, size_t body, uint32_t id)
{
    p[0] = 1;
    p[1] = 0;
    p[2] = (uint8_t)(body >> 8);
    p[3] = (uint8_t)body;
    p[4] = (uint8_t)(id >> 24);
    p[5] = (uint8_t)(id >> 16);
    p[6] = (uint8_t)(id >> 8);
    p[7] = (uint8_t)id;
}

/* A ping (0xF1) with plen payload bytes (plen <= 65535 - 7); the frame's
 * length. */
static inline size_t tc_ping(uint8_t *p, uint32_t id, size_t plen)
{
    uint8_t op = 0xF1;
    size_t n = 8;
    n += tc_item(p + n, 0x11, &op, 1);
    p[n] = 0x12;
    p[n + 1] = (uint8_t)(plen >> 8);
    p[n + 2] = (uint8_t)plen;
    memset(p + n + 3, 'p', plen);
    n += 3 + plen;
    tc_header(p, n - 8, id);
    return n;
}

/* ECDSA-SHA256 (0x15) over a 32-byte digest with the key of ski. */
static inline size_t tc_sign(uint8_t *p, uint32_t id, const uint8_t ski[20],
                             const uint8_t dg[32])
{
    uint8_t op = 0x15;
    size_t n = 8;
    n += tc_item(p + n, 0x11, &op, 1);
    n += tc_item(p + n, 0x04, ski, 20);
    n += tc_item(p + n, 0x12, dg, 32);
    tc_header(p, n - 8, id);
    return n;
}

/* The opcode item of a response body, or -1. */
static inline int tc_opcode(const uint8_t *b, size_t len)
{
    size_t i = 0;
    while (i + 3 <= len) {
        size_t l = ((size_t)b[i + 1] << 8) | b[i + 2];
        if (i + 3 + l > len)
            return -1;
        if (b[i] == 0x11 && l == 1)
            return b[i + 3];
        i += 3 + l;
    }
    return -1;
}

static inline int tc_hex20(const char *s, uint8_t out[20])
{
    if (strlen(s) != 40)
        return -1;
    for (int i = 0; i < 20; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    return 0;
}

#endif
