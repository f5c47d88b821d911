/* SPDX-License-Identifier: Apache-2.0 */
/* Request tracing (docs/TRACING.md): spans recorded on the
 * threads that serve requests and exported over OTLP/HTTP (JSON encoding)
 * by a thread of the tracer's own.
 *
 * Recording never blocks and never allocates. Each shard owns one ring
 * (single producer: the shard thread; single consumer: the exporter), a
 * fixed array of span slots; a span that finds its ring full is dropped and
 * counted. Threads without a ring of their own (the router's) emit through
 * a shared ring behind a mutex - one short critical section per span, off
 * the shards' request path.
 *
 * The exporter wakes every flush interval (or sooner when a ring is half
 * full), drains the rings into batches and POSTs each batch to the
 * collector with bounded timeouts. A batch the collector does not take is
 * dropped and counted: a key server must not slow down or grow because its
 * tracing backend is down.
 *
 * Span context on the wire (tag 0x15, protocol P3): an incoming context's
 * span id is the parent of keylessd's server span and its trace id is kept;
 * its sampled flag (bit 0 of the flags, as in Jaeger) decides whether the
 * request is traced. Without one, tracing_sample_rate decides. A forwarded
 * request carries the binary form with the router's attempt span as the
 * caller, so the upstream server's span is that attempt's child. */
#ifndef KL_METRICS_TRACE_H
#define KL_METRICS_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "keyless/protocol.h"

#define KL_SPAN_ATTRS 8
#define KL_SPAN_STR 64 /* string attribute values are cut to 63 bytes */
/* Jaeger's flags: bit 0 = sampled */
#define KL_TRACE_FLAG_SAMPLED 0x01
/* the binary tag-0x15 form keylessd writes: ids, flags, no baggage */
#define KL_SPANCTX_BINARY_LEN 37

/* OTLP SpanKind values */
typedef enum kl_span_kind {
    KL_SPAN_INTERNAL = 1,
    KL_SPAN_SERVER = 2,
    KL_SPAN_CLIENT = 3,
} kl_span_kind;

typedef enum kl_attr_type {
    KL_ATTR_STR,
    KL_ATTR_INT,
    KL_ATTR_BOOL
} kl_attr_type;

typedef struct kl_span_attr {
    const char *key; /* static string */
    uint8_t type;    /* kl_attr_type */
    int64_t i;       /* KL_ATTR_INT, KL_ATTR_BOOL */
    char s[KL_SPAN_STR];
} kl_span_attr;

/* One finished span. Times are monotonic (kl_now_ns); the exporter turns
 * them into Unix times. */
typedef struct kl_span {
    uint8_t trace_id[16];
    uint64_t span_id;
    uint64_t parent_id; /* 0: a root span */
    const char *name;   /* static string */
    uint8_t kind;       /* kl_span_kind */
    bool error;         /* OTLP status ERROR, else UNSET */
    uint8_t nattrs;
    uint64_t start_ns, end_ns;
    char status_msg[KL_SPAN_STR];
    kl_span_attr attrs[KL_SPAN_ATTRS];
} kl_span;

/* Adds an attribute; silently ignored past KL_SPAN_ATTRS. A string is cut
 * to KL_SPAN_STR - 1 bytes at a UTF-8 character boundary. */
void kl_span_attr_str(kl_span *sp, const char *key, const char *val);
void kl_span_attr_strn(kl_span *sp, const char *key, const char *val,
                       size_t len);
void kl_span_attr_int(kl_span *sp, const char *key, int64_t val);
void kl_span_attr_bool(kl_span *sp, const char *key, bool val);

/* What a traced request carries from stage to stage on the shard. */
typedef struct kl_trace_ref {
    bool sampled;
    uint8_t trace_id[16];
    uint64_t parent_id; /* the caller's span (tag 0x15), 0: none */
    uint64_t span_id;   /* keylessd's server span */
    uint8_t opcode;     /* the request's (protocol P4), for attributes */
} kl_trace_ref;

typedef struct kl_tracer kl_tracer;
typedef struct kl_trace_ring kl_trace_ring;

/* Start from kl_tracer_defaults and change what differs; keylessd's
 * tracing_sample_rate option points at .sample_rate. */
typedef struct kl_tracer_opts {
    const char *endpoint;     /* OTLP/HTTP URL, e.g. http://h:4318/v1/traces */
    const char *service_name; /* resource service.name */
    double sample_rate;       /* 0..1, for requests without a context */
    unsigned rings;           /* single-producer rings (one per shard) */
    unsigned ring_slots;      /* spans per ring (rounded up to a power of 2) */
    unsigned batch_max;       /* spans per POST */
    int flush_ms;             /* export interval */
    int timeout_ms;           /* whole POST */
    int connect_timeout_ms;
} kl_tracer_opts;

extern const kl_tracer_opts kl_tracer_defaults;

