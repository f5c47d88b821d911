/* SPDX-License-Identifier: Apache-2.0 */
#include "core/status.h"

#include <stdbool.h>
#include <stdio.h>

#include "keyless/protocol.h"

/* The server's statuses are the P6 codes, offset (core/status.h). */
_Static_assert(KL_E_CRYPTO == KL_E_P6_BASE - KL_ERR_CRYPTO, "P6 0x01");
_Static_assert(KL_E_KEY_NOT_FOUND == KL_E_P6_BASE - KL_ERR_KEY_NOT_FOUND,
               "P6 0x02");
_Static_assert(KL_E_READ == KL_E_P6_BASE - KL_ERR_READ, "P6 0x03");
_Static_assert(KL_E_VERSION_MISMATCH == KL_E_P6_BASE - KL_ERR_VERSION_MISMATCH,
               "P6 0x04");
_Static_assert(KL_E_BAD_OPCODE == KL_E_P6_BASE - KL_ERR_BAD_OPCODE, "P6 0x05");
_Static_assert(KL_E_UNEXPECTED_OPCODE ==
                   KL_E_P6_BASE - KL_ERR_UNEXPECTED_OPCODE,
               "P6 0x06");
_Static_assert(KL_E_FORMAT == KL_E_P6_BASE - KL_ERR_FORMAT, "P6 0x07");
_Static_assert(KL_E_CERT_NOT_FOUND == KL_E_P6_BASE - KL_ERR_CERT_NOT_FOUND,
               "P6 0x09");
_Static_assert(KL_E_EXPIRED == KL_E_P6_BASE - KL_ERR_EXPIRED, "P6 0x0A");
_Static_assert(KL_E_REMOTE_CONFIG == KL_E_P6_BASE - KL_ERR_REMOTE_CONFIG,
               "P6 0x0B");
/* No public status may fall into the P6 range. */
_Static_assert(KL_E_CLOSED > KL_E_P6_BASE, "public statuses above the range");

static bool p6_range(kl_status s)
{
    return (int)s < KL_E_P6_BASE && (int)s >= (int)KL_E_P6_LAST;
}

uint8_t kl_status_to_p6(kl_status s)
{
    if (s == KL_OK)
        return KL_ERR_NONE;
    if (p6_range(s))
        return (uint8_t)(KL_E_P6_BASE - (int)s);
    /* P3: what the peer sent does not parse */
    if ((int)s <= (int)KL_E_TRUNCATED && (int)s >= (int)KL_E_BAD_VALUE)
        return KL_ERR_FORMAT;
    return KL_ERR_INTERNAL;
}

kl_status kl_status_from_p6(uint8_t code)
{
    switch (code) {
    case KL_ERR_NONE: return KL_OK;
    case KL_ERR_INTERNAL: return KL_E_INTERNAL;
    default: return (kl_status)(KL_E_P6_BASE - (int)code);
    }
}

/* The server's statuses (core/status.h); NULL for the public ones. */
static const char *p6_status_str(kl_status s)
{
    switch ((int)s) {
    case KL_E_CRYPTO: return "cryptography error";
    case KL_E_KEY_NOT_FOUND: return "key not found";
    case KL_E_READ: return "read failure";
    case KL_E_VERSION_MISMATCH: return "version mismatch";
    case KL_E_BAD_OPCODE: return "bad opcode";
    case KL_E_UNEXPECTED_OPCODE: return "unexpected opcode";
    case KL_E_FORMAT: return "malformed message";
    case KL_E_CERT_NOT_FOUND: return "certificate not found";
    case KL_E_EXPIRED: return "sealing key expired";
    case KL_E_REMOTE_CONFIG: return "remote configuration error";
    }
    return p6_range(s) ? "unknown error code from a remote key server" : NULL;
}

void kl_verrf(char *err, size_t errlen, const char *fmt, va_list ap)
{
    if (err && errlen)
        vsnprintf(err, errlen, fmt, ap);
}

void kl_errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kl_verrf(err, errlen, fmt, ap);
    va_end(ap);
}

const char *kl_status_str(kl_status s)
{
    const char *p6 = p6_status_str(s);
    if (p6)
        return p6;
    switch (s) {
    case KL_OK: return "ok";
    case KL_E_AGAIN: return "incomplete input";
    case KL_E_TRUNCATED: return "truncated input";
    case KL_E_ITEM_OVERRUN: return "item length runs past the end of the body";
    case KL_E_DUP_TAG: return "known tag appears twice";
    case KL_E_OPCODE_LEN: return "opcode item length is not 1";
    case KL_E_COMPLIANCE_LEN: return "compliance-region item length is not 1";
    case KL_E_IP_LEN: return "IP item length is not 4 or 16";
    case KL_E_TOO_LARGE: return "message too large";
    case KL_E_BAD_VALUE: return "invalid value";
    case KL_E_NOMEM: return "out of memory";
    case KL_E_IO: return "I/O error";
    case KL_E_CONFIG: return "configuration error";
    case KL_E_KEY: return "key error";
    case KL_E_TLS: return "TLS error";
    case KL_E_INTERNAL: return "internal error";
    case KL_E_NOT_FOUND: return "not found";
    case KL_E_TIMEOUT: return "timed out";
    case KL_E_CLOSED: return "connection closed";
    }
    return "unknown status";
}
