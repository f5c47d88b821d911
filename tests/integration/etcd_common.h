/* SPDX-License-Identifier: Apache-2.0 */
/* What the etcd client's tests share: a client on a test cluster, status
 * checks that print the client's message, and a watch callback that keeps
 * the events. Included by tests/integration/test_etcd*.c only. */
#ifndef KL_TEST_ETCD_COMMON_H
#define KL_TEST_ETCD_COMMON_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon.h"
#include "etcdproc.h"
#include "fleet/etcd.h"
#include "pki.h"
#include "testutil.h"

static inline void ec_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static inline void ec_status(kl_status got, kl_status want, const char *err)
{
    if (got != want)
        fail_msg("status %d (%s), want %d (%s): %s", got, kl_status_str(got),
                 want, kl_status_str(want), err);
}

static inline void ec_ok(kl_status st, const char *err)
{
    ec_status(st, KL_OK, err);
}

static inline void ec_expect(const char *text, const char *want)
{
    if (!strstr(text, want))
        fail_msg("expected \"%s\" in: %s", want, text);
}

static inline kl_etcd *ec_client_max(const te_cluster *c, int timeout_ms,
                                     size_t max_response)
{
    const char *urls[TE_MAX_MEMBERS];
    te_endpoints(c, urls);
    kl_etcd_opts o = {.endpoints = urls,
                      .n_endpoints = (size_t)c->n,
                      .timeout_ms = timeout_ms,
                      .max_response = max_response};
    if (c->tls) {
        o.ca_file = tp_path("ca.crt");
        o.cert_file = tp_path("client.crt");
        o.key_file = tp_path("client.key");
    }
    kl_etcd *cl;
    char err[512] = "";
    ec_ok(kl_etcd_new(&o, &cl, err, sizeof err), err);
    return cl;
}

static inline kl_etcd *ec_client(const te_cluster *c, int timeout_ms)
{
    return ec_client_max(c, timeout_ms, 0);
}

typedef struct ec_event {
    kl_etcd_event_type type;
    char key[64], value[64];
    int64_t rev;
} ec_event;

typedef struct ec_events {
    ec_event e[256];
    size_t n;
} ec_events;

static inline void ec_events_clear(ec_events *ev)
{
    ev->n = 0;
}

static inline void ec_collect(void *arg, const kl_etcd_event *e)
{
    ec_events *ev = arg;
    if (ev->n == sizeof ev->e / sizeof ev->e[0])
        fail_msg("more than %zu watch events", ev->n);
    ec_event *x = &ev->e[ev->n++];
    x->type = e->type;
    snprintf(x->key, sizeof x->key, "%.*s", (int)e->key_len,
             (const char *)e->key);
    snprintf(x->value, sizeof x->value, "%.*s", (int)e->value_len,
             (const char *)e->value);
    x->rev = e->mod_revision;
}

/* Steps the watch until it has n events (failing after timeout_ms);
 * disconnects on the way are allowed (the watch reconnects). */
static inline void ec_wait_events(kl_etcd_watch *w, ec_events *ev, size_t n,
                                  int timeout_ms)
{
    char err[512] = "";
    double until = td_now_ms() + timeout_ms;
    while (ev->n < n && td_now_ms() < until) {
        if (kl_etcd_watch_step(w, 100, ec_collect, ev, err, sizeof err) !=
            KL_OK)
            ec_sleep_ms(50); /* a reconnect's backoff */
    }
    if (ev->n != n)
        fail_msg("%zu watch events, want %zu (last error: %s)", ev->n, n, err);
}

/* Steps the watch until an event of revision rev arrives. */
static inline void ec_wait_rev(kl_etcd_watch *w, ec_events *ev, int64_t rev,
                               int timeout_ms)
{
    char err[512] = "";
    double until = td_now_ms() + timeout_ms;
    while ((ev->n == 0 || ev->e[ev->n - 1].rev < rev) && td_now_ms() < until) {
        if (kl_etcd_watch_step(w, 100, ec_collect, ev, err, sizeof err) !=
            KL_OK)
            ec_sleep_ms(50);
    }
    if (ev->n == 0 || ev->e[ev->n - 1].rev != rev)
        fail_msg("no watch event at revision %ld (last error: %s)", (long)rev,
                 err);
}

/* Revisions only go up: nothing delivered twice or out of order. */
static inline void ec_check_order(const ec_events *ev)
{
    for (size_t i = 1; i < ev->n; i++)
        if (ev->e[i].rev <= ev->e[i - 1].rev)
            fail_msg("event %zu at revision %ld after %ld", i,
                     (long)ev->e[i].rev, (long)ev->e[i - 1].rev);
}

static inline void ec_wait_connected(kl_etcd_watch *w, ec_events *ev)
{
    char err[512] = "";
    double until = td_now_ms() + 5000;
    while (!kl_etcd_watch_connected(w) && td_now_ms() < until) {
        if (kl_etcd_watch_step(w, 50, ec_collect, ev, err, sizeof err) != KL_OK)
            ec_sleep_ms(50);
    }
    if (!kl_etcd_watch_connected(w))
        fail_msg("the watch did not connect: %s", err);
}

static inline void ec_check(const ec_events *ev, size_t i,
                            kl_etcd_event_type type, const char *key,
                            const char *value, int64_t rev)
{
    assert_true(i < ev->n);
    const ec_event *x = &ev->e[i];
    if (x->type != type || strcmp(x->key, key) != 0 ||
        strcmp(x->value, value) != 0 || x->rev != rev)
        fail_msg("event %zu: type %d %s=%s at %ld; want type %d %s=%s at %ld",
                 i, x->type, x->key, x->value, (long)x->rev, type, key, value,
                 (long)rev);
}

#endif
