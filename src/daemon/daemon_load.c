/* SPDX-License-Identifier: Apache-2.0 */
/* What keylessd loads from its configuration - the key store and the TLS
 * context - and the two modes that only load: --check and
 * --keystore-debug. Every problem is one log line naming the file. */
#include <arpa/inet.h>
#include <errno.h>
#include <libgen.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/provider.h>
#include <unistd.h>

#include "core/log.h"
#include "core/time.h"
#include "engine/acl.h"
#include "activation/activate.h"
#include "daemon/daemon.h"
#include "daemon/daemon_ext.h"
#include "daemon/daemon_seal.h"
#include "tls/certcheck.h"

static void key_report(void *arg, int level, const char *path, const char *msg)
{
    kl_problems_count(arg, level);
    kl_log(level, "%s: %s", path, msg);
}

static void cert_report(void *arg, int level, const char *msg)
{
    kl_problems_count(arg, level);
    kl_log(level, "%s", msg);
}

/* Heap bytes in use (glibc; 0 where the allocator does not say, e.g.
 * under a sanitizer): the growth across a load is the key store's
 * memory, reported on the load line (performance issue: "key store
 * memory reported"). Other threads allocating meanwhile (a reload while
 * serving) make it approximate; at startup nothing else runs. */
static size_t heap_in_use(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
#else
    return 0;
#endif
}

/* The providers openssl_providers loaded: kept for the life of the
 * process, unloaded at its exit (before OpenSSL's own cleanup, which runs
 * after: atexit handlers run in reverse order, and OpenSSL registered its
 * handler when it started), so that nothing of them is left behind. */
static OSSL_PROVIDER *loaded[64];
static size_t nloaded;

static void unload_providers(void)
{
    while (nloaded)
        OSSL_PROVIDER_unload(loaded[--nloaded]);
}

static void keep_provider(OSSL_PROVIDER *pr)
{
    if (nloaded == 0)
        atexit(unload_providers);
    if (nloaded < sizeof loaded / sizeof *loaded)
        loaded[nloaded++] = pr;
}

/* One entry of openssl_providers: a provider's name, found where OpenSSL
 * finds modules (OPENSSL_MODULES, else its own directory), or the path of
 * its module, which names it by its file name without ".so". */
static bool load_provider(const char *entry)
{
    char dir[1024], name[256];
    const char *slash = strrchr(entry, '/');
    if (slash) {
        size_t dl = (size_t)(slash - entry);
        snprintf(dir, sizeof dir, "%.*s", (int)(dl ? dl : 1), entry);
        snprintf(name, sizeof name, "%s", slash + 1);
        size_t nl = strlen(name);
        if (nl > 3 && strcmp(name + nl - 3, ".so") == 0)
            name[nl - 3] = '\0';
        if (!OSSL_PROVIDER_set_default_search_path(NULL, dir))
            return false;
    } else {
        snprintf(name, sizeof name, "%s", entry);
    }
    OSSL_PROVIDER *pr = OSSL_PROVIDER_load(NULL, name);
    if (slash)
        OSSL_PROVIDER_set_default_search_path(NULL, NULL);
    if (pr)
        keep_provider(pr);
    if (!pr) {
        unsigned long e = ERR_peek_last_error();
        kl_error("openssl_providers: cannot load \"%s\"%s%s; give the "
                 "provider's name as OpenSSL finds it (OPENSSL_MODULES) or "
                 "the path of its module",
                 entry, e ? ": " : "", e ? ERR_reason_error_string(e) : "");
        ERR_clear_error();
        return false;
    }
    kl_info("OpenSSL provider %s loaded", OSSL_PROVIDER_get0_name(pr));
    return true;
}

