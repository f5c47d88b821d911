/* SPDX-License-Identifier: Apache-2.0 */
/* The SKI of a DER SubjectPublicKeyInfo without OpenSSL's decoders
 * (seal/sealed.h kl_sealed_spki_ski): a sealed file's public key must
 * hash to the SKI beside it, and checking that with d2i_PUBKEY cost more
 * than the rest of parsing a file (a decoder context per call). The
 * framing is checked strictly - definite lengths in their shortest form,
 * each element ending where its parent does - and the SKI is protocol
 * P7's: SHA-1 over the subjectPublicKey BIT STRING contents. */
#include <openssl/evp.h>

#include "core/cursor.h"
#include "seal/sealed.h"

/* One DER element header: tag, then a definite length of at most two
 * bytes in shortest form (a SubjectPublicKeyInfo here is < 64 KiB). The
 * contents come back as a cursor of exactly that length. */
static kl_status element(kl_cursor *c, uint8_t tag, kl_cursor *in)
{
    uint8_t t = 0, l0 = 0, l1 = 0, l2 = 0;
    size_t len;
    KL_GUARD(kl_read_u8(c, &t));
    KL_ENSURE(t == tag, KL_E_BAD_VALUE);
    KL_GUARD(kl_read_u8(c, &l0));
    if (l0 < 0x80) {
        len = l0;
    } else if (l0 == 0x81) {
        KL_GUARD(kl_read_u8(c, &l1));
        KL_ENSURE(l1 >= 0x80, KL_E_BAD_VALUE);
        len = l1;
    } else if (l0 == 0x82) {
        KL_GUARD(kl_read_u8(c, &l1));
        KL_GUARD(kl_read_u8(c, &l2));
        KL_ENSURE(l1 != 0, KL_E_BAD_VALUE);
        len = (size_t)l1 << 8 | l2;
    } else {
        return KL_E_BAD_VALUE;
    }
    return kl_read_sub(c, len, in);
}

kl_status kl_sealed_spki_ski(const uint8_t *der, size_t len,
                             uint8_t ski[KL_SEALED_SKI_LEN])
{
    kl_cursor c, spki, alg, bits;
    kl_cursor_init(&c, der, len);
    KL_ENSURE(element(&c, 0x30, &spki) == KL_OK && kl_cursor_left(&c) == 0,
              KL_E_BAD_VALUE);
    KL_ENSURE(element(&spki, 0x30, &alg) == KL_OK &&
                  element(&spki, 0x03, &bits) == KL_OK &&
                  kl_cursor_left(&spki) == 0,
              KL_E_BAD_VALUE);
    uint8_t unused = 1;
    KL_ENSURE(kl_read_u8(&bits, &unused) == KL_OK && unused == 0 &&
                  kl_cursor_left(&bits) > 0,
              KL_E_BAD_VALUE);
    unsigned int n = 0;
    KL_ENSURE(EVP_Digest(bits.p, bits.left, ski, &n, EVP_sha1(), NULL) == 1 &&
                  n == KL_SEALED_SKI_LEN,
              KL_E_INTERNAL);
    return KL_OK;
}
