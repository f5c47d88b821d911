/* SPDX-License-Identifier: Apache-2.0 */
/* The keyless provider's operations in-process: every signature
 * the key server offers, made through EVP (one-shot and streamed digests,
 * a duplicated context, a precomputed digest) and verified with the public
 * key; RSA decryption in TLS mode with its implicit rejection; a clear
 * error naming the key server when none answers; the local fallback key,
 * used and logged only then; malformed references refused with a reason;
 * and no way for an ordinary private key to enter the provider. */
#include "test_provider_common.h"

#include <fcntl.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>

static const char *const names[] = {"rsa-2048", "ecdsa-p256", "ecdsa-p384",
                                    "ed25519", "ecdsa-p521"};

static int setup(void **state)
{
    dir = tp_tempdir("provider-ops");
    for (size_t i = 0; i < 4; i++) {
        char key[256];
        snprintf(key, sizeof key, "keys/%s.key", names[i]);
        tp_copy_key(dir, tp_path(key));
    }
    EVP_PKEY_free(tp_genkey(dir, "ecdsa-p521.key", "EC", "P-521", 0));
    for (size_t i = 0; i < 5; i++) {
        char key[256];
        snprintf(key, sizeof key, "%s.key", names[i]);
        write_cert(path_in(key), names[i]);
    }
    start_keylessd();
    for (size_t i = 0; i < 5; i++)
        write_ref(names[i], kd.port, NULL, 0);
    prov_setup_libctx();
    return 0;
}

static int teardown(void **state)
{
    prov_teardown_libctx();
    assert_int_equal(td_stop(&kd, 0), 0);
    tp_rmtree(dir);
    return 0;
}

static EVP_PKEY *ref_key(const char *name)
{
    char f[256];
    snprintf(f, sizeof f, "%s.ref", name);
    EVP_PKEY *pk = read_key(path_in(f));
    assert_non_null(pk);
    return pk;
}

static EVP_PKEY *cert_pub(const char *name)
{
    char f[256];
    snprintf(f, sizeof f, "%s.crt", name);
    return tp_load_pub(path_in(f));
}

/* Signs msg through EVP_DigestSign (streamed in two updates when split,
 * finished on a duplicate first when dup) and verifies it with pub. */
static void sign_verify(EVP_PKEY *pk, EVP_PKEY *pub, const char *md, int pss,
                        int split, int dup)
{
    static const unsigned char msg[] = "keyless provider signing test";
    unsigned char sig[1024];
    size_t siglen = sizeof sig;
    EVP_MD_CTX *m = EVP_MD_CTX_new();
    EVP_PKEY_CTX *pc = NULL;
    assert_int_equal(EVP_DigestSignInit_ex(m, &pc, md, lib, NULL, pk, NULL), 1);
    if (pss) {
        assert_int_equal(
            EVP_PKEY_CTX_set_rsa_padding(pc, RSA_PKCS1_PSS_PADDING), 1);
        assert_int_equal(
            EVP_PKEY_CTX_set_rsa_pss_saltlen(pc, RSA_PSS_SALTLEN_DIGEST), 1);
    }
    if (split) {
        assert_int_equal(EVP_DigestSignUpdate(m, msg, 10), 1);
        assert_int_equal(EVP_DigestSignUpdate(m, msg + 10, sizeof msg - 10), 1);
        if (dup) {
            EVP_MD_CTX *d = EVP_MD_CTX_new();
            assert_int_equal(EVP_MD_CTX_copy_ex(d, m), 1);
            size_t dl = sizeof sig;
            assert_int_equal(EVP_DigestSignFinal(d, sig, &dl), 1);
            EVP_MD_CTX_free(d);
        }
        assert_int_equal(EVP_DigestSignFinal(m, NULL, &siglen), 1);
        assert_true(siglen <= sizeof sig);
        assert_int_equal(EVP_DigestSignFinal(m, sig, &siglen), 1);
    } else {
        assert_int_equal(EVP_DigestSign(m, sig, &siglen, msg, sizeof msg), 1);
    }
    EVP_MD_CTX_free(m);

    m = EVP_MD_CTX_new();
    pc = NULL;
    assert_int_equal(EVP_DigestVerifyInit(m, &pc,
                                          md ? EVP_get_digestbyname(md) : NULL,
                                          NULL, pub),
                     1);
    if (pss) {
        assert_int_equal(
            EVP_PKEY_CTX_set_rsa_padding(pc, RSA_PKCS1_PSS_PADDING), 1);
        assert_int_equal(
            EVP_PKEY_CTX_set_rsa_pss_saltlen(pc, RSA_PSS_SALTLEN_DIGEST), 1);
    }
    assert_int_equal(EVP_DigestVerify(m, sig, siglen, msg, sizeof msg), 1);
    EVP_MD_CTX_free(m);
}

