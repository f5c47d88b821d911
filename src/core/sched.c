/* SPDX-License-Identifier: Apache-2.0 */
/* Real-time scheduling of the serving threads (sched.h). */
#include "core/sched.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "core/log.h"

static atomic_int configured; /* 0: normal scheduling */
static atomic_bool warned;    /* one warning per process */

void kl_sched_configure(int priority)
{
    if (priority < 0)
        priority = 0;
    if (priority > KL_SCHED_PRIORITY_MAX)
        priority = KL_SCHED_PRIORITY_MAX;
    atomic_store(&configured, priority);
}

int kl_sched_priority(void)
{
    return atomic_load(&configured);
}

bool kl_sched_thread_start(kl_thread_role role)
{
    int base = atomic_load(&configured);
    if (base == 0)
        return true;
    struct sched_param sp;
    memset(&sp, 0, sizeof sp);
    sp.sched_priority = role == KL_THREAD_LOOP ? base + 1 : base;
    int rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
    if (rc == 0)
        return true;
    if (!atomic_exchange(&warned, true))
        kl_warn("realtime_priority %d: the kernel refused SCHED_FIFO "
                "priority %d (%s); keylessd serves with normal scheduling. "
                "Fix: run it with CAP_SYS_NICE, or raise RLIMIT_RTPRIO to "
                "%d (systemd: LimitRTPRIO=%d and RestrictRealtime=no), or "
                "set realtime_priority to 0",
                base, sp.sched_priority, strerror(rc), base + 1, base + 1);
    return false;
}
