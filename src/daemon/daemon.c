/* SPDX-License-Identifier: Apache-2.0 */
/* keylessd's main: the configuration, then one mode - help, version, the
 * option reference, the effective configuration, --check,
 * --keystore-debug, --config-only, --manual-activation - or serving. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"
#include "activation/activate.h"
#include "daemon/daemon.h"
#include "engine/limits.h"

/* Modes that print and exit before anything is loaded. */
static bool print_mode(const kl_config *cfg, const char *version, int *rc)
{
    *rc = 0;
    if (cfg->help)
        kl_config_usage(&kl_daemon_options, stdout, "keylessd");
    else if (cfg->help_markdown)
        kl_config_usage_markdown(&kl_daemon_options, stdout);
    else if (cfg->help_man)
        kl_config_usage_man(&kl_daemon_options, stdout);
    else if (cfg->version)
        printf("keylessd %s (protocol 1.0)\n", version);
    else if (cfg->output_config)
        kl_config_write_yaml(cfg, stdout);
    else
        return false;
    return true;
}

/* --config-only: as the reference, enrols when needed (with keylessd's
 * renewal policy, activation/activate.h), then checks the identity and exits
 * without serving. */
static int config_only(const kl_config *cfg)
{
    if (kl_activate_startup(cfg) != 0)
        return 1;
    kl_problems p = {0};
    kl_tls_ctx *tls = kl_daemon_load_tls(cfg, &p);
    kl_tls_ctx_free(tls);
    if (!tls) {
        kl_error("--config-only: the key server's identity is not ready "
                 "(see above): put auth_cert and auth_key in place, or set "
                 "hostname and origin_ca_api_key for activation");
        return 1;
    }
    kl_info("already configured: auth_cert %s and auth_key %s are usable; "
            "exiting",
            cfg->auth_cert, cfg->auth_key);
    return 0;
}

int kl_daemon_main(int argc, char **argv, const char *version)
{
    kl_log_set_prefix("keylessd");
    kl_config *cfg = kl_daemon_config_new();
    if (!cfg) {
        fprintf(stderr, "keylessd: out of memory\n");
        return 1;
    }
    char err[1024];
    if (kl_config_load(cfg, argc, argv, NULL, err, sizeof err) != KL_OK) {
        /* --check: the values that did not parse before this one */
        for (size_t i = 0; i < cfg->nerrors; i++)
            fprintf(stderr, "keylessd: %s\n", cfg->errors[i]);
        fprintf(stderr, "keylessd: %s\n", err);
        kl_config_free(cfg);
        return 1;
    }
    int rc;
    if (print_mode(cfg, version, &rc)) {
        kl_config_free(cfg);
        return rc;
    }
    /* Modes that report must show their findings whatever loglevel the
     * file sets. */
    bool reporting = cfg->check || cfg->keystore_debug || cfg->config_only ||
                     cfg->manual_activation;
    kl_log_set_level(reporting && cfg->loglevel > KL_LOG_INFO ? KL_LOG_INFO
                                                              : cfg->loglevel);
    kl_log_set_format(kl_log_format_parse(cfg->log_format));
    if (cfg->loaded_file)
        kl_debug("configuration file %s", cfg->loaded_file);
    for (size_t i = 0; i < cfg->nwarnings; i++)
        kl_warn("%s", cfg->warnings[i]);
    /* --check only: the values that did not parse (config.h) */
    for (size_t i = 0; i < cfg->nerrors; i++)
        kl_error("%s", cfg->errors[i]);
    /* no core dumps and enough descriptors, before any key is
     * read into memory. */
    kl_problems earlier = {
        .errors = cfg->nerrors,
        .warnings = cfg->nwarnings +
                    kl_limits_process_setup(
                        cfg->allow_core_dumps,
                        (size_t)kl_settings_of(cfg)->server.max_connections),
    };

    if (cfg->check || cfg->keystore_debug || cfg->config_only ||
        cfg->manual_activation) {
        if (cfg->check)
            rc = kl_daemon_check(cfg, earlier);
        else if (cfg->keystore_debug)
            rc = kl_daemon_keystore_debug(cfg, stdout);
        else if (cfg->config_only)
            rc = config_only(cfg);
        else
            rc = kl_activate_manual(cfg);
        kl_config_free(cfg);
        return rc;
    }

    /* Signals are taken through a signalfd in the main thread; every
     * thread started from here on inherits the blocked mask. A write to a
     * closed socket must be an error, not a SIGPIPE. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* activation: enrol, renew or refuse before loading */
    if (kl_activate_startup(cfg) != 0) {
        kl_error("not starting: see the activation messages above");
        kl_config_free(cfg);
        return 1;
    }
    kl_problems p = {0};
    kl_tls_ctx *tls = kl_daemon_load_tls(cfg, &p);
    kl_keystore *ks = tls ? kl_daemon_load_keys(cfg, false, &p) : NULL;
    if (!tls || !ks) {
        if (!tls)
            kl_error("not starting: fix the certificate problems above, "
                     "then check with keylessd --check");
        kl_keystore_free(ks);
        kl_tls_ctx_free(tls);
        kl_config_free(cfg);
        return 1;
    }
    return kl_daemon_serve(cfg, argc, argv, ks, tls);
}
