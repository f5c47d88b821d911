/* SPDX-License-Identifier: Apache-2.0 */
/* Private to src/config. */
#ifndef KL_CONFIG_INTERNAL_H
#define KL_CONFIG_INTERNAL_H

#include "config/config.h"

/* Sets option o from text. On failure writes "<name>: <problem and fix>"
 * into err (the caller prefixes the location). */
KL_WUR kl_status kl_opt_set(kl_config *cfg, const kl_option *o,
                            const char *text, char *err, size_t errlen);

KL_WUR kl_status kl_cfg_add_store(kl_config *cfg, kl_store_kind kind,
                                  const char *path);

/* private_key_stores from YAML text (the environment or a flag), in flow
 * form: "[{dir: /k}, {uri: 'pkcs11:...'}]". Replaces the stores so far. */
KL_WUR kl_status kl_cfg_set_stores_text(kl_config *cfg, const char *text,
                                        char *err, size_t errlen);
void kl_cfg_clear_stores(kl_config *cfg);

/* The configuration file to read: named (flag, environment) or found in the
 * search directories; NULL when none. Adds a warning when a directory holds
 * more than one candidate. The result is malloc'd. */
KL_WUR kl_status kl_cfg_find_file(kl_config *cfg, const char *named, char **out,
                                  char *err, size_t errlen);

/* Derived fields: stores from private_key_dirs/files, current_time, the
 * tracing endpoint; cross-option checks. */
KL_WUR kl_status kl_cfg_derive(kl_config *cfg, char *err, size_t errlen);

/* Whether option i starts a new group (headings in help and docs). */
bool kl_cfg_new_group(const kl_option *opts, size_t i);

void kl_cfg_warn(kl_config *cfg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A problem that stops loading: with cfg->collect_errors (--check) it is
 * recorded in cfg->errors and KL_OK returned, so that loading goes on;
 * otherwise st as it is. */
kl_status kl_cfg_collect(kl_config *cfg, kl_status st, const char *err);

/* Writes "<prefix>: <msg>" into err and returns KL_E_CONFIG. */
kl_status kl_cfg_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
