/* SPDX-License-Identifier: Apache-2.0 */
/* The key index: keys by SKI in an open-addressing hash
 * table. SKIs are SHA-1 outputs, already uniform, so their first 8 bytes
 * are the hash. The table stays at most half full: a lookup touches one or
 * two slots even with a million keys.
 *
 * Not the shared map (core/hmap.h), on purpose: its slots carry a 64-bit
 * tag beside the pointer, which doubles this table (4 MiB instead of 2 at
 * 100,000 keys) and made a lookup with 100,000 keys 6-7% slower; filling
 * it to 80% to stay at 2 MiB made lookups nearly twice as slow. Measured
 * in bench/RESULTS.md "Shared hash map". */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/provider.h>

#include "core/log.h"
#include "keys/store.h"

#define MIN_TABLE 64u

/* Signing with a bare scalar (src/crypto/ec_direct.c) runs libcrypto's
 * own ECDSA code: what EVP runs only when the key and the ECDSA signature
 * both come from the default provider. A FIPS configuration (default
 * properties fips=yes) or a key held by another provider keeps EVP.
 * Decided for each store (one fetch), not once per process. */
static bool is_default(const OSSL_PROVIDER *p)
{
    return p && strcmp(OSSL_PROVIDER_get0_name(p), "default") == 0;
}

/* OpenSSL's own providers: their operations run in this thread's CPU. */
static bool builtin_provider(const char *name)
{
    return !strcmp(name, "default") || !strcmp(name, "fips") ||
           !strcmp(name, "base") || !strcmp(name, "legacy");
}

static bool ecdsa_is_default(const char *propq)
{
    EVP_SIGNATURE *sig = EVP_SIGNATURE_fetch(NULL, "ECDSA", propq);
    bool yes = sig && is_default(EVP_SIGNATURE_get0_provider(sig));
    EVP_SIGNATURE_free(sig);
    ERR_clear_error();
    return yes;
}

bool kl_pkey_builtin(const EVP_PKEY *pkey)
{
    const OSSL_PROVIDER *own = EVP_PKEY_get0_provider(pkey);
    return !own || builtin_provider(OSSL_PROVIDER_get0_name(own));
}

/* The provider that signs with k: the key's own when another provider
 * holds it (it cannot be exported), else the one EVP fetches for its
 * algorithm under the key's property query. */
static const char *signing_provider(const kl_key *k, char *buf, size_t cap)
{
    static const char *const algs[] = {[KL_KEY_RSA] = "RSA",
                                       [KL_KEY_EC] = "ECDSA",
                                       [KL_KEY_ED25519] = "ED25519"};
    const char *alg = (size_t)k->info.type < sizeof algs / sizeof *algs
                          ? algs[k->info.type]
                          : NULL;
    buf[0] = '\0';
    if (!kl_pkey_builtin(k->pkey)) {
        snprintf(buf, cap, "%s",
                 OSSL_PROVIDER_get0_name(EVP_PKEY_get0_provider(k->pkey)));
        return buf;
    }
    EVP_SIGNATURE *sig = alg ? EVP_SIGNATURE_fetch(NULL, alg, k->propq) : NULL;
    if (sig)
        snprintf(buf, cap, "%s",
                 OSSL_PROVIDER_get0_name(EVP_SIGNATURE_get0_provider(sig)));
    EVP_SIGNATURE_free(sig);
    ERR_clear_error();
    return buf;
}

/* The property query of a key's operations: a key another provider holds
 * is signed by that provider (its keys cannot be exported: EVP must fetch
 * there); a key in memory under key_propquery (an accelerator's, or none).
 * Interned: NULL on allocation failure means the defaults. */
static const char *intern(const char *text);

static const char *key_propq(const kl_keystore *ks, EVP_PKEY *pkey)
{
    if (kl_pkey_builtin(pkey))
        return ks->propq;
    char q[96];
    snprintf(q, sizeof q, "?provider=%s",
             OSSL_PROVIDER_get0_name(EVP_PKEY_get0_provider(pkey)));
    return intern(q);
}

/* Whether name is in the comma-separated list. */
static bool listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && *p == ' ')
            p++, len--;
        while (len && p[len - 1] == ' ')
            len--;
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p = end ? end + 1 : p + strlen(p);
    }
    return false;
}

