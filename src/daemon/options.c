/* SPDX-License-Identifier: Apache-2.0 */
/* The option table. One row per option: everything that
 * parses, validates, documents or reloads it is driven from here. Every key
 * of the reference's gokeyless.yaml is a row, with the reference's default;
 * keylessd's own options follow under their own names. Each option is also
 * KEYLESS_<NAME> in the environment and --<name> as a flag ('-' or '_'), the
 * short flags being the reference's: -c -l -v -h -d -o. */
#include <stddef.h>
#include <string.h>

#include "core/log.h"
#include "core/time.h"
#include "daemon/settings.h"

/* A row's field: offsetof into kl_settings. F() for the process's own
 * options (in kl_config), S(), P(), R(), T(), M() for the engine's, the
 * pool's, the router's, the tracer's and the metrics endpoint's. */
#define F(field) offsetof(kl_settings, cfg.field)
#define S(field) offsetof(kl_settings, server.field)
#define P(field) offsetof(kl_settings, pool.field)
#define R(field) offsetof(kl_settings, router.field)
#define T(field) offsetof(kl_settings, tracing.field)
#define M(field) offsetof(kl_settings, metrics_http.field)
#define DAY_MS (24ll * 3600 * 1000)
#define HOUR_MS (3600ll * 1000)

#define G_FILE "Configuration file"
#define G_MODES "Modes (flags only)"
#define G_LOG "Logging"
#define G_TLS "The key server's own TLS identity"
#define G_KEYS "Keys"
#define G_NET "Listening"
#define G_LIMITS "Limits and timeouts"
#define G_ACT "Activation (Origin CA enrolment)"
#define G_TRACE "Tracing"
#define G_ROUTE "Geo routing (docs/ROUTING.md)"

/* Checks of keylessd's options that the loader does not know (it checks
 * the stores, current_time, log_format and the modes in config/derive.c).
 */
static kl_status check(const kl_config *cfg, char *err, size_t errlen)
{
    const kl_settings *s = kl_settings_of_c(cfg);
    if (!s->server.listen_address || !*s->server.listen_address) {
        kl_errf(err, errlen,
                "listen_address: must not be empty; use 0.0.0.0 for every "
                "IPv4 address");
        return KL_E_CONFIG;
    }
    for (const char *const *o =
             (const char *const[]){"auth_cert", "auth_key",
                                   "cloudflare_ca_cert", NULL};
         *o; o++) {
        const kl_option *opt = kl_config_find(cfg->table, *o);
        const char *v = *(char *const *)((const char *)cfg + opt->offset);
        char def[256];
        if (!v || !*v) {
            kl_config_default_text(cfg->table, opt, def, sizeof def);
            kl_errf(err, errlen,
                    "%s: must name a file; remove the empty setting to use "
                    "the default %s",
                    *o, def);
            return KL_E_CONFIG;
        }
    }
    if (s->router.timeout_ceiling_ns < s->router.timeout_floor_ns) {
        char a[32], b[32];
        kl_format_duration(s->router.timeout_ceiling_ns, a, sizeof a);
        kl_format_duration(s->router.timeout_floor_ns, b, sizeof b);
        kl_errf(err, errlen,
                "router_timeout_ceiling: %s is below router_timeout_floor "
                "%s; raise the ceiling or lower the floor",
                a, b);
        return KL_E_CONFIG;
    }
    return KL_OK;
}

