/* SPDX-License-Identifier: Apache-2.0 */
/* A sealing key on a PKCS#11 token (docs/SEALING.md "Node identity",
 * docs/OPERATIONS.md "Sealing key on a token"): the EC P-256 private key
 * a `pkcs11:` URI names - the URI rules and the PIN of a `uri:` key store
 * (p11uri.c) - does HPKE's one private-key step, DH(skR, pkE), on the
 * token: C_DeriveKey with CKM_ECDH1_DERIVE and CKD_NULL gives the shared
 * x-coordinate as a session object (a generic secret, not sensitive,
 * extractable: SoftHSM2 and most tokens allow it), read with
 * C_GetAttributeValue and destroyed at once. Everything else of DHKEM -
 * ExtractAndExpand, the key schedule, the AEAD - stays in software
 * (src/seal). The seal layer gets the token's DH through a hook on the
 * key's public EVP_PKEY (seal/hpke.h kl_hpke_key_set_dh), so it knows
 * nothing of PKCS#11; the EVP_PKEY owns the module, the session and the
 * PIN here, freed with it. Every copy of the secret is wiped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>

#include "core/time.h"
#include "keys/store.h"
#include "seal/hpke.h"

#define WHY(...) snprintf(why, whylen, __VA_ARGS__)

/* How long a DH waits for the token's session (one at a time: loads are
 * on one thread). */
#define DH_WAIT_NS (5 * KL_NS_PER_S)
/* Ndh of DHKEM(P-256): the x-coordinate. */
#define DH_LEN 32

typedef struct seal_p11 {
    kl_p11_set *set;
    kl_p11_token *tok;
    kl_p11_key *key;
} seal_p11;

static void seal_p11_free(void *arg)
{
    seal_p11 *sp = arg;
    if (!sp)
        return;
    kl_p11_key_free(sp->key);
    kl_p11_set_free(sp->set); /* closes the session, unloads the module */
    free(sp);
}

/* One ECDH on the token: the derived object's value into out. */
static CK_RV derive_once(seal_p11 *sp, CK_SESSION_HANDLE h, const uint8_t *pke,
                         size_t len, uint8_t *out)
{
    CK_FUNCTION_LIST *fl = kl_p11_token_fl(sp->tok);
    CK_ECDH1_DERIVE_PARAMS prm = {
        .kdf = CKD_NULL,
        .public_data_len = len,
        .public_data = (unsigned char *)pke, /* the uncompressed point */
    };
    CK_MECHANISM mech = {CKM_ECDH1_DERIVE, &prm, sizeof prm};
    CK_OBJECT_CLASS cls = CKO_SECRET_KEY;
    CK_KEY_TYPE kt = CKK_GENERIC_SECRET;
    CK_BBOOL no = CK_FALSE, yes = CK_TRUE;
    CK_ULONG vlen = DH_LEN;
    CK_ATTRIBUTE tmpl[] = {
        {CKA_CLASS, &cls, sizeof cls},
        {CKA_KEY_TYPE, &kt, sizeof kt},
        {CKA_TOKEN, &no, sizeof no}, /* a session object: gone at close */
        {CKA_SENSITIVE, &no, sizeof no},
        {CKA_EXTRACTABLE, &yes, sizeof yes},
        {CKA_VALUE_LEN, &vlen, sizeof vlen},
    };
    CK_OBJECT_HANDLE sec = CK_INVALID_HANDLE;
    CK_RV rv = fl->C_DeriveKey(h, &mech, atomic_load(&sp->key->handle), tmpl,
                               sizeof tmpl / sizeof tmpl[0], &sec);
    if (rv != CKR_OK)
        return rv;
    CK_ATTRIBUTE val = {CKA_VALUE, out, DH_LEN};
    rv = fl->C_GetAttributeValue(h, sec, &val, 1);
    if (rv == CKR_OK && val.ulValueLen != DH_LEN)
        rv = CKR_FUNCTION_FAILED;
    CK_RV drv = fl->C_DestroyObject(h, sec);
    if (rv == CKR_OK)
        rv = drv;
    return rv;
}

/* With a session of the token: a session the token closed or logged out
 * is replaced once, a key handle it forgot looked up again once. */
