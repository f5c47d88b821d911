/* SPDX-License-Identifier: Apache-2.0 */
/* One error style for the whole code base: functions return a
 * kl_status; KL_OK is zero, every failure is a distinct negative value, so a
 * caller can tell "need more bytes" from "peer sent garbage" from "we broke".
 */
#ifndef KL_CORE_STATUS_H
#define KL_CORE_STATUS_H

#include "keyless/status.h"

#include <stdarg.h>
#include <stddef.h>

/* The message half of an error: formats into the caller's err buffer
 * (nothing when err is NULL or errlen is 0), so every module reports a
 * failure the same way - a kl_status plus a sentence naming the fix. */
__attribute__((format(printf, 3, 4))) void kl_errf(char *err, size_t errlen,
                                                   const char *fmt, ...);
void kl_verrf(char *err, size_t errlen, const char *fmt, va_list ap);

#define KL_GUARD(expr)                                                         \
    do {                                                                       \
        kl_status kl_guard_s_ = (expr);                                        \
        if (kl_guard_s_ != KL_OK)                                              \
            return kl_guard_s_;                                                \
    } while (0)

#define KL_ENSURE(cond, err)                                                   \
    do {                                                                       \
        if (!(cond))                                                           \
            return (err);                                                      \
    } while (0)

#endif