static void test_rsa_signatures(void **state)
{
    EVP_PKEY *pk = ref_key("rsa-2048"), *pub = cert_pub("rsa-2048");
    const char *mds[] = {"SHA1", "SHA224", "SHA256", "SHA384", "SHA512"};
    for (size_t i = 0; i < 5; i++)
        sign_verify(pk, pub, mds[i], 0, i & 1, i == 2);
    for (size_t i = 2; i < 5; i++)
        sign_verify(pk, pub, mds[i], 1, i & 1, i == 3);
    EVP_PKEY_free(pub);
    EVP_PKEY_free(pk);
}

static void test_ecdsa_eddsa(void **state)
{
    const char *ecs[] = {"ecdsa-p256", "ecdsa-p384", "ecdsa-p521"};
    for (size_t i = 0; i < 3; i++) {
        EVP_PKEY *pk = ref_key(ecs[i]), *pub = cert_pub(ecs[i]);
        sign_verify(pk, pub, "SHA256", 0, 0, 0);
        sign_verify(pk, pub, "SHA384", 0, 1, 1);
        sign_verify(pk, pub, "SHA512", 0, 1, 0);
        EVP_PKEY_free(pub);
        EVP_PKEY_free(pk);
    }
    EVP_PKEY *pk = ref_key("ed25519"), *pub = cert_pub("ed25519");
    sign_verify(pk, pub, NULL, 0, 0, 0);
    EVP_PKEY_free(pub);
    EVP_PKEY_free(pk);
}

/* EVP_PKEY_sign over a digest: MD5+SHA-1 (TLS 1.0's, no DigestInfo). */
static void test_sign_digest(void **state)
{
    EVP_PKEY *pk = ref_key("rsa-2048"), *pub = cert_pub("rsa-2048");
    unsigned char dg[36], sig[256];
    size_t siglen = sizeof sig;
    RAND_bytes(dg, sizeof dg);
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_pkey(lib, pk, NULL);
    assert_int_equal(EVP_PKEY_sign_init(c), 1);
    assert_int_equal(EVP_PKEY_sign(c, sig, &siglen, dg, sizeof dg), 1);
    EVP_PKEY_CTX_free(c);
    c = EVP_PKEY_CTX_new(pub, NULL);
    assert_int_equal(EVP_PKEY_verify_init(c), 1);
    assert_int_equal(EVP_PKEY_verify(c, sig, siglen, dg, sizeof dg), 1);
    EVP_PKEY_CTX_free(c);
    EVP_PKEY_free(pub);
    EVP_PKEY_free(pk);
}

static size_t tls_decrypt(EVP_PKEY *pk, const unsigned char *ct, size_t n,
                          unsigned version, unsigned char out[48])
{
    size_t outlen = 48;
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_pkey(lib, pk, NULL);
    OSSL_PARAM p[2] = {OSSL_PARAM_construct_uint(
                           OSSL_ASYM_CIPHER_PARAM_TLS_CLIENT_VERSION, &version),
                       OSSL_PARAM_construct_end()};
    assert_int_equal(EVP_PKEY_decrypt_init(c), 1);
    assert_int_equal(
        EVP_PKEY_CTX_set_rsa_padding(c, RSA_PKCS1_WITH_TLS_PADDING), 1);
    assert_int_equal(EVP_PKEY_CTX_set_params(c, p), 1);
    int ok = EVP_PKEY_decrypt(c, out, &outlen, ct, n);
    EVP_PKEY_CTX_free(c);
    return ok == 1 ? outlen : 0;
}

static void test_rsa_decrypt_tls(void **state)
{
    EVP_PKEY *pk = ref_key("rsa-2048"), *pub = cert_pub("rsa-2048");
    unsigned char pms[48], ct[256], out[48], out2[48];
    size_t ctlen = sizeof ct;
    RAND_bytes(pms, sizeof pms);
    pms[0] = 0x03;
    pms[1] = 0x03;
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new(pub, NULL);
    assert_int_equal(EVP_PKEY_encrypt_init(c), 1);
    assert_int_equal(EVP_PKEY_encrypt(c, ct, &ctlen, pms, sizeof pms), 1);
    EVP_PKEY_CTX_free(c);

    assert_int_equal(tls_decrypt(pk, ct, ctlen, 0x0303, out), 48);
    assert_memory_equal(out, pms, 48);
    /* Wrong client version: a random premaster, and still success. */
    assert_int_equal(tls_decrypt(pk, ct, ctlen, 0x0302, out), 48);
    assert_memory_not_equal(out, pms, 48);
    assert_int_equal(tls_decrypt(pk, ct, ctlen, 0x0302, out2), 48);
    assert_memory_not_equal(out, out2, 48);
    /* Garbage below the modulus: bad padding, same silent outcome. */
    ct[0] ^= 0x01;
    assert_int_equal(tls_decrypt(pk, ct, ctlen, 0x0303, out), 48);
    assert_memory_not_equal(out, pms, 48);
    /* A ciphertext of the wrong size is publicly invalid: an error. */
    assert_int_equal(tls_decrypt(pk, ct, ctlen - 1, 0x0303, out), 0);
    ERR_clear_error();
    EVP_PKEY_free(pub);
    EVP_PKEY_free(pk);
}

