/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the sealed key file parser (seal/sealed.h, docs/SEALING.md
 * "The file, byte by byte"). Any bytes must parse or give an error "at
 * <offset>: ..." - never a crash, a hang or a leak. A file that parses
 * must encode back to exactly its bytes (one file, one encoding), and is
 * then opened with two fixed node keys, one per KEM, derived from the
 * seeds' ikm: the seeds (fuzz/corpus/sealed/) were sealed to them, so the
 * fuzzer reaches the unwrap and the body, where any change must fail. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "seal/sealed.h"

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            abort();                                                           \
    } while (0)

static EVP_PKEY *node_keys[2];

/* The seeds' node keys: DeriveKeyPair("fuzz_sealed x25519" / "... p256"). */
static void keys_once(void)
{
    if (node_keys[0])
        return;
    static const char *ikm[2] = {"fuzz_sealed node key x25519 ikm 32b",
                                 "fuzz_sealed node key p256 ikm 32bytes"};
    static const uint16_t kem[2] = {KL_HPKE_KEM_X25519, KL_HPKE_KEM_P256};
    for (size_t i = 0; i < 2; i++)
        CHECK(kl_hpke_derive(kem[i], (const uint8_t *)ikm[i], strlen(ikm[i]),
                             &node_keys[i]) == KL_OK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    keys_once();
    kl_sealed *s = NULL;
    char err[256] = "";
    kl_status st = kl_sealed_parse(data, size, &s, err, sizeof err);
    if (st != KL_OK) {
        CHECK(s == NULL);
        CHECK(st == KL_E_BAD_VALUE || st == KL_E_TRUNCATED ||
              st == KL_E_TOO_LARGE || st == KL_E_NOMEM);
        CHECK(strncmp(err, "at ", 3) == 0);
        return 0;
    }
    uint8_t *again = NULL;
    size_t alen = 0;
    CHECK(kl_sealed_encode(s, &again, &alen) == KL_OK);
    CHECK(alen == size && memcmp(again, data, size) == 0);
    free(again);
    for (size_t k = 0; k < 2; k++) {
        size_t idx = 0;
        if (kl_sealed_find(s, node_keys[k], &idx) != KL_OK)
            continue;
        EVP_PKEY *key = NULL;
        st = kl_sealed_open(s, idx, node_keys[k], &key, err, sizeof err);
        CHECK((st == KL_OK) == (key != NULL));
        CHECK(st == KL_OK || st == KL_E_KEY || st == KL_E_NOMEM);
        EVP_PKEY_free(key);
    }
    kl_sealed_free(s);
    return 0;
}
