/* SPDX-License-Identifier: Apache-2.0 */
/* Outstanding request ids: see reqtable.h. */
#include "client/reqtable.h"

#include <string.h>

void kl_reqtable_init(kl_reqtable *t)
{
    memset(t, 0, sizeof *t);
    kl_hmap_init(&t->ids, sizeof(kl_reqslot));
}

void kl_reqtable_free(kl_reqtable *t)
{
    kl_hmap_free(&t->ids);
    t->total = 0;
}

kl_status kl_reqtable_add(kl_reqtable *t, uint32_t id, uint64_t now_ns)
{
    bool found;
    kl_reqslot *s = kl_hmap_put(&t->ids, id, &found);
    KL_ENSURE(s != NULL, KL_E_NOMEM);
    KL_ENSURE(!found || s->pending < UINT32_MAX, KL_E_TOO_LARGE);
    s->pending++;
    s->sent_ns = now_ns;
    t->total++;
    return KL_OK;
}

kl_req_match kl_reqtable_complete(kl_reqtable *t, uint32_t id,
                                  uint64_t *sent_ns)
{
    kl_reqslot *s = kl_hmap_get(&t->ids, id);
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
        kl_hmap_remove(&t->ids, s);
    return m;
}

kl_status kl_reqtable_cancel(kl_reqtable *t, uint32_t id)
{
    kl_reqslot *s = kl_hmap_get(&t->ids, id);
    KL_ENSURE(s != NULL && s->cancelled < s->pending, KL_E_NOT_FOUND);
    s->cancelled++;
    return KL_OK;
}

bool kl_reqtable_contains(const kl_reqtable *t, uint32_t id)
{
    return kl_hmap_get(&t->ids, id) != NULL;
}
