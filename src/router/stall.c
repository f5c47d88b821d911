/* SPDX-License-Identifier: Apache-2.0 */
/* The per-attempt timeout: queueing is not loss.
 *
 * An attempt is timed out only when its connection has answered nothing
 * for the route's timeout (p99 x timeout_p99_factor within the floor and
 * ceiling, remote.c) since the attempt was sent - that is, since the later
 * of its sending and the connection's last answer. A stalled, wedged or
 * black-holed remote answers nothing and is left after one timeout, as
 * before; a healthy remote whose workers are busy with a burst keeps
 * answering, so the requests queued behind the burst wait for their turn
 * however long the queue, bounded by their own deadline (protocol P9
 * deadline_ms, or default_deadline_ns), which libkeyless enforces and the
 * remote sees. (The timeout used to be libkeyless's budget for the attempt:
 * 20 ms on a loopback route. The remote got deadline_ms = 20, shed what
 * its queue could not start in time, and a burst of 512 ended as ~1/4
 * `remote configuration error` from a healthy upstream.)
 *
 * A timed-out attempt moves to the next candidate only when there is one
 * that is up: with nowhere else to go, giving up on the one remote still
 * connected helps nobody, so it waits on (on the connection's waiting
 * list) until its answer or its deadline; a connection that is really
 * dead is closed by the probes (two failed) and its attempts fail over or
 * end then.
 *
 * Cost: one timer per connection, due at the oldest watched attempt's
 * timeout; attempts are watched in the order they were sent, so a check
 * looks at the head only and stops at the first one not due. While
 * answers flow the timer fires about once per timeout and re-arms.
 *
 * Lost alone (a remote that keeps answering but never this request: a
 * frame lost inside it, a worker that died holding it). The silence rule
 * cannot see it - the connection is not silent - so a second rule: an
 * attempt is lost when the connection has answered a request for the
 * same work - the same SKI and opcode - that was sent at least one
 * timeout after it, and at most LOST_ALONE_MAX attempts on the connection
 * are that old. A lost request is overtaken by every later one for its
 * key, and is alone (or nearly) in being left behind. Requests for other
 * keys do not count: they may legitimately overtake it by far (an RSA
 * queue next to an ECDSA one; at a shared egress, a key 3 ms away next to
 * one 175 ms away). Nor does overtaking within a queue: a remote may
 * answer some of one key's requests ahead of older ones (a keylessd runs
 * fast operations inline on its shard while older ones wait in its pool;
 * a router moves a key to a faster route) - but then many old attempts
 * are pending, which the second condition tells from a loss, so a burst,
 * however long its queue, is never taken for one; nor is its tail as it
 * drains (a queue once seen stays one, check_overtaken). A lost attempt moves
 * to the next candidate that is up,
 * without marking its remote down (it answers); with none, it is sent
 * again to the same remote (as one more attempt, within max_attempts and
 * the deadline); its late answer is discarded (kl_async_cancel). Limits:
 * a request lost while no later request for the same key and operation
 * is answered on its connection, or while more than LOST_ALONE_MAX
 * attempts are as old (lost among many), still waits to its deadline; a
 * remote that reorders one key's requests by more than the timeout while
 * only a few are in flight (a key moved to a faster route at a low rate;
 * a keylessd whose workers are held by slow operations while its shard
 * runs the same key's fast ones inline) may have one declared lost and
 * done twice - the same answer, the late one discarded.
 *
 * Cost: per connection, a direct-mapped record of the latest send time
 * answered per (SKI, opcode) - one store per answer. A check looks at no
 * more than LOST_ALONE_MAX + 1 attempts, and runs only when an answer
 * could have overtaken one, at most twice per timeout. */
#include <string.h>

#include "core/log.h"
#include "core/time.h"
#include "router/router_int.h"

static void on_stall_timer(kl_loop *loop, kl_timer *t);

void kl_rt_stall_init(kl_upconn *c)
{
    kl_timer_init(&c->stall_timer, on_stall_timer, c);
}

/* The route's attempt timeout; a connection still handshaking gets the
 * connect timeout at least (nothing can be answered before TLS is up). */
static uint64_t stall_ns(const kl_upconn *c)
{
    int ms = kl_remote_timeout_ms(c->rm);
    if (kl_target_active_server(c->t) < 0 &&
        ms < kl_rt_ms(c->rm->r->o.connect_timeout_ns))
        ms = kl_rt_ms(c->rm->r->o.connect_timeout_ns);
    return kl_ms_to_ns((uint64_t)ms);
}

/* When the head attempt is due: one timeout after it was sent or after
 * the connection's last answer, whichever is later. */
static uint64_t due_ns(const kl_upconn *c)
{
    const kl_rreq *q = c->attempts;
    uint64_t from = q->sent_ns > c->progress_ns ? q->sent_ns : c->progress_ns;
    return from + stall_ns(c);
}

/* Due at the head attempt's timeout or at a pending lost-attempt check,
 * whichever comes first; a timer armed for earlier stays (it re-arms when
 * it fires). */
