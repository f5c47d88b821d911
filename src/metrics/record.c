/* SPDX-License-Identifier: Apache-2.0 */
/* The registry and the recording side. Every per-thread value has exactly
 * one writer, so an update is a relaxed load and a relaxed store:
 * no lock, no locked read-modify-write, and the scraper's relaxed
 * loads make it a data race in no sense TSan cares about. */
#include <stdlib.h>

#include "metrics/internal.h"

#define LOAD(p) atomic_load_explicit((p), memory_order_relaxed)
#define STORE(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)
/* Single-writer increment: not atomic as a whole, and needs not be. */
#define BUMP(p, d) STORE((p), LOAD(p) + (d))

kl_metrics *kl_metrics_new(void)
{
    kl_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    if (pthread_mutex_init(&m->lock, NULL) != 0) {
        free(m);
        return NULL;
    }
    atomic_init(&m->reload_ok, -1);
    atomic_init(&m->identities, true);
    return m;
}

void kl_metrics_free(kl_metrics *m)
{
    if (!m)
        return;
    kl_metrics_local *l = m->locals;
    while (l) {
        kl_metrics_local *next = l->next;
        free(l);
        l = next;
    }
    mx_certs_free(m);
    mx_routes_free(m);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

kl_metrics_local *kl_metrics_local_new(kl_metrics *m, int shard)
{
    /* calloc gives zeroed atomics: all-zero bits are a valid zero for the
     * lock-free integer atomics used here. */
    kl_metrics_local *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->shard = shard < 0 ? -1 : shard;
    pthread_mutex_lock(&m->lock);
    l->next = m->locals;
    m->locals = l;
    m->nlocals++;
    pthread_mutex_unlock(&m->lock);
    return l;
}

static void observe(mx_hist *h, uint64_t ns)
{
    BUMP(&h->bucket[mx_bucket_index(ns)], 1);
    BUMP(&h->sum_ns, ns);
}

void kl_metrics_request(kl_metrics_local *l, uint8_t opcode)
{
    if (l)
        BUMP(&l->requests[opcode], 1);
}

void kl_metrics_exec_time(kl_metrics_local *l, uint8_t opcode, kl_status err,
                          uint64_t ns)
{
    if (l)
        observe(&l->exec[mx_type_index(opcode)][mx_err_index(err)], ns);
}

void kl_metrics_total_time(kl_metrics_local *l, uint8_t opcode, kl_status err,
                           uint64_t ns)
{
    if (l)
        observe(&l->total[mx_type_index(opcode)][mx_err_index(err)], ns);
}

void kl_metrics_key_load_time(kl_metrics_local *l, uint64_t ns)
{
    if (l)
        observe(&l->key_load, ns);
}

void kl_metrics_failed_connection(kl_metrics_local *l)
{
    if (l)
        BUMP(&l->failed_conn, 1);
}

void kl_metrics_queue_wait(kl_metrics_local *l, int cost_class, uint64_t ns)
{
    if (l && cost_class >= 0 && cost_class < KL_METRICS_COST_CLASSES)
        observe(&l->queue_wait[cost_class], ns);
}

void kl_metrics_shed(kl_metrics_local *l, kl_metrics_shed_reason reason)
{
    if (l && (unsigned)reason < KL_SHED_REASONS)
        BUMP(&l->shed[reason], 1);
}

void kl_metrics_handshake_failed(kl_metrics_local *l, kl_metrics_hs_fail r)
{
    if (l && (unsigned)r < KL_HS_FAIL_REASONS)
        BUMP(&l->hs_fail[r], 1);
}

void kl_metrics_log_suppressed(kl_metrics_local *l, kl_metrics_log_kind k)
{
    if (l && (unsigned)k < KL_LOGSUP_KINDS)
        BUMP(&l->log_suppressed[k], 1);
}

void kl_metrics_inflight_add(kl_metrics_local *l, int64_t delta)
{
    if (l)
        BUMP(&l->inflight, delta);
}

void kl_metrics_conn_move(kl_metrics_local *l, kl_metrics_conn from,
                          kl_metrics_conn to)
{
    if (!l || (unsigned)from >= KL_MCONN_STATES ||
        (unsigned)to >= KL_MCONN_STATES || from == to)
        return;
    /* KL_MCONN_NONE is counted too but never exported; keeping it
     * branch-free here is simpler than skipping it. */
    BUMP(&l->conns[from], -1);
    BUMP(&l->conns[to], 1);
}

void kl_metrics_loop_busy(kl_metrics_local *l, uint64_t ns)
{
    if (l)
        BUMP(&l->busy_ns, ns);
}

void kl_metrics_set_async(kl_metrics_local *l, const kl_metrics_async *a)
{
    if (!l)
        return;
    STORE(&l->async_started, a->started);
    STORE(&l->async_paused, a->paused);
    STORE(&l->async_expired, a->expired);
    STORE(&l->async_full, a->full);
    STORE(&l->async_retried, a->retried);
    STORE(&l->async_busy, a->busy);
    STORE(&l->async_fds, a->fds);
}

void kl_metrics_conn_refused(kl_metrics_local *l, kl_metrics_refusal r)
{
    if (l && (unsigned)r < KL_REFUSE_REASONS)
        BUMP(&l->refused[r], 1);
}

void kl_metrics_conn_closed(kl_metrics_local *l, kl_metrics_close r)
{
    if (l && (unsigned)r < KL_CLOSE_REASONS)
        BUMP(&l->closed[r], 1);
}

void kl_metrics_accept_paused(kl_metrics_local *l, bool paused, uint64_t now_ns)
{
    if (!l || (LOAD(&l->pause_start) != 0) == paused)
        return;
    if (paused)
        BUMP(&l->pauses, 1);
    /* the writer's half of the seqlock (render.c reads it) */
    uint64_t seq = LOAD(&l->pause_seq);
    STORE(&l->pause_seq, seq + 1);
    atomic_thread_fence(memory_order_release);
    if (paused) {
        STORE(&l->pause_start, now_ns ? now_ns : 1); /* 0 means accepting */
    } else {
        uint64_t start = LOAD(&l->pause_start);
        BUMP(&l->paused_ns, now_ns > start ? now_ns - start : 0);
        STORE(&l->pause_start, 0);
    }
    atomic_store_explicit(&l->pause_seq, seq + 2, memory_order_release);
}

bool kl_metrics_accept_is_paused(const kl_metrics_local *l)
{
    return l && LOAD(&l->pause_start) != 0;
}

void kl_metrics_set_buffered(kl_metrics_local *l, uint64_t bytes,
                             uint64_t budget)
{
    if (!l)
        return;
    /* called every loop turn: store only what changed, so that the line
     * the scraper reads is not dirtied for nothing */
    if (LOAD(&l->buffered) != bytes)
        STORE(&l->buffered, bytes);
    if (LOAD(&l->buffer_budget) != budget)
        STORE(&l->buffer_budget, budget);
}

void kl_metrics_set_read_pauses(kl_metrics_local *l, uint64_t n)
{
    if (l && LOAD(&l->read_pauses) != n)
        STORE(&l->read_pauses, n);
}

void kl_metrics_set_queue_depth(kl_metrics *m, int cost_class, uint64_t n)
{
    if (m && cost_class >= 0 && cost_class < KL_METRICS_COST_CLASSES)
        STORE(&m->queue_depth[cost_class], n);
}

void kl_metrics_set_keys_loaded(kl_metrics *m, uint64_t n)
{
    if (m)
        STORE(&m->keys_loaded, n);
}

void kl_metrics_set_sealed_refused(kl_metrics *m, uint64_t n)
{
    if (m)
        STORE(&m->sealed_refused, n);
}

void kl_metrics_set_sealed_unroutable(kl_metrics *m, uint64_t n)
{
    if (m)
        STORE(&m->sealed_unroutable, n);
}

void kl_metrics_reload_result(kl_metrics *m, bool ok, time_t when)
{
    if (!m)
        return;
    STORE(&m->reload_ok, ok ? 1 : 0);
    STORE(&m->reload_time, (int64_t)when);
    /* Reloads are rare and may come from more than one thread (signal
     * handler thread, API), so this counter takes a real atomic add. */
    atomic_fetch_add_explicit(&m->reloads[ok ? 1 : 0], 1, memory_order_relaxed);
}

void kl_metrics_on_scrape(kl_metrics *m, kl_metrics_scrape_fn fn, void *arg)
{
    pthread_mutex_lock(&m->lock);
    m->on_scrape = fn;
    m->on_scrape_arg = arg;
    pthread_mutex_unlock(&m->lock);
}
