/* SPDX-License-Identifier: Apache-2.0 */
/* The Keyless wire protocol 1.0 (docs/PROTOCOL.md, sections P1..P9):
 * constants, names, and a pure codec (no I/O, no allocation).
 *
 * Parsing is zero-copy: a parsed kl_request points into the caller's body
 * buffer, which must outlive it. Encoding writes into a caller's buffer. */
#ifndef KEYLESS_PROTOCOL_H
#define KEYLESS_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keyless/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KL_DEFAULT_PORT 2407
#define KL_VERSION_MAJOR 1
#define KL_VERSION_MINOR 0
#define KL_HEADER_LEN 8u
#define KL_MAX_BODY 65535u
#define KL_MAX_MESSAGE (KL_HEADER_LEN + KL_MAX_BODY)
#define KL_ITEM_HEADER_LEN 3u
/* P5: small messages are padded up to this many bytes. */
#define KL_PAD_TARGET 1024u
#define KL_SKI_LEN 20u
#define KL_DIGEST_LEN 32u
/* Largest payload a response can carry: body = opcode item (4) +
 * payload item header (3) + payload. */
#define KL_MAX_RESPONSE_PAYLOAD (KL_MAX_BODY - 4u - KL_ITEM_HEADER_LEN)

/* P3 item tags. */
enum kl_tag {
    KL_TAG_DIGEST = 0x01,
    KL_TAG_SNI = 0x02,
    KL_TAG_CLIENT_IP = 0x03,
    KL_TAG_SKI = 0x04,
    KL_TAG_SERVER_IP = 0x05,
    KL_TAG_CERT_ID = 0x06,
    KL_TAG_OPCODE = 0x11,
    KL_TAG_PAYLOAD = 0x12,
    KL_TAG_CUSTOM_FUNC = 0x13,
    KL_TAG_SUPPLEMENTAL = 0x14,
    KL_TAG_SPAN_CONTEXT = 0x15,
    KL_TAG_REQ_CONTEXT = 0x16,
    KL_TAG_COMPLIANCE = 0x17,
    KL_TAG_PADDING = 0x20,
};

/* P4 opcodes. */
enum kl_op {
    KL_OP_NONE = 0x00,
    KL_OP_RSA_DECRYPT = 0x01,
    KL_OP_RSA_SIGN_MD5SHA1 = 0x02,
    KL_OP_RSA_SIGN_SHA1 = 0x03,
    KL_OP_RSA_SIGN_SHA224 = 0x04,
    KL_OP_RSA_SIGN_SHA256 = 0x05,
    KL_OP_RSA_SIGN_SHA384 = 0x06,
    KL_OP_RSA_SIGN_SHA512 = 0x07,
    KL_OP_RSA_DECRYPT_RAW = 0x08, /* older servers only: bad opcode here */
    KL_OP_ECDSA_SIGN_MD5SHA1 = 0x12,
    KL_OP_ECDSA_SIGN_SHA1 = 0x13,
    KL_OP_ECDSA_SIGN_SHA224 = 0x14,
    KL_OP_ECDSA_SIGN_SHA256 = 0x15,
    KL_OP_ECDSA_SIGN_SHA384 = 0x16,
    KL_OP_ECDSA_SIGN_SHA512 = 0x17,
    KL_OP_ED25519_SIGN = 0x18,
    KL_OP_SEAL = 0x21,
    KL_OP_UNSEAL = 0x22,
    KL_OP_RPC = 0x23,
    KL_OP_CUSTOM = 0x24,
    KL_OP_RSA_PSS_SIGN_SHA256 = 0x35,
    KL_OP_RSA_PSS_SIGN_SHA384 = 0x36,
    KL_OP_RSA_PSS_SIGN_SHA512 = 0x37,
    KL_OP_RESPONSE = 0xF0,
    KL_OP_PING = 0xF1,
    KL_OP_PONG = 0xF2,
    KL_OP_ERROR = 0xFF,
};

/* P6 error codes (the 1-byte payload of an KL_OP_ERROR response). */
enum kl_err {
    KL_ERR_NONE = 0x00,
    KL_ERR_CRYPTO = 0x01,
    KL_ERR_KEY_NOT_FOUND = 0x02,
    KL_ERR_READ = 0x03,
    KL_ERR_VERSION_MISMATCH = 0x04,
    KL_ERR_BAD_OPCODE = 0x05,
    KL_ERR_UNEXPECTED_OPCODE = 0x06,
    KL_ERR_FORMAT = 0x07,
    KL_ERR_INTERNAL = 0x08,
    KL_ERR_CERT_NOT_FOUND = 0x09,
    KL_ERR_EXPIRED = 0x0A,
    KL_ERR_REMOTE_CONFIG = 0x0B,
};
#define KL_ERR_MAX KL_ERR_REMOTE_CONFIG