void kl_rt_stall_arm(kl_upconn *c)
{
    uint64_t due = c->attempts ? due_ns(c) : UINT64_MAX;
    if (c->check_pending && c->check_at < due)
        due = c->check_at;
    if (due == UINT64_MAX ||
        (kl_timer_armed(&c->stall_timer) && c->stall_timer.due_ns <= due))
        return;
    if (kl_timer_at(c->rm->r->loop, &c->stall_timer, due) != KL_OK)
        kl_warn("router: remote %s: cannot arm an attempt timer; its "
                "requests end at their deadline",
                c->rm->name);
}

/* Whether q has somewhere else to go: another attempt allowed, and a
 * candidate not tried yet that is up. */
static bool can_fail_over(const kl_rreq *q)
{
    kl_router *r = q->r;
    if (!kl_rt_may_try(q, r->o.max_attempts))
        return false;
    const kl_rt_key *k = kl_rt_find(r->table, q->spec.ski);
    if (!k)
        return false;
    kl_remote *cand[KL_RT_MAX_ATTEMPTS];
    size_t n = kl_rt_candidates(r, r->table, k, q->spec.has_compliance,
                                q->spec.compliance, q->tried, q->attempts, cand,
                                KL_RT_MAX_ATTEMPTS);
    for (size_t i = 0; i < n; i++)
        if (cand[i]->up && cand[i]->in_table)
            return true;
    return false;
}

/* q's connection answered nothing for a timeout since q was sent. */
static void overdue(kl_upconn *c, kl_rreq *q)
{
    kl_router *r = q->r;
    kl_remote *rm = c->rm;
    bool move = can_fail_over(q);
    pthread_mutex_lock(&r->mu);
    /* a cancelled one is the inbox's (router.c on_wake); one whose answer
     * is already on its way keeps it */
    if (move && (q->cancelled || kl_async_cancel(c->t, q->thandle) != KL_OK))
        move = false;
    if (move)
        kl_upconn_detach(c, q);
    else
        kl_upconn_wait(c, q);
    pthread_mutex_unlock(&r->mu);
    if (!move)
        return;
    kl_trace_attempt_end(r->o.tracer, &q->tra, "timeout", true);
    rm->failed++;
    if (rm->up)
        kl_info("router: remote %s: no answer for %llu ms; trying the next "
                "route",
                rm->name, (unsigned long long)(stall_ns(c) / KL_NS_PER_MS));
    rm->up = false; /* until a probe says otherwise */
    kl_rt_next_attempt(q);
}

/* ---- lost alone: overtaken by later requests for the same work ---- */

/* The overtaking margin: the route's timeout (the connection answers, so
 * it is up: no handshake allowance, and no lock taken per answer). */
static uint64_t gap_ns(const kl_upconn *c)
{
    return kl_ms_to_ns((uint64_t)kl_remote_timeout_ms(c->rm));
}

static kl_rt_answered *slot(kl_upconn *c, const uint8_t *ski, uint8_t opcode)
{
    /* an SKI is a SHA-1: its first bytes are as good as any hash */
    unsigned h = ((unsigned)ski[0] | (unsigned)ski[1] << 8) ^ opcode * 97u;
    return &c->answered[h % KL_RT_ANSWERED_SLOTS];
}

void kl_rt_stall_answered(kl_upconn *c, const kl_rreq *q)
{
    if (!q->spec.ski)
        return;
    kl_rt_answered *a = slot(c, q->spec.ski, q->spec.opcode);
    if (a->opcode != q->spec.opcode ||
        memcmp(a->ski, q->spec.ski, KL_SKI_LEN) != 0) {
        /* another key's record goes: its lost attempts are caught later
         * (by a newer answer) or not at all - never wrongly */
        memcpy(a->ski, q->spec.ski, KL_SKI_LEN);
        a->opcode = q->spec.opcode;
        a->sent_ns = q->sent_ns;
    } else if (q->sent_ns > a->sent_ns) {
        a->sent_ns = q->sent_ns;
    }
    if (q->sent_ns > c->answered_max_ns)
        c->answered_max_ns = q->sent_ns;
    /* could it have overtaken anything? the oldest watched attempt (or
     * one waiting) sent a timeout before it */
    if (c->check_pending || (!c->waiting && !c->attempts))
        return;
    uint64_t gap = gap_ns(c);
    if (!c->waiting && c->attempts->sent_ns + gap > q->sent_ns)
        return;
    uint64_t now = kl_now_ns(), next = c->checked_ns + gap / 2;
    c->check_pending = true;
    c->check_at = next > now ? next : now;
    kl_rt_stall_arm(c);
}

static bool overtaken(kl_upconn *c, const kl_rreq *q, uint64_t gap)
{
    if (!q->spec.ski)
        return false;
    const kl_rt_answered *a = slot(c, q->spec.ski, q->spec.opcode);
    return a->sent_ns >= q->sent_ns + gap && a->opcode == q->spec.opcode &&
           memcmp(a->ski, q->spec.ski, KL_SKI_LEN) == 0;
}

