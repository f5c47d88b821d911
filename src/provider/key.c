/* SPDX-License-Identifier: Apache-2.0 */
/* Keyless keys and their remote operations (see key.h). */
#include "provider/key.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "crypto/ops.h"
#include "keys/keystore.h"
#include "provider/async.h"
#include "provider/keyref_pem.h"

struct klp_key {
    int refs;
    klp_ctx *prov;
    klp_type type;
    EVP_PKEY *pub;
    bool remote;
    uint8_t ski[KL_SKI_LEN];
    char ski_hex[2 * KL_SKI_LEN + 1];
    kl_target *target;
    klp_io *io;        /* drives target for operations in async jobs */
    char servers[256]; /* "a:2407, b:2407", for messages */
    int timeout_ms;
    size_t max_output;
    /* Optional local fallback, loaded on first need. */
    char *fallback_path;
    pthread_mutex_t fb_lock;
    kl_keystore *fallback;
};

const char *klp_type_name(klp_type t)
{
    switch (t) {
    case KLP_RSA: return "RSA";
    case KLP_EC: return "EC";
    case KLP_ED25519: return "ED25519";
    default: return "?";
    }
}

klp_type klp_type_of(const EVP_PKEY *pk)
{
    if (EVP_PKEY_is_a(pk, "RSA"))
        return KLP_RSA;
    if (EVP_PKEY_is_a(pk, "EC"))
        return KLP_EC;
    if (EVP_PKEY_is_a(pk, "ED25519"))
        return KLP_ED25519;
    return 0;
}

klp_key *klp_key_empty(klp_ctx *p, klp_type t)
{
    klp_key *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->refs = 1;
    k->prov = p;
    k->type = t;
    pthread_mutex_init(&k->fb_lock, NULL);
    return k;
}

int klp_key_set_public(klp_key *k, EVP_PKEY *pub)
{
    int size = EVP_PKEY_get_size(pub);
    if (k->pub || !k->type || klp_type_of(pub) != k->type || size <= 0)
        return 0;
    k->pub = pub;
    k->max_output = (size_t)size;
    return 1;
}

static klp_key *key_new(klp_ctx *p, EVP_PKEY *pub)
{
    klp_key *k = klp_key_empty(p, klp_type_of(pub));
    if (k && !klp_key_set_public(k, pub)) {
        k->pub = NULL;
        klp_key_free(k);
        return NULL;
    }
    return k;
}

klp_key *klp_key_from_ref(klp_ctx *p, kl_keyref *r, char *err, size_t errlen)
{
    EVP_PKEY *pub = NULL;
    klp_key *k = NULL;
    if (kl_keyref_pubkey(r, klp_libctx(p), KLP_PROPQ, &pub, err, errlen) !=
        KL_OK)
        goto out;
    if (!(k = key_new(p, pub))) {
        EVP_PKEY_free(pub);
        snprintf(err, errlen, "its public key is not RSA, EC or Ed25519");
        goto out;
    }
    if (!(k->target = klp_target_for(p, r, &k->io, err, errlen))) {
        klp_key_free(k);
        k = NULL;
        goto out;
    }
    k->remote = true;
    memcpy(k->ski, r->ski, KL_SKI_LEN);
    kl_ski_hex(k->ski, k->ski_hex);
    size_t used = 0;
    for (size_t i = 0; i < r->nservers && used < sizeof(k->servers); i++) {
        int n = snprintf(k->servers + used, sizeof(k->servers) - used, "%s%s",
                         i ? ", " : "", r->servers[i]);
        used += n > 0 ? (size_t)n : 0;
    }
    k->timeout_ms = r->timeout_ms ? (int)r->timeout_ms : klp_default_timeout(p);
    k->fallback_path = r->fallback_key;
    r->fallback_key = NULL;
out:
    kl_keyref_clear(r);
    return k;
}

void klp_key_up_ref(klp_key *k)
{
    __atomic_add_fetch(&k->refs, 1, __ATOMIC_RELAXED);
}

