/* libkeyless, first form: a blocking, pipelined key-server client.
 *
 * One kl_client is one mutually authenticated TLS connection (protocol P1)
 * to one key server. Requests are encoded into an output buffer (one
 * contiguous message each, so a message is never written as header and body
 * separately - protocol P8) and leave on kl_client_flush in as few TLS
 * writes as the socket allows; responses are matched to requests by id
 * (protocol P2) and may arrive in any order (protocol P8).
 *
 * The request bookkeeping (ids, encoding, framing of responses) is pure and
 * lives apart from the socket I/O, so the asynchronous library of the
 * client issue can drive the same state from an event loop: kl_client_fd()
 * is the descriptor to poll.
 *
 * Threading: a kl_client is used by one thread at a time.
 * Signals: a write to a connection the server has closed raises SIGPIPE;
 * the process must ignore it (keyless-cli does) to get KL_E_TLS instead. */
#ifndef KEYLESS_CLIENT_H
#define KEYLESS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keyless/protocol.h"
#include "keyless/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kl_client kl_client;

typedef struct kl_client_opts {
    const char *host;        /* name or IPv4/IPv6 literal; NULL: 127.0.0.1 */
    uint16_t port;           /* 0: KL_DEFAULT_PORT (2407) */
    const char *cert_file;   /* client certificate (PEM chain); NULL: none */
    const char *key_file;    /* its private key (PEM) */
    const char *ca_file;     /* CA the server certificate must chain to;
                                NULL: the server is NOT verified */
    const char *server_name; /* SNI and name checked in the server
                                certificate; NULL: host */
    bool tls12_only;         /* negotiate TLS 1.2 (compatibility profile) */
    int connect_timeout_ms;  /* TCP connect + TLS handshake; 0: 10 s */
} kl_client_opts;

/* A response as received. The message bytes are owned by the result and
 * released by kl_client_result_free(). */
typedef struct kl_client_result {
    uint32_t id;
    uint8_t opcode;         /* KL_OP_RESPONSE, KL_OP_PONG or KL_OP_ERROR */
    uint8_t error;          /* P6 code for KL_OP_ERROR, else KL_ERR_NONE */
    const uint8_t *payload; /* points into msg; NULL when empty */
    size_t payload_len;
    uint8_t *msg; /* the whole message: header, items, padding */
    size_t msg_len;
    bool tracked;    /* the id was outstanding on this connection */
    uint64_t rtt_ns; /* since the request was queued (0: untracked) */
} kl_client_result;

void kl_client_result_free(kl_client_result *r);

/* Connects (TCP with TCP_NODELAY, then the TLS handshake), bounded by
 * opts->connect_timeout_ms. On failure returns the status and writes a line
 * naming what failed (address, TLS reason) into err. */
KL_WUR kl_status kl_client_connect(const kl_client_opts *opts, kl_client **out,
                                   char *err, size_t errlen);

/* Queues one request with a fresh id (unique among the ids outstanding on
 * this connection; spec->id is ignored) and returns it in *id_out. Nothing
 * is written until kl_client_flush (or a call that waits). */
KL_WUR kl_status kl_client_send(kl_client *c, const kl_request_spec *spec,
                                uint32_t *id_out);

/* Queues one request with exactly spec->id. Duplicate ids are legal on the
 * wire (protocol P2); their responses are matched in arrival order. */
KL_WUR kl_status kl_client_send_with_id(kl_client *c,
                                        const kl_request_spec *spec);

/* Queues raw bytes as they are (tests: malformed frames). The ids of the
 * complete frames they contain are tracked like any request. */
KL_WUR kl_status kl_client_send_raw(kl_client *c, const void *bytes,
                                    size_t len);

/* Writes everything queued, reading (and keeping) responses meanwhile so a
 * deep pipeline cannot deadlock. timeout_ms < 0: no limit. */
KL_WUR kl_status kl_client_flush(kl_client *c, int timeout_ms);

/* Returns the next response, whatever its id: first those kept while
 * kl_client_call waited for another id, then the stream's. Flushes queued
 * requests first. KL_E_TIMEOUT when none arrives in timeout_ms (< 0: no
 * limit), KL_E_CLOSED when the server closed the connection (after every
 * complete response it sent has been returned), KL_E_TLS / KL_E_IO on a
 * broken connection, KL_E_BAD_VALUE for a malformed response (the frame is
 * skipped; the connection stays usable). */
KL_WUR kl_status kl_client_recv(kl_client *c, int timeout_ms,
                                kl_client_result *out);

/* Sends one request and waits up to timeout_ms for its response; other
 * responses read meanwhile are kept for kl_client_recv. On KL_E_TIMEOUT
 * the request is cancelled: its late response is dropped. */
KL_WUR kl_status kl_client_call(kl_client *c, const kl_request_spec *spec,
                                int timeout_ms, kl_client_result *out);

/* Forgets one outstanding request with this id: its response, when it
 * comes, is dropped. KL_E_NOT_FOUND if no such request is outstanding. */
KL_WUR kl_status kl_client_cancel(kl_client *c, uint32_t id);

/* Requests written or queued whose responses have not been received. */
size_t kl_client_outstanding(const kl_client *c);
/* Bytes queued but not yet written. */
size_t kl_client_unsent(const kl_client *c);

/* The socket (to poll, or for tests that inspect it). */
int kl_client_fd(const kl_client *c);
/* "TLSv1.3" / "TLSv1.2" and the cipher negotiated. */
const char *kl_client_tls_version(const kl_client *c);
const char *kl_client_tls_cipher(const kl_client *c);
/* A line describing the last failure on this connection. */
const char *kl_client_last_error(const kl_client *c);

/* Sends close_notify (best effort), closes the socket, frees everything.
 * NULL is fine. */
void kl_client_close(kl_client *c);

#ifdef __cplusplus
}
#endif

#endif
