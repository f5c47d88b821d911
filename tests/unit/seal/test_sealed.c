/* SPDX-License-Identifier: Apache-2.0 */
/* Sealed key files (seal/sealed.h, docs/SEALING.md): a key sealed to
 * recipients of both KEMs and an escrow opens with each recipient's key
 * and is the same key (it signs, the original's public key verifies);
 * another key finds no entry; a file cut at any byte or with any byte
 * changed fails to parse or to open with every recipient's key; a file
 * re-assembled with another policy, SKI or recipient list keeps its
 * ciphertexts and still does not open; each malformed field is refused
 * with its name and offset. */
#include "hpketest.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/x509.h>

#include "seal/sealed.h"

#define NR 3

typedef struct fixture {
    EVP_PKEY *key;      /* the sealed key */
    EVP_PKEY *node[NR]; /* recipients' private keys */
    uint8_t pk[NR][KL_HPKE_MAX_ENC];
    size_t pk_len[NR];
    kl_sealed_to to[NR];
    uint8_t ski[KL_SEALED_SKI_LEN];
    uint8_t *file;
    size_t len;
} fixture;

static const char *names[NR] = {"eu-west-1", "eu-west-2", "escrow-offline"};
static const uint16_t kem_of[NR] = {KL_HPKE_KEM_X25519, KL_HPKE_KEM_P256,
                                    KL_HPKE_KEM_X25519};

static void make(fixture *f, const char *alg, const char *param)
{
    memset(f, 0, sizeof *f);
    if (!strcmp(alg, "RSA")) /* RSA takes a size_t, EC a name */
        f->key = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
    else if (param)
        f->key = EVP_PKEY_Q_keygen(NULL, NULL, alg, param);
    else
        f->key = EVP_PKEY_Q_keygen(NULL, NULL, alg);
    assert_non_null(f->key);
    for (size_t i = 0; i < NR; i++) {
        f->node[i] = recipient(kem_of[i], f->pk[i], &f->pk_len[i]);
        f->to[i] = (kl_sealed_to){i == 2 ? KL_SEALED_ESCROW : KL_SEALED_NODE,
                                  names[i], kem_of[i], f->pk[i], f->pk_len[i]};
    }
    unsigned char *der = NULL;
    int dl = i2d_PUBKEY(f->key, &der);
    assert_true(dl > 0);
    assert_int_equal(kl_sealed_spki_ski(der, (size_t)dl, f->ski), KL_OK);
    OPENSSL_free(der);
    char err[256] = "";
    kl_status s =
        kl_sealed_seal("region = eu-west or region=eu-central", f->key, f->ski,
                       f->to, NR, &f->file, &f->len, err, sizeof err);
    if (s != KL_OK)
        fail_msg("seal: %s", err);
}

static void unmake(fixture *f)
{
    EVP_PKEY_free(f->key);
    for (size_t i = 0; i < NR; i++)
        EVP_PKEY_free(f->node[i]);
    free(f->file);
}

/* Opens buf with recipient i's key: KL_OK and the original key, or the
 * failure's status. */
static kl_status open_as(const fixture *f, const uint8_t *buf, size_t len,
                         size_t i)
{
    kl_sealed *s = NULL;
    char err[256];
    kl_status st = kl_sealed_parse(buf, len, &s, err, sizeof err);
    if (st != KL_OK)
        return st;
    size_t idx = 99;
    EVP_PKEY *k = NULL;
    st = kl_sealed_find(s, f->node[i], &idx);
    if (st == KL_OK)
        st = kl_sealed_open(s, idx, f->node[i], &k, err, sizeof err);
    if (st == KL_OK)
        assert_int_equal(EVP_PKEY_eq(k, f->key), 1);
    EVP_PKEY_free(k);
    kl_sealed_free(s);
    return st;
}

/* The opened key signs and the original's public half verifies. */
static void signs(EVP_PKEY *k, EVP_PKEY *orig)
{
    static const uint8_t msg[] = "to be signed";
    uint8_t sig[512];
    size_t sl = sizeof sig;
    const EVP_MD *md = EVP_PKEY_is_a(k, "ED25519") ? NULL : EVP_sha256();
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    assert_int_equal(EVP_DigestSignInit(c, NULL, md, NULL, k), 1);
    assert_int_equal(EVP_DigestSign(c, sig, &sl, msg, sizeof msg), 1);
    EVP_MD_CTX_free(c);
    c = EVP_MD_CTX_new();
    assert_int_equal(EVP_DigestVerifyInit(c, NULL, md, NULL, orig), 1);
    assert_int_equal(EVP_DigestVerify(c, sig, sl, msg, sizeof msg), 1);
    EVP_MD_CTX_free(c);
}

