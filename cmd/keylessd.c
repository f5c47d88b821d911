/* keylessd: the Keyless SSL key server. A thin main: configuration, keys,
 * TLS context, worker pool and shards (src/server), then wait for a signal
 * and drain. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "config/config.h"
#include "core/log.h"
#include "core/sdnotify.h"
#include "crypto/pool.h"
#include "keys/keystore.h"
#include "server/server.h"
#include "tls/tls.h"

#ifndef KEYLESSD_VERSION
#define KEYLESSD_VERSION "0.1.0"
#endif

static kl_keystore *load_keys(const kl_config *cfg)
{
    kl_keystore_opts ko = {
        .allow_group_readable = cfg->allow_group_readable_keys,
        .check_mode = cfg->check,
    };
    kl_keystore *ks = kl_keystore_new(&ko);
    if (!ks) {
        kl_error("out of memory creating the key store");
        return NULL;
    }
    for (size_t i = 0; i < cfg->nstores; i++) {
        const kl_store_cfg *st = &cfg->stores[i];
        kl_status s;
        const char *what;
        switch (st->kind) {
        case KL_STORE_DIR:
            s = kl_keystore_add_dir(ks, st->path);
            what = "directory";
            break;
        case KL_STORE_URI:
            s = kl_keystore_add_uri(ks, st->path);
            what = "PKCS#11 URI";
            break;
        default:
            s = kl_keystore_add_file(ks, st->path);
            what = "file";
            break;
        }
        if (s != KL_OK) {
            /* The key store already named the file (or the URI, PIN
             * redacted) and the reason; this line must not repeat a URI
             * that may carry a PIN. */
            kl_error("cannot load the keys of %s #%zu (%s); not starting", what,
                     i + 1, kl_status_str(s));
            kl_keystore_free(ks);
            return NULL;
        }
    }
    if (kl_keystore_count(ks) == 0)
        kl_warn("no private keys loaded: every key operation will be "
                "answered `key not found`; set private_key_stores or "
                "--private-key-dirs");
    return ks;
}

static int serve(const kl_config *cfg, kl_keystore *ks, kl_tls_ctx *tls)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC);
    if (sfd < 0) {
        kl_error("signalfd: %s", strerror(errno));
        return 1;
    }

    /* HSM keys run on blocking workers, as many as the tokens have
     * sessions (architecture 2: blocking back ends). */
    kl_pool_opts po = {
        .workers = cfg->workers,
        .blocking_workers = (int)kl_keystore_token_sessions(ks),
    };
    kl_pool *pool = kl_pool_new(&po);
    if (!pool) {
        kl_error("cannot start the worker pool");
        close(sfd);
        return 1;
    }
    kl_server_delay *delays = NULL;
    if (cfg->ntest_delays) {
        kl_warn("--test-delay is active: requests on %zu key(s) are delayed "
                "on purpose (test only)",
                cfg->ntest_delays);
        delays = calloc(cfg->ntest_delays, sizeof *delays);
        for (size_t i = 0; delays && i < cfg->ntest_delays; i++) {
            memcpy(delays[i].ski, cfg->test_delays[i].ski, KL_SKI_LEN);
            delays[i].delay_us = (uint64_t)cfg->test_delays[i].ms * 1000u;
        }
    }
    kl_server_opts so = {
        .listen_address = cfg->listen_address,
        .port = (uint16_t)cfg->port,
        .shards = cfg->shards,
        .tls = tls,
        .keys = ks,
        .pool = pool,
        .max_inflight_per_conn = (uint32_t)cfg->max_inflight_per_conn,
        .max_inflight = (uint32_t)cfg->max_inflight,
        .idle_timeout_ns = cfg->idle_timeout_ns,
        .handshake_timeout_ns = cfg->handshake_timeout_ns,
        .drain_timeout_ns = cfg->drain_timeout_ns,
        .max_queue_time_ns = cfg->max_queue_time_ns,
        .test_delays = delays,
        .ntest_delays = delays ? cfg->ntest_delays : 0,
    };
    char err[512];
    kl_server *srv = kl_server_new(&so, err, sizeof err);
    free(delays);
    if (!srv) {
        kl_error("%s", err);
        kl_pool_free(pool);
        close(sfd);
        return 1;
    }
    /* The sockets listen from kl_server_new on; saying so before the shard
     * threads exist also keeps this line first in the log. */
    kl_info("listening on %s:%u with %zu keys (%d shards)", cfg->listen_address,
            kl_server_port(srv), kl_keystore_count(ks), kl_server_shards(srv));
    if (kl_server_start(srv) != KL_OK) {
        kl_error("cannot start the shard threads");
        kl_server_shutdown(srv);
        kl_server_wait(srv);
        kl_pool_free(pool);
        kl_server_free(srv);
        close(sfd);
        return 1;
    }
    /* systemd Type=notify: keys are loaded and the port listens. */
    if (kl_sd_notify("READY=1") != KL_OK)
        kl_warn("cannot tell systemd that keylessd is ready (NOTIFY_SOCKET "
                "%s): %s",
                getenv("NOTIFY_SOCKET"), strerror(errno));

    for (;;) {
        struct signalfd_siginfo si;
        ssize_t n = read(sfd, &si, sizeof si);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != (ssize_t)sizeof si) {
            kl_error("reading signals failed: %s; shutting down",
                     strerror(errno));
            break;
        }
        if (si.ssi_signo == SIGHUP) {
            kl_warn("SIGHUP: reloading is not supported yet; ignored");
            continue;
        }
        kl_info("%s: stopping: no new connections, finishing requests in "
                "flight",
                strsignal((int)si.ssi_signo));
        break;
    }
    close(sfd);
    if (kl_sd_notify("STOPPING=1") != KL_OK)
        kl_debug("cannot tell systemd that keylessd is stopping");
    kl_server_shutdown(srv);
    kl_server_wait(srv);
    /* The pool goes before the server: its last callbacks still hand jobs
     * to the shards' completion queues. */
    kl_pool_free(pool);
    kl_server_stats st;
    kl_server_get_stats(srv, &st);
    kl_info("stopped: %llu connections, %llu requests, %llu errors, %llu "
            "shed, %llu refused handshakes",
            (unsigned long long)st.accepted, (unsigned long long)st.requests,
            (unsigned long long)st.errors, (unsigned long long)st.shed,
            (unsigned long long)st.handshake_failed);
    kl_server_free(srv);
    return 0;
}