/* The key server down: the operation fails with an error that names it. */
static void test_server_down(void **state)
{
    write_ref("ecdsa-p256", dead_port(), NULL, 0);
    EVP_PKEY *pk = ref_key("ecdsa-p256");
    unsigned char sig[256];
    size_t siglen = sizeof sig;
    EVP_MD_CTX *m = EVP_MD_CTX_new();
    ERR_clear_error();
    assert_int_equal(
        EVP_DigestSignInit_ex(m, NULL, "SHA256", lib, NULL, pk, NULL), 1);
    assert_int_not_equal(EVP_DigestSign(m, sig, &siglen, sig, 32), 1);
    char *e = errors_text();
    assert_non_null(strstr(e, "no keyless key server answered"));
    assert_non_null(strstr(e, "127.0.0.1:9"));
    /* a refusal is said as one, not as a timeout (docs/PROVIDER.md) */
    assert_non_null(strstr(e, "refused"));
    assert_null(strstr(e, "timed out"));
    free(e);
    EVP_MD_CTX_free(m);
    EVP_PKEY_free(pk);
    write_ref("ecdsa-p256", kd.port, NULL, 0);
}

/* The fallback key signs only while no key server answers, and says so
 * on stderr each time. */
static void test_fallback(void **state)
{
    write_ref("ecdsa-p384", dead_port(), path_in("ecdsa-p384.key"), 0);
    EVP_PKEY *pk = ref_key("ecdsa-p384"), *pub = cert_pub("ecdsa-p384");
    char *logf = path_in("stderr.log");
    int saved = dup(2), fd = open(logf, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    assert_true(saved >= 0 && fd >= 0);
    fflush(stderr);
    dup2(fd, 2);
    sign_verify(pk, pub, "SHA256", 0, 0, 0);
    sign_verify(pk, pub, "SHA384", 0, 0, 0);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    size_t len;
    char *log = tu_read_file(logf, &len);
    char *first = strstr(log, "local fallback key");
    assert_non_null(first);
    assert_non_null(strstr(first + 1, "local fallback key")); /* twice */
    assert_non_null(strstr(log, "127.0.0.1:9"));
    free(log);
    EVP_PKEY_free(pub);
    EVP_PKEY_free(pk);
    write_ref("ecdsa-p384", kd.port, NULL, 0);
}

static void expect_bad_ref(const char *text, const char *why)
{
    char *f = path_in("bad.ref");
    FILE *out = fopen(f, "w");
    fputs(text, out);
    fclose(out);
    ERR_clear_error();
    assert_null(read_key(f));
    char *e = errors_text();
    if (!strstr(e, why))
        fail_msg("expected \"%s\" in: %s", why, e);
    free(e);
}

static void test_bad_references(void **state)
{
    /* "KLR1" and a truncated item. */
    expect_bad_ref("-----BEGIN KEYLESS KEY REFERENCE-----\nS0xSMQEAFA==\n"
                   "-----END KEYLESS KEY REFERENCE-----\n",
                   "truncated item");
    /* "KLR1" and nothing else. */
    expect_bad_ref("-----BEGIN KEYLESS KEY REFERENCE-----\nS0xSMQ==\n"
                   "-----END KEYLESS KEY REFERENCE-----\n",
                   "no SKI");
    /* A reference whose SKI is not its public key's. */
    size_t len;
    char *good = tu_read_file(path_in("ed25519.ref"), &len);
    char *p = strstr(good, "\n") + 1 + 16; /* inside the SKI's base64 */
    *p = *p == 'A' ? 'B' : 'A';
    expect_bad_ref(good, "SKI is not its public key's");
    free(good);
}

/* Ordinary private keys never enter the provider: no import of private
 * material, no key generation. */
static void test_no_private_import(void **state)
{
    EVP_PKEY *priv = load_private(path_in("ecdsa-p256.key")), *out = NULL;
    OSSL_PARAM *params = NULL;
    assert_int_equal(EVP_PKEY_todata(priv, EVP_PKEY_KEYPAIR, &params), 1);
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_from_name(lib, "EC", "provider=keyless");
    assert_non_null(c);
    assert_int_equal(EVP_PKEY_fromdata_init(c), 1);
    assert_int_not_equal(EVP_PKEY_fromdata(c, &out, EVP_PKEY_KEYPAIR, params),
                         1);
    assert_null(out);
    assert_int_not_equal(EVP_PKEY_keygen_init(c), 1);
    EVP_PKEY_CTX_free(c);
    OSSL_PARAM_free(params);
    EVP_PKEY_free(priv);
    ERR_clear_error();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rsa_signatures),
        cmocka_unit_test(test_ecdsa_eddsa),
        cmocka_unit_test(test_sign_digest),
        cmocka_unit_test(test_rsa_decrypt_tls),
        cmocka_unit_test(test_server_down),
        cmocka_unit_test(test_fallback),
        cmocka_unit_test(test_bad_references),
        cmocka_unit_test(test_no_private_import),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