static void round_trip(const char *alg, const char *param)
{
    fixture f;
    make(&f, alg, param);
    kl_sealed *s = NULL;
    char err[256];
    assert_int_equal(kl_sealed_parse(f.file, f.len, &s, err, sizeof err),
                     KL_OK);
    assert_string_equal(s->policy_text, "region=eu-west or region=eu-central");
    assert_memory_equal(s->ski, f.ski, sizeof f.ski);
    assert_int_equal(s->n_rcpt, NR);
    for (size_t i = 0; i < NR; i++) {
        size_t idx = 99;
        assert_int_equal(kl_sealed_find(s, f.node[i], &idx), KL_OK);
        assert_int_equal(idx, i);
        assert_string_equal(s->rcpt[i].name, names[i]);
        assert_int_equal(s->rcpt[i].kind, i == 2 ? 2 : 1);
        EVP_PKEY *k = NULL;
        assert_int_equal(kl_sealed_open(s, idx, f.node[i], &k, err, sizeof err),
                         KL_OK);
        signs(k, f.key);
        EVP_PKEY_free(k);
    }
    /* the file's public key is the key's */
    const unsigned char *q = s->spki;
    EVP_PKEY *pub = d2i_PUBKEY(NULL, &q, (long)s->spki_len);
    assert_int_equal(EVP_PKEY_eq(pub, f.key), 1);
    EVP_PKEY_free(pub);
    /* re-encoding a parsed file gives the same bytes */
    uint8_t *again = NULL;
    size_t alen = 0;
    assert_int_equal(kl_sealed_encode(s, &again, &alen), KL_OK);
    assert_int_equal(alen, f.len);
    assert_memory_equal(again, f.file, f.len);
    free(again);
    kl_sealed_free(s);
    unmake(&f);
}

static void test_round_trip(void **state)
{
    (void)state;
    round_trip("EC", "P-256");
    round_trip("EC", "P-384");
    round_trip("ED25519", NULL);
    round_trip("RSA", NULL);
}

static void test_fresh_each_time(void **state)
{
    (void)state;
    fixture f;
    make(&f, "EC", "P-256");
    uint8_t *b = NULL;
    size_t bl = 0;
    char err[256];
    assert_int_equal(kl_sealed_seal("region=eu-west", f.key, f.ski, f.to, NR,
                                    &b, &bl, err, sizeof err),
                     KL_OK);
    kl_sealed *x = NULL, *y = NULL;
    assert_int_equal(kl_sealed_parse(f.file, f.len, &x, err, sizeof err),
                     KL_OK);
    assert_int_equal(kl_sealed_parse(b, bl, &y, err, sizeof err), KL_OK);
    /* a new nonce, new encapsulations, a new body */
    assert_memory_not_equal(x->nonce, y->nonce, sizeof x->nonce);
    for (size_t i = 0; i < NR; i++)
        assert_memory_not_equal(x->rcpt[i].enc, y->rcpt[i].enc,
                                x->rcpt[i].pk_len);
    assert_memory_not_equal(x->ct, y->ct, 16);
    kl_sealed_free(x);
    kl_sealed_free(y);
    free(b);
    unmake(&f);
}

static void test_wrong_node(void **state)
{
    (void)state;
    fixture f;
    make(&f, "EC", "P-256");
    kl_sealed *s = NULL;
    char err[256];
    assert_int_equal(kl_sealed_parse(f.file, f.len, &s, err, sizeof err),
                     KL_OK);
    for (size_t k = 0; k < 2; k++) {
        uint8_t pk[KL_HPKE_MAX_ENC];
        size_t pl = 0, idx = 77;
        EVP_PKEY *other = recipient(kems[k], pk, &pl);
        assert_int_equal(kl_sealed_find(s, other, &idx), KL_E_NOT_FOUND);
        assert_int_equal(idx, 77);
        /* the right entry with the wrong key of the same KEM */
        EVP_PKEY *got = NULL;
        size_t entry = kems[k] == KL_HPKE_KEM_P256 ? 1 : 0;
        assert_int_equal(kl_sealed_open(s, entry, other, &got, err, sizeof err),
                         KL_E_KEY);
        assert_null(got);
        assert_non_null(strstr(err, "does not decrypt with this key"));
        EVP_PKEY_free(other);
    }
    /* the sealed key itself is nobody's node key */
    size_t idx = 0;
    assert_int_equal(kl_sealed_find(s, f.key, &idx), KL_E_NOT_FOUND);
    kl_sealed_free(s);
    unmake(&f);
}