/* Forgets that rm was tried, so that q may go to it again. */
static void untry(kl_rreq *q, const kl_remote *rm)
{
    for (unsigned i = 0; i < q->attempts && i < KL_RT_MAX_TRIED; i++)
        if (q->tried[i] == rm)
            q->tried[i] = NULL;
}

/* q, on c, was overtaken: to another remote that is up, else to the same
 * one again, else it waits (for its answer or its deadline). */
static void lost(kl_upconn *c, kl_rreq *q)
{
    kl_router *r = q->r;
    kl_remote *rm = c->rm;
    bool elsewhere = can_fail_over(q);
    bool again = !elsewhere && kl_rt_may_try(q, r->o.max_attempts);
    bool move = elsewhere || again;
    pthread_mutex_lock(&r->mu);
    /* as in overdue: a cancelled one is the inbox's, one whose answer is
     * on its way keeps it */
    if (move && (q->cancelled || kl_async_cancel(c->t, q->thandle) != KL_OK))
        move = false;
    if (move)
        kl_upconn_detach(c, q);
    else if (!q->waiting)
        kl_upconn_wait(c, q);
    pthread_mutex_unlock(&r->mu);
    if (!move)
        return;
    kl_trace_attempt_end(r->o.tracer, &q->tra, "lost", true);
    rm->failed++;
    rm->lost++; /* the remote stays up: it answers everything else */
    if ((rm->lost & (rm->lost - 1)) == 0) /* 1, 2, 4, 8...: not a flood */
        kl_info("router: remote %s: %llu request(s) lost so far (overtaken "
                "by requests for the same key sent %llu ms later); each "
                "tried %s",
                rm->name, (unsigned long long)rm->lost,
                (unsigned long long)(gap_ns(c) / KL_NS_PER_MS),
                elsewhere ? "on the next route" : "again");
    if (again)
        untry(q, rm);
    kl_rt_next_attempt(q);
}

/* At most this many attempts on a connection may be old enough to have
 * been overtaken for any of them to be lost: more is a queue (at a
 * keylessd, fast operations run inline on its shard may overtake the same
 * key's pooled ones by the pool's wait; at a router, a key moved to a
 * faster route overtakes what is still on the slower one), which this
 * rule must never take for loss. A few at a time is what a remote loses. */
#define LOST_ALONE_MAX 4

static void check_overtaken(kl_upconn *c, uint64_t now)
{
    c->check_pending = false;
    c->checked_ns = now;
    uint64_t gap = gap_ns(c);
    /* A queue drains one answer at a time: its last few would look alone
     * once the rest is answered. What was once seen as a queue stays one:
     * attempts sent up to c->queue_ns are passed over (at the head of the
     * watched list, which is in send order). */
    kl_rreq *q = c->attempts;
    while (q && q->sent_ns <= c->queue_ns)
        q = q->anext;
    /* the attempts sent a timeout before the latest answered one: in send
     * order on the watched list, anywhere on the waiting list */
    kl_rreq *old[LOST_ALONE_MAX + 1];
    size_t n = 0;
    for (; q && n <= LOST_ALONE_MAX; q = q->anext) {
        if (q->sent_ns + gap > c->answered_max_ns)
            break;
        old[n++] = q;
    }
    /* A queue sent over a few milliseconds crosses the margin a few at a
     * time: the watched attempts right behind (within half the margin)
     * count too, so that it shows as a queue before any of it is taken
     * for lost. */
    size_t seen = n;
    for (; q && seen <= LOST_ALONE_MAX; q = q->anext, seen++)
        if (q->sent_ns + gap / 2 > c->answered_max_ns)
            break;
    for (kl_rreq *w = c->waiting; w && n <= LOST_ALONE_MAX; w = w->anext)
        if (w->sent_ns > c->queue_ns &&
            w->sent_ns + gap <= c->answered_max_ns) {
            old[n++] = w;
            seen++;
        }
    if (n > LOST_ALONE_MAX || seen > LOST_ALONE_MAX) {
        /* a queue, not a loss: all that the counts above cover */
        if (c->answered_max_ns > gap / 2 &&
            c->answered_max_ns - gap / 2 > c->queue_ns)
            c->queue_ns = c->answered_max_ns - gap / 2;
        return;
    }
    /* collected first: lost() changes the lists (and may attach the
     * request to c again, at the tail) */
    for (size_t i = 0; i < n; i++)
        if (overtaken(c, old[i], gap))
            lost(c, old[i]);
}

static void on_stall_timer(kl_loop *loop, kl_timer *t)
{
    (void)loop;
    kl_upconn *c = t->data;
    /* answers already received count: the router thread may be late, and
     * their callbacks (run here) may attach new attempts to c */
    if (kl_async_process(c->t) != KL_OK)
        kl_debug("router: remote %s: processing failed", c->rm->name);
    uint64_t now = kl_now_ns();
    while (c->attempts && due_ns(c) <= now)
        overdue(c, c->attempts);
    if (c->check_pending && c->check_at <= now)
        check_overtaken(c, now);
    kl_rt_stall_arm(c);
}