static CK_RV derive(seal_p11 *sp, const uint8_t *pke, size_t len, uint8_t *out)
{
    CK_SESSION_HANDLE h;
    if (kl_p11_session_get(sp->tok, kl_now_ns() + DH_WAIT_NS, &h) != KL_OK)
        return CKR_SESSION_COUNT;
    CK_RV rv = derive_once(sp, h, pke, len, out);
    bool reopened = false, refound = false;
    for (;;) {
        bool lost = kl_p11_rv_session_lost(rv) && !reopened;
        bool forgot =
            (rv == CKR_KEY_HANDLE_INVALID || rv == CKR_OBJECT_HANDLE_INVALID) &&
            !refound;
        if (!lost && !forgot)
            break;
        CK_RV r2 = kl_p11_session_recover(sp->tok, &h,
                                          lost ? rv : CKR_USER_NOT_LOGGED_IN);
        if (r2 != CKR_OK) {
            kl_p11_session_drop(sp->tok);
            OPENSSL_cleanse(out, DH_LEN);
            return r2;
        }
        reopened |= lost;
        if (forgot) {
            refound = true;
            CK_OBJECT_HANDLE o;
            size_t count = 0;
            CK_RV fr =
                kl_p11_find(sp->tok, h, CKO_PRIVATE_KEY, sp->key, &o, &count);
            if (fr == CKR_OK && count == 1)
                atomic_store(&sp->key->handle, o);
        }
        rv = derive_once(sp, h, pke, len, out);
    }
    if (rv == CKR_OK)
        kl_p11_session_put(sp->tok, h);
    else
        kl_p11_session_discard(sp->tok, h);
    if (rv != CKR_OK)
        OPENSSL_cleanse(out, DH_LEN);
    return rv;
}

/* The hook (seal/hpke.h): DHKEM(P-256) only - a token key is an EC key,
 * and a file of another KEM never finds it (kl_sealed_find compares the
 * KEM and the public key). */
static kl_status token_dh(void *arg, uint16_t kem, const uint8_t *pke,
                          size_t len, uint8_t *out)
{
    if (kem != KL_HPKE_KEM_P256 || len != kl_hpke_pk_len(kem))
        return KL_E_BAD_VALUE;
    CK_RV rv = derive(arg, pke, len, out);
    if (rv == CKR_OK)
        return KL_OK;
    return rv == CKR_HOST_MEMORY ? KL_E_NOMEM : KL_E_KEY;
}

static const kl_hpke_dh_hook token_hook = {token_dh, seal_p11_free};

/* The private key object the URI names, and its public EVP_PKEY. */
static kl_status find_key(seal_p11 *sp, EVP_PKEY **pub, char *why,
                          size_t whylen)
{
    CK_SESSION_HANDLE h;
    if (kl_p11_session_get(sp->tok, kl_now_ns() + DH_WAIT_NS, &h) != KL_OK) {
        WHY("cannot get a session on the token");
        return KL_E_KEY;
    }
    CK_FUNCTION_LIST *fl = kl_p11_token_fl(sp->tok);
    kl_p11_key *k = sp->key;
    CK_OBJECT_HANDLE o = CK_INVALID_HANDLE;
    size_t count = 0;
    char b[32];
    kl_status s = KL_E_KEY;
    CK_RV rv = kl_p11_find(sp->tok, h, CKO_PRIVATE_KEY, k, &o, &count);
    if (rv != CKR_OK) {
        WHY("cannot search the token: %s", kl_p11_rv_str(rv, b, sizeof b));
    } else if (count != 1) {
        WHY(count ? "more than one private key matches: add id= or object="
                  : "no private key with this %s on the token",
            k->has_label && k->has_id ? "object label and id"
            : k->has_label            ? "object label"
                                      : "id");
    } else {
        atomic_store(&k->handle, o);
        s = kl_p11_public_key(sp->tok, h, k, pub, why, whylen);
    }
    CK_BBOOL can = CK_TRUE;
    CK_ATTRIBUTE a = {CKA_DERIVE, &can, sizeof can};
    if (s == KL_OK && fl->C_GetAttributeValue(h, o, &a, 1) == CKR_OK &&
        can != CK_TRUE) {
        WHY("the key may not derive (CKA_DERIVE is false): make a P-256 key "
            "with derive usage (pkcs11-tool --usage-derive)");
        s = KL_E_KEY;
    }
    kl_p11_session_put(sp->tok, h);
    return s;
}

/* One ECDH against a fresh software key, compared with the same DH
 * computed by OpenSSL from the token's public key: the token does ECDH
 * with this key, and the public key read for it is its own (a public
 * object with the same label but another key would make every sealed
 * file fail to open, later and less clearly). */
