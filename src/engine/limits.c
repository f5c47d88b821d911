/* SPDX-License-Identifier: Apache-2.0 */
/* Connection admission and process hardening (docs/SECURITY.md).
 *
 * Why caps at accept time: a connection costs a descriptor, ~20 KiB of
 * buffers and a TLS state before its client has proved anything. An
 * attacker who can reach the port could otherwise exhaust descriptors or
 * memory with connections that never finish (or never start) their
 * handshake, and lock out the edges. The handshake cap is much lower than
 * the connection cap: authenticated clients are few and long-lived,
 * unauthenticated ones are what a flood consists of.
 *
 * What happens past each cap (reconnect storms, docs/DESIGN.md "Limits and
 * backpressure"): a socket over
 * max_connections is closed right after accept() - its slot frees only
 * when a long-lived connection goes, so waiting would not end soon. At
 * max_handshaking the shard instead stops accepting: the connections
 * queue in the kernel's listen backlog, which costs no descriptor and no
 * TLS state, and each is accepted as soon as a handshake finishes. A
 * handshake takes milliseconds, so they wait briefly; closing them made
 * every client of a storm retry after a backoff, again and again (10,000
 * edges reconnecting at once made 70,000 attempts and took 9 s). Every
 * shard's listener stops at the same global count; a shard that stopped
 * publishes that (accept.blocked) and whoever frees a slot wakes it.
 * A socket over its source's cap is still closed: waiting would let one
 * source's queue hold the listener, and the other sources behind it.
 *
 * Why a per-source cap as well: with only the global one, a single
 * address could hold every handshake slot until its handshakes time out,
 * and edges connecting meanwhile would be refused. Counted per IPv4
 * address or IPv6 /64, in one table per server that every shard uses (the
 * kernel spreads one source's connections over the shards), behind a mutex:
 * taken twice per connection, which costs far less than its handshake. The
 * table is sized so that it never fills: each entry holds at least one of
 * the at most max_handshaking connections in their handshake.
 *
 * Why a byte cap before the handshake completes: a handshake is a few KiB
 * (client certificates included); a client that keeps sending without
 * completing it is not a TLS client, and is cut off before its bytes cost
 * more than a bounded buffer, whatever OpenSSL would still accept. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/hmap.h"
#include "core/log.h"
#include "core/time.h"
#include "engine/internal.h"
#include "engine/limits.h"

/* Descriptors beyond the connections: listeners, epoll, eventfds, key
 * files during a reload, inotify, the metrics server, the log. */
#define FD_MARGIN 256u
#define REFUSAL_LOG_NS KL_NS_PER_S
/* Linux's default net.core.somaxconn since 5.4 (128 before): each
 * listener's backlog, where connections wait at max_handshaking. */
#define BACKLOG_WANTED 4096

/* The kernel caps every listen() backlog at net.core.somaxconn. When the
 * backlog is full the kernel drops new connection attempts, and clients
 * retry their SYN only after 1 s, then 3 s: a small backlog turns a
 * reconnect storm into seconds of delay (docs/OPERATIONS.md, Connection
 * limits and the listen backlog). */
static long somaxconn(void)
{
    FILE *f = fopen("/proc/sys/net/core/somaxconn", "re");
    if (!f)
        return -1; /* not Linux's procfs */
    long n = -1;
    if (fscanf(f, "%ld", &n) != 1)
        n = -1;
    fclose(f);
    return n;
}

static size_t check_backlog(void)
{
    long n = somaxconn();
    if (n < 0 || n >= BACKLOG_WANTED)
        return 0;
    kl_warn("net.core.somaxconn is %ld: past max_handshaking, new "
            "connections wait in each listener's backlog, which holds "
            "at most that many; beyond it the kernel drops them and "
            "clients retry a second later. Set it to %d or more "
            "(sysctl -w net.core.somaxconn=%d; docs/OPERATIONS.md, "
            "Connection limits)",
            n, BACKLOG_WANTED, BACKLOG_WANTED);
    return 1;
}

