/* SPDX-License-Identifier: Apache-2.0 */
/* Creating, starting and stopping the shards. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "core/time.h"
#include "crypto/async.h"
#include "engine/acl.h"
#include "engine/internal.h"

/* Past max_handshaking new connections wait in the listen backlog
 * (reconnect storms, docs/DESIGN.md "Limits and backpressure"): ask for
 * the most, the kernel caps it at
 * net.core.somaxconn (glibc's SOMAXCONN, 4096, would cap it below a raised
 * sysctl; docs/OPERATIONS.md "Connection limits and the listen backlog"). */
#define KL_LISTEN_BACKLOG 65535

const kl_server_opts kl_server_defaults = {
    .listen_address = "0.0.0.0",
    .port = 2407,
    .max_inflight_per_conn = 1024, /* protocol P8 asks for at least this */
    .max_inflight = 65536,
    .max_output = 8u << 20,
    .max_buffered = 64u << 20,
    .idle_timeout_ns = 30 * KL_NS_PER_S,
    .handshake_timeout_ns = 10 * KL_NS_PER_S,
    .drain_timeout_ns = 5 * KL_NS_PER_S,
    .max_connections = 10000,
    .max_handshaking = 1000,
    .max_handshaking_per_source = 100,
    .max_handshake_bytes = 64u << 10,
    .max_async_jobs = KL_ASYNC_DEFAULT_JOBS,
};

/* shards 0: one per CPU */
static void count_shards(kl_server_opts *o)
{
    if (o->shards <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o->shards = n > 0 ? (int)n : 1;
    }
}

/* The CPUs this process may run on (its affinity mask: taskset and
 * cpusets count), at least 1. */
static int usable_cpus(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* listen_address and port as a socket address; false (err says why) when
 * the address is not numeric. */
static bool sock_addr(const char *addr, uint16_t port,
                      struct sockaddr_storage *ss, socklen_t *len, char *err,
                      size_t errlen)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, addr, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons(port);
        *len = sizeof *a4;
        return true;
    }
    if (inet_pton(AF_INET6, addr, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(port);
        *len = sizeof *a6;
        return true;
    }
    snprintf(err, errlen,
             "listen_address: \"%s\" is not a numeric IPv4 or IPv6 "
             "address; use e.g. 0.0.0.0, 127.0.0.1 or ::",
             addr);
    return false;
}

static void say_in_use(const struct sockaddr_storage *ss, const char *addr,
                       uint16_t port, bool share, char *err, size_t errlen)
{
    const char *v6 = ss->ss_family == AF_INET6 ? "[" : "";
    if (share) {
        snprintf(err, errlen,
                 "cannot listen on %s%s%s:%u: address already in use, "
                 "although listen_reuseport is set: the process there does "
                 "not share its port (only a keylessd of the same user does); "
                 "stop it or change port",
                 v6, addr, *v6 ? "]" : "", port);
        return;
    }
    snprintf(err, errlen,
             "cannot listen on %s%s%s:%u: address already in use: another "
             "process is listening on port %u; stop it, change port, or set "
             "listen_reuseport: true to share the port for a handover "
             "(docs/OPERATIONS.md, \"Handover\")",
             v6, addr, *v6 ? "]" : "", port, port);
}

/* Whether another process holds the port (docs/OPERATIONS.md,
 * "Handover"): a probe socket without SO_REUSEPORT cannot bind where any
 * socket listens or is bound, whatever options that one set, while
 * SO_REUSEADDR lets it past connections of an earlier keylessd still in
 * TIME_WAIT. Returns 0 when the port is free, 1 when taken (err says so),
 * -1 on another error. The probe is closed again: the shards' sockets
 * bind next, with SO_REUSEPORT among themselves. */
static int port_taken(const struct sockaddr_storage *ss, socklen_t len,
                      const char *addr, uint16_t port, char *err, size_t errlen)
{
    int fd =
        socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create a socket: %s", strerror(errno));
        return -1;
    }
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ss->ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    int rc = 0;
    if (bind(fd, (const struct sockaddr *)ss, len) != 0) {
        if (errno == EADDRINUSE) {
            say_in_use(ss, addr, port, false, err, errlen);
            rc = 1;
        } else {
            snprintf(err, errlen, "cannot listen on %s%s%s:%u: %s",
                     ss->ss_family == AF_INET6 ? "[" : "", addr,
                     ss->ss_family == AF_INET6 ? "]" : "", port,
                     strerror(errno));
            rc = -1;
        }
    }
    close(fd);
    return rc;
}

/* One listening socket per shard on the same address (SO_REUSEPORT): the
 * kernel spreads new connections over the shards without a shared accept
 * lock. */
