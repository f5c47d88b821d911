/* SPDX-License-Identifier: Apache-2.0 */
/* Rate-limited connection lines (docs/OPERATIONS.md, Logs; docs/SECURITY.md,
 * Network: before authentication). Anyone who reaches the port can fail a
 * handshake a thousand times a second; each kind of such line is written
 * at most KL_LOG_LIMIT_LINES times per 10 s, process-wide (kl_log_limit:
 * a mutex, taken only on these failure paths), the rest counted in
 * keylessd_log_suppressed_total{kind} and summarised in one line when the
 * window is over. The shard that left a line out arms its timer for the
 * summary, so that it is written even when the flood stops. */
#include "core/log.h"
#include "core/time.h"
#include "engine/internal.h"

#define LIMIT(text, lvl)                                                       \
    {                                                                          \
        .mu = PTHREAD_MUTEX_INITIALIZER, .what = (text), .level = (lvl)        \
    }

/* One per kind, for the whole process (every shard shares them). */
static kl_log_limit limits[KL_LOGSUP_KINDS] = {
    [KL_LOGSUP_HANDSHAKE_FAILED] = LIMIT("TLS handshake failed", KL_LOG_WARN),
    [KL_LOGSUP_HANDSHAKE_TIMEOUT] =
        LIMIT("TLS handshake timed out", KL_LOG_INFO),
    [KL_LOGSUP_HANDSHAKE_TOO_BIG] =
        LIMIT("TLS handshake refused (max_handshake_bytes)", KL_LOG_INFO),
};

static void arm(kl_shard *s, uint64_t due)
{
    if (kl_timer_armed(&s->logs.timer) && s->logs.timer.due_ns <= due)
        return;
    if (kl_timer_at(s->ev.loop, &s->logs.timer, due) != KL_OK)
        return; /* out of memory: the summary waits for the next line */
}

void kl_conn_close_limited(kl_conn *c, kl_metrics_log_kind kind, int level,
                           const char *what, const char *why)
{
    kl_shard *s = c->shard;
    uint64_t due = 0;
    if (kl_log_get_level() <= level) {
        if (kl_log_limit_pass(&limits[kind], kl_loop_now(s->ev.loop), &due)) {
            kl_conn_close_with(c, level, what, why);
            return;
        }
        kl_metrics_log_suppressed(s->obs.mx, kind);
        arm(s, due);
    }
    kl_conn_close(c);
}

uint64_t kl_loglimit_flush(uint64_t now_ns, bool force)
{
    uint64_t next = 0;
    for (int k = 0; k < KL_LOGSUP_KINDS; k++) {
        uint64_t due = kl_log_limit_flush(&limits[k], now_ns, force);
        if (due && (!next || due < next))
            next = due;
    }
    return next;
}

void kl_shard_loglimit_timer(kl_loop *l, kl_timer *t)
{
    kl_shard *s = t->data;
    uint64_t next = kl_loglimit_flush(kl_loop_now(l), false);
    if (next)
        arm(s, next);
}
