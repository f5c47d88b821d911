/* SPDX-License-Identifier: Apache-2.0 */
/* Internals of src/metrics, shared by its files only. */
#ifndef KL_METRICS_INTERNAL_H
#define KL_METRICS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "metrics/metrics.h"

/* The reference's operation types (P6), in kl_op_type's order of
 * appearance; index = mx_type_index(opcode). */
#define MX_TYPES 7
/* P6 error codes 0x00..0x0B, then one slot for anything beyond. */
#define MX_ERRS 13
/* 15 bounded buckets + the +Inf bucket. */
#define MX_SLOTS (KL_METRICS_BUCKETS + 1)

/* One writer's histogram. Buckets are kept per slot (not cumulative) and
 * the count is their sum, so a concurrent scrape can never see a count
 * that disagrees with the +Inf bucket. The sum is in nanoseconds, an
 * integer, so it needs no floating-point atomics. */
typedef struct mx_hist {
    _Atomic uint64_t bucket[MX_SLOTS];
    _Atomic uint64_t sum_ns;
} mx_hist;

/* A scraper's sum of histograms. */
typedef struct mx_hist_sum {
    uint64_t bucket[MX_SLOTS];
    uint64_t sum_ns;
} mx_hist_sum;

struct kl_metrics_local {
    kl_metrics_local *next; /* registry list, under kl_metrics.lock */
    int shard;
    _Atomic uint64_t requests[256];
    mx_hist exec[MX_TYPES][MX_ERRS];
    mx_hist total[MX_TYPES][MX_ERRS];
    mx_hist key_load;
    mx_hist queue_wait[KL_METRICS_COST_CLASSES];
    _Atomic uint64_t failed_conn;
    _Atomic uint64_t shed[KL_SHED_REASONS];
    _Atomic uint64_t hs_fail[KL_HS_FAIL_REASONS];
    _Atomic uint64_t log_suppressed[KL_LOGSUP_KINDS];
    _Atomic int64_t inflight;
    _Atomic int64_t conns[KL_MCONN_STATES];
    _Atomic uint64_t busy_ns;
    /* ASYNC jobs (kl_metrics_set_async): absent until started > 0 */
    _Atomic uint64_t async_started, async_paused, async_expired, async_full;
    _Atomic uint64_t async_retried;
    _Atomic uint64_t async_busy, async_fds;
    /* back-pressure. The accept pause is a seqlock with
     * one writer: pause_seq is odd while pause_start/paused_ns change, so
     * that a scrape never adds a pause in progress to a total that already
     * holds it. pause_start: 0 when accepting. */
    _Atomic uint64_t refused[KL_REFUSE_REASONS];
    _Atomic uint64_t closed[KL_CLOSE_REASONS];
    _Atomic uint64_t pauses;
    _Atomic uint64_t pause_seq, pause_start, paused_ns;
    _Atomic uint64_t buffered, buffer_budget, read_pauses;
    /* the last paused time reported, under kl_metrics.lock (render.c): a
     * scrape racing the end of a pause may read the clock past the end */
    uint64_t paused_reported;
};

typedef struct mx_cert mx_cert; /* certs.c */

/* Why the HTTP endpoint closed a connection itself (http.c; docs/METRICS.md,
 * The HTTP listener), for keylessd_metrics_http_closed_total{reason}. */
typedef enum mx_http_close {
    MX_HTTP_EVICTED = 0,    /* its slot went to a new connection */
    MX_HTTP_HEAD_TIMEOUT,   /* no complete request head within 2 s */
    MX_HTTP_ANSWER_TIMEOUT, /* answer not taken within 10 s */
    MX_HTTP_CLOSES
} mx_http_close;