static void test_truncated_and_trailing(void **state)
{
    (void)state;
    fixture f;
    make(&f, "EC", "P-256");
    for (size_t n = 0; n < f.len; n++) {
        kl_sealed *s = NULL;
        char err[256] = "";
        kl_status st = kl_sealed_parse(f.file, n, &s, err, sizeof err);
        assert_true(st == KL_E_TRUNCATED || st == KL_E_BAD_VALUE);
        assert_null(s);
        assert_true(strncmp(err, "at ", 3) == 0);
    }
    uint8_t *longer = malloc(f.len + 1);
    memcpy(longer, f.file, f.len);
    longer[f.len] = 0;
    kl_sealed *s = NULL;
    char err[256];
    assert_int_equal(kl_sealed_parse(longer, f.len + 1, &s, err, sizeof err),
                     KL_E_BAD_VALUE);
    assert_non_null(strstr(err, "1 byte(s) after the body"));
    free(longer);
    unmake(&f);
}

/* Every byte, changed two ways: the file never opens for anyone. */
static void test_every_byte_flipped(void **state)
{
    (void)state;
    fixture f;
    make(&f, "EC", "P-256");
    uint8_t *b = malloc(f.len);
    static const uint8_t masks[] = {0x01, 0x80};
    size_t parsed = 0;
    for (size_t m = 0; m < sizeof masks; m++)
        for (size_t i = 0; i < f.len; i++) {
            memcpy(b, f.file, f.len);
            b[i] ^= masks[m];
            kl_sealed *s = NULL;
            char err[256];
            if (kl_sealed_parse(b, f.len, &s, err, sizeof err) == KL_OK)
                parsed++;
            kl_sealed_free(s);
            for (size_t r = 0; r < NR; r++)
                if (open_as(&f, b, f.len, r) == KL_OK)
                    fail_msg("byte %zu ^ 0x%02x still opens for %zu", i,
                             masks[m], r);
        }
    /* most changes parse (keys, wraps, body): opening is what refuses */
    assert_true(parsed > f.len);
    for (size_t r = 0; r < NR; r++)
        assert_int_equal(open_as(&f, f.file, f.len, r), KL_OK);
    free(b);
    unmake(&f);
}

static void other_ski(kl_sealed *s);

/* Re-assembles the file after change() and checks no one opens it. */
static void reassembled(fixture *f, void (*change)(kl_sealed *s))
{
    kl_sealed *s = NULL;
    char err[256];
    assert_int_equal(kl_sealed_parse(f->file, f->len, &s, err, sizeof err),
                     KL_OK);
    change(s);
    uint8_t *b = NULL;
    size_t bl = 0;
    assert_int_equal(kl_sealed_encode(s, &b, &bl), KL_OK);
    kl_sealed_free(s);
    for (size_t r = 0; r < NR; r++) {
        kl_status st = open_as(f, b, bl, r);
        /* another SKI no longer matches the public key: refused at parse */
        assert_true(st == KL_E_KEY || st == KL_E_NOT_FOUND ||
                    (change == other_ski && st == KL_E_BAD_VALUE));
    }
    free(b);
}

static void other_policy(kl_sealed *s)
{
    free(s->policy_text);
    s->policy_text = strdup("region=us-east");
    s->policy_len = strlen(s->policy_text);
}

static void other_ski(kl_sealed *s)
{
    s->ski[19] ^= 1;
}

static void drop_last(kl_sealed *s)
{
    s->n_rcpt--;
}

static void swap_two(kl_sealed *s)
{
    kl_sealed_recipient t = s->rcpt[0];
    s->rcpt[0] = s->rcpt[2];
    s->rcpt[2] = t;
}

