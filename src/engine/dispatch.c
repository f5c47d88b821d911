/* SPDX-License-Identifier: Apache-2.0 */
#include "engine/dispatch.h"

#include <string.h>

static kl_disp error(kl_status err)
{
    return (kl_disp){KL_DISP_ERROR, err};
}

kl_disp kl_dispatch_decide(kl_status parse_status, const kl_request *req)
{
    /* P3: a malformed body is answered `format error` with the request's
     * id; the header length kept the stream in sync, so the connection
     * stays. */
    if (parse_status != KL_OK)
        return error(KL_E_FORMAT);
    switch (kl_op_classify(req->opcode)) {
    case KL_OPC_PING:
        /* P8: pings are answered cheaply, without touching keys. */
        return (kl_disp){KL_DISP_PONG, KL_OK};
    case KL_OPC_RESPONSE_ONLY: return error(KL_E_UNEXPECTED_OPCODE); /* P4 */
    case KL_OPC_INVALID:
    case KL_OPC_CUSTOM:
        /* P4: unknown opcodes (0x00 and a missing opcode included) and an
         * unconfigured custom function are `bad opcode`. */
        return error(KL_E_BAD_OPCODE);
    case KL_OPC_SEAL:
    case KL_OPC_RPC:
        return error(KL_E_INTERNAL); /* P6: no sealer / RPC configured */
    case KL_OPC_RSA:
    case KL_OPC_RSA_PSS:
    case KL_OPC_ECDSA:
    case KL_OPC_ED25519:
        /* P6/P7: a missing or all-zero SKI is `internal error`. */
        if (!kl_request_ski_valid(req))
            return error(KL_E_INTERNAL);
        return (kl_disp){KL_DISP_KEY_OP, KL_OK};
    }
    return error(KL_E_BAD_OPCODE);
}

/* {"deadline_ms":N}, N a JSON integer of at most 10 digits (no sign, no
 * leading zero, no blanks): what jansson would read, clamped to uint32 as
 * kl_req_context_parse clamps. Anything else: false. */
static bool deadline_only(const uint8_t *p, size_t len, uint32_t *ms)
{
    static const char pre[] = "{\"deadline_ms\":";
    const size_t n = sizeof pre - 1;
    if (len < n + 2 || len > n + 10 + 1 || memcmp(p, pre, n) != 0 ||
        p[len - 1] != '}')
        return false;
    size_t end = len - 1;
    if (p[n] == '0' && end - n > 1)
        return false; /* JSON has no leading zeros */
    uint64_t v = 0;
    for (size_t i = n; i < end; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    *ms = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
    return true;
}

kl_status kl_dispatch_context(const uint8_t *p, size_t len, kl_req_context *out)
{
    uint32_t ms;
    if (p && deadline_only(p, len, &ms)) {
        memset(out, 0, sizeof *out);
        out->has_deadline = true;
        out->deadline_ms = ms;
        return KL_OK;
    }
    return kl_req_context_parse(p, len, out);
}
