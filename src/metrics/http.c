/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP endpoint on metrics_port (issue 11): /metrics, /health, /ready,
 * served by libmicrohttpd on a polling thread of its own (architecture 7),
 * so a slow scraper can never stall a shard. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "metrics/internal.h"

/* Text format 0.0.4, what Prometheus asks for by default. */
#define MX_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct kl_metrics_http {
    struct MHD_Daemon *d;
    kl_metrics *m;
    kl_metrics_ready_fn ready;
    void *ready_arg;
    uint16_t port;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status,
                             const char *type, char *body, size_t len,
                             bool owned)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, body, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        if (owned)
            free(body);
        return MHD_NO; /* MHD closes the connection */
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    /* Health checkers and scrapers must never be served a cached answer. */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result text(struct MHD_Connection *c, unsigned status,
                            const char *s)
{
    return reply(c, status, "text/plain; charset=utf-8", (char *)s, strlen(s),
                 false);
}

static enum MHD_Result serve_ready(kl_metrics_http *h, struct MHD_Connection *c)
{
    char reason[256] = "not ready";
    if (!h->ready || h->ready(h->ready_arg, reason, sizeof reason - 1))
        return text(c, MHD_HTTP_OK, "ready\n");
    size_t n = strnlen(reason, sizeof reason - 2);
    char *body = malloc(n + 2);
    if (!body)
        return MHD_NO;
    memcpy(body, reason, n);
    memcpy(body + n, "\n", 2);
    return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain; charset=utf-8",
                 body, n + 1, true);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c,
                              const char *url, const char *method,
                              const char *version, const char *upload,
                              size_t *upload_len, void **state)
{
    kl_metrics_http *h = cls;
    bool known = strcmp(url, "/metrics") == 0 || strcmp(url, "/health") == 0 ||
                 strcmp(url, "/ready") == 0;
    if (!known)
        return text(c, MHD_HTTP_NOT_FOUND, "not found\n");
    /* HEAD is GET without the body (RFC 9110 9.3.2); MHD drops it. */
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
        strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n");
    if (strcmp(url, "/health") == 0)
        return text(c, MHD_HTTP_OK, "ok\n");
    if (strcmp(url, "/ready") == 0)
        return serve_ready(h, c);
    size_t len = 0;
    char *body = kl_metrics_render(h->m, &len);
    if (!body)
        return text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    return reply(c, MHD_HTTP_OK, MX_CONTENT_TYPE, body, len, true);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[256];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    kl_warn("metrics http: %s", line);
}

kl_metrics_http *kl_metrics_http_start(kl_metrics *m,
                                       const kl_metrics_http_opts *o, char *err,
                                       size_t errlen)
{
    const char *addr = o->address ? o->address : "0.0.0.0";
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(o->port);
    } else if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(o->port);
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err, errlen,
                 "metrics address \"%s\" is not a numeric IPv4 or IPv6 "
                 "address",
                 addr);
        return NULL;
    }
    kl_metrics_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->m = m;
    h->ready = o->ready;
    h->ready_arg = o->ready_arg;
    errno = 0;
    /* A handful of scrapers and probes: bound the connections and drop
     * idle ones so a stuck client holds nothing for long. */
    /* The logger first, so MHD reports nothing through its own. */
    h->d = MHD_start_daemon(
        flags, o->port, NULL, NULL, handle, h, MHD_OPTION_EXTERNAL_LOGGER,
        mhd_log, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, errlen, "cannot serve metrics on %s port %u: %s", addr,
                 (unsigned)o->port,
                 errno ? strerror(errno) : "libmicrohttpd failed to start");
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : o->port;
    return h;
}

uint16_t kl_metrics_http_port(const kl_metrics_http *h)
{
    return h->port;
}

void kl_metrics_http_stop(kl_metrics_http *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    free(h);
}
