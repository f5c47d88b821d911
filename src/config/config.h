/* SPDX-License-Identifier: Apache-2.0 */
/* Loading a configuration: one table of options (a program's own;
 * keylessd's is daemon/options.c) drives the YAML file, the KEYLESS_*
 * environment, the command-line flags, validation, --help, --output-config
 * and docs/OPERATIONS.md. Precedence: flag > environment > file > default.
 * Every key of the reference server's gokeyless.yaml is an option of
 * keylessd, with the reference's default (a drop-in replacement;
 * docs/OPERATIONS.md "Migrating from gokeyless"). */
#ifndef KL_CONFIG_CONFIG_H
#define KL_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"

typedef enum kl_store_kind {
    KL_STORE_DIR = 1,
    KL_STORE_FILE = 2,
    KL_STORE_URI = 3, /* PKCS#11 URI (RFC 7512), HSM keys */
} kl_store_kind;

/* One entry of private_key_stores (or of --private-key-dirs/-files). */
typedef struct kl_store_cfg {
    kl_store_kind kind;
    char *path;
} kl_store_cfg;

struct kl_opt_table;

/* The loader's state and the options the process itself uses (identity,
 * logging, keys, activation, modes). A program's configuration embeds it
 * as its first member, followed by each module's options struct; the
 * program's option table (kl_opt_table) points into that whole struct
 * (docs/DESIGN.md, "The map": where an option travels). */
typedef struct kl_config {
    const struct kl_opt_table *table; /* the rows that fill this config */
    /* options (fields named as their YAML keys) */
    int loglevel;
    char *log_format; /* "text" or "json" */
    char *hostname;
    char *zone_id;
    char *origin_ca_api_key; /* secret: redacted in --output-config */
    char *init_endpoint;
    char *auth_cert;
    char *auth_key;
    char *auth_csr;
    char *cloudflare_ca_cert;
    char *pid_file;
    char *current_time; /* RFC 3339; see current_time_unix */
    bool tracing_enabled;
    char *tracing_address;
    uint64_t sign_timeout_ns;
    int sign_retry_count;
    char *private_key_dirs;  /* comma list: replaces private_key_stores */
    char *private_key_files; /* comma list: replaces private_key_stores */
    bool allow_group_readable_keys;
    char *openssl_providers; /* comma list of names or module paths */
    char *key_propquery;     /* for key operations; unset: defaults */
    char *async_providers;   /* comma list; unset: none */
    bool watch_key_dirs;
    uint64_t watch_delay_ns;
    bool auto_renew;
    uint64_t activation_timeout_ns; /* whole Origin CA API call */
    int realtime_priority;          /* 0: normal scheduling (core/sched.h) */
    /* hardening (docs/SECURITY.md) */
    bool allow_core_dumps;
    char *access_file; /* access lists (engine/acl.h); unset: none */
    bool tls13;
    char *config_file;
    bool metrics_identities; /* false: no CN, SAN, serial, path in labels */
    /* sealed keys (docs/SEALING.md; options_seal.inc) */
    char *sealing_key;        /* unset: *.sealed files are held elsewhere */
    char *sealing_attributes; /* "name=value,..."; unset: not checked */
    /* the fleet directory (docs/FLEET.md); fleet_etcd_endpoints unset: no
     * fleet (options_fleet.inc) */
    char *fleet_etcd_endpoints; /* comma list */
    char *fleet_etcd_ca, *fleet_etcd_cert, *fleet_etcd_key;
    /* etcd password auth: unset user: none */
    char *fleet_etcd_user, *fleet_etcd_password_file;
    char *fleet_prefix;
    char *fleet_name; /* unset: not registered, the directory only read */
    char *fleet_region;
    char *fleet_attributes; /* "k=v,k=v" */
    char *fleet_advertise_host;
    int fleet_advertise_port; /* 0: port */
    char *fleet_role;         /* keys, egress, router */
    char *fleet_key_sets;     /* comma list */
    int fleet_priority;
    int fleet_lease_ttl;           /* seconds */
    uint64_t fleet_drain_delay_ns; /* 0: stop at once */
    /* modes (flags only) */
    bool help, help_markdown, help_man, version, check, keystore_debug,
        output_config, config_only, manual_activation, renew;

    /* derived by kl_config_load() */
    kl_store_cfg *stores; /* private_key_stores, then dirs, then files */
    size_t nstores;
    const char *loaded_file; /* the config file read, or NULL */
    bool has_current_time;
    int64_t current_time_unix; /* current_time in seconds since 1970 */
    /* tracing_address as the OTLP/HTTP endpoint keylessd exports to */
    char *tracing_endpoint;
    /* Problems that do not stop startup (e.g. an unknown key, kept for
     * compatibility with the reference), one line each, for the caller to
     * log once the log level is known. */
    char **warnings;
    size_t nwarnings;
    /* --check (docs/OPERATIONS.md, Modes): a value that does not parse is
     * recorded here, one line each, and loading goes on with the other
     * values (the option keeps its default), so that every problem is
     * reported in one run. Otherwise the first one stops the load. */
    bool collect_errors;
    char **errors;
    size_t nerrors;
} kl_config;

/* A config of table->size bytes holding every option's default
 * (table->defaults). NULL on allocation failure. */
kl_config *kl_config_new(const struct kl_opt_table *table);
void kl_config_free(kl_config *cfg);

/* Applies, in order, the file (from -c/--config-file or KEYLESS_CONFIG_FILE,
 * else the first of gokeyless.yaml, gokeyless.yml, gokeyless.json,
 * keylessd.yaml, keylessd.yml, keylessd.json found in the working directory,
 * then in /etc/keyless), the environment (envp; NULL means the process
 * environment) and argv (argv[0] is the program name). On failure returns
 * KL_E_CONFIG with one message in err naming the file and line (or the flag
 * or variable), the option and the fix. When --help or --version is given
 * the rest is still parsed but not validated. */
