/* SPDX-License-Identifier: Apache-2.0 */
/* The routing table (docs/ROUTING.md): remote key servers with
 * their region and priority, the keys they serve (SKIs or key-set names),
 * the regions each key may be served from, and the compliance-region bytes
 * of tag 0x17 mapped to region names (protocol P9).
 *
 * A table is built from YAML (table_yaml.c) and is immutable once built:
 * a reload builds a new one and swaps it in whole, so a malformed file
 * leaves the previous table in place. Lookups are by SKI (sorted array,
 * binary search). */
#ifndef KL_ROUTER_TABLE_H
#define KL_ROUTER_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "keyless/protocol.h"

#define KL_RT_NAME_MAX 64

/* One remote key server as the table names it. A `dns:` entry is expanded
 * into one server per resolved address before the table is built (same
 * name, "#1", "#2"... appended). */
typedef struct kl_rt_server {
    char name[KL_RT_NAME_MAX + 8];
    char host[256];
    uint16_t port;
    char region[KL_RT_NAME_MAX + 1];
    int priority; /* lower is preferred when latencies tie; default 100 */
    void *remote; /* the router's runtime object (router thread only) */
    /* Sealed keys (docs/SEALING.md "keylessd and sealed keys"): whether
     * the server opens sealed keys at all, and its attributes, which the
     * policy of a sealed key held elsewhere is judged by: the table's
     * sattrs[attr_first .. attr_first + nattrs - 1]. */
    bool sealing;
    uint32_t attr_first, nattrs;
    /* connected at its first forwarded request, not when installed, and
     * probed only once it has a connection (a "keys" server's remotes for
     * its sealed keys: docs/FLEET.md "Sealed keys") */
    bool on_demand;
} kl_rt_server;

/* A sealing attribute of a server (name and value of the sealing policy
 * grammar; a name may have several values). */
#define KL_RT_ATTR_WORD 64
#define KL_RT_MAX_ATTRS 64 /* per server, besides the region (table_yaml.c) */
typedef struct kl_rt_sattr {
    char name[KL_RT_ATTR_WORD + 1];
    char value[KL_RT_ATTR_WORD + 1];
} kl_rt_sattr;

/* One SKI: who serves it and where it may be served from. */
typedef struct kl_rt_key {
    uint8_t ski[KL_SKI_LEN];
    uint32_t *servers; /* indices into table->servers */
    size_t nservers;
    bool any_region; /* no policy: any region may serve it */
    char (*regions)[KL_RT_NAME_MAX + 1];
    size_t nregions;
} kl_rt_key;

/* A `dns:` entry waiting for resolution. */
typedef struct kl_rt_dns {
    char host[256];
    uint16_t port;
    size_t server; /* the template entry in the parsed servers */
} kl_rt_dns;

typedef struct kl_rt_table {
    kl_rt_server *servers;
    size_t nservers;
    kl_rt_key *keys; /* sorted by SKI */
    size_t nkeys;
    /* A table from the fleet directory (table_fleet.c) has two layers:
     * idx maps each SKI to the key sets holding it (its keys' `servers`
     * are set indices, their regions the sets' policies), shared by every
     * table built while the sets stay the same; set_servers[i] lists the
     * servers serving set i. A membership change rebuilds only the second
     * layer, so its cost does not depend on the number of keys. keys is
     * then empty. */
    struct kl_rt_table *idx;
    uint32_t **set_servers;
    uint32_t *set_nservers;
    size_t nsets;
    unsigned refs;       /* idx only: tables sharing it (atomic); 0: unshared */
    kl_rt_sattr *sattrs; /* the servers' sealing attributes */
    size_t nsattrs, sattrs_cap;
    char region_of[256][KL_RT_NAME_MAX + 1]; /* tag 0x17 byte -> name, "" */
    size_t ndns; /* how many servers came from dns: entries */
    struct kl_rt_table *retired_next; /* the router's retired lists */
} kl_rt_table;

/* Resolves "host" for a dns: entry: fills up to max "a.b.c.d" / "v6"
 * literals; returns how many (0: failed). The router passes getaddrinfo;
 * tests pass a stub. */
typedef size_t (*kl_rt_resolve_fn)(const char *host, char (*out)[64],
                                   size_t max, void *arg);

/* Parses a YAML routing table. path names the file in messages (the bytes
 * are given). On error: KL_E_CONFIG and err holds "path:line: what; fix".
 * resolve may be NULL (dns: entries are then an error). */
KL_WUR kl_status kl_rt_table_parse(const char *path, const uint8_t *text,
                                   size_t len, kl_rt_resolve_fn resolve,
                                   void *resolve_arg, kl_rt_table **out,
                                   char *err, size_t errlen);
/* Reads and parses a file. */
KL_WUR kl_status kl_rt_table_load(const char *path, kl_rt_resolve_fn resolve,
                                  void *resolve_arg, kl_rt_table **out,
                                  char *err, size_t errlen);
void kl_rt_table_free(kl_rt_table *t);

/* The key's entry (in t->idx for a two-layer table), or NULL when no
 * server in the table serves it. */
const kl_rt_key *kl_rt_find(const kl_rt_table *t,
                            const uint8_t ski[KL_SKI_LEN]);

/* Whether server s may serve key k for a request with this compliance
 * byte (has_compliance false: no constraint from the request). */
bool kl_rt_allowed(const kl_rt_table *t, const kl_rt_key *k,
                   const kl_rt_server *s, bool has_compliance,
                   uint8_t compliance);

/* The servers that serve k, for each until fn returns false: k->servers
 * for a file table, the servers of each of k's sets for a two-layer one
 * (a server may come twice when it serves two of them). */
void kl_rt_each_server(const kl_rt_table *t, const kl_rt_key *k,
                       bool (*fn)(void *arg, const kl_rt_server *s), void *arg);
/* Appends a sealing attribute to t->sattrs for the server being added
 * (its attr_first is the count before its first one). KL_E_NOMEM. */
KL_WUR kl_status kl_rt_table_add_sattr(kl_rt_table *t, const char *name,
                                       const char *value);

/* Keys the table routes (the key index's for a two-layer table). */
size_t kl_rt_nkeys(const kl_rt_table *t);

/* Compares two tables' DNS expansions: true when the servers (name, host,
 * port) are the same, so a DNS refresh that changed nothing is ignored. */
bool kl_rt_same_servers(const kl_rt_table *a, const kl_rt_table *b);

#endif
