/* SPDX-License-Identifier: Apache-2.0 */
/* Key-reference decoders: a KEYLESS KEY REFERENCE PEM block
 * becomes a keyless key, in two steps that fit OpenSSL 3.0's decoder chains:
 *
 * 1. "DER" from PEM (pem_decode): reads one PEM block; our label gives its
 *    body as data of structure "keyless-reference"; any other block is left
 *    alone ("empty handed", not an error), so ordinary keys and the
 *    certificate of a bundle decode exactly as without the provider.
 *    Needed because the default provider's PEM-to-DER decoder drops labels
 *    it does not know. Being named "DER" puts it in both chains that load
 *    keys from PEM: PEM_read_bio_PrivateKey's and the file: OSSL_STORE's
 *    (openssl s_server -key), which hands the data back to the key decoders.
 * 2. RSA, EC and ED25519 from that structure (ref_decode): parse the body
 *    (keyref.h), build the key and pass it by reference to our keymgmt's
 *    load. Each produces only references of its own type. A malformed
 *    reference is an error that says what is wrong.
 *
 * The reference handed to load carries a magic prefix: a foreign keymgmt's
 * load (which takes a bare pointer) refuses it instead of misreading it. */
#include <string.h>

#include <openssl/bio.h>
#include <openssl/core_dispatch.h>
#include <openssl/core_names.h>
#include <openssl/core_object.h>
#include <openssl/err.h>
#include <openssl/params.h>
#include <openssl/pem.h>

#include "provider/decoder.h"
#include "provider/key.h"

typedef struct dec_ctx {
    klp_ctx *prov;
} dec_ctx;

static void *dec_new(void *provctx)
{
    dec_ctx *d = OPENSSL_zalloc(sizeof(*d));
    if (d)
        d->prov = provctx;
    return d;
}

static void dec_free(void *vctx)
{
    OPENSSL_free(vctx);
}

static int dec_does_selection(void *provctx, int selection)
{
    /* 0 means "anything"; otherwise we only ever make keys. */
    return selection == 0 || (selection & OSSL_KEYMGMT_SELECT_KEYPAIR) != 0;
}

static int pem_decode(void *vctx, OSSL_CORE_BIO *cin, int selection,
                      OSSL_CALLBACK *data_cb, void *data_cbarg,
                      OSSL_PASSPHRASE_CALLBACK *pw, void *pwarg)
{
    dec_ctx *d = vctx;
    char *name = NULL, *header = NULL;
    unsigned char *data = NULL;
    long len = 0;
    BIO *in = BIO_new_from_core_bio(klp_libctx(d->prov), cin);
    if (!in)
        return 0;
    /* PEM_read_bio reads line by line: the BIO stays just after the block,
     * where the next try (the next block of a bundle) starts. */
    ERR_set_mark();
    int got = PEM_read_bio(in, &name, &header, &data, &len) > 0;
    ERR_pop_to_mark();
    BIO_free(in);
    int ok = 1;
    if (got && strcmp(name, KL_KEYREF_PEM_LABEL) == 0) {
        int objtype = OSSL_OBJECT_PKEY;
        OSSL_PARAM params[4];
        params[0] = OSSL_PARAM_construct_int(OSSL_OBJECT_PARAM_TYPE, &objtype);
        params[1] = OSSL_PARAM_construct_octet_string(OSSL_OBJECT_PARAM_DATA,
                                                      data, (size_t)len);
        params[2] = OSSL_PARAM_construct_utf8_string(
            OSSL_OBJECT_PARAM_DATA_STRUCTURE, (char *)KLP_REF_STRUCTURE, 0);
        params[3] = OSSL_PARAM_construct_end();
        ok = data_cb(params, data_cbarg);
    }
    OPENSSL_free(name);
    OPENSSL_free(header);
    OPENSSL_free(data);
    return ok;
}

/* The body, read whole (bounded). 0 when it is too large. */
static size_t read_body(BIO *in, uint8_t *buf, size_t cap)
{
    size_t len = 0, n;
    while (len < cap && BIO_read_ex(in, buf + len, cap - len, &n) && n > 0)
        len += n;
    return len < cap ? len : 0;
}

