/* SPDX-License-Identifier: Apache-2.0 */
#include "core/status.h"

#include <stdio.h>

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
