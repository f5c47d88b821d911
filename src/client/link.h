/* SPDX-License-Identifier: Apache-2.0 */
/* One client connection's socket and bytes: resolving and connecting
 * (non-blocking, TCP_NODELAY), the TLS handshake, and moving bytes between
 * TLS and the pure pipeline state (pipeline.h).
 *
 * Both client layers are built on it: kl_client (client.c) waits with
 * poll() between steps, the target's connections (tconn.c) are driven by
 * epoll. Nothing here blocks. */
#ifndef KL_CLIENT_LINK_H
#define KL_CLIENT_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <netdb.h>

#include "client/pipeline.h"
#include "core/status.h"
#include "tls/tls.h"

typedef struct kl_link {
    int fd; /* -1: none */
    kl_tls_conn *tls;
    kl_pipeline pipe;
    /* The small-write trap's negative control (tests only): each message
     * leaves as two writes, header then body. */
    bool split;
    size_t split_left; /* bytes left of the piece being written */
    size_t split_next; /* and of the body that follows the header */
} kl_link;

void kl_link_init(kl_link *l);
/* Sends close_notify when notify is set (best effort), frees the TLS
 * session, closes the socket and empties the pipeline (ids outstanding are
 * forgotten). The link can connect again. */
void kl_link_reset(kl_link *l, bool notify);
/* Frees everything for good. */
void kl_link_free(kl_link *l);

/* getaddrinfo for a stream socket, retrying without AI_ADDRCONFIG (which
 * hides ::1 on hosts without a global IPv6 address). err names host and
 * reason. Free *res with freeaddrinfo. */
KL_WUR kl_status kl_link_resolve(const char *host, uint16_t port,
                                 struct addrinfo **res, char *err,
                                 size_t errlen);

/* Opens a non-blocking socket to one address and starts connecting.
 * TCP_NODELAY is on unless l->split (protocol P8: small messages must not
 * wait for Nagle's algorithm). KL_OK: wait for writability, then
 * kl_link_connected; KL_E_IO with why on failure (the socket is closed). */
KL_WUR kl_status kl_link_connect(kl_link *l, const struct addrinfo *ai,
                                 char *why, size_t whylen);
/* Whether the connect finished: KL_OK, KL_E_AGAIN (still in progress),
 * KL_E_IO (refused, unreachable...: why). */
KL_WUR kl_status kl_link_connected(kl_link *l, char *why, size_t whylen);

/* Wraps the connected socket in a client TLS session. */
KL_WUR kl_status kl_link_tls_start(kl_link *l, kl_tls_ctx *ctx,
                                   const char *server_name);
/* One handshake step: KL_OK when done, KL_E_AGAIN with *want (POLLIN or
 * POLLOUT) to wait for, KL_E_CLOSED or KL_E_TLS on failure (see
 * kl_link_why). */
KL_WUR kl_status kl_link_handshake(kl_link *l, short *want);

/* Hands the pipeline's encoded requests to TLS until all are taken or the
 * socket would block. KL_OK with *want 0 (all written) or POLLIN/POLLOUT
 * (what a retry waits for); KL_E_CLOSED or KL_E_TLS when the connection
 * broke. *wrote tells whether any byte left. */
KL_WUR kl_status kl_link_write(kl_link *l, short *want, bool *wrote);
/* Reads what TLS has into the pipeline until it would block: KL_OK;
 * KL_E_CLOSED (orderly close), KL_E_TLS, or KL_E_TOO_LARGE (too many
 * unread responses). *got tells whether any byte arrived (also on error:
 * frames read before a close are still to be taken from the pipeline). */
KL_WUR kl_status kl_link_read(kl_link *l, bool *got);

/* A line for a failure status of the functions above. */
const char *kl_link_why(const kl_link *l, kl_status st);

#endif
