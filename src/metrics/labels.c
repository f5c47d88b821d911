/* SPDX-License-Identifier: Apache-2.0 */
/* Label values and bucket boundaries. The reference's ones (protocol P6)
 * must stay byte for byte, or existing dashboards and alerts stop
 * matching. */
#include "keyless/protocol.h"
#include "metrics/internal.h"

/* The values kl_op_type returns (P6); the unit test checks they agree for
 * every opcode. */
const char *const mx_type_names[MX_TYPES] = {
    "rsa", "ecdsa", "ed25519", "custom", "rpc", "other", "unknown",
};

/* The reference's 15 buckets, 0.0001 s doubling (its "le" texts are the
 * shortest decimal forms of those floats). Written out rather than
 * printed, so no rounding can ever change a boundary's text. */
const char *const mx_le_texts[KL_METRICS_BUCKETS] = {
    "0.0001", "0.0002", "0.0004", "0.0008", "0.0016",
    "0.0032", "0.0064", "0.0128", "0.0256", "0.0512",
    "0.1024", "0.2048", "0.4096", "0.8192", "1.6384",
};

/* kl_cost_class order (crypto/ops.h). */
const char *const mx_class_names[KL_METRICS_COST_CLASSES] = {
    "fast",
    "slow",
    "blocking",
};

const char *const mx_shed_names[KL_SHED_REASONS] = {
    "queue_full",
    "deadline",
    "inflight_limit",
    "draining",
};

const char *const mx_hs_names[KL_HS_FAIL_REASONS] = {
    "timeout", "certificate", "protocol", "closed", "other",
};

const char *const mx_logsup_names[KL_LOGSUP_KINDS] = {
    "handshake_failed",
    "handshake_timeout",
    "handshake_too_big",
};

const char *const mx_conn_names[KL_MCONN_STATES] = {
    "none",
    "handshake",
    "open",
    "draining",
};

/* the options' names, so that an alert names what to raise */
const char *const mx_refusal_names[KL_REFUSE_REASONS] = {
    "max_connections",
    "max_handshaking_per_source",
};

const char *const mx_close_names[KL_CLOSE_REASONS] = {
    "untrusted",
    "cert_expired",
};

const char *const mx_http_close_names[MX_HTTP_CLOSES] = {
    "evicted",
    "head_timeout",
    "answer_timeout",
};

int mx_type_index(uint8_t opcode)
{
    switch (kl_op_classify(opcode)) {
    case KL_OPC_RSA:
    case KL_OPC_RSA_PSS: return 0;
    case KL_OPC_ECDSA: return 1;
    case KL_OPC_ED25519: return 2;
    case KL_OPC_CUSTOM: return 3;
    case KL_OPC_RPC: return 4;
    case KL_OPC_SEAL:
    case KL_OPC_PING:
    case KL_OPC_RESPONSE_ONLY: return 5;
    case KL_OPC_INVALID: break;
    }
    return 6;
}

_Static_assert(KL_ERR_MAX + 2 == MX_ERRS, "one slot per P6 code + unknown");

int mx_err_index(kl_status err)
{
    if (err == KL_OK) /* most answers: no call on the request path */
        return 0;
    uint8_t code = kl_status_to_p6(err);
    return code <= KL_ERR_MAX ? code : MX_ERRS - 1;
}

const char *mx_err_label(int err_index)
{
    /* kl_err_text gives "unknown error" beyond the last code. */
    return kl_err_text(err_index < MX_ERRS - 1 ? (uint8_t)err_index : 0xFF);
}

int mx_bucket_index(uint64_t ns)
{
    /* Bucket i holds 100 us * 2^i; "le" is inclusive. */
    uint64_t bound = 100000;
    for (int i = 0; i < KL_METRICS_BUCKETS; i++, bound <<= 1)
        if (ns <= bound)
            return i;
    return KL_METRICS_BUCKETS;
}
