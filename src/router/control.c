/* The routing table's life (issue 9): loaded at start (a bad file stops
 * startup), re-read when the file changes (an mtime/inode/size poll every
 * reload_poll_ms - simple, and it works for editors that replace the file
 * and for symlink swaps alike), re-read on kl_router_reload (SIGHUP), and
 * rebuilt every dns_refresh_ms when it has `dns:` entries.
 *
 * DNS is deliberately simple: getaddrinfo() on the control thread every
 * dns_refresh_ms (a fixed interval standing in for the record's TTL, which
 * getaddrinfo does not report), one remote per address; the new table is
 * installed only when the set of addresses changed, so remotes that stay
 * keep their connections and latency history.
 *
 * Builds run on the control thread or the reload caller, never on the
 * router thread (DNS blocks); a finished table is handed to the router
 * thread, which reconciles remotes (kl_rt_install). A table that fails to
 * parse or resolve is reported and the previous one stays. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/log.h"
#include "core/time.h"
#include "router/router_int.h"

static size_t resolve(const char *host, char (*out)[64], size_t max, void *arg)
{
    (void)arg;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return 0;
    size_t n = 0;
    for (struct addrinfo *a = res; a && n < max; a = a->ai_next) {
        char text[64];
        const void *p =
            a->ai_family == AF_INET
                ? (const void *)&((struct sockaddr_in *)a->ai_addr)->sin_addr
                : (const void *)&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr;
        if ((a->ai_family != AF_INET && a->ai_family != AF_INET6) ||
            !inet_ntop(a->ai_family, p, text, sizeof text))
            continue;
        bool dup = false;
        for (size_t i = 0; i < n; i++)
            dup |= !strcmp(out[i], text);
        if (!dup)
            snprintf(out[n++], 64, "%s", text);
    }
    freeaddrinfo(res);
    return n;
}

/* FNV-1a over the servers' names and addresses: did DNS change anything? */
static uint64_t servers_sig(const kl_rt_table *t)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < t->nservers; i++) {
        const kl_rt_server *s = &t->servers[i];
        char line[400];
        int n =
            snprintf(line, sizeof line, "%s|%s|%u;", s->name, s->host, s->port);
        for (int k = 0; k < n && k < (int)sizeof line; k++) {
            h ^= (uint8_t)line[k];
            h *= 1099511628211ull;
        }
    }
    return h;
}

/* build_mu held. force: install even when nothing changed (a reload). */
static kl_status build(kl_router *r, bool force, char *err, size_t errlen)
{
    struct stat st;
    bool have_st = stat(r->table_file, &st) == 0;
    kl_rt_table *t = NULL;
    kl_status s =
        kl_rt_table_load(r->table_file, resolve, NULL, &t, err, errlen);
    if (have_st) {
        r->table_mtime = st.st_mtim;
        r->table_ino = st.st_ino;
        r->table_size = st.st_size;
    }
    if (s != KL_OK) {
        KL_RT_INC(r, reload_errors);
        return s;
    }
    uint64_t sig = servers_sig(t);
    if (!force && sig == r->servers_sig) {
        kl_rt_table_free(t); /* a DNS refresh that changed nothing */
        return KL_OK;
    }
    r->servers_sig = sig;
    r->has_dns = t->ndns > 0;
    pthread_mutex_lock(&r->mu);
    kl_rt_table *old = r->pending; /* never installed: superseded */
    r->pending = t;
    pthread_mutex_unlock(&r->mu);
    kl_rt_table_free(old);
    KL_RT_INC(r, reloads);
    if (r->loop)
        kl_loop_wake(r->loop);
    return KL_OK;
}

static bool file_changed(kl_router *r)
{
    struct stat st;
    if (stat(r->table_file, &st) != 0)
        return false; /* gone: keep the table until it is back */
    return st.st_ino != r->table_ino || st.st_size != r->table_size ||
           st.st_mtim.tv_sec != r->table_mtime.tv_sec ||
           st.st_mtim.tv_nsec != r->table_mtime.tv_nsec;
}

