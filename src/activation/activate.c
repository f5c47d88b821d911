/* SPDX-License-Identifier: Apache-2.0 */
/* When keylessd enrols, renews or refuses (activate.h). The reference
 * server enrols whenever its certificate cannot be loaded or is outside
 * its validity, and then overwrites the key without a trace. keylessd
 * enrols on its own only when there is nothing to lose (no auth_cert and
 * no auth_key, or a key without a certificate, which it keeps); replacing
 * an existing identity needs --renew or auto_renew: true, and the old
 * files are kept as *.bak. Nothing is written until the API has returned
 * a certificate for the new key. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "core/log.h"
#include "core/time.h"
#include "keys/enrol.h"
#include "activation/activate.h"
#include "tls/certcheck.h"

#define DAY 86400LL
#define WARN_DAYS 30

typedef enum ident_kind {
    IDENT_OK,       /* usable, more than WARN_DAYS left */
    IDENT_EXPIRING, /* usable, expires within WARN_DAYS */
    IDENT_MISSING,  /* neither auth_cert nor auth_key exists */
    IDENT_KEY_ONLY, /* auth_key exists, auth_cert does not */
    IDENT_UNUSABLE, /* expired, not yet valid, mismatched, unreadable */
} ident_kind;

typedef struct ident {
    ident_kind kind;
    char why[512]; /* IDENT_UNUSABLE, IDENT_EXPIRING: in words */
} ident;

static long long now_of(const kl_config *cfg)
{
    return cfg->has_current_time ? (long long)cfg->current_time_unix
                                 : (long long)time(NULL);
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 || errno != ENOENT;
}

static bool has_credentials(const kl_config *cfg)
{
    return cfg->hostname && *cfg->hostname && cfg->origin_ca_api_key &&
           *cfg->origin_ca_api_key;
}

/* ASN1_TIME as seconds since 1970 and as text. */
static bool when(const ASN1_TIME *t, long long *secs, char *text, size_t cap)
{
    struct tm tm;
    if (!t || !ASN1_TIME_to_tm(t, &tm))
        return false;
    *secs = (long long)timegm(&tm);
    strftime(text, cap, "%Y-%m-%d %H:%M:%S UTC", &tm);
    return true;
}

static X509 *read_cert(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    ERR_clear_error();
    return x;
}

/* What the identity on disk is, as activation sees it. certcheck.c
 * explains the same files in more detail once activation is done. */
static void inspect(const kl_config *cfg, ident *id)
{
    id->why[0] = '\0';
    bool cert = exists(cfg->auth_cert), key = exists(cfg->auth_key);
    if (!cert) {
        id->kind = key ? IDENT_KEY_ONLY : IDENT_MISSING;
        return;
    }
    id->kind = IDENT_UNUSABLE;
    if (!key) {
        snprintf(id->why, sizeof id->why, "its key auth_key %s does not exist",
                 cfg->auth_key);
        return;
    }
    X509 *x = read_cert(cfg->auth_cert);
    if (!x) {
        snprintf(id->why, sizeof id->why,
                 "it cannot be read as a PEM certificate");
        return;
    }
    char kerr[256];
    EVP_PKEY *pk = kl_enrol_load_key(cfg->auth_key, kerr, sizeof kerr);
    long long nb = 0, na = 0, now = now_of(cfg);
    char nbt[64] = "?", nat[64] = "?";
    bool tb = when(X509_get0_notBefore(x), &nb, nbt, sizeof nbt);
    bool ta = when(X509_get0_notAfter(x), &na, nat, sizeof nat);
    if (!pk) {
        snprintf(id->why, sizeof id->why, "its key auth_key %s: %s",
                 cfg->auth_key, kerr);
    } else if (EVP_PKEY_eq(X509_get0_pubkey(x), pk) != 1) {
        snprintf(id->why, sizeof id->why,
                 "it was not issued for the key in auth_key %s", cfg->auth_key);
    } else if (!tb || !ta) {
        snprintf(id->why, sizeof id->why, "its validity cannot be read");
    } else if (now < nb) {
        snprintf(id->why, sizeof id->why, "it is not valid before %s", nbt);
    } else if (now > na) {
        snprintf(id->why, sizeof id->why, "it expired on %s", nat);
    } else if (now + WARN_DAYS * DAY > na) {
        id->kind = IDENT_EXPIRING;
        snprintf(id->why, sizeof id->why, "it expires on %s, in %lld day(s)",
                 nat, (na - now + DAY - 1) / DAY);
    } else {
        id->kind = IDENT_OK;
    }
    ERR_clear_error();
    EVP_PKEY_free(pk);
    X509_free(x);
}

