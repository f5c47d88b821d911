/* SPDX-License-Identifier: Apache-2.0 */
/* The provider's entry point, algorithm tables, errors and shared targets
 * (see prov.h). */
#include "provider/prov.h"

#include "provider/decoder.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_dispatch.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/params.h>
#include <openssl/provider.h>

/* One shared libkeyless target per distinct server list + TLS files. */
typedef struct klp_tgt {
    struct klp_tgt *next;
    char *conf; /* the identity: servers and files, NUL-separated text */
    kl_target *target;
    klp_io *io; /* its I/O thread, for operations in async jobs */
} klp_tgt;

struct klp_ctx {
    const OSSL_CORE_HANDLE *handle;
    OSSL_LIB_CTX *libctx;
    OSSL_FUNC_core_new_error_fn *new_error;
    OSSL_FUNC_core_set_error_debug_fn *set_error_debug;
    OSSL_FUNC_core_vset_error_fn *vset_error;
    int timeout_ms;
    pthread_mutex_t lock; /* targets */
    klp_tgt *targets;
};

OSSL_LIB_CTX *klp_libctx(const klp_ctx *p)
{
    return p->libctx;
}
int klp_default_timeout(const klp_ctx *p)
{
    return p->timeout_ms;
}

void klp_raise(const klp_ctx *p, int reason, const char *file, int line,
               const char *func, const char *fmt, ...)
{
    if (!p || !p->new_error || !p->vset_error)
        return;
    va_list ap;
    p->new_error(p->handle);
    if (p->set_error_debug)
        p->set_error_debug(p->handle, file, line, func);
    va_start(ap, fmt);
    p->vset_error(p->handle, (uint32_t)reason, fmt, ap);
    va_end(ap);
}

void klp_log(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    /* One write, so lines from several workers do not interleave. */
    fprintf(stderr, "keyless provider: %s\n", line);
    fflush(stderr);
}

static char *target_conf(const kl_keyref *r)
{
    size_t n = 64;
    const char *files[] = {r->cert_file, r->key_file, r->ca_file,
                           r->server_name};
    for (size_t i = 0; i < r->nservers; i++)
        n += strlen(r->servers[i]) + 1;
    for (size_t i = 0; i < 4; i++)
        n += (files[i] ? strlen(files[i]) : 0) + 1;
    char *s = malloc(n), *w = s;
    if (!s)
        return NULL;
    for (size_t i = 0; i < r->nservers; i++)
        w += sprintf(w, "%s,", r->servers[i]);
    for (size_t i = 0; i < 4; i++)
        w += sprintf(w, "|%s", files[i] ? files[i] : "");
    return s;
}

kl_target *klp_target_for(klp_ctx *p, const kl_keyref *r, klp_io **io,
                          char *err, size_t errlen)
{
    char *conf = target_conf(r);
    kl_target *t = NULL;
    *io = NULL;
    if (!conf) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_lock(&p->lock);
    for (klp_tgt *e = p->targets; e && !t; e = e->next)
        if (strcmp(e->conf, conf) == 0) {
            t = e->target;
            *io = e->io;
        }
    klp_tgt *e = NULL;
    if (!t) {
        kl_target_opts o = {
            .servers = (const char *const *)r->servers,
            .nservers = r->nservers,
            .cert_file = r->cert_file,
            .key_file = r->key_file,
            .ca_file = r->ca_file,
            .server_name = r->server_name,
            .timeout_ms = p->timeout_ms,
        };
        e = calloc(1, sizeof(*e));
        if (!e)
            snprintf(err, errlen, "out of memory");
        else if (kl_target_new(&o, &t, err, errlen) != KL_OK)
            t = NULL;
        else if (!(e->io = klp_io_new(t))) {
            kl_target_free(t);
            t = NULL;
            snprintf(err, errlen, "out of memory");
        } else {
            e->conf = conf;
            conf = NULL;
            e->target = t;
            *io = e->io;
            e->next = p->targets;
            p->targets = e;
            e = NULL;
        }
    }
    pthread_mutex_unlock(&p->lock);
    free(e);
    free(conf);
    return t;
}

