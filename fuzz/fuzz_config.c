/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the YAML configuration file (src/config). Any input must
 * give KL_OK or KL_E_CONFIG with a message, never a crash or a leak. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config/config.h"
#include "daemon/settings.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kl_config *cfg = kl_daemon_config_new();
    if (!cfg)
        return 0;
    char err[512];
    err[0] = 0;
    kl_status st =
        kl_config_apply_yaml(cfg, "fuzz.yaml", data, size, err, sizeof err);
    if (st != KL_OK && st != KL_E_CONFIG && st != KL_E_NOMEM)
        __builtin_trap();
    if (st == KL_E_CONFIG && strlen(err) == 0)
        __builtin_trap(); /* every error must say what was wrong */
    kl_config_free(cfg);
    return 0;
}
