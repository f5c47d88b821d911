/* SPDX-License-Identifier: Apache-2.0 */
/* Private to src/keys (and fuzz/fuzz_p11uri.c): a key store entry
 * "pkcs11:..." (RFC 7512, parsed by p11-kit) checked against keylessd's rules
 * (docs/OPERATIONS.md "Configuration", PKCS#11 URIs) and turned into plain
 * fields. The PIN never appears in messages: every text that names the URI uses
 * kl_p11_uri_redact. */
#ifndef KL_KEYS_P11URI_H
#define KL_KEYS_P11URI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define KL_P11_DEFAULT_SESSIONS 1u
#define KL_P11_MAX_SESSIONS 256u

typedef struct kl_p11_uri {
    char *module_path; /* module-path=, required */
    char token[33];    /* token= (label), when has_token */
    char serial[17];   /* serial=, when has_serial */
    unsigned long slot_id;
    bool has_token, has_serial, has_slot_id;
    char *object; /* object= (CKA_LABEL), or NULL */
    uint8_t *id;  /* id= (CKA_ID), or NULL */
    size_t id_len;
    char *pin;             /* pin-value=, or the pin-source file's first line;
                              NULL: no login. Wiped by kl_p11_uri_clear. */
    char *pin_source;      /* pin-source= path, or NULL */
    unsigned max_sessions; /* max-sessions=, 1..KL_P11_MAX_SESSIONS */
    char *redacted;        /* the URI as given, pin-value replaced */
} kl_p11_uri;

/* Parses and checks a URI. Does not read pin-source (see
 * kl_p11_uri_read_pin). On failure returns KL_E_CONFIG (KL_E_NOMEM) and
 * writes a one-line reason into why, and u holds nothing to free. */
KL_WUR kl_status kl_p11_uri_parse(const char *uri, kl_p11_uri *u, char *why,
                                  size_t whylen);
/* Reads the PIN from pin-source (a path, or a file: URI): its first line.
 * No-op without pin-source. */
KL_WUR kl_status kl_p11_uri_read_pin(kl_p11_uri *u, char *why, size_t whylen);
/* Frees every field, wiping the PIN. */
void kl_p11_uri_clear(kl_p11_uri *u);
/* A malloc'd copy of uri with the value of every pin-value attribute
 * replaced by "***" (NULL when out of memory). */
char *kl_p11_uri_redact(const char *uri);

#endif
