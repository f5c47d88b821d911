/* Connection admission and process hardening (issue 10, docs/SECURITY.md).
 *
 * Why caps at accept time: a connection costs a descriptor, ~20 KiB of
 * buffers and a TLS state before its client has proved anything. An
 * attacker who can reach the port could otherwise exhaust descriptors or
 * memory with connections that never finish (or never start) their
 * handshake, and lock out the edges. So a socket over either cap is closed
 * right after accept() - cheaper than leaving it in the kernel's backlog,
 * where it would delay the well-behaved clients queued behind it. The
 * handshake cap is much lower than the connection cap: authenticated
 * clients are few and long-lived, unauthenticated ones are what a flood
 * consists of. */
#include <errno.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include "core/log.h"
#include "server/internal.h"
#include "server/limits.h"

/* Descriptors beyond the connections: listeners, epoll, eventfds, key
 * files during a reload, inotify, the metrics server, the log. */
#define FD_MARGIN 256u
#define REFUSAL_LOG_NS 1000000000ull

void kl_limits_process_setup(bool allow_core_dumps, size_t max_connections)
{
    if (!allow_core_dumps) {
        /* A core file holds every key in memory; so does a ptrace attach
         * by a process of the same user. PR_SET_DUMPABLE 0 stops both;
         * RLIMIT_CORE 0 also covers a later setuid/exec that would reset
         * dumpability. */
        struct rlimit none = {0, 0};
        if (setrlimit(RLIMIT_CORE, &none) != 0)
            kl_warn("cannot disable core dumps (RLIMIT_CORE): %s",
                    strerror(errno));
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
            kl_warn("cannot disable core dumps (PR_SET_DUMPABLE): %s",
                    strerror(errno));
    } else {
        kl_warn("allow_core_dumps is set: a core dump of keylessd contains "
                "the private keys it serves");
    }
    struct rlimit fds;
    if (getrlimit(RLIMIT_NOFILE, &fds) != 0)
        return;
    if (fds.rlim_cur < fds.rlim_max) {
        rlim_t was = fds.rlim_cur;
        fds.rlim_cur = fds.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &fds) != 0) {
            kl_warn("cannot raise the open-file limit from %llu to %llu: %s",
                    (unsigned long long)was, (unsigned long long)fds.rlim_max,
                    strerror(errno));
            fds.rlim_cur = was;
        }
    }
    if (fds.rlim_cur != RLIM_INFINITY &&
        fds.rlim_cur < (rlim_t)max_connections + FD_MARGIN)
        kl_warn("the open-file limit (%llu) is below max_connections (%zu) "
                "plus %u for keylessd's own files: connections beyond it are "
                "refused by accept(); raise LimitNOFILE (systemd) or ulimit "
                "-n, or lower max_connections",
                (unsigned long long)fds.rlim_cur, max_connections, FD_MARGIN);
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

static void note_refusal(kl_shard *s, const char *what, uint32_t cap)
{
    /* One line per second per shard at most: the refusals of a flood are
     * counted, not logged one by one. */
    uint64_t now = kl_loop_now(s->loop);
    if (now - s->refusal_log_ns < REFUSAL_LOG_NS && s->refusal_log_ns)
        return;
    s->refusal_log_ns = now;
    kl_warn("shard %d: %s reached (%u): closing new connections at once "
            "(counted; logged at most once a second)",
            s->index, what, cap);
}

bool kl_limits_admit(kl_shard *s)
{
    kl_server *srv = s->srv;
    if (!take(&srv->nconns, srv->o.max_connections)) {
        KL_COUNT(s->st.conn_refused);
        note_refusal(s, "max_connections", srv->o.max_connections);
        return false;
    }
    if (!take(&srv->nhandshaking, srv->o.max_handshaking)) {
        atomic_fetch_sub_explicit(&srv->nconns, 1, memory_order_relaxed);
        KL_COUNT(s->st.handshake_refused);
        note_refusal(s, "max_handshaking", srv->o.max_handshaking);
        return false;
    }
    return true;
}

void kl_limits_handshake_done(kl_shard *s)
{
    atomic_fetch_sub_explicit(&s->srv->nhandshaking, 1, memory_order_relaxed);
}

void kl_limits_release(kl_shard *s, bool handshaking)
{
    if (handshaking)
        kl_limits_handshake_done(s);
    atomic_fetch_sub_explicit(&s->srv->nconns, 1, memory_order_relaxed);
}
