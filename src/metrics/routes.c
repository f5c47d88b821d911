/* SPDX-License-Identifier: Apache-2.0 */
/* keylessd_route_* and keylessd_trace_* (docs/METRICS.md):
 * figures owned by other modules (the router, the tracer), copied in by
 * the scrape hook and rendered with the rest under the metrics lock. */
#include <stdlib.h>
#include <string.h>

#include "metrics/internal.h"

void kl_metrics_set_routes(kl_metrics *m, const kl_metrics_route *r, size_t n)
{
    kl_metrics_route *copy = n ? malloc(n * sizeof *copy) : NULL;
    if (n && !copy)
        return; /* keep the previous figures */
    if (n)
        memcpy(copy, r, n * sizeof *copy);
    for (size_t i = 0; i < n; i++) {
        copy[i].name[sizeof copy[i].name - 1] = 0;
        copy[i].region[sizeof copy[i].region - 1] = 0;
    }
    pthread_mutex_lock(&m->lock);
    free(m->routes);
    m->routes = copy;
    m->nroutes = n;
    pthread_mutex_unlock(&m->lock);
}

void kl_metrics_set_tracing(kl_metrics *m, const kl_metrics_tracing *t)
{
    pthread_mutex_lock(&m->lock);
    m->tracing = *t;
    m->has_tracing = true;
    pthread_mutex_unlock(&m->lock);
}

void kl_metrics_set_fleet(kl_metrics *m, const kl_metrics_fleet *f)
{
    pthread_mutex_lock(&m->lock);
    m->fleet = *f;
    m->has_fleet = true;
    pthread_mutex_unlock(&m->lock);
}

static void render_fleet(const kl_metrics_fleet *f, mx_buf *b)
{
    if (f->reading) {
        mx_family(b, "keylessd_fleet_directory_in_sync", "gauge",
                  "1 while the fleet directory's watch is connected and etcd "
                  "answers; 0 while routing goes on with the last table.");
        mx_printf(b, "keylessd_fleet_directory_in_sync %d\n", f->in_sync);
        mx_family(b, "keylessd_fleet_directory_sync_age_seconds", "gauge",
                  "Seconds since the fleet directory was last in sync (0 "
                  "while it is).");
        mx_printf(b, "keylessd_fleet_directory_sync_age_seconds %.3f\n",
                  f->sync_age_s);
        mx_family(b, "keylessd_fleet_directory_servers", "gauge",
                  "Server records in the fleet directory as last read.");
        mx_printf(b, "keylessd_fleet_directory_servers %llu\n",
                  (unsigned long long)f->servers);
    }
    if (f->registering) {
        mx_family(b, "keylessd_fleet_registered", "gauge",
                  "1 while this server's record is on a live etcd lease.");
        mx_printf(b, "keylessd_fleet_registered %d\n", f->registered);
        mx_family(b, "keylessd_fleet_registrations_total", "counter",
                  "Times this server wrote its record on a new lease (the "
                  "first, then after each lease lost).");
        mx_printf(b, "keylessd_fleet_registrations_total %llu\n",
                  (unsigned long long)f->registrations);
    }
}

void mx_routes_free(kl_metrics *m)
{
    free(m->routes);
    m->routes = NULL;
    m->nroutes = 0;
}

/* name{region="..",route=".."} (labels sorted by name) */
static void route_labels(mx_buf *b, const char *name, const kl_metrics_route *r)
{
    mx_printf(b, "%s{region=\"", name);
    mx_put_label_value(b, r->region);
    mx_puts(b, "\",route=\"");
    mx_put_label_value(b, r->name);
    mx_puts(b, "\"} ");
}

void mx_render_routes(kl_metrics *m, mx_buf *b)
{
    if (m->nroutes) {
        const kl_metrics_route *r = m->routes;
        size_t n = m->nroutes;
        mx_family(b, "keylessd_route_up", "gauge",
                  "1 if the route's last probe or request succeeded.");
        for (size_t i = 0; i < n; i++) {
            route_labels(b, "keylessd_route_up", &r[i]);
            mx_printf(b, "%d\n", r[i].up ? 1 : 0);
        }
        mx_family(b, "keylessd_route_latency_ewma_seconds", "gauge",
                  "Moving average of the route's round trips.");
        for (size_t i = 0; i < n; i++)
            if (r[i].ewma_seconds >= 0) {
                route_labels(b, "keylessd_route_latency_ewma_seconds", &r[i]);
                mx_put_double(b, r[i].ewma_seconds);
                mx_puts(b, "\n");
            }
        mx_family(b, "keylessd_route_requests_in_flight", "gauge",
                  "Forwarded requests waiting for the route's answer.");
        for (size_t i = 0; i < n; i++) {
            route_labels(b, "keylessd_route_requests_in_flight", &r[i]);
            mx_printf(b, "%llu\n", (unsigned long long)r[i].inflight);
        }
        mx_family(b, "keylessd_route_requests_total", "counter",
                  "Attempts sent to the route.");
        for (size_t i = 0; i < n; i++) {
            route_labels(b, "keylessd_route_requests_total", &r[i]);
            mx_printf(b, "%llu\n", (unsigned long long)r[i].requests);
        }
        mx_family(b, "keylessd_route_errors_total", "counter",
                  "Attempts on the route that timed out or lost their "
                  "connection.");
        for (size_t i = 0; i < n; i++) {
            route_labels(b, "keylessd_route_errors_total", &r[i]);
            mx_printf(b, "%llu\n", (unsigned long long)r[i].errors);
        }
    }
    if (m->has_fleet)
        render_fleet(&m->fleet, b);
    if (m->has_tracing) {
        const kl_metrics_tracing *t = &m->tracing;
        mx_family(b, "keylessd_trace_spans_exported_total", "counter",
                  "Spans the trace collector accepted.");
        mx_printf(b, "keylessd_trace_spans_exported_total %llu\n",
                  (unsigned long long)t->exported);
        mx_family(b, "keylessd_trace_spans_dropped_total", "counter",
                  "Spans dropped: their queue was full, or their batch "
                  "failed.");
        mx_printf(b,
                  "keylessd_trace_spans_dropped_total{reason=\"export_failed\"}"
                  " %llu\n",
                  (unsigned long long)t->dropped_export);
        mx_printf(b,
                  "keylessd_trace_spans_dropped_total{reason=\"queue_full\"} "
                  "%llu\n",
                  (unsigned long long)t->dropped_full);
        mx_family(b, "keylessd_trace_export_failures_total", "counter",
                  "Trace export requests that failed.");
        mx_printf(b, "keylessd_trace_export_failures_total %llu\n",
                  (unsigned long long)t->export_failures);
    }
}
