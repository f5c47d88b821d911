/* SPDX-License-Identifier: Apache-2.0 */
/* libkeyless: the key-server client library (client issue).
 *
 * Two layers over one connection implementation (src/client/link.c):
 * - kl_target (second half of this file) is the library every client is
 *   built on (keyless-cli, keyless-bench, the provider): asynchronous,
 *   several key servers with failover, deadlines, retries within a budget,
 *   fork- and thread-safe;
 * - kl_client (first half) is one blocking connection under the caller's
 *   full control of the bytes - raw frames, chosen and duplicate ids - for
 *   protocol tests and debugging. It has no deadlines on the wire, no
 *   retries and no failover: use kl_target for anything else.
 *
 * kl_client: a blocking, pipelined key-server client.
 *
 * One kl_client is one mutually authenticated TLS connection (protocol P1)
 * to one key server. Requests are encoded into an output buffer (one
 * contiguous message each, so a message is never written as header and body
 * separately - protocol P8) and leave on kl_client_flush in as few TLS
 * writes as the socket allows; responses are matched to requests by id
 * (protocol P2) and may arrive in any order (protocol P8).
 *
 * Threading: a kl_client is used by one thread at a time.
 * Signals: a write to a connection the server has closed raises SIGPIPE;
 * the process must ignore it to get KL_E_TLS instead. */
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

/* ==== libkeyless: the asynchronous client (kl_target) =====================
 *
 * A kl_target owns connections to one or several key servers and carries
 * many requests in flight over them, each with a deadline. Two ways to use
 * it:
 * - asynchronously, from the caller's event loop: poll kl_async_fd() for
 *   readability, call kl_async_process() when it is readable, and get each
 *   answer through the completion callback given to kl_async_submit();
 * - blocking: kl_target_call() sends one request and waits for its answer.
 * Both may be mixed on one target.
 *
 * Connections. Servers are tried in the order given: requests go to the
 * first server with a usable connection; a server that refuses, times out
 * or breaks is put in backoff (exponential with jitter, backoff_min_ms ..
 * backoff_max_ms) and the next one is used ("sticky failover": the target
 * stays on a working server until it fails). A request is not kept
 * waiting for servers that cannot be reached: when every server failed to
 * connect since it was submitted, or none may be tried again before its
 * deadline, it completes at once with that failure's status (KL_E_IO for
 * a refusal; kl_target_conn_info's last_error says which). Each connection is
 * mutual TLS (protocol P1) with TCP_NODELAY, pipelined, answers matched by id
 * (protocol P2, P8); every message is written with one write (never header
 * and body separately); idle connections are pinged (0xF1) and dropped when
 * the pong does not come back.
 *
 * Deadlines (protocol P9). Every request has a budget (timeout_ms). When it
 * is written, the time left goes to the server as "deadline_ms" in the
 * request context (tag 0x16; a caller's request context keeps its other
 * members), so the server never starts work nobody waits for. A request
 * whose deadline passes before it is written is dropped unsent (callback
 * with KL_E_TIMEOUT); one in flight is answered KL_E_TIMEOUT at its
 * deadline and its late answer is discarded. Requests are NOT retried on
 * timeout. A request whose connection breaks is retried at most once, only
 * before its deadline, and only within the retry budget (retries at most
 * 10% of the requests made over a sliding 10 s window); otherwise its
 * callback gets the connection's error.
 *
 * Threading. A target is safe to share between threads: every function
 * takes the target's lock. Callbacks run without the lock held, in the
 * thread that drives the target - the one in kl_async_process(), or one
 * waiting in kl_target_call() (blocking callers take turns driving). A
 * callback may submit or cancel requests; it must not free the target.
 * The library starts no threads.
 *
 * Fork. Nothing is opened before it is needed: kl_target_new() only loads
 * the TLS credentials; sockets, the epoll/eventfd/timerfd behind
 * kl_async_fd() are created on first use, in the process that uses them.
 * Every call checks for a fork (a counter that a pthread_atfork handler
 * bumps, then getpid(): so fork through the C library's fork(), not a raw
 * clone system call): in a child of the process that used the target, the
 * first call drops the inherited state - it only close()s the
 * inherited descriptors (never writes on the parent's connections, never
 * touches the shared epoll set) - and the child connects afresh. Requests
 * in flight at the fork belong to the parent: the child forgets them
 * without callbacks. After a fork, call kl_async_fd() again in the child.
 * As with any lock, do not fork while another thread is inside a kl_target
 * call.
 *
 * Signals. Writes on a connection the server closed would raise SIGPIPE;
 * the target blocks SIGPIPE in the calling thread around its writes and
 * consumes the one it caused, so callers need not ignore it. */

typedef struct kl_target kl_target;

typedef struct kl_target_opts {
    /* Key servers in order of preference: "host:port", "[v6]:port" or
     * "host" (port 2407). At least one. */
    const char *const *servers;
    size_t nservers;
    const char *cert_file, *key_file; /* client certificate and key (PEM) */
    const char *ca_file;              /* CA the servers must chain to; NULL: the
                                         servers are NOT verified */
    const char *server_name; /* SNI and name checked; NULL: each host */
    bool tls12_only;
    int timeout_ms;         /* default request budget; 0: 5000 */
    int connect_timeout_ms; /* TCP + TLS handshake; 0: 5000 */
    int ping_interval_ms;   /* idle time before a ping; 0: 10000; < 0: off */
    int ping_timeout_ms;    /* pong wait before the connection is dropped;
                               0: 3000 */
    int backoff_min_ms;     /* first reconnect delay; 0: 50 */
    int backoff_max_ms;     /* cap; 0: 5000 */
    int max_inflight;       /* per connection; more wait unsent; 0: 1024 */
    int retry_budget_pct;   /* retries per 100 requests (10 s); 0: 10,
                               < 0: no retries */
    /* Tests only (the small-write trap's negative control): write each
     * message as header and body separately, with TCP_NODELAY off. */
    bool test_split_writes;
} kl_target_opts;