/* ---- enrolment ---- */

typedef enum enrol_mode {
    ENROL_NEW,      /* nothing on disk: new key, nothing replaced */
    ENROL_WITH_KEY, /* keep the existing auth_key */
    ENROL_RENEW,    /* new key; old key and certificate kept as *.bak */
} enrol_mode;

static kl_status write_public(const char *path, const char *text,
                              unsigned flags)
{
    char err[512];
    kl_status s = kl_enrol_write_file(path, text, strlen(text), 0644, flags,
                                      err, sizeof err);
    if (s != KL_OK)
        kl_error("activation: %s", err);
    return s;
}

/* Writes the key (unless kept), the certificate and the CSR, in that
 * order; a renewal first keeps the old key and certificate. */
static int store(const kl_config *cfg, enrol_mode mode, EVP_PKEY *key,
                 const char *csr, const char *cert)
{
    char err[512];
    if (mode == ENROL_RENEW) {
        const char *files[2] = {cfg->auth_key, cfg->auth_cert};
        for (int i = 0; i < 2; i++) {
            char *bak = NULL;
            if (kl_enrol_backup(files[i], now_of(cfg), &bak, err, sizeof err) !=
                KL_OK) {
                kl_error("activation: %s; nothing was replaced", err);
                return 1;
            }
            if (bak)
                kl_info("activation: kept the previous %s as %s",
                        i ? "auth_cert" : "auth_key", bak);
            free(bak);
        }
    }
    unsigned flags = mode == ENROL_RENEW ? 0 : KL_ENROL_NO_REPLACE;
    if (mode != ENROL_WITH_KEY) {
        char *pem;
        size_t len;
        if (kl_enrol_key_pem(key, &pem, &len) != KL_OK) {
            kl_error("activation: cannot encode the new key");
            return 1;
        }
        kl_status s = kl_enrol_write_file(cfg->auth_key, pem, len, 0600, flags,
                                          err, sizeof err);
        kl_enrol_free_secret(pem, len);
        if (s != KL_OK) {
            kl_error("activation: auth_key %s; auth_cert was not written "
                     "either",
                     err);
            return 1;
        }
    }
    if (write_public(cfg->auth_cert, cert, flags) != KL_OK) {
        if (mode == ENROL_RENEW)
            kl_error("activation: auth_key %s was replaced but auth_cert %s "
                     "was not: restore both from the *.bak copies, or fix "
                     "the cause and start with --renew again",
                     cfg->auth_key, cfg->auth_cert);
        else
            kl_error("activation: auth_key %s is in place but auth_cert %s "
                     "is not; the next start enrols again with this key",
                     cfg->auth_key, cfg->auth_cert);
        return 1;
    }
    /* the CSR is a public record of the request, replaced freely; the
     * server does not need it */
    if (write_public(cfg->auth_csr, csr, 0) != KL_OK)
        kl_warn("activation: auth_csr %s was not written (see above); "
                "auth_key and auth_cert are in place",
                cfg->auth_csr);
    return 0;
}

static const char *mode_text(enrol_mode m)
{
    switch (m) {
    case ENROL_WITH_KEY: return "with the existing auth_key";
    case ENROL_RENEW: return "to renew auth_cert, with a new key";
    default: return "with a new key";
    }
}

