/* The per-attempt timeout (issue 9): queueing is not loss.
 *
 * An attempt is timed out only when its connection has answered nothing
 * for the route's timeout (p99 x timeout_p99_factor within the floor and
 * ceiling, remote.c) since the attempt was sent - that is, since the later
 * of its sending and the connection's last answer. A stalled, wedged or
 * black-holed remote answers nothing and is left after one timeout, as
 * before; a healthy remote whose workers are busy with a burst keeps
 * answering, so the requests queued behind the burst wait for their turn
 * however long the queue, bounded by their own deadline (protocol P9
 * deadline_ms, or default_deadline_ms), which libkeyless enforces and the
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
 * answers flow the timer fires about once per timeout and re-arms. */
#include "core/log.h"
#include "core/time.h"
#include "router/router_int.h"

#define MS 1000000ull

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
        ms < c->rm->r->o.connect_timeout_ms)
        ms = c->rm->r->o.connect_timeout_ms;
    return (uint64_t)ms * MS;
}

/* When the head attempt is due: one timeout after it was sent or after
 * the connection's last answer, whichever is later. */
static uint64_t due_ns(const kl_upconn *c)
{
    const kl_rreq *q = c->attempts;
    uint64_t from = q->sent_ns > c->progress_ns ? q->sent_ns : c->progress_ns;
    return from + stall_ns(c);
}

void kl_rt_stall_arm(kl_upconn *c)
{
    if (!c->attempts || kl_timer_armed(&c->stall_timer))
        return;
    if (kl_timer_at(c->rm->r->loop, &c->stall_timer, due_ns(c)) != KL_OK)
        kl_warn("router: remote %s: cannot arm an attempt timer; its "
                "requests end at their deadline",
                c->rm->name);
}

/* Whether q has somewhere else to go: another attempt allowed, and a
 * candidate not tried yet that is up. */
static bool can_fail_over(const kl_rreq *q)
{
    kl_router *r = q->r;
    if (q->attempts >= (unsigned)r->o.max_attempts)
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
                rm->name, (unsigned long long)(stall_ns(c) / MS));
    rm->up = false; /* until a probe says otherwise */
    kl_rt_next_attempt(q);
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
    if (c->attempts && !kl_timer_armed(&c->stall_timer))
        kl_rt_stall_arm(c);
}
