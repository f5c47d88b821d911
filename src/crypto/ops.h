/* SPDX-License-Identifier: Apache-2.0 */
/* Executing one private-key operation (protocol P4) with OpenSSL's EVP API.
 * Pure computation, thread-safe: callable from any worker thread. Contexts
 * that can be cached per key per thread are cached (an EVP_PKEY_CTX per key
 * per thread) and freed by kl_crypto_thread_cleanup(). */
#ifndef KL_CRYPTO_OPS_H
#define KL_CRYPTO_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/time.h"
#include "keys/keystore.h"

/* Largest output this key can produce for any opcode (RSA: modulus bytes,
 * ECDSA: DER signature max, Ed25519: 64). */
size_t kl_crypto_max_output(const kl_key *key);

/* Runs opcode on payload with key. Returns KL_OK and fills out and
 * *out_len, or the status of the P6 answer (docs/DESIGN.md "Errors"):
 * KL_E_CRYPTO for a failed operation, a bad
 * digest length, or an opcode that does not fit the key type;
 * KL_E_BAD_OPCODE for an opcode that is not a key operation. */
kl_status kl_crypto_exec(const kl_key *key, uint8_t opcode,
                         const uint8_t *payload, size_t plen, uint8_t *out,
                         size_t outcap, size_t *out_len);

/* How long an operation on a token key waits for a free session when the
 * caller gave no deadline. */
#define KL_CRYPTO_DEFAULT_WAIT_NS (2 * KL_NS_PER_S)

/* The same with the caller's deadline (monotonic ns, 0 = none): an
 * operation on a token key (kl_key_get_backend) that cannot get a session
 * by then answers KL_E_INTERNAL. Token errors: KL_E_CRYPTO when the
 * token refused the input or mechanism, KL_E_INTERNAL when the token or
 * its sessions failed. Token keys block the calling thread: run them on the
 * pool's blocking class only. */
kl_status kl_crypto_exec_deadline(const kl_key *key, uint8_t opcode,
                                  const uint8_t *payload, size_t plen,
                                  uint8_t *out, size_t outcap, size_t *out_len,
                                  uint64_t deadline_ns);

/* The same on a context the caller keeps for this purpose (zeroed at
 * first; one per ASYNC slot, crypto/async.h), set up again when the key or
 * opcode changes and after a failure - never this thread's context cache
 * nor a key's EC scalar: several paused operations of one thread may use
 * the same key at once. Token keys are refused (KL_E_INTERNAL): they run
 * on the blocking class. kl_crypto_private_free releases the context. */
struct kl_ctx_entry;
kl_status kl_crypto_exec_private(struct kl_ctx_entry *keep, const kl_key *key,
                                 uint8_t opcode, const uint8_t *payload,
                                 size_t plen, uint8_t *out, size_t outcap,
                                 size_t *out_len);
void kl_crypto_private_free(struct kl_ctx_entry *keep);

/* The cost class of an operation with this key: fast (EC,
 * Ed25519), slow (RSA, by size), blocking (any key on a PKCS#11 token or
 * signed by a provider other than OpenSSL's own: the thread waits for the
 * device). */
typedef enum kl_cost_class {
    KL_COST_FAST = 0,
    KL_COST_SLOW = 1,
    KL_COST_BLOCKING = 2,
    KL_COST_CLASSES = 3,
} kl_cost_class;

kl_cost_class kl_crypto_cost_class(const kl_key *key);

/* Whether operations with this key run as ASYNC jobs on the shard that
 * received them (crypto/async.h): a key of a provider that pauses jobs
 * (KL_BACKEND_ASYNC). Its cost class is KL_COST_BLOCKING: where no ASYNC
 * slot is free, a blocking worker waits for the device instead. */
bool kl_crypto_is_async(const kl_key *key);

/* Frees this thread's cached contexts. Worker threads call it on exit. */
void kl_crypto_thread_cleanup(void);

#endif
