/* SPDX-License-Identifier: Apache-2.0 */
/* Private to src/keys and src/crypto: keys held by PKCS#11 tokens
 * (docs/OPERATIONS.md, PKCS#11). A kl_p11_set belongs to one key store and
 * holds the modules it loaded (through p11-kit, each at most once) and the
 * tokens its keys live on. Each token has a session pool sized by max-sessions:
 * sessions are opened on demand, logged in, reused, and a wait for one is
 * bounded by the caller's deadline - never a fixed stall. */
#ifndef KL_KEYS_P11_H
#define KL_KEYS_P11_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <p11-kit/pkcs11.h>

#include "core/status.h"
#include "keys/keystore.h"
#include "keys/p11uri.h"

typedef struct kl_p11_set kl_p11_set;
typedef struct kl_p11_token kl_p11_token;

/* A private key object on a token. */
typedef struct kl_p11_key {
    kl_p11_token *tok;
    CK_KEY_TYPE ktype;   /* CKK_RSA, CKK_EC, CKK_EC_EDWARDS */
    atomic_ulong handle; /* re-found after the token lost it */
    char *label;         /* what found it: object= and/or id= */
    uint8_t *id;
    size_t id_len;
    bool has_label, has_id;
    uint8_t *modulus; /* RSA: n, k big-endian bytes */
    size_t k;
} kl_p11_key;

kl_p11_set *kl_p11_set_new(void);
/* Closes every session and finalizes and releases every module. */
void kl_p11_set_free(kl_p11_set *s);

/* The token u names, loading its module and logging in on first use (a
 * first session is opened to check the PIN). KL_E_CONFIG / KL_E_KEY with
 * a reason in why. */
KL_WUR kl_status kl_p11_set_token(kl_p11_set *s, const kl_p11_uri *u,
                                  kl_p11_token **out, char *why, size_t whylen);
/* Sum of max-sessions over the tokens (to size the blocking workers). */
size_t kl_p11_set_sessions(const kl_p11_set *s);

CK_FUNCTION_LIST *kl_p11_token_fl(const kl_p11_token *t);
/* The (redacted) URI that opened the token, for messages. */
const char *kl_p11_token_name(const kl_p11_token *t);

/* A logged-in session, waiting until deadline_ns (monotonic) at most when
 * all max-sessions are busy: KL_E_TIMEOUT then. KL_E_KEY when the token
 * cannot open one. */
KL_WUR kl_status kl_p11_session_get(kl_p11_token *t, uint64_t deadline_ns,
                                    CK_SESSION_HANDLE *h);
/* Returns a healthy session to the pool. */
void kl_p11_session_put(kl_p11_token *t, CK_SESSION_HANDLE h);
/* Closes a session that failed; its place in the pool is freed. */
void kl_p11_session_discard(kl_p11_token *t, CK_SESSION_HANDLE h);
/* Frees the place of a session that no longer exists. */
void kl_p11_session_drop(kl_p11_token *t);
/* Recovers from rv (kl_p11_rv_session_lost): logs in again on a session
 * that was logged out, or opens and logs in a new one in place of a session
 * the token closed (without closing the old handle: the module may have
 * given its number to another session). On failure the caller holds no
 * session and must kl_p11_session_drop. */
CK_RV kl_p11_session_recover(kl_p11_token *t, CK_SESSION_HANDLE *h, CK_RV rv);

/* Finds the one object of class cls matching label and/or id. CKR_OK and
 * *out; *count tells how many matched (0 or >1 leave *out unset). */
CK_RV kl_p11_find(kl_p11_token *t, CK_SESSION_HANDLE h, CK_OBJECT_CLASS cls,
                  const kl_p11_key *k, CK_OBJECT_HANDLE *out, size_t *count);

/* The first C_Login of a store to a token (p11_login.c): CKR_PIN_INCORRECT
 * also when the token is already logged in, in this process, with another
 * PIN. */
CK_RV kl_p11_first_login(CK_FUNCTION_LIST *fl, CK_SESSION_HANDLE h,
                         const char *module_path, CK_SLOT_ID slot,
                         const char *pin);

/* Whether rv means the session is gone or logged out (re-open, retry). */
bool kl_p11_rv_session_lost(CK_RV rv);
/* "CKR_PIN_INCORRECT" etc., or "CKR_0x..." in buf. */
const char *kl_p11_rv_str(CK_RV rv, char *buf, size_t len);

/* Builds the public EVP_PKEY of a private key object from what the token
 * holds (p11_pub.c). */
struct evp_pkey_st;
KL_WUR kl_status kl_p11_public_key(kl_p11_token *t, CK_SESSION_HANDLE h,
                                   kl_p11_key *k, struct evp_pkey_st **out,
                                   char *why, size_t whylen);

/* The token part of a key; NULL for a file key. */
kl_p11_key *kl_key_p11(const kl_key *k);

/* A key object description on token t from the URI's object= and/or id=
 * (looked up on the token later); NULL when out of memory. */
kl_p11_key *kl_p11_key_new(const kl_p11_uri *u, kl_p11_token *t);
/* Frees a key object description. */
void kl_p11_key_free(kl_p11_key *k);

#endif
