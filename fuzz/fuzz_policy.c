/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the sealing-policy parser (seal/policy.h, docs/DESIGN.md
 * "Sealing policies (src/seal/policy.c)"). Any bytes must give a policy,
 * or an error "at <offset>: ..." with the offset inside the text (or just
 * after it), never a crash or a leak. An accepted policy must print its
 * canonical form within the length limit, parse back to an equal policy
 * that prints the same bytes, and answer the same as the original for
 * every server below. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seal/policy.h"

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            abort();                                                           \
    } while (0)

typedef kl_policy_attr attr;

/* servers with none, one and several values per name, in the seeds'
 * vocabulary, so that evaluation takes both branches */
static const attr s_eu[] = {{"region", "eu-west"},
                            {"country", "ie"},
                            {"dc", "dub-1"},
                            {"tier", "edge"}};
static const attr s_us[] = {{"region", "us-west"},
                            {"country", "us"},
                            {"dc", "sjc-3"},
                            {"tier", "core"},
                            {"tier", "edge"}};
static const attr s_bare[] = {{"a", "1"}, {"b", "x:1"}, {"c", "10.0.0.1"}};
static const struct {
    const attr *a;
    size_t n;
} servers[] = {{s_eu, 4}, {s_us, 5}, {s_bare, 3}, {NULL, 0}};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kl_policy *p = (kl_policy *)1, *q = NULL;
    char err[256];
    size_t pos = SIZE_MAX;
    kl_status s =
        kl_policy_parse((const char *)data, size, &p, &pos, err, sizeof err);
    if (s != KL_OK) {
        CHECK(p == NULL);
        CHECK(s == KL_E_BAD_VALUE || s == KL_E_TOO_LARGE || s == KL_E_NOMEM);
        CHECK(pos <= size);
        char head[32];
        snprintf(head, sizeof head, "at %zu: ", pos);
        CHECK(strncmp(err, head, strlen(head)) == 0 &&
              strlen(err) > strlen(head));
        return 0;
    }
    static char c1[KL_POLICY_MAX_LEN + 1], c2[KL_POLICY_MAX_LEN + 1];
    size_t l1 = 0, l2 = 0;
    CHECK(kl_policy_print(p, c1, sizeof c1, &l1) == KL_OK);
    CHECK(l1 > 0 && l1 <= KL_POLICY_MAX_LEN && strlen(c1) == l1);
    /* one space between tokens at most, none at the ends */
    CHECK(c1[0] != ' ' && c1[l1 - 1] != ' ' && !strstr(c1, "  "));
    CHECK(kl_policy_parse(c1, l1, &q, NULL, err, sizeof err) == KL_OK);
    CHECK(kl_policy_equal(p, q) && kl_policy_equal(q, p));
    CHECK(kl_policy_print(q, c2, sizeof c2, &l2) == KL_OK);
    CHECK(l2 == l1 && memcmp(c1, c2, l1) == 0);
    for (size_t i = 0; i < sizeof servers / sizeof *servers; i++)
        CHECK(kl_policy_eval(p, servers[i].a, servers[i].n) ==
              kl_policy_eval(q, servers[i].a, servers[i].n));
    kl_policy_free(p);
    kl_policy_free(q);
    return 0;
}
