/* SPDX-License-Identifier: Apache-2.0 */
/* Reload (docs/OPERATIONS.md "Signals and reload"): everything is built beside
 * what is serving, then swapped in at once (engine/res.c); a failure keeps what
 * is serving. The rules:
 *  - a key file that fails is reported and skipped, the others are served;
 *  - a new store that came out empty with errors (a directory that became
 *    unreadable) does not replace a store that had keys;
 *  - certificate files that fail the checks keep the old certificate and
 *    CA: the server never stops being able to accept connections;
 *  - certificate files that load to what is serving keep the serving TLS
 *    context, and so its sessions (tls_unchanged);
 *  - options that cannot change while running are reported, not applied. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/sdnotify.h"
#include "daemon/daemon_ext.h"
#include "daemon/daemon_reload.h"
#include "engine/internal.h"
#include "daemon/watch.h"

struct kl_reloader {
    kl_server *srv;
    kl_config *cfg; /* the configuration in effect */
    int argc;
    char **argv;
    const kl_keystore *keys; /* serving (owned by the server) */
    kl_watcher *watch;
    unsigned count;
    kl_daemon_ext *ext; /* router and metrics; NULL in tests */
};

kl_reloader *kl_reloader_new(kl_server *srv, kl_config *cfg, int argc,
                             char **argv, const kl_keystore *keys)
{
    kl_reloader *r = calloc(1, sizeof *r);
    if (!r) {
        kl_config_free(cfg);
        return NULL;
    }
    *r = (kl_reloader){
        .srv = srv, .cfg = cfg, .argc = argc, .argv = argv, .keys = keys};
    r->watch = kl_watcher_new();
    kl_watcher_set(r->watch, cfg);
    if (kl_watcher_count(r->watch) > 0)
        kl_debug("watching %d key director%s for changes",
                 kl_watcher_count(r->watch),
                 kl_watcher_count(r->watch) == 1 ? "y" : "ies");
    return r;
}

void kl_reloader_free(kl_reloader *r)
{
    if (!r)
        return;
    kl_watcher_free(r->watch);
    kl_config_free(r->cfg);
    free(r);
}

void kl_reloader_set_ext(kl_reloader *r, kl_daemon_ext *x)
{
    r->ext = x;
}

int kl_reloader_watch_fd(const kl_reloader *r)
{
    return r->watch ? kl_watcher_fd(r->watch) : -1;
}

bool kl_reloader_changed(kl_reloader *r)
{
    return r->watch && kl_watcher_drain(r->watch);
}

uint64_t kl_reloader_watch_delay(const kl_reloader *r)
{
    return r->cfg->watch_delay_ns;
}

/* Options the running server cannot take up: said once per reload each. */
static void report_restart_only(const kl_config *old, const kl_config *now)
{
    const kl_opt_table *t = old->table;
    for (size_t i = 0; i < t->count; i++) {
        const kl_option *o = &t->rows[i];
        if ((o->flags & (KL_OPTF_RELOADABLE | KL_OPTF_NO_YAML)) ||
            o->type == KL_OPT_MODE)
            continue;
        char a[512], b[512];
        kl_config_value_text(old, o, a, sizeof a);
        kl_config_value_text(now, o, b, sizeof b);
        if (strcmp(a, b) != 0)
            kl_warn("reload: %s changed from \"%s\" to \"%s\", which takes a "
                    "restart; still using \"%s\"",
                    o->name, a, b, a);
    }
}

/* the access lists, parsed beside those in effect and swapped
 * in at once (acl.h); a broken file keeps them. Whether there are lists at
 * all is fixed at start: the server holds them from then on, and dropping
 * them by a reload would open every key to every client. false: a problem
 * was reported. */
static bool reload_acl(kl_reloader *r, const kl_config *cfg)
{
    kl_acl *acl = r->srv->o.acl;
    const char *path = cfg->access_file;
    bool want = path && *path;
    if (!acl) {
        if (want)
            kl_warn("reload: access_file is now set (%s), which takes a "
                    "restart; until then every authenticated client may use "
                    "every key",
                    path);
        return true;
    }
    if (!want) {
        kl_warn("reload: access_file is no longer set, which takes a "
                "restart; still enforcing the %zu access rule(s) in effect",
                kl_acl_count(acl));
        return true;
    }
    char err[512];
    kl_acl *fresh = kl_acl_load(path, err, sizeof err);
    if (!fresh) {
        kl_error("reload: access_file: %s; keeping the %zu access rule(s) "
                 "in effect (fix the file and reload again)",
                 err, kl_acl_count(acl));
        return false;
    }
    size_t n = kl_acl_count(fresh);
    kl_acl_replace(acl, fresh);
    kl_info("reload: access lists: %zu rule(s) from %s", n, path);
    return true;
}

