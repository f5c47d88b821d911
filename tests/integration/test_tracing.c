/* SPDX-License-Identifier: Apache-2.0 */
/* Request tracing (docs/TRACING.md) through real daemons: an
 * OTLP/HTTP sink written here (libmicrohttpd on 127.0.0.1) receives what
 * keylessd exports, and the test checks the spans themselves:
 * - a request with a tag-0x15 context (text form, sampled): the server span
 *   is the client span's child in the client's trace; key lookup, queue
 *   wait and execution are the server span's children, in time order and
 *   inside it;
 * - without a context (sample rate 1): a new trace, a root server span;
 * - an unsampled context is not traced even at rate 1; a malformed one is
 *   ignored (a new trace);
 * - forwarded through a router keylessd: route and attempt spans on the
 *   router, and the backend's server span is the attempt's child, all in
 *   the client's trace;
 * - sample rate 0 exports nothing; a dead collector does not affect
 *   serving and the dropped spans are counted. */
#include "test_router_server_common.h"
#include "net.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <microhttpd.h>
#include <pthread.h>

/* ---- the OTLP sink ------------------------------------------------------- */

#define MAX_SPANS 512

typedef struct sink_span {
    char trace[33], id[17], parent[17], name[64];
    int kind, status;
    uint64_t start, end;
    char rid[64], service[32];
} sink_span;

typedef struct sink {
    struct MHD_Daemon *d;
    uint16_t port;
    pthread_mutex_t mu;
    sink_span spans[MAX_SPANS];
    size_t n;
    unsigned posts, bad_posts;
} sink;

typedef struct body {
    char *p;
    size_t len;
} body;

static uint64_t num_str(json_t *v)
{
    const char *s = json_string_value(v);
    return s ? strtoull(s, NULL, 10) : 0;
}

static void copy_str(char *out, size_t cap, json_t *v)
{
    const char *s = json_string_value(v);
    snprintf(out, cap, "%s", s ? s : "");
}

/* Takes one ExportTraceServiceRequest (the whole structure is checked:
 * a body that does not follow it counts as bad). */
static void take(sink *k, const char *text, size_t len)
{
    json_error_t e;
    json_t *root = json_loadb(text, len, 0, &e);
    json_t *rs = json_object_get(root, "resourceSpans");
    bool ok = json_is_array(rs) && json_array_size(rs) == 1;
    json_t *r0 = json_array_get(rs, 0);
    json_t *rattrs =
        json_object_get(json_object_get(r0, "resource"), "attributes");
    char service[32] = "";
    size_t i;
    json_t *a;
    json_array_foreach(rattrs, i, a)
    {
        const char *key = json_string_value(json_object_get(a, "key"));
        if (key && !strcmp(key, "service.name"))
            copy_str(
                service, sizeof service,
                json_object_get(json_object_get(a, "value"), "stringValue"));
    }
    json_t *ss = json_object_get(r0, "scopeSpans");
    ok = ok && json_is_array(ss) && json_array_size(ss) == 1;
    json_t *spans = json_object_get(json_array_get(ss, 0), "spans");
    ok = ok && json_is_array(spans);
    pthread_mutex_lock(&k->mu);
    k->posts++;
    if (!ok)
        k->bad_posts++;
    json_t *sp;
    json_array_foreach(spans, i, sp)
    {
        if (k->n >= MAX_SPANS)
            break;
        sink_span *o = &k->spans[k->n++];
        memset(o, 0, sizeof *o);
        copy_str(o->trace, sizeof o->trace, json_object_get(sp, "traceId"));
        copy_str(o->id, sizeof o->id, json_object_get(sp, "spanId"));
        copy_str(o->parent, sizeof o->parent,
                 json_object_get(sp, "parentSpanId"));
        copy_str(o->name, sizeof o->name, json_object_get(sp, "name"));
        snprintf(o->service, sizeof o->service, "%s", service);
        o->kind = (int)json_integer_value(json_object_get(sp, "kind"));
        o->status = (int)json_integer_value(
            json_object_get(json_object_get(sp, "status"), "code"));
        /* times are decimal strings in OTLP JSON */
        o->start = num_str(json_object_get(sp, "startTimeUnixNano"));
        o->end = num_str(json_object_get(sp, "endTimeUnixNano"));
        size_t j;
        json_t *at;
        json_array_foreach(json_object_get(sp, "attributes"), j, at)
        {
            const char *key = json_string_value(json_object_get(at, "key"));
            if (key && !strcmp(key, "keyless.request_id"))
                copy_str(o->rid, sizeof o->rid,
                         json_object_get(json_object_get(at, "value"),
                                         "stringValue"));
        }
        if (strlen(o->trace) != 32 || strlen(o->id) != 16 || !o->start ||
            !o->name[0])
            k->bad_posts++;
    }
    pthread_mutex_unlock(&k->mu);
    json_decref(root);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *data,
                                  size_t *data_size, void **con_cls)
{
    sink *k = cls;
    body *b = *con_cls;
    if (!b) {
        *con_cls = calloc(1, sizeof *b);
        return MHD_YES;
    }
    if (*data_size) {
        b->p = realloc(b->p, b->len + *data_size + 1);
        memcpy(b->p + b->len, data, *data_size);
        b->len += *data_size;
        *data_size = 0;
        return MHD_YES;
    }
    bool good = !strcmp(method, "POST") && !strcmp(url, "/v1/traces");
    if (good)
        take(k, b->p ? b->p : "", b->len);
    struct MHD_Response *r = MHD_create_response_from_buffer(
        2, (void *)"{}", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret =
        MHD_queue_response(conn, good ? MHD_HTTP_OK : MHD_HTTP_NOT_FOUND, r);
    MHD_destroy_response(r);
    return ret;
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode t)
{
    body *b = *con_cls;
    if (b) {
        free(b->p);
        free(b);
    }
    *con_cls = NULL;
}

static sink *sink_start(void)
{
    sink *k = calloc(1, sizeof *k);
    pthread_mutex_init(&k->mu, NULL);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    k->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
                            on_request, k, MHD_OPTION_SOCK_ADDR, &sa,
                            MHD_OPTION_NOTIFY_COMPLETED, on_done, k,
                            MHD_OPTION_END);
    assert_non_null(k->d);
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(k->d, MHD_DAEMON_INFO_BIND_PORT);
    k->port = info->port;
    return k;
}

