/* SPDX-License-Identifier: Apache-2.0 */
/* One key file's bytes -> a checked EVP_PKEY (see decode.h). */
#include <stdio.h>
#include <string.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/decoder.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/objects.h>

#include "keys/decode.h"

/* One decoder context per (structure, key type): a context bound to one
 * format skips the trial decoding of every other one. */
enum dec_fmt {
    FMT_P8_RSA,
    FMT_P8_EC,
    FMT_P8_ED25519,
    FMT_P8_ANY,
    FMT_SEC1_EC,
    FMT_PKCS1_RSA,
    FMT_DER_ANY,
    FMT_COUNT,
};

static const struct {
    const char *structure;
    const char *keytype;
    const char *what; /* for messages */
} fmt_spec[FMT_COUNT] = {
    [FMT_P8_RSA] = {"PrivateKeyInfo", "RSA", "PKCS#8 RSA"},
    [FMT_P8_EC] = {"PrivateKeyInfo", "EC", "PKCS#8 EC"},
    [FMT_P8_ED25519] = {"PrivateKeyInfo", "ED25519", "PKCS#8 Ed25519"},
    [FMT_P8_ANY] = {"PrivateKeyInfo", NULL, "PKCS#8"},
    [FMT_SEC1_EC] = {"type-specific", "EC", "SEC1 EC"},
    [FMT_PKCS1_RSA] = {"type-specific", "RSA", "PKCS#1 RSA"},
    [FMT_DER_ANY] = {NULL, NULL, "DER"},
};

struct kl_key_decoder {
    EVP_PKEY *result; /* where every context constructs its key */
    OSSL_DECODER_CTX *ctx[FMT_COUNT];
    kl_pair_cache pair;
};

kl_key_decoder *kl_key_decoder_new(void)
{
    return OPENSSL_zalloc(sizeof(kl_key_decoder));
}

void kl_key_decoder_free(kl_key_decoder *d)
{
    if (!d)
        return;
    for (int i = 0; i < FMT_COUNT; i++)
        OSSL_DECODER_CTX_free(d->ctx[i]);
    kl_pair_cache_free(&d->pair);
    EVP_PKEY_free(d->result);
    OPENSSL_free(d);
}

/* Key files are never encrypted here (see encrypted_msg); refusing the
 * passphrase keeps OpenSSL from ever prompting on a terminal. */
static int no_passphrase(char *pass, size_t size, size_t *len,
                         const OSSL_PARAM params[], void *arg)
{
    (void)pass, (void)size, (void)len, (void)params, (void)arg;
    return 0;
}

static OSSL_DECODER_CTX *get_ctx(kl_key_decoder *d, enum dec_fmt f)
{
    if (!d->ctx[f]) {
        OSSL_DECODER_CTX *c = OSSL_DECODER_CTX_new_for_pkey(
            &d->result, "DER", fmt_spec[f].structure, fmt_spec[f].keytype,
            OSSL_KEYMGMT_SELECT_KEYPAIR, NULL, NULL);
        if (c && !OSSL_DECODER_CTX_set_passphrase_cb(c, no_passphrase, NULL)) {
            OSSL_DECODER_CTX_free(c);
            c = NULL;
        }
        d->ctx[f] = c;
    }
    return d->ctx[f];
}

#define WHY(...) snprintf(why, whylen, __VA_ARGS__)

static const char encrypted_msg[] =
    "encrypted private keys are not supported; decrypt it first "
    "(openssl pkey -in <file> -out <new file>) and keep the result chmod 600";

/* ---- PKCS#8 algorithm OIDs (content bytes) ------------------------------ */

static const struct {
    uint8_t len;
    uint8_t oid[10];
    int fmt;          /* enum dec_fmt, or -1: refuse */
    const char *name; /* for refusals */
} p8_algs[] = {
    {9,
     {0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01},
     FMT_P8_RSA,
     "RSA"},
    {7, {0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01}, FMT_P8_EC, "EC"},
    {3, {0x2b, 0x65, 0x70}, FMT_P8_ED25519, "Ed25519"},
    {9,
     {0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a},
     -1,
     "RSA-PSS-restricted RSA"},
    {3, {0x2b, 0x65, 0x71}, -1, "Ed448"},
    {3, {0x2b, 0x65, 0x6e}, -1, "X25519"},
    {3, {0x2b, 0x65, 0x6f}, -1, "X448"},
    {7, {0x2a, 0x86, 0x48, 0xce, 0x38, 0x04, 0x01}, -1, "DSA"},
    {9, {0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x03, 0x01}, -1, "DH"},
    {7, {0x2a, 0x86, 0x48, 0xce, 0x3e, 0x02, 0x01}, -1, "X9.42 DH"},
};