static int listen_on(const char *addr, uint16_t port, bool share, char *err,
                     size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (!sock_addr(addr, port, &ss, &len, err, errlen))
        return -1;
    int fd =
        socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create a socket: %s", strerror(errno));
        return -1;
    }
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) {
        snprintf(err, errlen, "SO_REUSEPORT: %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (ss.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(fd, (struct sockaddr *)&ss, len) != 0 ||
        listen(fd, KL_LISTEN_BACKLOG) != 0) {
        if (errno == EADDRINUSE)
            say_in_use(&ss, addr, port, share, err, errlen);
        else
            snprintf(err, errlen, "cannot listen on %s%s%s:%u: %s",
                     ss.ss_family == AF_INET6 ? "[" : "", addr,
                     ss.ss_family == AF_INET6 ? "]" : "", port,
                     strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static uint16_t bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return 0;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

kl_server *kl_server_new(const kl_server_opts *o, char *err, size_t errlen)
{
    kl_server *srv = calloc(1, sizeof *srv);
    if (!srv) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    srv->o = *o;
    count_shards(&srv->o);
    atomic_init(&srv->inflight, 0);
    atomic_init(&srv->stopping, false);
    atomic_init(&srv->gen, 1);
    atomic_init(&srv->nconns, 0);
    atomic_init(&srv->nhandshaking, 0);
    pthread_mutex_init(&srv->res_mu, NULL);
    /* Not owned until success: on failure the caller frees them. */
    srv->keys_res = kl_res_new(o->keys, NULL);
    srv->tls_res = kl_res_new(o->tls, NULL);
    srv->o.keys = NULL;
    srv->o.tls = NULL;
    srv->o.acl = NULL;
    srv->listen_address =
        strdup(o->listen_address ? o->listen_address : "0.0.0.0");
    srv->o.listen_address = srv->listen_address;
    srv->shards = calloc((size_t)srv->o.shards, sizeof *srv->shards);
    bool src_oom; /* limits.c */
    srv->src_caps = kl_src_table_new(
        srv->o.max_handshaking, srv->o.max_handshaking_per_source, &src_oom);
    if (!srv->listen_address || !srv->shards || !srv->keys_res ||
        !srv->tls_res || src_oom) {
        snprintf(err, errlen, "out of memory");
        kl_server_free(srv);
        return NULL;
    }
    srv->port = o->port;
    srv->ncpus = usable_cpus();
    /* Another process on the port is refused unless listen_reuseport asks
     * to share it (docs/OPERATIONS.md, "Handover"); with port 0 the kernel
     * picks a free one. */
    if (!o->share_port && o->port != 0) {
        struct sockaddr_storage ss;
        socklen_t len;
        if (!sock_addr(srv->listen_address, srv->port, &ss, &len, err,
                       errlen) ||
            port_taken(&ss, len, srv->listen_address, srv->port, err, errlen) !=
                0) {
            kl_server_free(srv);
            return NULL;
        }
    }
    for (int i = 0; i < srv->o.shards; i++) {
        kl_shard *s = &srv->shards[i];
        if (kl_shard_init(s, srv, i, err, errlen) != KL_OK) {
            kl_server_free(srv);
            return NULL;
        }
        srv->nshards++;
        s->accept.fd = listen_on(srv->listen_address, srv->port, o->share_port,
                                 err, errlen);
        if (s->accept.fd < 0) {
            kl_server_free(srv);
            return NULL;
        }
        /* With port 0 the first shard picks; the others join it. */
        if (srv->port == 0)
            srv->port = bound_port(s->accept.fd);
    }
    /* forwarded answers wake the shards in the router's batches
     * (the router is freed before the server: server.h) */
    if (srv->o.router)
        kl_router_set_flush(srv->o.router, kl_shard_routed_flush, srv);
    /* From here on the server owns the store and the context. */
    srv->keys_res->free_fn = kl_res_free_keystore;
    srv->tls_res->free_fn = kl_res_free_tls;
    srv->o.acl = o->acl;
    return srv;
}

uint16_t kl_server_port(const kl_server *s)
{
    return s->port;
}

int kl_server_shards(const kl_server *s)
{
    return s->nshards;
}

kl_status kl_server_start(kl_server *srv)
{
    for (int i = 0; i < srv->nshards; i++) {
        kl_shard *s = &srv->shards[i];
        if (pthread_create(&s->ev.thread, NULL, kl_shard_main, s) != 0) {
            kl_error("cannot start shard thread %d: %s", i, strerror(errno));
            kl_server_shutdown(srv);
            return KL_E_INTERNAL;
        }
        s->ev.started = true;
    }
    return KL_OK;
}

void kl_server_shutdown(kl_server *srv)
{
    atomic_store(&srv->stopping, true);
    for (int i = 0; i < srv->nshards; i++)
        kl_loop_wake(srv->shards[i].ev.loop);
}

void kl_server_wait(kl_server *srv)
{
    for (int i = 0; i < srv->nshards; i++) {
        kl_shard *s = &srv->shards[i];
        if (s->ev.started) {
            pthread_join(s->ev.thread, NULL);
            s->ev.started = false;
        }
    }
}

void kl_server_free(kl_server *srv)
{
    if (!srv)
        return;
    kl_server_shutdown(srv);
    kl_server_wait(srv);
    for (int i = 0; i < srv->nshards; i++)
        kl_shard_destroy(&srv->shards[i]);
    kl_res_release(srv->keys_res);
    kl_res_release(srv->tls_res);
    kl_acl_free(srv->o.acl);
    kl_src_table_free(srv->src_caps);
    pthread_mutex_destroy(&srv->res_mu);
    free(srv->shards);
    free(srv->listen_address);
    free(srv);
}

void kl_server_get_stats(const kl_server *srv, kl_server_stats *out)
{
    memset(out, 0, sizeof *out);
#define SUM(f) out->f += atomic_load_explicit(&s->st.f, memory_order_relaxed)
    for (int i = 0; i < srv->nshards; i++) {
        kl_shard *s = &srv->shards[i];
        SUM(accepted);
        SUM(handshakes);
        SUM(handshake_failed);
        SUM(health_checks);
        SUM(requests);
        SUM(responses);
        SUM(errors);
        SUM(shed);
        SUM(version_mismatch);
        SUM(stray_bytes);
        SUM(idle_closed);
        SUM(read_pauses);
        SUM(conn_refused);
        SUM(handshake_refused);
        SUM(acl_refused);
        SUM(sealed_unroutable);
    }
#undef SUM
}
