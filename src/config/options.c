/* The option table (style.md 10). One row per option: everything that
 * parses, validates, documents or reloads it is driven from here. Defaults
 * follow the reference server where it has the option. */
#include <stddef.h>
#include <string.h>

#include "config/config.h"

#define F(field) offsetof(kl_config, field)
#define DAY_MS (24ll * 3600 * 1000)

static const kl_option options[] = {
    {"config_file", KL_OPT_STRING, F(config_file), 0, 0, NULL,
     "KEYLESS_CONFIG_FILE", "config-file", 'c', "PATH",
     "YAML configuration file (default: ./gokeyless.yaml or ./gokeyless.yml "
     "when present)",
     KL_OPTF_NO_YAML},
    {"loglevel", KL_OPT_INT, F(loglevel), 0, 5, "1", "KEYLESS_LOGLEVEL",
     "loglevel", 0, "N",
     "log level: 0 debug, 1 info, 2 warning, 3 error, 4 critical, 5 fatal",
     KL_OPTF_RELOADABLE},
    {"port", KL_OPT_INT, F(port), 1, 65535, "2407", "KEYLESS_PORT", "port", 0,
     "PORT", "TCP port to listen on", 0},
    {"listen_address", KL_OPT_STRING, F(listen_address), 0, 0, "0.0.0.0",
     "KEYLESS_LISTEN_ADDRESS", "listen-address", 0, "ADDR",
     "IP address to listen on (\"::\" for all IPv6 and IPv4 addresses)", 0},
    {"auth_cert", KL_OPT_STRING, F(auth_cert), 0, 0, "server.pem",
     "KEYLESS_AUTH_CERT", "auth-cert", 0, "PATH",
     "the key server's own TLS certificate chain (PEM)", KL_OPTF_RELOADABLE},
    {"auth_key", KL_OPT_STRING, F(auth_key), 0, 0, "server-key.pem",
     "KEYLESS_AUTH_KEY", "auth-key", 0, "PATH",
     "the private key of auth_cert (PEM)", KL_OPTF_RELOADABLE},
    {"cloudflare_ca_cert", KL_OPT_STRING, F(cloudflare_ca_cert), 0, 0,
     "keyless_cacert.pem", "KEYLESS_CLOUDFLARE_CA_CERT", "cloudflare-ca-cert",
     0, "PATH", "CA certificate(s) that client certificates must chain to",
     KL_OPTF_RELOADABLE},
    {"private_key_stores", KL_OPT_STORES, 0, 0, 0, NULL, NULL, NULL, 0, NULL,
     "YAML list of key stores, each {dir: PATH} (every *.key below PATH) or "
     "{file: PATH}",
     KL_OPTF_RELOADABLE},
    {"private_key_dirs", KL_OPT_STRING, F(private_key_dirs), 0, 0, NULL,
     "KEYLESS_PRIVATE_KEY_DIRS", "private-key-dirs", 0, "DIR,...",
     "comma-separated key directories, added to private_key_stores",
     KL_OPTF_RELOADABLE},
    {"private_key_files", KL_OPT_STRING, F(private_key_files), 0, 0, NULL,
     "KEYLESS_PRIVATE_KEY_FILES", "private-key-files", 0, "FILE,...",
     "comma-separated key files, added to private_key_stores",
     KL_OPTF_RELOADABLE},
    {"allow_group_readable_keys", KL_OPT_BOOL, F(allow_group_readable_keys), 0,
     0, "false", "KEYLESS_ALLOW_GROUP_READABLE_KEYS",
     "allow-group-readable-keys", 0, "BOOL",
     "accept key files that group or others can read", KL_OPTF_RELOADABLE},
    {"shards", KL_OPT_INT, F(shards), 0, 1024, "0", "KEYLESS_SHARDS", "shards",
     0, "N",
     "event-loop threads, each with its own listening socket (0: one per CPU)",
     0},
    {"workers", KL_OPT_INT, F(workers), 0, 1024, "0", "KEYLESS_WORKERS",
     "workers", 0, "N", "crypto worker threads (0: one per CPU)", 0},
    {"max_inflight_per_conn", KL_OPT_INT, F(max_inflight_per_conn), 1, 1 << 20,
     "1024", "KEYLESS_MAX_INFLIGHT_PER_CONN", "max-inflight-per-conn", 0, "N",
     "requests in flight per connection before it stops being read "
     "(protocol P8 asks for at least 1024)",
     0},
    {"max_inflight", KL_OPT_INT, F(max_inflight), 1, 1 << 24, "65536",
     "KEYLESS_MAX_INFLIGHT", "max-inflight", 0, "N",
     "requests in flight in the whole process before connections stop being "
     "read",
     0},
    {"idle_timeout", KL_OPT_DURATION, F(idle_timeout_ns), 1, DAY_MS, "30s",
     "KEYLESS_IDLE_TIMEOUT", "idle-timeout", 0, "DURATION",
     "close a connection that sent no complete request for this long", 0},
    {"handshake_timeout", KL_OPT_DURATION, F(handshake_timeout_ns), 1,
     3600 * 1000, "10s", "KEYLESS_HANDSHAKE_TIMEOUT", "handshake-timeout", 0,
     "DURATION", "close a connection whose TLS handshake takes longer", 0},
    {"drain_timeout", KL_OPT_DURATION, F(drain_timeout_ns), 0, 3600 * 1000,
     "5s", "KEYLESS_DRAIN_TIMEOUT", "drain-timeout", 0, "DURATION",
     "at idle timeout or shutdown, how long in-flight requests may finish", 0},
    {"max_queue_time", KL_OPT_DURATION, F(max_queue_time_ns), 0, 3600 * 1000,
     "0s", "KEYLESS_MAX_QUEUE_TIME", "max-queue-time", 0, "DURATION",
     "answer `internal error` instead of running a request that waited "
     "longer than this (0: no limit)",
     0},
    {"tls13", KL_OPT_BOOL, F(tls13), 0, 0, "true", "KEYLESS_TLS13", "tls13", 0,
     "BOOL", "offer TLS 1.3 besides the TLS 1.2 compatibility profile", 0},
    {"test_delay", KL_OPT_STRING, F(test_delay), 0, 0, NULL, NULL, "test-delay",
     0, "SKIHEX:MS,...",
     "TEST ONLY: delay every request on the key with this SKI by MS "
     "milliseconds before executing it (for out-of-order tests)",
     KL_OPTF_NO_YAML | KL_OPTF_TEST_ONLY},
    {"check", KL_OPT_MODE, F(check), 0, 0, NULL, NULL, "check", 0, NULL,
     "validate the configuration, load the keys and exit (0 when fine)",
     KL_OPTF_NO_YAML},
    {"version", KL_OPT_MODE, F(version), 0, 0, NULL, NULL, "version", 0, NULL,
     "print the version and exit", KL_OPTF_NO_YAML},
    {"help", KL_OPT_MODE, F(help), 0, 0, NULL, NULL, "help", 'h', NULL,
     "print this help and exit", KL_OPTF_NO_YAML},
};

const kl_option *kl_config_options(size_t *count)
{
    *count = sizeof options / sizeof options[0];
    return options;
}

const kl_option *kl_config_find(const char *name)
{
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
        if (strcmp(options[i].name, name) == 0)
            return &options[i];
    return NULL;
}
