/* SPDX-License-Identifier: Apache-2.0 */
/* The span recorder and its exporter thread (trace.h has the rules).
 *
 * Rings. A ring is a power-of-two array of span slots with a head written
 * by its one producer and a tail written by the exporter (release stores,
 * acquire loads: the slot is written before head moves, and read before
 * tail moves). The producer never waits: a full ring drops the span and
 * counts it with a relaxed load and store (one writer).
 *
 * Export. The exporter sleeps on a condition variable for at most
 * POLL_MS, then sends when the flush interval has passed or a ring is half
 * full - producers do not signal it, so recording costs no system call.
 * Each batch is one POST with bounded connect and total timeouts; a
 * failure drops the batch, counts it, and is logged at most once a
 * minute. */
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/log.h"
#include "core/time.h"
#include "metrics/trace.h"

#define POLL_MS 100
#define FAIL_LOG_NS (60 * KL_NS_PER_S)

struct kl_trace_ring {
    _Atomic uint64_t head; /* producer */
    _Atomic uint64_t tail; /* exporter */
    _Atomic uint64_t dropped;
    uint64_t rng; /* producer only */
    uint64_t sample_below;
    bool sample_all;
    unsigned mask;
    kl_span *slots;
};

struct kl_tracer {
    char *endpoint, *service;
    unsigned nrings; /* + 1 shared ring at index nrings */
    kl_trace_ring *rings;
    pthread_mutex_t shared_mu; /* producers of the shared ring */
    unsigned batch_max;
    int flush_ms, timeout_ms, connect_timeout_ms;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping;
    int final_wait_ms;
    kl_span *batch; /* exporter only */
    CURL *curl;     /* exporter only */
    struct curl_slist *headers;
    uint64_t fail_log_ns; /* exporter only */
    uint64_t fails_unlogged;
    bool failing;
    _Atomic uint64_t exported, dropped_export, export_failures, batches;
};

#define BUMP(t, f, n)                                                          \
    atomic_store_explicit(                                                     \
        &(t)->f, atomic_load_explicit(&(t)->f, memory_order_relaxed) + (n),    \
        memory_order_relaxed)

/* ---- ids and sampling --------------------------------------------------- */

static uint64_t seed(void)
{
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s)
        s = kl_now_ns() ^ (uint64_t)(uintptr_t)&s;
    return s ? s : 0x9E3779B97F4A7C15ull;
}

/* xorshift64*: ids only need to be unique in practice, not secret */
static uint64_t next_rand(uint64_t *st)
{
    uint64_t x = *st;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *st = x;
    return x * 0x2545F4914F6CDD1Dull;
}

uint64_t kl_trace_ring_new_id(kl_trace_ring *r)
{
    uint64_t v;
    do
        v = next_rand(&r->rng);
    while (!v);
    return v;
}

void kl_trace_ring_new_trace(kl_trace_ring *r, uint8_t trace_id[16])
{
    uint64_t a = kl_trace_ring_new_id(r), b = next_rand(&r->rng);
    for (int i = 0; i < 8; i++) {
        trace_id[i] = (uint8_t)(a >> (56 - 8 * i));
        trace_id[8 + i] = (uint8_t)(b >> (56 - 8 * i));
    }
}

bool kl_trace_ring_sample(kl_trace_ring *r)
{
    if (r->sample_all)
        return true;
    return r->sample_below && next_rand(&r->rng) < r->sample_below;
}

void kl_trace_ref_start(kl_trace_ring *r, const uint8_t *ctx, size_t len,
                        kl_trace_ref *ref, bool *bad)
{
    memset(ref, 0, sizeof *ref);
    *bad = false;
    if (ctx) {
        kl_span_context sc;
        if (kl_span_context_parse(ctx, len, &sc) == KL_OK) {
            /* protocol P3: the caller's span becomes our parent; its
             * sampled flag is the caller's decision for the whole trace */
            if (!(sc.flags & KL_TRACE_FLAG_SAMPLED))
                return;
            ref->sampled = true;
            memcpy(ref->trace_id, sc.trace_id, 16);
            ref->parent_id = sc.span_id;
            ref->span_id = kl_trace_ring_new_id(r);
            return;
        }
        *bad = true; /* logged by the caller and treated as absent */
    }
    if (!kl_trace_ring_sample(r))
        return;
    ref->sampled = true;
    kl_trace_ring_new_trace(r, ref->trace_id);
    ref->span_id = kl_trace_ring_new_id(r);
}

/* ---- recording ----------------------------------------------------------- */

void kl_trace_ring_emit(kl_trace_ring *r, const kl_span *sp)
{
    uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
    if (h - t > r->mask) {
        BUMP(r, dropped, 1); /* the exporter is behind: never wait */
        return;
    }
    r->slots[h & r->mask] = *sp;
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
}

kl_trace_ring *kl_tracer_ring(kl_tracer *t, unsigned i)
{
    return t && i < t->nrings ? &t->rings[i] : NULL;
}

void kl_tracer_emit(kl_tracer *t, const kl_span *sp)
{
    pthread_mutex_lock(&t->shared_mu);
    kl_trace_ring_emit(&t->rings[t->nrings], sp);
    pthread_mutex_unlock(&t->shared_mu);
}

