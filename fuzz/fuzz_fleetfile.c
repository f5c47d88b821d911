/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the fleet file parser (seal/fleetfile.h, docs/SEALING.md
 * "The fleet file"). Any bytes give a fleet or an error "fleet.yaml:LINE:
 * ..." - never a crash, a hang or a leak. An accepted fleet is then asked
 * which recipients two policies select: every node selected satisfies
 * the policy and is not revoked, every escrow recipient comes after. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "seal/fleetfile.h"

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            abort();                                                           \
    } while (0)

static void select_with(const kl_fleetfile *f, const char *text)
{
    kl_policy *p = NULL;
    char err[200];
    CHECK(kl_policy_parse(text, strlen(text), &p, NULL, err, sizeof err) ==
          KL_OK);
    kl_sealed_to *to = NULL;
    size_t n = 0, nodes = 0;
    kl_status st = kl_fleetfile_select(f, p, &to, &n, &nodes);
    CHECK(st == KL_OK || (st == KL_E_NOT_FOUND && nodes == 0 && !to));
    if (st == KL_OK) {
        CHECK(n == nodes + f->n_escrow);
        for (size_t i = 0; i < n; i++)
            CHECK(to[i].kind ==
                  (i < nodes ? KL_SEALED_NODE : KL_SEALED_ESCROW));
    }
    free(to);
    kl_policy_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kl_fleetfile *f = NULL;
    char err[512] = "";
    kl_status st =
        kl_fleetfile_parse("fleet.yaml", data, size, &f, err, sizeof err);
    if (st != KL_OK) {
        CHECK(f == NULL && (st == KL_E_CONFIG || st == KL_E_NOMEM));
        CHECK(strncmp(err, "fleet.yaml", 10) == 0);
        return 0;
    }
    CHECK(f->n_nodes >= 1);
    for (size_t i = 0; i < f->n_nodes; i++)
        CHECK(f->nodes[i].name[0] &&
              f->nodes[i].pk_len == kl_hpke_pk_len(f->nodes[i].kem));
    select_with(f, "region=eu-west or region=eu-central");
    select_with(f, "not tier=edge");
    kl_fleetfile_free(f);
    return 0;
}
