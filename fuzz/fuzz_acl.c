/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the access-list parser (src/engine/acl.c). Any
 * input must give a rule set or NULL with a "name:line: problem" message,
 * never a crash or a leak. An accepted set is then exercised: matched
 * against a client certificate made once at start (CN, DNS and IP SANs),
 * checked against a key, and swapped in as a reload would. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "keys/keystore.h"
#include "engine/acl.h"

static unsigned char *cert_der;
static size_t cert_len;
static kl_keystore *store;
static const kl_key *key;

static void add_ext(X509 *x, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
    X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (!e || !X509_add_ext(x, e, -1))
        abort();
    X509_EXTENSION_free(e);
}

static void first_key(void *arg, const kl_key *k)
{
    (void)arg;
    if (!key)
        key = k;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    EVP_PKEY *pk = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    X509 *x = X509_new();
    if (!pk || !x)
        abort();
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), 0);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, pk);
    X509_NAME *n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC,
                               (const unsigned char *)"fuzz", -1, -1, 0);
    X509_set_issuer_name(x, n);
    add_ext(x, NID_subject_alt_name,
            "DNS:fuzz.example,IP:127.0.0.1,email:a@fuzz.example");
    if (!X509_sign(x, pk, EVP_sha256()))
        abort();
    int len = i2d_X509(x, &cert_der);
    if (len <= 0)
        abort();
    cert_len = (size_t)len;
    store = kl_keystore_new(NULL);
    if (!store || kl_keystore_add_pkey(store, pk, "fuzz") != KL_OK)
        abort();
    kl_keystore_foreach(store, first_key, NULL);
    X509_free(x);
    EVP_PKEY_free(pk);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    err[0] = 0;
    kl_acl *a = kl_acl_parse("fuzz.yaml", data, size, err, sizeof err);
    if (!a) {
        if (strncmp(err, "fuzz.yaml", 9) != 0)
            __builtin_trap(); /* every error names the file (and line) */
        return 0;
    }
    size_t n = kl_acl_count(a);
    if (n > KL_ACL_MAX_RULES)
        __builtin_trap(); /* at most 64 rules ("[]": none, nobody gets a key) */
    uint64_t rules = kl_acl_match_cert(a, cert_der, cert_len);
    if (n < 64 && (rules >> n) != 0)
        __builtin_trap(); /* only bits of existing rules */
    kl_acl_match_cert(a, (const unsigned char *)data, size); /* not a cert */
    /* A grant taken without a TLS peer matches no rule; swapping the same
     * text in as a reload must keep every structure consistent. */
    kl_acl_grant g = {0};
    kl_acl *b = kl_acl_parse("fuzz.yaml", data, size, err, sizeof err);
    if (!b)
        __builtin_trap(); /* the same text parses the same way */
    kl_acl_replace(a, b);
    if (kl_acl_count(a) != n)
        __builtin_trap();
    (void)kl_acl_allows(a, &g, NULL, key);
    kl_acl_grant_release(&g);
    kl_acl_free(a);
    return 0;
}
