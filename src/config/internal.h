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

void kl_cfg_warn(kl_config *cfg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Writes "<prefix>: <msg>" into err and returns KL_E_CONFIG. */
kl_status kl_cfg_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
