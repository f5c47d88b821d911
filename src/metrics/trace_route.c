/* SPDX-License-Identifier: Apache-2.0 */
/* Spans for the router's attempts (trace.h: "the router's attempts"):
 * route choice and each attempt of a forwarded request, on the router
 * thread, children of the server's route span (routed.c). */
#include <stdio.h>
#include <string.h>

#include "core/time.h"
#include "metrics/trace.h"

static uint64_t be64_get(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void be64_set(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

void kl_trace_attempt_init(kl_trace_attempt *a, bool traced, uint8_t *ctx,
                           size_t len)
{
    memset(a, 0, sizeof *a);
    if (!traced || !ctx || len != KL_SPANCTX_BINARY_LEN)
        return;
    a->ctx = ctx;
    a->route_span = be64_get(ctx + 16); /* as routed.c wrote it */
}

static void span_base(kl_span *sp, const kl_trace_attempt *a, const char *name,
                      uint8_t kind)
{
    memset(sp, 0, sizeof *sp);
    memcpy(sp->trace_id, a->ctx, 16);
    sp->name = name;
    sp->kind = kind;
}

void kl_trace_attempt_begin(kl_tracer *t, kl_trace_attempt *a,
                            uint64_t choose_ns, const char *remote,
                            const char *region, unsigned candidates)
{
    if (!a->ctx || !t)
        return;
    if (a->span_id) /* the previous attempt was not ended: end it now */
        kl_trace_attempt_end(t, a, "abandoned", true);
    uint64_t now = kl_now_ns();
    a->n++;
    kl_span sp;
    span_base(&sp, a, "keyless.route.choose", KL_SPAN_INTERNAL);
    sp.span_id = kl_tracer_new_id(t);
    sp.parent_id = a->route_span;
    sp.start_ns = choose_ns <= now ? choose_ns : now;
    sp.end_ns = now;
    kl_span_attr_str(&sp, "keyless.remote", remote);
    if (region && *region)
        kl_span_attr_str(&sp, "keyless.region", region);
    kl_span_attr_int(&sp, "keyless.attempt", a->n);
    kl_span_attr_int(&sp, "keyless.candidates", candidates);
    kl_tracer_emit(t, &sp);
    a->span_id = kl_tracer_new_id(t);
    a->start_ns = now;
    snprintf(a->remote, sizeof a->remote, "%s", remote ? remote : "");
    /* protocol P3: the upstream reads its parent from the span id */
    be64_set(a->ctx + 16, a->span_id);
    be64_set(a->ctx + 24, a->route_span);
}

void kl_trace_attempt_end(kl_tracer *t, kl_trace_attempt *a,
                          const char *outcome, bool error)
{
    if (!a->ctx || !t || !a->span_id)
        return;
    kl_span sp;
    span_base(&sp, a, "keyless.route.attempt", KL_SPAN_CLIENT);
    sp.span_id = a->span_id;
    sp.parent_id = a->route_span;
    sp.start_ns = a->start_ns;
    sp.end_ns = kl_now_ns();
    sp.error = error;
    if (error)
        snprintf(sp.status_msg, sizeof sp.status_msg, "%s", outcome);
    kl_span_attr_str(&sp, "keyless.remote", a->remote);
    kl_span_attr_int(&sp, "keyless.attempt", a->n);
    kl_span_attr_str(&sp, "keyless.outcome", outcome);
    kl_tracer_emit(t, &sp);
    a->span_id = 0;
}
