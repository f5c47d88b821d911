/* SPDX-License-Identifier: Apache-2.0 */
/* The directory's thread (directory.h, docs/FLEET.md "Routing from the
 * directory"): snapshot, watch, debounce, hand over; liveness and the
 * sync clock. The state it keeps is directory_state.c's. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/time.h"
#include "fleet/directory_int.h"

#define BACKOFF_MAX_MS 2000

struct kl_fleet_dir {
    char prefix[256], dirkey[300];
    int debounce_ms, sync_check_ms;
    kl_fleet_view_fn fn;
    void *arg;
    bool records_only; /* key sets are skipped (directory.h) */
    kl_etcd *etcd;
    kl_etcd_watch *w;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;              /* under mu */
    kl_fleet_dir_status st; /* under mu */
    /* the thread's own */
    kl_fdir_state s;
    bool need_snapshot;
    bool dirty;
    uint64_t dirty_ms; /* when the first undelivered change came */
    bool delivered_nonempty, warned_empty;
    bool in_sync;
    uint64_t sync_ms; /* under mu: when last in sync */
    uint64_t check_ms, start_ms;
    int backoff_ms;
    kl_status step_status; /* the last event callback's failure */
};

/* A key set's meta, which a records-only reader leaves alone (its SKIs
 * are never read either: they are read only for a meta taken). */
static bool skipped(const kl_fleet_dir *d, const uint8_t *key, size_t len)
{
    char name[KL_FLEET_NAME_MAX + 1];
    return d->records_only &&
           kl_fleet_key_parse(d->prefix, key, len, name) == KL_FLEET_KEY_SET;
}

/* Sleeps up to ms unless stopped; true when stopping. */
static bool nap(kl_fleet_dir *d, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts = kl_ns_to_timespec(kl_timespec_to_ns(&ts) + kl_ms_to_ns((uint64_t)ms));
    pthread_mutex_lock(&d->mu);
    while (!d->stop)
        if (pthread_cond_timedwait(&d->cv, &d->mu, &ts) != 0)
            break;
    bool stop = d->stop;
    pthread_mutex_unlock(&d->mu);
    return stop;
}

static void set_sync(kl_fleet_dir *d, bool ok, const char *why)
{
    uint64_t now = kl_now_ms();
    if (ok != d->in_sync) {
        if (ok)
            kl_info("fleet: directory in sync again (revision %" PRId64
                    ", %zu servers, %zu key sets)",
                    d->st.revision, d->s.nsrv, d->s.nsets);
        else
            kl_warn("fleet: directory out of sync, routing with the last "
                    "table; retrying: %s",
                    why ? why : "");
        d->in_sync = ok;
    }
    pthread_mutex_lock(&d->mu);
    if (ok)
        d->sync_ms = now;
    d->st.in_sync = ok;
    d->st.sync_age_ms = ok ? 0 : now - (d->sync_ms ? d->sync_ms : d->start_ms);
    d->st.nservers = d->s.nsrv;
    d->st.nsets = d->s.nsets;
    pthread_mutex_unlock(&d->mu);
}

static void fail(kl_fleet_dir *d, const char *why)
{
    set_sync(d, false, why);
    d->backoff_ms = d->backoff_ms ? d->backoff_ms * 2 : 100;
    if (d->backoff_ms > BACKOFF_MAX_MS)
        d->backoff_ms = BACKOFF_MAX_MS;
}

/* Reads dir/ as one snapshot (pages at the first page's revision) into a
 * new state; the old one stays until the new one is whole. */
static kl_status snapshot(kl_fleet_dir *d, int64_t *rev, char *err,
                          size_t errlen)
{
    kl_fdir_state ns = {0};
    kl_etcd_page pg = {0};
    uint8_t *after = NULL;
    size_t after_len = 0;
    int64_t at = 0;
    kl_status st;
    bool changed = false;
    for (;;) {
        st = kl_etcd_range(d->etcd, d->dirkey, strlen(d->dirkey), after,
                           after_len, 500, at, &pg, err, errlen);
        free(after);
        after = NULL;
        if (st != KL_OK)
            break;
        if (at == 0)
            at = pg.revision;
        for (size_t i = 0; i < pg.n && st == KL_OK; i++)
            if (!skipped(d, pg.kvs[i].key, pg.kvs[i].key_len))
                st = kl_fdir_apply(&ns, &d->s, d->etcd, d->prefix,
                                   pg.kvs[i].key, pg.kvs[i].key_len,
                                   pg.kvs[i].value, pg.kvs[i].value_len, false,
                                   pg.kvs[i].mod_revision, &changed);
        bool more = st == KL_OK && pg.more && pg.n > 0;
        if (more) {
            after_len = pg.kvs[pg.n - 1].key_len;
            after = malloc(after_len);
            st = after ? KL_OK : KL_E_NOMEM;
            if (after)
                memcpy(after, pg.kvs[pg.n - 1].key, after_len);
        }
        kl_etcd_page_clear(&pg);
        if (st != KL_OK || !more)
            break;
    }
    if (st != KL_OK) {
        kl_fdir_state_clear(&ns);
        return st;
    }
    kl_fdir_state_clear(&d->s);
    d->s = ns;
    *rev = at;
    return KL_OK;
}

