/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the PKCS#11 URI wrapper of the key store -
 * p11-kit's RFC 7512 parser plus keylessd's rules and PIN redaction. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "keys/p11uri.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = 0;
    char *r = kl_p11_uri_redact(s);
    if (r && strlen(r) > strlen(s) + 3 * (strlen(s) / 10 + 1))
        abort(); /* redaction never grows past its bound */
    free(r);
    kl_p11_uri u;
    char why[256];
    if (kl_p11_uri_parse(s, &u, why, sizeof why) == KL_OK) {
        if (!u.module_path || !*u.module_path || !u.redacted ||
            u.has_token + u.has_serial + u.has_slot_id != 1 ||
            (!u.object && !u.id) || u.max_sessions < 1 ||
            u.max_sessions > KL_P11_MAX_SESSIONS)
            abort(); /* accepted something the rules refuse */
        kl_p11_uri_clear(&u);
    }
    free(s);
    return 0;
}
