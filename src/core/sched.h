/* SPDX-License-Identifier: Apache-2.0 */
/* Real-time scheduling of keylessd's serving threads (option
 * realtime_priority; docs/DESIGN.md "Real-time event loops").
 *
 * With normal scheduling a woken event loop may wait for the CPU behind
 * another busy thread of the machine for a scheduler slice (milliseconds),
 * which is what the open-loop p99 shows when clients or other work share the
 * cores. Under SCHED_FIFO the loop runs as soon as it is woken.
 *
 * Process-wide: kl_sched_configure runs once, before the threads start;
 * each serving thread calls kl_sched_thread_start first thing. */
#ifndef KL_CORE_SCHED_H
#define KL_CORE_SCHED_H

#include <stdbool.h>

typedef enum kl_thread_role {
    KL_THREAD_LOOP,   /* shards and the router: priority + 1 */
    KL_THREAD_WORKER, /* crypto workers: priority */
} kl_thread_role;

#define KL_SCHED_PRIORITY_MAX 98 /* the loops run one above */

/* 0: normal scheduling (the default); 1..KL_SCHED_PRIORITY_MAX: SCHED_FIFO.
 * Out-of-range values are clamped (the option table checks the range). */
void kl_sched_configure(int priority);
int kl_sched_priority(void);

/* Applies the configured policy to the calling thread. Event loops run one
 * priority above the workers so that a loop woken while every core runs a
 * long RSA operation preempts it. Returns false when the kernel refused
 * (logged once per process with the fix); the thread then keeps normal
 * scheduling. True when applied or when nothing was asked. */
bool kl_sched_thread_start(kl_thread_role role);

#endif
