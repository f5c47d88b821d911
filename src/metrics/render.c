/* SPDX-License-Identifier: Apache-2.0 */
/* A scrape: add up every thread's slot, then write the families. The
 * reference's series come first, with its names, label names and values
 * and buckets (protocol P6); keylessd's own are prefixed keylessd_. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/time.h"
#include "keyless/protocol.h"
#include "metrics/internal.h"

#define LOAD(p) atomic_load_explicit((p), memory_order_relaxed)

/* The slots' sum at one scrape. */
typedef struct mx_total {
    uint64_t requests[256];
    mx_hist_sum exec[MX_TYPES][MX_ERRS];
    mx_hist_sum total[MX_TYPES][MX_ERRS];
    mx_hist_sum key_load;
    mx_hist_sum queue_wait[KL_METRICS_COST_CLASSES];
    uint64_t failed_conn;
    uint64_t shed[KL_SHED_REASONS];
    uint64_t hs_fail[KL_HS_FAIL_REASONS];
    uint64_t log_suppressed[KL_LOGSUP_KINDS];
    int64_t inflight;
    int64_t conns[KL_MCONN_STATES];
    uint64_t refused[KL_REFUSE_REASONS];
    uint64_t closed[KL_CLOSE_REASONS];
    uint64_t pauses, paused_ns, paused_now;
    uint64_t buffered, buffer_budget, read_pauses;
} mx_total;

/* A slot's accept-pause time up to now, the pause in progress included
 * (the reader's half of record.c's seqlock). Caller holds m->lock, which
 * guards paused_reported: a scrape that read the clock after the writer
 * read it to end the pause would otherwise report a few nanoseconds more
 * than every later one, and a counter must never go down. */
static uint64_t paused_time(kl_metrics_local *l, uint64_t now, bool *paused)
{
    uint64_t s1, s2, start, done;
    for (;;) {
        s1 = atomic_load_explicit(&l->pause_seq, memory_order_acquire);
        start = LOAD(&l->pause_start);
        done = LOAD(&l->paused_ns);
        atomic_thread_fence(memory_order_acquire);
        s2 = LOAD(&l->pause_seq);
        if (s1 == s2 && !(s1 & 1))
            break;
        sched_yield(); /* the shard is between two stores */
    }
    *paused = start != 0;
    uint64_t v = done + (start && now > start ? now - start : 0);
    if (v < l->paused_reported)
        v = l->paused_reported;
    l->paused_reported = v;
    return v;
}

static void add_slot(mx_total *t, kl_metrics_local *l, uint64_t now)
{
    for (int i = 0; i < 256; i++)
        t->requests[i] += LOAD(&l->requests[i]);
    for (int ty = 0; ty < MX_TYPES; ty++)
        for (int e = 0; e < MX_ERRS; e++) {
            mx_hist_add(&t->exec[ty][e], &l->exec[ty][e]);
            mx_hist_add(&t->total[ty][e], &l->total[ty][e]);
        }
    mx_hist_add(&t->key_load, &l->key_load);
    for (int c = 0; c < KL_METRICS_COST_CLASSES; c++)
        mx_hist_add(&t->queue_wait[c], &l->queue_wait[c]);
    t->failed_conn += LOAD(&l->failed_conn);
    for (int r = 0; r < KL_SHED_REASONS; r++)
        t->shed[r] += LOAD(&l->shed[r]);
    for (int r = 0; r < KL_HS_FAIL_REASONS; r++)
        t->hs_fail[r] += LOAD(&l->hs_fail[r]);
    for (int k = 0; k < KL_LOGSUP_KINDS; k++)
        t->log_suppressed[k] += LOAD(&l->log_suppressed[k]);
    t->inflight += LOAD(&l->inflight);
    for (int s = 0; s < KL_MCONN_STATES; s++)
        t->conns[s] += LOAD(&l->conns[s]);
    for (int r = 0; r < KL_REFUSE_REASONS; r++)
        t->refused[r] += LOAD(&l->refused[r]);
    for (int r = 0; r < KL_CLOSE_REASONS; r++)
        t->closed[r] += LOAD(&l->closed[r]);
    t->pauses += LOAD(&l->pauses);
    bool paused;
    t->paused_ns += paused_time(l, now, &paused);
    t->paused_now += paused;
    t->buffered += LOAD(&l->buffered);
    t->buffer_budget += LOAD(&l->buffer_budget);
    t->read_pauses += LOAD(&l->read_pauses);
}