size_t kl_limits_process_setup(bool allow_core_dumps, size_t max_connections)
{
    size_t warned = 0;
    if (!allow_core_dumps) {
        /* A core file holds every key in memory; so does a ptrace attach
         * by a process of the same user. PR_SET_DUMPABLE 0 stops both;
         * RLIMIT_CORE 0 also covers a later setuid/exec that would reset
         * dumpability. */
        struct rlimit none = {0, 0};
        if (setrlimit(RLIMIT_CORE, &none) != 0) {
            kl_warn("cannot disable core dumps (RLIMIT_CORE): %s",
                    strerror(errno));
            warned++;
        }
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
            kl_warn("cannot disable core dumps (PR_SET_DUMPABLE): %s",
                    strerror(errno));
            warned++;
        }
    } else {
        kl_warn("allow_core_dumps is set: a core dump of keylessd contains "
                "the private keys it serves");
        warned++;
    }
    warned += check_backlog();
    struct rlimit fds;
    if (getrlimit(RLIMIT_NOFILE, &fds) != 0)
        return warned;
    if (fds.rlim_cur < fds.rlim_max) {
        rlim_t was = fds.rlim_cur;
        fds.rlim_cur = fds.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &fds) != 0) {
            kl_warn("cannot raise the open-file limit from %llu to %llu: %s",
                    (unsigned long long)was, (unsigned long long)fds.rlim_max,
                    strerror(errno));
            fds.rlim_cur = was;
            warned++;
        }
    }
    if (fds.rlim_cur != RLIM_INFINITY &&
        fds.rlim_cur < (rlim_t)max_connections + FD_MARGIN) {
        kl_warn("the open-file limit (%llu) is below max_connections (%zu) "
                "plus %u for keylessd's own files: connections beyond it are "
                "refused by accept(); raise LimitNOFILE (systemd) or ulimit "
                "-n, or lower max_connections",
                (unsigned long long)fds.rlim_cur, max_connections, FD_MARGIN);
        warned++;
    }
    return warned;
}

/* Counts up unless at the cap (a CAS loop: shards admit concurrently). */
static bool take(atomic_uint *n, uint32_t cap)
{
    unsigned cur = atomic_load_explicit(n, memory_order_relaxed);
    do {
        if (cur >= cap)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(
        n, &cur, cur + 1, memory_order_relaxed, memory_order_relaxed));
    return true;
}

/* ---- the per-source table: the shared map, keyed by address ---- */

typedef struct src_entry {
    kl_hslot h; /* the keyed hash of addr */
    uint8_t addr[16];
    uint32_t n; /* connections in their handshake (> 0) */
} src_entry;

struct kl_src_table {
    pthread_mutex_t mu;
    uint32_t per_source;
    uint64_t k0, k1; /* random hash keys: sources cannot aim at a slot */
    kl_hmap map;     /* of src_entry */
};

