/* SPDX-License-Identifier: Apache-2.0 */
/* The DH hook (seal/hpke.h kl_hpke_key_set_dh): a public key carrying a
 * hook opens what its private key opens - the same Decap secret, HPKE
 * messages and sealed key files - with the hook called for DH(skR, pkE)
 * and given enc; a hook's failure and an all-zero result are refused and
 * leave no secret; the hook's arg is freed exactly once, with the key (or
 * when attaching fails), and EVP_PKEY_dup's copy has no hook. The token
 * behind the real hook is tested in tests/unit/keys/test_p11_seal.c. */
#include "hpketest.h"

#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "seal/hpke_int.h"
#include "seal/sealed.h"

/* The hook's state: a software private key standing in for a token. */
typedef struct sw_dh {
    EVP_PKEY *priv;
    int calls, frees;
    uint8_t last_pke[KL_HPKE_MAX_ENC];
    size_t last_len;
    kl_status fail; /* KL_OK: compute; else return it */
    bool zero;      /* return 32 zero bytes */
} sw_dh;

static kl_status sw_dh_fn(void *arg, uint16_t kem, const uint8_t *pke,
                          size_t len, uint8_t *out)
{
    sw_dh *d = arg;
    d->calls++;
    assert_true(len <= sizeof d->last_pke);
    memcpy(d->last_pke, pke, len);
    d->last_len = len;
    if (d->fail != KL_OK) {
        memset(out, 0xAA, 32); /* garbage the caller must wipe */
        return d->fail;
    }
    if (d->zero) {
        memset(out, 0, 32);
        return KL_OK;
    }
    EVP_PKEY *peer = NULL;
    assert_int_equal(kl_hpke_public_key(kem, pke, len, &peer), KL_OK);
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_pkey(NULL, d->priv, NULL);
    size_t n = 32;
    assert_non_null(c);
    assert_int_equal(EVP_PKEY_derive_init(c), 1);
    assert_int_equal(EVP_PKEY_derive_set_peer_ex(c, peer, 0), 1);
    assert_int_equal(EVP_PKEY_derive(c, out, &n), 1);
    assert_int_equal(n, 32);
    EVP_PKEY_CTX_free(c);
    EVP_PKEY_free(peer);
    return KL_OK;
}

static void sw_dh_free(void *arg)
{
    ((sw_dh *)arg)->frees++;
}

static const kl_hpke_dh_hook sw_hook = {sw_dh_fn, sw_dh_free};

/* The public half of priv, as a key of its own, with the hook on it. */
static EVP_PKEY *hooked(uint16_t kem, sw_dh *d, EVP_PKEY *priv)
{
    uint8_t pk[KL_HPKE_MAX_ENC];
    size_t pl = 0;
    EVP_PKEY *pub = NULL;
    memset(d, 0, sizeof *d);
    d->priv = priv;
    assert_int_equal(kl_hpke_public(kem, priv, pk, sizeof pk, &pl), KL_OK);
    assert_int_equal(kl_hpke_public_key(kem, pk, pl, &pub), KL_OK);
    assert_int_equal(kl_hpke_key_set_dh(pub, &sw_hook, d), KL_OK);
    return pub;
}

/* Decap with the hooked public key gives the private key's secret; the
 * hook saw enc. */
static void test_decap_through_hook(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof kems / sizeof kems[0]; k++) {
        uint8_t pk[KL_HPKE_MAX_ENC], enc[KL_HPKE_MAX_ENC];
        uint8_t ss_s[32], ss_p[32], ss_h[32];
        size_t pl, el;
        EVP_PKEY *priv = recipient(kems[k], pk, &pl);
        sw_dh d;
        EVP_PKEY *pub = hooked(kems[k], &d, priv);
        assert_int_equal(
            kl_hpke_encap(kems[k], NULL, pk, pl, ss_s, enc, sizeof enc, &el),
            KL_OK);
        assert_int_equal(kl_hpke_decap(kems[k], enc, el, priv, ss_p), KL_OK);
        assert_int_equal(kl_hpke_decap(kems[k], enc, el, pub, ss_h), KL_OK);
        assert_memory_equal(ss_s, ss_p, 32);
        assert_memory_equal(ss_s, ss_h, 32);
        assert_int_equal(d.calls, 1);
        assert_int_equal(d.last_len, el);
        assert_memory_equal(d.last_pke, enc, el);
        EVP_PKEY_free(pub);
        assert_int_equal(d.frees, 1);
        EVP_PKEY_free(priv);
    }
}

