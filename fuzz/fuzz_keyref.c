/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the key-reference body parser (provider/keyref.h):
 * anything that parses must encode and parse back to the same reference,
 * and encoding is canonical (a second round trip gives the same bytes). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "provider/keyref.h"

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            abort();                                                           \
    } while (0)

static int same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kl_keyref r, back;
    char err[256];
    uint8_t *enc, *enc2;
    size_t len, len2;

    if (kl_keyref_parse(data, size, &r, err, sizeof err) != KL_OK) {
        CHECK(r.nservers == 0 && r.spki == NULL && err[0] != '\0');
        return 0;
    }
    CHECK(r.nservers >= 1 && r.nservers <= KL_KEYREF_MAX_SERVERS);
    CHECK(r.spki && r.spki_len > 0);
    CHECK(kl_keyref_encode(&r, &enc, &len) == KL_OK);
    CHECK(kl_keyref_parse(enc, len, &back, err, sizeof err) == KL_OK);
    CHECK(memcmp(back.ski, r.ski, KL_SKI_LEN) == 0);
    CHECK(back.nservers == r.nservers);
    for (size_t i = 0; i < r.nservers; i++)
        CHECK(strcmp(back.servers[i], r.servers[i]) == 0);
    CHECK(same_str(back.cert_file, r.cert_file));
    CHECK(same_str(back.key_file, r.key_file));
    CHECK(same_str(back.ca_file, r.ca_file));
    CHECK(same_str(back.server_name, r.server_name));
    CHECK(same_str(back.fallback_key, r.fallback_key));
    CHECK(back.timeout_ms == r.timeout_ms);
    CHECK(back.spki_len == r.spki_len &&
          memcmp(back.spki, r.spki, r.spki_len) == 0);
    CHECK(kl_keyref_encode(&back, &enc2, &len2) == KL_OK);
    CHECK(len2 == len && memcmp(enc, enc2, len) == 0);
    free(enc);
    free(enc2);
    kl_keyref_clear(&back);
    kl_keyref_clear(&r);
    return 0;
}
