/* SPDX-License-Identifier: Apache-2.0 */
/* Key store entries "uri: pkcs11:...": from the URI to an
 * indexed key whose private operations run on the token. Every message
 * names the URI with its PIN redacted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/time.h"
#include "keys/store.h"

/* How long loading waits for a session of a token whose pool is busy. */
#define LOAD_WAIT_NS (5 * KL_NS_PER_S)

kl_p11_key *kl_p11_key_new(const kl_p11_uri *u, kl_p11_token *t)
{
    kl_p11_key *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->tok = t;
    atomic_init(&k->handle, CK_INVALID_HANDLE);
    k->has_label = u->object != NULL;
    k->has_id = u->id != NULL;
    if ((k->has_label && !(k->label = strdup(u->object))) ||
        (k->has_id && !(k->id = malloc(u->id_len ? u->id_len : 1)))) {
        kl_p11_key_free(k);
        return NULL;
    }
    if (k->has_id) {
        if (u->id_len)
            memcpy(k->id, u->id, u->id_len);
        k->id_len = u->id_len;
    }
    return k;
}

/* Finds the private key object and builds its public key. */
static kl_status find_key(kl_p11_token *t, kl_p11_key *k, EVP_PKEY **pkey,
                          char *why, size_t whylen)
{
    CK_SESSION_HANDLE h;
    if (kl_p11_session_get(t, kl_now_ns() + LOAD_WAIT_NS, &h) != KL_OK) {
        snprintf(why, whylen, "cannot get a session on the token");
        return KL_E_KEY;
    }
    CK_OBJECT_HANDLE o;
    size_t count = 0;
    char b[32];
    kl_status s = KL_E_KEY;
    CK_RV rv = kl_p11_find(t, h, CKO_PRIVATE_KEY, k, &o, &count);
    if (rv != CKR_OK) {
        snprintf(why, whylen, "cannot search the token: %s",
                 kl_p11_rv_str(rv, b, sizeof b));
    } else if (count == 0) {
        snprintf(why, whylen, "no private key with this %s on the token",
                 k->has_label && k->has_id ? "object label and id"
                 : k->has_label            ? "object label"
                                           : "id");
    } else if (count > 1) {
        snprintf(why, whylen,
                 "more than one private key matches: add id= or object=");
    } else {
        atomic_store(&k->handle, o);
        s = kl_p11_public_key(t, h, k, pkey, why, whylen);
    }
    kl_p11_session_put(t, h);
    return s;
}

kl_status kl_keystore_add_uri(kl_keystore *ks, const char *uri)
{
    KL_ENSURE(ks != NULL && uri != NULL, KL_E_CONFIG);
    char why[KL_KEY_WHY_LEN];
    if (strncmp(uri, "pkcs11:", 7) != 0) {
        /* any other scheme: an OSSL_STORE URI of a provider's key */
        char *red = kl_p11_uri_redact(uri);
        const char *name = red ? red : "URI";
        kl_status ps =
            kl_keystore_add_provider_key(ks, uri, name, true, why, sizeof why);
        if (ps != KL_OK)
            kl_keystore_report(ks, KL_LOG_ERROR, name,
                               "not a valid PKCS#11 URI (pkcs11:token=...;"
                               "object=...), nor a key an OpenSSL provider "
                               "holds: %s",
                               why);
        free(red);
        return ps;
    }
    kl_p11_uri u;
    kl_status s = kl_p11_uri_parse(uri, &u, why, sizeof why);
    if (s != KL_OK) {
        char *red = kl_p11_uri_redact(uri);
        kl_keystore_report(ks, KL_LOG_ERROR, red ? red : "pkcs11 URI", "%s",
                           why);
        free(red);
        return s;
    }
    if (!ks->p11 && !(ks->p11 = kl_p11_set_new())) {
        kl_p11_uri_clear(&u);
        return KL_E_NOMEM;
    }
    kl_p11_token *t = NULL;
    kl_p11_key *k = NULL;
    EVP_PKEY *pkey = NULL;
    kl_key_info info;
    s = kl_p11_uri_read_pin(&u, why, sizeof why);
    if (s == KL_OK)
        s = kl_p11_set_token(ks->p11, &u, &t, why, sizeof why);
    if (s == KL_OK && !(k = kl_p11_key_new(&u, t)))
        s = KL_E_NOMEM;
    if (s == KL_OK)
        s = find_key(t, k, &pkey, why, sizeof why);
    if (s == KL_OK)
        s = kl_key_check_public(pkey, &info, why, sizeof why);
    if (s != KL_OK) {
        if (s == KL_E_NOMEM)
            snprintf(why, sizeof why, "out of memory");
        kl_keystore_report(ks, KL_LOG_ERROR, u.redacted, "%s", why);
        EVP_PKEY_free(pkey);
        kl_p11_key_free(k);
        kl_p11_uri_clear(&u);
        return s;
    }
    s = kl_keystore_insert_p11(ks, pkey, k, &info, u.redacted);
    kl_p11_uri_clear(&u);
    return s;
}