static const char supported[] = "keylessd serves RSA, ECDSA (P-224, P-256, "
                                "P-384, P-521) and Ed25519 keys";

static kl_status pick_p8(const uint8_t *oid, size_t oid_len, enum dec_fmt *fmt,
                         char *why, size_t whylen)
{
    for (size_t i = 0; i < sizeof p8_algs / sizeof p8_algs[0]; i++) {
        if (p8_algs[i].len != oid_len ||
            memcmp(p8_algs[i].oid, oid, oid_len) != 0)
            continue;
        if (p8_algs[i].fmt < 0) {
            WHY("%s keys are not supported (%s)", p8_algs[i].name, supported);
            return KL_E_KEY;
        }
        *fmt = (enum dec_fmt)p8_algs[i].fmt;
        return KL_OK;
    }
    *fmt = FMT_P8_ANY; /* decoded, then refused by type below if need be */
    return KL_OK;
}

/* ---- the policy (protocol P4) ------------------------------------------- */

static int has_bn(EVP_PKEY *pkey, const char *name)
{
    BIGNUM *bn = NULL;
    int ok = EVP_PKEY_get_bn_param(pkey, name, &bn) && bn != NULL;
    BN_clear_free(bn);
    return ok;
}

static kl_status check_ec(EVP_PKEY *pkey, kl_key_info *info, bool need_priv,
                          char *why, size_t whylen)
{
    char name[64];
    if (!EVP_PKEY_get_utf8_string_param(pkey, OSSL_PKEY_PARAM_GROUP_NAME, name,
                                        sizeof name, NULL)) {
        WHY("EC keys with explicit curve parameters are not supported; "
            "use a named curve (P-224, P-256, P-384 or P-521)");
        return KL_E_KEY;
    }
    int nid = OBJ_sn2nid(name);
    if (nid == NID_undef)
        nid = EC_curve_nist2nid(name);
    if (nid != NID_secp224r1 && nid != NID_X9_62_prime256v1 &&
        nid != NID_secp384r1 && nid != NID_secp521r1) {
        WHY("EC curve %s is not supported (P-224, P-256, P-384, P-521 only)",
            name);
        return KL_E_KEY;
    }
    if (need_priv && !has_bn(pkey, OSSL_PKEY_PARAM_PRIV_KEY)) {
        WHY("EC key has no private part");
        return KL_E_KEY;
    }
    info->type = KL_KEY_EC;
    info->curve = nid;
    return KL_OK;
}

static kl_status check(EVP_PKEY *pkey, kl_key_info *info, bool need_priv,
                       char *why, size_t whylen)
{
    memset(info, 0, sizeof *info);
    info->bits = EVP_PKEY_get_bits(pkey);
    if (EVP_PKEY_is_a(pkey, "RSA-PSS")) {
        WHY("RSA-PSS-restricted RSA keys are not supported; use a plain "
            "rsaEncryption key");
        return KL_E_KEY;
    }
    if (EVP_PKEY_is_a(pkey, "RSA")) {
        if (info->bits < 1024 || info->bits > 8192) {
            WHY("RSA-%d keys are not supported (1024 to 8192 bits)",
                info->bits);
            return KL_E_KEY;
        }
        if (need_priv && !has_bn(pkey, OSSL_PKEY_PARAM_RSA_D)) {
            WHY("RSA key has no private part");
            return KL_E_KEY;
        }
        info->type = KL_KEY_RSA;
        return KL_OK;
    }
    if (EVP_PKEY_is_a(pkey, "EC"))
        return check_ec(pkey, info, need_priv, why, whylen);
    if (EVP_PKEY_is_a(pkey, "ED25519")) {
        size_t len = 0;
        if (need_priv &&
            (!EVP_PKEY_get_raw_private_key(pkey, NULL, &len) || len != 32)) {
            WHY("Ed25519 key has no private part");
            return KL_E_KEY;
        }
        info->type = KL_KEY_ED25519;
        return KL_OK;
    }
    const char *t = EVP_PKEY_get0_type_name(pkey);
    WHY("%s keys are not supported (%s)", t ? t : "this type of", supported);
    return KL_E_KEY;
}

kl_status kl_key_check_pkey(EVP_PKEY *pkey, kl_key_info *info, char *why,
                            size_t whylen)
{
    return check(pkey, info, true, why, whylen);
}

kl_status kl_key_check_public(EVP_PKEY *pkey, kl_key_info *info, char *why,
                              size_t whylen)
{
    return check(pkey, info, false, why, whylen);
}

/* ---- DER ---------------------------------------------------------------- */