static void *control_main(void *arg)
{
    kl_router *r = arg;
    uint64_t next_dns = kl_now_ms() + (uint64_t)r->o.dns_refresh_ms;
    pthread_mutex_lock(&r->build_mu);
    while (!r->control_stop) {
        int wait_ms =
            r->o.reload_poll_ms > 0 ? r->o.reload_poll_ms : r->o.dns_refresh_ms;
        if (r->has_dns && r->o.dns_refresh_ms < wait_ms)
            wait_ms = r->o.dns_refresh_ms;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)wait_ms * 1000000ull;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        (void)pthread_cond_timedwait(&r->control_cv, &r->build_mu, &ts);
        if (r->control_stop)
            break;
        char err[512];
        if (r->o.reload_poll_ms > 0 && file_changed(r)) {
            if (build(r, true, err, sizeof err) != KL_OK)
                kl_warn("router: routing table not reloaded, the previous "
                        "one stays: %s",
                        err);
            else
                kl_info("router: routing table %s reloaded", r->table_file);
        } else if (r->has_dns && kl_now_ms() >= next_dns) {
            next_dns = kl_now_ms() + (uint64_t)r->o.dns_refresh_ms;
            if (build(r, false, err, sizeof err) != KL_OK)
                kl_warn("router: DNS refresh failed, the previous table "
                        "stays: %s",
                        err);
        }
    }
    pthread_mutex_unlock(&r->build_mu);
    return NULL;
}

kl_status kl_rt_control_start(kl_router *r, char *err, size_t errlen)
{
    pthread_mutex_lock(&r->build_mu);
    kl_status st = build(r, true, err, errlen);
    pthread_mutex_unlock(&r->build_mu);
    if (st != KL_OK)
        return st;
    if (pthread_create(&r->control, NULL, control_main, r) != 0)
        return KL_E_NOMEM;
    r->control_started = true;
    return KL_OK;
}

void kl_rt_control_stop(kl_router *r)
{
    if (!r->control_started)
        return;
    pthread_mutex_lock(&r->build_mu);
    r->control_stop = true;
    pthread_cond_broadcast(&r->control_cv);
    pthread_mutex_unlock(&r->build_mu);
    pthread_join(r->control, NULL);
    r->control_started = false;
}

kl_status kl_router_reload(kl_router *r, char *err, size_t errlen)
{
    pthread_mutex_lock(&r->build_mu);
    kl_status st = build(r, true, err, errlen);
    pthread_mutex_unlock(&r->build_mu);
    return st;
}

static kl_remote *find_remote(kl_router *r, const kl_rt_server *s)
{
    for (kl_remote *rm = r->remotes; rm; rm = rm->next)
        if (!strcmp(rm->name, s->name) && !strcmp(rm->host, s->host) &&
            rm->port == s->port)
            return rm;
    return NULL;
}

void kl_rt_install(kl_router *r, kl_rt_table *t)
{
    for (kl_remote *rm = r->remotes; rm; rm = rm->next)
        rm->in_table = false;
    for (size_t i = 0; i < t->nservers; i++) {
        kl_rt_server *s = &t->servers[i];
        kl_remote *rm = find_remote(r, s);
        bool fresh = !rm;
        if (fresh) {
            rm = kl_remote_new(r, s);
            if (!rm)
                continue; /* no memory: this route is left out */
            rm->next = r->remotes;
            r->remotes = rm;
        }
        /* the table may have moved it to another region or priority */
        snprintf(rm->region, sizeof rm->region, "%s", s->region);
        rm->priority = s->priority;
        rm->in_table = true;
        s->remote = rm;
        if (fresh)
            kl_remote_start(rm); /* opened in advance, probed now */
    }
    pthread_mutex_lock(&r->mu);
    kl_rt_table *old = r->table;
    r->table = t;
    pthread_mutex_unlock(&r->mu);
    kl_rt_table_free(old);
    KL_RT_INC(r, generation);
    kl_info("router: routing table installed: %zu servers, %zu keys",
            t->nservers, t->nkeys);
}
