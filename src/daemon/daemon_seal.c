/* SPDX-License-Identifier: Apache-2.0 */
/* sealing_key and sealing_attributes for the key store (daemon_seal.h).
 * The sealing key is read like a key file (refused when group or others
 * can read it, unless allow_group_readable_keys) and must be a key HPKE
 * can use: X25519 or P-256; or it is a `pkcs11:` URI of a P-256 key on a
 * token, which does the DH step there (keys/p11_seal.c). */
#include "daemon/daemon_seal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/err.h>
#include <openssl/pem.h>

#include "core/log.h"
#include "seal/hpke.h"

/* A `pkcs11:` URI: the P-256 key on a token, its DH done there
 * (keys/p11_seal.c; docs/OPERATIONS.md "Sealing key on a token"). */
static bool token_key(const kl_config *cfg, kl_daemon_seal *s)
{
    char why[512];
    kl_status st =
        kl_keys_sealing_key_p11(cfg->sealing_key, &s->key, why, sizeof why);
    if (st == KL_OK)
        return true;
    char *red = kl_config_redact_uri(cfg->sealing_key);
    kl_error("sealing_key %s: %s; %s", red ? red : "(a PKCS#11 URI)", why,
             st == KL_E_CONFIG
                 ? "check module-path=, the token (token=, serial= or "
                   "slot-id=) and the PIN (pin-value= or pin-source=)"
                 : "name an EC P-256 key with derive usage on the token "
                   "with object= and/or id= (docs/OPERATIONS.md \"Sealing "
                   "key on a token\"), or unset sealing_key");
    free(red);
    return false;
}

/* Whether v is a URI of a scheme other than file: ("handle:0x81000001"),
 * not a path (a file of that name is a path). */
static bool store_uri(const char *v)
{
    size_t n = strspn(v, "abcdefghijklmnopqrstuvwxyz0123456789+.-");
    struct stat st;
    return n > 1 && v[n] == ':' && strncmp(v, "file:", 5) != 0 &&
           stat(v, &st) != 0;
}

/* Another scheme: an OSSL_STORE URI of a key an OpenSSL provider holds
 * (docs/OPERATIONS.md "Accelerators and provider keys"), which derives
 * there. */
static bool store_key(const kl_config *cfg, kl_daemon_seal *s)
{
    char why[512];
    kl_status st = kl_keys_sealing_key_store(
        cfg->sealing_key, cfg->key_propquery, &s->key, why, sizeof why);
    if (st == KL_OK)
        return true;
    kl_error("sealing_key %s: %s; %s", cfg->sealing_key, why,
             st == KL_E_CONFIG
                 ? "load the provider that holds it in openssl.cnf, or give "
                   "a file or a pkcs11: URI"
                 : "name an X25519 or P-256 key the provider can derive "
                   "with, or unset sealing_key");
    return false;
}

static bool read_key(const kl_config *cfg, kl_daemon_seal *s)
{
    const char *path = cfg->sealing_key;
    if (strncmp(path, "pkcs11:", 7) == 0)
        return token_key(cfg, s);
    if (store_uri(path))
        return store_key(cfg, s);
    struct stat st;
    if (stat(path, &st) != 0) {
        kl_error("sealing_key %s: %s; set it to the file keyless-seal "
                 "keygen wrote",
                 path, strerror(errno));
        return false;
    }
    if ((st.st_mode & (S_IRGRP | S_IROTH)) && !cfg->allow_group_readable_keys) {
        kl_error("sealing_key %s is readable by %s (mode %03o): run chmod "
                 "600 on it",
                 path, (st.st_mode & S_IROTH) ? "others" : "its group",
                 (unsigned)(st.st_mode & 0777));
        return false;
    }
    FILE *f = fopen(path, "r");
    if (f) {
        s->key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
        fclose(f);
    }
    uint8_t pk[KL_HPKE_MAX_ENC];
    size_t n = 0;
    bool ok =
        s->key &&
        (kl_hpke_public(KL_HPKE_KEM_X25519, s->key, pk, sizeof pk, &n) ==
             KL_OK ||
         kl_hpke_public(KL_HPKE_KEM_P256, s->key, pk, sizeof pk, &n) == KL_OK);
    ERR_clear_error();
    if (!ok) {
        kl_error("sealing_key %s: not a PEM X25519 or P-256 private key "
                 "(write one with keyless-seal keygen)",
                 path);
        EVP_PKEY_free(s->key);
        s->key = NULL;
    }
    return ok;
}

/* "region=eu-west, country=ie" into pairs, each checked by the policy
 * grammar's rules (a value no policy could name is a mistake). */
static bool read_attrs(const kl_config *cfg, kl_daemon_seal *s)
{
    if (!(s->text = strdup(cfg->sealing_attributes)))
        return false;
    char *save = NULL;
    for (char *p = strtok_r(s->text, ",", &save); p;
         p = strtok_r(NULL, ",", &save)) {
        p += strspn(p, " \t");
        char *end = p + strlen(p);
        while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
            *--end = 0;
        char *eq = strchr(p, '=');
        if (eq)
            *eq = 0;
        if (!eq || !kl_policy_name_ok(p, strlen(p)) ||
            !kl_policy_value_ok(eq + 1, strlen(eq + 1)) ||
            s->n_attrs == KL_SEAL_MAX_ATTRS) {
            kl_error("sealing_attributes: '%s%s%s' is not name=value in "
                     "lower case (at most %d pairs), as in "
                     "region=eu-west,country=ie",
                     p, eq ? "=" : "", eq ? eq + 1 : "", KL_SEAL_MAX_ATTRS);
            return false;
        }
        s->attrs[s->n_attrs++] = (kl_policy_attr){p, eq + 1};
    }
    return true;
}

bool kl_daemon_seal_prepare(const kl_config *cfg, kl_daemon_seal *s,
                            kl_keystore_opts *ko)
{
    memset(s, 0, sizeof *s);
    bool ok = true;
    if (cfg->sealing_key && *cfg->sealing_key)
        ok = read_key(cfg, s);
    if (ok && cfg->sealing_attributes && *cfg->sealing_attributes)
        ok = read_attrs(cfg, s);
    if (!ok) {
        kl_daemon_seal_release(s);
        return false;
    }
    ko->sealing_key = s->key;
    ko->sealing_attrs = s->attrs;
    ko->n_sealing_attrs = s->n_attrs;
    return true;
}

void kl_daemon_seal_release(kl_daemon_seal *s)
{
    EVP_PKEY_free(s->key);
    free(s->text);
    memset(s, 0, sizeof *s);
}

/* ---- the router's view of sealing policies ------------------------------ */

static void *policy_parse(const char *text, size_t len)
{
    kl_policy *p = NULL;
    char err[160];
    if (kl_policy_parse(text, len, &p, NULL, err, sizeof err) != KL_OK)
        return NULL; /* the key store's text parsed once already */
    return p;
}

static bool policy_eval(const void *policy, const kl_rt_attr *attrs, size_t n)
{
    kl_policy_attr pa[KL_SEAL_MAX_ATTRS + 1]; /* a table's 64 + region */
    size_t m = n < KL_SEAL_MAX_ATTRS + 1 ? n : KL_SEAL_MAX_ATTRS + 1;
    for (size_t i = 0; i < m; i++)
        pa[i] = (kl_policy_attr){attrs[i].name, attrs[i].value};
    return kl_policy_eval(policy, pa, m);
}

static void policy_free(void *policy)
{
    kl_policy_free(policy);
}

const kl_rt_policy_ops kl_daemon_policy_ops = {
    .parse = policy_parse,
    .eval = policy_eval,
    .free = policy_free,
};
