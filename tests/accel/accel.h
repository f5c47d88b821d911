/* SPDX-License-Identifier: Apache-2.0 */
/* kl_accel, a test-only OpenSSL provider that behaves like a crypto
 * accelerator card (docs/DESIGN.md "Accelerators: ASYNC jobs"). It offers
 * ECDSA and RSA signatures (with its own EC and RSA key management, which
 * imports keys exported from the default provider) and runs each
 * signature on a "device": a thread with a fixed number of parallel slots
 * and a fixed latency per operation.
 *
 * Inside an OpenSSL ASYNC job a signature does what a card's provider
 * does: it queues the operation and pauses the job. When the application
 * set a completion callback on the job's ASYNC_WAIT_CTX
 * (ASYNC_WAIT_CTX_set_callback), the provider says so before pausing
 * (ASYNC_STATUS_OK) and the device calls it when the operation is done,
 * from the device thread; otherwise the provider registers an eventfd in
 * the wait context and the device writes it. Either way the caller then
 * resumes the job, which returns the signature. Outside a job the calling
 * thread blocks until the device answers.
 *
 * Configuration: the environment variable KL_ACCEL_CTL names a control
 * file, re-read (when its content changed) at most every 50 ms on a
 * submission. Write it atomically (a temporary file, then rename). One
 * setting per line, "name=value", '#' comments:
 *   latency_us=N   device time per operation (default 1000)
 *   slots=N        operations on the device at once (default 64)
 *   full=queue     when every slot is busy: wait for one (default), or
 *   full=software  run the signature at once on the calling thread (the
 *                  hardware/software switch of real cards)
 *   timeout_ms=N   the driver's answer timeout: an operation the device
 *                  has not answered by then fails (default 2000)
 *   fail=N         the next N operations fail (device error)
 *   lose=N         the device never answers the next N operations (they
 *                  end at timeout_ms with an error)
 *   stopped=1      the device answers nothing until stopped=0 (every
 *                  operation meanwhile ends at timeout_ms)
 *   poll_us=N      answer only when the clock is on a multiple of N us:
 *                  the answers due since leave together, as from a driver
 *                  that polls its response ring every N us (default 0:
 *                  each at its own due time)
 *   callback=0     signal through the eventfd even when the application
 *                  set a completion callback (default 1: use it)
 *   busy=N         the device refuses the next N submissions made inside
 *                  an ASYNC job (its queue is full): the job pauses with
 *                  ASYNC_STATUS_EAGAIN (callback) or a readable fd, and
 *                  tries again when resumed
 *   memo=1         the device answers a repeated (key, digest, parameters)
 *                  with the signature it made the first time: a valid
 *                  signature at no host CPU, so that a benchmark measures
 *                  the host's work and not the simulated device's
 *   inline=1       no device: the calling thread answers at once, without
 *                  a pause (from a memo of its own with memo=1, no lock),
 *                  as if the crypto cost nothing - what a benchmark
 *                  compares the device's path with
 * fail, lose and busy count from the moment the file's content changes. A file
 * that does not parse makes every operation fail (and counts bad_ctl), so
 * a typo in a test is loud.
 *
 * The device thread does the real signature with the default provider
 * (unless memo answers), so its CPU shows as the process's; benchmarks
 * that judge host CPU per operation subtract the thread "kl-accel-dev". */
#ifndef KL_TESTS_ACCEL_H
#define KL_TESTS_ACCEL_H

#include <stdint.h>

#define KL_ACCEL_NAME "kl_accel"

/* Counters, for a test in the process that loaded the provider:
 * dlsym(KL_ACCEL_STATS_FN) on the module, or kl_accel_get_stats when
 * linked in. */
typedef struct kl_accel_stats {
    uint64_t submitted;   /* operations given to the device */
    uint64_t completed;   /* answered by the device (ok or failed) */
    uint64_t failed;      /* device errors (fail=) */
    uint64_t timed_out;   /* ended by timeout_ms (lose=, stopped=1) */
    uint64_t software;    /* run on the caller: full=software, slots busy */
    uint64_t paused;      /* signatures that paused an ASYNC job */
    uint64_t blocked;     /* signatures that blocked (no ASYNC job) */
    uint64_t memo_hits;   /* answered from memo */
    uint64_t inlined;     /* answered by the caller at once (inline=1) */
    uint64_t busy;        /* submissions refused by busy= (then retried) */
    uint64_t bad_ctl;     /* operations failed for a malformed control file */
    uint64_t in_flight;   /* now: on the device or waiting for a slot */
    uint64_t open_fds;    /* now: eventfds of operations not yet ended */
    uint64_t max_in_slot; /* most operations on the device at once since
                             the control file last changed */
} kl_accel_stats;

typedef void (*kl_accel_stats_fn)(kl_accel_stats *out);
#define KL_ACCEL_STATS_FN "kl_accel_get_stats"
void kl_accel_get_stats(kl_accel_stats *out);

/* The provider's entry point, for OSSL_PROVIDER_add_builtin in tests that
 * link it in (the module exports OSSL_provider_init). */
struct ossl_core_handle_st;
struct ossl_dispatch_st;
int kl_accel_provider_init(const struct ossl_core_handle_st *handle,
                           const struct ossl_dispatch_st *in,
                           const struct ossl_dispatch_st **out, void **provctx);

#endif
