/* SPDX-License-Identifier: Apache-2.0 */
/* Slow crypto for the pool's unit tests (test_pool, test_pool_sched), and
 * only for them: keylessd has no test hook in its request path. These
 * programs are linked with -Wl,--wrap=kl_crypto_exec_deadline
 * (CMakeLists.txt), so every call the pool makes to run a job's crypto
 * comes here first: a job marked with slow_job() sleeps that long on the
 * worker, then runs its real operation. The pool sees nothing but a job
 * that takes that long: its class, queueing and deadlines are those of its
 * key. A program that includes this header and is not linked so does not
 * link (__real_kl_crypto_exec_deadline is then undefined).
 *
 * Jobs are told apart by their input buffer (kl_job.in), which the pool
 * hands to the crypto as it is (except for token keys, not used here).
 * Header-only: each test_*.c is a program. */
#ifndef KL_TEST_SLOWEXEC_H
#define KL_TEST_SLOWEXEC_H

#include <pthread.h>
#include <unistd.h>

#include "crypto/ops.h"
#include "crypto/pool.h"

#define SLOW_MAX 64

static pthread_mutex_t slow_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const uint8_t *in;
    unsigned us;
} slow_tab[SLOW_MAX];

/* Makes job's crypto take us microseconds longer when a worker (or
 * kl_pool_run_here) runs it; 0 unmarks it. Call before submitting. */
static inline void slow_job(const kl_job *job, unsigned us)
{
    pthread_mutex_lock(&slow_mu);
    int at = -1;
    for (int i = 0; i < SLOW_MAX; i++) {
        if (slow_tab[i].in == job->in) {
            at = i;
            break;
        }
        if (!slow_tab[i].in && at < 0)
            at = i;
    }
    if (at >= 0) {
        slow_tab[at].in = us ? job->in : NULL;
        slow_tab[at].us = us;
    }
    pthread_mutex_unlock(&slow_mu);
    assert_true(at >= 0); /* more than SLOW_MAX jobs marked at once */
}

static unsigned slow_us(const uint8_t *in)
{
    unsigned us = 0;
    pthread_mutex_lock(&slow_mu);
    for (int i = 0; i < SLOW_MAX; i++)
        if (slow_tab[i].in && slow_tab[i].in == in)
            us = slow_tab[i].us;
    pthread_mutex_unlock(&slow_mu);
    return us;
}

kl_status __real_kl_crypto_exec_deadline(const kl_key *key, uint8_t opcode,
                                         const uint8_t *payload, size_t plen,
                                         uint8_t *out, size_t outcap,
                                         size_t *out_len, uint64_t deadline_ns);
kl_status __wrap_kl_crypto_exec_deadline(const kl_key *key, uint8_t opcode,
                                         const uint8_t *payload, size_t plen,
                                         uint8_t *out, size_t outcap,
                                         size_t *out_len, uint64_t deadline_ns);

kl_status __wrap_kl_crypto_exec_deadline(const kl_key *key, uint8_t opcode,
                                         const uint8_t *payload, size_t plen,
                                         uint8_t *out, size_t outcap,
                                         size_t *out_len, uint64_t deadline_ns)
{
    unsigned us = slow_us(payload);
    if (us)
        usleep(us);
    return __real_kl_crypto_exec_deadline(key, opcode, payload, plen, out,
                                          outcap, out_len, deadline_ns);
}

#endif
