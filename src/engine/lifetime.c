/* SPDX-License-Identifier: Apache-2.0 */
/* How long an established connection may keep its client's trust
 * (docs/SECURITY.md "Revocation and expiry"): a handshake verifies the
 * client certificate once, and a connection lives until the client or a
 * timeout ends it. Two events end that trust earlier:
 *  - a reload installs a TLS context that trusts other client CAs (or
 *    CRLs): each shard verifies its open connections' certificates again
 *    against the new context (kl_shard_recheck_trust, from the shard's own
 *    wake-up: the reloading thread only swaps the context and wakes the
 *    shards, res.c), and one whose chain no longer verifies is drained;
 *  - the certificate's notAfter passes (or an issuer's, whichever is
 *    first): the connection's timer fires then, and a request read after
 *    it is not run.
 * Draining (conn.c, P8): no further request is read, the requests in
 * flight are answered, then the connection closes. Everything here runs
 * on the connection's shard thread. */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "core/log.h"
#include "core/time.h"
#include "engine/internal.h"

/* Beyond this the certificate is treated as never expiring (a notAfter of
 * 9999-12-31 would overflow the nanosecond clock). */
#define FAR_FUTURE_S (100ll * 365 * 86400)

void kl_conn_lifetime_start(kl_conn *c)
{
    c->expires_ns = 0;
    c->not_after = 0;
    int64_t na;
    if (!kl_tls_peer_not_after(c->tls, &na))
        return;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    uint64_t mono = kl_now_ns();
    int64_t left_s = na - (int64_t)wall.tv_sec;
    if (left_s > FAR_FUTURE_S)
        return;
    c->not_after = na;
    /* notAfter is the last second the certificate is valid at (OpenSSL
     * judges it expired from that second on, as the handshake does). The
     * deadline is kept on the monotonic clock, as the loop's timers are. */
    int64_t left_ns = left_s * (int64_t)KL_NS_PER_S - (int64_t)wall.tv_nsec;
    c->expires_ns = left_ns > 0 ? mono + (uint64_t)left_ns : mono;
    if (c->expires_ns == 0)
        c->expires_ns = 1;
}

uint64_t kl_conn_next_due(const kl_conn *c)
{
    uint64_t idle = c->last_req_ns + c->shard->srv->o.idle_timeout_ns;
    return c->expires_ns && c->expires_ns < idle ? c->expires_ns : idle;
}

/* notAfter as "2026-12-02 15:04:05 UTC", for the log. */
static void format_time(int64_t t, char *out, size_t cap)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (!gmtime_r(&tt, &tm) ||
        strftime(out, cap, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0)
        snprintf(out, cap, "%" PRId64, t);
}

/* Stops reading, answers what is in flight, then closes (conn.c). */
static void end_trust(kl_conn *c, kl_metrics_close reason)
{
    kl_metrics_conn_closed(c->shard->obs.mx, reason);
    kl_conn_drain(c);
}

static void expire(kl_conn *c)
{
    char when[64];
    format_time(c->not_after, when, sizeof when);
    kl_warn("connection %s (client %s): client certificate expired "
            "(notAfter %s); closing after %u request(s) in flight",
            c->addr, kl_conn_peer_label(c), when, c->inflight);
    end_trust(c, KL_CLOSE_CERT_EXPIRED);
}

/* Verifies c against the shard's current context. false: it was no longer
 * trusted and is draining now. */
static bool reverify(kl_conn *c)
{
    kl_shard *s = c->shard;
    c->trust_epoch = s->res.trust_epoch;
    char why[256];
    if (kl_tls_conn_reverify(c->tls, kl_shard_tls(s), why, sizeof why))
        return true;
    kl_info("connection %s (client %s): client certificate no longer "
            "trusted after the client CA was reloaded (%s); closing after "
            "%u request(s) in flight",
            c->addr, kl_conn_peer_label(c), why, c->inflight);
    end_trust(c, KL_CLOSE_UNTRUSTED);
    return false;
}

bool kl_conn_lifetime_ok(kl_conn *c, uint64_t now)
{
    if (c->state != KL_CONN_OPEN)
        return false;
    if (c->expires_ns && now >= c->expires_ns) {
        expire(c);
        return false;
    }
    /* a reload this shard has not walked its connections for yet (the
     * walk follows on the shard's wake-up): this one is checked now */
    kl_shard_sync(c->shard);
    if (c->trust_epoch != c->shard->res.trust_epoch)
        return reverify(c);
    return true;
}

void kl_shard_recheck_trust(kl_shard *s)
{
    s->res.trust_recheck = false;
    size_t checked = 0, dropped = 0;
    for (kl_conn *c = s->conns.live, *next; c; c = next) {
        next = c->next; /* c may close and leave the list */
        /* handshakes still running are checked when they finish; draining
         * connections read nothing more */
        if (c->state != KL_CONN_OPEN || c->trust_epoch == s->res.trust_epoch)
            continue;
        checked++;
        if (!reverify(c))
            dropped++;
    }
    if (dropped > 0)
        kl_warn("shard %d: the reloaded client CA no longer trusts %zu of "
                "%zu open connection(s); they are closed once their "
                "requests in flight are answered",
                s->index, dropped, checked);
    else if (checked > 0)
        kl_debug("shard %d: the reloaded client CA still trusts all %zu open "
                 "connection(s)",
                 s->index, checked);
}
