/* SPDX-License-Identifier: Apache-2.0 */
/* Serving: the worker pool and the shards, the pid file, systemd's
 * notifications, and the main thread's loop over signals and key directory
 * changes. The main thread never serves: it sleeps in poll() and does the
 * slow part of a reload (reading files, decoding keys) while the shards go
 * on answering with what they have. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "core/log.h"
#include "core/sched.h"
#include "core/sdnotify.h"
#include "core/time.h"
#include "crypto/pool.h"
#include "engine/acl.h"
#include "daemon/daemon_ext.h"
#include "daemon/daemon_reload.h"
#include "engine/server.h"

static bool write_pid_file(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        kl_error("pid_file %s: cannot create: %s; fix the path or its "
                 "directory's permissions, or unset pid_file",
                 path, strerror(errno));
        return false;
    }
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    bool ok = write(fd, buf, (size_t)n) == n;
    close(fd);
    if (!ok)
        kl_error("pid_file %s: cannot write: %s", path, strerror(errno));
    return ok;
}

static kl_server *start_server(const kl_config *cfg, kl_keystore *ks,
                               kl_tls_ctx *tls, kl_pool *pool,
                               const kl_daemon_ext *x)
{
    /* access lists, checked before anything listens */
    kl_acl *acl = NULL;
    if (cfg->access_file && *cfg->access_file) {
        char aerr[512];
        acl = kl_acl_load(cfg->access_file, aerr, sizeof aerr);
        if (!acl) {
            kl_error("access_file: %s; not starting", aerr);
            return NULL;
        }
        kl_info("access lists: %zu rule(s) from %s", kl_acl_count(acl),
                cfg->access_file);
    }
    kl_server_opts so = kl_settings_server(kl_settings_of_c(cfg));
    so.tls = tls;
    so.keys = ks;
    so.pool = pool;
    so.acl = acl;
    so.router = x->router;
    so.metrics = x->metrics;
    so.tracer = x->tracer;
    char err[512];
    kl_server *srv = kl_server_new(&so, err, sizeof err);
    if (!srv) {
        kl_error("%s", err);
        kl_acl_free(acl);
    }
    return srv;
}

/* The main thread's loop: signals, and key directory changes settled for
 * watch_delay. Returns when asked to stop. */
static void main_loop(kl_reloader *r, int sfd)
{
    uint64_t due = 0; /* a directory change waits until then; 0: none */
    for (;;) {
        struct pollfd pf[2] = {
            {.fd = sfd, .events = POLLIN},
            {.fd = kl_reloader_watch_fd(r), .events = POLLIN}};
        int timeout = -1;
        if (due) {
            uint64_t now = kl_now_ns();
            timeout = now >= due ? 0 : (int)((due - now) / KL_NS_PER_MS) + 1;
        }
        int n = poll(pf, pf[1].fd >= 0 ? 2 : 1, timeout);
        if (n < 0 && errno != EINTR) {
            kl_error("poll: %s; shutting down", strerror(errno));
            return;
        }
        if (n > 0 && (pf[1].revents & POLLIN) && kl_reloader_changed(r)) {
            /* quiet period: a copy of many files causes one reload */
            due = kl_now_ns() + kl_reloader_watch_delay(r);
        }
        if (due && kl_now_ns() >= due) {
            due = 0;
            kl_reloader_run(r, "a key directory changed");
        }
        if (n <= 0 || !(pf[0].revents & POLLIN))
            continue;
        struct signalfd_siginfo si;
        ssize_t got = read(sfd, &si, sizeof si);
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (got != (ssize_t)sizeof si) {
            kl_error("reading signals failed: %s; shutting down",
                     strerror(errno));
            return;
        }
        if (si.ssi_signo == SIGHUP) {
            due = 0; /* this reload sees the directory change too */
            kl_reloader_run(r, "SIGHUP");
            continue;
        }
        kl_info("%s: stopping: no new connections, finishing requests in "
                "flight",
                strsignal((int)si.ssi_signo));
        return;
    }
}

