/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the HPKE tests (test_hpke.c, test_hpke_bad.c): the suites and
 * fresh recipient keys. Header-only: each test_*.c is a program. */
#ifndef KL_TEST_HPKETEST_H
#define KL_TEST_HPKETEST_H

#include "testutil.h"

#include "seal/hpke.h"

/* every KEM and every AEAD of seal/hpke.h */
static const uint16_t kems[] = {KL_HPKE_KEM_X25519, KL_HPKE_KEM_P256};
static const uint16_t aeads[] = {KL_HPKE_AEAD_AES128GCM, KL_HPKE_AEAD_AES256GCM,
                                 KL_HPKE_AEAD_CHACHA20};

static kl_hpke_suite suite_of(uint16_t kem, uint16_t aead)
{
    return (kl_hpke_suite){kem, KL_HPKE_KDF_SHA256, aead};
}

/* A fresh recipient key and its serialised public key. */
static EVP_PKEY *recipient(uint16_t kem, uint8_t *pk, size_t *pk_len)
{
    EVP_PKEY *k = NULL;
    assert_int_equal(kl_hpke_generate(kem, &k), KL_OK);
    assert_int_equal(kl_hpke_public(kem, k, pk, KL_HPKE_MAX_ENC, pk_len),
                     KL_OK);
    assert_int_equal(*pk_len, kl_hpke_pk_len(kem));
    return k;
}

#endif