uint64_t kl_tracer_new_id(kl_tracer *t)
{
    pthread_mutex_lock(&t->shared_mu);
    uint64_t v = kl_trace_ring_new_id(&t->rings[t->nrings]);
    pthread_mutex_unlock(&t->shared_mu);
    return v;
}

void kl_tracer_get_stats(kl_tracer *t, kl_tracer_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!t)
        return;
    for (unsigned i = 0; i <= t->nrings; i++)
        out->dropped_full +=
            atomic_load_explicit(&t->rings[i].dropped, memory_order_relaxed);
    out->exported = atomic_load_explicit(&t->exported, memory_order_relaxed);
    out->dropped_export =
        atomic_load_explicit(&t->dropped_export, memory_order_relaxed);
    out->export_failures =
        atomic_load_explicit(&t->export_failures, memory_order_relaxed);
    out->batches = atomic_load_explicit(&t->batches, memory_order_relaxed);
}

/* ---- export ----------------------------------------------------------------
 */

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return size * n;
}

static int64_t mono_to_unix(void)
{
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    int64_t real = (int64_t)kl_timespec_to_ns(&rt);
    return real - (int64_t)kl_now_ns();
}

static void note_failure(kl_tracer *t, size_t n, const char *why)
{
    BUMP(t, export_failures, 1);
    BUMP(t, dropped_export, n);
    uint64_t now = kl_now_ns();
    if (!t->failing || now - t->fail_log_ns >= FAIL_LOG_NS) {
        kl_warn("tracing: export to %s failed: %s; %zu span(s) dropped"
                "%s (keys are served as usual; next report in a minute)",
                t->endpoint, why, n,
                t->fails_unlogged ? ", more failures since the last report"
                                  : "");
        t->fail_log_ns = now;
        t->fails_unlogged = 0;
    } else {
        t->fails_unlogged++;
    }
    t->failing = true;
}

/* POSTs spans[0..n); timeout_ms bounds the whole transfer. */
static void post(kl_tracer *t, size_t n, int timeout_ms)
{
    size_t len = 0;
    char *body = kl_otlp_encode(t->batch, n, t->service, mono_to_unix(), &len);
    if (!body) {
        note_failure(t, n, "out of memory encoding the batch");
        return;
    }
    CURL *c = t->curl;
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                     (long)(timeout_ms > 0 ? timeout_ms : 1));
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    free(body);
    if (rc != CURLE_OK) {
        note_failure(t, n, curl_easy_strerror(rc));
        return;
    }
    if (code < 200 || code > 299) {
        char why[64];
        snprintf(why, sizeof why, "the collector answered HTTP %ld", code);
        note_failure(t, n, why);
        return;
    }
    if (t->failing)
        kl_info("tracing: export to %s works again", t->endpoint);
    t->failing = false;
    BUMP(t, exported, n);
    BUMP(t, batches, 1);
}

/* Moves up to max spans from the rings into the batch. */
static size_t collect(kl_tracer *t, size_t max)
{
    size_t n = 0;
    for (unsigned i = 0; i <= t->nrings && n < max; i++) {
        kl_trace_ring *r = &t->rings[i];
        uint64_t tl = atomic_load_explicit(&r->tail, memory_order_relaxed);
        uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);
        while (tl != h && n < max)
            t->batch[n++] = r->slots[tl++ & r->mask];
        atomic_store_explicit(&r->tail, tl, memory_order_release);
    }
    return n;
}

static bool half_full(const kl_tracer *t)
{
    for (unsigned i = 0; i <= t->nrings; i++) {
        const kl_trace_ring *r = &t->rings[i];
        uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);
        uint64_t tl = atomic_load_explicit(&r->tail, memory_order_relaxed);
        if (h - tl > r->mask / 2)
            return true;
    }
    return false;
}

/* Sends everything queued; until_ns (0: no limit) bounds the time. */
static void flush(kl_tracer *t, uint64_t until_ns)
{
    size_t n;
    while ((n = collect(t, t->batch_max)) > 0) {
        int budget = t->timeout_ms;
        if (until_ns) {
            uint64_t now = kl_now_ns();
            if (now >= until_ns) {
                BUMP(t, dropped_export, n); /* out of time at shutdown */
                continue;
            }
            uint64_t left = (until_ns - now) / KL_NS_PER_MS;
            if (left < (uint64_t)budget)
                budget = left ? (int)left : 1;
        }
        post(t, n, budget);
    }
}

static void *exporter_main(void *arg)
{
    kl_tracer *t = arg;
    pthread_setname_np(pthread_self(), "kl-trace-export");
    uint64_t last = kl_now_ns();
    pthread_mutex_lock(&t->mu);
    while (!t->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += POLL_MS * (long)KL_NS_PER_MS;
        if (ts.tv_nsec >= (long)KL_NS_PER_S) {
            ts.tv_sec++;
            ts.tv_nsec -= (long)KL_NS_PER_S;
        }
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
        if (t->stopping)
            break;
        pthread_mutex_unlock(&t->mu);
        uint64_t now = kl_now_ns();
        if (now - last >= kl_ms_to_ns((uint64_t)t->flush_ms) || half_full(t)) {
            flush(t, 0);
            last = kl_now_ns();
        }
        pthread_mutex_lock(&t->mu);
    }
    int wait_ms = t->final_wait_ms;
    pthread_mutex_unlock(&t->mu);
    flush(t, kl_now_ns() + kl_ms_to_ns((uint64_t)(wait_ms > 0 ? wait_ms : 1)));
    return NULL;
}