int kl_daemon_serve(kl_config *cfg, int argc, char **argv, kl_keystore *ks,
                    kl_tls_ctx *tls)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    /* before any serving thread starts: they apply it themselves */
    kl_sched_configure(cfg->realtime_priority);
    kl_pool_opts po = kl_settings_of(cfg)->pool;
    /* HSM keys run on blocking workers, as many as the tokens have
     * sessions (blocking back ends). */
    po.blocking_workers = (int)kl_keystore_token_sessions(ks);
    kl_daemon_ext x;
    bool ext_ok = kl_ext_start(&x, cfg);
    kl_pool *pool = sfd >= 0 && ext_ok ? kl_pool_new(&po) : NULL;
    kl_server *srv = pool ? start_server(cfg, ks, tls, pool, &x) : NULL;
    if (!srv) {
        kl_ext_free(&x);
        if (sfd < 0)
            kl_error("signalfd: %s", strerror(errno));
        else if (!pool && ext_ok)
            kl_error("cannot start the worker pool");
        kl_pool_free(pool);
        if (sfd >= 0)
            close(sfd);
        kl_keystore_free(ks);
        kl_tls_ctx_free(tls);
        kl_config_free(cfg);
        return 1;
    }
    /* The sockets listen from kl_server_new on; saying so before the shard
     * threads exist also keeps this line first in the log. */
    size_t nkeys = kl_keystore_count(ks);
    kl_info("listening on %s:%u with %zu keys (%d shards)",
            kl_settings_of(cfg)->server.listen_address, kl_server_port(srv),
            nkeys, kl_server_shards(srv));
    char *pid_file =
        cfg->pid_file && *cfg->pid_file ? strdup(cfg->pid_file) : NULL;
    int rc = 1;
    bool drain = false; /* SIGTERM after serving: the fleet drain delay */
    kl_reloader *r = NULL;
    if (pid_file && !write_pid_file(pid_file)) {
        free(pid_file);
        pid_file = NULL;
        goto stop;
    }
    if (kl_server_start(srv) != KL_OK) {
        kl_error("cannot start the shard threads");
        goto stop;
    }
    atomic_store(&x.srv, srv); /* the sealed-key metric at scrape */
    kl_ext_serve(&x, cfg, pool, nkeys);
    kl_ext_sealed_keys(&x, ks); /* their remotes, before a request asks */
    r = kl_reloader_new(srv, cfg, argc, argv, ks);
    cfg = NULL; /* the reloader owns it */
    if (!r) {
        kl_error("out of memory");
        goto stop;
    }
    kl_reloader_set_ext(r, &x);
    /* systemd Type=notify: keys are loaded and the port listens. */
    if (kl_sd_notify("READY=1") != KL_OK)
        kl_warn("cannot tell systemd that keylessd is ready (NOTIFY_SOCKET "
                "%s): %s",
                getenv("NOTIFY_SOCKET"), strerror(errno));
    main_loop(r, sfd);
    rc = 0;
    drain = true;
stop:
    if (kl_sd_notify("STOPPING=1") != KL_OK)
        kl_debug("cannot tell systemd that keylessd is stopping");
    kl_ext_draining(&x);
    if (drain)
        kl_ext_drain_wait(&x, sfd);
    close(sfd);
    kl_server_shutdown(srv);
    kl_server_wait(srv);
    /* The router and the pool go before the server: their last callbacks
     * still hand jobs to the shards' completion queues. */
    kl_ext_stop(&x);
    kl_pool_free(pool);
    kl_server_stats st;
    kl_server_get_stats(srv, &st);
    kl_info("stopped: %llu connections, %llu requests, %llu errors, %llu "
            "shed, %llu failed handshakes, %llu connections refused at "
            "accept (limits)",
            (unsigned long long)st.accepted, (unsigned long long)st.requests,
            (unsigned long long)st.errors, (unsigned long long)st.shed,
            (unsigned long long)st.handshake_failed,
            (unsigned long long)(st.conn_refused + st.handshake_refused));
    kl_server_free(srv);
    kl_ext_free(&x);
    kl_reloader_free(r);
    kl_config_free(cfg);
    if (pid_file) {
        unlink(pid_file);
        free(pid_file);
    }
    return rc;
}
