/* SPDX-License-Identifier: Apache-2.0 */
/* Outstanding request ids: see reqtable.h. */
#include "client/reqtable.h"

#include <stdlib.h>
#include <string.h>

#define MIN_CAP 64u

/* Fibonacci hashing spreads sequential ids over the table. */
static size_t home(const kl_reqtable *t, uint32_t id)
{
    return (size_t)((id * 2654435769u) & (uint32_t)(t->cap - 1));
}

void kl_reqtable_init(kl_reqtable *t)
{
    memset(t, 0, sizeof *t);
}

void kl_reqtable_free(kl_reqtable *t)
{
    free(t->slots);
    memset(t, 0, sizeof *t);
}

static kl_reqslot *find(const kl_reqtable *t, uint32_t id)
{
    if (!t->cap)
        return NULL;
    for (size_t i = home(t, id);; i = (i + 1) & (t->cap - 1)) {
        kl_reqslot *s = &t->slots[i];
        if (!s->pending)
            return NULL;
        if (s->id == id)
            return s;
    }
}

static kl_reqslot *insert_slot(kl_reqslot *slots, size_t cap, uint32_t id)
{
    kl_reqtable tmp = {.slots = slots, .cap = cap};
    size_t i = home(&tmp, id);
    while (slots[i].pending)
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

/* Keeps the load at or under one half so probes stay short. */
static kl_status grow(kl_reqtable *t)
{
    size_t ncap = t->cap ? t->cap * 2 : MIN_CAP;
    kl_reqslot *ns = calloc(ncap, sizeof *ns);
    KL_ENSURE(ns != NULL, KL_E_NOMEM);
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i].pending)
            *insert_slot(ns, ncap, t->slots[i].id) = t->slots[i];
    }
    free(t->slots);
    t->slots = ns;
    t->cap = ncap;
    return KL_OK;
}

kl_status kl_reqtable_add(kl_reqtable *t, uint32_t id, uint64_t now_ns)
{
    kl_reqslot *s = find(t, id);
    if (s) {
        KL_ENSURE(s->pending < UINT32_MAX, KL_E_TOO_LARGE);
        s->pending++;
        s->sent_ns = now_ns;
        t->total++;
        return KL_OK;
    }
    if ((t->used + 1) * 2 > t->cap)
        KL_GUARD(grow(t));
    s = insert_slot(t->slots, t->cap, id);
    s->id = id;
    s->pending = 1;
    s->cancelled = 0;
    s->sent_ns = now_ns;
    t->used++;
    t->total++;
    return KL_OK;
}

/* Backward-shift deletion: moves later members of the probe run into the
 * hole so that every lookup still finds them without tombstones. */
static void remove_slot(kl_reqtable *t, kl_reqslot *s)
{
    size_t mask = t->cap - 1;
    size_t hole = (size_t)(s - t->slots);
    size_t i = hole;
    for (;;) {
        i = (i + 1) & mask;
        kl_reqslot *n = &t->slots[i];
        if (!n->pending)
            break;
        size_t h = home(t, n->id);
        /* n may move into the hole only if its home is not cyclically in
         * (hole, i]. */
        bool in_range = hole <= i ? (h > hole && h <= i) : (h > hole || h <= i);
        if (!in_range) {
            t->slots[hole] = *n;
            hole = i;
        }
    }
    memset(&t->slots[hole], 0, sizeof t->slots[hole]);
    t->used--;
}

kl_req_match kl_reqtable_complete(kl_reqtable *t, uint32_t id,
                                  uint64_t *sent_ns)
{
    kl_reqslot *s = find(t, id);
    if (sent_ns)
        *sent_ns = 0;
    if (!s)
        return KL_REQ_UNKNOWN;
    kl_req_match m = KL_REQ_MATCHED;
    if (s->cancelled) {
        /* Answers come back for cancelled requests too; with duplicate ids
         * we cannot tell which one this is, so the oldest waiter wins. */
        s->cancelled--;
        m = KL_REQ_CANCELLED;
    } else if (sent_ns) {
        *sent_ns = s->sent_ns;
    }
    s->pending--;
    t->total--;
    if (!s->pending)
        remove_slot(t, s);
    return m;
}

kl_status kl_reqtable_cancel(kl_reqtable *t, uint32_t id)
{
    kl_reqslot *s = find(t, id);
    KL_ENSURE(s != NULL && s->cancelled < s->pending, KL_E_NOT_FOUND);
    s->cancelled++;
    return KL_OK;
}

bool kl_reqtable_contains(const kl_reqtable *t, uint32_t id)
{
    return find(t, id) != NULL;
}
