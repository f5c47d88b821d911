/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers for the crypto tests (header-only: each test_*.c is a program). */
#ifndef KL_TEST_CRYPTOTEST_H
#define KL_TEST_CRYPTOTEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include "testutil.h"

#include "crypto/ops.h"
#include "keys/keystore.h"

/* The five vector keys. */
static kl_keystore *ct_vector_store(void)
{
    kl_keystore_opts o = {.allow_group_readable = true}; /* git's 0644 */
    kl_keystore *ks = kl_keystore_new(&o);
    assert_non_null(ks);
    assert_int_equal(kl_keystore_add_dir(ks, tu_vector_path("keys")), KL_OK);
    assert_int_equal(kl_keystore_count(ks), 5);
    return ks;
}

struct ct_scan {
    char want[64];
    const kl_key *found;
};

static void ct_scan_fn(void *arg, const kl_key *k)
{
    struct ct_scan *s = arg;
    const char *p = kl_key_path(k);
    size_t n = strlen(p), w = strlen(s->want);
    if (n >= w && strcmp(p + n - w, s->want) == 0)
        s->found = k;
}

/* A vector key by name ("rsa-2048", "ecdsa-p256", ...). */
static const kl_key *ct_key(const kl_keystore *ks, const char *name)
{
    struct ct_scan s = {.found = NULL};
    snprintf(s.want, sizeof s.want, "/%s.key", name);
    kl_keystore_foreach(ks, ct_scan_fn, &s);
    if (!s.found)
        fail_msg("no vector key %s", name);
    return s.found;
}

/* The public key of a vector key, from pubkeys/ (independent of the
 * private key files). */
static EVP_PKEY *ct_pubkey(const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "pubkeys/%s.pubkey.pem", name);
    FILE *f = fopen(tu_vector_path(rel), "r");
    assert_non_null(f);
    EVP_PKEY *k = PEM_read_PUBKEY(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(k);
    return k;
}

static const EVP_MD *ct_md(uint8_t op)
{
    switch (op) {
    case 0x02: return EVP_md5_sha1();
    case 0x03: return EVP_sha1();
    case 0x04: return EVP_sha224();
    case 0x05:
    case 0x35: return EVP_sha256();
    case 0x06:
    case 0x36: return EVP_sha384();
    case 0x07:
    case 0x37: return EVP_sha512();
    default: return NULL;
    }
}

/* Verifies what kl_crypto_exec produced for op over in, with pub, using
 * only OpenSSL (protocol P4 semantics: PSS salt length = hash length). */
static int ct_verify(EVP_PKEY *pub, uint8_t op, const uint8_t *in, size_t inlen,
                     const uint8_t *sig, size_t siglen)
{
    int ok;
    if (op == 0x18) {
        EVP_MD_CTX *m = EVP_MD_CTX_new();
        ok = EVP_DigestVerifyInit_ex(m, NULL, NULL, NULL, NULL, pub, NULL) ==
                 1 &&
             EVP_DigestVerify(m, sig, siglen, in, inlen) == 1;
        EVP_MD_CTX_free(m);
        return ok;
    }
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_pkey(NULL, pub, NULL);
    ok = c && EVP_PKEY_verify_init(c) == 1;
    if (ok && op >= 0x02 && op <= 0x07)
        ok = EVP_PKEY_CTX_set_rsa_padding(c, RSA_PKCS1_PADDING) == 1 &&
             EVP_PKEY_CTX_set_signature_md(c, ct_md(op)) == 1;
    if (ok && op >= 0x35 && op <= 0x37)
        ok = EVP_PKEY_CTX_set_rsa_padding(c, RSA_PKCS1_PSS_PADDING) == 1 &&
             EVP_PKEY_CTX_set_signature_md(c, ct_md(op)) == 1 &&
             EVP_PKEY_CTX_set_rsa_mgf1_md(c, ct_md(op)) == 1 &&
             EVP_PKEY_CTX_set_rsa_pss_saltlen(c, EVP_MD_get_size(ct_md(op))) ==
                 1;
    ok = ok && EVP_PKEY_verify(c, sig, siglen, in, inlen) == 1;
    EVP_PKEY_CTX_free(c);
    return ok;
}

static void ct_fill(uint8_t *p, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(seed + i * 31);
}

#endif