/* A file key's back end: in memory and signed by OpenSSL's own code, or by
 * another provider - one that blocks, or one that pauses ASYNC jobs. */
static kl_key_backend file_backend(kl_keystore *ks, const kl_key *k)
{
    /* For keys in memory the answer depends on the type only (one query,
     * one fetch): decided once per type, not once per key of 100,000. */
    bool mine = kl_pkey_builtin(k->pkey);
    size_t t = (size_t)k->info.type;
    bool cacheable = mine && t < sizeof ks->type_backend;
    if (cacheable && ks->type_backend[t])
        return (kl_key_backend)(ks->type_backend[t] - 1);
    char name[64];
    signing_provider(k, name, sizeof name);
    kl_key_backend b = !name[0] || builtin_provider(name) ? KL_BACKEND_FILE
                       : listed(ks->opts.async_providers, name)
                           ? KL_BACKEND_ASYNC
                           : KL_BACKEND_PROVIDER;
    if (cacheable)
        ks->type_backend[t] = (uint8_t)(b + 1);
    return b;
}

/* A property query kept for the life of the process: threads' cached
 * contexts name it (crypto/ctx_cache.h) and may outlive the store that
 * set it. One copy per distinct text; a configuration has one or two. */
static const char *intern(const char *text)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static struct interned {
        struct interned *next;
        char text[];
    } * all;
    pthread_mutex_lock(&mu);
    struct interned *i = all;
    while (i && strcmp(i->text, text) != 0)
        i = i->next;
    if (!i && (i = malloc(sizeof *i + strlen(text) + 1))) {
        strcpy(i->text, text);
        i->next = all;
        all = i;
    }
    pthread_mutex_unlock(&mu);
    return i ? i->text : NULL;
}

kl_keystore *kl_keystore_new(const kl_keystore_opts *opts)
{
    kl_keystore *ks = calloc(1, sizeof *ks);
    if (!ks)
        return NULL;
    if (opts)
        ks->opts = *opts;
    ks->table = calloc(MIN_TABLE, sizeof *ks->table);
    if (!ks->table) {
        free(ks);
        return NULL;
    }
    ks->table_mask = MIN_TABLE - 1;
    const char *pq = opts ? opts->key_propquery : NULL;
    if (pq && *pq && !(ks->propq = intern(pq))) {
        free(ks->table);
        free(ks);
        return NULL;
    }
    ks->direct_ecdsa = ecdsa_is_default(ks->propq);
    return ks;
}

void kl_keystore_free(kl_keystore *ks)
{
    if (!ks)
        return;
    for (size_t i = 0; i < ks->count; i++) {
        /* EVP_PKEY_free wipes the private parts (BN_clear_free, secure
         * heap for Ed25519); the scalar copy is wiped here. */
        OPENSSL_cleanse(ks->keys[i]->ec_d, sizeof ks->keys[i]->ec_d);
        EVP_PKEY_free(ks->keys[i]->pkey);
        kl_p11_key_free(ks->keys[i]->p11);
        free(ks->keys[i]);
    }
    free(ks->keys);
    free(ks->table);
    kl_key_decoder_free(ks->decoder);
    kl_p11_set_free(ks->p11); /* after the keys: closes the sessions */
    kl_keystore_free_elsewhere(ks);
    free(ks);
}

void kl_keystore_report(const kl_keystore *ks, int level, const char *path,
                        const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ks->opts.report)
        ks->opts.report(ks->opts.report_arg, level, path, msg);
    else
        kl_log(level, "%s: %s", path, msg);
}

static size_t slot_of(const uint8_t ski[KL_SKI_LEN], size_t mask)
{
    uint64_t h;
    memcpy(&h, ski, sizeof h);
    return (size_t)h & mask;
}

static kl_key **probe(kl_key **table, size_t mask,
                      const uint8_t ski[KL_SKI_LEN])
{
    size_t i = slot_of(ski, mask);
    while (table[i] && memcmp(table[i]->ski, ski, KL_SKI_LEN) != 0)
        i = (i + 1) & mask;
    return &table[i];
}

