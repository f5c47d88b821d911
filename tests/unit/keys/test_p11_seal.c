/* SPDX-License-Identifier: Apache-2.0 */
/* A sealing key on a SoftHSM2 token (keys/p11_seal.c,
 * kl_keys_sealing_key_p11): its public half is the token's, HPKE
 * messages sealed to it open through the token's ECDH (many, with no
 * object left behind), a sealed key file opens; and every key the token
 * cannot use so is refused at load with its status and reason - a bad
 * URI, a wrong PIN, no such token, no such key, a P-384 key, a key that
 * may not derive, a public object that belongs to another key. A token
 * that logged out between two opens (SoftHSM then hides the key) is
 * logged in again and the key found again. */
#include "testutil.h"

#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "core/time.h"
#include "keys/keystore.h"
#include "keys/p11.h"
#include "seal/hpke_int.h"
#include "seal/sealed.h"
#include "slowkey.h"

#define PIN "2468"

static char tdir[64], module[256];

static void run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void run(const char *fmt, ...)
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

static void tool(const char *args)
{
    run("pkcs11-tool --module %s --token-label seal --login --pin " PIN
        " %s >/dev/null 2>&1",
        module, args);
}

static const char *uri(const char *key_attrs, const char *pin)
{
    static char buf[2][1024];
    static int i;
    i ^= 1;
    snprintf(buf[i], sizeof buf[i],
             "pkcs11:token=seal;%s?module-path=%s&pin-value=%s", key_attrs,
             module, pin);
    return buf[i];
}

