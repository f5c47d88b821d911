/* SPDX-License-Identifier: Apache-2.0 */
/* Checking a PIN when the token is already logged in.
 *
 * PKCS#11 keeps one login state per token per process: once a key store has
 * logged in, C_Login from a second store (a configuration reload, another
 * URI) answers CKR_USER_ALREADY_LOGGED_IN whatever PIN it is given, and a
 * wrong PIN would go unnoticed until the first store closes its sessions.
 * So the process remembers, per (module, slot), a salted hash of the PIN
 * that last logged in, and a store that finds the token logged in must
 * bring the same PIN. A login by someone else in the process (no entry)
 * is accepted. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "keys/p11.h"

typedef struct login {
    char *module_path;
    CK_SLOT_ID slot;
    uint8_t hash[32];
    struct login *next;
} login;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static login *logins;
static uint8_t salt[16];
static bool salted;

/* Called with mu held. */
static bool pin_hash(const char *pin, uint8_t out[32])
{
    if (!salted && RAND_bytes(salt, sizeof salt) != 1)
        return false;
    salted = true;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned int n = 0;
    bool ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1 &&
              EVP_DigestUpdate(c, salt, sizeof salt) == 1 &&
              EVP_DigestUpdate(c, pin, strlen(pin)) == 1 &&
              EVP_DigestFinal_ex(c, out, &n) == 1 && n == 32;
    EVP_MD_CTX_free(c);
    return ok;
}

static login *find(const char *module_path, CK_SLOT_ID slot)
{
    for (login *l = logins; l; l = l->next)
        if (l->slot == slot && strcmp(l->module_path, module_path) == 0)
            return l;
    return NULL;
}

CK_RV kl_p11_first_login(CK_FUNCTION_LIST *fl, CK_SESSION_HANDLE h,
                         const char *module_path, CK_SLOT_ID slot,
                         const char *pin)
{
    CK_RV rv =
        fl->C_Login(h, CKU_USER, (CK_UTF8CHAR *)pin, (CK_ULONG)strlen(pin));
    if (rv != CKR_OK && rv != CKR_USER_ALREADY_LOGGED_IN)
        return rv;
    uint8_t hash[32];
    pthread_mutex_lock(&mu);
    login *l = find(module_path, slot);
    if (!pin_hash(pin, hash)) {
        rv = CKR_HOST_MEMORY;
    } else if (rv == CKR_USER_ALREADY_LOGGED_IN) {
        if (l && CRYPTO_memcmp(l->hash, hash, sizeof hash) != 0)
            rv = CKR_PIN_INCORRECT; /* not the PIN that logged in */
        else
            rv = CKR_OK;
    } else if (l) {
        memcpy(l->hash, hash, sizeof hash);
    } else if ((l = calloc(1, sizeof *l)) &&
               (l->module_path = strdup(module_path))) {
        l->slot = slot;
        memcpy(l->hash, hash, sizeof hash);
        l->next = logins;
        logins = l;
    } else {
        free(l); /* not remembered: a later store's PIN goes unchecked */
    }
    pthread_mutex_unlock(&mu);
    OPENSSL_cleanse(hash, sizeof hash);
    return rv;
}