static void sink_stop(sink *k)
{
    MHD_stop_daemon(k->d);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

/* Spans of one trace (copied out), waiting up to ms for at least want. */
static size_t sink_trace(sink *k, const char *trace, size_t want,
                         sink_span *out, size_t cap, int ms)
{
    double until = td_now_ms() + ms;
    size_t n;
    for (;;) {
        n = 0;
        pthread_mutex_lock(&k->mu);
        for (size_t i = 0; i < k->n; i++)
            if (!strcmp(k->spans[i].trace, trace) && n < cap)
                out[n++] = k->spans[i];
        pthread_mutex_unlock(&k->mu);
        if (n >= want || td_now_ms() >= until)
            return n;
        fp_sleep_ms(50);
    }
}

static size_t sink_count(sink *k)
{
    pthread_mutex_lock(&k->mu);
    size_t n = k->n;
    pthread_mutex_unlock(&k->mu);
    return n;
}

/* The trace id of the span with request id rid (waits up to ms). */
static bool sink_trace_of(sink *k, const char *rid, char trace[33], int ms)
{
    double until = td_now_ms() + ms;
    do {
        pthread_mutex_lock(&k->mu);
        for (size_t i = 0; i < k->n; i++)
            if (!strcmp(k->spans[i].rid, rid)) {
                memcpy(trace, k->spans[i].trace, 33);
                pthread_mutex_unlock(&k->mu);
                return true;
            }
        pthread_mutex_unlock(&k->mu);
        fp_sleep_ms(50);
    } while (td_now_ms() < until);
    return false;
}

static const sink_span *find(const sink_span *s, size_t n, const char *name,
                             const char *service_parent)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s[i].name, name) &&
            (!service_parent || !strcmp(s[i].parent, service_parent)))
            return &s[i];
    return NULL;
}

static const sink_span *must(const sink_span *s, size_t n, const char *name,
                             const char *parent)
{
    const sink_span *sp = find(s, n, name, parent);
    if (!sp) {
        for (size_t i = 0; i < n; i++)
            print_message("  span %s id %s parent %s\n", s[i].name, s[i].id,
                          s[i].parent);
        fail_msg("no span \"%s\" with parent \"%s\"", name,
                 parent ? parent : "(any)");
    }
    return sp;
}

/* child lies inside parent (1 ms of slack for the clocks' rounding) and
 * its own times are ordered */
static void inside(const sink_span *child, const sink_span *parent)
{
    assert_true(child->start <= child->end);
    assert_true(child->start + 1000000 >= parent->start);
    assert_true(child->end <= parent->end + 1000000);
}

/* ---- helpers ----------------------------------------------------------------
 */

static char *tmp;
static char endpoint_flag[128];

