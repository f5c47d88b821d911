/* SPDX-License-Identifier: Apache-2.0 */
/* What the daemon hands each module: its options struct from the
 * settings, with the values that come from more than one option worked out
 * here and nowhere else (settings.h). */
#include "daemon/settings.h"

kl_server_opts kl_settings_server(const kl_settings *s)
{
    kl_server_opts o = s->server;
    /* sign_timeout (the reference's) is the request deadline unless
     * max_queue_time says otherwise (docs/OPERATIONS.md, the options). */
    if (!o.max_queue_time_ns)
        o.max_queue_time_ns = s->cfg.sign_timeout_ns;
    return o;
}