/* What an opcode asks for, by key family (P4). */
typedef enum kl_op_class {
    KL_OPC_INVALID = 0,   /* not a request opcode: bad opcode */
    KL_OPC_RESPONSE_ONLY, /* 0xF0/0xF2/0xFF: unexpected opcode */
    KL_OPC_PING,          /* answered inline with a pong */
    KL_OPC_RSA,           /* decrypt and PKCS#1 v1.5 signatures */
    KL_OPC_RSA_PSS,       /* RSASSA-PSS */
    KL_OPC_ECDSA,         /* ECDSA over a digest */
    KL_OPC_ED25519,       /* pure Ed25519 over a message */
    KL_OPC_SEAL,          /* seal/unseal: internal error unless configured */
    KL_OPC_RPC,           /* internal error unless configured */
    KL_OPC_CUSTOM,        /* bad opcode unless configured */
} kl_op_class;

kl_op_class kl_op_classify(uint8_t op);

/* The reference's name of an opcode, for metrics and logs (P6):
 * "OpRSADecrypt", ... and "Op(N)" (decimal) for unknown values.
 * Never NULL; the returned string is static. */
const char *kl_op_name(uint8_t op);
/* The metrics operation type label: "rsa", "ecdsa", "ed25519", "custom",
 * "rpc", "other" or "unknown" (P6). */
const char *kl_op_type(uint8_t op);
/* The reference's error text for a code 0x00..0x0B ("no error",
 * "cryptography error", ...); "unknown error" beyond. */
const char *kl_err_text(uint8_t err);
/* A short identifier for a code, for flags and config: "crypto",
 * "key_not_found", ... */
const char *kl_err_name(uint8_t err);

/* The hash of a signing opcode, for digest-length checks; 0 if none.
 * Returns the digest size in bytes (MD5SHA1: 36). */
size_t kl_op_digest_len(uint8_t op);

/* ---- P2 header ---------------------------------------------------------- */

typedef struct kl_header {
    uint8_t major;
    uint8_t minor;
    uint16_t length; /* body bytes that follow the header */
    uint32_t id;
} kl_header;

/* Decodes the 8-byte header at the start of buf. KL_E_AGAIN if len < 8.
 * The version bytes are reported, never checked (P2). */
KL_WUR kl_status kl_header_decode(const uint8_t *buf, size_t len,
                                  kl_header *out);

/* Checks whether buf starts with a complete message. On KL_OK, *frame_len
 * is 8 + body length and *hdr is filled; KL_E_AGAIN if more bytes are
 * needed. There is no other failure: any 16-bit length is legal. */
KL_WUR kl_status kl_frame_peek(const uint8_t *buf, size_t len, kl_header *hdr,
                               size_t *frame_len);

/* ---- P3 items: a parsed request ----------------------------------------- */

typedef struct kl_slice {
    const uint8_t *ptr;
    size_t len;
} kl_slice;

/* A parsed request. Slices point into the parsed body; a slice with
 * ptr == NULL is absent. Items that the rules of P3 treat as absent (an SKI
 * not 20 bytes long, a digest not 32 bytes long) are left absent. */
typedef struct kl_request {
    kl_header hdr;
    bool has_opcode;
    uint8_t opcode;   /* KL_OP_NONE when absent (P3) */
    kl_slice payload; /* empty (ptr may be NULL) when absent */
    bool has_ski;     /* 20-byte SKI present (may still be all zero) */
    uint8_t ski[KL_SKI_LEN];
    bool has_digest;
    uint8_t digest[KL_DIGEST_LEN];
    kl_slice sni;
    kl_slice client_ip; /* 4 or 16 bytes when present */
    kl_slice server_ip; /* 4 or 16 bytes when present */
    kl_slice cert_id;
    kl_slice custom_func;
    kl_slice supplemental;
    kl_slice span_context; /* raw tag 0x15 */
    kl_slice req_context;  /* raw tag 0x16 JSON */
    bool has_compliance;
    uint8_t compliance;     /* tag 0x17 */
    uint8_t stray_bytes;    /* 1 or 2 trailing bytes ignored (P3) */
    uint32_t unknown_items; /* count of skipped unknown tags */
} kl_request;

/* Parses a request body (the bytes after the header) under the rules of
 * P3. Errors: KL_E_ITEM_OVERRUN, KL_E_DUP_TAG, KL_E_OPCODE_LEN,
 * KL_E_COMPLIANCE_LEN, KL_E_IP_LEN - each answered `format error`. */
KL_WUR kl_status kl_request_parse(const uint8_t *body, size_t len,
                                  kl_request *req);

/* True when the SKI is present and not all zero (P7). */
bool kl_request_ski_valid(const kl_request *req);

