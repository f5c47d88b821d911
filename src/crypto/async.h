/* SPDX-License-Identifier: Apache-2.0 */
/* Key operations as OpenSSL ASYNC jobs (docs/DESIGN.md "Accelerators:
 * ASYNC jobs"), for keys whose provider pauses a job while a device works
 * (an accelerator card's provider, the test accelerator tests/accel).
 *
 * A kl_async belongs to one thread, its owner (a shard), and runs at most
 * max_jobs operations at once on it. kl_async_start runs a kl_job inside an
 * ASYNC job: when the provider pauses it, the job's wait fds are handed to
 * the owner (watch) to join its poll set; when one is readable the owner
 * calls kl_async_ready, which resumes the job. A provider that supports
 * OpenSSL's completion callbacks (ASYNC_WAIT_CTX_set_callback) calls back
 * instead, on its own thread: that wakes the owner (wake) once per batch,
 * and kl_async_poll resumes every operation that completed. A job that
 * finishes after a pause is answered through job->done, on the owner's
 * thread.
 *
 * An operation keeps its own copies of the input and output and its own
 * OpenSSL context (crypto/ops.h kl_crypto_exec_private), so that its
 * kl_job can be answered before the provider has finished: at its
 * deadline, or when nobody waits any more (kl_async_expire). The key is
 * then held through job->key_hold until the provider returns, and the late
 * result is dropped. A provider that never returns keeps its slot: that is
 * counted (stuck), never waited for. */
#ifndef KL_CRYPTO_ASYNC_H
#define KL_CRYPTO_ASYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "crypto/pool.h"

typedef struct kl_async kl_async;

/* The owner's poll set: start (add) or stop (!add) watching fd for
 * readability, and pass tag to kl_async_ready when it is readable. */
typedef void (*kl_async_watch_fn)(void *arg, int fd, bool add, void *tag);
/* Called on any thread (a provider's): the owner is to call kl_async_poll
 * on its own thread soon. Small and non-blocking. */
typedef void (*kl_async_wake_fn)(void *arg);

#define KL_ASYNC_DEFAULT_JOBS 256

typedef struct kl_async_opts {
    unsigned max_jobs; /* operations at once on this thread; 0: 256 */
    kl_async_watch_fn watch;
    /* NULL: providers' completion callbacks are not offered, every
     * operation is resumed through its wait fds (or by expiry) */
    kl_async_wake_fn wake;
    void *arg; /* of watch and wake */
} kl_async_opts;

/* On the owning thread (it sets up OpenSSL's ASYNC for the thread). */
KL_WUR kl_status kl_async_new(const kl_async_opts *o, kl_async **out);
/* On the owning thread: stops watching every fd and frees the idle slots.
 * Operations still paused (a provider that never answered) are left
 * behind, their memory with them: the process is stopping. */
void kl_async_free(kl_async *a);

typedef enum kl_async_result {
    KL_ASYNC_DONE,   /* finished now: job->err, out, out_len are set and
                        job->done is NOT called (as kl_pool_run_here) */
    KL_ASYNC_PAUSED, /* job->done will be called on the owner's thread */
    KL_ASYNC_FULL,   /* max_jobs operations are running: not started */
} kl_async_result;

/* Runs job (a key operation) in an ASYNC job. As the pool does, a job
 * abandoned or past its deadline is answered KL_E_INTERNAL without
 * running; started_ns is set when it runs. */
kl_async_result kl_async_start(kl_async *a, kl_job *job);

/* A watched fd with this tag is readable: resumes its operation. */
void kl_async_ready(kl_async *a, void *tag);

/* On the owner's thread after a wake: resumes the operations whose
 * provider called back, and those it asked to resume (ASYNC_STATUS_EAGAIN
 * or ASYNC_STATUS_ERR). An operation refused that way is resumed at the
 * owner's next turn KL_ASYNC_FAST_RETRIES times in a row, then only when
 * the owner polls for another reason: the owner also calls this on its
 * expiry timer. Returns how many it resumed. */
#define KL_ASYNC_FAST_RETRIES 8
unsigned kl_async_poll(kl_async *a);

/* Answers (KL_E_INTERNAL, through done) every paused job whose deadline
 * is at or before now_ns or whose client went away. Returns how many. The
 * owner calls it on a timer while kl_async_busy is not 0. */
unsigned kl_async_expire(kl_async *a, uint64_t now_ns);

/* Operations in progress (paused, or answered early and still with the
 * provider). */
unsigned kl_async_busy(const kl_async *a);

typedef struct kl_async_stats {
    uint64_t started;  /* operations run in an ASYNC job */
    uint64_t paused;   /* of those: paused at least once */
    uint64_t resumed;  /* resumptions */
    uint64_t expired;  /* answered early: deadline or client gone */
    uint64_t full;     /* refused: max_jobs running */
    uint64_t spurious; /* readiness or a callback for an idle slot */
    uint64_t retried;  /* pauses the provider asked to resume at once */
    unsigned busy;     /* now: operations in progress */
    unsigned fds;      /* now: fds in the owner's poll set */
} kl_async_stats;

void kl_async_get_stats(const kl_async *a, kl_async_stats *out);

#endif
