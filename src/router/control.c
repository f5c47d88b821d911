/* SPDX-License-Identifier: Apache-2.0 */
/* The routing table's life: loaded at start (a bad file stops
 * startup), re-read when the file changes (an mtime/inode/size poll every
 * reload_poll_ns - simple, and it works for editors that replace the file
 * and for symlink swaps alike), re-read on kl_router_reload (SIGHUP), and
 * rebuilt every dns_refresh_ns when it has `dns:` entries.
 *
 * DNS (dns.c): each `dns:` name's A and AAAA records are fetched with
 * their TTL, one remote per address, and the names are resolved again when
 * the smallest TTL runs out (clamped to [dns_ttl_floor_ns,
 * dns_ttl_ceiling_ns]; dns_refresh_ns for names without a TTL, as from
 * /etc/hosts, and as the retry after a failure, during which the previous
 * table and its addresses stay). The new table is installed only when the
 * set of addresses changed, so remotes that stay keep their connections
 * and latency history.
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
#include "router/dns.h"
#include "router/router_int.h"
#include "router/table_int.h"

/* One table build's DNS: where to ask, and the smallest TTL among the
 * records of all its `dns:` names (when the table is next due). */
typedef struct dns_ctx {
    const kl_router *r;
    uint32_t ttl;
} dns_ctx;

static size_t resolve(const char *host, char (*out)[64], size_t max, void *arg)
{
    dns_ctx *d = arg;
    uint32_t ttl;
    size_t n = kl_rt_dns_resolve(d->r->o.dns_server,
                                 kl_rt_ms(d->r->o.connect_timeout_ns), host,
                                 out, max, &ttl);
    if (n && ttl < d->ttl)
        d->ttl = ttl;
    return n;
}

/* When the `dns:` names are due again: their records' TTL within
 * [dns_ttl_floor_ns, dns_ttl_ceiling_ns]; dns_refresh_ns when no record
 * carried one (names from /etc/hosts) and after a failed resolution. */
