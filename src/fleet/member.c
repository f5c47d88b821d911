/* SPDX-License-Identifier: Apache-2.0 */
/* Registration (member.h, docs/FLEET.md "Registration"): one thread per
 * process owns the etcd client and the lease. Its loop sleeps until the
 * next renewal, a retry after a failure, an updated record or the stop;
 * then does the one step the state asks for. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/time.h"
#include "fleet/member.h"

struct kl_fleet_member {
    kl_etcd *etcd;
    char key[512];
    int ttl_s;
    int64_t granted_s; /* the TTL etcd granted (it raises small ones) */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    kl_fleet_server record;
    bool dirty; /* the record changed: write it */
    bool kick;  /* kl_fleet_member_update: write it now */
    bool stop;
    bool on_lease; /* the record was written on the current lease */
    kl_fleet_member_status st;
    /* the thread's own */
    bool warned; /* "cannot register yet" said for this outage */
};

const char *kl_fleet_member_state_name(kl_fleet_member_state s)
{
    static const char *const n[] = {"joining", "registered", "unreachable",
                                    "stopped"};
    return (unsigned)s < 4 ? n[s] : "?";
}

static kl_status copy_record(kl_fleet_server *dst, const kl_fleet_server *src)
{
    return kl_fleet_server_copy(dst, src); /* sets and sealing attributes */
}

/* why: the reason, for the log line; refused: etcd answered and said no
 * (a permission, a password: src/fleet/etcd.c's KL_E_CONFIG), rather than
 * not answering - "unreachable" is then the state, not the news. */
static void set_state_why(kl_fleet_member *m, kl_fleet_member_state s,
                          const char *why, bool refused)
{
    pthread_mutex_lock(&m->mu);
    kl_fleet_member_state was = m->st.state;
    m->st.state = s;
    int64_t lease = m->st.lease;
    pthread_mutex_unlock(&m->mu);
    if (was == s)
        return; /* one line per transition, not per retry */
    switch (s) {
    case KL_FLEET_MEMBER_REGISTERED:
        kl_info("fleet: registered as %s (lease %" PRIx64 ", TTL %" PRId64
                " s)%s%s",
                m->key, (uint64_t)lease, m->granted_s, why ? ": " : "",
                why ? why : "");
        break;
    case KL_FLEET_MEMBER_UNREACHABLE:
        if (refused)
            kl_warn("fleet: etcd refused to keep %s registered (the record "
                    "stays until its lease expires); retrying: %s",
                    m->key, why ? why : "");
        else
            kl_warn("fleet: etcd unreachable, the record stays until its "
                    "lease expires; retrying: %s",
                    why ? why : "");
        break;
    case KL_FLEET_MEMBER_JOINING:
        kl_warn("fleet: registering %s again: %s", m->key, why ? why : "");
        break;
    case KL_FLEET_MEMBER_STOPPED: break;
    }
}

static void set_state(kl_fleet_member *m, kl_fleet_member_state s,
                      const char *why)
{
    set_state_why(m, s, why, false);
}

/* Writes the record on the current lease; KL_OK also sets dirty false. */
static kl_status put_record(kl_fleet_member *m, int64_t lease, char *err,
                            size_t errlen)
{
    pthread_mutex_lock(&m->mu);
    char *json = NULL;
    size_t len = 0;
    kl_status s = kl_fleet_server_encode(&m->record, &json, &len);
    m->dirty = false;
    pthread_mutex_unlock(&m->mu);
    if (s == KL_OK)
        s = kl_etcd_put(m->etcd, m->key, strlen(m->key), json, len, lease, NULL,
                        err, errlen);
    free(json);
    if (s != KL_OK) {
        pthread_mutex_lock(&m->mu);
        m->dirty = true; /* written again on the next step */
        pthread_mutex_unlock(&m->mu);
    }
    return s;
}

