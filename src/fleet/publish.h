/* SPDX-License-Identifier: Apache-2.0 */
/* Publishing a key set in the fleet directory (docs/FLEET.md "Key sets:
 * published once, in chunks"): by an operator's tool (keyless-cli) or a
 * test, never by a server on its request path. */
#ifndef KL_FLEET_PUBLISH_H
#define KL_FLEET_PUBLISH_H

#include "fleet/etcd.h"
#include "fleet/record.h"

typedef struct kl_fleet_publish {
    const char *prefix; /* ends with '/' */
    const char *set;
    const uint8_t *skis; /* n x 20 bytes, any order; repeats dropped */
    size_t n;
    const char (*regions)[KL_FLEET_NAME_MAX + 1]; /* NULL/0: any region */
    size_t nregions;
    uint32_t chunk_skis; /* 0: KL_FLEET_CHUNK_SKIS */
} kl_fleet_publish;

typedef struct kl_fleet_publish_result {
    int64_t generation, keys;
    uint32_t chunks;
} kl_fleet_publish_result;

/* Writes generation (current + 1): its chunks, then its meta, then
 * deletes the previous generation's chunks. Run it again after a failure. */
kl_status kl_fleet_publish_set(kl_etcd *c, const kl_fleet_publish *p,
                               kl_fleet_publish_result *res, char *err,
                               size_t errlen) KL_WUR;

#endif