static int enrol(const kl_config *cfg, enrol_mode mode)
{
    char err[2048];
    bool plain;
    if (kl_activate_check_endpoint(cfg->init_endpoint, &plain, err,
                                   sizeof err) != KL_OK) {
        kl_error("activation: %s", err);
        return 1;
    }
    if (plain)
        kl_warn("activation: init_endpoint %s is plain http (accepted for a "
                "loopback address only): the Origin CA key is sent "
                "unencrypted",
                cfg->init_endpoint);
    EVP_PKEY *key = NULL;
    if (mode == ENROL_WITH_KEY) {
        key = kl_enrol_load_key(cfg->auth_key, err, sizeof err);
        if (!key) {
            kl_error("activation: auth_key %s: %s; keylessd does not replace "
                     "it: move it away to enrol with a new key",
                     cfg->auth_key, err);
            return 1;
        }
    } else if (!(key = kl_enrol_new_key())) {
        kl_error("activation: cannot generate an ECDSA P-384 key");
        return 1;
    }
    int rc = 1;
    char *csr = NULL, *body = NULL, *cert = NULL;
    kl_status s = kl_enrol_make_csr(key, cfg->hostname, &csr);
    if (s != KL_OK) {
        if (s == KL_E_BAD_VALUE)
            kl_error("activation: hostname \"%s\" is not a DNS name of at "
                     "most 64 characters (letters, digits, '-', '.'); set "
                     "hostname to the key server's name",
                     cfg->hostname);
        else
            kl_error("activation: cannot make the CSR: %s", kl_status_str(s));
        goto out;
    }
    body = kl_activate_body(cfg->hostname, cfg->zone_id, csr,
                            KL_ACTIVATE_VALIDITY_DAYS);
    if (!body)
        goto out;
    kl_info("activation: asking %s for a certificate for %s %s",
            cfg->init_endpoint, cfg->hostname, mode_text(mode));
    kl_activate_call call = {
        .endpoint = cfg->init_endpoint,
        .api_key = cfg->origin_ca_api_key,
        .body = body,
        .timeout_ms = (long)(cfg->activation_timeout_ns / KL_NS_PER_MS),
    };
    if (kl_activate_post(&call, &cert, err, sizeof err) != KL_OK) {
        kl_error("activation failed: %s. Nothing was written: auth_key and "
                 "auth_cert are unchanged",
                 err);
        goto out;
    }
    if (kl_enrol_cert_matches(cert, strlen(cert), key, err, sizeof err) !=
        KL_OK) {
        kl_error("activation failed: the certificate the API returned is "
                 "unusable: %s. Nothing was written",
                 err);
        goto out;
    }
    rc = store(cfg, mode, key, csr, cert);
    if (rc == 0)
        kl_info("activation: wrote auth_cert %s (issued for %s)%s%s%s, and "
                "the CSR %s",
                cfg->auth_cert, cfg->hostname,
                mode == ENROL_WITH_KEY ? "" : ", auth_key ",
                mode == ENROL_WITH_KEY ? "" : cfg->auth_key,
                mode == ENROL_WITH_KEY ? "" : " (mode 0600)", cfg->auth_csr);
out:
    free(cert);
    free(body);
    free(csr);
    EVP_PKEY_free(key);
    return rc;
}

static void refuse(const kl_config *cfg, const ident *id)
{
    kl_error("auth_cert %s: %s. Origin CA credentials are configured, but "
             "keylessd does not replace an existing auth_cert and auth_key "
             "on its own (the reference server does, silently). Either start "
             "once with --renew, or set auto_renew: true, to enrol again "
             "(the old files are kept as *.bak); or put a valid certificate "
             "for auth_key %s in place",
             cfg->auth_cert, id->why, cfg->auth_key);
}

int kl_activate_startup(const kl_config *cfg)
{
    ident id;
    inspect(cfg, &id);
    bool creds = has_credentials(cfg), renew = cfg->renew || cfg->auto_renew;
    switch (id.kind) {
    case IDENT_OK:
        if (cfg->renew)
            kl_info("--renew: auth_cert %s is valid for more than %d days; "
                    "nothing to renew",
                    cfg->auth_cert, WARN_DAYS);
        return 0;
    case IDENT_EXPIRING:
        if (creds && renew)
            return enrol(cfg, ENROL_RENEW);
        if (creds)
            kl_info("auth_cert %s: %s; start with --renew (or set "
                    "auto_renew: true) to have keylessd renew it",
                    cfg->auth_cert, id.why);
        return 0;
    case IDENT_MISSING:
        if (creds)
            return enrol(cfg, ENROL_NEW);
        break;
    case IDENT_KEY_ONLY:
        if (creds)
            return enrol(cfg, ENROL_WITH_KEY);
        break;
    case IDENT_UNUSABLE:
        if (!creds)
            return 0; /* certcheck.c explains; nothing to enrol with */
        if (renew)
            return enrol(cfg, ENROL_RENEW);
        refuse(cfg, &id);
        return 1;
    }
    kl_info("auth_cert %s does not exist. To have keylessd obtain it from "
            "the Origin CA, set hostname and origin_ca_api_key; or run "
            "keylessd --manual-activation for a key and a CSR to have signed",
            cfg->auth_cert);
    return 0;
}

/* --check: only the CA file's findings count when the identity files are
 * the ones a start would create. */
static void ca_only(void *arg, int level, const char *msg)
{
    if (strncmp(msg, "cloudflare_ca_cert ", 19) != 0)
        return;
    kl_problems_count(arg, level);
    kl_log(level, "%s", msg);
}

