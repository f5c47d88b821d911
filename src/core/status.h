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
#include <stdint.h>

/* The message half of an error: formats into the caller's err buffer
 * (nothing when err is NULL or errlen is 0), so every module reports a
 * failure the same way - a kl_status plus a sentence naming the fix. */
__attribute__((format(printf, 3, 4))) void kl_errf(char *err, size_t errlen,
                                                   const char *fmt, ...);
void kl_verrf(char *err, size_t errlen, const char *fmt, va_list ap);

/* Outcomes a key server answers with a P6 error (docs/PROTOCOL.md P6), for
 * the server side: one value per P6 code, -(100 + code), so the mapping
 * onto the wire is lossless (docs/DESIGN.md "Errors"). `internal error`
 * (0x08) is KL_E_INTERNAL. They are not in the public enum (that API is
 * installed and versioned): a switch over a kl_status that names them
 * switches on (int)s. */
#define KL_E_P6_BASE (-100)
#define KL_E_CRYPTO ((kl_status)-101)            /* 0x01 */
#define KL_E_KEY_NOT_FOUND ((kl_status)-102)     /* 0x02 */
#define KL_E_READ ((kl_status)-103)              /* 0x03 */
#define KL_E_VERSION_MISMATCH ((kl_status)-104)  /* 0x04 */
#define KL_E_BAD_OPCODE ((kl_status)-105)        /* 0x05 */
#define KL_E_UNEXPECTED_OPCODE ((kl_status)-106) /* 0x06 */
#define KL_E_FORMAT ((kl_status)-107)            /* 0x07 */
#define KL_E_CERT_NOT_FOUND ((kl_status)-109)    /* 0x09 */
#define KL_E_EXPIRED ((kl_status)-110)           /* 0x0A */
#define KL_E_REMOTE_CONFIG ((kl_status)-111)     /* 0x0B */
/* -112 .. -355: a code above 0x0B as a remote key server answered it,
 * carried through the router as is (docs/ROUTING.md "How it works"). */
#define KL_E_P6_LAST ((kl_status)(KL_E_P6_BASE - 0xFF))

/* The P6 code (docs/PROTOCOL.md P6) that answers s: the one mapping from
 * statuses onto the wire. KL_OK is 0x00 (no error); the wire-format
 * statuses (KL_E_TRUNCATED .. KL_E_BAD_VALUE) are `format error`; every
 * other local failure is `internal error`. Only the response encoder writes
 * the result into a message; logs and metrics name it by its P6 text. */
uint8_t kl_status_to_p6(kl_status s);
/* The status of a P6 code a remote key server answered (0x00: KL_OK);
 * kl_status_to_p6 gives the same code back for every byte. */
kl_status kl_status_from_p6(uint8_t code);

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
