/* SPDX-License-Identifier: Apache-2.0 */
/* A test-only upstream key server (header only) for the router's
 * lost-request tests: mutual TLS with the test PKI, a thread per
 * connection, pongs for pings, and for every other request a fixed answer
 * naming the server ("from-<name>") - except:
 * - lose: a request whose payload starts with lose_byte is read and never
 *   answered, lose_budget times (then answered like any other; < 0: always
 *   lost) - a frame lost inside a remote that keeps answering the rest;
 * - slow: a request for slow_ski (whose payload starts with slow_byte,
 *   when that is >= 0) is answered slow_ms late, without holding up the
 *   others on its connection (a key whose work is far away; or, with
 *   slow_byte, some of one key's requests overtaken by the others - as a
 *   keylessd's pool queue is by the operations it runs inline); with
 *   slow_step_ms, the held answers leave at least that far apart, one at
 *   a time (a queue that drains as a pool works through it).
 * It counts what it saw. Faults can be changed while it runs (under mu).
 *
 *   lu_server u;
 *   lu_start(&u, "lossy");
 *   u.lose_byte = 0xdd; u.lose_budget = 1;    // under u.mu once running
 *   ... route to 127.0.0.1:u.port ...
 *   lu_stop(&u);
 */
#ifndef KL_TEST_LOSSYUP_H
#define KL_TEST_LOSSYUP_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "keyless/protocol.h"
#include "net.h"
#include "pki.h"
#include "testutil.h"
#include "tls/tls.h"

#define LU_MAX_CONNS 8
#define LU_MAX_HELD 64

typedef struct lu_server lu_server;

typedef struct lu_conn {
    lu_server *u;
    int fd;
    pthread_t th;
    bool used;
} lu_conn;

struct lu_server {
    char name[32];
    char answer[48]; /* "from-<name>" */
    int lfd;
    uint16_t port;
    kl_tls_ctx *ctx;
    pthread_t th;
    atomic_bool stop;
    pthread_mutex_t mu;
    /* faults (mu) */
    int lose_byte; /* < 0: none */
    int lose_budget;
    uint8_t slow_ski[KL_SKI_LEN];
    bool has_slow;
    int slow_byte; /* < 0: any payload */
    unsigned slow_ms;
    unsigned slow_step_ms;
    /* counters (mu) */
    unsigned requests, lost, marked, slow_seen, accepted, bad;
    lu_conn conns[LU_MAX_CONNS];
};

static inline uint64_t lu_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline bool lu_write(kl_tls_conn *t, const uint8_t *p, size_t len)
{
    while (len) {
        size_t n = 0;
        kl_io io = kl_tls_write(t, p, len, &n);
        if (io == KL_IO_WANT_WRITE || io == KL_IO_WANT_READ)
            continue;
        if (io != KL_IO_OK)
            return false;
        p += n;
        len -= n;
    }
    return true;
}

/* An answer held back (slow): its frame and when it is due. */
typedef struct lu_held {
    uint64_t due_ms;
    size_t len;
    uint8_t msg[2048]; /* a padded answer (protocol P5) */
} lu_held;

/* What to do with one request: 0 answer now, 1 lose it, 2 answer late. */
static inline int lu_judge(lu_server *u, const kl_request *req)
{
    int what = 0;
    pthread_mutex_lock(&u->mu);
    u->requests++;
    if (u->lose_byte >= 0 && req->payload.len &&
        req->payload.ptr[0] == (uint8_t)u->lose_byte) {
        u->marked++;
        if (u->lose_budget != 0) {
            if (u->lose_budget > 0)
                u->lose_budget--;
            u->lost++;
            what = 1;
        }
    }
    if (!what && u->has_slow && req->has_ski &&
        memcmp(req->ski, u->slow_ski, KL_SKI_LEN) == 0 &&
        (u->slow_byte < 0 ||
         (req->payload.len && req->payload.ptr[0] == (uint8_t)u->slow_byte))) {
        u->slow_seen++;
        what = 2;
    }
    pthread_mutex_unlock(&u->mu);
    return what;
}

static inline void lu_bad(lu_server *u)
{
    pthread_mutex_lock(&u->mu);
    u->bad++;
    pthread_mutex_unlock(&u->mu);
}