static int rm_one(const char *p, const struct stat *st, int flag,
                  struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

static int setup(void **state)
{
    (void)state;
    const char *m = tp_softhsm_module();
    if (!m)
        fail_msg("SoftHSM2 is not installed (scripts/install-deps.sh)");
    snprintf(module, sizeof module, "%s", m);
    snprintf(tdir, sizeof tdir, "/tmp/kl-p11seal-XXXXXX");
    assert_non_null(mkdtemp(tdir));
    char path[256];
    snprintf(path, sizeof path, "%s/tokens", tdir);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/softhsm2.conf", tdir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "directories.tokendir = %s/tokens\nobjectstore.backend = file\n"
            "log.level = ERROR\n",
            tdir);
    fclose(f);
    setenv("SOFTHSM2_CONF", path, 1);
    run("softhsm2-util --init-token --free --label seal --so-pin 0000 "
        "--pin " PIN " >/dev/null");
    tool("--keypairgen --key-type EC:prime256v1 --usage-derive --label node "
         "--id 01");
    tool("--keypairgen --key-type EC:secp384r1 --usage-derive --label p384 "
         "--id 02");
    tool("--keypairgen --key-type EC:prime256v1 --usage-sign --label signonly "
         "--id 03");
    /* id 05's private key with id 06's public key */
    tool("--keypairgen --key-type EC:prime256v1 --usage-derive --label mixa "
         "--id 05");
    tool("--keypairgen --key-type EC:prime256v1 --usage-derive --label mixb "
         "--id 06");
    tool("--delete-object --type pubkey --id 05");
    tool("--type pubkey --id 06 --set-id 05");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    nftw(tdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

static EVP_PKEY *load(const char *u)
{
    char why[512] = "";
    EVP_PKEY *k = NULL;
    kl_status s = kl_keys_sealing_key_p11(u, &k, why, sizeof why);
    if (s != KL_OK)
        fail_msg("%s: %s (%s)", u, kl_status_str(s), why);
    return k;
}

/* One HPKE message sealed to the token key's public half and opened by
 * the token. */
static void round_trip(EVP_PKEY *k, int i)
{
    uint8_t pk[KL_HPKE_MAX_ENC], enc[KL_HPKE_MAX_ENC], msg[32];
    uint8_t ct[sizeof msg + KL_HPKE_TAG_LEN], pt[sizeof msg];
    size_t pl, el, cl, ptl;
    memset(msg, i, sizeof msg);
    kl_hpke_suite su = {KL_HPKE_KEM_P256, KL_HPKE_KDF_SHA256,
                        KL_HPKE_AEAD_AES256GCM};
    assert_int_equal(kl_hpke_public(KL_HPKE_KEM_P256, k, pk, sizeof pk, &pl),
                     KL_OK);
    assert_int_equal(kl_hpke_seal_once(su, pk, pl, NULL, 0, NULL, 0, msg,
                                       sizeof msg, enc, sizeof enc, &el, ct,
                                       sizeof ct, &cl),
                     KL_OK);
    assert_int_equal(kl_hpke_open_once(su, enc, el, k, NULL, 0, NULL, 0, ct, cl,
                                       pt, sizeof pt, &ptl),
                     KL_OK);
    assert_int_equal(ptl, sizeof msg);
    assert_memory_equal(pt, msg, sizeof msg);
}

static void test_token_key_opens(void **state)
{
    (void)state;
    EVP_PKEY *k = load(uri("object=node", PIN));
    /* a public key only: OpenSSL cannot derive with it, the token does */
    assert_true(EVP_PKEY_is_a(k, "EC"));
    for (int i = 0; i < 50; i++)
        round_trip(k, i);
    /* not a key of the X25519 KEM */
    uint8_t enc[32] = {9}, ss[32];
    assert_int_equal(kl_hpke_decap(KL_HPKE_KEM_X25519, enc, sizeof enc, k, ss),
                     KL_E_BAD_VALUE);

    /* a sealed key file made for it opens */
    uint8_t pk[KL_HPKE_MAX_ENC], ski[KL_SKI_LEN];
    size_t pl;
    assert_int_equal(kl_hpke_public(KL_HPKE_KEM_P256, k, pk, sizeof pk, &pl),
                     KL_OK);
    EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    assert_non_null(key);
    assert_int_equal(kl_ski_from_pkey(key, ski), KL_OK);
    kl_sealed_to to = {KL_SEALED_NODE, "hsm", KL_HPKE_KEM_P256, pk, pl};
    uint8_t *file = NULL;
    size_t flen = 0;
    char err[256];
    assert_int_equal(kl_sealed_seal("region=eu", key, ski, &to, 1, &file, &flen,
                                    err, sizeof err),
                     KL_OK);
    kl_sealed *s = NULL;
    assert_int_equal(kl_sealed_parse(file, flen, &s, err, sizeof err), KL_OK);
    size_t idx = 9;
    assert_int_equal(kl_sealed_find(s, k, &idx), KL_OK);
    EVP_PKEY *opened = NULL;
    assert_int_equal(kl_sealed_open(s, idx, k, &opened, err, sizeof err),
                     KL_OK);
    assert_int_equal(EVP_PKEY_eq(opened, key), 1);
    EVP_PKEY_free(opened);
    kl_sealed_free(s);
    free(file);
    EVP_PKEY_free(key);
    EVP_PKEY_free(k);
}

static void expect_refused(const char *u, kl_status want, const char *why_has)
{
    char why[512] = "";
    EVP_PKEY *k = (EVP_PKEY *)1;
    kl_status s = kl_keys_sealing_key_p11(u, &k, why, sizeof why);
    if (s != want || k != NULL || !strstr(why, why_has))
        fail_msg("%s: %s (%s), expected %s and \"%s\"", u, kl_status_str(s),
                 why, kl_status_str(want), why_has);
    assert_null(strstr(why, PIN));
    print_message("  %s\n", why);
}

static void test_refused_at_load(void **state)
{
    (void)state;
    char u[1024];
    snprintf(u, sizeof u, "pkcs11:token=seal;object=node?pin-value=" PIN);
    expect_refused(u, KL_E_CONFIG, "module-path");
    expect_refused(uri("object=node", "1111"), KL_E_CONFIG,
                   "CKR_PIN_INCORRECT");
    snprintf(u, sizeof u,
             "pkcs11:token=elsewhere;object=node?module-path=%s&pin-value=" PIN,
             module);
    expect_refused(u, KL_E_CONFIG, "no token with label \"elsewhere\"");
    expect_refused(uri("object=gone", PIN), KL_E_KEY,
                   "no private key with this object label");
    expect_refused(uri("object=p384", PIN), KL_E_KEY, "not an EC P-256 key");
    expect_refused(uri("object=signonly", PIN), KL_E_KEY,
                   "CKA_DERIVE is false");
    expect_refused(uri("id=%05", PIN), KL_E_KEY,
                   "does not match the public key");
}

/* The token logs out (another session of this process does it, as an
 * HSM does after an idle time): the next open logs in again and finds
 * the key again. */
static void test_logout_recovered(void **state)
{
    (void)state;
    EVP_PKEY *k = load(uri("object=node", PIN));
    round_trip(k, 1);
    kl_p11_uri u;
    char why[256];
    assert_int_equal(
        kl_p11_uri_parse(uri("object=node", PIN), &u, why, sizeof why), KL_OK);
    kl_p11_set *set = kl_p11_set_new();
    kl_p11_token *t = NULL;
    assert_int_equal(kl_p11_set_token(set, &u, &t, why, sizeof why), KL_OK);
    CK_SESSION_HANDLE h;
    assert_int_equal(kl_p11_session_get(t, kl_now_ns() + KL_NS_PER_S, &h),
                     KL_OK);
    assert_int_equal(kl_p11_token_fl(t)->C_Logout(h), CKR_OK);
    kl_p11_session_put(t, h);
    round_trip(k, 2);
    round_trip(k, 3);
    kl_p11_set_free(set);
    kl_p11_uri_clear(&u);
    EVP_PKEY_free(k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_key_opens),
        cmocka_unit_test(test_refused_at_load),
        cmocka_unit_test(test_logout_recovered),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