/* One step; returns the ms to sleep before the next. */
static int step(kl_fleet_member *m, int *backoff_ms)
{
    char err[512] = "";
    int renew_ms = (int)(m->granted_s * 1000 / 3);
    pthread_mutex_lock(&m->mu);
    int64_t lease = m->st.lease;
    bool dirty = m->dirty;
    pthread_mutex_unlock(&m->mu);
    kl_status s = KL_OK;
    if (lease == 0) {
        int64_t id = 0, granted = 0;
        s = kl_etcd_lease_grant(m->etcd, m->ttl_s, &id, &granted, err,
                                sizeof err);
        if (s == KL_OK) {
            m->granted_s = granted > 0 ? granted : m->ttl_s;
            renew_ms = (int)(m->granted_s * 1000 / 3);
            lease = id;
            pthread_mutex_lock(&m->mu);
            m->st.lease = id;
            m->on_lease = false;
            pthread_mutex_unlock(&m->mu);
            dirty = true;
        }
    } else {
        int64_t ttl = 0;
        s = kl_etcd_lease_keepalive(m->etcd, lease, &ttl, err, sizeof err);
        if (s == KL_E_NOT_FOUND) {
            /* expired while etcd was away, or revoked: the record is
             * gone with it; a new lease and the record again, now */
            pthread_mutex_lock(&m->mu);
            m->st.lease = 0;
            m->on_lease = false;
            m->dirty = true;
            pthread_mutex_unlock(&m->mu);
            set_state(m, KL_FLEET_MEMBER_JOINING,
                      "the lease expired or was revoked");
            *backoff_ms = 0;
            return 0;
        }
    }
    if (s == KL_OK && dirty)
        s = put_record(m, lease, err, sizeof err);
    if (s != KL_OK) {
        pthread_mutex_lock(&m->mu);
        bool was_on = m->on_lease;
        pthread_mutex_unlock(&m->mu);
        if (was_on) /* a record is in etcd, on a lease that may outlive us */
            set_state_why(m, KL_FLEET_MEMBER_UNREACHABLE, err,
                          s == KL_E_CONFIG);
        else if (!m->warned)
            kl_warn("fleet: cannot register %s yet, retrying: %s", m->key, err);
        m->warned = true;
        *backoff_ms = *backoff_ms ? *backoff_ms * 2 : 100;
        if (*backoff_ms > renew_ms)
            *backoff_ms = renew_ms > 100 ? renew_ms : 100;
        return *backoff_ms;
    }
    *backoff_ms = 0;
    m->warned = false;
    pthread_mutex_lock(&m->mu);
    kl_fleet_member_state was = m->st.state;
    if (dirty && !m->on_lease) /* the record is on a new lease */
        m->st.registrations++;
    m->on_lease = true;
    m->st.since_ms = kl_now_ms();
    pthread_mutex_unlock(&m->mu);
    set_state(m, KL_FLEET_MEMBER_REGISTERED,
              was == KL_FLEET_MEMBER_UNREACHABLE ? "etcd answers again" : NULL);
    return renew_ms;
}

