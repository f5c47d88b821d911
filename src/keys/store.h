/* SPDX-License-Identifier: Apache-2.0 */
/* Private to src/keys: the key store's insides, shared by keystore.c (the
 * index) and load.c (files and directories). */
#ifndef KL_KEYS_STORE_H
#define KL_KEYS_STORE_H

#include "core/hmap.h"
#include "keys/decode.h"
#include "keys/keystore.h"
#include "keys/p11.h"

struct kl_key {
    /* What a request touches, first: with 100,000 keys each request's key
     * is cold, so the lookup's compare, the type, the output size and the
     * EC scalar share the struct's first lines (docs/DESIGN.md "Many
     * keys: the scalar next to the SKI"). */
    uint8_t ski[KL_SKI_LEN];
    kl_key_info info;
    uint16_t max_out; /* EVP_PKEY_get_size, taken at load */
    uint8_t backend;  /* kl_key_backend */
    /* EC file keys: the private scalar, big-endian, padded to the order's
     * length (ec_dlen bytes); wiped when the key is freed. 0: none. */
    uint8_t ec_dlen;
    uint8_t ec_d[KL_EC_SCALAR_MAX];
    EVP_PKEY *pkey;  /* file keys: the private key; token keys: public */
    kl_p11_key *p11; /* token keys only */
    size_t index;
    const char *propq; /* the store's key_propquery, or NULL */
    char path[];       /* file or label */
};

struct kl_keystore {
    kl_keystore_opts opts;
    const char *propq; /* opts.key_propquery, interned; NULL: none */
    kl_key **keys;     /* load order; kl_key_index is the position here */
    size_t count, cap;
    kl_key **table; /* open addressing by SKI, linear probing */
    size_t table_mask;
    kl_key_decoder *decoder; /* created on the first file */
    kl_p11_set *p11;         /* created on the first URI */
    bool direct_ecdsa;       /* EC file keys keep their scalar (keystore.c) */
    /* the back end of keys in memory, by kl_key_type: kl_key_backend + 1,
     * 0 until the first key of the type (keystore.c file_backend) */
    uint8_t type_backend[4];
    struct kl_elsewhere *elsewhere; /* sealed keys for other servers */
    size_t n_elsewhere, cap_elsewhere;
    kl_hmap elsewhere_map; /* SKI -> index in elsewhere (a request's miss
                              asks it: docs/SEALING.md) */
};

/* A sealed key held elsewhere (sealed_load.c). */
typedef struct kl_elsewhere {
    uint8_t ski[KL_SKI_LEN];
    char *policy;
} kl_elsewhere;

/* Reads a whole key file (regular, at most 1 MiB; not group/others-
 * readable unless allowed, or unless any_mode: a sealed file is
 * ciphertext, docs/SEALING.md) into an OPENSSL_malloc'd buffer of len + 1
 * bytes that the caller wipes and frees; reports problems. */
KL_WUR kl_status kl_keystore_read_file(kl_keystore *ks, const char *path,
                                       bool any_mode, uint8_t **buf,
                                       size_t *len);
/* Frees the held-elsewhere records (keystore.c's free calls it). */
void kl_keystore_free_elsewhere(kl_keystore *ks);

/* One report line (opts.report, else the log). */
void kl_keystore_report(const kl_keystore *ks, int level, const char *path,
                        const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Indexes a checked key, taking ownership of pkey (freed on every path but
 * success). A duplicate SKI is reported and the new key dropped (KL_OK). */
KL_WUR kl_status kl_keystore_insert(kl_keystore *ks, EVP_PKEY *pkey,
                                    const kl_key_info *info, const char *path);
/* The same with the SKI computed by the caller (NULL: it could not be). */
KL_WUR kl_status kl_keystore_insert_ski(kl_keystore *ks, EVP_PKEY *pkey,
                                        kl_p11_key *p11,
                                        const kl_key_info *info,
                                        const char *path,
                                        const uint8_t ski[KL_SKI_LEN]);
/* Whether OpenSSL's own providers (default, fips, base, legacy) hold the
 * key: it is in memory and their code signs with it. */
bool kl_pkey_builtin(const EVP_PKEY *pkey);
/* provider_key.c: the private key an OpenSSL provider other than
 * OpenSSL's own yields for uri (OSSL_STORE, under the store's
 * key_propquery), indexed under label. KL_E_CONFIG with why set when no
 * provider opens the URI, KL_E_KEY when it yields no such key (a key of
 * OpenSSL's own providers counts as none: the caller's decoder spoke for
 * it); a key whose public part fails the checks is also reported unless
 * quiet. */
KL_WUR kl_status kl_keystore_add_provider_key(kl_keystore *ks, const char *uri,
                                              const char *label, bool quiet,
                                              char *why, size_t whylen);
/* The same for a token key: pkey is its public key; takes ownership of p11
 * as well. */
KL_WUR kl_status kl_keystore_insert_p11(kl_keystore *ks, EVP_PKEY *pkey,
                                        kl_p11_key *p11,
                                        const kl_key_info *info,
                                        const char *path);

#endif