/* SealBase to the public key, OpenBase with the hooked key, every KEM. */
static void test_open_once_through_hook(void **state)
{
    (void)state;
    static const uint8_t info[] = "info", aad[] = "aad", msg[] = "data key";
    for (size_t k = 0; k < sizeof kems / sizeof kems[0]; k++) {
        uint8_t pk[KL_HPKE_MAX_ENC], enc[KL_HPKE_MAX_ENC];
        uint8_t ct[sizeof msg + KL_HPKE_TAG_LEN], pt[sizeof msg];
        size_t pl, el, cl, ptl;
        EVP_PKEY *priv = recipient(kems[k], pk, &pl);
        sw_dh d;
        EVP_PKEY *pub = hooked(kems[k], &d, priv);
        kl_hpke_suite su = suite_of(kems[k], KL_HPKE_AEAD_AES256GCM);
        assert_int_equal(kl_hpke_seal_once(su, pk, pl, info, sizeof info, aad,
                                           sizeof aad, msg, sizeof msg, enc,
                                           sizeof enc, &el, ct, sizeof ct, &cl),
                         KL_OK);
        assert_int_equal(kl_hpke_open_once(su, enc, el, pub, info, sizeof info,
                                           aad, sizeof aad, ct, cl, pt,
                                           sizeof pt, &ptl),
                         KL_OK);
        assert_int_equal(ptl, sizeof msg);
        assert_memory_equal(pt, msg, sizeof msg);
        EVP_PKEY_free(pub);
        EVP_PKEY_free(priv);
    }
}

/* A hook that fails, or returns all zero: the status comes back, the
 * shared secret is wiped. */
static void test_hook_failures(void **state)
{
    (void)state;
    uint8_t pk[KL_HPKE_MAX_ENC], enc[KL_HPKE_MAX_ENC], ss[32];
    static const uint8_t none[32];
    size_t pl, el;
    EVP_PKEY *priv = recipient(KL_HPKE_KEM_P256, pk, &pl);
    sw_dh d;
    EVP_PKEY *pub = hooked(KL_HPKE_KEM_P256, &d, priv);
    assert_int_equal(
        kl_hpke_encap(KL_HPKE_KEM_P256, NULL, pk, pl, ss, enc, sizeof enc, &el),
        KL_OK);
    d.fail = KL_E_KEY;
    memset(ss, 0x55, sizeof ss);
    assert_int_equal(kl_hpke_decap(KL_HPKE_KEM_P256, enc, el, pub, ss),
                     KL_E_KEY);
    assert_memory_equal(ss, none, sizeof ss);
    d.fail = KL_E_NOMEM;
    assert_int_equal(kl_hpke_decap(KL_HPKE_KEM_P256, enc, el, pub, ss),
                     KL_E_NOMEM);
    d.fail = KL_OK;
    d.zero = true;
    memset(ss, 0x55, sizeof ss);
    assert_int_equal(kl_hpke_decap(KL_HPKE_KEM_P256, enc, el, pub, ss),
                     KL_E_BAD_VALUE);
    assert_memory_equal(ss, none, sizeof ss);
    /* a bad enc never reaches the hook */
    int calls = d.calls;
    uint8_t bad[65];
    memset(bad, 0x04, sizeof bad);
    assert_int_equal(kl_hpke_decap(KL_HPKE_KEM_P256, bad, sizeof bad, pub, ss),
                     KL_E_BAD_VALUE);
    assert_int_equal(d.calls, calls);
    EVP_PKEY_free(pub);
    EVP_PKEY_free(priv);
}

/* Ownership: one free per hook, with the key; a copy has no hook; a
 * second hook is refused and its arg freed; bad arguments too. */