static void *member_main(void *arg)
{
    kl_fleet_member *m = arg;
    pthread_setname_np(pthread_self(), "kl-fleet-member");
    int backoff_ms = 0;
    int wait_ms = 0;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts = kl_ns_to_timespec(kl_timespec_to_ns(&ts) +
                               kl_ms_to_ns((uint64_t)wait_ms));
        /* an update wakes the thread; a record left dirty by a failed
         * write waits for the backoff like everything else */
        while (!m->stop && !m->kick && wait_ms > 0)
            if (pthread_cond_timedwait(&m->cv, &m->mu, &ts) != 0)
                break;
        if (m->stop)
            break;
        m->kick = false;
        pthread_mutex_unlock(&m->mu);
        wait_ms = step(m, &backoff_ms);
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

kl_status kl_fleet_member_start(const kl_fleet_member_opts *o,
                                kl_fleet_member **out, char *err, size_t errlen)
{
    *out = NULL;
    const char *prefix = o->prefix ? o->prefix : "/keyless/";
    int ttl = o->ttl_s > 0 ? o->ttl_s : 10;
    if (!o->record || kl_fleet_server_check(o->record, err, errlen) != KL_OK)
        return KL_E_CONFIG;
    if (!prefix[0] || prefix[strlen(prefix) - 1] != '/') {
        kl_errf(err, errlen, "fleet prefix \"%s\" must end with '/'", prefix);
        return KL_E_CONFIG;
    }
    kl_fleet_member *m = calloc(1, sizeof *m);
    if (!m)
        return KL_E_NOMEM;
    m->ttl_s = ttl;
    m->granted_s = ttl;
    if (kl_fleet_key_server(prefix, o->record->name, m->key, sizeof m->key) !=
        KL_OK) {
        kl_errf(err, errlen, "fleet prefix \"%.100s\" is too long", prefix);
        free(m);
        return KL_E_CONFIG;
    }
    /* a call shorter than a renewal period, longer than an election
     * (1-2 s with etcd's defaults; docs/DESIGN.md "etcd client") */
    kl_etcd_opts eo = o->etcd;
    int t = ttl * 1000 / 2;
    eo.timeout_ms = t < 2000 ? 2000 : t > 5000 ? 5000 : t;
    if (kl_etcd_new(&eo, &m->etcd, err, errlen) != KL_OK ||
        copy_record(&m->record, o->record) != KL_OK) {
        kl_etcd_free(m->etcd);
        free(m);
        return KL_E_CONFIG;
    }
    m->dirty = true;
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&m->thread, NULL, member_main, m) != 0) {
        kl_fleet_server_clear(&m->record);
        kl_etcd_free(m->etcd);
        pthread_cond_destroy(&m->cv);
        pthread_mutex_destroy(&m->mu);
        free(m);
        return KL_E_NOMEM;
    }
    *out = m;
    return KL_OK;
}

kl_status kl_fleet_member_update(kl_fleet_member *m,
                                 const kl_fleet_server *record, char *err,
                                 size_t errlen)
{
    KL_GUARD(kl_fleet_server_check(record, err, errlen));
    pthread_mutex_lock(&m->mu);
    kl_status s = KL_OK;
    if (strcmp(record->name, m->record.name) != 0) {
        kl_errf(err, errlen, "fleet: a server's name cannot change (%s)",
                m->record.name);
        s = KL_E_BAD_VALUE;
    } else if ((s = copy_record(&m->record, record)) == KL_OK) {
        m->dirty = true;
        m->kick = true;
        pthread_cond_signal(&m->cv);
    }
    pthread_mutex_unlock(&m->mu);
    return s;
}

void kl_fleet_member_status_get(kl_fleet_member *m, kl_fleet_member_status *s)
{
    pthread_mutex_lock(&m->mu);
    *s = m->st;
    pthread_mutex_unlock(&m->mu);
}

static void finish(kl_fleet_member *m, bool revoke)
{
    pthread_mutex_lock(&m->mu);
    m->stop = true;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->thread, NULL);
    if (revoke && m->st.lease) {
        char err[512] = "";
        kl_status s =
            kl_etcd_lease_revoke(m->etcd, m->st.lease, err, sizeof err);
        if (s == KL_OK || s == KL_E_NOT_FOUND)
            kl_info("fleet: %s left the fleet (lease revoked)", m->key);
        else
            kl_warn("fleet: could not revoke the lease; the record goes "
                    "when it expires in at most %" PRId64 " s: %s",
                    m->granted_s, err);
    }
    kl_etcd_free(m->etcd);
    kl_fleet_server_clear(&m->record);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void kl_fleet_member_stop(kl_fleet_member *m)
{
    if (m)
        finish(m, true);
}

void kl_fleet_member_abandon(kl_fleet_member *m)
{
    if (m)
        finish(m, false);
}