/* Length of the DER object (tag, length, contents) at p, or 0. */
static size_t der_object_len(const uint8_t *p, size_t n)
{
    if (n < 2)
        return 0;
    size_t len = p[1], hdr = 2;
    if (p[1] & 0x80) {
        size_t nb = p[1] & 0x7f;
        if (nb == 0 || nb > 4 || n < 2 + nb)
            return 0;
        len = 0;
        for (size_t i = 0; i < nb; i++)
            len = len << 8 | p[2 + i];
        hdr += nb;
    }
    return len <= n - hdr ? hdr + len : 0;
}

static kl_status decode_der(kl_key_decoder *d, const uint8_t *der, size_t len,
                            EVP_PKEY **out, kl_key_info *info, char *why,
                            size_t whylen)
{
    const uint8_t *oid = NULL;
    size_t oid_len = 0;
    enum dec_fmt fmt;
    switch (kl_der_classify(der, len, &oid, &oid_len)) {
    case KL_DER_PKCS8:
        KL_GUARD(pick_p8(oid, oid_len, &fmt, why, whylen));
        break;
    case KL_DER_SEC1_PRIVATE: fmt = FMT_SEC1_EC; break;
    case KL_DER_PKCS1_PRIVATE: fmt = FMT_PKCS1_RSA; break;
    case KL_DER_PKCS8_ENCRYPTED: WHY("%s", encrypted_msg); return KL_E_KEY;
    case KL_DER_CERTIFICATE:
        WHY("file holds a certificate, not a private key");
        return KL_E_KEY;
    case KL_DER_SPKI:
    case KL_DER_PKCS1_PUBLIC:
        WHY("file holds a public key, not a private key");
        return KL_E_KEY;
    default: fmt = FMT_DER_ANY; break;
    }

    OSSL_DECODER_CTX *ctx = get_ctx(d, fmt);
    if (!ctx) {
        ERR_clear_error();
        WHY("cannot set up the OpenSSL decoder");
        return KL_E_NOMEM;
    }
    /* An Ed25519 PKCS#8 v2 file carries its public key too: OpenSSL 3.0
     * decodes only v1, and the public key is checked below. */
    uint8_t *v1 = NULL;
    size_t v1_len = 0, v2_pub_len = 0;
    const uint8_t *v2_pub = NULL;
    if (fmt == FMT_P8_ED25519) {
        if (!(v1 = OPENSSL_malloc(len))) {
            WHY("out of memory");
            return KL_E_NOMEM;
        }
        if (kl_der_p8_v2_split(der, len, v1, &v1_len, &v2_pub, &v2_pub_len) !=
            KL_OK) {
            OPENSSL_free(v1);
            v1 = NULL;
        }
    }
    const unsigned char *p = v1 ? v1 : der;
    size_t left = v1 ? v1_len : len;
    EVP_PKEY_free(d->result);
    d->result = NULL;
    int ok = OSSL_DECODER_from_data(ctx, &p, &left) && d->result != NULL;
    unsigned long e = ERR_peek_last_error();
    ERR_clear_error();
    if (v1)
        OPENSSL_clear_free(v1, len);
    if (!ok) {
        if (fmt == FMT_DER_ANY) {
            WHY("not a PEM or DER private key");
        } else {
            const char *r = e ? ERR_reason_error_string(e) : NULL;
            WHY("cannot decode the %s private key%s%s", fmt_spec[fmt].what,
                r ? ": " : "", r ? r : "");
        }
        return KL_E_KEY;
    }
    EVP_PKEY *pkey = d->result;
    d->result = NULL;
    /* DER keys concatenated: the decoder took the first; one key per file
     * (docs/OPERATIONS.md "Key files"), as for PEM. */
    size_t used = v1 ? der_object_len(der, len) : len - left, nkeys = 1;
    while (used > 0 && used < len) {
        const uint8_t *o = NULL;
        size_t olen = 0, one = der_object_len(der + used, len - used);
        kl_der_kind k = kl_der_classify(der + used, one, &o, &olen);
        if (one == 0 || (k != KL_DER_PKCS8 && k != KL_DER_PKCS8_ENCRYPTED &&
                         k != KL_DER_SEC1_PRIVATE && k != KL_DER_PKCS1_PRIVATE))
            break;
        nkeys++;
        used += one;
    }
    if (nkeys > 1) {
        EVP_PKEY_free(pkey);
        WHY("file holds %zu private keys; keylessd loads one key per file: "
            "split it into one file per key",
            nkeys);
        return KL_E_KEY;
    }
    kl_status s = kl_key_check_pkey(pkey, info, why, whylen);
    /* At every load, not only --check: a public part that is another key's
     * would file this key under that key's SKI (docs/OPERATIONS.md "Key
     * files"). */
    if (s == KL_OK)
        s = kl_key_check_pair(&d->pair, pkey, info, why, whylen);
    if (s == KL_OK && v2_pub) {
        uint8_t raw[32];
        size_t raw_len = sizeof raw;
        if (EVP_PKEY_get_raw_public_key(pkey, raw, &raw_len) != 1 ||
            raw_len != v2_pub_len || memcmp(raw, v2_pub, raw_len) != 0) {
            ERR_clear_error();
            WHY("the private and public parts of the key do not match (the "
                "public key in the file is not the one of its private key): "
                "the file is corrupt or was pieced together from two keys; "
                "export the key again from its source");
            s = KL_E_KEY;
        }
    }
    if (s != KL_OK) {
        EVP_PKEY_free(pkey);
        return s;
    }
    *out = pkey;
    return KL_OK;
}

