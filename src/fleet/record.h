/* SPDX-License-Identifier: Apache-2.0 */
/* The fleet directory's records (docs/FLEET.md "The etcd layout"): a
 * server's record (JSON, on its lease), a key set's meta (JSON) and the
 * names of the keys they live under. Pure functions over bytes read from
 * etcd, which are untrusted (another server, an operator's etcdctl):
 * every parser checks types, lengths and character sets and fails with a
 * sentence naming the field, never a partial result (fuzzed by
 * fuzz/fuzz_fleet_record.c). */
#ifndef KL_FLEET_RECORD_H
#define KL_FLEET_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define KL_FLEET_FORMAT 1
#define KL_FLEET_NAME_MAX 64   /* server, region and set names */
#define KL_FLEET_ATTR_MAX 16   /* attributes of one server */
#define KL_FLEET_ATTR_KEY 32   /* an attribute's name */
#define KL_FLEET_ATTR_VAL 64   /* an attribute's value */
#define KL_FLEET_HOST_MAX 255  /* a DNS name or an address literal */
#define KL_FLEET_MAX_SETS 4096 /* sets one server serves */
#define KL_FLEET_MAX_REGIONS 64
#define KL_FLEET_SKI_LEN 20
/* SKIs in one chunk: 1,000,000 bytes, well under etcd's 1.5 MiB request
 * limit with the key and the base64 the gateway adds (x 4/3). */
#define KL_FLEET_CHUNK_SKIS 50000u

typedef enum kl_fleet_role {
    KL_FLEET_ROLE_KEYS,   /* holds keys and answers for them */
    KL_FLEET_ROLE_EGRESS, /* forwards a pod's remote traffic */
    KL_FLEET_ROLE_ROUTER, /* routes only, holds no keys */
} kl_fleet_role;

typedef enum kl_fleet_health {
    KL_FLEET_HEALTH_OK,
    KL_FLEET_HEALTH_DEGRADED, /* serving, with a fault (a token, a pool) */
    KL_FLEET_HEALTH_DRAINING, /* shutting down: choose it last */
} kl_fleet_health;

typedef struct kl_fleet_attr {
    char key[KL_FLEET_ATTR_KEY + 1];
    char value[KL_FLEET_ATTR_VAL + 1];
} kl_fleet_attr;

/* A sealing attribute (docs/SEALING.md): name and value in the sealing
 * policy grammar (seal/policy.h), so a policy can name every one; a
 * name may have several values. */
#define KL_FLEET_SEAL_WORD 64       /* a sealing attribute's name or value */
#define KL_FLEET_SEAL_ATTRS 64      /* sealing attribute values of a server */
#define KL_FLEET_SEAL_PK_MAX 65     /* an uncompressed P-256 point */
#define KL_FLEET_KEM_P256 0x0010u   /* DHKEM(P-256, HKDF-SHA256) */
#define KL_FLEET_KEM_X25519 0x0020u /* DHKEM(X25519, HKDF-SHA256) */
typedef struct kl_fleet_sattr {
    char name[KL_FLEET_SEAL_WORD + 1];
    char value[KL_FLEET_SEAL_WORD + 1];
} kl_fleet_sattr;

typedef struct kl_fleet_server {
    char name[KL_FLEET_NAME_MAX + 1];
    char region[KL_FLEET_NAME_MAX + 1];
    kl_fleet_attr attrs[KL_FLEET_ATTR_MAX];
    size_t nattrs;
    char host[KL_FLEET_HOST_MAX + 1];
    uint16_t port;
    kl_fleet_role role;
    int priority; /* lower is preferred when latencies tie; 100 */
    char (*sets)[KL_FLEET_NAME_MAX + 1]; /* malloc'd */
    size_t nsets;
    kl_fleet_health health;
    int64_t started; /* Unix seconds */
    char version[KL_FLEET_NAME_MAX + 1];
    /* Sealed keys (docs/FLEET.md "The server record", "sealing"): the
     * server's sealing public key (seal_kem 0: it publishes none, and
     * opens no sealed key) and the attributes sealing policies are judged
     * by (seal_attrs malloc'd). */
    uint16_t seal_kem; /* KL_FLEET_KEM_X25519 or KL_FLEET_KEM_P256 */
    uint8_t seal_pk[KL_FLEET_SEAL_PK_MAX];
    size_t seal_pk_len; /* 32 or 65 */
    kl_fleet_sattr *seal_attrs;
    size_t n_seal_attrs;
} kl_fleet_server;

typedef struct kl_fleet_set_meta {
    int64_t generation;  /* >= 1; a new publish writes generation + 1 */
    int64_t keys;        /* SKIs in the set */
    uint32_t chunk_skis; /* SKIs a chunk holds (the last may hold fewer) */
    uint32_t chunks;     /* ceil(keys / chunk_skis) */
    uint8_t sha256[32];  /* of the set's SKIs, sorted, concatenated */
    bool any_region;     /* no "regions": any region may serve it */
    char (*regions)[KL_FLEET_NAME_MAX + 1]; /* malloc'd */
    size_t nregions;
} kl_fleet_set_meta;

/* The compliance-region bytes of tag 0x17 (protocol P9) mapped to region
 * names, as the table file's region_codes: "" for an unmapped byte. */
typedef struct kl_fleet_regions {
    char name[256][KL_FLEET_NAME_MAX + 1];
} kl_fleet_regions;

/* Names: 1..64 of letters, digits, '.', '_' and '-', not starting with
 * '.' (so a name is one path element and never "." or ".."). */
