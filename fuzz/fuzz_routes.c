/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the routing table parser (src/router/table*.c).
 * Any input must give KL_OK (and a table whose lookups work) or
 * KL_E_CONFIG with a "file:line"-style message, never a crash or a leak.
 * dns: entries resolve through a stub, so no network is touched. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "router/table.h"

static size_t stub(const char *host, char (*out)[64], size_t max, void *arg)
{
    (void)arg;
    if (!max || host[0] == 'x')
        return 0; /* "does not resolve" */
    snprintf(out[0], 64, "127.0.0.1");
    if (max > 1 && strlen(host) % 2)
        snprintf(out[1], 64, "::1");
    return max > 1 && strlen(host) % 2 ? 2 : 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kl_rt_table *t = NULL;
    char err[512];
    err[0] = 0;
    kl_status st = kl_rt_table_parse("fuzz.yaml", data, size, stub, NULL, &t,
                                     err, sizeof err);
    if (st != KL_OK && st != KL_E_CONFIG && st != KL_E_NOMEM)
        __builtin_trap();
    if (st == KL_E_CONFIG && strncmp(err, "fuzz.yaml", 9) != 0)
        __builtin_trap(); /* every error names the file */
    if (st == KL_OK) {
        for (size_t i = 0; i < t->nkeys; i++) {
            const kl_rt_key *k = kl_rt_find(t, t->keys[i].ski);
            if (k != &t->keys[i] || !k->nservers)
                __builtin_trap();
            for (size_t j = 0; j < k->nservers; j++) {
                if (k->servers[j] >= t->nservers)
                    __builtin_trap();
                (void)kl_rt_allowed(t, k, &t->servers[k->servers[j]], true,
                                    (uint8_t)i);
            }
        }
        /* sealing attributes (docs/ROUTING.md "Sealed keys"): each
         * server's range lies in the pool, names and values non-empty */
        for (size_t i = 0; i < t->nservers; i++) {
            const kl_rt_server *s = &t->servers[i];
            if ((size_t)s->attr_first + s->nattrs > t->nsattrs ||
                s->nattrs > KL_RT_MAX_ATTRS + 1u)
                __builtin_trap();
            for (uint32_t a = 0; a < s->nattrs; a++)
                if (!t->sattrs[s->attr_first + a].name[0] ||
                    !t->sattrs[s->attr_first + a].value[0])
                    __builtin_trap();
        }
        kl_rt_table_free(t);
    }
    return 0;
}