KL_WUR kl_status kl_config_load(kl_config *cfg, int argc, char *const *argv,
                                char *const *envp, char *err, size_t errlen);

/* Applies a YAML document from memory as if it were the config file `name`
 * (for tests and the fuzzer). Derived fields are not updated. */
KL_WUR kl_status kl_config_apply_yaml(kl_config *cfg, const char *name,
                                      const uint8_t *text, size_t len,
                                      char *err, size_t errlen);

/* The directories searched for a configuration file when none is named
 * (NULL-terminated; default {".", "/etc/keyless", NULL}). For tests: the
 * array must outlive every later kl_config_load. NULL restores the default. */
void kl_config_set_search_dirs(const char *const *dirs);

/* Writes --help, generated from the option table. */
void kl_config_usage(const struct kl_opt_table *t, FILE *out, const char *prog);
/* Writes the option reference of docs/OPERATIONS.md (a Markdown table per
 * group), generated from the option table (--help-markdown). */
void kl_config_usage_markdown(const struct kl_opt_table *t, FILE *out);
/* Writes the OPTIONS section of keylessd(8) in roff (--help-man). */
void kl_config_usage_man(const struct kl_opt_table *t, FILE *out);
/* Writes the effective configuration as YAML that keylessd reads back
 * (--output-config): every file option, secrets (origin_ca_api_key, PINs in
 * PKCS#11 URIs) redacted. */
void kl_config_write_yaml(const kl_config *cfg, FILE *out);
/* A PKCS#11 URI with its pin-value replaced by "REDACTED" (malloc'd; NULL
 * when out of memory). */
char *kl_config_redact_uri(const char *uri);

/* ---- the option table (for --help and generated documentation) ---- */

typedef enum kl_opt_type {
    KL_OPT_INT, /* an int field */
    KL_OPT_BOOL,
    KL_OPT_STRING,   /* a char * (or a module's const char *) field holding a
                        copy the config owns and frees; NULL: unset */
    KL_OPT_DURATION, /* "10s", "500ms", "2m", "1h30m" into a uint64_t of ns */
    KL_OPT_STORES,   /* YAML list of {dir: ...} / {file: ...} maps */
    KL_OPT_MODE,     /* a flag without value: --help, --check */
    KL_OPT_FLOAT,    /* a decimal number within [min, max] */
    KL_OPT_U16,      /* INT into a uint16_t field */
    KL_OPT_U32,      /* INT into a uint32_t field */
    KL_OPT_SIZE,     /* INT into a size_t field */
} kl_opt_type;

enum {
    KL_OPTF_RELOADABLE = 1u, /* applied at SIGHUP (daemon/daemon_reload.c) */
    KL_OPTF_NO_YAML = 2u,    /* flag/environment only */
    KL_OPTF_TEST_ONLY = 4u,  /* for tests; marked as such in --help */
    KL_OPTF_SECRET = 8u,     /* redacted in --output-config */
    KL_OPTF_COMPAT = 16u,    /* accepted for the reference; see its help */
};

/* One row of an option table. There is no default here: the default is
 * the field's value after kl_opt_table.defaults (most of them a module's
 * own defaults struct), and --help prints it from there. */
typedef struct kl_option {
    const char *name; /* YAML key and field name */
    kl_opt_type type;
    size_t offset;       /* of the field in the table's struct */
    int64_t min, max;    /* INT: value bounds; DURATION: in milliseconds */
    const char *env;     /* KEYLESS_* variable, or NULL */
    const char *flag;    /* long flag without "--" ('-' and '_' both
                            accepted), or NULL */
    char short_flag;     /* or 0 */
    const char *metavar; /* for --help */
    const char *help;
    unsigned flags;    /* KL_OPTF_* */
    const char *group; /* heading in --help and OPERATIONS.md */
} kl_option;

/* A program's options: its rows, in --help order, over a struct of `size`
 * bytes that starts with a kl_config. */
typedef struct kl_opt_table {
    const kl_option *rows;
    size_t count;
    size_t size;
    /* Writes every option's default into a zeroed struct (strings as
     * literals: kl_config_new copies them). */
    void (*defaults)(kl_config *cfg);
    /* Checks between the program's own options (after the file, the
     * environment and the flags); NULL: none. "<name>: <problem and fix>"
     * into err and KL_E_CONFIG on failure. */
    kl_status (*check)(const kl_config *cfg, char *err, size_t errlen);
} kl_opt_table;

/* The value of option o in cfg as text ("2407", "30s", "true", the
 * string; "" for an unset string; secrets redacted; the stores as YAML flow
 * text). */
void kl_config_value_text(const kl_config *cfg, const kl_option *o, char *out,
                          size_t cap);
/* The default of option o as --help prints it; false when it has none (a
 * mode, the stores, a string unset by default). */
bool kl_config_default_text(const kl_opt_table *t, const kl_option *o,
                            char *out, size_t cap);
/* The option with this YAML name, or NULL. */
const kl_option *kl_config_find(const kl_opt_table *t, const char *name);

/* Value parsers shared by every source. On failure they write the problem
 * (without location) into err and return KL_E_CONFIG. */
KL_WUR kl_status kl_parse_duration(const char *s, uint64_t *ns);
KL_WUR kl_status kl_parse_bool(const char *s, bool *out);
/* Formats ns as the shortest exact duration ("1m30s", "500ms", "0s"). */
void kl_format_duration(uint64_t ns, char *out, size_t cap);

#endif