/* ---- life cycle ------------------------------------------------------------
 */

static unsigned pow2_at_least(unsigned n)
{
    unsigned p = 16;
    while (p < n && p < (1u << 20))
        p <<= 1;
    return p;
}

static void free_parts(kl_tracer *t)
{
    if (t->rings)
        for (unsigned i = 0; i <= t->nrings; i++)
            free(t->rings[i].slots);
    free(t->rings);
    free(t->batch);
    if (t->curl)
        curl_easy_cleanup(t->curl);
    curl_slist_free_all(t->headers);
    free(t->endpoint);
    free(t->service);
    free(t);
}

const kl_tracer_opts kl_tracer_defaults = {
    .service_name = "keylessd",
    .rings = 1,
    .ring_slots = 2048,
    .batch_max = 512,
    .flush_ms = 1000,
    .timeout_ms = 2000,
    .connect_timeout_ms = 1000,
};

kl_status kl_tracer_new(const kl_tracer_opts *o, kl_tracer **out, char *err,
                        size_t errlen)
{
    *out = NULL;
    if (!o->endpoint || (strncmp(o->endpoint, "http://", 7) &&
                         strncmp(o->endpoint, "https://", 8))) {
        snprintf(err, errlen,
                 "tracing_address: \"%s\" is not an http:// or https:// "
                 "OTLP endpoint",
                 o->endpoint ? o->endpoint : "");
        return KL_E_CONFIG;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, errlen, "tracing: libcurl failed to start");
        return KL_E_NOMEM;
    }
    kl_tracer *t = calloc(1, sizeof *t);
    if (!t) {
        curl_global_cleanup();
        snprintf(err, errlen, "tracing: out of memory");
        return KL_E_NOMEM;
    }
    t->nrings = o->rings;
    t->batch_max = o->batch_max;
    t->flush_ms = o->flush_ms;
    t->timeout_ms = o->timeout_ms;
    t->connect_timeout_ms = o->connect_timeout_ms;
    t->endpoint = strdup(o->endpoint);
    t->service = strdup(o->service_name);
    t->rings = calloc(t->nrings + 1, sizeof *t->rings);
    t->batch = calloc(t->batch_max, sizeof *t->batch);
    t->curl = curl_easy_init();
    t->headers = curl_slist_append(NULL, "Content-Type: application/json");
    bool ok = t->endpoint && t->service && t->rings && t->batch && t->curl &&
              t->headers;
    unsigned cap = pow2_at_least(o->ring_slots);
    double rate = o->sample_rate;
    for (unsigned i = 0; ok && i <= t->nrings; i++) {
        kl_trace_ring *r = &t->rings[i];
        r->slots = calloc(cap, sizeof *r->slots);
        ok = r->slots != NULL;
        r->mask = cap - 1;
        r->rng = seed();
        r->sample_all = rate >= 1.0;
        /* rate x 2^64, as a threshold for a uniform 64-bit draw */
        r->sample_below = rate > 0 && rate < 1
                              ? (uint64_t)(rate * 18446744073709551616.0)
                              : 0;
    }
    if (!ok) {
        free_parts(t);
        curl_global_cleanup();
        snprintf(err, errlen, "tracing: out of memory");
        return KL_E_NOMEM;
    }
    CURL *c = t->curl;
    curl_easy_setopt(c, CURLOPT_URL, t->endpoint);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, t->headers);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* a thread of its own */
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)t->connect_timeout_ms);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "keylessd");
    /* the collector is one host: no redirects to elsewhere, no proxy from
     * the environment that an operator did not choose for this */
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    pthread_mutex_init(&t->shared_mu, NULL);
    pthread_mutex_init(&t->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&t->thread, NULL, exporter_main, t) != 0) {
        pthread_mutex_destroy(&t->shared_mu);
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->cv);
        free_parts(t);
        curl_global_cleanup();
        snprintf(err, errlen, "tracing: cannot start the exporter thread");
        return KL_E_NOMEM;
    }
    *out = t;
    return KL_OK;
}

void kl_tracer_free(kl_tracer *t, int wait_ms)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->stopping = true;
    t->final_wait_ms = wait_ms;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    kl_tracer_stats st;
    kl_tracer_get_stats(t, &st);
    kl_info("tracing: %llu span(s) exported, %llu dropped (queue full), "
            "%llu dropped (export failed)",
            (unsigned long long)st.exported,
            (unsigned long long)st.dropped_full,
            (unsigned long long)st.dropped_export);
    pthread_mutex_destroy(&t->shared_mu);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free_parts(t);
    curl_global_cleanup();
}