static void on_event(void *arg, const kl_etcd_event *ev)
{
    kl_fleet_dir *d = arg;
    if (ev->type == KL_ETCD_COMPACTED) {
        kl_warn("fleet: directory: the watch's revision was compacted (at "
                "%" PRId64 "); reading the whole directory again",
                ev->mod_revision);
        d->need_snapshot = true;
        return;
    }
    if (d->need_snapshot || d->step_status != KL_OK)
        return; /* the snapshot (or the re-read) will see it */
    if (skipped(d, ev->key, ev->key_len))
        return;
    bool changed = false;
    kl_status st = kl_fdir_apply(
        &d->s, NULL, d->etcd, d->prefix, ev->key, ev->key_len, ev->value,
        ev->value_len, ev->type == KL_ETCD_DELETE, ev->mod_revision, &changed);
    if (st != KL_OK) {
        /* a set's chunks could not be read: read everything again rather
         * than go on with a directory missing that change */
        d->step_status = st;
        d->need_snapshot = true;
        return;
    }
    pthread_mutex_lock(&d->mu);
    d->st.revision = ev->mod_revision;
    pthread_mutex_unlock(&d->mu);
    if (changed && !d->dirty) {
        d->dirty = true;
        d->dirty_ms = kl_now_ms();
    }
}

static void deliver(kl_fleet_dir *d)
{
    d->dirty = false;
    if (d->s.nsrv == 0 && d->delivered_nonempty) {
        if (!d->warned_empty)
            kl_warn("fleet: directory lists no server; keeping the last "
                    "table (an empty answer never replaces a good one)");
        d->warned_empty = true;
        return;
    }
    d->warned_empty = false;
    kl_fleet_set *sets = calloc(d->s.nsets ? d->s.nsets : 1, sizeof *sets);
    if (!sets) {
        d->dirty = true; /* again at the next turn */
        return;
    }
    for (size_t i = 0; i < d->s.nsets; i++) {
        const kl_fdir_set *fs = &d->s.sets[i];
        memcpy(sets[i].name, fs->name, sizeof sets[i].name);
        sets[i].meta = fs->meta; /* shallow: the view is read-only */
        sets[i].skis = fs->skis;
        sets[i].mod_revision = fs->mod_revision;
    }
    pthread_mutex_lock(&d->mu);
    kl_fleet_view v = {.servers = d->s.srv,
                       .nservers = d->s.nsrv,
                       .sets = sets,
                       .nsets = d->s.nsets,
                       .regions = d->s.regions,
                       .revision = d->st.revision};
    d->st.views++;
    d->st.nservers = d->s.nsrv;
    d->st.nsets = d->s.nsets;
    pthread_mutex_unlock(&d->mu);
    d->fn(d->arg, &v);
    d->delivered_nonempty |= d->s.nsrv > 0;
    free(sets);
}

/* A cheap read: etcd answers. The watch alone cannot tell a frozen member
 * from a quiet directory. */
static void liveness(kl_fleet_dir *d)
{
    char err[512] = "";
    kl_etcd_page pg = {0};
    kl_status st = kl_etcd_range(d->etcd, d->dirkey, strlen(d->dirkey), NULL, 0,
                                 1, 0, &pg, err, sizeof err);
    int64_t rev = pg.revision;
    kl_etcd_page_clear(&pg);
    int64_t seen = kl_etcd_watch_next_revision(d->w) - 1;
    if (st == KL_OK && rev < seen) {
        /* the store went back (etcd restored or replaced): a watch from
         * our revision would wait for revisions it may never see */
        kl_warn("fleet: directory: etcd's revision %" PRId64 " is below "
                "the %" PRId64 " already seen (etcd restored or replaced?); "
                "reading the whole directory again",
                rev, seen);
        d->need_snapshot = true;
        return;
    }
    if (st == KL_OK && kl_etcd_watch_connected(d->w))
        set_sync(d, true, NULL);
    else if (st != KL_OK) {
        set_sync(d, false, err);
        /* the watch may sit on the member that stopped answering */
        kl_etcd_watch_restart(d->w, kl_etcd_watch_next_revision(d->w));
    }
}

