/* SPDX-License-Identifier: Apache-2.0 */
/* SoftHSM2 tokens for the PKCS#11 tests, created per test
 * program in a temporary directory: SOFTHSM2_CONF points at a config made
 * here, so no system token is touched. Header-only: each test_*.c is a
 * program. Needs softhsm2-util (scripts/install-deps.sh installs it). */
#ifndef KL_TEST_HSMTEST_H
#define KL_TEST_HSMTEST_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/pem.h>

#include "cryptotest.h"
#include "slowkey.h"

#define HT_PIN_A "1234"
#define HT_PIN_B "5678"

static char ht_dir[64];
static char ht_module[256];

static const char *ht_find_module(void)
{
    return tp_softhsm_module();
}

static void ht_run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void ht_run(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc != 0)
        fail_msg("command failed (%d): %s", rc, cmd);
}

/* Writes a vector key as PKCS#8 PEM (what softhsm2-util --import takes)
 * and imports it into token with label and id (hex). */
static void ht_import(const kl_keystore *files, const char *name,
                      const char *token, const char *pin, const char *label,
                      const char *id)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.p8", ht_dir, label);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(PEM_write_PrivateKey(f, kl_key_pkey(ct_key(files, name)), NULL,
                                     NULL, 0, NULL, NULL));
    fclose(f);
    ht_run("softhsm2-util --import %s --token %s --label %s --id %s --pin %s "
           ">/dev/null",
           path, token, label, id, pin);
    unlink(path);
}

/* Two tokens: kl-a holds rsa-2048 (id 01), ecdsa-p256 (02), ed25519 (03),
 * ecdsa-p384 (04); kl-b holds rsa-3072 (id 01). */
static void ht_setup(const kl_keystore *files)
{
    const char *m = ht_find_module();
    if (!m)
        fail_msg("SoftHSM2 is not installed (scripts/install-deps.sh)");
    snprintf(ht_module, sizeof ht_module, "%s", m);
    snprintf(ht_dir, sizeof ht_dir, "/tmp/kl-hsm-XXXXXX");
    assert_non_null(mkdtemp(ht_dir));
    char path[256];
    snprintf(path, sizeof path, "%s/tokens", ht_dir);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/softhsm2.conf", ht_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "directories.tokendir = %s/tokens\nobjectstore.backend = file\n"
            "log.level = ERROR\n",
            ht_dir);
    fclose(f);
    setenv("SOFTHSM2_CONF", path, 1);
    ht_run("softhsm2-util --init-token --free --label kl-a --so-pin 0000 "
           "--pin " HT_PIN_A " >/dev/null");
    ht_run("softhsm2-util --init-token --free --label kl-b --so-pin 0000 "
           "--pin " HT_PIN_B " >/dev/null");
    ht_import(files, "rsa-2048", "kl-a", HT_PIN_A, "rsa", "01");
    ht_import(files, "ecdsa-p256", "kl-a", HT_PIN_A, "ec", "02");
    ht_import(files, "ed25519", "kl-a", HT_PIN_A, "ed", "03");
    ht_import(files, "ecdsa-p384", "kl-a", HT_PIN_A, "ec384", "04");
    ht_import(files, "rsa-3072", "kl-b", HT_PIN_B, "rsa3072", "01");
}

static int ht_rm_one(const char *p, const struct stat *st, int flag,
                     struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

static void ht_teardown(void)
{
    if (ht_dir[0])
        nftw(ht_dir, ht_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* "pkcs11:token=kl-a;object=LABEL?module-path=...&pin-value=PIN" + extra */
static const char *ht_uri(const char *path_attrs, const char *query)
{
    static char buf[1024];
    snprintf(buf, sizeof buf, "pkcs11:%s?module-path=%s%s%s", path_attrs,
             ht_module, query && *query ? "&" : "", query ? query : "");
    return buf;
}

#endif
