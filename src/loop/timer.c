/* SPDX-License-Identifier: Apache-2.0 */
/* Timers as a binary min-heap of pointers into their owners' structs. Each
 * timer remembers its heap slot, so re-arming or stopping one connection's
 * deadline is O(log n) even with 10k connections. */
#include <stdlib.h>

#include "core/time.h"
#include "loop/internal.h"

void kl_timer_init(kl_timer *t, kl_timer_fn fn, void *data)
{
    t->due_ns = 0;
    t->heap_idx = SIZE_MAX;
    t->fn = fn;
    t->data = data;
}

static bool earlier(const kl_timer *a, const kl_timer *b)
{
    return a->due_ns < b->due_ns;
}

static void heap_place(kl_loop *l, size_t i, kl_timer *t)
{
    l->heap[i] = t;
    t->heap_idx = i;
}

static void sift_up(kl_loop *l, size_t i)
{
    kl_timer *t = l->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!earlier(t, l->heap[parent]))
            break;
        heap_place(l, i, l->heap[parent]);
        i = parent;
    }
    heap_place(l, i, t);
}

static void sift_down(kl_loop *l, size_t i)
{
    kl_timer *t = l->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= l->heap_len)
            break;
        if (c + 1 < l->heap_len && earlier(l->heap[c + 1], l->heap[c]))
            c++;
        if (!earlier(l->heap[c], t))
            break;
        heap_place(l, i, l->heap[c]);
        i = c;
    }
    heap_place(l, i, t);
}

void kl_timer_stop(kl_loop *l, kl_timer *t)
{
    size_t i = t->heap_idx;
    if (i == SIZE_MAX)
        return;
    t->heap_idx = SIZE_MAX;
    l->heap_len--;
    if (i == l->heap_len)
        return;
    /* Move the last timer into the hole and restore the heap order in
     * whichever direction it is violated. */
    heap_place(l, i, l->heap[l->heap_len]);
    if (i > 0 && earlier(l->heap[i], l->heap[(i - 1) / 2]))
        sift_up(l, i);
    else
        sift_down(l, i);
}

kl_status kl_timer_at(kl_loop *l, kl_timer *t, uint64_t due_ns)
{
    if (t->heap_idx != SIZE_MAX) {
        uint64_t old = t->due_ns;
        t->due_ns = due_ns;
        if (due_ns < old)
            sift_up(l, t->heap_idx);
        else
            sift_down(l, t->heap_idx);
        return KL_OK;
    }
    if (l->heap_len == l->heap_cap) {
        size_t cap = l->heap_cap ? l->heap_cap * 2 : 64;
        kl_timer **h = realloc(l->heap, cap * sizeof *h);
        KL_ENSURE(h != NULL, KL_E_NOMEM);
        l->heap = h;
        l->heap_cap = cap;
    }
    t->due_ns = due_ns;
    heap_place(l, l->heap_len++, t);
    sift_up(l, t->heap_idx);
    return KL_OK;
}

kl_status kl_timer_after(kl_loop *l, kl_timer *t, uint64_t delay_ns)
{
    return kl_timer_at(l, t, kl_now_ns() + delay_ns);
}

int64_t kl_loop_timer_timeout_ns(const kl_loop *l)
{
    if (l->heap_len == 0)
        return -1;
    uint64_t due = l->heap[0]->due_ns, now = kl_now_ns();
    if (due <= now)
        return 0;
    uint64_t ns = due - now;
    return ns > kl_s_to_ns(86400) ? (int64_t)kl_s_to_ns(86400) : (int64_t)ns;
}

void kl_loop_run_timers(kl_loop *l)
{
    /* A callback may re-arm its own timer for "now"; firing only timers due
     * at the turn's start, and at most as many as were armed, keeps one turn
     * bounded. */
    uint64_t now = l->now_ns;
    size_t budget = l->heap_len;
    while (budget-- > 0 && l->heap_len > 0 && l->heap[0]->due_ns <= now) {
        kl_timer *t = l->heap[0];
        kl_timer_stop(l, t);
        t->fn(l, t);
        if (l->stop)
            break;
    }
}