/* Whether the TLS context just built equals the one serving (the same
 * certificate chain, CA and options as loaded: kl_tls_ctx_same). Then the
 * serving context stays, and with it its session cache: a reload for keys
 * or access lists, or a SIGHUP with the same files, does not make every
 * edge pay a full handshake (docs/DESIGN.md "Limits and backpressure",
 * resumption across a reload). A changed CA or
 * identity gets a new context, whose empty cache resumes no session made
 * under the old one. Only this (main) thread swaps srv->tls_res; the lock
 * is for the shards that read it. */
static bool tls_unchanged(kl_server *srv, const kl_tls_ctx *fresh)
{
    pthread_mutex_lock(&srv->res_mu);
    bool same = srv->tls_res && kl_tls_ctx_same(srv->tls_res->obj, fresh);
    pthread_mutex_unlock(&srv->res_mu);
    return same;
}

typedef struct diff {
    const kl_keystore *other;
    size_t missing;
} diff;

static void count_missing(void *arg, const kl_key *k)
{
    diff *d = arg;
    if (!kl_keystore_find(d->other, kl_key_ski(k)))
        d->missing++;
}

/* Keys in a and not in b. */
static size_t keys_not_in(const kl_keystore *a, const kl_keystore *b)
{
    diff d = {.other = b};
    kl_keystore_foreach(a, count_missing, &d);
    return d.missing;
}

void kl_reloader_run(kl_reloader *r, const char *why)
{
    r->count++;
    if (kl_sd_notify_reloading() != KL_OK)
        kl_debug("cannot tell systemd that keylessd is reloading");
    kl_info("reloading (%s): keys, auth_cert, CA and access lists", why);

    /* The configuration, re-read as at startup. A broken file keeps the
     * running configuration; keys and certificates are still re-read. */
    kl_config *cfg = kl_daemon_config_new();
    char err[1024];
    bool ok = true; /* for keylessd_last_reload_successful */
    if (!cfg ||
        kl_config_load(cfg, r->argc, r->argv, NULL, err, sizeof err) != KL_OK) {
        kl_error("reload: %s; keeping the running configuration",
                 cfg ? err : "out of memory");
        kl_config_free(cfg);
        cfg = NULL;
        ok = false;
    } else {
        for (size_t i = 0; i < cfg->nwarnings; i++)
            kl_warn("reload: %s", cfg->warnings[i]);
        report_restart_only(r->cfg, cfg);
        kl_log_set_level(cfg->loglevel);
        kl_log_set_format(kl_log_format_parse(cfg->log_format));
        kl_config_free(r->cfg);
        r->cfg = cfg;
    }
    cfg = r->cfg;

    kl_problems p = {0};
    kl_keystore *ks = kl_daemon_reload_keys(cfg, &p);
    size_t before = kl_keystore_count(r->keys);
    if (ks && kl_keystore_count(ks) == 0 && before > 0 && p.errors > 0) {
        kl_error("reload: no key could be loaded (%zu problem(s) above); "
                 "still serving the %zu keys loaded before",
                 p.errors, before);
        kl_keystore_free(ks);
        ks = NULL;
    }
    size_t added = 0, removed = 0;
    if (ks) {
        added = keys_not_in(ks, r->keys);
        removed = keys_not_in(r->keys, ks);
    }
    size_t key_errors = p.errors;
    kl_tls_ctx *tls = kl_daemon_load_tls(cfg, &p);
    if (!tls)
        kl_error("reload: keeping the previous auth_cert, auth_key and CA "
                 "(problems above)");
    bool same_tls = tls && tls_unchanged(r->srv, tls);
    ok = ok && tls && p.errors == 0;
    if (same_tls) {
        kl_tls_ctx_free(tls);
        tls = NULL;
    }
    ok = reload_acl(r, cfg) && ok;
    if (kl_server_swap(r->srv, ks, tls) != KL_OK) {
        kl_error("reload: out of memory; nothing changed");
        kl_keystore_free(ks);
        kl_tls_ctx_free(tls);
        ok = false;
    } else {
        if (ks) {
            r->keys = ks;
            /* the blocking workers follow the tokens' sessions */
            kl_pool_set_blocking_workers(r->srv->o.pool,
                                         (int)kl_keystore_token_sessions(ks));
        }
        kl_info("reloaded: %zu keys (%zu added, %zu removed, %zu failed), "
                "%s; generation %llu",
                kl_keystore_count(r->keys), added, removed, key_errors,
                tls        ? "new certificate"
                : same_tls ? "unchanged certificate and CA (TLS sessions kept)"
                           : "previous certificate",
                (unsigned long long)kl_server_generation(r->srv));
    }
    kl_watcher_set(r->watch, cfg);
    if (r->ext) {
        /* the routing table is re-read too (it is also polled) */
        ok = kl_ext_reload_router(r->ext) && ok;
        kl_ext_reloaded(r->ext, cfg, ok, kl_keystore_count(r->keys));
        kl_ext_sealed_keys(r->ext, r->keys);
    }
    if (kl_sd_notify("READY=1") != KL_OK)
        kl_debug("cannot tell systemd that the reload is done");
}