void klp_key_free(klp_key *k)
{
    if (!k || __atomic_sub_fetch(&k->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    EVP_PKEY_free(k->pub);
    kl_keystore_free(k->fallback); /* wipes the key material */
    free(k->fallback_path);
    pthread_mutex_destroy(&k->fb_lock);
    free(k);
}

klp_type klp_key_type(const klp_key *k)
{
    return k->type;
}
klp_ctx *klp_key_prov(const klp_key *k)
{
    return k->prov;
}
EVP_PKEY *klp_key_pub(const klp_key *k)
{
    return k->pub;
}
bool klp_key_remote(const klp_key *k)
{
    return k->remote;
}
size_t klp_key_max_output(const klp_key *k)
{
    return k->max_output;
}
size_t klp_key_rsa_len(const klp_key *k)
{
    return k->type == KLP_RSA ? k->max_output : 0;
}

static void fb_report(void *arg, int level, const char *path, const char *msg)
{
    klp_log("fallback key %s: %s", path ? path : "", msg);
}

/* The local key, loaded once; NULL when it does not load or has another
 * SKI (logged). */
static const kl_key *fallback_key(klp_key *k)
{
    const kl_key *key = NULL;
    pthread_mutex_lock(&k->fb_lock);
    if (!k->fallback) {
        kl_keystore_opts o = {.report = fb_report};
        k->fallback = kl_keystore_new(&o);
        if (k->fallback &&
            kl_keystore_add_file(k->fallback, k->fallback_path) != KL_OK) {
            kl_keystore_free(k->fallback);
            k->fallback = NULL;
        }
    }
    if (k->fallback && !(key = kl_keystore_find(k->fallback, k->ski)))
        klp_log("fallback key %s is not the key %s", k->fallback_path,
                k->ski_hex);
    pthread_mutex_unlock(&k->fb_lock);
    return key;
}

static int run_fallback(klp_key *k, uint8_t op, const uint8_t *in, size_t inlen,
                        uint8_t *out, size_t outcap, size_t *outlen,
                        kl_status why)
{
    const kl_key *key = fallback_key(k);
    if (!key)
        return 0;
    kl_status e = kl_crypto_exec(key, op, in, inlen, out, outcap, outlen);
    klp_log("no key server answered (%s: %s) for key %s: %s with the local "
            "fallback key %s",
            k->servers, kl_status_str(why), k->ski_hex,
            e == KL_OK ? "operation done" : "operation FAILED",
            k->fallback_path);
    return e == KL_OK;
}

int klp_key_op(klp_key *k, uint8_t op, const uint8_t *in, size_t inlen,
               uint8_t *out, size_t outcap, size_t *outlen)
{
    if (!k->remote) {
        KLP_RAISE(k->prov, KLP_R_BAD_INPUT,
                  "a public key cannot sign or decrypt");
        return 0;
    }
    kl_request_spec spec = {
        .opcode = op,
        .payload = in,
        .payload_len = inlen,
        .ski = k->ski,
    };
    kl_client_result res;
    memset(&res, 0, sizeof(res));
    /* Inside an async job (SSL_MODE_ASYNC) the job pauses instead of
     * blocking the application's thread (async.h); elsewhere we block. */
    kl_status s;
    if (!klp_async_call(k->io, k->target, &spec, k->timeout_ms, &res, &s))
        s = kl_target_call(k->target, &spec, k->timeout_ms, &res);
    if (s != KL_OK) {
        if (k->fallback_path &&
            run_fallback(k, op, in, inlen, out, outcap, outlen, s))
            return 1;
        if (s == KL_E_TIMEOUT) {
            KLP_RAISE(k->prov, KLP_R_UNREACHABLE,
                      "no keyless key server answered for key %s within %d "
                      "ms: %s (%s)",
                      k->ski_hex, k->timeout_ms, k->servers, kl_status_str(s));
            return 0;
        }
        /* refused, reset, TLS failure: said at once, with the cause
         * (docs/PROVIDER.md "Failures, timeouts, fork, fallback") */
        kl_conn_info ci;
        kl_target_conn_info(k->target, &ci);
        KLP_RAISE(k->prov, KLP_R_UNREACHABLE,
                  "no keyless key server answered for key %s: %s (%s%s%s)",
                  k->ski_hex, k->servers, kl_status_str(s),
                  ci.last_error[0] ? "; " : "", ci.last_error);
        return 0;
    }
    int ok = 0;
    if (res.opcode == KL_OP_ERROR)
        KLP_RAISE(k->prov, KLP_R_SERVER_ERROR,
                  "keyless key server (%s) answered \"%s\" for key %s, %s",
                  k->servers, kl_err_text(res.error), k->ski_hex,
                  kl_op_name(op));
    else if (res.opcode != KL_OP_RESPONSE || res.payload_len > outcap)
        KLP_RAISE(k->prov, KLP_R_SERVER_ERROR,
                  "keyless key server (%s) sent an unexpected answer "
                  "(opcode 0x%02x, %zu bytes) for key %s",
                  k->servers, res.opcode, res.payload_len, k->ski_hex);
    else {
        if (res.payload_len)
            memcpy(out, res.payload, res.payload_len);
        *outlen = res.payload_len;
        ok = 1;
    }
    kl_client_result_free(&res);
    return ok;
}
