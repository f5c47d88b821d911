/* SPDX-License-Identifier: Apache-2.0 */
/* Operation names for command lines: see opnames.h. */
#include "client/opnames.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "keyless/protocol.h"

typedef struct op_name {
    const char *name;
    uint8_t op;
} op_name;

static const op_name names[] = {
    {"rsa-decrypt", KL_OP_RSA_DECRYPT},
    {"rsa-md5sha1", KL_OP_RSA_SIGN_MD5SHA1},
    {"rsa-sha1", KL_OP_RSA_SIGN_SHA1},
    {"rsa-sha224", KL_OP_RSA_SIGN_SHA224},
    {"rsa-sha256", KL_OP_RSA_SIGN_SHA256},
    {"rsa-sha384", KL_OP_RSA_SIGN_SHA384},
    {"rsa-sha512", KL_OP_RSA_SIGN_SHA512},
    {"rsa-pss-sha256", KL_OP_RSA_PSS_SIGN_SHA256},
    {"rsa-pss-sha384", KL_OP_RSA_PSS_SIGN_SHA384},
    {"rsa-pss-sha512", KL_OP_RSA_PSS_SIGN_SHA512},
    {"ecdsa-md5sha1", KL_OP_ECDSA_SIGN_MD5SHA1},
    {"ecdsa-sha1", KL_OP_ECDSA_SIGN_SHA1},
    {"ecdsa-sha224", KL_OP_ECDSA_SIGN_SHA224},
    {"ecdsa-sha256", KL_OP_ECDSA_SIGN_SHA256},
    {"ecdsa-sha384", KL_OP_ECDSA_SIGN_SHA384},
    {"ecdsa-sha512", KL_OP_ECDSA_SIGN_SHA512},
    {"ed25519", KL_OP_ED25519_SIGN},
    {"ping", KL_OP_PING},
};
#define NNAMES (sizeof names / sizeof names[0])

/* Lower case without '-' and '_', then without a leading "op" and the
 * word "sign": the form names are compared in. */
static void normalize(const char *s, char *out, size_t cap)
{
    size_t n = 0;
    for (; *s && n + 1 < cap; s++)
        if (*s != '-' && *s != '_')
            out[n++] = (char)tolower((unsigned char)*s);
    out[n] = 0;
    if (!strncmp(out, "op", 2) && strcmp(out, "op") != 0)
        memmove(out, out + 2, strlen(out + 2) + 1);
    char *sign = strstr(out, "sign");
    if (sign)
        memmove(sign, sign + 4, strlen(sign + 4) + 1);
}

bool kl_op_parse(const char *s, uint8_t *op)
{
    char want[64], have[64];
    if (!s || !*s || strlen(s) >= sizeof want)
        return false;
    normalize(s, want, sizeof want);
    for (size_t i = 0; i < NNAMES; i++) {
        normalize(names[i].name, have, sizeof have);
        if (!strcmp(want, have)) {
            *op = names[i].op;
            return true;
        }
        /* the protocol's own name, e.g. OpRSAPSSSignSHA256 */
        normalize(kl_op_name(names[i].op), have, sizeof have);
        if (!strcmp(want, have)) {
            *op = names[i].op;
            return true;
        }
    }
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 0);
    if (errno || *end || end == s || v > 0xFF || *s == '-')
        return false;
    *op = (uint8_t)v;
    return true;
}

const char *kl_op_short(uint8_t op)
{
    for (size_t i = 0; i < NNAMES; i++)
        if (names[i].op == op)
            return names[i].name;
    return NULL;
}

const char *kl_op_short_list(void)
{
    return "rsa-decrypt, rsa-md5sha1, rsa-sha1, rsa-sha224, rsa-sha256, "
           "rsa-sha384, rsa-sha512, rsa-pss-sha256, rsa-pss-sha384, "
           "rsa-pss-sha512, ecdsa-md5sha1, ecdsa-sha1, ecdsa-sha224, "
           "ecdsa-sha256, ecdsa-sha384, ecdsa-sha512, ed25519, ping";
}

uint8_t kl_op_default_for_key(const EVP_PKEY *pk)
{
    if (EVP_PKEY_is_a(pk, "RSA"))
        return KL_OP_RSA_SIGN_SHA256;
    if (EVP_PKEY_is_a(pk, "EC"))
        return KL_OP_ECDSA_SIGN_SHA256;
    return KL_OP_ED25519_SIGN;
}