static void run_snapshot(kl_fleet_dir *d)
{
    char err[512] = "";
    int64_t rev = 0;
    kl_status st = snapshot(d, &rev, err, sizeof err);
    if (st != KL_OK) {
        fail(d, err);
        return;
    }
    d->need_snapshot = false;
    d->backoff_ms = 0;
    kl_etcd_watch_restart(d->w, rev + 1);
    pthread_mutex_lock(&d->mu);
    d->st.revision = rev;
    d->st.snapshots++;
    pthread_mutex_unlock(&d->mu);
    set_sync(d, true, NULL);
    d->check_ms = kl_now_ms();
    /* the first view, and one after a compaction, go at once */
    d->dirty = true;
    d->dirty_ms = 0;
}

static void *dir_main(void *arg)
{
    kl_fleet_dir *d = arg;
    pthread_setname_np(pthread_self(), "kl-fleet-dir");
    for (;;) {
        pthread_mutex_lock(&d->mu);
        bool stop = d->stop;
        pthread_mutex_unlock(&d->mu);
        if (stop)
            break;
        if (d->need_snapshot) {
            run_snapshot(d);
            if (d->need_snapshot && nap(d, d->backoff_ms))
                break;
            continue;
        }
        char err[512] = "";
        d->step_status = KL_OK;
        kl_status st =
            kl_etcd_watch_step(d->w, 50, on_event, d, err, sizeof err);
        if (st != KL_OK && !d->need_snapshot) {
            fail(d, err);
            if (nap(d, d->backoff_ms))
                break;
            continue;
        }
        d->backoff_ms = 0;
        uint64_t now = kl_now_ms();
        if (now - d->check_ms >= (uint64_t)d->sync_check_ms) {
            d->check_ms = now;
            liveness(d);
        } else if (!d->in_sync && kl_etcd_watch_connected(d->w))
            liveness(d); /* back: say so at once */
        if (d->dirty && !d->need_snapshot &&
            now - d->dirty_ms >= (uint64_t)d->debounce_ms)
            deliver(d);
        if (!d->in_sync)
            set_sync(d, false, NULL); /* the age grows */
    }
    return NULL;
}

kl_status kl_fleet_dir_start(const kl_fleet_dir_opts *o, kl_fleet_dir **out,
                             char *err, size_t errlen)
{
    *out = NULL;
    const char *prefix = o->prefix ? o->prefix : "/keyless/";
    size_t pl = strlen(prefix);
    if (!pl || prefix[pl - 1] != '/' || pl > 200) {
        kl_errf(err, errlen,
                "fleet prefix \"%.200s\" must end with '/' and be at most "
                "200 bytes",
                prefix);
        return KL_E_CONFIG;
    }
    if (!o->fn) {
        kl_errf(err, errlen, "fleet directory: no callback");
        return KL_E_CONFIG;
    }
    kl_fleet_dir *d = calloc(1, sizeof *d);
    KL_ENSURE(d != NULL, KL_E_NOMEM);
    snprintf(d->prefix, sizeof d->prefix, "%s", prefix);
    if (kl_fleet_key_dir(prefix, d->dirkey, sizeof d->dirkey) != KL_OK) {
        free(d); /* cannot happen: the prefix's length is checked above */
        return KL_E_CONFIG;
    }
    d->debounce_ms = o->debounce_ms > 0 ? o->debounce_ms : 100;
    d->sync_check_ms = o->sync_check_ms > 0 ? o->sync_check_ms : 2000;
    d->fn = o->fn;
    d->arg = o->arg;
    d->records_only = o->records_only;
    d->need_snapshot = true;
    d->start_ms = kl_now_ms();
    /* reads: longer than an election, short enough to notice a frozen
     * member within a few seconds */
    kl_etcd_opts eo = o->etcd;
    if (eo.timeout_ms <= 0)
        eo.timeout_ms = 3000;
    if (kl_etcd_new(&eo, &d->etcd, err, errlen) != KL_OK ||
        kl_etcd_watch_new(d->etcd, d->dirkey, strlen(d->dirkey), 0, &d->w, err,
                          errlen) != KL_OK) {
        kl_etcd_free(d->etcd);
        free(d);
        return KL_E_CONFIG;
    }
    pthread_mutex_init(&d->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&d->thread, NULL, dir_main, d) != 0) {
        kl_etcd_watch_free(d->w);
        kl_etcd_free(d->etcd);
        pthread_cond_destroy(&d->cv);
        pthread_mutex_destroy(&d->mu);
        free(d);
        return KL_E_NOMEM;
    }
    *out = d;
    return KL_OK;
}

void kl_fleet_dir_stop(kl_fleet_dir *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    kl_etcd_watch_free(d->w);
    kl_etcd_free(d->etcd);
    kl_fdir_state_clear(&d->s);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

void kl_fleet_dir_status_get(kl_fleet_dir *d, kl_fleet_dir_status *s)
{
    pthread_mutex_lock(&d->mu);
    *s = d->st;
    if (!s->in_sync) /* the age as of now, not as of the last turn */
        s->sync_age_ms = kl_now_ms() - (d->sync_ms ? d->sync_ms : d->start_ms);
    pthread_mutex_unlock(&d->mu);
}