/* ---- P5 responses and request encoding ---------------------------------- */

/* Bytes a message occupies when its body before padding is b bytes (P5):
 * b + 8 >= 1024 -> b + 8; else b + 8 + 3 + max(0, 1024 - (b + 8 + 3)). */
size_t kl_padded_message_len(size_t body_before_padding);

/* Size of a response message carrying plen payload bytes. */
size_t kl_response_len(size_t plen);

/* Encodes a complete response (header + opcode item + payload item when
 * plen > 0 + padding). Writes *out_len bytes. KL_E_TOO_LARGE when the
 * payload exceeds KL_MAX_RESPONSE_PAYLOAD or cap is too small. */
KL_WUR kl_status kl_response_encode(uint8_t *out, size_t cap, uint32_t id,
                                    uint8_t opcode, const uint8_t *payload,
                                    size_t plen, size_t *out_len);

/* Encodes an error response (opcode 0xFF, 1-byte payload). */
KL_WUR kl_status kl_error_encode(uint8_t *out, size_t cap, uint32_t id,
                                 uint8_t err, size_t *out_len);

/* A decoded response (client side). */
typedef struct kl_response {
    kl_header hdr;
    uint8_t opcode;   /* KL_OP_RESPONSE, KL_OP_PONG or KL_OP_ERROR */
    kl_slice payload; /* points into the parsed body */
    uint8_t error;    /* for KL_OP_ERROR: the code; else KL_ERR_NONE */
} kl_response;

/* Parses a response body with the same item rules as requests. An error
 * response whose payload is not exactly 1 byte is KL_E_BAD_VALUE; a missing
 * opcode is KL_E_BAD_VALUE. */
KL_WUR kl_status kl_response_parse(const kl_header *hdr, const uint8_t *body,
                                   size_t len, kl_response *resp);

/* What a client puts in a request. Absent fields: NULL/0 or has_* false. */
typedef struct kl_request_spec {
    uint32_t id;
    uint8_t opcode;
    const uint8_t *payload;
    size_t payload_len;
    const uint8_t *supplemental;
    size_t supplemental_len;
    const uint8_t *ski;    /* 20 bytes or NULL */
    const uint8_t *digest; /* 32 bytes or NULL */
    const uint8_t *client_ip;
    size_t client_ip_len; /* 4 or 16 */
    const uint8_t *server_ip;
    size_t server_ip_len; /* 4 or 16 */
    const char *sni;
    const char *cert_id;
    const char *custom_func;
    const uint8_t *span_context;
    size_t span_context_len;
    const char *req_context; /* JSON text */
    bool has_compliance;
    uint8_t compliance;
    bool no_padding; /* tests only: omit the padding item */
} kl_request_spec;

/* Encodes a request in the reference client's item order (opcode, payload,
 * supplemental, SKI, digest, client IP, server IP, SNI, cert id, custom
 * function, span context, request context, compliance region, padding). */
KL_WUR kl_status kl_request_encode(uint8_t *out, size_t cap,
                                   const kl_request_spec *spec,
                                   size_t *out_len);

/* ---- P3 tag 0x15 and 0x16, P9 extensions --------------------------------- */

typedef struct kl_span_context {
    uint8_t trace_id[16];
    uint64_t span_id;
    uint64_t parent_id;
    uint8_t flags;
} kl_span_context;

/* Parses a span context in the Jaeger binary form or the text form
 * "traceid:spanid:parentid:flags" (hex). KL_E_BAD_VALUE if neither. */
KL_WUR kl_status kl_span_context_parse(const uint8_t *p, size_t len,
                                       kl_span_context *out);

#define KL_REQUEST_ID_MAX 128

typedef struct kl_req_context {
    char request_id[KL_REQUEST_ID_MAX + 1]; /* "" when absent; truncated */
    bool has_deadline;
    uint32_t deadline_ms; /* P9 */
    bool has_hops;
    uint32_t hops;  /* P9 */
    char trace[64]; /* P9 W3C traceparent, "" when absent */
} kl_req_context;

/* Parses the tag-0x16 JSON object. Unknown members are ignored; a value of
 * the wrong type is ignored too. KL_E_BAD_VALUE when the text is not a JSON
 * object (the caller logs it and serves the request anyway). */
KL_WUR kl_status kl_req_context_parse(const uint8_t *p, size_t len,
                                      kl_req_context *out);

/* Writes a request-context JSON object with the given members into out
 * (NUL-terminated). request_id may be NULL; deadline/hops are written when
 * their has_* is set. KL_E_TOO_LARGE if it does not fit. */
KL_WUR kl_status kl_req_context_format(char *out, size_t cap,
                                       const kl_req_context *ctx);

#ifdef __cplusplus
}
#endif

#endif