kl_src_table *kl_src_table_new(uint32_t max_handshaking, uint32_t per_source,
                               bool *oom)
{
    *oom = false;
    if (per_source >= max_handshaking)
        return NULL; /* the global cap binds first */
    kl_src_table *t = calloc(1, sizeof *t);
    if (!t)
        goto oom;
    kl_hmap_init(&t->map, sizeof(src_entry));
    /* Room for every handshake at once, so that a take never allocates
     * under the mutex: each entry holds at least one of them. */
    if (kl_hmap_reserve(&t->map, max_handshaking) != KL_OK)
        goto oom;
    if (pthread_mutex_init(&t->mu, NULL) != 0)
        goto oom;
    t->per_source = per_source;
    uint64_t k[2];
    if (getrandom(k, sizeof k, GRND_NONBLOCK) != (ssize_t)sizeof k) {
        /* no entropy yet: still distinct per process and start */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        k[0] =
            (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
        k[1] = (uint64_t)ts.tv_sec ^ (uintptr_t)t;
    }
    t->k0 = k[0];
    t->k1 = k[1];
    return t;
oom:
    if (t)
        kl_hmap_free(&t->map);
    free(t);
    *oom = true;
    return NULL;
}

void kl_src_table_free(kl_src_table *t)
{
    if (!t)
        return;
    pthread_mutex_destroy(&t->mu);
    kl_hmap_free(&t->map);
    free(t);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t src_hash(const kl_src_table *t, const uint8_t addr[16])
{
    uint64_t a, b;
    memcpy(&a, addr, 8);
    memcpy(&b, addr + 8, 8);
    return mix(mix(a ^ t->k0) ^ b ^ t->k1);
}

static bool same_addr(const void *slot, const void *addr)
{
    return memcmp(((const src_entry *)slot)->addr, addr, 16) == 0;
}

static src_entry *find(const kl_src_table *t, const uint8_t addr[16])
{
    return kl_hmap_get_h(&t->map, src_hash(t, addr), same_addr, addr);
}

bool kl_src_take(kl_src_table *t, const uint8_t addr[16])
{
    pthread_mutex_lock(&t->mu);
    bool found;
    src_entry *e =
        kl_hmap_put_h(&t->map, src_hash(t, addr), same_addr, addr, &found);
    /* no room (cannot happen: reserved for max_handshaking) refuses */
    bool ok = e && e->n < t->per_source;
    if (ok && e->n++ == 0)
        memcpy(e->addr, addr, 16);
    else if (e && !found)
        kl_hmap_remove(&t->map, e); /* per_source 0: nothing was taken */
    pthread_mutex_unlock(&t->mu);
    return ok;
}

void kl_src_put(kl_src_table *t, const uint8_t addr[16])
{
    pthread_mutex_lock(&t->mu);
    src_entry *e = find(t, addr);
    if (e && --e->n == 0)
        kl_hmap_remove(&t->map, e);
    pthread_mutex_unlock(&t->mu);
}

uint32_t kl_src_count(kl_src_table *t, const uint8_t addr[16])
{
    pthread_mutex_lock(&t->mu);
    src_entry *e = find(t, addr);
    uint32_t n = e ? e->n : 0;
    pthread_mutex_unlock(&t->mu);
    return n;
}

/* IPv4 (also IPv4-mapped IPv6) as ::ffff:a.b.c.d; other IPv6 by /64. */
static void source_of(const struct sockaddr *sa, uint8_t out[16])
{
    memset(out, 0, 16);
    if (sa->sa_family == AF_INET) {
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a =
            &((const struct sockaddr_in6 *)sa)->sin6_addr;
        memcpy(out, a, IN6_IS_ADDR_V4MAPPED(a) ? 16 : 8);
    }
}

static void source_text(const uint8_t addr[16], char *out, size_t cap)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0,    0,
                                       0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(addr, mapped, 12) == 0) {
        inet_ntop(AF_INET, addr + 12, out, (socklen_t)cap);
        return;
    }
    char ip[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, addr, ip, sizeof ip);
    snprintf(out, cap, "%s/64", ip);
}

/* ---- admission ---- */

/* then: what happens to new connections; NULL: they wait in the listen
 * backlog, whose size is read then (at most once a second) because it
 * tells whether a storm fits. */
static void note_refusal(kl_shard *s, const char *what, uint32_t cap,
                         const uint8_t *src, const char *then)
{
    /* One line per second per shard at most: the refusals of a flood are
     * counted, not logged one by one. */
    uint64_t now = kl_loop_now(s->ev.loop);
    if (now - s->logs.refusal_ns < REFUSAL_LOG_NS && s->logs.refusal_ns)
        return;
    s->logs.refusal_ns = now;
    char from[INET6_ADDRSTRLEN + 8] = "";
    if (src) {
        memcpy(from, " for ", 5);
        source_text(src, from + 5, sizeof from - 5);
    }
    char wait[160];
    if (!then) {
        snprintf(wait, sizeof wait,
                 "new connections wait in the listen backlog (at most "
                 "net.core.somaxconn = %ld per shard) until handshakes finish",
                 somaxconn());
        then = wait;
    }
    kl_warn("shard %d: %s reached (%u)%s: %s (logged at most once a "
            "second)",
            s->index, what, cap, from, then);
}

#define THEN_CLOSE "closing new connections at once (counted)"

/* Wakes every shard that stopped accepting at max_handshaking, once each
 * (the flag is taken by exchange). Sequentially consistent with
 * kl_limits_wait_slot: either that sees the count below the cap, or this
 * sees its flag - a stopped listener is never forgotten. */
static void wake_waiting(kl_server *srv)
{
    for (int i = 0; i < srv->nshards; i++) {
        kl_shard *t = &srv->shards[i];
        if (atomic_load(&t->accept.blocked) &&
            atomic_exchange(&t->accept.blocked, false))
            kl_loop_wake(t->ev.loop);
    }
}

