/* One error style for the whole code base (style.md 3): functions return a
 * kl_status; KL_OK is zero, every failure is a distinct negative value, so a
 * caller can tell "need more bytes" from "peer sent garbage" from "we broke". */
#ifndef KL_CORE_STATUS_H
#define KL_CORE_STATUS_H

#include "keyless/status.h"

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