/* Starts the exporter thread. KL_E_CONFIG with err set for a bad
 * endpoint; KL_E_NOMEM. */
KL_WUR kl_status kl_tracer_new(const kl_tracer_opts *o, kl_tracer **out,
                               char *err, size_t errlen);
/* Stops the exporter after one last flush that may take up to wait_ms;
 * spans still queued after that are dropped and counted. */
void kl_tracer_free(kl_tracer *t, int wait_ms);

/* Ring i (i < opts.rings) for one producing thread; NULL past the end. */
kl_trace_ring *kl_tracer_ring(kl_tracer *t, unsigned i);
/* Records a span on the ring's thread: copied, or dropped and counted when
 * the ring is full. Never blocks. */
void kl_trace_ring_emit(kl_trace_ring *r, const kl_span *sp);
/* The decision for a request without a span context. */
bool kl_trace_ring_sample(kl_trace_ring *r);
/* A new non-zero span id, and a new trace id, from the ring's generator. */
uint64_t kl_trace_ring_new_id(kl_trace_ring *r);
void kl_trace_ring_new_trace(kl_trace_ring *r, uint8_t trace_id[16]);

/* The same for any thread (a mutex around a shared ring). */
void kl_tracer_emit(kl_tracer *t, const kl_span *sp);
uint64_t kl_tracer_new_id(kl_tracer *t);

typedef struct kl_tracer_stats {
    uint64_t exported;        /* spans the collector took */
    uint64_t dropped_full;    /* spans dropped: their ring was full */
    uint64_t dropped_export;  /* spans dropped: their batch failed */
    uint64_t export_failures; /* POSTs that failed */
    uint64_t batches;         /* POSTs that succeeded */
} kl_tracer_stats;
void kl_tracer_get_stats(kl_tracer *t, kl_tracer_stats *out);

/* The request's trace from its tag-0x15 value (NULL/0: absent): a valid
 * context is honoured (its sampled flag decides), an invalid one is treated
 * as absent (*bad set), and without one the ring samples. ref->span_id is
 * a new id for the server span when sampled. */
void kl_trace_ref_start(kl_trace_ring *r, const uint8_t *ctx, size_t len,
                        kl_trace_ref *ref, bool *bad);

/* Writes the binary tag-0x15 form (protocol P3) naming span_id as the
 * caller and parent_id as its parent: KL_SPANCTX_BINARY_LEN bytes. */
void kl_spanctx_write_binary(uint8_t out[KL_SPANCTX_BINARY_LEN],
                             const uint8_t trace_id[16], uint64_t span_id,
                             uint64_t parent_id, uint8_t flags);

/* ---- the router's attempts (trace_route.c) ------------------------------
 * A traced forwarded request reaches the router with a binary tag-0x15
 * copy naming its route span (written by the server, routed.c). Each
 * attempt rewrites that copy in place - span id := the attempt's span, parent
 * := the route span - before libkeyless copies it into the request it
 * sends, so the upstream server's span becomes the attempt's child. Spans
 * go through kl_tracer_emit (the router thread has no ring). */
typedef struct kl_trace_attempt {
    uint8_t *ctx;        /* the request's tag-0x15 copy; NULL: not traced */
    uint64_t route_span; /* parent of the attempts */
    uint64_t span_id;    /* the attempt in flight, 0: none */
    uint64_t start_ns;
    unsigned n; /* attempts begun */
    char remote[KL_SPAN_STR];
} kl_trace_attempt;

/* Whether ctx/len is the copy the server wrote for a traced request. */
void kl_trace_attempt_init(kl_trace_attempt *a, bool traced, uint8_t *ctx,
                           size_t len);
/* Before an attempt is submitted: the route-choice span (choose_ns to
 * now) and the attempt's span id written into the context. */
void kl_trace_attempt_begin(kl_tracer *t, kl_trace_attempt *a,
                            uint64_t choose_ns, const char *remote,
                            const char *region, unsigned candidates);
/* The attempt ended: outcome is "ok", the remote's error text, or why
 * it failed; error marks the span as failed. No-op without an attempt. */
void kl_trace_attempt_end(kl_tracer *t, kl_trace_attempt *a,
                          const char *outcome, bool error);

/* OTLP/HTTP JSON (trace_otlp.c): one ExportTraceServiceRequest holding
 * spans[0..n) under one resource (service.name) and one scope. Monotonic
 * span times + mono_to_unix_ns = Unix times. Returns a malloc'd string
 * (*len bytes, NUL-terminated) or NULL when out of memory. */
char *kl_otlp_encode(const kl_span *spans, size_t n, const char *service,
                     int64_t mono_to_unix_ns, size_t *len);
/* Lower-case hex of n bytes into out (2n + 1 bytes). */
void kl_trace_hex(const uint8_t *p, size_t n, char *out);

#endif
