/* SPDX-License-Identifier: Apache-2.0 */
/* The pure half of a client connection: requests encoded into one output
 * buffer, received bytes framed into responses, ids tracked in between.
 * No sockets here - kl_client (client.c) moves bytes between this state and
 * TLS, and the asynchronous library can drive it from an event loop. */
#ifndef KL_CLIENT_PIPELINE_H
#define KL_CLIENT_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client/reqtable.h"
#include "core/status.h"
#include "keyless/client.h"
#include "keyless/protocol.h"

/* A byte buffer consumed from the front: live bytes are p[off..len). */
typedef struct kl_bytebuf {
    uint8_t *p;
    size_t off;
    size_t len;
    size_t cap;
} kl_bytebuf;

/* Received bytes not yet framed are bounded: a peer that floods us while
 * nobody reads responses cannot grow memory without limit. */
#define KL_PIPELINE_MAX_UNREAD (64u << 20)
/* Room reserved for each socket read. */
#define KL_PIPELINE_READ_CHUNK (64u << 10)

typedef struct kl_pipeline {
    kl_reqtable reqs;
    kl_bytebuf out; /* encoded requests not yet handed to TLS */
    kl_bytebuf in;  /* received bytes not yet framed */
    uint32_t next_id;
} kl_pipeline;

void kl_pipeline_init(kl_pipeline *p);
void kl_pipeline_free(kl_pipeline *p);

/* Encodes one request with kl_request_encode straight into the output
 * buffer: each message is one contiguous run of bytes, so it can never be
 * written as header and body separately (protocol P8). With auto_id the
 * next id not outstanding is used (spec->id ignored), else spec->id. */
KL_WUR kl_status kl_pipeline_queue(kl_pipeline *p, const kl_request_spec *spec,
                                   bool auto_id, uint32_t *id_out,
                                   uint64_t now_ns);
/* Appends raw bytes; tracks the id of every complete frame among them. */
KL_WUR kl_status kl_pipeline_queue_raw(kl_pipeline *p, const void *bytes,
                                       size_t len, uint64_t now_ns);

/* The bytes waiting to be written, and how many of them were taken. */
const uint8_t *kl_pipeline_out(const kl_pipeline *p, size_t *len);
void kl_pipeline_out_done(kl_pipeline *p, size_t n);

/* Room for at least KL_PIPELINE_READ_CHUNK received bytes; then commit what
 * was read. KL_E_TOO_LARGE when KL_PIPELINE_MAX_UNREAD bytes wait. */
KL_WUR kl_status kl_pipeline_in_space(kl_pipeline *p, uint8_t **dst,
                                      size_t *cap);
void kl_pipeline_in_commit(kl_pipeline *p, size_t n);
/* True when the received bytes hold at least one complete frame. */
bool kl_pipeline_has_frame(const kl_pipeline *p);

/* Frames and parses the next response. KL_E_AGAIN when no complete frame
 * has arrived; KL_E_BAD_VALUE (frame skipped, its id accounted for) when a
 * frame is not a valid response. Responses to cancelled requests are
 * dropped here. */
KL_WUR kl_status kl_pipeline_next(kl_pipeline *p, kl_client_result *out,
                                  uint64_t now_ns);

#endif
