/* SPDX-License-Identifier: Apache-2.0 */
/* Building a routing table (table.c), driven by the YAML reader
 * (table_yaml.c). Private to src/router and its unit tests. */
#ifndef KL_ROUTER_TABLE_INT_H
#define KL_ROUTER_TABLE_INT_H

#include <yaml.h>

#include "router/table.h"

#define KL_RT_MAX_SERVERS 4096u
#define KL_RT_MAX_DNS_ADDRS 16u

typedef struct kl_rt_regions {
    bool set; /* a policy was given */
    char (*names)[KL_RT_NAME_MAX + 1];
    size_t n;
} kl_rt_regions;

typedef struct kl_rt_set {
    char name[KL_RT_NAME_MAX + 1];
    uint8_t (*skis)[KL_SKI_LEN];
    size_t nskis, cap;
    kl_rt_regions regions;
} kl_rt_set;

typedef struct kl_rt_pair { /* server idx serves ski */
    uint8_t ski[KL_SKI_LEN];
    uint32_t server;
} kl_rt_pair;

typedef struct kl_rt_policy {
    uint8_t ski[KL_SKI_LEN];
    kl_rt_regions regions;
} kl_rt_policy;

typedef struct kl_rt_build {
    const char *path;
    char *err;
    size_t errlen;
    yaml_document_t *doc;
    kl_rt_resolve_fn resolve;
    void *resolve_arg;
    kl_rt_table *t;
    size_t server_cap;
    kl_rt_set *sets;
    size_t nsets, sets_cap;
    kl_rt_pair *pairs;
    size_t npairs, pairs_cap;
    kl_rt_policy *policies;
    size_t npolicies, policies_cap;
} kl_rt_build;

bool kl_rt_parse_ski(const char *hex, uint8_t ski[KL_SKI_LEN]);

KL_WUR kl_status kl_rt_build_init(kl_rt_build *b, const char *path, char *err,
                                  size_t errlen, kl_rt_resolve_fn resolve,
                                  void *resolve_arg);
void kl_rt_build_abort(kl_rt_build *b);
/* Sorts, merges and checks; frees the build state either way. */
KL_WUR kl_status kl_rt_build_finish(kl_rt_build *b, kl_rt_table **out);

kl_rt_set *kl_rt_build_find_set(kl_rt_build *b, const char *name);
KL_WUR kl_status kl_rt_build_add_set(kl_rt_build *b, const char *name,
                                     kl_rt_set **out);
KL_WUR kl_status kl_rt_build_set_ski(kl_rt_build *b, kl_rt_set *s,
                                     const uint8_t ski[KL_SKI_LEN]);
/* Copies r. */
KL_WUR kl_status kl_rt_build_key_policy(kl_rt_build *b,
                                        const uint8_t ski[KL_SKI_LEN],
                                        const kl_rt_regions *r);
bool kl_rt_build_find_server_name(kl_rt_build *b, const char *name);
KL_WUR kl_status kl_rt_build_add_server(kl_rt_build *b, const kl_rt_server *s);
/* Resolves s->host and adds one server per address; *count gets how
 * many (0: the name did not resolve). */
KL_WUR kl_status kl_rt_build_add_dns(kl_rt_build *b, const kl_rt_server *s,
                                     size_t *count);
/* Servers first..first+count-1 serve the SKI / every SKI of the set. */
KL_WUR kl_status kl_rt_build_serve_ski(kl_rt_build *b, size_t first,
                                       size_t count,
                                       const uint8_t ski[KL_SKI_LEN]);
KL_WUR kl_status kl_rt_build_serve_set(kl_rt_build *b, size_t first,
                                       size_t count, const kl_rt_set *s);

#endif