struct kl_metrics {
    pthread_mutex_t lock; /* slot list and certificate table */
    kl_metrics_local *locals;
    int nlocals;
    _Atomic uint64_t queue_depth[KL_METRICS_COST_CLASSES];
    _Atomic uint64_t keys_loaded;
    _Atomic uint64_t sealed_refused;
    _Atomic uint64_t sealed_unroutable;
    _Atomic int64_t reload_ok;   /* -1: no reload yet */
    _Atomic int64_t reload_time; /* wall-clock seconds of the last one */
    _Atomic uint64_t reloads[2]; /* [0] failed, [1] succeeded */
    kl_metrics_scrape_fn on_scrape;
    void *on_scrape_arg;
    mx_cert *certs;
    size_t ncerts;
    /* false: certificates without cn, hostnames, serial_no (certs.c) */
    _Atomic bool identities;
    /* connections the HTTP endpoint closed by its rules (http.c) */
    _Atomic uint64_t http_closed[MX_HTTP_CLOSES];
    _Atomic uint64_t certs_dropped;
    /* routes.c: the router's and the tracer's figures, as the
     * scrape hook last set them; guarded by lock */
    kl_metrics_route *routes;
    size_t nroutes;
    bool has_tracing;
    kl_metrics_tracing tracing;
    bool has_fleet;
    kl_metrics_fleet fleet;
};

/* ---- labels and buckets (labels.c) ------------------------------------ */
extern const char *const mx_type_names[MX_TYPES];
extern const char *const mx_le_texts[KL_METRICS_BUCKETS];
extern const char *const mx_class_names[KL_METRICS_COST_CLASSES];
extern const char *const mx_shed_names[KL_SHED_REASONS];
extern const char *const mx_hs_names[KL_HS_FAIL_REASONS];
extern const char *const mx_logsup_names[KL_LOGSUP_KINDS];
extern const char *const mx_conn_names[KL_MCONN_STATES];
extern const char *const mx_refusal_names[KL_REFUSE_REASONS];
extern const char *const mx_close_names[KL_CLOSE_REASONS];
extern const char *const mx_http_close_names[MX_HTTP_CLOSES];
/* Splits a NUL-terminated HTTP request head's first line into method and
 * path (query and fragment cut off), in place; false when the line is not
 * METHOD SP TARGET SP HTTP/1.x (http.c). */
bool mx_http_request_line(char *head, char **method, char **path);
int mx_type_index(uint8_t opcode);
/* The label slot of a request answered with err: its P6 code's. */
int mx_err_index(kl_status err);
const char *mx_err_label(int err_index);
/* Index of the bucket an observation falls in (KL_METRICS_BUCKETS: +Inf). */
int mx_bucket_index(uint64_t ns);

/* ---- output buffer and text format (expo.c) --------------------------- */
typedef struct mx_buf {
    char *p;
    size_t len, cap;
    bool oom;
} mx_buf;

void mx_puts(mx_buf *b, const char *s);
void mx_printf(mx_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A label value with \, " and newline escaped (text format 0.0.4). */
void mx_put_label_value(mx_buf *b, const char *v);
/* "# HELP name help\n# TYPE name type\n". */
void mx_family(mx_buf *b, const char *name, const char *type, const char *help);
/* A float in its shortest form that reads back exactly ("+Inf" etc.). */
void mx_put_double(mx_buf *b, double v);
/* The _bucket/_sum/_count lines of one histogram child. labels: already
 * escaped `a="b",` pairs (with the trailing comma) or "". */
void mx_put_hist(mx_buf *b, const char *name, const char *labels,
                 const mx_hist_sum *h);

void mx_hist_add(mx_hist_sum *dst, const mx_hist *src);
uint64_t mx_hist_count(const mx_hist_sum *h);

/* ---- families (render.c, process.c, certs.c) -------------------------- */
void mx_render_process(mx_buf *b);
/* Caller holds m->lock. */
void mx_render_certs(kl_metrics *m, mx_buf *b);
void mx_certs_free(kl_metrics *m);
/* routes.c; caller holds m->lock */
void mx_render_routes(kl_metrics *m, mx_buf *b);
void mx_routes_free(kl_metrics *m);

#endif