bool kl_activate_check(const kl_config *cfg, kl_problems *p)
{
    ident id;
    inspect(cfg, &id);
    bool creds = has_credentials(cfg), renew = cfg->renew || cfg->auto_renew;
    const char *plan = NULL;
    if (creds && id.kind == IDENT_MISSING)
        plan = "enrol with a new key";
    else if (creds && id.kind == IDENT_KEY_ONLY)
        plan = "enrol with the existing auth_key";
    else if (creds && renew &&
             (id.kind == IDENT_UNUSABLE || id.kind == IDENT_EXPIRING))
        plan = "renew auth_cert with a new key (old files kept as *.bak)";
    if (!plan) {
        if (creds && id.kind == IDENT_UNUSABLE) {
            refuse(cfg, &id);
            p->errors++;
        }
        return false;
    }
    char err[512];
    bool plain;
    if (kl_activate_check_endpoint(cfg->init_endpoint, &plain, err,
                                   sizeof err) != KL_OK) {
        kl_error("activation: %s", err);
        p->errors++;
    }
    bool keeps_key = id.kind == IDENT_KEY_ONLY;
    kl_info("auth_cert %s%s%s: a start would %s from %s for %s, writing "
            "auth_cert %s, auth_csr %s and %s auth_key %s (--check changes "
            "nothing)",
            cfg->auth_cert, id.why[0] ? ": " : " does not exist", id.why, plan,
            cfg->init_endpoint, cfg->hostname, cfg->auth_cert, cfg->auth_csr,
            keeps_key ? "keeping" : "a new", cfg->auth_key);
    kl_certcheck cc = {
        .cert_file = cfg->auth_cert,
        .key_file = cfg->auth_key,
        .ca_file = cfg->cloudflare_ca_cert,
        .now = cfg->has_current_time ? cfg->current_time_unix : 0,
        .allow_group_readable = cfg->allow_group_readable_keys,
        .report = ca_only,
        .arg = p,
    };
    (void)kl_certcheck_identity(&cc);
    return true;
}

/* ---- --manual-activation ---- */

int kl_activate_manual(const kl_config *cfg)
{
    if (!cfg->hostname || !*cfg->hostname) {
        kl_error("--manual-activation needs hostname, the name clients use "
                 "for this key server: set hostname in the configuration or "
                 "give --hostname");
        return 1;
    }
    char err[512];
    bool kept = exists(cfg->auth_key);
    EVP_PKEY *key = kept ? kl_enrol_load_key(cfg->auth_key, err, sizeof err)
                         : kl_enrol_new_key();
    if (!key) {
        if (kept)
            kl_error("--manual-activation: auth_key %s exists but cannot be "
                     "used (%s); "
                     "keylessd does not overwrite it: move it away (or set "
                     "auth_key to another path) and run again",
                     cfg->auth_key, err);
        else
            kl_error("--manual-activation: cannot generate a key");
        return 1;
    }
    int rc = 1;
    char *csr = NULL;
    kl_status s = kl_enrol_make_csr(key, cfg->hostname, &csr);
    if (s == KL_E_BAD_VALUE) {
        kl_error("--manual-activation: hostname \"%s\" is not a DNS name of "
                 "at most 64 characters",
                 cfg->hostname);
        goto out;
    }
    if (s != KL_OK)
        goto out;
    if (!kept) {
        char *pem;
        size_t len;
        if (kl_enrol_key_pem(key, &pem, &len) != KL_OK)
            goto out;
        s = kl_enrol_write_file(cfg->auth_key, pem, len, 0600,
                                KL_ENROL_NO_REPLACE, err, sizeof err);
        kl_enrol_free_secret(pem, len);
        if (s != KL_OK) {
            kl_error("--manual-activation: %s", err);
            goto out;
        }
    }
    if (write_public(cfg->auth_csr, csr, 0) != KL_OK)
        goto out;
    kl_info("--manual-activation: %s auth_key %s (mode 0600) and wrote the "
            "CSR %s for %s",
            kept ? "kept the existing" : "generated a new ECDSA P-384",
            cfg->auth_key, cfg->auth_csr, cfg->hostname);
    kl_info("next: have the CSR signed as a Keyless SSL server certificate "
            "(Cloudflare's Origin CA: request_type keyless-certificate, or "
            "your Cloudflare contact), save the signed certificate (PEM) as "
            "auth_cert %s, then start keylessd. Keep auth_key %s where it "
            "is: the certificate is only valid with it",
            cfg->auth_cert, cfg->auth_key);
    rc = 0;
out:
    free(csr);
    EVP_PKEY_free(key);
    return rc;
}