bool kl_daemon_load_providers(const kl_config *cfg)
{
    const char *list = cfg->openssl_providers;
    if (!list || !*list)
        return true;
    /* loading one by hand ends OpenSSL's loading of the default provider
     * on first use: load it too, first, so that it stays what answers
     * when nothing else was asked for */
    OSSL_PROVIDER *def = OSSL_PROVIDER_load(NULL, "default");
    if (!def) {
        kl_error("openssl_providers: cannot load OpenSSL's default provider");
        return false;
    }
    keep_provider(def);
    bool ok = true;
    for (const char *at = list; *at;) {
        size_t n = strcspn(at, ",");
        char entry[1024];
        snprintf(entry, sizeof entry, "%.*s", (int)n, at);
        char *e = entry;
        while (*e == ' ')
            e++;
        for (size_t l = strlen(e); l && e[l - 1] == ' '; l--)
            e[l - 1] = '\0';
        if (*e && strcmp(e, "default") != 0)
            ok &= load_provider(e);
        at += n + (at[n] == ',');
    }
    return ok;
}

static kl_keystore *load_keys(const kl_config *cfg, bool tolerant,
                              bool *seal_failed, kl_problems *p)
{
    uint64_t t0 = kl_now_ns();
    size_t heap0 = heap_in_use();
    kl_keystore_opts ko = {
        .allow_group_readable = cfg->allow_group_readable_keys,
        .check_mode = cfg->check,
        .skip_bad_keys = tolerant,
        .key_propquery = cfg->key_propquery,
        .async_providers = cfg->async_providers,
        .report = key_report,
        .report_arg = p,
    };
    kl_daemon_seal seal;
    if (!kl_daemon_seal_prepare(cfg, &seal, &ko)) {
        p->errors++; /* logged; sealed files are then held elsewhere */
        if (seal_failed)
            *seal_failed = true;
        if (!tolerant || seal_failed)
            return NULL;
    }
    kl_keystore *ks = kl_keystore_new(&ko);
    if (!ks) {
        kl_daemon_seal_release(&seal);
        kl_error("out of memory creating the key store");
        p->errors++;
        return NULL;
    }
    for (size_t i = 0; i < cfg->nstores; i++) {
        const kl_store_cfg *st = &cfg->stores[i];
        kl_status s;
        const char *what;
        switch (st->kind) {
        case KL_STORE_DIR:
            kl_certcheck_key_dir(st->path, cert_report, p);
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
        if (s == KL_OK)
            continue;
        /* The key store already named the file (or the URI, PIN redacted)
         * and the reason; this line must not repeat a URI that may carry a
         * PIN. */
        if (s == KL_E_NOMEM || !tolerant) {
            kl_error("cannot load the keys of %s #%zu of private_key_stores "
                     "(%s); not starting",
                     what, i + 1, kl_status_str(s));
            kl_keystore_free(ks);
            kl_daemon_seal_release(&seal);
            return NULL;
        }
        /* the store's own line above is the problem (and counted); in
         * --check this one only says what happened to it, so that the
         * summary's count matches the lines that name problems */
        kl_log(cfg->check ? KL_LOG_INFO : KL_LOG_WARN,
               "skipped (part of) %s #%zu of private_key_stores: %s", what,
               i + 1, kl_status_str(s));
        if (!cfg->check)
            p->warnings++;
    }
    kl_daemon_seal_release(&seal); /* the store keeps what it opened */
    size_t heap1 = heap_in_use();
    double mib = heap1 > heap0 ? (double)(heap1 - heap0) / 1048576.0 : 0;
    double secs = kl_ns_to_s_f(kl_now_ns() - t0);
    /* info for a store whose load an operator would want to see (many
     * keys, or slow); otherwise debug, so that a small store's startup
     * stays the one line the reference server logs (drop-in logs) */
    bool big = kl_keystore_count(ks) >= 1000 || secs >= 1.0;
    char mem[64] = "memory not known (the allocator does not say)";
    if (heap1)
        snprintf(mem, sizeof mem, "about %.1f MiB of memory", mib);
    kl_log(big ? KL_LOG_INFO : KL_LOG_DEBUG,
           "key store: %zu keys loaded in %.2fs, %s", kl_keystore_count(ks),
           secs, mem);
    if (kl_keystore_count(ks) == 0 && !cfg->check)
        kl_warn("no private keys loaded: every key operation will be "
                "answered `key not found`; set private_key_stores or "
                "--private-key-dirs");
    return ks;
}

kl_keystore *kl_daemon_load_keys(const kl_config *cfg, bool tolerant,
                                 kl_problems *p)
{
    return load_keys(cfg, tolerant, NULL, p);
}

kl_keystore *kl_daemon_reload_keys(const kl_config *cfg, kl_problems *p)
{
    bool seal_failed = false;
    kl_keystore *ks = load_keys(cfg, true, &seal_failed, p);
    if (seal_failed)
        kl_error("reload: sealing_key cannot be opened (above): still "
                 "serving every key loaded before, sealed ones included; "
                 "fix it and reload again");
    return ks;
}

kl_tls_ctx *kl_daemon_load_tls(const kl_config *cfg, kl_problems *p)
{
    kl_certcheck cc = {
        .cert_file = cfg->auth_cert,
        .key_file = cfg->auth_key,
        .ca_file = cfg->cloudflare_ca_cert,
        .now = cfg->has_current_time ? cfg->current_time_unix : 0,
        .allow_group_readable = cfg->allow_group_readable_keys,
        .report = cert_report,
        .arg = p,
    };
    if (kl_certcheck_identity(&cc) > 0) {
        if (cfg->hostname && cfg->origin_ca_api_key)
            kl_info("(Origin CA credentials are configured: keylessd enrols "
                    "at startup when auth_cert is missing, and replaces an "
                    "expired or unusable one with --renew or auto_renew: "
                    "true; see docs/OPERATIONS.md, Activation)");
        return NULL;
    }
    kl_tls_opts to = {
        .cert_file = cfg->auth_cert,
        .key_file = cfg->auth_key,
        .ca_file = cfg->cloudflare_ca_cert,
        .disable_tls13 = !cfg->tls13,
        .verify_time = cfg->has_current_time ? cfg->current_time_unix : 0,
        /* a session for every connection there may be */
        .session_cache = kl_settings_of_c(cfg)->server.max_connections,
    };
    char err[512];
    kl_tls_ctx *tls = kl_tls_server_ctx_new(&to, err, sizeof err);
    if (!tls) {
        p->errors++;
        kl_error("TLS setup failed: %s", err);
    }
    return tls;
}

/* An address a start would listen on: numeric IPv4 or IPv6. */
static void check_address(const char *option, const char *addr, kl_problems *p)
{
    unsigned char buf[16];
    if (!addr || inet_pton(AF_INET, addr, buf) == 1 ||
        inet_pton(AF_INET6, addr, buf) == 1)
        return;
    kl_error("%s: \"%s\" is not a numeric IPv4 or IPv6 address; use e.g. "
             "0.0.0.0, 127.0.0.1 or ::",
             option, addr);
    p->errors++;
}

/* pid_file: a start refuses when it cannot create it. */
static void check_pid_file(const char *path, kl_problems *p)
{
    if (!path || !*path)
        return;
    char *copy = strdup(path);
    if (!copy)
        return;
    const char *dir = dirname(copy);
    if (access(dir, W_OK | X_OK) != 0 && errno == ENOENT) {
        /* systemd creates RuntimeDirectory= (/run/keyless in the packaged
         * unit) only while the service runs */
        kl_warn("pid_file %s: its directory %s does not exist; a start "
                "creates no directory (under systemd, RuntimeDirectory= "
                "makes it while the service runs)",
                path, dir);
        p->warnings++;
    } else if (access(dir, W_OK | X_OK) != 0) {
        kl_error("pid_file %s: its directory %s is not writable (%s) for "
                 "this user; fix the path or the directory's permissions, or "
                 "unset pid_file",
                 path, dir, strerror(errno));
        p->errors++;
    }
    free(copy);
}

/* access_file: a start refuses a file that does not parse. */
static void check_access_file(const char *path, kl_problems *p)
{
    if (!path || !*path)
        return;
    char err[512];
    kl_acl *acl = kl_acl_load(path, err, sizeof err);
    if (!acl) {
        kl_error("access_file: %s", err);
        p->errors++;
        return;
    }
    kl_info("access lists: %zu rule(s) from %s", kl_acl_count(acl), path);
    kl_acl_free(acl);
}

int kl_daemon_check(const kl_config *cfg, kl_problems earlier)
{
    /* every problem line printed so far (the configuration's, the process
     * limits') counts: the summary's numbers are the lines above it
     * (docs/OPERATIONS.md, Modes) */
    kl_problems p = earlier;
    const kl_server_opts *so = &kl_settings_of_c(cfg)->server;
    check_address("listen_address", so->listen_address, &p);
    const kl_metrics_http_opts *mh = &kl_settings_of_c(cfg)->metrics_http;
    if (mh->port > 0)
        check_address("metrics_address",
                      mh->address && *mh->address ? mh->address : NULL, &p);
    check_pid_file(cfg->pid_file, &p);
    /* a start would enrol or renew (activation/activate.h): the identity
     * files it would write are not checked; kl_activate_check has checked
     * the CA file */
    bool enrols = kl_activate_check(cfg, &p);
    kl_tls_ctx *tls = enrols ? NULL : kl_daemon_load_tls(cfg, &p);
    kl_keystore *ks = kl_daemon_load_keys(cfg, true, &p);
    size_t nkeys = ks ? kl_keystore_count(ks) : 0;
    const char *table = kl_settings_of_c(cfg)->router.table_file;
    bool routing = table && *table;
    if (nkeys == 0 && routing) {
        kl_info("no keys: this keylessd only forwards to the remotes of "
                "router_table");
    } else if (cfg->nstores == 0) {
        /* nothing configured yet (e.g. checking the identity first) */
        kl_warn("private_key_stores is empty: keylessd would serve no key "
                "and /ready would answer 503; set private_key_stores or "
                "--private-key-dirs");
        p.warnings++;
    } else if (nkeys == 0) {
        /* a start serves, but answers `key not found` to everything and
         * is never ready (docs/METRICS.md) */
        kl_error("no private key loads from private_key_stores: keylessd "
                 "would answer every key operation `key not found` and "
                 "/ready would answer 503 until keys appear; put the keys "
                 "(PEM, *.key, mode 0600) in the stores");
        p.errors++;
    }
    check_access_file(cfg->access_file, &p);
    kl_ext_check_router(cfg, &p);
    kl_keystore_free(ks);
    kl_tls_ctx_free(tls);
    if (p.errors) {
        kl_error("configuration has %zu problem(s) and %zu warning(s); %zu "
                 "keys loaded",
                 p.errors, p.warnings, nkeys);
        return 1;
    }
    if (p.warnings)
        kl_info("configuration OK: %zu keys, auth_cert %s, CA %s; %zu "
                "warning(s) above",
                nkeys, cfg->auth_cert, cfg->cloudflare_ca_cert, p.warnings);
    else
        kl_info("configuration OK: %zu keys, auth_cert %s, CA %s", nkeys,
                cfg->auth_cert, cfg->cloudflare_ca_cert);
    return 0;
}

typedef struct listing {
    FILE *out;
} listing;

static const char *backend_name(kl_key_backend b)
{
    switch (b) {
    case KL_BACKEND_PKCS11: return "pkcs11";
    case KL_BACKEND_PROVIDER: return "provider";
    case KL_BACKEND_ASYNC: return "async";
    default: return "file";
    }
}

static void list_key(void *arg, const kl_key *k)
{
    listing *l = arg;
    char hex[2 * KL_SKI_LEN + 1], desc[48];
    kl_ski_hex(kl_key_ski(k), hex);
    fprintf(l->out, "%s  %-14s %-6s %s\n", hex,
            kl_key_desc(k, desc, sizeof desc),
            backend_name(kl_key_get_backend(k)), kl_key_path(k));
}

int kl_daemon_keystore_debug(const kl_config *cfg, FILE *out)
{
    kl_problems p = {0};
    kl_keystore *ks = kl_daemon_load_keys(cfg, true, &p);
    if (!ks)
        return 1;
    fprintf(out,
            "# %zu keys from %zu store(s); SKI (protocol P7), type, "
            "back end, file\n",
            kl_keystore_count(ks), cfg->nstores);
    listing l = {out};
    kl_keystore_foreach(ks, list_key, &l);
    kl_keystore_free(ks);
    if (p.errors)
        kl_error("%zu key(s) or store(s) could not be loaded (see above)",
                 p.errors);
    return p.errors ? 1 : 0;
}