/* ---- PEM ---------------------------------------------------------------- */

static int label_is(const kl_pem_block *b, const char *l)
{
    return strcmp(b->label, l) == 0;
}

static int is_private_label(const kl_pem_block *b)
{
    return label_is(b, "PRIVATE KEY") || label_is(b, "RSA PRIVATE KEY") ||
           label_is(b, "EC PRIVATE KEY");
}

/* No private-key block: name what the file holds instead. */
static kl_status explain_pem(const uint8_t *buf, size_t len, char *why,
                             size_t whylen)
{
    size_t pos = 0;
    kl_pem_block b;
    int cert = 0, pub = 0, enc = 0;
    char other[64] = "";
    kl_status s;
    while ((s = kl_pem_next(buf, len, &pos, &b)) != KL_E_NOT_FOUND) {
        if (s != KL_OK)
            continue; /* pos moved on */
        if (label_is(&b, "ENCRYPTED PRIVATE KEY"))
            enc = 1;
        else if (strstr(b.label, "CERTIFICATE"))
            cert = 1;
        else if (strstr(b.label, "PUBLIC KEY"))
            pub = 1;
        else if (!other[0])
            snprintf(other, sizeof other, "%s", b.label);
    }
    if (enc)
        WHY("%s", encrypted_msg);
    else if (pub)
        WHY("file holds a public key, not a private key");
    else if (cert)
        WHY("file holds a certificate, not a private key");
    else if (!strcmp(other, "OPENSSH PRIVATE KEY"))
        WHY("OpenSSH-format private keys are not supported; convert it to "
            "PKCS#8 PEM (ssh-keygen -p -m PKCS8 -f <file>)");
    else if (strstr(other, "PRIVATE KEY"))
        WHY("\"%s\" keys are not supported (%s)", other, supported);
    else if (other[0])
        WHY("no private key in the file (PEM block \"%s\")", other);
    else
        WHY("no complete PEM block in the file");
    return KL_E_KEY;
}

static int looks_like_pem(const uint8_t *buf, size_t len)
{
    return memmem(buf, len, "-----BEGIN ", 11) != NULL;
}

kl_status kl_key_decode_buffer(kl_key_decoder *d, const uint8_t *buf,
                               size_t len, EVP_PKEY **out, kl_key_info *info,
                               char *why, size_t whylen)
{
    *out = NULL;
    if (len == 0) {
        WHY("file is empty");
        return KL_E_KEY;
    }
    if (!looks_like_pem(buf, len))
        return decode_der(d, buf, len, out, info, why, whylen);

    size_t pos = 0;
    kl_pem_block b;
    kl_status s;
    while ((s = kl_pem_next(buf, len, &pos, &b)) != KL_E_NOT_FOUND) {
        if (s == KL_OK && is_private_label(&b))
            break;
    }
    if (s == KL_E_NOT_FOUND)
        return explain_pem(buf, len, why, whylen);
    /* One key per file (docs/OPERATIONS.md "Key files"): a second key
     * would otherwise be dropped without a word. */
    size_t more = 0, nkeys = 0;
    kl_pem_block other;
    kl_status t;
    while ((t = kl_pem_next(buf, len, &more, &other)) != KL_E_NOT_FOUND)
        if (t == KL_OK && (is_private_label(&other) ||
                           label_is(&other, "ENCRYPTED PRIVATE KEY")))
            nkeys++;
    if (nkeys > 1) {
        WHY("file holds %zu private keys; keylessd loads one key per file: "
            "split it into one file per key",
            nkeys);
        return KL_E_KEY;
    }
    if (b.encrypted_header) {
        WHY("%s", encrypted_msg);
        return KL_E_KEY;
    }
    uint8_t *der = NULL;
    size_t der_len = 0;
    s = kl_pem_decode_body(&b, &der, &der_len);
    if (s == KL_E_NOMEM) {
        WHY("out of memory");
        return s;
    }
    if (s != KL_OK) {
        WHY("the PEM block \"%s\" is not valid base64", b.label);
        return KL_E_KEY;
    }
    s = decode_der(d, der, der_len, out, info, why, whylen);
    OPENSSL_clear_free(der, der_len);
    return s;
}
