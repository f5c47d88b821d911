/* SPDX-License-Identifier: Apache-2.0 */
/* This server's membership in the fleet (docs/FLEET.md "Registration"):
 * its record under <prefix>dir/servers/<name>, held by an etcd lease that
 * a thread of its own keeps alive. The record disappears when the lease
 * expires (the process died or lost etcd for longer than the TTL) or is
 * revoked (a clean stop).
 *
 * The thread: grant a lease of ttl_s, put the record on it, renew it
 * every ttl_s / 3. A renewal that finds the lease gone (it expired while
 * etcd was unreachable, or someone revoked it) registers again: a new
 * lease and the record again. A failed call (etcd unreachable) is retried
 * with a backoff from 100 ms doubling to ttl_s / 3. Every write is
 * idempotent (a put of the same record on the same lease), so a write
 * that timed out but was applied later does no harm; a grant that timed
 * out may leave a spare lease, which expires by its TTL with nothing on
 * it. Each change of state is logged once. */
#ifndef KL_FLEET_MEMBER_H
#define KL_FLEET_MEMBER_H

#include <stdint.h>

#include "core/status.h"
#include "fleet/etcd.h"
#include "fleet/record.h"

typedef struct kl_fleet_member kl_fleet_member;

typedef struct kl_fleet_member_opts {
    kl_etcd_opts etcd;  /* endpoints and TLS; timeouts are set here */
    const char *prefix; /* ends with '/'; NULL: "/keyless/" */
    int ttl_s;          /* lease TTL; 0: 10 */
    const kl_fleet_server *record; /* copied */
} kl_fleet_member_opts;

typedef enum kl_fleet_member_state {
    KL_FLEET_MEMBER_JOINING,     /* no lease yet, or re-registering */
    KL_FLEET_MEMBER_REGISTERED,  /* the record is on a live lease */
    KL_FLEET_MEMBER_UNREACHABLE, /* etcd did not answer the last renewal */
    KL_FLEET_MEMBER_STOPPED,
} kl_fleet_member_state;

typedef struct kl_fleet_member_status {
    kl_fleet_member_state state;
    int64_t lease;          /* the current lease (0: none) */
    uint64_t registrations; /* records written on a new lease so far */
    uint64_t since_ms;      /* monotonic ms of the last renewal that worked */
} kl_fleet_member_status;

/* Checks the options and the record and starts the thread; registration
 * happens on that thread (an unreachable etcd does not stop startup).
 * KL_E_CONFIG with err set for bad options. */
kl_status kl_fleet_member_start(const kl_fleet_member_opts *o,
                                kl_fleet_member **out, char *err,
                                size_t errlen) KL_WUR;
/* Replaces the record (health, sets) and writes it on the current lease
 * now; the name must stay. */
kl_status kl_fleet_member_update(kl_fleet_member *m,
                                 const kl_fleet_server *record, char *err,
                                 size_t errlen) KL_WUR;
void kl_fleet_member_status_get(kl_fleet_member *m, kl_fleet_member_status *s);
/* Stops the thread and revokes the lease (the record goes at once);
 * bounded by one etcd call's timeout. */
void kl_fleet_member_stop(kl_fleet_member *m);
/* Stops the thread without revoking: what a crash leaves behind (the
 * record goes when the lease expires). For a process about to be
 * replaced in place, and for tests of a server's death. */
void kl_fleet_member_abandon(kl_fleet_member *m);
const char *kl_fleet_member_state_name(kl_fleet_member_state s);

#endif
