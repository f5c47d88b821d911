/* SPDX-License-Identifier: Apache-2.0 */
/* What `keyless-seal inspect` prints (seal/sealed.h): everything in a
 * sealed file's header but the wrapped keys, which mean nothing to a
 * reader. Every string printed was checked by the parser (canonical
 * policy, names of A-Z a-z 0-9 . _ : -), so the JSON needs no escapes
 * beyond what the policy grammar allows - none. */
#include <stdio.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/x509.h>

#include "seal/sealed.h"

void kl_sealed_key_desc(const kl_sealed *s, char *buf, size_t len)
{
    const unsigned char *q = s->spki;
    EVP_PKEY *k = d2i_PUBKEY(NULL, &q, (long)s->spki_len);
    char group[64] = "";
    size_t gl = 0;
    if (!k)
        snprintf(buf, len, "unknown");
    else if (EVP_PKEY_is_a(k, "RSA"))
        snprintf(buf, len, "RSA-%d", EVP_PKEY_get_bits(k));
    else if (EVP_PKEY_is_a(k, "ED25519"))
        snprintf(buf, len, "Ed25519");
    else if (EVP_PKEY_is_a(k, "EC") &&
             EVP_PKEY_get_utf8_string_param(k, OSSL_PKEY_PARAM_GROUP_NAME,
                                            group, sizeof group, &gl) == 1)
        snprintf(buf, len, "ECDSA-%s",
                 !strcmp(group, "prime256v1")  ? "P-256"
                 : !strcmp(group, "secp384r1") ? "P-384"
                 : !strcmp(group, "secp521r1") ? "P-521"
                 : !strcmp(group, "secp224r1") ? "P-224"
                                               : group);
    else
        snprintf(buf, len, "%s", EVP_PKEY_get0_type_name(k));
    EVP_PKEY_free(k);
    ERR_clear_error();
}

static const char *kem_name(uint16_t kem)
{
    return kem == KL_HPKE_KEM_P256 ? "DHKEM(P-256)" : "DHKEM(X25519)";
}

static const char *kind_name(uint8_t kind)
{
    return kind == KL_SEALED_ESCROW ? "escrow" : "node";
}

void kl_sealed_print(const kl_sealed *s, bool json, FILE *out)
{
    char ski[2 * KL_SEALED_SKI_LEN + 1], desc[64], fp[KL_SEALED_FP_LEN];
    for (size_t i = 0; i < KL_SEALED_SKI_LEN; i++)
        snprintf(ski + 2 * i, 3, "%02x", s->ski[i]);
    kl_sealed_key_desc(s, desc, sizeof desc);
    size_t nodes = 0;
    for (size_t i = 0; i < s->n_rcpt; i++)
        nodes += s->rcpt[i].kind == KL_SEALED_NODE;
    if (json) {
        fprintf(out,
                "{\"version\":%d,\"policy\":\"%s\",\"ski\":\"%s\","
                "\"key\":\"%s\",\"recipients\":[",
                KL_SEALED_VERSION, s->policy_text, ski, desc);
        for (size_t i = 0; i < s->n_rcpt; i++) {
            const kl_sealed_recipient *r = &s->rcpt[i];
            kl_sealed_fingerprint(r->pk, r->pk_len, fp);
            fprintf(out,
                    "%s{\"kind\":\"%s\",\"name\":\"%s\",\"kem\":\"%s\","
                    "\"key\":\"%s\"}",
                    i ? "," : "", kind_name(r->kind), r->name, kem_name(r->kem),
                    fp);
        }
        fputs("]}\n", out);
        return;
    }
    fprintf(out, "version:    %d\n", KL_SEALED_VERSION);
    fprintf(out, "policy:     %s\n", s->policy_text);
    fprintf(out, "ski:        %s\n", ski);
    fprintf(out, "key:        %s\n", desc);
    fprintf(out, "recipients: %zu (%zu node(s), %zu escrow)\n", s->n_rcpt,
            nodes, s->n_rcpt - nodes);
    for (size_t i = 0; i < s->n_rcpt; i++) {
        const kl_sealed_recipient *r = &s->rcpt[i];
        kl_sealed_fingerprint(r->pk, r->pk_len, fp);
        fprintf(out, "  %-6s  %-24s  %-13s  %s\n", kind_name(r->kind), r->name,
                kem_name(r->kem), fp);
    }
}