/* A request's outcome, valid during the callback only. */
typedef struct kl_result {
    /* KL_OK: the server answered (opcode/error/payload); KL_E_TIMEOUT: the
     * deadline passed (unsent, or unanswered); KL_E_CLOSED, KL_E_IO,
     * KL_E_TLS: the connection failed and the request was not retried;
     * KL_E_NOMEM and KL_E_INTERNAL for local failures. */
    kl_status status;
    uint8_t opcode;         /* KL_OP_RESPONSE, KL_OP_PONG or KL_OP_ERROR */
    uint8_t error;          /* P6 code for KL_OP_ERROR */
    const uint8_t *payload; /* NULL when empty */
    size_t payload_len;
    const uint8_t *msg; /* the whole response message */
    size_t msg_len;
    uint64_t handle;     /* as returned by kl_async_submit */
    int server;          /* index of the server written to last; -1: none */
    unsigned attempts;   /* times written (0: never sent) */
    uint64_t elapsed_ns; /* submit to completion */
} kl_result;

typedef void (*kl_result_cb)(void *arg, const kl_result *res);

/* Counters since kl_target_new (for tests, metrics and the retry-storm
 * check: `written` is every request that reached a socket). */
typedef struct kl_target_stats {
    uint64_t submitted;      /* caller requests */
    uint64_t written;        /* request messages written, retries included */
    uint64_t retries;        /* second attempts after a broken connection */
    uint64_t expired_unsent; /* deadline passed before being written */
    uint64_t cancelled;      /* cancelled by the caller */
    uint64_t timed_out;      /* deadline passed while in flight */
    uint64_t answered;       /* callbacks with KL_OK */
    uint64_t failed;         /* callbacks with a connection error */
    uint64_t connects;       /* handshakes completed */
    uint64_t connect_failures;
    uint64_t pings;       /* idle pings sent */
    uint64_t unreachable; /* failed unsent: no server could be reached */
} kl_target_stats;

/* Checks the options and loads the TLS credentials. Opens nothing. */
KL_WUR kl_status kl_target_new(const kl_target_opts *opts, kl_target **out,
                               char *err, size_t errlen);
/* Closes every connection (close_notify when in the creating process) and
 * frees the target. Pending requests are dropped without callbacks. */
void kl_target_free(kl_target *t);

/* Queues a request (spec->id is ignored: the target assigns ids) with a
 * budget of timeout_ms (0: the target's default). cb(arg, result) is called
 * exactly once, unless the request is cancelled. *handle (may be NULL)
 * names it for kl_async_cancel. The spec's bytes are copied. */
KL_WUR kl_status kl_async_submit(kl_target *t, const kl_request_spec *spec,
                                 int timeout_ms, kl_result_cb cb, void *arg,
                                 uint64_t *handle);
/* The caller gives up: an unsent request is dropped and never written; the
 * answer of one in flight is discarded. The callback is not called after
 * this returns KL_OK. KL_E_NOT_FOUND when the request already completed
 * (its callback has run or is running). */
KL_WUR kl_status kl_async_cancel(kl_target *t, uint64_t handle);
/* A descriptor that becomes readable when kl_async_process has work: I/O,
 * a deadline, a request from another thread. -1 with errno on failure. */
int kl_async_fd(kl_target *t);
/* Does all work that is due, without blocking, and runs the callbacks of
 * the requests it completed. */
KL_WUR kl_status kl_async_process(kl_target *t);

/* Blocking: sends one request with a budget of timeout_ms (0: default) and
 * waits for its outcome. KL_OK with *out holding the answer (an error
 * answer is KL_OK too: look at out->opcode/error), or the kl_result status.
 * out->tracked is true and out->rtt_ns is the elapsed time. */
KL_WUR kl_status kl_target_call(kl_target *t, const kl_request_spec *spec,
                                int timeout_ms, kl_client_result *out);

/* Blocking, optional (requests connect on their own): connects now -
 * servers in order of preference, as for requests - and waits until a
 * connection is up, every server has failed once, or timeout_ms passed
 * (0: the connect timeout per server). KL_OK, or the status of the last
 * failure (KL_E_IO refused or unreachable, KL_E_TLS, KL_E_TIMEOUT...) with
 * err naming the server and the reason. */
KL_WUR kl_status kl_target_connect(kl_target *t, int timeout_ms, char *err,
                                   size_t errlen);

/* The connection requests go to, for diagnostics (keyless-cli -v, the
 * bench's report). Copied under the lock: valid after the call. */
typedef struct kl_conn_info {
    int server;     /* index in opts.servers; -1: no connection up */
    char host[256]; /* of that server */
    uint16_t port;
    char tls_version[16]; /* "TLSv1.3" or "TLSv1.2" */
    char cipher[64];      /* e.g. "TLS_AES_256_GCM_SHA384" */
    char last_error[256]; /* the latest connection failure; "" if none */
} kl_conn_info;
void kl_target_conn_info(kl_target *t, kl_conn_info *out);

void kl_target_get_stats(kl_target *t, kl_target_stats *out);
/* Index of the server the target currently sends to, -1 when no
 * connection is up. */
int kl_target_active_server(kl_target *t);

#ifdef __cplusplus
}
#endif

#endif
