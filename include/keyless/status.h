/* SPDX-License-Identifier: Apache-2.0 */
/* keylessd status codes, shared by the wire codec and libkeyless.
 * KL_OK is zero; every failure is a distinct negative value, so a caller can
 * tell "need more bytes" from "peer sent garbage" from "we broke". */
#ifndef KEYLESS_STATUS_H
#define KEYLESS_STATUS_H

#ifndef KL_WUR
#define KL_WUR __attribute__((warn_unused_result))
#endif

typedef enum kl_status {
    KL_OK = 0,
    /* Input is incomplete: wait for more bytes (not an error). */
    KL_E_AGAIN = -1,
    /* Wire-format errors (protocol P2/P3): the peer's fault, answered with
     * a `format error` on the wire. */
    KL_E_TRUNCATED = -10,      /* a read ran past the end of the input */
    KL_E_ITEM_OVERRUN = -11,   /* an item's length runs past the body */
    KL_E_DUP_TAG = -12,        /* a known tag appears twice */
    KL_E_OPCODE_LEN = -13,     /* opcode item length != 1 */
    KL_E_COMPLIANCE_LEN = -14, /* compliance-region item length != 1 */
    KL_E_IP_LEN = -15,         /* client/server IP length not 4 or 16 */
    KL_E_TOO_LARGE = -16,      /* would exceed 65535 body bytes / buffer */
    KL_E_BAD_VALUE = -17,      /* a value is syntactically invalid */
    /* Local failures. */
    KL_E_NOMEM = -30,
    KL_E_IO = -31,
    KL_E_CONFIG = -32,
    KL_E_KEY = -33, /* a key file could not be used */
    KL_E_TLS = -34,
    KL_E_INTERNAL = -35,
    KL_E_NOT_FOUND = -36,
    KL_E_TIMEOUT = -37,
    KL_E_CLOSED = -38,
} kl_status;

/* A short constant English text for a status. */
const char *kl_status_str(kl_status s);

#endif