bool kl_fleet_name_ok(const char *s, size_t len);
const char *kl_fleet_role_name(kl_fleet_role r);
const char *kl_fleet_health_name(kl_fleet_health h);
/* "keys", "egress", "router"; false for anything else. */
bool kl_fleet_role_parse(const char *s, kl_fleet_role *out);

void kl_fleet_server_clear(kl_fleet_server *s);
/* A deep copy of src into dst (cleared first); KL_E_NOMEM. */
kl_status kl_fleet_server_copy(kl_fleet_server *dst,
                               const kl_fleet_server *src) KL_WUR;
/* The sealing-policy grammar's character sets (seal/policy.h
 * kl_policy_name_ok / kl_policy_value_ok, which src/fleet may not
 * include; tests/unit/fleet/test_fleet_record.c compares them). */
bool kl_fleet_seal_name_ok(const char *s, size_t len);
bool kl_fleet_seal_value_ok(const char *s, size_t len);
/* Sets the sealing key (kem and its public key bytes: 32 for X25519, 65
 * uncompressed for P-256) and appends a sealing attribute; checked,
 * KL_E_BAD_VALUE with err saying what is wrong. */
kl_status kl_fleet_server_set_sealing(kl_fleet_server *s, uint16_t kem,
                                      const uint8_t *pk, size_t len, char *err,
                                      size_t errlen) KL_WUR;
kl_status kl_fleet_server_add_seal_attr(kl_fleet_server *s, const char *name,
                                        const char *value, char *err,
                                        size_t errlen) KL_WUR;
/* Appends a set name (checked); KL_E_BAD_VALUE for a bad or repeated
 * name or too many. */
kl_status kl_fleet_server_add_set(kl_fleet_server *s, const char *name,
                                  char *err, size_t errlen) KL_WUR;
/* Checks a record built in memory (the daemon's own, from its options). */
kl_status kl_fleet_server_check(const kl_fleet_server *s, char *err,
                                size_t errlen) KL_WUR;
/* The record's JSON (malloc'd, NUL-terminated, *len bytes). */
kl_status kl_fleet_server_encode(const kl_fleet_server *s, char **out,
                                 size_t *len) KL_WUR;
/* Parses a record; KL_E_BAD_VALUE with the field named. out is cleared
 * first and holds nothing on failure. */
kl_status kl_fleet_server_parse(const uint8_t *json, size_t len,
                                kl_fleet_server *out, char *err,
                                size_t errlen) KL_WUR;

void kl_fleet_set_meta_clear(kl_fleet_set_meta *m);
kl_status kl_fleet_set_meta_encode(const kl_fleet_set_meta *m, char **out,
                                   size_t *len) KL_WUR;
kl_status kl_fleet_set_meta_parse(const uint8_t *json, size_t len,
                                  kl_fleet_set_meta *out, char *err,
                                  size_t errlen) KL_WUR;
/* <prefix>dir/regions: {"v":1,"codes":{"2":"eu","3":"us"}}, bytes 1-255
 * in decimal, at most one name each. */
kl_status kl_fleet_regions_encode(const kl_fleet_regions *r, char **out,
                                  size_t *len) KL_WUR;
kl_status kl_fleet_regions_parse(const uint8_t *json, size_t len,
                                 kl_fleet_regions *out, char *err,
                                 size_t errlen) KL_WUR;

/* Checks a set's SKIs (n x 20 bytes, the chunks concatenated) against its
 * meta: the count, strictly ascending order and the digest. */
kl_status kl_fleet_set_verify(const kl_fleet_set_meta *m, const uint8_t *skis,
                              size_t n, char *err, size_t errlen) KL_WUR;

/* ---- key names under the prefix ---------------------------------------- */

typedef enum kl_fleet_key_kind {
    KL_FLEET_KEY_OTHER,   /* not ours: ignored (a newer layout's) */
    KL_FLEET_KEY_SERVER,  /* <prefix>dir/servers/<name> */
    KL_FLEET_KEY_SET,     /* <prefix>dir/sets/<set> */
    KL_FLEET_KEY_CHUNK,   /* <prefix>skis/<set>/<generation>/<chunk> */
    KL_FLEET_KEY_REGIONS, /* <prefix>dir/regions */
} kl_fleet_key_kind;

/* Writes the key into buf (NUL-terminated); KL_E_TOO_LARGE when it does
 * not fit. A prefix ends with '/' (docs/FLEET.md). */
kl_status kl_fleet_key_server(const char *prefix, const char *name, char *buf,
                              size_t cap) KL_WUR;
kl_status kl_fleet_key_set(const char *prefix, const char *set, char *buf,
                           size_t cap) KL_WUR;
kl_status kl_fleet_key_chunk(const char *prefix, const char *set, int64_t gen,
                             uint32_t chunk, char *buf, size_t cap) KL_WUR;
kl_status kl_fleet_key_regions(const char *prefix, char *buf,
                               size_t cap) KL_WUR;
/* What the routers watch and read (every record and meta, no SKIs). */
kl_status kl_fleet_key_dir(const char *prefix, char *buf, size_t cap) KL_WUR;
/* Every chunk of one set's generation (gen 0: of every generation). */
kl_status kl_fleet_key_chunks(const char *prefix, const char *set, int64_t gen,
                              char *buf, size_t cap) KL_WUR;

/* Classifies a key read from etcd; name gets the server or set name
 * (checked by kl_fleet_name_ok; a bad one is KL_FLEET_KEY_OTHER). */
kl_fleet_key_kind kl_fleet_key_parse(const char *prefix, const uint8_t *key,
                                     size_t len,
                                     char name[KL_FLEET_NAME_MAX + 1]);

#endif
