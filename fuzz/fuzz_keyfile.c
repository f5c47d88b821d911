/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for key files: the input is one file's bytes, fed to the
 * very decode path the key store uses (PEM framing, DER shape check,
 * OpenSSL decoder, key policy), then to the SKI computation. Aborts if a
 * key that was accepted breaks the store's invariants. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "keys/decode.h"
#include "keys/keystore.h"

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            abort();                                                           \
    } while (0)

static kl_key_decoder *g_dec;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_dec)
        g_dec = kl_key_decoder_new(); /* reused, as the loader does */
    CHECK(g_dec != NULL);

    /* the DER classifier alone, on the raw bytes */
    const uint8_t *oid = NULL;
    size_t oid_len = 0;
    if (kl_der_classify(data, size, &oid, &oid_len) == KL_DER_PKCS8)
        CHECK(oid >= data && oid + oid_len <= data + size);

    EVP_PKEY *pkey = NULL;
    kl_key_info info;
    char why[KL_KEY_WHY_LEN];
    why[0] = 0;
    kl_status s =
        kl_key_decode_buffer(g_dec, data, size, &pkey, &info, why, sizeof why);
    if (s != KL_OK) {
        CHECK(pkey == NULL);
        CHECK(why[0] != 0); /* every refusal says why */
        CHECK(memchr(why, 0, sizeof why) != NULL);
        return 0;
    }
    CHECK(pkey != NULL);
    CHECK(info.type == KL_KEY_RSA || info.type == KL_KEY_EC ||
          info.type == KL_KEY_ED25519);
    if (info.type == KL_KEY_RSA)
        CHECK(info.bits >= 1024 && info.bits <= 8192);
    uint8_t ski[KL_SKI_LEN];
    CHECK(kl_ski_from_pkey(pkey, ski) == KL_OK);
    kl_key_info again;
    CHECK(kl_key_check_pkey(pkey, &again, why, sizeof why) == KL_OK);
    CHECK(again.type == info.type && again.curve == info.curve);
    EVP_PKEY_free(pkey);
    return 0;
}
