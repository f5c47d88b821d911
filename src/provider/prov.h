/* SPDX-License-Identifier: Apache-2.0 */
/* The keyless OpenSSL 3 provider (docs/PROVIDER.md): its context and what its
 * parts share. Entry point: OSSL_provider_init (prov.c). The parts:
 *   decoder.c   PEM key references -> keys (keyref.h for the format)
 *   keymgmt.c   RSA, EC, ED25519 keys that hold only a public half
 *   key.c       a key's remote operations through libkeyless (+ fallback)
 *   async.c     the same inside OpenSSL async jobs: pause, don't block
 *   io.c        the I/O thread that drives libkeyless for async.c
 *   signature.c RSA PKCS#1 v1.5 / PSS, ECDSA, Ed25519 signatures
 *   cipher.c    RSA decrypt for TLS 1.2 RSA key exchange
 *   tlspad.c    the constant-time premaster check (RFC 5246 7.4.7.1) */
#ifndef KL_PROVIDER_PROV_H
#define KL_PROVIDER_PROV_H

#include <stdarg.h>

#include <openssl/core.h>
#include <openssl/types.h>

#include "keyless/client.h"
#include "provider/io.h"
#include "provider/keyref.h"

#define KLP_NAME "keyless"
/* Every fetch the provider makes for itself (digests, the public halves)
 * avoids its own algorithms. */
#define KLP_PROPQ "provider!=keyless"
/* Request budget when neither the reference nor openssl.cnf names one. */
#define KLP_DEFAULT_TIMEOUT_MS 3000

/* Reasons of the errors the provider raises (shown through its reason
 * strings in the terminator's log). */
enum klp_reason {
    KLP_R_UNREACHABLE = 1, /* no key server answered */
    KLP_R_SERVER_ERROR,    /* a key server answered with an error */
    KLP_R_BAD_REFERENCE,   /* a key reference that cannot be used */
    KLP_R_UNSUPPORTED,     /* an operation the key server cannot do */
    KLP_R_BAD_INPUT,       /* wrong sizes, missing parameters */
    KLP_R_INTERNAL,
};

typedef struct klp_ctx klp_ctx;

/* The provider's child library context (mirrors the application's). */
OSSL_LIB_CTX *klp_libctx(const klp_ctx *p);
/* openssl.cnf `timeout_ms` in the provider's section, or the default. */
int klp_default_timeout(const klp_ctx *p);

/* A libkeyless target for the reference's servers and TLS files, shared by
 * every key naming the same ones; created on first use (it opens nothing:
 * connections start in the process that signs, after any fork). *io is
 * the I/O thread handle of asynchronous operations on it (io.h: started
 * on first use). NULL with err filled on failure. Both live until the
 * provider unloads. */
kl_target *klp_target_for(klp_ctx *p, const kl_keyref *r, klp_io **io,
                          char *err, size_t errlen);

/* Puts an error on the calling thread's OpenSSL error queue, attributed to
 * this provider, with a formatted message. */
void klp_raise(const klp_ctx *p, int reason, const char *file, int line,
               const char *func, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
#define KLP_RAISE(p, reason, ...)                                              \
    klp_raise((p), (reason), __FILE__, __LINE__, __func__, __VA_ARGS__)

/* A line on stderr (the terminator's error log: nginx sends stderr there),
 * prefixed with the provider's name. */
void klp_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Dispatch tables (one per part). */
extern const OSSL_DISPATCH klp_rsa_keymgmt_functions[];
extern const OSSL_DISPATCH klp_ec_keymgmt_functions[];
extern const OSSL_DISPATCH klp_ed25519_keymgmt_functions[];
extern const OSSL_DISPATCH klp_rsa_decoder_functions[];
extern const OSSL_DISPATCH klp_ec_decoder_functions[];
extern const OSSL_DISPATCH klp_ed25519_decoder_functions[];
extern const OSSL_DISPATCH klp_rsa_signature_functions[];
extern const OSSL_DISPATCH klp_ecdsa_signature_functions[];
extern const OSSL_DISPATCH klp_ed25519_signature_functions[];
extern const OSSL_DISPATCH klp_rsa_cipher_functions[];

/* The provider's entry point, also for tests that add it as a built-in
 * provider (OSSL_PROVIDER_add_builtin) to run it in-process. */
int OSSL_provider_init(const OSSL_CORE_HANDLE *handle, const OSSL_DISPATCH *in,
                       const OSSL_DISPATCH **out, void **provctx);

#endif