static void renamed(kl_sealed *s)
{
    strcpy(s->rcpt[1].name, "us-east-1");
}

static void escrow_as_node(kl_sealed *s)
{
    s->rcpt[2].kind = KL_SEALED_NODE;
}

static void test_bindings(void **state)
{
    (void)state;
    fixture f;
    make(&f, "EC", "P-256");
    reassembled(&f, other_policy);
    reassembled(&f, other_ski);
    reassembled(&f, drop_last);
    reassembled(&f, swap_two);
    reassembled(&f, renamed);
    reassembled(&f, escrow_as_node);
    unmake(&f);
}

/* Parses buf after one change and checks the status and message. */
static void refused(const uint8_t *file, size_t len, size_t off, uint8_t v,
                    kl_status want, const char *msg)
{
    uint8_t *b = malloc(len);
    memcpy(b, file, len);
    b[off] = v;
    kl_sealed *s = NULL;
    char err[256] = "";
    assert_int_equal(kl_sealed_parse(b, len, &s, err, sizeof err), want);
    assert_null(s);
    if (!strstr(err, msg))
        fail_msg("expected \"%s\", got \"%s\"", msg, err);
    free(b);
}

static size_t find_bytes(const uint8_t *h, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(h + i, needle, k))
            return i;
    fail_msg("%s not in the file", needle);
    return 0;
}

static void test_fields(void **state)
{
    (void)state;
    fixture f;
    make(&f, "EC", "P-256");
    const uint8_t *b = f.file;
    size_t n = f.len;
    refused(b, n, 0, 'X', KL_E_BAD_VALUE, "at 0: magic: not a sealed key");
    refused(b, n, 9, 2, KL_E_BAD_VALUE, "at 8: version: 2 is not one");
    refused(b, n, 11, 1, KL_E_BAD_VALUE, "at 10: aead: 0x0001 is not");
    refused(b, n, 12, 0x20, KL_E_BAD_VALUE, "at 12: policy length: 8227");
    /* "region=eu-west or ..." with 'or' made 'OR' */
    size_t p = find_bytes(b, n, " or ");
    refused(b, n, p + 1, 'O', KL_E_BAD_VALUE, "policy: at ");
    /* the same policy spelt with a tab: parses, but is not canonical */
    refused(b, n, p, '\t', KL_E_BAD_VALUE, "not in canonical form");
    size_t ski = 14 + strlen("region=eu-west or region=eu-central");
    refused(b, n, ski + 3, b[ski + 3] ^ 1, KL_E_BAD_VALUE,
            "at 49: ski: not the SKI of the public key that follows it");
    /* the public key's framing: long-form length where short will do */
    refused(b, n, ski + 23, 0x81, KL_E_BAD_VALUE, "public key: not one DER");
    refused(b, n, ski + 20, 0xff, KL_E_BAD_VALUE, "public key length");
    refused(b, n, ski + 22, 0x31, KL_E_BAD_VALUE,
            "public key: not one DER SubjectPublicKeyInfo");
    size_t nm = find_bytes(b, n, "eu-west-1");
    refused(b, n, nm - 2, 3, KL_E_BAD_VALUE, "recipient kind: 3");
    refused(b, n, nm - 3, 0, KL_E_BAD_VALUE, "recipient count: 0");
    refused(b, n, nm - 4, 0x10, KL_E_BAD_VALUE, "recipient count: 4099");
    refused(b, n, nm + 2, ' ', KL_E_BAD_VALUE, "recipient name: not 1..64");
    refused(b, n, nm - 1, 0, KL_E_BAD_VALUE, "recipient name: not 1..64");
    refused(b, n, nm + 9, 0x30, KL_E_BAD_VALUE, "recipient kem: 0x3020");
    /* the second name made the first's: "eu-west-2" -> "eu-west-1" */
    size_t nm2 = find_bytes(b, n, "eu-west-2");
    refused(b, n, nm2 + 8, '1', KL_E_BAD_VALUE,
            "recipient 1: the name \"eu-west-1\" is recipient 0's too");
    /* P-256 recipient: a point not on the curve */
    size_t pk2 = nm2 + 9 + 2;
    refused(b, n, pk2 + 64, b[pk2 + 64] ^ 1, KL_E_BAD_VALUE,
            "recipient public key: not a valid key");
    refused(b, n, pk2, 0x02, KL_E_BAD_VALUE, "recipient public key");
    /* body length: the 4 bytes before the body */
    kl_sealed *s = NULL;
    char err[256];
    assert_int_equal(kl_sealed_parse(b, n, &s, err, sizeof err), KL_OK);
    size_t bl = s->header_len + KL_HPKE_NONCE_LEN;
    kl_sealed_free(s);
    refused(b, n, bl, 1, KL_E_BAD_VALUE, "body length: 16777");
    refused(b, n, bl + 3, 16, KL_E_BAD_VALUE, "body length: 16 is not");
    refused(b, n, bl + 3, b[bl + 3] + 1, KL_E_TRUNCATED, "body: the file ends");
    refused(b, n, bl + 3, b[bl + 3] - 1, KL_E_BAD_VALUE,
            "1 byte(s) after the body");
    /* too large to be one */
    assert_int_equal(
        kl_sealed_parse(b, KL_SEALED_MAX_FILE + 1, &s, err, sizeof err),
        KL_E_TOO_LARGE);
    unmake(&f);
}

