/* SPDX-License-Identifier: Apache-2.0 */
/* The key store: private keys indexed by SKI (protocol P7)
 * in a hash map, loaded from directories and files.
 * Key material lives only here and in src/crypto. */
#ifndef KL_KEYS_KEYSTORE_H
#define KL_KEYS_KEYSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "core/status.h"
#include "seal/policy.h"
#include "keyless/protocol.h"

typedef enum kl_key_type {
    KL_KEY_RSA = 1,
    KL_KEY_EC = 2,
    KL_KEY_ED25519 = 3,
} kl_key_type;

/* Where a key's private part lives. */
typedef enum kl_key_backend {
    KL_BACKEND_FILE = 0,   /* in memory, from a key file */
    KL_BACKEND_PKCS11 = 1, /* on a PKCS#11 token */
    /* signed by an OpenSSL provider other than the built-in ones (a key it
     * holds, or one EVP hands it): a device call that blocks the calling
     * thread (a TPM through tpm2-openssl) */
    KL_BACKEND_PROVIDER = 2,
    /* the same, by a provider named in async_providers, which pauses an
     * ASYNC job while its device works (docs/DESIGN.md "Accelerators:
     * ASYNC jobs") */
    KL_BACKEND_ASYNC = 3,
} kl_key_backend;

typedef struct kl_key kl_key;
typedef struct kl_keystore kl_keystore;

/* Where a load problem is reported: one line per problem, naming the file
 * and the reason. */
typedef void (*kl_keystore_report_fn)(void *arg, int level, const char *path,
                                      const char *msg);

typedef struct kl_keystore_opts {
    bool allow_group_readable; /* accept key files readable by group/others */
    bool check_mode;           /* --check: also warn about x.key.bak etc. */
    bool skip_bad_keys; /* reload, --check: a key file in a directory that
                           fails is reported and skipped; the walk goes on */
    /* OpenSSL property query for key operations (e.g.
     * "?provider=qatprovider"); NULL or "": OpenSSL's default properties */
    const char *key_propquery;
    /* comma-separated names of OpenSSL providers whose operations may
     * pause an ASYNC job (KL_BACKEND_ASYNC); NULL or "": none. Must
     * outlive the store. */
    const char *async_providers;
    kl_keystore_report_fn report; /* NULL: log through core/log */
    void *report_arg;
    /* Sealed key files (docs/SEALING.md): this server's sealing private
     * key (any provider's; NULL: no *.sealed file can be opened here, so
     * each is held elsewhere) and its attributes (n_sealing_attrs 0: the
     * files' policies are not checked here, a wrap to this key decides).
     * Borrowed for the loads only. */
    EVP_PKEY *sealing_key;
    const kl_policy_attr *sealing_attrs;
    size_t n_sealing_attrs;
} kl_keystore_opts;

kl_keystore *kl_keystore_new(const kl_keystore_opts *opts);
/* Frees every key, wiping key material. */
void kl_keystore_free(kl_keystore *ks);

/* Loads every file whose name ends in ".key" (and, as sealed key files,
 * ".sealed") below dir (recursively).
 * Stops at the first key that fails (startup rule: a bad key stops the
 * server), reporting its path and the reason. A directory that group or
 * others can write is refused like a bad key (with skip_bad_keys: that
 * directory is skipped, the others load). */
KL_WUR kl_status kl_keystore_add_dir(kl_keystore *ks, const char *dir);
/* Loads one key file (PEM or DER; PKCS#1, SEC1, PKCS#8; RSA 1024-8192,
 * EC P-224/256/384/521, Ed25519). Encrypted PEM is refused. A duplicate SKI
 * is reported (warning) and the first key kept. */
KL_WUR kl_status kl_keystore_add_file(kl_keystore *ks, const char *path);
/* Loads one sealed key file (docs/SEALING.md): opened with
 * opts.sealing_key when the file is wrapped to it (and, with attributes,
 * its policy admits this server), and indexed like a key file; a file
 * not for this server is recorded as held elsewhere (KL_OK); a file that
 * does not parse, or whose entry for this server does not open, is
 * reported naming the file, counted (kl_keys_sealed_refused_total) and
 * refused (KL_E_KEY). The plaintext lives only in the key's memory. */
KL_WUR kl_status kl_keystore_add_sealed(kl_keystore *ks, const char *path);
/* Sealed keys this server cannot open: their policy (canonical form), or
 * NULL for an SKI not held elsewhere; one hash probe. A request for one
 * is forwarded by the geo router to a remote whose attributes satisfy
 * the policy (docs/SEALING.md "keylessd and sealed keys"). */
const char *kl_keystore_held_elsewhere(const kl_keystore *ks,
                                       const uint8_t ski[KL_SKI_LEN]);
size_t kl_keystore_held_elsewhere_count(const kl_keystore *ks);
/* The policy of the i-th key held elsewhere (i < the count), in load
 * order: what the router prepares its eligible remotes for. */
const char *kl_keystore_elsewhere_policy(const kl_keystore *ks, size_t i);
/* Sealed key files refused by any load in this process (tampered, or not
 * opening for this server although wrapped to it). */
uint64_t kl_keys_sealed_refused_total(void);

/* Adds an already decoded key (takes a reference on pkey). */
KL_WUR kl_status kl_keystore_add_pkey(kl_keystore *ks, EVP_PKEY *pkey,
                                      const char *label);