static int setup(void **state)
{
    (void)state;
    tmp = tp_tempdir("tracing");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tp_rmtree(tmp);
    return 0;
}

/* The value of one series in a scrape of the metrics port (HTTP/1.0
 * GET /metrics); -1 when absent. */
static double scrape_value(uint16_t port, const char *series)
{
    char *buf;
    (void)tn_http_get(port, "/metrics", &buf); /* absent: -1 below */
    double v = -1;
    size_t n = strlen(series);
    for (char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (!strncmp(p, series, n) && p[n] == ' ') {
            v = strtod(p + n + 1, NULL);
            break;
        }
    free(buf);
    return v;
}

static uint16_t metrics_port; /* 0: start_traced leaves metrics off */

static void start_traced(td_daemon *d, const char *name, const char *keydir,
                         const char *table, sink *k, const char *rate)
{
    static char addr[128], rate_flag[64], mport[64];
    if (k)
        snprintf(addr, sizeof addr,
                 "--tracing-address=http://127.0.0.1:%u/v1/traces", k->port);
    else
        snprintf(addr, sizeof addr, "%s", endpoint_flag);
    snprintf(rate_flag, sizeof rate_flag, "--tracing-sample-rate=%s", rate);
    snprintf(mport, sizeof mport, "--metrics-port=%u", metrics_port);
    const char *extra[] = {"--tracing-enabled=true",      addr,  rate_flag,
                           "--metrics-address=127.0.0.1", mport, NULL};
    rs_start(d, name, keydir, table, extra);
    if (metrics_port)
        rs_wait_log(d, "metrics: http://127.0.0.1:", 1, 5000);
}

/* A signing request with an optional tag 0x15 and request id. */
static void sign(const td_daemon *d, kl_client *c, const uint8_t *ski,
                 const char *spanctx, const char *rid, const char *verify)
{
    kl_request_spec s = rs_sign_spec(ski);
    char ctx[128];
    if (spanctx) {
        s.span_context = (const uint8_t *)spanctx;
        s.span_context_len = strlen(spanctx);
    }
    if (rid) {
        snprintf(ctx, sizeof ctx, "{\"request_id\":\"%s\"}", rid);
        s.req_context = ctx;
    }
    kl_client_result r;
    td_call(d, c, &s, &r);
    if (r.opcode != KL_OP_RESPONSE) {
        td_dump_log(d);
        fail_msg("expected a signature, got opcode 0x%02x error 0x%02x",
                 r.opcode, r.error);
    }
    assert_true(rs_verify(verify, r.payload, r.payload_len));
    kl_client_result_free(&r);
}

#define CLIENT_TRACE "4bf92f3577b34da6a3ce929d0e0e4736"
#define CLIENT_SPAN "00f067aa0ba902b7"

/* ---- tests ------------------------------------------------------------------
 */

static void test_local(void **state)
{
    (void)state;
    sink *k = sink_start();
    uint8_t ski[20];
    char *kd = rs_keydir("tr-local", "ecdsa-p256", ski);
    td_daemon d;
    start_traced(&d, "tr-local", kd, NULL, k, "1");
    kl_client *c = td_connect(&d);

    /* 1. with the client's context (Jaeger text form, sampled) */
    sign(&d, c, ski, CLIENT_TRACE ":" CLIENT_SPAN ":0:1", "with-ctx",
         "ecdsa-p256");
    sink_span s[32];
    size_t n = sink_trace(k, CLIENT_TRACE, 4, s, 32, 5000);
    const sink_span *srv = must(s, n, "keyless.request", CLIENT_SPAN);
    assert_int_equal(srv->kind, 2); /* SERVER */
    assert_int_equal(srv->status, 0);
    assert_string_equal(srv->rid, "with-ctx");
    assert_string_equal(srv->service, "keylessd");
    const sink_span *lk = must(s, n, "keyless.key_lookup", srv->id);
    const sink_span *qw = must(s, n, "keyless.queue_wait", srv->id);
    const sink_span *ex = must(s, n, "keyless.execute", srv->id);
    inside(lk, srv);
    inside(qw, srv);
    inside(ex, srv);
    /* in order: lookup, then the queue, then the crypto */
    assert_true(lk->end <= qw->start + 1000);
    assert_true(qw->end <= ex->start + 1000);
    assert_true(ex->end > ex->start);         /* an ECDSA signature */
    assert_true(srv->end - srv->start < 5e9); /* plausible */
    assert_int_equal(n, 4);

    /* 2. no context: a new trace with a root server span */
    sign(&d, c, ski, NULL, "no-ctx", "ecdsa-p256");
    char trace[33];
    assert_true(sink_trace_of(k, "no-ctx", trace, 5000));
    assert_string_not_equal(trace, CLIENT_TRACE);
    n = sink_trace(k, trace, 4, s, 32, 5000);
    srv = must(s, n, "keyless.request", "");
    must(s, n, "keyless.execute", srv->id);

    /* 3. an unsampled context is not traced (the caller decided) */
    sign(&d, c, ski, "aaaabbbbccccdddd1111222233334444:" CLIENT_SPAN ":0:0",
         "unsampled", "ecdsa-p256");
    /* 4. a malformed one is ignored: traced as a new trace */
    sign(&d, c, ski, "zz:yy", "malformed", "ecdsa-p256");
    assert_true(sink_trace_of(k, "malformed", trace, 5000));
    assert_string_not_equal(trace, "aaaabbbbccccdddd1111222233334444");
    kl_client_close(c);
    assert_int_equal(td_stop(&d, 0), 0); /* flushes */
    assert_int_equal(
        sink_trace(k, "aaaabbbbccccdddd1111222233334444", 1, s, 32, 0), 0);
    pthread_mutex_lock(&k->mu);
    assert_int_equal(k->bad_posts, 0);
    pthread_mutex_unlock(&k->mu);
    sink_stop(k);
    tp_rmtree(kd);
}

static void test_forwarded(void **state)
{
    (void)state;
    sink *k = sink_start();
    uint8_t ski[20];
    char *kd = rs_keydir("tr-backend", "ecdsa-p256", ski);
    td_daemon backend, router;
    start_traced(&backend, "tr-backend", kd, NULL, k, "1");
    char table[1100], text[1024];
    snprintf(table, sizeof table, "%s/table.yaml", tmp);
    snprintf(text, sizeof text,
             "region_codes: {2: eu}\n"
             "servers:\n"
             "  - {name: backend, address: \"127.0.0.1:%u\", region: eu, "
             "serves: [%s]}\n",
             backend.port, tp_ski_hex(ski));
    fp_write_file(table, text);
    metrics_port = tn_free_port();
    uint16_t router_metrics = metrics_port;
    start_traced(&router, "tr-router", NULL, table, k, "1");
    metrics_port = 0;
    kl_client *c = td_connect(&router);
    sign(&router, c, ski, CLIENT_TRACE ":" CLIENT_SPAN ":0:1", "fwd",
         "ecdsa-p256");
    kl_client_close(c);
    /* router: request, key_lookup, route, choose, attempt; backend:
     * request, key_lookup, queue_wait, execute */
    sink_span s[32];
    size_t n = sink_trace(k, CLIENT_TRACE, 9, s, 32, 6000);
    const sink_span *rsrv = must(s, n, "keyless.request", CLIENT_SPAN);
    const sink_span *route = must(s, n, "keyless.route", rsrv->id);
    const sink_span *choose = must(s, n, "keyless.route.choose", route->id);
    const sink_span *att = must(s, n, "keyless.route.attempt", route->id);
    assert_int_equal(att->kind, 3); /* CLIENT */
    assert_int_equal(att->status, 0);
    /* the upstream's server span is the attempt's child */
    const sink_span *bsrv = must(s, n, "keyless.request", att->id);
    must(s, n, "keyless.execute", bsrv->id);
    inside(route, rsrv);
    inside(att, route);
    inside(bsrv, att);
    assert_true(choose->end <= att->start + 1000);
    assert_int_equal(n, 9);
    /* the route's own series: up, one attempt, no error */
    assert_true(scrape_value(router_metrics,
                             "keylessd_route_up{region=\"eu\",route="
                             "\"backend\"}") == 1);
    assert_true(scrape_value(router_metrics,
                             "keylessd_route_requests_total{region=\"eu\","
                             "route=\"backend\"}") >= 1);
    assert_true(scrape_value(router_metrics,
                             "keylessd_route_errors_total{region=\"eu\","
                             "route=\"backend\"}") == 0);
    assert_true(scrape_value(router_metrics,
                             "keylessd_route_requests_in_flight{region="
                             "\"eu\",route=\"backend\"}") == 0);
    assert_int_equal(td_stop(&router, 0), 0);
    assert_int_equal(td_stop(&backend, 0), 0);
    sink_stop(k);
    tp_rmtree(kd);
}

static void test_rate_zero_and_dead_collector(void **state)
{
    (void)state;
    sink *k = sink_start();
    uint8_t ski[20];
    char *kd = rs_keydir("tr-zero", "ecdsa-p256", ski);
    td_daemon d;
    start_traced(&d, "tr-zero", kd, NULL, k, "0");
    kl_client *c = td_connect(&d);
    for (int i = 0; i < 20; i++)
        sign(&d, c, ski, NULL, "zero", "ecdsa-p256");
    kl_client_close(c);
    assert_int_equal(td_stop(&d, 0), 0); /* flushes whatever there is */
    assert_int_equal(sink_count(k), 0);
    sink_stop(k);

    /* a collector that is not there: a port nobody listens on */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    snprintf(endpoint_flag, sizeof endpoint_flag,
             "--tracing-address=http://127.0.0.1:%u/v1/traces",
             ntohs(sa.sin_port));
    metrics_port = tn_free_port();
    uint16_t dead_metrics = metrics_port;
    start_traced(&d, "tr-dead", kd, NULL, NULL, "1");
    metrics_port = 0;
    c = td_connect(&d);
    double t0 = td_now_ms();
    for (int i = 0; i < 50; i++)
        sign(&d, c, ski, NULL, "dead", "ecdsa-p256");
    /* serving is not held up by the exporter (generous for the CI) */
    assert_true(td_now_ms() - t0 < 5000);
    rs_wait_log(&d, "tracing: export to", 1, 5000);
    /* the drop counters rise while serving goes on */
    double dropped = -1;
    for (int i = 0; i < 50 && dropped <= 0; i++, fp_sleep_ms(100))
        dropped = scrape_value(dead_metrics, "keylessd_trace_spans_dropped_"
                                             "total{reason=\"export_failed\"}");
    assert_true(dropped > 0);
    assert_true(scrape_value(dead_metrics,
                             "keylessd_trace_export_failures_total") >= 1);
    assert_true(
        scrape_value(dead_metrics, "keylessd_trace_spans_exported_total") == 0);
    kl_client_close(c);
    assert_int_equal(td_stop(&d, 0), 0);
    /* 50 requests x 4 spans, none exported, all counted as dropped */
    assert_int_equal(rs_log_count(&d, "tracing: 0 span(s) exported"), 1);
    char *log = td_read_log(&d);
    const char *p = strstr(log, "tracing: 0 span(s) exported, ");
    assert_non_null(p);
    unsigned long full = 0, failed = 0;
    assert_int_equal(sscanf(p,
                            "tracing: 0 span(s) exported, %lu dropped "
                            "(queue full), %lu dropped",
                            &full, &failed),
                     2);
    assert_int_equal(full + failed, 200);
    free(log);
    tp_rmtree(kd);
}

/* log_format json: an error line is one JSON object with the
 * request's fields */
static void test_json_error_log(void **state)
{
    (void)state;
    uint8_t ski[20];
    char *kd = rs_keydir("tr-json", "ecdsa-p256", ski);
    td_daemon d;
    const char *extra[] = {"--log-format=json", NULL};
    rs_start(&d, "tr-json", kd, NULL, extra);
    kl_client *c = td_connect(&d);
    uint8_t none[20];
    memset(none, 0x5a, sizeof none);
    kl_request_spec s = rs_sign_spec(none);
    s.req_context = "{\"request_id\":\"json-\\u00e9-1\"}";
    td_expect_error(&d, c, &s, KL_ERR_KEY_NOT_FOUND);
    kl_client_close(c);
    assert_int_equal(td_stop(&d, 0), 0);
    char *log = td_read_log(&d);
    bool found = false;
    for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n")) {
        json_error_t e;
        json_t *j = json_loads(line, 0, &e);
        if (!j)
            fail_msg("not a JSON line: %s", line);
        const char *rid = json_string_value(json_object_get(j, "request_id"));
        if (rid && !strcmp(rid, "json-\xc3\xa9-1")) {
            found = true;
            assert_string_equal(json_string_value(json_object_get(j, "level")),
                                "info");
            assert_string_equal(
                json_string_value(json_object_get(j, "error")),
                "key not found due to no matching SKI/SNI/ServerIP");
            assert_string_equal(json_string_value(json_object_get(j, "client")),
                                "keyless dev client");
            assert_non_null(
                strstr(json_string_value(json_object_get(j, "connection")),
                       "127.0.0.1:"));
            assert_non_null(strstr(json_string_value(json_object_get(j, "msg")),
                                   "5a5a5a5a"));
        }
        json_decref(j);
    }
    assert_true(found);
    free(log);
    tp_rmtree(kd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local),
        cmocka_unit_test(test_forwarded),
        cmocka_unit_test(test_rate_zero_and_dead_collector),
        cmocka_unit_test(test_json_error_log),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