int main(int argc, char **argv)
{
    kl_log_set_prefix("keylessd");
    kl_config *cfg = kl_config_new();
    if (!cfg) {
        fprintf(stderr, "keylessd: out of memory\n");
        return 1;
    }
    char err[1024];
    if (kl_config_load(cfg, argc, argv, NULL, err, sizeof err) != KL_OK) {
        fprintf(stderr, "keylessd: %s\n", err);
        kl_config_free(cfg);
        return 1;
    }
    if (cfg->help) {
        kl_config_usage(stdout, "keylessd");
        kl_config_free(cfg);
        return 0;
    }
    if (cfg->version) {
        printf("keylessd %s (protocol 1.0)\n", KEYLESSD_VERSION);
        kl_config_free(cfg);
        return 0;
    }
    kl_log_set_level(cfg->loglevel);
    for (size_t i = 0; i < cfg->nwarnings; i++)
        kl_warn("%s", cfg->warnings[i]);
    if (cfg->loaded_file)
        kl_debug("configuration file %s", cfg->loaded_file);

    /* Signals are taken through a signalfd in this thread; every thread
     * started from here on inherits the blocked mask. A write to a closed
     * socket must be an error, not a SIGPIPE. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    kl_tls_ctx *tls = NULL;
    kl_keystore *ks = load_keys(cfg);
    if (!ks)
        goto out;
    kl_tls_opts to = {
        .cert_file = cfg->auth_cert,
        .key_file = cfg->auth_key,
        .ca_file = cfg->cloudflare_ca_cert,
        .disable_tls13 = !cfg->tls13,
    };
    tls = kl_tls_server_ctx_new(&to, err, sizeof err);
    if (!tls) {
        kl_error("TLS setup failed: %s", err);
        goto out;
    }
    if (cfg->check) {
        kl_info("configuration OK: %zu keys, auth_cert %s, CA %s",
                kl_keystore_count(ks), cfg->auth_cert, cfg->cloudflare_ca_cert);
        rc = 0;
        goto out;
    }
    rc = serve(cfg, ks, tls);
out:
    kl_tls_ctx_free(tls);
    kl_keystore_free(ks);
    kl_config_free(cfg);
    return rc;
}