/* Adds the key a PKCS#11 URI names (RFC 7512):
 *   pkcs11:token=LABEL|serial=S|slot-id=N;object=LABEL;id=%01
 *          ?module-path=/path/module.so&pin-value=PIN|pin-source=FILE
 *          &max-sessions=N
 * Exactly one of token, serial, slot-id; object and/or id; module-path
 * required; max-sessions (default 1) sizes the token's session pool.
 * Loads the module (once per store), logs in, and computes the SKI from the
 * public key the token holds. Errors are reported naming the URI with the
 * PIN redacted; KL_E_CONFIG for a bad URI or PIN, KL_E_KEY when the token or
 * the key cannot be used.
 * A URI of any other scheme (e.g. tpm2-openssl's "handle:0x81000001") is
 * opened through OSSL_STORE under key_propquery: a key another OpenSSL
 * provider holds (docs/OPERATIONS.md "Accelerators and provider keys").
 * Key files that OpenSSL's own decoders do not read (a TPM's "TSS2 PRIVATE
 * KEY") are tried the same way by kl_keystore_add_file. */
KL_WUR kl_status kl_keystore_add_uri(kl_keystore *ks, const char *uri);
/* A sealing key (docs/SEALING.md "Node identity") on a PKCS#11 token:
 * the EC P-256 private key a `pkcs11:` URI names (the rules and the PIN
 * of kl_keystore_add_uri's URIs), as its public EVP_PKEY carrying a DH
 * hook (seal/hpke.h kl_hpke_key_set_dh) that runs HPKE's DH on the token
 * (C_DeriveKey, CKM_ECDH1_DERIVE): every seal/ function that takes a
 * recipient's private key takes it. One ECDH is tried here and checked
 * against the public key, so a token that cannot do it is refused now,
 * not at each sealed file. The EVP_PKEY owns the module and the logged-in
 * session: freeing it closes them. KL_E_CONFIG (the URI, the PIN, no such
 * token or module) or KL_E_KEY (no such key, not P-256, no ECDH) with
 * the reason in why (never the PIN, nor the URI: the caller names it). */
KL_WUR kl_status kl_keys_sealing_key_p11(const char *uri, EVP_PKEY **out,
                                         char *why, size_t whylen);
/* The same for a key another OpenSSL provider holds, named by an
 * OSSL_STORE URI (tpm2-openssl's handle:0x81000001), loaded under propq
 * (NULL: the defaults): an X25519 or P-256 key with which HPKE is tried
 * once (a message to its public half opened with it), so a provider that
 * cannot derive with it is refused here. KL_E_CONFIG when no provider
 * opens the URI, KL_E_KEY otherwise, with why. */
KL_WUR kl_status kl_keys_sealing_key_store(const char *uri, const char *propq,
                                           EVP_PKEY **out, char *why,
                                           size_t whylen);

/* Sum of max-sessions over the tokens of the store's PKCS#11 keys: how many
 * blocking workers can use them at once (kl_pool_opts.blocking_workers). */
size_t kl_keystore_token_sessions(const kl_keystore *ks);

/* O(1) lookup. NULL when no key has this SKI. */
const kl_key *kl_keystore_find(const kl_keystore *ks,
                               const uint8_t ski[KL_SKI_LEN]);
size_t kl_keystore_count(const kl_keystore *ks);
/* Calls fn for every key, in load order. */
void kl_keystore_foreach(const kl_keystore *ks,
                         void (*fn)(void *arg, const kl_key *key), void *arg);

kl_key_type kl_key_get_type(const kl_key *k);
int kl_key_bits(const kl_key *k);
/* EC curve NID (NID_X9_62_prime256v1, ...) or 0. */
int kl_key_curve(const kl_key *k);
const uint8_t *kl_key_ski(const kl_key *k);
/* The file the key came from (or the label given). */
const char *kl_key_path(const kl_key *k);
/* A small stable number per key within its store, 0..count-1 (for
 * per-thread caches indexed by key). */
size_t kl_key_index(const kl_key *k);
/* "RSA-2048", "ECDSA-P-256", "Ed25519". */
const char *kl_key_desc(const kl_key *k, char *buf, size_t len);
/* For src/crypto only: the private key (a token key: its public key). */
EVP_PKEY *kl_key_pkey(const kl_key *k);
kl_key_backend kl_key_get_backend(const kl_key *k);
/* The property query its operations fetch with (the store's
 * key_propquery), or NULL. */
const char *kl_key_propq(const kl_key *k);
/* The largest output of an operation with the key (EVP_PKEY_get_size,
 * taken at load so that a request does not touch the EVP_PKEY). */
size_t kl_key_max_output(const kl_key *k);
/* Longest EC private scalar (P-521: 66 bytes). */
#define KL_EC_SCALAR_MAX 66
/* For src/crypto only: an EC file key's private scalar, big-endian and
 * padded to the group order's length (*len bytes), or NULL (token keys,
 * other types). Valid as long as the store is. */
const uint8_t *kl_key_ec_scalar(const kl_key *k, size_t *len);

/* SKI per protocol P7: SHA-1 over the subjectPublicKey BIT STRING contents. */
KL_WUR kl_status kl_ski_from_pkey(EVP_PKEY *pkey, uint8_t out[KL_SKI_LEN]);

/* Lower-case hex of an SKI into out (41 bytes). */
void kl_ski_hex(const uint8_t ski[KL_SKI_LEN], char out[2 * KL_SKI_LEN + 1]);
/* Parses 40 hex digits (either case, optional ':' separators). */
KL_WUR kl_status kl_ski_parse(const char *hex, uint8_t out[KL_SKI_LEN]);

#endif