static const kl_option options[] = {
    /* ---- the file ---- */
    {.name = "config_file",
     .type = KL_OPT_STRING,
     .offset = F(config_file),
     .env = "KEYLESS_CONFIG_FILE",
     .flag = "config-file",
     .short_flag = 'c',
     .metavar = "PATH",
     .help = "configuration file to read instead of searching for "
             "gokeyless.yaml (.yml, .json) or keylessd.yaml in the working "
             "directory and then in /etc/keyless",
     .flags = KL_OPTF_NO_YAML,
     .group = G_FILE},

    /* ---- logging ---- */
    {.name = "loglevel",
     .type = KL_OPT_INT,
     .offset = F(loglevel),
     .min = 0,
     .max = 5,
     .env = "KEYLESS_LOGLEVEL",
     .flag = "loglevel",
     .short_flag = 'l',
     .metavar = "N",
     .help = "log level: 0 debug, 1 info, 2 warning, 3 error, 4 critical, 5 "
             "fatal. At 1 a successful request logs nothing",
     .flags = KL_OPTF_RELOADABLE,
     .group = G_LOG},
    {.name = "log_format",
     .type = KL_OPT_STRING,
     .offset = F(log_format),
     .env = "KEYLESS_LOG_FORMAT",
     .flag = "log-format",
     .metavar = "text|json",
     .help = "text: one line per event as the reference writes it; json: one "
             "JSON object per line (time, level, msg and the request's "
             "request_id, client, connection, opcode, ski, error where "
             "known), also under systemd",
     .flags = KL_OPTF_RELOADABLE,
     .group = G_LOG},
    {.name = "access_log_sample_rate",
     .type = KL_OPT_FLOAT,
     .offset = S(access_log_sample_rate),
     .min = 0,
     .max = 1,
     .env = "KEYLESS_ACCESS_LOG_SAMPLE_RATE",
     .flag = "access-log-sample-rate",
     .metavar = "0..1",
     .help = "fraction of successful key operations logged at info level "
             "as access lines (client, request_id, opcode, SKI, duration; "
             "fields with log_format: json). 0: none - quiet, as the "
             "reference",
     .group = G_LOG},

    /* ---- TLS identity ---- */
    {.name = "auth_cert",
     .type = KL_OPT_STRING,
     .offset = F(auth_cert),
     .env = "KEYLESS_AUTH_CERT",
     .flag = "auth-cert",
     .metavar = "PATH",
     .help = "the key server's own TLS certificate chain (PEM), issued for "
             "its hostname with the serverAuth usage. Not one of the keys it "
             "serves",
     .flags = KL_OPTF_RELOADABLE,
     .group = G_TLS},
    {.name = "auth_key",
     .type = KL_OPT_STRING,
     .offset = F(auth_key),
     .env = "KEYLESS_AUTH_KEY",
     .flag = "auth-key",
     .metavar = "PATH",
     .help = "the private key of auth_cert (PEM)",
     .flags = KL_OPTF_RELOADABLE,
     .group = G_TLS},
    {.name = "cloudflare_ca_cert",
     .type = KL_OPT_STRING,
     .offset = F(cloudflare_ca_cert),
     .env = "KEYLESS_CLOUDFLARE_CA_CERT",
     .flag = "cloudflare-ca-cert",
     .metavar = "PATH",
     .help = "CA certificate(s) that client certificates must chain to "
             "(PEM); nothing else is trusted. A reload that changes them "
             "closes the open connections they no longer trust",
     .flags = KL_OPTF_RELOADABLE,
     .group = G_TLS},
    {.name = "current_time",
     .type = KL_OPT_STRING,
     .offset = F(current_time),
     .env = "KEYLESS_CURRENT_TIME",
     .flag = "current-time",
     .metavar = "RFC3339",
     .help = "TEST ONLY: the time at which certificates are checked and "
             "client certificates verified, e.g. 2030-01-02T15:04:05Z",
     .flags = KL_OPTF_RELOADABLE | KL_OPTF_TEST_ONLY,
     .group = G_TLS},

    /* ---- keys ---- */
    {.name = "private_key_stores",
     .type = KL_OPT_STORES,
     .env = "KEYLESS_PRIVATE_KEY_STORES",
     .flag = "private-key-stores",
     .metavar = "YAML",
     .help = "list of key stores, each {dir: PATH} (every *.key file below "
             "PATH), {file: PATH} or {uri: PKCS11-URI}. In the environment "
             "or as a flag, in YAML flow form: [{dir: /etc/keyless/keys}]",
     .flags = KL_OPTF_RELOADABLE,
     .group = G_KEYS},
    {.name = "private_key_dirs",
     .type = KL_OPT_STRING,
     .offset = F(private_key_dirs),
     .env = "KEYLESS_PRIVATE_KEY_DIRS",
     .flag = "private-key-dirs",
     .metavar = "DIR,...",
     .help = "comma-separated key directories; with private_key_files they "
             "replace private_key_stores (as in the reference)",
     .flags = KL_OPTF_RELOADABLE,
     .group = G_KEYS},
    {.name = "private_key_files",
     .type = KL_OPT_STRING,
     .offset = F(private_key_files),
     .env = "KEYLESS_PRIVATE_KEY_FILES",
     .flag = "private-key-files",
     .metavar = "FILE,...",
     .help = "comma-separated key files; with private_key_dirs they replace "
             "private_key_stores",
     .flags = KL_OPTF_RELOADABLE,
     .group = G_KEYS},
    {.name = "allow_group_readable_keys",
     .type = KL_OPT_BOOL,
     .offset = F(allow_group_readable_keys),
     .env = "KEYLESS_ALLOW_GROUP_READABLE_KEYS",
     .flag = "allow-group-readable-keys",
     .metavar = "BOOL",
     .help = "accept key files, and auth_key, that group or others can "
             "read (key directories that group or others can write are "
             "refused regardless)",
     .flags = KL_OPTF_RELOADABLE,
     .group = G_KEYS},
    {.name = "openssl_providers",
     .type = KL_OPT_STRING,
     .offset = F(openssl_providers),
     .env = "KEYLESS_OPENSSL_PROVIDERS",
     .flag = "openssl-providers",
     .metavar = "NAME|PATH,...",
     .help = "OpenSSL providers to load at start, beside the default one "
             "(and what openssl.cnf loads): a name OpenSSL finds in its "
             "modules directory (OPENSSL_MODULES), or the path of the "
             "module, named by its file name without .so (unset: none)",
     .group = G_KEYS},
    {.name = "key_propquery",
     .type = KL_OPT_STRING,
     .offset = F(key_propquery),
     .env = "KEYLESS_KEY_PROPQUERY",
     .flag = "key-propquery",
     .metavar = "QUERY",
     .help = "OpenSSL property query for key operations only, e.g. "
             "?provider=qatprovider: a provider loaded through openssl.cnf "
             "(OPENSSL_CONF) signs with the keys while TLS and everything "
             "else keep OpenSSL's default properties (unset: the defaults)",
     .flags = KL_OPTF_RELOADABLE,
     .group = G_KEYS},
    {.name = "async_providers",
     .type = KL_OPT_STRING,
     .offset = F(async_providers),
     .env = "KEYLESS_ASYNC_PROVIDERS",
     .flag = "async-providers",
     .metavar = "NAME,...",
     .help = "OpenSSL providers (loaded through openssl.cnf) whose "
             "signatures pause an ASYNC job while a device works, e.g. an "
             "accelerator card's: their keys' operations run as ASYNC jobs "
             "on the shards, many at once. Keys signed by any other "
             "non-built-in provider (a TPM) run on blocking workers",
     .flags = KL_OPTF_RELOADABLE,
     .group = G_KEYS},
    {.name = "watch_key_dirs",
     .type = KL_OPT_BOOL,
     .offset = F(watch_key_dirs),
     .env = "KEYLESS_WATCH_KEY_DIRS",
     .flag = "watch-key-dirs",
     .metavar = "BOOL",
     .help = "reload when a file in a key directory is added, removed or "
             "changed (inotify), as SIGHUP does",
     .flags = KL_OPTF_RELOADABLE,
     .group = G_KEYS},
    {.name = "watch_delay",
     .type = KL_OPT_DURATION,
     .offset = F(watch_delay_ns),
     .min = 0,
     .max = HOUR_MS,
     .env = "KEYLESS_WATCH_DELAY",
     .flag = "watch-delay",
     .metavar = "DURATION",
     .help = "after a change in a key directory, wait until it has been "
             "quiet this long before reloading (a copy of many keys causes "
             "one reload)",
     .flags = KL_OPTF_RELOADABLE,
     .group = G_KEYS},

    /* ---- listening ---- */
    {.name = "port",
     .type = KL_OPT_U16,
     .offset = S(port),
     .min = 1,
     .max = 65535,
     .env = "KEYLESS_PORT",
     .flag = "port",
     .metavar = "PORT",
     .help = "TCP port to listen on",
     .group = G_NET},
    {.name = "listen_address",
     .type = KL_OPT_STRING,
     .offset = S(listen_address),
     .env = "KEYLESS_LISTEN_ADDRESS",
     .flag = "listen-address",
     .metavar = "ADDR",
     .help = "IP address to listen on (\"::\" for all IPv6 and IPv4 "
             "addresses)",
     .group = G_NET},
    {.name = "listen_reuseport",
     .type = KL_OPT_BOOL,
     .offset = S(share_port),
     .env = "KEYLESS_LISTEN_REUSEPORT",
     .flag = "listen-reuseport",
     .metavar = "BOOL",
     .help = "share listen_address:port with a keylessd already listening "
             "there, for a zero-downtime handover (docs/OPERATIONS.md, "
             "\"Handover\"); false: refuse to start when another process "
             "listens on the port",
     .group = G_NET},
    {.name = "metrics_port",
     .type = KL_OPT_U16,
     .offset = M(port),
     .min = 0,
     .max = 65535,
     .env = "KEYLESS_METRICS_PORT",
     .flag = "metrics-port",
     .metavar = "PORT",
     .help = "TCP port of /metrics, /health and /ready (docs/METRICS.md); "
             "0: no metrics endpoint. If it cannot be bound keylessd logs an "
             "error and serves keys anyway, as the reference does",
     .group = G_NET},
    {.name = "metrics_address",
     .type = KL_OPT_STRING,
     .offset = M(address),
     .env = "KEYLESS_METRICS_ADDRESS",
     .flag = "metrics-address",
     .metavar = "ADDR",
     .help = "IP address of the metrics endpoint, which needs no "
             "authentication (docs/METRICS.md); loopback by default, unlike "
             "the reference (listen_address): set it to the address "
             "Prometheus and health checks reach. \"\": listen_address",
     .group = G_NET},
    {.name = "metrics_identities",
     .type = KL_OPT_BOOL,
     .offset = F(metrics_identities),
     .env = "KEYLESS_METRICS_IDENTITIES",
     .flag = "metrics-identities",
     .metavar = "BOOL",
     .help = "name certificates in /metrics as the reference does (labels "
             "cn, hostnames, serial_no, and source = the file's path); "
             "false: those labels are empty and source is the option name "
             "(auth_cert, ...), the series stay (docs/METRICS.md, Identities "
             "in the series)",
     .group = G_NET},
    {.name = "pid_file",
     .type = KL_OPT_STRING,
     .offset = F(pid_file),
     .env = "KEYLESS_PID_FILE",
     .flag = "pid-file",
     .metavar = "PATH",
     .help = "write the process id here once listening; removed at exit",
     .group = G_NET},

    /* ---- limits and timeouts ---- */
    {.name = "shards",
     .type = KL_OPT_INT,
     .offset = S(shards),
     .min = 0,
     .max = 1024,
     .env = "KEYLESS_SHARDS",
     .flag = "shards",
     .metavar = "N",
     .help = "event-loop threads, each with its own listening socket (0: "
             "one per CPU)",
     .group = G_LIMITS},
    {.name = "workers",
     .type = KL_OPT_INT,
     .offset = P(workers),
     .min = 0,
     .max = 1024,
     .env = "KEYLESS_WORKERS",
     .flag = "workers",
     .metavar = "N",
     .help = "crypto worker threads (0: one per CPU)",
     .group = G_LIMITS},
    {.name = "background_workers",
     .type = KL_OPT_INT,
     .offset = P(background_workers),
     .min = -1,
     .max = 1024,
     .env = "KEYLESS_BACKGROUND_WORKERS",
     .flag = "background-workers",
     .metavar = "N",
     .help = "threads in the idle scheduling class (SCHED_IDLE) that run "
             "long RSA operations (above 2048 bits) beside the workers, so "
             "that RSA-3072/4096 use every CPU nothing else wants and give "
             "it up at once to any other thread (0: one per worker; -1: "
             "none - long RSA then never takes the last worker)",
     .group = G_LIMITS},
    {.name = "realtime_priority",
     .type = KL_OPT_INT,
     .offset = F(realtime_priority),
     .min = 0,
     .max = 98,
     .env = "KEYLESS_REALTIME_PRIORITY",
     .flag = "realtime-priority",
     .metavar = "N",
     .help = "0: normal scheduling. 1-98: event-loop threads run SCHED_FIFO "
             "at N+1 and crypto workers at N, so that a woken loop never "
             "waits a scheduler slice for the CPU (lower tail latency when "
             "other processes share the cores; they get the CPU only when "
             "keylessd leaves it). Needs CAP_SYS_NICE or RLIMIT_RTPRIO >= "
             "N+1; refused, keylessd warns and serves with normal "
             "scheduling",
     .group = G_LIMITS},
    {.name = "max_inflight_per_conn",
     .type = KL_OPT_U32,
     .offset = S(max_inflight_per_conn),
     .min = 1,
     .max = 1 << 20,
     .env = "KEYLESS_MAX_INFLIGHT_PER_CONN",
     .flag = "max-inflight-per-conn",
     .metavar = "N",
     .help = "requests in flight per connection before it stops being read "
             "(protocol P8 asks for at least 1024)",
     .group = G_LIMITS},
    {.name = "max_inflight",
     .type = KL_OPT_U32,
     .offset = S(max_inflight),
     .min = 1,
     .max = 1 << 24,
     .env = "KEYLESS_MAX_INFLIGHT",
     .flag = "max-inflight",
     .metavar = "N",
     .help = "requests in flight in the whole process before connections "
             "stop being read",
     .group = G_LIMITS},
    {.name = "idle_timeout",
     .type = KL_OPT_DURATION,
     .offset = S(idle_timeout_ns),
     .min = 1,
     .max = DAY_MS,
     .env = "KEYLESS_IDLE_TIMEOUT",
     .flag = "idle-timeout",
     .metavar = "DURATION",
     .help = "close a connection that sent no complete request for this long",
     .group = G_LIMITS},
    {.name = "handshake_timeout",
     .type = KL_OPT_DURATION,
     .offset = S(handshake_timeout_ns),
     .min = 1,
     .max = HOUR_MS,
     .env = "KEYLESS_HANDSHAKE_TIMEOUT",
     .flag = "handshake-timeout",
     .metavar = "DURATION",
     .help = "close a connection whose TLS handshake takes longer",
     .group = G_LIMITS},
    {.name = "drain_timeout",
     .type = KL_OPT_DURATION,
     .offset = S(drain_timeout_ns),
     .min = 0,
     .max = HOUR_MS,
     .env = "KEYLESS_DRAIN_TIMEOUT",
     .flag = "drain-timeout",
     .metavar = "DURATION",
     .help = "at idle timeout, shutdown or when a client's certificate "
             "expires or is no longer trusted, how long in-flight requests "
             "may finish",
     .group = G_LIMITS},
    {.name = "max_queue_time",
     .type = KL_OPT_DURATION,
     .offset = S(max_queue_time_ns),
     .min = 0,
     .max = HOUR_MS,
     .env = "KEYLESS_MAX_QUEUE_TIME",
     .flag = "max-queue-time",
     .metavar = "DURATION",
     .help = "answer `internal error` instead of running a request that "
             "waited longer than this (0: sign_timeout, if set, else no "
             "limit)",
     .group = G_LIMITS},
    {.name = "max_async_jobs",
     .type = KL_OPT_U32,
     .offset = S(max_async_jobs),
     .min = 1,
     .max = 65536,
     .env = "KEYLESS_MAX_ASYNC_JOBS",
     .flag = "max-async-jobs",
     .metavar = "N",
     .help = "operations of async_providers' keys in progress at once per "
             "shard; more wait for a blocking worker",
     .group = G_LIMITS},
    {.name = "sign_timeout",
     .type = KL_OPT_DURATION,
     .offset = F(sign_timeout_ns),
     .min = 0,
     .max = HOUR_MS,
     .env = "KEYLESS_SIGN_TIMEOUT",
     .flag = "sign-timeout",
     .metavar = "DURATION",
     .help = "the reference's per-operation timeout. keylessd uses it as the "
             "request deadline when max_queue_time is 0: a request not "
             "started by then (an HSM request: not finished) is answered "
             "`internal error` (0: none)",
     .flags = KL_OPTF_COMPAT,
     .group = G_LIMITS},
    {.name = "sign_retry_count",
     .type = KL_OPT_INT,
     .offset = F(sign_retry_count),
     .min = 0,
     .max = 100,
     .env = "KEYLESS_SIGN_RETRY_COUNT",
     .flag = "sign-retry-count",
     .metavar = "N",
     .help = "accepted for the reference's files and ignored: keylessd "
             "never repeats an operation itself (an HSM session that failed "
             "is replaced for the next request; clients retry, protocol P6)",
     .flags = KL_OPTF_COMPAT,
     .group = G_LIMITS},
    {.name = "tls13",
     .type = KL_OPT_BOOL,
     .offset = F(tls13),
     .env = "KEYLESS_TLS13",
     .flag = "tls13",
     .metavar = "BOOL",
     .help = "offer TLS 1.3 besides the TLS 1.2 compatibility profile",
     .group = G_LIMITS},
    /* ---- hardening (docs/SECURITY.md) ---- */
    {.name = "max_connections",
     .type = KL_OPT_U32,
     .offset = S(max_connections),
     .min = 1,
     .max = 1 << 22,
     .env = "KEYLESS_MAX_CONNECTIONS",
     .flag = "max-connections",
     .metavar = "N",
     .help = "connections at once; more are closed as soon as accepted "
             "(needs as many open files: keylessd raises its soft limit to "
             "the hard limit and warns when that is too low)",
     .group = G_LIMITS},
    {.name = "max_handshaking",
     .type = KL_OPT_U32,
     .offset = S(max_handshaking),
     .min = 1,
     .max = 1 << 22,
     .env = "KEYLESS_MAX_HANDSHAKING",
     .flag = "max-handshaking",
     .metavar = "N",
     .help = "connections whose client is not yet authenticated (TLS "
             "handshake not finished); past it keylessd stops accepting and "
             "new connections wait in the listen backlog (sized by "
             "net.core.somaxconn)",
     .group = G_LIMITS},
    {.name = "max_handshaking_per_source",
     .type = KL_OPT_U32,
     .offset = S(max_handshaking_per_source),
     .min = 1,
     .max = 1 << 22,
     .env = "KEYLESS_MAX_HANDSHAKING_PER_SOURCE",
     .flag = "max-handshaking-per-source",
     .metavar = "N",
     .help = "of those, at most this many from one IPv4 address or IPv6 "
             "/64, so that one source cannot take every handshake slot; "
             "raise it when many edges share one (NAT) address",
     .group = G_LIMITS},
    {.name = "max_handshake_bytes",
     .type = KL_OPT_U32,
     .offset = S(max_handshake_bytes),
     .min = 4096,
     .max = 1 << 24,
     .env = "KEYLESS_MAX_HANDSHAKE_BYTES",
     .flag = "max-handshake-bytes",
     .metavar = "BYTES",
     .help = "bytes a client may send before its TLS handshake completes "
             "(a handshake with a client certificate takes a few KiB); a "
             "client that sends more is disconnected",
     .group = G_LIMITS},
    {.name = "max_output_per_conn",
     .type = KL_OPT_SIZE,
     .offset = S(max_output),
     .min = 65536,
     .max = 1 << 30,
     .env = "KEYLESS_MAX_OUTPUT_PER_CONN",
     .flag = "max-output-per-conn",
     .metavar = "BYTES",
     .help = "responses a client has not read yet, per connection, before "
             "keylessd stops reading its requests (a client that never "
             "reads is closed by idle_timeout then drain_timeout)",
     .group = G_LIMITS},
    {.name = "max_buffered_bytes",
     .type = KL_OPT_SIZE,
     .offset = S(max_buffered),
     .min = 1048576,
     .max = 1 << 30,
     .env = "KEYLESS_MAX_BUFFERED_BYTES",
     .flag = "max-buffered-bytes",
     .metavar = "BYTES",
     .help = "memory for requests in flight and unsent responses, all "
             "connections together (split evenly over the shards); past it "
             "keylessd stops reading from connections that hold some until "
             "it frees up (a connection holding none may always send one "
             "request)",
     .group = G_LIMITS},
    {.name = "access_file",
     .type = KL_OPT_STRING,
     .offset = F(access_file),
     .env = "KEYLESS_ACCESS_FILE",
     .flag = "access-file",
     .metavar = "PATH",
     .help = "access lists: which clients (cn:, san:, fp: of their "
             "certificate) may use which keys (ski:, dir:, file:); see "
             "docs/SECURITY.md. Unset: every authenticated client may use "
             "every key. Re-read at reload (a broken file keeps the lists "
             "in effect); setting or unsetting it takes a restart",
     .flags = KL_OPTF_RELOADABLE,
     .group = "Security"},
    {.name = "allow_core_dumps",
     .type = KL_OPT_BOOL,
     .offset = F(allow_core_dumps),
     .env = "KEYLESS_ALLOW_CORE_DUMPS",
     .flag = "allow-core-dumps",
     .metavar = "BOOL",
     .help = "let keylessd dump core and be traced by other processes of "
             "its user (off by default: a core dump holds the private keys)",
     .group = "Security"},

    /* ---- activation ---- */
    {.name = "hostname",
     .type = KL_OPT_STRING,
     .offset = F(hostname),
     .env = "KEYLESS_HOSTNAME",
     .flag = "hostname",
     .metavar = "NAME",
     .help = "this key server's hostname, as configured at Cloudflare (the "
             "name auth_cert is issued for)",
     .group = G_ACT},
    {.name = "zone_id",
     .type = KL_OPT_STRING,
     .offset = F(zone_id),
     .env = "KEYLESS_ZONE_ID",
     .flag = "zone-id",
     .metavar = "ID",
     .help = "Cloudflare zone id; sent with the activation request when "
             "set (the API finds the zone by hostname)",
     .group = G_ACT},
    {.name = "origin_ca_api_key",
     .type = KL_OPT_STRING,
     .offset = F(origin_ca_api_key),
     .env = "KEYLESS_ORIGIN_CA_API_KEY",
     .flag = "origin-ca-api-key",
     .metavar = "KEY",
     .help = "Cloudflare Origin CA API key (activation); never printed",
     .flags = KL_OPTF_SECRET,
     .group = G_ACT},
    {.name = "init_endpoint",
     .type = KL_OPT_STRING,
     .offset = F(init_endpoint),
     .env = "KEYLESS_INIT_ENDPOINT",
     .flag = "init-endpoint",
     .metavar = "URL",
     .help = "certificate API endpoint (activation): https:// (verified "
             "against the system's CAs), or http:// to a loopback address "
             "only",
     .group = G_ACT},
    {.name = "auth_csr",
     .type = KL_OPT_STRING,
     .offset = F(auth_csr),
     .env = "KEYLESS_AUTH_CSR",
     .flag = "auth-csr",
     .metavar = "PATH",
     .help = "where activation and --manual-activation write the "
             "certificate signing request (mode 0644)",
     .group = G_ACT},
    {.name = "auto_renew",
     .type = KL_OPT_BOOL,
     .offset = F(auto_renew),
     .env = "KEYLESS_AUTO_RENEW",
     .flag = "auto-renew",
     .metavar = "BOOL",
     .help = "when auth_cert has expired (or is unusable, or expires "
             "within 30 days) and API credentials are set, enrol again and "
             "replace auth_key and auth_cert, keeping the old files as "
             "*.bak (the reference does this silently; keylessd only when "
             "asked)",
     .group = G_ACT},
    {.name = "activation_timeout",
     .type = KL_OPT_DURATION,
     .offset = F(activation_timeout_ns),
     .min = 1000,
     .max = 10 * 60 * 1000,
     .env = "KEYLESS_ACTIVATION_TIMEOUT",
     .flag = "activation-timeout",
     .metavar = "DURATION",
     .help = "how long the whole certificate API call may take (connect, "
             "TLS, answer) before activation gives up",
     .group = G_ACT},

    /* ---- tracing ---- */
    {.name = "tracing_enabled",
     .type = KL_OPT_BOOL,
     .offset = F(tracing_enabled),
     .env = "KEYLESS_TRACING_ENABLED",
     .flag = "tracing-enabled",
     .metavar = "BOOL",
     .help = "export traces of requests",
     .group = G_TRACE},
    {.name = "tracing_address",
     .type = KL_OPT_STRING,
     .offset = F(tracing_address),
     .env = "KEYLESS_TRACING_ADDRESS",
     .flag = "tracing-address",
     .metavar = "HOST:PORT|URL",
     .help = "where traces go: an OTLP/HTTP URL, or the reference's Jaeger "
             "agent HOST:PORT, which is mapped to http://HOST:4318/v1/traces "
             "with a warning",
     .group = G_TRACE},
    {.name = "tracing_sample_rate",
     .type = KL_OPT_FLOAT,
     .offset = T(sample_rate),
     .min = 0,
     .max = 1,
     .env = "KEYLESS_TRACING_SAMPLE_RATE",
     .flag = "tracing-sample-rate",
     .metavar = "0..1",
     .help = "fraction of requests traced",
     .group = G_TRACE},

/* ---- geo routing: its rows live in options_router.inc ---- */
#include "daemon/options_router.inc"

/* ---- the fleet directory: options_fleet.inc ---- */
#include "daemon/options_fleet.inc"

/* ---- sealed keys: options_seal.inc ---- */
#include "daemon/options_seal.inc"

    /* ---- modes ---- */
    {.name = "check",
     .type = KL_OPT_MODE,
     .offset = F(check),
     .flag = "check",
     .help = "check the configuration, the certificates, every key, the "
             "access lists, the routing table and the router's certificate "
             "- everything a start would refuse or warn about - print each "
             "problem, and exit (0: all fine, 1: problems)",
     .flags = KL_OPTF_NO_YAML,
     .group = G_MODES},
    {.name = "keystore_debug",
     .type = KL_OPT_MODE,
     .offset = F(keystore_debug),
     .flag = "keystore-debug",
     .short_flag = 'd',
     .help = "load the key stores, list every key (file, type, size, SKI) "
             "and exit",
     .flags = KL_OPTF_NO_YAML,
     .group = G_MODES},
    {.name = "output_config",
     .type = KL_OPT_MODE,
     .offset = F(output_config),
     .flag = "output-config",
     .short_flag = 'o',
     .help = "print the effective configuration as YAML (secrets redacted) "
             "and exit",
     .flags = KL_OPTF_NO_YAML,
     .group = G_MODES},
    {.name = "config_only",
     .type = KL_OPT_MODE,
     .offset = F(config_only),
     .flag = "config-only",
     .help = "prepare the server's identity and exit without serving: "
             "enrol with the Origin CA as a start would (see hostname, "
             "origin_ca_api_key, auto_renew), check auth_cert and auth_key "
             "and report what is missing",
     .flags = KL_OPTF_NO_YAML,
     .group = G_MODES},
    {.name = "manual_activation",
     .type = KL_OPT_MODE,
     .offset = F(manual_activation),
     .flag = "manual-activation",
     .help = "write a new auth_key (or keep an existing one) and a CSR "
             "for hostname to auth_csr, and exit; have the CSR signed and "
             "save the certificate as auth_cert",
     .flags = KL_OPTF_NO_YAML,
     .group = G_MODES},
    {.name = "renew",
     .type = KL_OPT_MODE,
     .offset = F(renew),
     .flag = "renew",
     .help = "as auto_renew: true, for this start only",
     .flags = KL_OPTF_NO_YAML,
     .group = G_MODES},
    {.name = "version",
     .type = KL_OPT_MODE,
     .offset = F(version),
     .flag = "version",
     .short_flag = 'v',
     .help = "print the version and exit",
     .flags = KL_OPTF_NO_YAML,
     .group = G_MODES},
    {.name = "help",
     .type = KL_OPT_MODE,
     .offset = F(help),
     .flag = "help",
     .short_flag = 'h',
     .help = "print this help and exit",
     .flags = KL_OPTF_NO_YAML,
     .group = G_MODES},
    {.name = "help_markdown",
     .type = KL_OPT_MODE,
     .offset = F(help_markdown),
     .flag = "help-markdown",
     .help = "print the option reference of docs/OPERATIONS.md and exit",
     .flags = KL_OPTF_NO_YAML,
     .group = G_MODES},

    {.name = "help_man",
     .type = KL_OPT_MODE,
     .offset = F(help_man),
     .flag = "help-man",
     .help = "print the OPTIONS section of keylessd(8) in roff and exit",
     .flags = KL_OPTF_NO_YAML,
     .group = G_MODES},
};

