/* SPDX-License-Identifier: Apache-2.0 */
/* The blocking side of a kl_target: a caller waits for its request by
 * driving the target itself (the library starts no threads). Several
 * blocking callers take turns: one polls and runs the callbacks, the
 * others sleep on the condition variable until it hands over. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/target_int.h"
#include "core/time.h"

/* Drives the target until done(arg) holds (checked under the lock) or
 * the deadline passes. Called and returns with the lock held. */
static void drive_until(kl_target *t, bool (*done)(kl_target *, void *),
                        void *arg, uint64_t deadline)
{
    while (!done(t, arg) && kl_now_ns() < deadline) {
        if (t->driving) {
            /* another caller polls; it wakes us when callbacks ran */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 20 * (long)KL_NS_PER_MS;
            if (ts.tv_nsec >= (long)KL_NS_PER_S) {
                ts.tv_sec++;
                ts.tv_nsec -= (long)KL_NS_PER_S;
            }
            pthread_cond_timedwait(&t->cv, &t->mu, &ts);
            continue;
        }
        t->driving = true;
        int fd = t->epfd;
        pthread_mutex_unlock(&t->mu);
        kl_status pst = kl_async_process(t);
        (void)pst; /* it fails only where the caller's setup would have */
        pthread_mutex_lock(&t->mu);
        if (!done(t, arg)) {
            pthread_mutex_unlock(&t->mu);
            /* the timer is armed for every deadline, so this wait is
             * bounded; the cap only lets a turn pass to other callers */
            struct pollfd p = {.fd = fd, .events = POLLIN};
            (void)poll(&p, 1, 100);
            pthread_mutex_lock(&t->mu);
        }
        t->driving = false;
        pthread_cond_broadcast(&t->cv);
    }
}

/* ---- one request ----------------------------------------------------- */

typedef struct waiter {
    kl_target *t;
    bool done;
    kl_status st;
    kl_client_result *out;
} waiter;

static void call_done(void *arg, const kl_result *res)
{
    waiter *w = arg;
    kl_status st = res->status;
    if (st == KL_OK) {
        uint8_t *m = malloc(res->msg_len);
        if (!m) {
            st = KL_E_NOMEM;
        } else {
            memcpy(m, res->msg, res->msg_len);
            w->out->msg = m;
            w->out->msg_len = res->msg_len;
            w->out->opcode = res->opcode;
            w->out->error = res->error;
            w->out->payload =
                res->payload ? m + (res->payload - res->msg) : NULL;
            w->out->payload_len = res->payload_len;
            w->out->tracked = true;
            w->out->rtt_ns = res->elapsed_ns;
            w->out->id = 0;
        }
    }
    pthread_mutex_lock(&w->t->mu);
    w->st = st;
    w->done = true;
    pthread_cond_broadcast(&w->t->cv);
    pthread_mutex_unlock(&w->t->mu);
}

static bool call_finished(kl_target *t, void *arg)
{
    (void)t;
    return ((waiter *)arg)->done;
}

kl_status kl_target_call(kl_target *t, const kl_request_spec *spec,
                         int timeout_ms, kl_client_result *out)
{
    waiter w = {.t = t, .out = out};
    memset(out, 0, sizeof *out);
    KL_GUARD(kl_async_submit(t, spec, timeout_ms, call_done, &w, NULL));
    pthread_mutex_lock(&t->mu);
    /* the request's own deadline ends it: no deadline of ours */
    drive_until(t, call_finished, &w, UINT64_MAX);
    pthread_mutex_unlock(&t->mu);
    return w.st;
}

/* ---- connecting ahead of requests ----------------------------------- */

/* Up, or every server tried since `since` and failed. */
static bool connect_settled(kl_target *t, void *arg)
{
    uint64_t since = *(const uint64_t *)arg;
    if (kl_tgt_ready_conn(t))
        return true;
    for (size_t i = 0; i < t->nconns; i++) {
        const kl_tconn *c = &t->conns[i];
        if (c->st != CS_IDLE || c->failed_ns < since)
            return false;
    }
    return true;
}

kl_status kl_target_connect(kl_target *t, int timeout_ms, char *err,
                            size_t errlen)
{
    char dummy[8];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = 0;
    pthread_mutex_lock(&t->mu);
    kl_tgt_check_fork(t);
    kl_status st = kl_tgt_runtime(t);
    if (st != KL_OK) {
        pthread_mutex_unlock(&t->mu);
        snprintf(err, errlen, "cannot create the event descriptors");
        return st;
    }
    uint64_t since = kl_now_ns();
    int ms = timeout_ms > 0
                 ? timeout_ms
                 : t->o.connect_timeout_ms * (int)(t->nconns ? t->nconns : 1);
    t->connecting++; /* makes the next round connect with no request */
    kl_tgt_wake(t);
    drive_until(t, connect_settled, &since, kl_tgt_after_ms(since, ms));
    t->connecting--;
    st = KL_OK;
    if (!kl_tgt_ready_conn(t)) {
        const kl_tconn *last = NULL;
        for (size_t i = 0; i < t->nconns; i++)
            if (t->conns[i].failed_ns >= since &&
                (!last || t->conns[i].failed_ns > last->failed_ns))
                last = &t->conns[i];
        if (last) {
            st = last->fail_st;
            snprintf(err, errlen, "%s", last->err);
        } else {
            st = KL_E_TIMEOUT;
            snprintf(err, errlen, "no connection within %d ms", ms);
        }
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}