#define RSA_NAMES "RSA:rsaEncryption:1.2.840.113549.1.1.1"
#define EC_NAMES "EC:id-ecPublicKey:1.2.840.10045.2.1"
#define ED25519_NAMES "ED25519:1.3.101.112"
#define PROPS "provider=keyless"
/* Our own PEM-to-DER step (OpenSSL 3.0's drops labels it does not know),
 * then key decoders for the reference structure only (decoder.c). */
#define PEM_PROPS "provider=keyless,input=pem"
#define DEC_PROPS "provider=keyless,input=der,structure=" KLP_REF_STRUCTURE

static const OSSL_ALGORITHM keymgmts[] = {
    {RSA_NAMES, PROPS, klp_rsa_keymgmt_functions, "keyless RSA key"},
    {EC_NAMES, PROPS, klp_ec_keymgmt_functions, "keyless EC key"},
    {ED25519_NAMES, PROPS, klp_ed25519_keymgmt_functions,
     "keyless Ed25519 key"},
    {NULL, NULL, NULL, NULL},
};
static const OSSL_ALGORITHM decoders[] = {
    {RSA_NAMES, DEC_PROPS, klp_rsa_decoder_functions, NULL},
    {EC_NAMES, DEC_PROPS, klp_ec_decoder_functions, NULL},
    {ED25519_NAMES, DEC_PROPS, klp_ed25519_decoder_functions, NULL},
    {"DER", PEM_PROPS, klp_pem_decoder_functions, NULL},
    {NULL, NULL, NULL, NULL},
};
static const OSSL_ALGORITHM signatures[] = {
    {RSA_NAMES, PROPS, klp_rsa_signature_functions, NULL},
    {"ECDSA", PROPS, klp_ecdsa_signature_functions, NULL},
    {ED25519_NAMES, PROPS, klp_ed25519_signature_functions, NULL},
    {NULL, NULL, NULL, NULL},
};
static const OSSL_ALGORITHM ciphers[] = {
    {RSA_NAMES, PROPS, klp_rsa_cipher_functions, NULL},
    {NULL, NULL, NULL, NULL},
};

static const OSSL_ALGORITHM *prov_query(void *provctx, int op, int *no_cache)
{
    *no_cache = 0;
    switch (op) {
    case OSSL_OP_KEYMGMT: return keymgmts;
    case OSSL_OP_DECODER: return decoders;
    case OSSL_OP_SIGNATURE: return signatures;
    case OSSL_OP_ASYM_CIPHER: return ciphers;
    default: return NULL;
    }
}

static const OSSL_ITEM reasons[] = {
    {KLP_R_UNREACHABLE, "no key server answered"},
    {KLP_R_SERVER_ERROR, "key server error"},
    {KLP_R_BAD_REFERENCE, "bad keyless key reference"},
    {KLP_R_UNSUPPORTED, "not supported by keyless keys"},
    {KLP_R_BAD_INPUT, "bad input"},
    {KLP_R_INTERNAL, "internal error"},
    {0, NULL},
};

static const OSSL_ITEM *prov_reasons(void *provctx)
{
    return reasons;
}

static const OSSL_PARAM *prov_gettable(void *provctx)
{
    static const OSSL_PARAM t[] = {
        OSSL_PARAM_utf8_ptr(OSSL_PROV_PARAM_NAME, NULL, 0),
        OSSL_PARAM_utf8_ptr(OSSL_PROV_PARAM_VERSION, NULL, 0),
        OSSL_PARAM_int(OSSL_PROV_PARAM_STATUS, NULL),
        OSSL_PARAM_END,
    };
    return t;
}

