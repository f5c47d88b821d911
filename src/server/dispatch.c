#include "server/dispatch.h"

static kl_disp error(uint8_t err)
{
    return (kl_disp){KL_DISP_ERROR, err};
}

kl_disp kl_dispatch_decide(kl_status parse_status, const kl_request *req)
{
    /* P3: a malformed body is answered `format error` with the request's
     * id; the header length kept the stream in sync, so the connection
     * stays. */
    if (parse_status != KL_OK)
        return error(KL_ERR_FORMAT);
    switch (kl_op_classify(req->opcode)) {
    case KL_OPC_PING:
        /* P8: pings are answered cheaply, without touching keys. */
        return (kl_disp){KL_DISP_PONG, KL_ERR_NONE};
    case KL_OPC_RESPONSE_ONLY: return error(KL_ERR_UNEXPECTED_OPCODE); /* P4 */
    case KL_OPC_INVALID:
    case KL_OPC_CUSTOM:
        /* P4: unknown opcodes (0x00 and a missing opcode included) and an
         * unconfigured custom function are `bad opcode`. */
        return error(KL_ERR_BAD_OPCODE);
    case KL_OPC_SEAL:
    case KL_OPC_RPC:
        return error(KL_ERR_INTERNAL); /* P6: no sealer / RPC configured */
    case KL_OPC_RSA:
    case KL_OPC_RSA_PSS:
    case KL_OPC_ECDSA:
    case KL_OPC_ED25519:
        /* P6/P7: a missing or all-zero SKI is `internal error`. */
        if (!kl_request_ski_valid(req))
            return error(KL_ERR_INTERNAL);
        return (kl_disp){KL_DISP_KEY_OP, KL_ERR_NONE};
    }
    return error(KL_ERR_BAD_OPCODE);
}