static void test_hook_ownership(void **state)
{
    (void)state;
    uint8_t pk[KL_HPKE_MAX_ENC], enc[KL_HPKE_MAX_ENC], ss[32];
    size_t pl, el;
    EVP_PKEY *priv = recipient(KL_HPKE_KEM_P256, pk, &pl);
    sw_dh d, d2 = {0};
    EVP_PKEY *pub = hooked(KL_HPKE_KEM_P256, &d, priv);
    assert_int_equal(kl_hpke_key_set_dh(pub, &sw_hook, &d2), KL_E_BAD_VALUE);
    assert_int_equal(d2.frees, 1);
    assert_int_equal(kl_hpke_key_set_dh(NULL, &sw_hook, &d2), KL_E_BAD_VALUE);
    assert_int_equal(d2.frees, 2);
    EVP_PKEY *copy = EVP_PKEY_dup(pub);
    assert_non_null(copy);
    assert_int_equal(
        kl_hpke_encap(KL_HPKE_KEM_P256, NULL, pk, pl, ss, enc, sizeof enc, &el),
        KL_OK);
    /* the copy is a bare public key: no DH */
    assert_int_not_equal(kl_hpke_decap(KL_HPKE_KEM_P256, enc, el, copy, ss),
                         KL_OK);
    assert_int_equal(d.calls, 0);
    EVP_PKEY_free(copy);
    assert_int_equal(d.frees, 0);
    EVP_PKEY_up_ref(pub);
    EVP_PKEY_free(pub);
    assert_int_equal(d.frees, 0); /* one reference left */
    EVP_PKEY_free(pub);
    assert_int_equal(d.frees, 1);
    EVP_PKEY_free(priv);
}

/* A sealed key file opens with the hooked key exactly as with the
 * private one: found by its public half, unwrapped through the hook. */
static void test_sealed_file_through_hook(void **state)
{
    (void)state;
    uint8_t pk[KL_HPKE_MAX_ENC], ski[KL_SEALED_SKI_LEN];
    size_t pl;
    EVP_PKEY *node = recipient(KL_HPKE_KEM_P256, pk, &pl);
    EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    assert_non_null(key);
    /* the SKI: SHA-1 of the subjectPublicKey contents (protocol P7) */
    uint8_t pt[65];
    size_t ptl = 0;
    assert_int_equal(EVP_PKEY_get_octet_string_param(key, "encoded-pub-key", pt,
                                                     sizeof pt, &ptl),
                     1);
    unsigned int dl = 0;
    assert_int_equal(EVP_Digest(pt, ptl, ski, &dl, EVP_sha1(), NULL), 1);
    kl_sealed_to to = {KL_SEALED_NODE, "node-a", KL_HPKE_KEM_P256, pk, pl};
    uint8_t *file = NULL;
    size_t flen = 0;
    char err[256];
    assert_int_equal(kl_sealed_seal("region=eu", key, ski, &to, 1, &file, &flen,
                                    err, sizeof err),
                     KL_OK);
    kl_sealed *s = NULL;
    assert_int_equal(kl_sealed_parse(file, flen, &s, err, sizeof err), KL_OK);
    sw_dh d;
    EVP_PKEY *pub = hooked(KL_HPKE_KEM_P256, &d, node);
    size_t idx = 99;
    assert_int_equal(kl_sealed_find(s, pub, &idx), KL_OK);
    assert_int_equal(idx, 0);
    EVP_PKEY *opened = NULL;
    assert_int_equal(kl_sealed_open(s, idx, pub, &opened, err, sizeof err),
                     KL_OK);
    assert_int_equal(EVP_PKEY_eq(opened, key), 1);
    assert_int_equal(d.calls, 1);
    EVP_PKEY_free(opened);
    EVP_PKEY_free(pub);
    kl_sealed_free(s);
    free(file);
    EVP_PKEY_free(key);
    EVP_PKEY_free(node);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decap_through_hook),
        cmocka_unit_test(test_open_once_through_hook),
        cmocka_unit_test(test_hook_failures),
        cmocka_unit_test(test_hook_ownership),
        cmocka_unit_test(test_sealed_file_through_hook),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
