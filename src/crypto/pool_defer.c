/* SPDX-License-Identifier: Apache-2.0 */
/* Deferred wake-ups (kl_pool_defer_wake, see pool.h): a done callback may
 * leave the wake-up it owes its owner to the worker that called it, which
 * sends it before it sleeps or before a job when holding it longer is not
 * worth it (kl_pool_may_defer, pool_int.h; the worker's loop is in
 * pool_sched.c). With RSA-2048 at saturation a shard then wakes once per
 * several signatures instead of once per signature, each wake-up preempting
 * a worker on a 2-core machine (~3 context switches per signature before;
 * docs/DESIGN.md "Completions in batches" has the numbers). */
#include <stdbool.h>

#include "core/time.h"
#include "crypto/pool_int.h"

_Thread_local kl_pool_deferred kl_pool_defer KL_POOL_TLS;

bool kl_pool_defer_wake(void (*fn)(void *arg), void *arg)
{
    if (!kl_pool_defer.on)
        return false;
    int n = kl_pool_defer.n; /* kl_now_ns below cannot change it */
    for (int i = 0; i < n; i++)
        if (kl_pool_defer.w[i].fn == fn && kl_pool_defer.w[i].arg == arg)
            return true;
    if (n == DEFER_MAX)
        return false;
    if (n == 0)
        kl_pool_defer.since_ns = kl_now_ns();
    kl_pool_defer.w[n].fn = fn;
    kl_pool_defer.w[n].arg = arg;
    kl_pool_defer.n = n + 1;
    return true;
}