/* Every default: a module's options take its defaults struct, the
 * options kept in kl_config (the process's own) get theirs here. Zero,
 * false and unset need no line. Strings are static (kl_config_new copies
 * them). */
static void defaults(kl_config *c)
{
    kl_settings *s = kl_settings_of(c);
    s->server = kl_server_defaults;
    s->pool = kl_pool_defaults;
    s->router = kl_router_defaults;
    s->tracing = kl_tracer_defaults;
    s->metrics_http = kl_metrics_http_defaults;
    c->loglevel = KL_LOG_DEFAULT_LEVEL;
    c->log_format = (char *)kl_log_format_name(KL_LOG_DEFAULT_FORMAT);
    c->auth_cert = "server.pem";
    c->auth_key = "server-key.pem";
    c->cloudflare_ca_cert = "keyless_cacert.pem";
    c->watch_key_dirs = true;
    c->watch_delay_ns = 500 * KL_NS_PER_MS;
    c->metrics_identities = true;
    c->tls13 = true;
    c->init_endpoint = "https://api.cloudflare.com/client/v4/certificates/";
    c->auth_csr = "server.csr";
    c->activation_timeout_ns = 30 * KL_NS_PER_S;
    c->tracing_address = "localhost:6831";
    c->fleet_prefix = "/keyless/";
    c->fleet_role = "keys";
    c->fleet_priority = 100;
    c->fleet_lease_ttl = 10;
    c->fleet_drain_delay_ns = KL_NS_PER_S;
}

_Static_assert(offsetof(kl_settings, cfg) == 0,
               "the loader's kl_config starts the settings");

const kl_opt_table kl_daemon_options = {
    .rows = options,
    .count = sizeof options / sizeof options[0],
    .size = sizeof(kl_settings),
    .defaults = defaults,
    .check = check,
};