KL_WUR static kl_status grow(kl_keystore *ks)
{
    if (ks->count == ks->cap) {
        size_t cap = ks->cap ? ks->cap * 2 : 64;
        kl_key **k = realloc(ks->keys, cap * sizeof *k);
        KL_ENSURE(k != NULL, KL_E_NOMEM);
        ks->keys = k;
        ks->cap = cap;
    }
    if ((ks->count + 1) * 2 > ks->table_mask + 1) {
        size_t size = (ks->table_mask + 1) * 2;
        kl_key **t = calloc(size, sizeof *t);
        KL_ENSURE(t != NULL, KL_E_NOMEM);
        for (size_t i = 0; i < ks->count; i++)
            *probe(t, size - 1, ks->keys[i]->ski) = ks->keys[i];
        free(ks->table);
        ks->table = t;
        ks->table_mask = size - 1;
    }
    return KL_OK;
}

/* The EC private scalar, copied next to the SKI: signing with it touches
 * no cold OpenSSL memory (docs/DESIGN.md "Many keys: the scalar next to
 * the SKI"). Not copied where EVP would run other code (above). */
static void ec_scalar(const kl_keystore *ks, kl_key *k)
{
    if (!ks->direct_ecdsa || !is_default(EVP_PKEY_get0_provider(k->pkey)))
        return;
    BIGNUM *d = NULL;
    int dlen = (EVP_PKEY_get_bits(k->pkey) + 7) / 8;
    bool ok = dlen > 0 && dlen <= KL_EC_SCALAR_MAX &&
              EVP_PKEY_get_bn_param(k->pkey, OSSL_PKEY_PARAM_PRIV_KEY, &d) &&
              BN_bn2binpad(d, k->ec_d, dlen) == dlen;
    BN_clear_free(d);
    ERR_clear_error();
    if (ok)
        k->ec_dlen = (uint8_t)dlen;
    else
        OPENSSL_cleanse(k->ec_d, sizeof k->ec_d);
}

static int all_zero(const uint8_t *p, size_t n)
{
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc |= p[i];
    return acc == 0;
}

kl_status kl_keystore_insert(kl_keystore *ks, EVP_PKEY *pkey,
                             const kl_key_info *info, const char *path)
{
    return kl_keystore_insert_p11(ks, pkey, NULL, info, path);
}

kl_status kl_keystore_insert_p11(kl_keystore *ks, EVP_PKEY *pkey,
                                 kl_p11_key *p11, const kl_key_info *info,
                                 const char *path)
{
    uint8_t ski[KL_SKI_LEN];
    kl_status s = kl_ski_from_pkey(pkey, ski);
    return kl_keystore_insert_ski(ks, pkey, p11, info, path,
                                  s == KL_OK ? ski : NULL);
}

kl_status kl_keystore_insert_ski(kl_keystore *ks, EVP_PKEY *pkey,
                                 kl_p11_key *p11, const kl_key_info *info,
                                 const char *path,
                                 const uint8_t ski_in[KL_SKI_LEN])
{
    uint8_t ski[KL_SKI_LEN] = {0};
    kl_status s = ski_in ? KL_OK : KL_E_KEY;
    if (ski_in)
        memcpy(ski, ski_in, KL_SKI_LEN);
    if (s == KL_OK && all_zero(ski, KL_SKI_LEN))
        s = KL_E_KEY; /* protocol P7: never a valid selector */
    if (s != KL_OK) {
        kl_keystore_report(ks, KL_LOG_ERROR, path,
                           "cannot compute the key's SKI");
        EVP_PKEY_free(pkey);
        kl_p11_key_free(p11);
        return KL_E_KEY;
    }
    kl_key **slot = probe(ks->table, ks->table_mask, ski);
    if (*slot) {
        char hex[2 * KL_SKI_LEN + 1];
        kl_ski_hex(ski, hex);
        /* The first in load order wins (docs/OPERATIONS.md "Key files"):
         * say which, since access rules by dir: or file: follow the file
         * that is kept. */
        kl_keystore_report(ks, KL_LOG_WARN, path,
                           "duplicate key: SKI %s is also in %s, which is "
                           "loaded first and wins; this file is ignored, and "
                           "access rules naming it or its directory do not "
                           "reach the key. Remove one of the two files",
                           hex, (*slot)->path);
        EVP_PKEY_free(pkey);
        kl_p11_key_free(p11);
        return KL_OK;
    }
    if (grow(ks) != KL_OK) {
        EVP_PKEY_free(pkey);
        kl_p11_key_free(p11);
        return KL_E_NOMEM;
    }
    size_t plen = strlen(path) + 1;
    kl_key *k = malloc(sizeof *k + plen);
    if (!k) {
        EVP_PKEY_free(pkey);
        kl_p11_key_free(p11);
        return KL_E_NOMEM;
    }
    memset(k, 0, sizeof *k);
    k->pkey = pkey;
    k->p11 = p11;
    memcpy(k->ski, ski, KL_SKI_LEN);
    k->info = *info;
    k->index = ks->count;
    int size = EVP_PKEY_get_size(pkey);
    k->max_out = size > 0 && size <= UINT16_MAX ? (uint16_t)size : 0;
    k->propq = p11 ? NULL : key_propq(ks, pkey);
    k->backend = p11 ? KL_BACKEND_PKCS11 : file_backend(ks, k);
    if (info->type == KL_KEY_EC && k->backend == KL_BACKEND_FILE)
        ec_scalar(ks, k); /* else signing goes through EVP_PKEY_sign */
    memcpy(k->path, path, plen);
    ks->keys[ks->count++] = k;
    *probe(ks->table, ks->table_mask, ski) = k;
    if (info->type == KL_KEY_RSA && info->bits < 2048)
        kl_keystore_report(ks, KL_LOG_WARN, path,
                           "RSA-%d key: keys under 2048 bits are weak",
                           info->bits);
    return KL_OK;
}