static int prov_get_params(void *provctx, OSSL_PARAM params[])
{
    OSSL_PARAM *p;
    if ((p = OSSL_PARAM_locate(params, OSSL_PROV_PARAM_NAME)) &&
        !OSSL_PARAM_set_utf8_ptr(p, "keylessd keyless provider"))
        return 0;
    if ((p = OSSL_PARAM_locate(params, OSSL_PROV_PARAM_VERSION)) &&
        !OSSL_PARAM_set_utf8_ptr(p, "0.1.0"))
        return 0;
    if ((p = OSSL_PARAM_locate(params, OSSL_PROV_PARAM_STATUS)) &&
        !OSSL_PARAM_set_int(p, 1))
        return 0;
    return 1;
}

static void prov_teardown(void *provctx)
{
    klp_ctx *p = provctx;
    if (!p)
        return;
    for (klp_tgt *e = p->targets, *n; e; e = n) {
        n = e->next;
        klp_io_free(e->io); /* the thread stops before its target goes */
        kl_target_free(e->target);
        free(e->conf);
        free(e);
    }
    OSSL_LIB_CTX_free(p->libctx);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

static const OSSL_DISPATCH prov_functions[] = {
    {OSSL_FUNC_PROVIDER_TEARDOWN, (void (*)(void))prov_teardown},
    {OSSL_FUNC_PROVIDER_QUERY_OPERATION, (void (*)(void))prov_query},
    {OSSL_FUNC_PROVIDER_GETTABLE_PARAMS, (void (*)(void))prov_gettable},
    {OSSL_FUNC_PROVIDER_GET_PARAMS, (void (*)(void))prov_get_params},
    {OSSL_FUNC_PROVIDER_GET_REASON_STRINGS, (void (*)(void))prov_reasons},
    {0, NULL},
};

/* `timeout_ms = N` in the provider's openssl.cnf section. */
static void read_config(klp_ctx *p, OSSL_FUNC_core_get_params_fn *get)
{
    const char *tmo = NULL;
    OSSL_PARAM q[] = {
        OSSL_PARAM_utf8_ptr("timeout_ms", (char **)&tmo, 0),
        OSSL_PARAM_END,
    };
    p->timeout_ms = KLP_DEFAULT_TIMEOUT_MS;
    if (!get || !get(p->handle, q) || !tmo)
        return;
    char *end;
    long v = strtol(tmo, &end, 10);
    if (*end == '\0' && v > 0 && v <= 600000)
        p->timeout_ms = (int)v;
    else
        klp_log("timeout_ms = %s in openssl.cnf is not 1..600000; using %d",
                tmo, p->timeout_ms);
}

int OSSL_provider_init(const OSSL_CORE_HANDLE *handle, const OSSL_DISPATCH *in,
                       const OSSL_DISPATCH **out, void **provctx)
{
    OSSL_FUNC_core_get_params_fn *get_params = NULL;
    klp_ctx *p = calloc(1, sizeof(*p));
    if (!p)
        return 0;
    p->handle = handle;
    for (const OSSL_DISPATCH *d = in; d->function_id != 0; d++) {
        switch (d->function_id) {
        case OSSL_FUNC_CORE_GET_PARAMS:
            get_params = OSSL_FUNC_core_get_params(d);
            break;
        case OSSL_FUNC_CORE_NEW_ERROR:
            p->new_error = OSSL_FUNC_core_new_error(d);
            break;
        case OSSL_FUNC_CORE_SET_ERROR_DEBUG:
            p->set_error_debug = OSSL_FUNC_core_set_error_debug(d);
            break;
        case OSSL_FUNC_CORE_VSET_ERROR:
            p->vset_error = OSSL_FUNC_core_vset_error(d);
            break;
        default: break;
        }
    }
    pthread_mutex_init(&p->lock, NULL);
    read_config(p, get_params);
    /* A child library context: our own fetches (digests, public halves)
     * see the application's providers, and BIO_new_from_core_bio works. */
    p->libctx = OSSL_LIB_CTX_new_child(handle, in);
    if (!p->libctx) {
        pthread_mutex_destroy(&p->lock);
        free(p);
        return 0;
    }
    *provctx = p;
    *out = prov_functions;
    return 1;
}