static void test_seal_arguments(void **state)
{
    (void)state;
    fixture f;
    make(&f, "EC", "P-256");
    uint8_t *b = NULL;
    size_t bl = 0;
    char err[256];
    assert_int_equal(kl_sealed_seal("region=eu-west &&", f.key, f.ski, f.to, NR,
                                    &b, &bl, err, sizeof err),
                     KL_E_BAD_VALUE);
    assert_string_equal(err, "policy: at 15: '&&' is not an operator; write "
                             "'and'");
    assert_int_equal(
        kl_sealed_seal("a=1", f.key, f.ski, f.to, 0, &b, &bl, err, sizeof err),
        KL_E_BAD_VALUE);
    assert_non_null(strstr(err, "0 recipients"));
    kl_sealed_to two[2] = {f.to[0], f.to[0]};
    two[1].name = "other";
    assert_int_equal(
        kl_sealed_seal("a=1", f.key, f.ski, two, 2, &b, &bl, err, sizeof err),
        KL_E_BAD_VALUE);
    assert_non_null(strstr(err, "same name or key as recipient 0"));
    two[1] = f.to[1];
    two[1].pk_len = 64;
    assert_int_equal(
        kl_sealed_seal("a=1", f.key, f.ski, two, 2, &b, &bl, err, sizeof err),
        KL_E_BAD_VALUE);
    two[1] = f.to[1];
    two[1].name = "bad name";
    assert_int_equal(
        kl_sealed_seal("a=1", f.key, f.ski, two, 2, &b, &bl, err, sizeof err),
        KL_E_BAD_VALUE);
    /* a public key alone cannot be sealed */
    EVP_PKEY *pub = NULL;
    unsigned char *der = NULL;
    int dl = i2d_PUBKEY(f.key, &der);
    const unsigned char *q = der;
    pub = d2i_PUBKEY(NULL, &q, dl);
    assert_int_equal(
        kl_sealed_seal("a=1", pub, f.ski, f.to, NR, &b, &bl, err, sizeof err),
        KL_E_KEY);
    assert_null(b);
    OPENSSL_free(der);
    EVP_PKEY_free(pub);
    /* an SKI that is not the key's */
    uint8_t wrong[KL_SEALED_SKI_LEN];
    memcpy(wrong, f.ski, sizeof wrong);
    wrong[0] ^= 1;
    assert_int_equal(
        kl_sealed_seal("a=1", f.key, wrong, f.to, NR, &b, &bl, err, sizeof err),
        KL_E_BAD_VALUE);
    assert_string_equal(err, "the SKI given is not the key's");
    assert_true(kl_sealed_name_ok("dub-1.a_b:c", 11));
    assert_false(kl_sealed_name_ok("", 0));
    assert_false(kl_sealed_name_ok("a/b", 3));
    unmake(&f);
}

int main(void)
{
    (void)suite_of; /* hpketest.h's, for the HPKE tests */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_fresh_each_time),
        cmocka_unit_test(test_wrong_node),
        cmocka_unit_test(test_truncated_and_trailing),
        cmocka_unit_test(test_every_byte_flipped),
        cmocka_unit_test(test_bindings),
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_seal_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
