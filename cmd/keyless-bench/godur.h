/* SPDX-License-Identifier: Apache-2.0 */
/* Durations written the way Go writes them, so the reference bench tool's
 * runbooks work with keyless-bench: "10s", "0.5ms", "20µs" (also "20us"
 * and "20μs"), "1m30s", "1h", "250ns"; a bare "0". */
#ifndef KL_BENCH_GODUR_H
#define KL_BENCH_GODUR_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* Parses a non-negative duration into nanoseconds. KL_E_BAD_VALUE for
 * anything else (no unit, unknown unit, negative, overflow). */
KL_WUR kl_status kl_dur_parse(const char *s, uint64_t *ns);
/* Formats like Go's time.Duration.String: "0s", "250ns", "1.5µs", "200µs",
 * "12.345ms", "10s", "1m30s", "2h0m0s". Returns out. */
char *kl_dur_format(uint64_t ns, char *out, size_t cap);

#endif