static uint64_t dns_due_ms(const kl_router *r, bool ok, uint32_t ttl)
{
    const kl_router_opts *o = &r->o;
    uint64_t ns =
        !ok || ttl == KL_RT_DNS_NO_TTL ? o->dns_refresh_ns : kl_s_to_ns(ttl);
    if (ns < o->dns_ttl_floor_ns)
        ns = o->dns_ttl_floor_ns;
    if (ns > o->dns_ttl_ceiling_ns)
        ns = o->dns_ttl_ceiling_ns;
    return ns / KL_NS_PER_MS;
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

/* build_mu held: t becomes the pending table, installed by the router
 * thread at its next turn. */
static void hand_over(kl_router *r, kl_rt_table *t)
{
    pthread_mutex_lock(&r->mu);
    kl_rt_table *old = r->pending; /* never installed: superseded */
    r->pending = t;
    r->handed_gen++;
    pthread_mutex_unlock(&r->mu);
    kl_rt_table_free(old);
    KL_RT_INC(r, reloads);
    if (r->loop)
        kl_loop_wake(r->loop);
}

/* build_mu held. force: install even when nothing changed (a reload). */
static kl_status build(kl_router *r, bool force, char *err, size_t errlen)
{
    struct stat st;
    bool have_st = stat(r->table_file, &st) == 0;
    kl_rt_table *t = NULL;
    dns_ctx dns = {r, KL_RT_DNS_NO_TTL};
    kl_status s =
        kl_rt_table_load(r->table_file, resolve, &dns, &t, err, errlen);
    if (have_st) {
        r->table_mtime = st.st_mtim;
        r->table_ino = st.st_ino;
        r->table_size = st.st_size;
    }
    /* a failed resolution is retried on dns_refresh_ns; the previous
     * table, with the addresses it had, stays meanwhile */
    r->dns_next_ms = kl_now_ms() + dns_due_ms(r, s == KL_OK, dns.ttl);
    if (s == KL_OK)
        r->dns_ttl_s = dns.ttl;
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
    hand_over(r, t);
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
    pthread_setname_np(pthread_self(), "kl-route-table");
    pthread_mutex_lock(&r->build_mu);
    while (!r->control_stop) {
        uint64_t now = kl_now_ms();
        /* no poll: wake for DNS or to stop only; a poll below 1 ms is
         * 1 ms */
        int wait_ms = !r->o.reload_poll_ns ? 3600000
                      : r->o.reload_poll_ns < KL_NS_PER_MS
                          ? 1
                          : kl_rt_ms(r->o.reload_poll_ns);
        if (r->has_dns)
            wait_ms = r->dns_next_ms <= now ? 0
                      : r->dns_next_ms - now < (uint64_t)wait_ms
                          ? (int)(r->dns_next_ms - now)
                          : wait_ms;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + kl_ms_to_ns((uint64_t)wait_ms);
        ts.tv_sec += (time_t)(ns / KL_NS_PER_S);
        ts.tv_nsec = (long)(ns % KL_NS_PER_S);
        (void)pthread_cond_timedwait(&r->control_cv, &r->build_mu, &ts);
        if (r->control_stop)
            break;
        char err[512];
        if (r->o.reload_poll_ns > 0 && file_changed(r)) {
            if (build(r, true, err, sizeof err) != KL_OK)
                kl_warn("router: routing table not reloaded, the previous "
                        "one stays: %s",
                        err);
            else
                kl_info("router: routing table %s reloaded", r->table_file);
        } else if (r->has_dns && kl_now_ms() >= r->dns_next_ms) {
            /* one warning per outage, not one per retry */
            if (build(r, false, err, sizeof err) != KL_OK) {
                if (!r->dns_failing++)
                    kl_warn("router: DNS refresh failed, the previous table "
                            "and its addresses stay; retrying every %d ms: "
                            "%s",
                            kl_rt_ms(r->o.dns_refresh_ns), err);
            } else if (r->dns_failing) {
                kl_info("router: DNS refresh works again after %u failed "
                        "attempt(s)",
                        r->dns_failing);
                r->dns_failing = 0;
            }
        }
    }
    pthread_mutex_unlock(&r->build_mu);
    return NULL;
}

/* Without a table file the router starts with an empty table and takes
 * its tables from kl_router_install_table (the fleet directory). */
static kl_status start_empty(kl_router *r)
{
    kl_rt_build b;
    kl_rt_table *t;
    char err[64];
    KL_GUARD(
        kl_rt_build_init(&b, "(fleet directory)", err, sizeof err, NULL, NULL));
    KL_GUARD(kl_rt_build_finish(&b, &t));
    pthread_mutex_lock(&r->build_mu);
    hand_over(r, t);
    pthread_mutex_unlock(&r->build_mu);
    return KL_OK;
}

kl_status kl_router_install_table(kl_router *r, kl_rt_table *t)
{
    if (r->table_file) { /* one source of tables: the file's poll would
                            undo this one */
        kl_rt_table_free(t);
        return KL_E_CONFIG;
    }
    pthread_mutex_lock(&r->build_mu);
    hand_over(r, t);
    pthread_mutex_unlock(&r->build_mu);
    kl_rt_wait_installed(r);
    return KL_OK;
}

kl_status kl_rt_control_start(kl_router *r, char *err, size_t errlen)
{
    if (!r->table_file)
        return start_empty(r);
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

/* Returns once the new table is in effect: a request that arrives after
 * a SIGHUP reload finds the routes it installed (kl_router_has_key reads
 * the installed table, not the one just built). */
kl_status kl_router_reload(kl_router *r, char *err, size_t errlen)
{
    if (!r->table_file)
        return KL_OK; /* the directory keeps its table current itself */
    pthread_mutex_lock(&r->build_mu);
    kl_status st = build(r, true, err, errlen);
    pthread_mutex_unlock(&r->build_mu);
    if (st == KL_OK)
        kl_rt_wait_installed(r);
    return st;
}

void kl_rt_wait_installed(kl_router *r)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5; /* the router thread installs within microseconds */
    pthread_mutex_lock(&r->mu);
    while (r->installed_gen < r->handed_gen && !r->stopped && r->thread_started)
        if (pthread_cond_timedwait(&r->install_cv, &r->mu, &ts) != 0)
            break;
    pthread_mutex_unlock(&r->mu);
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
        rm->on_demand = s->on_demand;
        rm->in_table = true;
        s->remote = rm;
        if (fresh && !rm->on_demand)
            kl_remote_start(rm); /* opened in advance, probed now */
    }
    kl_rt_table *old = r->table;
    r->table = t;
    /* sealed keys: every policy's remotes from the new table (sealed.c) */
    r->table_gen++;
    kl_rt_pclass_refresh(r);
    atomic_store(&r->published, t); /* kl_router_has_key: no lock */
    if (old) /* a shard may still be reading it: freed once none is */
        kl_rt_retire(r, old);
    KL_RT_INC(r, generation);
    kl_info("router: routing table installed: %zu servers, %zu keys",
            t->nservers, kl_rt_nkeys(t));
}