void kl_limits_wait_slot(kl_shard *s)
{
    kl_server *srv = s->srv;
    atomic_store(&s->accept.blocked, true);
    if (atomic_load(&srv->nhandshaking) < srv->o.max_handshaking &&
        atomic_exchange(&s->accept.blocked, false))
        kl_loop_wake(s->ev.loop);
}

/* keylessd_accept_pause*: the socket held at the pause is the first one
 * asked about when the shard resumes (shard.c resume_accepting), so its
 * answer ends the pause; metrics_glue.c ends one the listener's closing
 * ended (shutdown) at the end of the loop turn. */
static void note_pause(kl_shard *s, bool waits)
{
    if (s->obs.mx && waits != s->accept.parked)
        kl_metrics_accept_paused(s->obs.mx, waits, kl_now_ns());
}

static kl_admit admit(kl_shard *s, const struct sockaddr *sa, kl_src *src)
{
    kl_server *srv = s->srv;
    src->counted = false;
    if (!take(&srv->nconns, srv->o.max_connections)) {
        KL_COUNT(s->st.conn_refused);
        kl_metrics_conn_refused(s->obs.mx, KL_REFUSE_MAX_CONNECTIONS);
        note_refusal(s, "max_connections", srv->o.max_connections, NULL,
                     THEN_CLOSE);
        return KL_ADMIT_CLOSE;
    }
    if (!take(&srv->nhandshaking, srv->o.max_handshaking)) {
        atomic_fetch_sub_explicit(&srv->nconns, 1, memory_order_relaxed);
        note_refusal(s, "max_handshaking", srv->o.max_handshaking, NULL, NULL);
        return KL_ADMIT_WAIT;
    }
    if (srv->src_caps) {
        source_of(sa, src->addr);
        if (!kl_src_take(srv->src_caps, src->addr)) {
            atomic_fetch_sub(&srv->nhandshaking, 1);
            atomic_fetch_sub_explicit(&srv->nconns, 1, memory_order_relaxed);
            /* another shard may have stopped on the slot held meanwhile */
            wake_waiting(srv);
            KL_COUNT(s->st.handshake_refused);
            kl_metrics_conn_refused(s->obs.mx,
                                    KL_REFUSE_HANDSHAKING_PER_SOURCE);
            note_refusal(s, "max_handshaking_per_source",
                         srv->o.max_handshaking_per_source, src->addr,
                         THEN_CLOSE);
            return KL_ADMIT_CLOSE;
        }
        src->counted = true;
    }
    return KL_ADMIT_OK;
}

kl_admit kl_limits_admit(kl_shard *s, const struct sockaddr *sa, kl_src *src)
{
    kl_admit a = admit(s, sa, src);
    note_pause(s, a == KL_ADMIT_WAIT);
    return a;
}

void kl_limits_handshake_done(kl_shard *s, kl_src *src)
{
    /* sequentially consistent: see wake_waiting */
    atomic_fetch_sub(&s->srv->nhandshaking, 1);
    if (src->counted) {
        kl_src_put(s->srv->src_caps, src->addr);
        src->counted = false;
    }
    wake_waiting(s->srv);
}

void kl_limits_release(kl_shard *s, bool handshaking, kl_src *src)
{
    if (handshaking)
        kl_limits_handshake_done(s, src);
    atomic_fetch_sub_explicit(&s->srv->nconns, 1, memory_order_relaxed);
}

bool kl_limits_handshake_too_big(kl_conn *c)
{
    uint64_t max = c->shard->srv->o.max_handshake_bytes;
    uint64_t got = kl_tls_bytes_read(c->tls);
    if (got <= max)
        return false;
    kl_shard *s = c->shard;
    KL_COUNT(s->st.handshake_failed);
    kl_mx_handshake_failed(s, KL_HS_FAIL_PROTOCOL, NULL);
    char why[160];
    snprintf(why, sizeof why,
             "%llu bytes sent without completing the handshake (more than "
             "max_handshake_bytes, %llu)",
             (unsigned long long)got, (unsigned long long)max);
    kl_conn_close_limited(c, KL_LOGSUP_HANDSHAKE_TOO_BIG, KL_LOG_INFO,
                          "TLS handshake refused", why);
    return true;
}