/* Connection back-pressure (docs/METRICS.md). */
/* A family of one unlabelled integer sample. */
static void put_u64(mx_buf *b, const char *name, const char *type,
                    const char *help, uint64_t v)
{
    mx_family(b, name, type, help);
    mx_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

static void render_backpressure(mx_buf *b, const mx_total *t)
{
    mx_family(b, "keylessd_connections_refused_total", "counter",
              "Connections closed right after accept by a connection cap.");
    for (int r = 0; r < KL_REFUSE_REASONS; r++)
        mx_printf(b, "keylessd_connections_refused_total{reason=\"%s\"} %llu\n",
                  mx_refusal_names[r], (unsigned long long)t->refused[r]);
    mx_family(b, "keylessd_connections_closed_total", "counter",
              "Established connections closed because of their client "
              "certificate.");
    for (int r = 0; r < KL_CLOSE_REASONS; r++)
        mx_printf(b, "keylessd_connections_closed_total{reason=\"%s\"} %llu\n",
                  mx_close_names[r], (unsigned long long)t->closed[r]);
    put_u64(b, "keylessd_accept_pauses_total", "counter",
            "Times a shard stopped accepting at max_handshaking.", t->pauses);
    mx_family(b, "keylessd_accept_paused_seconds_total", "counter",
              "Time shards spent not accepting at max_handshaking.");
    mx_puts(b, "keylessd_accept_paused_seconds_total ");
    mx_put_double(b, kl_ns_to_s_f(t->paused_ns));
    mx_puts(b, "\n");
    put_u64(b, "keylessd_accept_paused", "gauge",
            "Shards not accepting now because of max_handshaking.",
            t->paused_now);
    put_u64(b, "keylessd_read_pauses_total", "counter",
            "Times a connection stopped being read because of a limit.",
            t->read_pauses);
    put_u64(b, "keylessd_buffered_bytes", "gauge",
            "Bytes held for requests in flight and unsent responses.",
            t->buffered);
    put_u64(b, "keylessd_buffered_bytes_limit", "gauge",
            "max_buffered_bytes as the shards share it.", t->buffer_budget);
}

/* A histogram vector over (type, error): only the children that have seen
 * an observation, as the reference's vectors show them. Labels in name
 * order, as the reference's client library writes them. */
static void put_type_err_hists(mx_buf *b, const char *name, const char *help,
                               const mx_hist_sum (*h)[MX_ERRS])
{
    mx_family(b, name, "histogram", help);
    for (int ty = 0; ty < MX_TYPES; ty++)
        for (int e = 0; e < MX_ERRS; e++) {
            if (mx_hist_count(&h[ty][e]) == 0)
                continue;
            char labels[128];
            /* Neither error texts nor type names need escaping. */
            snprintf(labels, sizeof labels, "error=\"%s\",type=\"%s\",",
                     mx_err_label(e), mx_type_names[ty]);
            mx_put_hist(b, name, labels, &h[ty][e]);
        }
}

static void render_reference(mx_buf *b, const mx_total *t)
{
    mx_family(b, "keyless_requests", "counter",
              "Total number of requests by opcode.");
    for (int op = 0; op < 256; op++)
        if (t->requests[op])
            mx_printf(b, "keyless_requests{opcode=\"%s\"} %llu\n",
                      kl_op_name((uint8_t)op),
                      (unsigned long long)t->requests[op]);
    put_type_err_hists(b, "keyless_request_exec_duration_per_opcode",
                       "Time to execute a request, not including time in "
                       "queues, by type and error.",
                       t->exec);
    put_type_err_hists(b, "keyless_request_total_duration_per_opcode",
                       "Total time to satisfy a request, including time in "
                       "queues, by type and error.",
                       t->total);
    mx_family(b, "keyless_key_load_duration", "histogram",
              "Time to look up the key of a request.");
    mx_put_hist(b, "keyless_key_load_duration", "", &t->key_load);
    put_u64(b, "keyless_failed_connection", "counter",
            "Transport failures on established connections.", t->failed_conn);
}

/* One family of the shards' ASYNC job counts; only shards that ran one. */
static void async_family(mx_buf *b, const kl_metrics *m, const char *name,
                         const char *type, const char *help, size_t off)
{
    mx_family(b, name, type, help);
    for (const kl_metrics_local *l = m->locals; l; l = l->next)
        if (l->shard >= 0 && LOAD(&l->async_started))
            mx_printf(b, "%s{shard=\"%d\"} %llu\n", name, l->shard,
                      (unsigned long long)LOAD(
                          (const _Atomic uint64_t *)((const char *)l + off)));
}

/* docs/METRICS.md "Accelerators": absent until a shard ran an operation as
 * an ASYNC job, so a server without accelerator keys shows none. */
static void render_async(mx_buf *b, const kl_metrics *m)
{
    bool any = false;
    for (const kl_metrics_local *l = m->locals; l; l = l->next)
        any |= l->shard >= 0 && LOAD(&l->async_started) > 0;
    if (!any)
        return;
    async_family(b, m, "keylessd_async_operations_total", "counter",
                 "Key operations run as ASYNC jobs on the shard.",
                 offsetof(kl_metrics_local, async_started));
    async_family(b, m, "keylessd_async_paused_total", "counter",
                 "Of those, operations the provider paused (the device "
                 "worked while the shard went on).",
                 offsetof(kl_metrics_local, async_paused));
    async_family(b, m, "keylessd_async_expired_total", "counter",
                 "Operations answered before the provider returned: past "
                 "their deadline or their client gone.",
                 offsetof(kl_metrics_local, async_expired));
    async_family(b, m, "keylessd_async_full_total", "counter",
                 "Operations sent to a blocking worker because "
                 "max_async_jobs were in progress on the shard.",
                 offsetof(kl_metrics_local, async_full));
    async_family(b, m, "keylessd_async_retried_total", "counter",
                 "Pauses the provider asked to resume at once, with no "
                 "completion to wait for (ASYNC_STATUS_EAGAIN or "
                 "ASYNC_STATUS_ERR: its queue was full or it failed).",
                 offsetof(kl_metrics_local, async_retried));
    async_family(b, m, "keylessd_async_jobs", "gauge",
                 "Operations in progress now (paused, or answered early and "
                 "still with the provider).",
                 offsetof(kl_metrics_local, async_busy));
    async_family(b, m, "keylessd_async_wait_fds", "gauge",
                 "Providers' wait descriptors in the shard's event loop.",
                 offsetof(kl_metrics_local, async_fds));
}

static void render_own(mx_buf *b, kl_metrics *m, const mx_total *t)
{
    mx_family(b, "keylessd_requests_in_flight", "gauge",
              "Requests read and not yet answered.");
    mx_printf(b, "keylessd_requests_in_flight %lld\n", (long long)t->inflight);

    mx_family(b, "keylessd_queue_depth", "gauge",
              "Jobs waiting in each cost class's queue.");
    for (int c = 0; c < KL_METRICS_COST_CLASSES; c++)
        mx_printf(b, "keylessd_queue_depth{class=\"%s\"} %llu\n",
                  mx_class_names[c],
                  (unsigned long long)LOAD(&m->queue_depth[c]));

    mx_family(b, "keylessd_queue_wait_seconds", "histogram",
              "Time from queueing a job to the start of its execution.");
    for (int c = 0; c < KL_METRICS_COST_CLASSES; c++) {
        char labels[64];
        snprintf(labels, sizeof labels, "class=\"%s\",", mx_class_names[c]);
        mx_put_hist(b, "keylessd_queue_wait_seconds", labels,
                    &t->queue_wait[c]);
    }

    mx_family(b, "keylessd_requests_shed_total", "counter",
              "Requests answered with a fast error instead of run.");
    for (int r = 0; r < KL_SHED_REASONS; r++)
        mx_printf(b, "keylessd_requests_shed_total{reason=\"%s\"} %llu\n",
                  mx_shed_names[r], (unsigned long long)t->shed[r]);

    mx_family(b, "keylessd_connections", "gauge",
              "Open client connections by state.");
    for (int s = 1; s < KL_MCONN_STATES; s++)
        mx_printf(b, "keylessd_connections{state=\"%s\"} %lld\n",
                  mx_conn_names[s], (long long)t->conns[s]);

    mx_family(b, "keylessd_tls_handshake_failures_total", "counter",
              "Failed TLS handshakes by reason.");
    for (int r = 0; r < KL_HS_FAIL_REASONS; r++)
        mx_printf(b,
                  "keylessd_tls_handshake_failures_total{reason=\"%s\"} "
                  "%llu\n",
                  mx_hs_names[r], (unsigned long long)t->hs_fail[r]);
    mx_family(b, "keylessd_log_suppressed_total", "counter",
              "Log lines left out by the rate limit of lines a peer can "
              "cause, by kind.");
    for (int k = 0; k < KL_LOGSUP_KINDS; k++)
        mx_printf(b, "keylessd_log_suppressed_total{kind=\"%s\"} %llu\n",
                  mx_logsup_names[k], (unsigned long long)t->log_suppressed[k]);
    render_backpressure(b, t);
    mx_family(b, "keylessd_metrics_http_closed_total", "counter",
              "Connections the metrics endpoint closed by its own rules.");
    for (int r = 0; r < MX_HTTP_CLOSES; r++)
        mx_printf(b, "keylessd_metrics_http_closed_total{reason=\"%s\"} %llu\n",
                  mx_http_close_names[r],
                  (unsigned long long)LOAD(&m->http_closed[r]));

    put_u64(b, "keylessd_keys_loaded", "gauge", "Private keys loaded.",
            LOAD(&m->keys_loaded));
    put_u64(b, "keylessd_sealed_keys_refused_total", "counter",
            "Sealed key files refused at a load: altered, or not opening "
            "for this server although wrapped to it.",
            LOAD(&m->sealed_refused));
    put_u64(b, "keylessd_sealed_keys_unroutable_total", "counter",
            "Requests for sealed keys held elsewhere answered `key not "
            "found`: no remote's attributes satisfy the key's policy, or no "
            "router.",
            LOAD(&m->sealed_unroutable));

    mx_family(b, "keylessd_reloads_total", "counter",
              "Configuration and key reloads by result.");
    mx_printf(b, "keylessd_reloads_total{result=\"failure\"} %llu\n",
              (unsigned long long)LOAD(&m->reloads[0]));
    mx_printf(b, "keylessd_reloads_total{result=\"success\"} %llu\n",
              (unsigned long long)LOAD(&m->reloads[1]));
    int64_t ok = LOAD(&m->reload_ok);
    if (ok >= 0) { /* absent until the first reload */
        mx_family(b, "keylessd_last_reload_successful", "gauge",
                  "1 if the last reload succeeded, 0 if it failed.");
        mx_printf(b, "keylessd_last_reload_successful %lld\n", (long long)ok);
        mx_family(b, "keylessd_last_reload_timestamp_seconds", "gauge",
                  "Unix time of the last reload.");
        mx_printf(b, "keylessd_last_reload_timestamp_seconds %lld\n",
                  (long long)LOAD(&m->reload_time));
    }

    mx_family(b, "keylessd_loop_busy_seconds_total", "counter",
              "Time each shard's event loop spent working, not waiting.");
    /* The list is newest first; a shard registers once, so each shard
     * label appears once. */
    for (const kl_metrics_local *l = m->locals; l; l = l->next)
        if (l->shard >= 0) {
            mx_printf(b, "keylessd_loop_busy_seconds_total{shard=\"%d\"} ",
                      l->shard);
            mx_put_double(b, kl_ns_to_s_f(LOAD(&l->busy_ns)));
            mx_puts(b, "\n");
        }

    render_async(b, m);

    put_u64(b, "keylessd_cert_series_dropped_total", "counter",
            "Certificates not exported because the table was full.",
            LOAD(&m->certs_dropped));
}

char *kl_metrics_render(kl_metrics *m, size_t *len)
{
    /* The hook may call setters (and certificate functions, which lock),
     * so it runs before the lock is taken. */
    pthread_mutex_lock(&m->lock);
    kl_metrics_scrape_fn fn = m->on_scrape;
    void *arg = m->on_scrape_arg;
    pthread_mutex_unlock(&m->lock);
    if (fn)
        fn(m, arg);

    mx_total *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    mx_buf b = {0};
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* record.c's now_ns: kl_now_ns */
    uint64_t now = kl_timespec_to_ns(&ts);
    pthread_mutex_lock(&m->lock);
    for (kl_metrics_local *l = m->locals; l; l = l->next)
        add_slot(t, l, now);
    render_reference(&b, t);
    mx_render_certs(m, &b);
    render_own(&b, m, t);
    mx_render_routes(m, &b); /* routes and tracing, when set */
    pthread_mutex_unlock(&m->lock);
    mx_render_process(&b);
    free(t);
    if (b.oom || !b.p) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}