static int ref_decode(klp_type want, void *vctx, OSSL_CORE_BIO *cin,
                      OSSL_CALLBACK *data_cb, void *data_cbarg)
{
    dec_ctx *d = vctx;
    kl_keyref ref;
    char err[256] = "";
    BIO *in = BIO_new_from_core_bio(klp_libctx(d->prov), cin);
    uint8_t *buf = OPENSSL_malloc(KL_KEYREF_MAX_BODY + 1);
    size_t len = in && buf ? read_body(in, buf, KL_KEYREF_MAX_BODY + 1) : 0;
    BIO_free(in);
    kl_status s = KL_E_NOT_FOUND;
    if (len >= 4 && memcmp(buf, KL_KEYREF_MAGIC, 4) == 0)
        s = kl_keyref_parse(buf, len, &ref, err, sizeof(err));
    OPENSSL_free(buf);
    if (s == KL_E_NOT_FOUND)
        return 1; /* not a reference: empty handed */
    klp_key *k =
        s == KL_OK ? klp_key_from_ref(d->prov, &ref, err, sizeof(err)) : NULL;
    if (!k) {
        KLP_RAISE(d->prov, KLP_R_BAD_REFERENCE, "keyless key reference: %s",
                  err);
        return 0;
    }
    if (klp_key_type(k) != want) {
        klp_key_free(k); /* the decoder for its type takes it */
        return 1;
    }
    klp_keyref_handle h;
    memcpy(h.magic, KLP_HANDLE_MAGIC, sizeof(h.magic));
    h.key = k;
    int objtype = OSSL_OBJECT_PKEY;
    OSSL_PARAM params[4];
    params[0] = OSSL_PARAM_construct_int(OSSL_OBJECT_PARAM_TYPE, &objtype);
    /* construct_utf8_string measures the string (the macro would not). */
    params[1] = OSSL_PARAM_construct_utf8_string(
        OSSL_OBJECT_PARAM_DATA_TYPE, (char *)klp_type_name(want), 0);
    params[2] = OSSL_PARAM_construct_octet_string(OSSL_OBJECT_PARAM_REFERENCE,
                                                  &h, sizeof(h));
    params[3] = OSSL_PARAM_construct_end();
    int ok = data_cb(params, data_cbarg);
    klp_key_free(h.key); /* NULL when our keymgmt's load took it */
    return ok;
}

#define DECODER(tag, TYPE)                                                     \
    static int tag##_decode(void *vctx, OSSL_CORE_BIO *cin, int selection,     \
                            OSSL_CALLBACK *cb, void *cbarg,                    \
                            OSSL_PASSPHRASE_CALLBACK *pw, void *pwarg)         \
    {                                                                          \
        return ref_decode(TYPE, vctx, cin, cb, cbarg);                         \
    }                                                                          \
    const OSSL_DISPATCH klp_##tag##_decoder_functions[] = {                    \
        {OSSL_FUNC_DECODER_NEWCTX, (void (*)(void))dec_new},                   \
        {OSSL_FUNC_DECODER_FREECTX, (void (*)(void))dec_free},                 \
        {OSSL_FUNC_DECODER_DOES_SELECTION,                                     \
         (void (*)(void))dec_does_selection},                                  \
        {OSSL_FUNC_DECODER_DECODE, (void (*)(void))tag##_decode},              \
        {0, NULL},                                                             \
    };

DECODER(rsa, KLP_RSA)
DECODER(ec, KLP_EC)
DECODER(ed25519, KLP_ED25519)

const OSSL_DISPATCH klp_pem_decoder_functions[] = {
    {OSSL_FUNC_DECODER_NEWCTX, (void (*)(void))dec_new},
    {OSSL_FUNC_DECODER_FREECTX, (void (*)(void))dec_free},
    {OSSL_FUNC_DECODER_DECODE, (void (*)(void))pem_decode},
    {0, NULL},
};