static inline void *lu_conn_main(void *arg)
{
    lu_conn *lc = arg;
    lu_server *u = lc->u;
    kl_tls_conn *t = kl_tls_conn_new(u->ctx, lc->fd, true, NULL);
    if (!t || kl_tls_handshake(t) != KL_IO_OK) {
        kl_tls_conn_free(t);
        return NULL;
    }
    static _Thread_local uint8_t buf[2 * KL_MAX_MESSAGE];
    static _Thread_local lu_held held[LU_MAX_HELD];
    size_t have = 0, nheld = 0;
    uint64_t last_due = 0;
    while (!atomic_load(&u->stop)) {
        /* answers that are due leave first, in the order they fell due */
        uint64_t now = lu_now_ms();
        int wait = 50;
        for (size_t i = 0; i < nheld;) {
            if (held[i].due_ms <= now) {
                if (!lu_write(t, held[i].msg, held[i].len))
                    goto done;
                held[i] = held[--nheld];
                continue;
            }
            if ((int)(held[i].due_ms - now) < wait)
                wait = (int)(held[i].due_ms - now);
            i++;
        }
        struct pollfd pf = {.fd = lc->fd, .events = POLLIN};
        if (poll(&pf, 1, wait) <= 0)
            continue;
        size_t n = 0;
        kl_io io = kl_tls_read(t, buf + have, sizeof buf - have, &n);
        if (io == KL_IO_WANT_READ || io == KL_IO_WANT_WRITE)
            continue;
        if (io != KL_IO_OK)
            break;
        have += n;
        kl_header h;
        size_t flen;
        while (kl_frame_peek(buf, have, &h, &flen) == KL_OK) {
            kl_request req;
            static _Thread_local uint8_t out[KL_MAX_MESSAGE];
            size_t olen = 0;
            int what = 0;
            kl_status st = kl_request_parse(buf + 8, flen - 8, &req);
            if (st == KL_OK && req.opcode == KL_OP_PING) {
                st =
                    kl_response_encode(out, sizeof out, h.id, KL_OP_PONG,
                                       req.payload.ptr, req.payload.len, &olen);
            } else if (st == KL_OK) {
                what = lu_judge(u, &req);
                st = kl_response_encode(out, sizeof out, h.id, KL_OP_RESPONSE,
                                        (const uint8_t *)u->answer,
                                        strlen(u->answer), &olen);
            }
            if (st != KL_OK) {
                lu_bad(u); /* checked on the test's thread */
                goto done;
            }
            if (what == 2 && nheld < LU_MAX_HELD &&
                olen <= sizeof held[0].msg) {
                pthread_mutex_lock(&u->mu);
                unsigned ms = u->slow_ms, step = u->slow_step_ms;
                pthread_mutex_unlock(&u->mu);
                uint64_t due = lu_now_ms() + ms;
                if (step && due < last_due + step)
                    due = last_due + step;
                held[nheld].due_ms = last_due = due;
                held[nheld].len = olen;
                memcpy(held[nheld].msg, out, olen);
                nheld++;
            } else if (what == 0 && !lu_write(t, out, olen)) {
                goto done;
            }
            memmove(buf, buf + flen, have - flen);
            have -= flen;
        }
    }
done:
    kl_tls_conn_free(t);
    return NULL;
}

static inline void *lu_main(void *arg)
{
    lu_server *u = arg;
    while (!atomic_load(&u->stop)) {
        struct pollfd pf = {.fd = u->lfd, .events = POLLIN};
        if (poll(&pf, 1, 50) <= 0)
            continue;
        int fd = accept4(u->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        lu_conn *lc = NULL;
        pthread_mutex_lock(&u->mu);
        u->accepted++;
        for (int i = 0; i < LU_MAX_CONNS && !lc; i++)
            if (!u->conns[i].used)
                lc = &u->conns[i];
        if (lc) {
            lc->used = true;
            lc->u = u;
            lc->fd = fd;
        }
        pthread_mutex_unlock(&u->mu);
        if (!lc || pthread_create(&lc->th, NULL, lu_conn_main, lc) != 0) {
            if (lc)
                lc->used = false;
            close(fd);
        }
    }
    for (int i = 0; i < LU_MAX_CONNS; i++)
        if (u->conns[i].used) {
            pthread_join(u->conns[i].th, NULL);
            close(u->conns[i].fd);
        }
    return NULL;
}

static inline void lu_start(lu_server *u, const char *name)
{
    memset(u, 0, sizeof *u);
    snprintf(u->name, sizeof u->name, "%s", name);
    snprintf(u->answer, sizeof u->answer, "from-%s", name);
    u->lose_byte = -1;
    u->slow_byte = -1;
    atomic_init(&u->stop, false);
    pthread_mutex_init(&u->mu, NULL);
    char err[512];
    kl_tls_opts o = {.cert_file = tp_path("server.crt"),
                     .key_file = tp_path("server.key"),
                     .ca_file = tp_path("ca.crt")};
    u->ctx = kl_tls_server_ctx_new(&o, err, sizeof err);
    if (!u->ctx)
        fail_msg("lossy upstream TLS: %s", err);
    u->lfd = tn_listen(16, &u->port);
    assert_int_equal(pthread_create(&u->th, NULL, lu_main, u), 0);
}

static inline void lu_stop(lu_server *u)
{
    atomic_store(&u->stop, true);
    pthread_join(u->th, NULL);
    close(u->lfd);
    kl_tls_ctx_free(u->ctx);
    pthread_mutex_destroy(&u->mu);
}

/* A counter read under the lock: lu_get(&u, &u.lost). */
static inline unsigned lu_get(lu_server *u, const unsigned *field)
{
    pthread_mutex_lock(&u->mu);
    unsigned v = *field;
    pthread_mutex_unlock(&u->mu);
    return v;
}

#endif
