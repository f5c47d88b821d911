/* SPDX-License-Identifier: Apache-2.0 */
/* All of OpenSSL's SSL_* API lives behind this interface:
 * context building for the server and the client, and non-blocking (or
 * blocking) record I/O on a socket with one translation of SSL_get_error.
 * Nothing outside src/tls calls SSL_*. */
#ifndef KL_TLS_TLS_H
#define KL_TLS_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct kl_tls_ctx kl_tls_ctx;
typedef struct kl_tls_conn kl_tls_conn;

typedef struct kl_tls_opts {
    const char *cert_file; /* PEM chain: own certificate first */
    const char *key_file;  /* PEM private key for cert_file */
    const char *ca_file;   /* PEM CA(s) that peer certificates must chain to;
                              the system store is never used (P1) */
    bool disable_tls13;    /* server: offer TLS 1.2 only */
    bool tls12_only;       /* client: negotiate TLS 1.2 (compat tests) */
    long long verify_time; /* peer certificates are verified as of this
                              time (seconds since 1970; 0: now). The
                              reference's current_time option, for tests */
    long session_cache;    /* server: sessions kept for resumption (0:
                              20480) */
} kl_tls_opts;

/* A server context per protocol P1: TLS 1.2 with exactly
 * ECDHE-ECDSA-AES256-GCM-SHA384 and ECDHE-RSA-AES256-GCM-SHA384, plus TLS 1.3
 * unless disabled; client certificates required, verified against ca_file
 * only, with clientAuth usage (or no EKU). On failure returns NULL and writes
 * a message naming the file and the problem into err. */
kl_tls_ctx *kl_tls_server_ctx_new(const kl_tls_opts *o, char *err,
                                  size_t errlen);

/* A client context: presents cert/key, verifies the server against ca_file
 * (serverAuth). */
kl_tls_ctx *kl_tls_client_ctx_new(const kl_tls_opts *o, char *err,
                                  size_t errlen);

/* True when both contexts were built from the same material: the same
 * options, own certificate chain and trusted CA certificates/CRLs (the
 * loaded DER, not file names or times). A reload keeps the serving context
 * then - and with it the session cache, so that edges resume across it;
 * any difference means a new context whose cache starts empty, so that no
 * session established under a removed CA (or an old identity) resumes.
 * Safe from any thread: the digest is fixed at creation. */
bool kl_tls_ctx_same(const kl_tls_ctx *a, const kl_tls_ctx *b);

/* True when both contexts trust the same peers: the same trusted CA
 * certificates and CRLs (the loaded DER) and verification time. A reload
 * that changes it re-verifies the open connections' clients
 * (kl_tls_conn_reverify; docs/SECURITY.md "Revocation and expiry"). Safe
 * from any thread: the digest is fixed at creation. */
bool kl_tls_ctx_same_trust(const kl_tls_ctx *a, const kl_tls_ctx *b);

void kl_tls_ctx_free(kl_tls_ctx *ctx);

/* Results of I/O on a connection. */
typedef enum kl_io {
    KL_IO_OK = 0,
    KL_IO_WANT_READ,  /* wait until the socket is readable, then retry */
    KL_IO_WANT_WRITE, /* wait until the socket is writable, then retry */
    KL_IO_EOF,        /* orderly close by the peer */
    KL_IO_ERROR,      /* anything else: close the connection */
} kl_io;

/* Wraps a connected socket. server_name: SNI and the name to verify on
 * the client side (may be NULL on the server side; a numeric IP is checked
 * against IP SANs). The fd stays owned by the caller. */
kl_tls_conn *kl_tls_conn_new(kl_tls_ctx *ctx, int fd, bool is_server,
                             const char *server_name);
void kl_tls_conn_free(kl_tls_conn *c);

kl_io kl_tls_handshake(kl_tls_conn *c);
/* Reads up to cap bytes of application data; *n is set on KL_IO_OK. */
kl_io kl_tls_read(kl_tls_conn *c, void *buf, size_t cap, size_t *n);
/* Writes len bytes (partial writes allowed: *n tells how many were taken).
 * After WANT_*, retry with the same or a longer buffer starting at the same
 * unsent byte (the buffer may move). */
kl_io kl_tls_write(kl_tls_conn *c, const void *buf, size_t len, size_t *n);
/* Bytes already decrypted and buffered inside the TLS layer. */
size_t kl_tls_pending(const kl_tls_conn *c);
/* True once any byte arrived from the peer: a connection closed before
 * that is a load-balancer health check, logged at debug only (P1). */
bool kl_tls_handshake_started(const kl_tls_conn *c);
/* Bytes read from the socket so far (max_handshake_bytes). */
uint64_t kl_tls_bytes_read(const kl_tls_conn *c);
/* Sends close_notify (best effort, never blocks long). */
void kl_tls_shutdown(kl_tls_conn *c);

/* After a failure: a one-line description (OpenSSL's reason, a
 * verification error, ...). Never NULL. */
const char *kl_tls_last_error(const kl_tls_conn *c);
/* The peer certificate's (first) subject CN as UTF-8, control bytes written
 * \xNN, at most 127 bytes (or "" when none): a name for log lines. A
 * server refuses peer certificates whose subject attributes or DNS, e-mail
 * or URI subjectAltNames hold NUL or control characters
 * (docs/SECURITY.md); kl_tls_last_error then says so. */
const char *kl_tls_peer_name(const kl_tls_conn *c);
/* The peer's (verified) certificate as DER, malloc'd into *der (free()
 * it); 0 when there is none. For access lists (engine/acl.c), which match
 * subject, SANs and fingerprint without calling SSL_*. */
size_t kl_tls_peer_cert_der(const kl_tls_conn *c, unsigned char **der);
/* Verifies the peer certificate of an established connection again, with
 * the intermediates the peer sent, against ctx's trusted CAs and CRLs and
 * its verification options, as a handshake under ctx would. true: still
 * trusted; false: why not (OpenSSL's verification error) in why. Safe
 * from the connection's thread while other threads use ctx. */
bool kl_tls_conn_reverify(const kl_tls_conn *c, const kl_tls_ctx *ctx,
                          char *why, size_t len);
/* The earliest notAfter (seconds since 1970) of the peer certificate and
 * the chain it was verified through (for a resumed session: the
 * certificates the peer sent). false: no peer certificate, or certificates
 * are verified as of a fixed time (kl_tls_opts.verify_time), so that none
 * expires while connected. */
bool kl_tls_peer_not_after(const kl_tls_conn *c, int64_t *not_after);
/* "TLSv1.2" / "TLSv1.3" and the cipher name, after the handshake. */
const char *kl_tls_version(const kl_tls_conn *c);
const char *kl_tls_cipher(const kl_tls_conn *c);

#endif