kl_status kl_keystore_add_pkey(kl_keystore *ks, EVP_PKEY *pkey,
                               const char *label)
{
    KL_ENSURE(ks != NULL && pkey != NULL, KL_E_KEY);
    const char *name = label ? label : "(key)";
    kl_key_info info;
    char why[KL_KEY_WHY_LEN];
    if (kl_key_check_pkey(pkey, &info, why, sizeof why) != KL_OK) {
        kl_keystore_report(ks, KL_LOG_ERROR, name, "%s", why);
        return KL_E_KEY;
    }
    KL_ENSURE(EVP_PKEY_up_ref(pkey) == 1, KL_E_INTERNAL);
    return kl_keystore_insert(ks, pkey, &info, name);
}

const kl_key *kl_keystore_find(const kl_keystore *ks,
                               const uint8_t ski[KL_SKI_LEN])
{
    return *probe(ks->table, ks->table_mask, ski);
}

size_t kl_keystore_count(const kl_keystore *ks)
{
    return ks->count;
}

void kl_keystore_foreach(const kl_keystore *ks,
                         void (*fn)(void *arg, const kl_key *key), void *arg)
{
    for (size_t i = 0; i < ks->count; i++)
        fn(arg, ks->keys[i]);
}

kl_key_type kl_key_get_type(const kl_key *k)
{
    return k->info.type;
}
int kl_key_bits(const kl_key *k)
{
    return k->info.bits;
}
int kl_key_curve(const kl_key *k)
{
    return k->info.curve;
}
const uint8_t *kl_key_ski(const kl_key *k)
{
    return k->ski;
}
const char *kl_key_path(const kl_key *k)
{
    return k->path;
}
size_t kl_key_index(const kl_key *k)
{
    return k->index;
}
EVP_PKEY *kl_key_pkey(const kl_key *k)
{
    return k->pkey;
}
const char *kl_key_propq(const kl_key *k)
{
    return k->propq;
}

kl_key_backend kl_key_get_backend(const kl_key *k)
{
    return (kl_key_backend)k->backend;
}
kl_p11_key *kl_key_p11(const kl_key *k)
{
    return k->p11;
}
size_t kl_keystore_token_sessions(const kl_keystore *ks)
{
    return ks ? kl_p11_set_sessions(ks->p11) : 0;
}

const char *kl_key_desc(const kl_key *k, char *buf, size_t len)
{
    switch (k->info.type) {
    case KL_KEY_RSA: snprintf(buf, len, "RSA-%d", k->info.bits); break;
    case KL_KEY_EC: snprintf(buf, len, "ECDSA-P-%d", k->info.bits); break;
    case KL_KEY_ED25519: snprintf(buf, len, "Ed25519"); break;
    default: snprintf(buf, len, "unknown"); break;
    }
    return buf;
}

size_t kl_key_max_output(const kl_key *k)
{
    return k->max_out;
}

const uint8_t *kl_key_ec_scalar(const kl_key *k, size_t *len)
{
    *len = k->ec_dlen;
    return k->ec_dlen ? k->ec_d : NULL;
}
