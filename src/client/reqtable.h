/* SPDX-License-Identifier: Apache-2.0 */
/* The table of outstanding request ids of one connection (protocol P2: the
 * server echoes the id, the client matches). Ids may repeat on the wire, so
 * each id keeps a count of requests waiting for it and a count of those
 * whose caller gave up (their responses are dropped).
 *
 * Open addressing with linear probing and backward-shift deletion: no
 * tombstones, so a long-lived connection never degrades. Pure, no I/O.
 *
 * Not the shared map (core/hmap.h), on purpose: on it a request's check,
 * add and complete took 0.3-0.5 ns more (6.0-6.3 against 5.7-5.8 ns at 64
 * or 1024 in flight), and this runs for every request and answer.
 * Measured in bench/RESULTS.md "Shared hash map". */
#ifndef KL_CLIENT_REQTABLE_H
#define KL_CLIENT_REQTABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct kl_reqslot {
    uint32_t id;
    uint32_t pending;   /* requests with this id awaiting a response */
    uint32_t cancelled; /* of those, how many nobody waits for any more */
    uint64_t sent_ns;   /* when the latest of them was queued */
} kl_reqslot;

typedef struct kl_reqtable {
    kl_reqslot *slots; /* slot unused when pending == 0 */
    size_t cap;        /* power of two */
    size_t used;       /* slots in use (distinct ids) */
    size_t total;      /* sum of pending over all ids */
} kl_reqtable;

/* What kl_reqtable_complete found for a response's id. */
typedef enum kl_req_match {
    KL_REQ_UNKNOWN = 0,   /* no request with this id is outstanding */
    KL_REQ_MATCHED = 1,   /* a waiting request: deliver the response */
    KL_REQ_CANCELLED = 2, /* its caller gave up: drop the response */
} kl_req_match;

void kl_reqtable_init(kl_reqtable *t);
void kl_reqtable_free(kl_reqtable *t);

/* Records one more request with this id. */
KL_WUR kl_status kl_reqtable_add(kl_reqtable *t, uint32_t id, uint64_t now_ns);
/* Accounts for a response with this id; *sent_ns gets the queue time of
 * the matched request (0 when unknown). */
kl_req_match kl_reqtable_complete(kl_reqtable *t, uint32_t id,
                                  uint64_t *sent_ns);
/* Marks one outstanding, not yet cancelled request with this id as
 * abandoned. KL_E_NOT_FOUND when there is none. */
KL_WUR kl_status kl_reqtable_cancel(kl_reqtable *t, uint32_t id);

bool kl_reqtable_contains(const kl_reqtable *t, uint32_t id);
/* Requests outstanding (cancelled ones included: the server still answers
 * them). */
static inline size_t kl_reqtable_count(const kl_reqtable *t)
{
    return t->total;
}

#endif