static kl_status self_test(seal_p11 *sp, EVP_PKEY *pub, char *why,
                           size_t whylen)
{
    EVP_PKEY *eph = NULL;
    EVP_PKEY_CTX *c = NULL;
    uint8_t pke[KL_HPKE_MAX_ENC], soft[DH_LEN], tok[DH_LEN];
    size_t pl = 0, sl = sizeof soft;
    kl_status s = kl_hpke_generate(KL_HPKE_KEM_P256, &eph);
    if (s == KL_OK)
        s = kl_hpke_public(KL_HPKE_KEM_P256, eph, pke, sizeof pke, &pl);
    if (s == KL_OK && (!(c = EVP_PKEY_CTX_new_from_pkey(NULL, eph, NULL)) ||
                       EVP_PKEY_derive_init(c) != 1 ||
                       EVP_PKEY_derive_set_peer_ex(c, pub, 0) != 1 ||
                       EVP_PKEY_derive(c, soft, &sl) != 1 || sl != DH_LEN))
        s = KL_E_INTERNAL;
    EVP_PKEY_CTX_free(c);
    EVP_PKEY_free(eph);
    ERR_clear_error();
    if (s != KL_OK) {
        WHY("cannot make a test key (%s)", kl_status_str(s));
        return s;
    }
    char b[32];
    CK_RV rv = derive(sp, pke, pl, tok);
    if (rv != CKR_OK) {
        WHY("the token did not do ECDH with the key (C_DeriveKey, "
            "CKM_ECDH1_DERIVE, into a generic secret we may read): %s",
            kl_p11_rv_str(rv, b, sizeof b));
        s = rv == CKR_HOST_MEMORY ? KL_E_NOMEM : KL_E_KEY;
    } else if (CRYPTO_memcmp(soft, tok, DH_LEN) != 0) {
        WHY("the token's ECDH does not match the public key found for the "
            "key (a public object with the same label or id but another "
            "key?)");
        s = KL_E_KEY;
    }
    OPENSSL_cleanse(soft, sizeof soft);
    OPENSSL_cleanse(tok, sizeof tok);
    return s;
}

kl_status kl_keys_sealing_key_p11(const char *uri, EVP_PKEY **out, char *why,
                                  size_t whylen)
{
    *out = NULL;
    kl_p11_uri u;
    KL_GUARD(kl_p11_uri_parse(uri, &u, why, whylen));
    seal_p11 *sp = calloc(1, sizeof *sp);
    EVP_PKEY *pub = NULL;
    kl_status s = sp ? KL_OK : KL_E_NOMEM;
    if (s == KL_OK)
        s = kl_p11_uri_read_pin(&u, why, whylen);
    if (s == KL_OK && !(sp->set = kl_p11_set_new()))
        s = KL_E_NOMEM;
    if (s == KL_OK)
        s = kl_p11_set_token(sp->set, &u, &sp->tok, why, whylen);
    if (s == KL_OK && !(sp->key = kl_p11_key_new(&u, sp->tok)))
        s = KL_E_NOMEM;
    kl_p11_uri_clear(&u);
    if (s == KL_OK)
        s = find_key(sp, &pub, why, whylen);
    uint8_t pk[KL_HPKE_MAX_ENC];
    size_t pl = 0;
    if (s == KL_OK &&
        (sp->key->ktype != CKK_EC ||
         kl_hpke_public(KL_HPKE_KEM_P256, pub, pk, sizeof pk, &pl) != KL_OK)) {
        WHY("not an EC P-256 key (a token's sealing key is P-256, for "
            "DHKEM(P-256))");
        s = KL_E_KEY;
    }
    ERR_clear_error();
    if (s == KL_OK)
        s = self_test(sp, pub, why, whylen);
    if (s == KL_E_NOMEM)
        WHY("out of memory");
    if (s != KL_OK) {
        EVP_PKEY_free(pub);
        seal_p11_free(sp);
        return s;
    }
    /* from here pub owns sp, also when this fails */
    s = kl_hpke_key_set_dh(pub, &token_hook, sp);
    if (s != KL_OK) {
        WHY("cannot attach the token to the key (%s)", kl_status_str(s));
        EVP_PKEY_free(pub);
        return s;
    }
    *out = pub;
    return KL_OK;
}
