/* SPDX-License-Identifier: Apache-2.0 */
/* The fleet file (seal/fleetfile.h): nodes with attributes (several
 * values per name), PEM and raw sealing keys of both KEMs, revoked nodes
 * and escrow recipients; which recipients a policy selects; and every
 * malformed field refused with the file, the line and the fix. */
#include "hpketest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/pem.h>

#include "seal/fleetfile.h"

/* A fresh key of the KEM, as PEM (indented for a YAML block) or as base64
 * of the raw key; pk gets the raw key. */
static char *key_text(uint16_t kem, bool pem, uint8_t *pk, size_t *pk_len)
{
    EVP_PKEY *k = recipient(kem, pk, pk_len);
    char *out = calloc(1, 2048);
    if (pem) {
        BIO *bio = BIO_new(BIO_s_mem());
        assert_int_equal(PEM_write_bio_PUBKEY(bio, k), 1);
        char *p = NULL;
        long n = BIO_get_mem_data(bio, &p);
        strcat(out, "|\n");
        for (long i = 0, bol = 1; i < n; i++) {
            if (bol)
                strcat(out, "      ");
            strncat(out, p + i, 1);
            bol = p[i] == '\n';
        }
        BIO_free(bio);
    } else {
        EVP_EncodeBlock((unsigned char *)out, pk, (int)*pk_len);
    }
    EVP_PKEY_free(k);
    return out;
}

static kl_fleetfile *parse_ok(const char *text)
{
    kl_fleetfile *f = NULL;
    char err[512] = "";
    kl_status st = kl_fleetfile_parse("fleet.yaml", (const uint8_t *)text,
                                      strlen(text), &f, err, sizeof err);
    if (st != KL_OK)
        fail_msg("%s\n%s", err, text);
    return f;
}

static void test_parse_and_select(void **state)
{
    (void)state;
    uint8_t pk[4][KL_HPKE_MAX_ENC];
    size_t pl[4];
    char *k0 = key_text(KL_HPKE_KEM_X25519, true, pk[0], &pl[0]);
    char *k1 = key_text(KL_HPKE_KEM_P256, false, pk[1], &pl[1]);
    char *k2 = key_text(KL_HPKE_KEM_X25519, false, pk[2], &pl[2]);
    char *k3 = key_text(KL_HPKE_KEM_P256, true, pk[3], &pl[3]);
    char *text = malloc(16384);
    snprintf(text, 16384,
             "# the fleet\n"
             "nodes:\n"
             "  - name: eu-west-1a\n"
             "    attributes: {region: eu-west, country: ie, tier: [edge, "
             "core]}\n"
             "    sealing_key: %s\n"
             "  - name: eu-central-1\n"
             "    attributes: {region: eu-central, country: de}\n"
             "    sealing_key: %s\n"
             "  - name: eu-west-old\n"
             "    attributes: {region: eu-west}\n"
             "    sealing_key: %s\n"
             "    revoked: true\n"
             "escrow:\n"
             "  - name: vault\n"
             "    sealing_key: %s\n",
             k0, k1, k2, k3);
    kl_fleetfile *f = parse_ok(text);
    assert_int_equal(f->n_nodes, 3);
    assert_int_equal(f->n_escrow, 1);
    assert_string_equal(f->nodes[0].name, "eu-west-1a");
    assert_int_equal(f->nodes[0].kem, KL_HPKE_KEM_X25519);
    assert_memory_equal(f->nodes[0].pk, pk[0], 32);
    assert_int_equal(f->nodes[1].kem, KL_HPKE_KEM_P256);
    assert_memory_equal(f->nodes[1].pk, pk[1], 65);
    assert_int_equal(f->nodes[0].n_attrs, 4);
    assert_true(f->nodes[2].revoked && !f->nodes[0].revoked);
    assert_int_equal(f->escrow[0].kem, KL_HPKE_KEM_P256);
    assert_memory_equal(f->escrow[0].pk, pk[3], 65);

    static const struct {
        const char *policy;
        size_t nodes;
        const char *first;
    } cases[] = {
        {"region=eu-west", 1, "eu-west-1a"}, /* the revoked one is not */
        {"region=eu-west or region=eu-central", 2, "eu-west-1a"},
        {"tier=core", 1, "eu-west-1a"},
        {"country in (de, fr)", 1, "eu-central-1"},
        {"not tier=edge", 1, "eu-central-1"},
        {"region=us-east", 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kl_policy *p = NULL;
        char err[200];
        assert_int_equal(kl_policy_parse(cases[i].policy,
                                         strlen(cases[i].policy), &p, NULL, err,
                                         sizeof err),
                         KL_OK);
        kl_sealed_to *to = NULL;
        size_t n = 9, nn = 9;
        kl_status st = kl_fleetfile_select(f, p, &to, &n, &nn);
        assert_int_equal(nn, cases[i].nodes);
        if (!cases[i].nodes) {
            assert_int_equal(st, KL_E_NOT_FOUND);
            assert_null(to);
        } else {
            assert_int_equal(st, KL_OK);
            assert_int_equal(n, nn + 1); /* and the escrow */
            assert_string_equal(to[0].name, cases[i].first);
            assert_int_equal(to[n - 1].kind, KL_SEALED_ESCROW);
            assert_string_equal(to[n - 1].name, "vault");
        }
        free(to);
        kl_policy_free(p);
    }
    kl_fleetfile_free(f);
    free(text);
    free(k0);
    free(k1);
    free(k2);
    free(k3);
}

/* text with "KEY" replaced by a valid raw key must fail with msg. */
static void refused(const char *text, const char *msg)
{
    uint8_t pk[KL_HPKE_MAX_ENC], pk2[KL_HPKE_MAX_ENC];
    size_t pl = 0, pl2 = 0;
    char *k = key_text(KL_HPKE_KEM_X25519, false, pk, &pl);
    char *k2 = key_text(KL_HPKE_KEM_X25519, false, pk2, &pl2);
    char buf[4096] = "";
    for (const char *p = text; *p;) {
        if (!strncmp(p, "KEY2", 4)) {
            strcat(buf, k2);
            p += 4;
        } else if (!strncmp(p, "KEY", 3)) {
            strcat(buf, k);
            p += 3;
        } else {
            strncat(buf, p++, 1);
        }
    }
    kl_fleetfile *f = NULL;
    char err[512] = "";
    kl_status st = kl_fleetfile_parse("fleet.yaml", (const uint8_t *)buf,
                                      strlen(buf), &f, err, sizeof err);
    assert_int_equal(st, KL_E_CONFIG);
    assert_null(f);
    if (!strstr(err, msg))
        fail_msg("expected \"%s\", got \"%s\"", msg, err);
    free(k);
    free(k2);
}

static void test_refused(void **state)
{
    (void)state;
    refused("nodes: [\n", "fleet.yaml:2: YAML syntax");
    refused("- a\n", "fleet.yaml:1: a fleet file is a map");
    refused("escrow: []\n", "fleet.yaml:1: no nodes");
    refused("nodes: []\nnodez: []\n",
            "fleet.yaml:2: unknown field 'nodez' in the fleet file; did you "
            "mean 'nodes'?");
    refused("nodes: {a: 1}\n", "fleet.yaml:1: nodes must be a list");
    refused("nodes:\n  - name: a\n    sealing_key: KEY\n    revokd: true\n",
            "fleet.yaml:4: unknown field 'revokd' in a node; did you mean "
            "'revoked'?");
    refused("nodes:\n  - name: a\n    sealing_key: KEY\n    revoked: yes\n",
            "fleet.yaml:4: revoked: 'yes' is neither true nor false");
    refused("nodes:\n  - name: a b\n    sealing_key: KEY\n",
            "fleet.yaml:2: name: 'a b' is not 1..64 bytes");
    refused("nodes:\n  - name: a\n", "fleet.yaml:2: a node needs a name and "
                                     "a sealing_key");
    refused("nodes:\n  - name: a\n    name: b\n    sealing_key: KEY\n",
            "fleet.yaml:3: 'name' appears twice in a node");
    refused("nodes:\n  - name: a\n    sealing_key: AAAA\n",
            "fleet.yaml:3: sealing_key: not a PEM public key, nor base64");
    refused("nodes:\n  - name: a\n    sealing_key: \"-----BEGIN PUBLIC "
            "KEY-----\\nxx\\n-----END PUBLIC KEY-----\\n\"\n",
            "fleet.yaml:3: sealing_key: not a PEM public key");
    refused("nodes:\n  - name: a\n    sealing_key: KEY\n"
            "  - name: a\n    sealing_key: KEY2\n",
            "fleet.yaml:4: the name 'a' is used at line 2 too");
    refused("nodes:\n  - name: a\n    sealing_key: KEY\n"
            "  - name: b\n    sealing_key: KEY\n",
            "fleet.yaml:4: 'b' has the sealing key of 'a' (line 2)");
    refused("nodes:\n  - name: a\n    sealing_key: KEY\n"
            "escrow:\n  - name: a\n    sealing_key: KEY2\n",
            "fleet.yaml:5: the name 'a' is used at line 2 too");
    refused("nodes:\n  - name: a\n    sealing_key: KEY\n"
            "    attributes: {Region: eu}\n",
            "fleet.yaml:4: 'Region' is not an attribute name");
    refused("nodes:\n  - name: a\n    sealing_key: KEY\n"
            "    attributes: {region: EU}\n",
            "fleet.yaml:4: attribute region: 'EU' is not a value");
    refused("nodes:\n  - name: a\n    sealing_key: KEY\n"
            "    attributes: [region]\n",
            "fleet.yaml:4: attributes must be a map");
    refused("nodes:\n  - name: a\n    sealing_key: KEY\n"
            "    attributes: {tier: [a, {b: c}]}\n",
            "fleet.yaml:4: attribute tier: '(not a scalar)'");
    refused("nodes:\n  - name: a\n    sealing_key: KEY\n"
            "escrow:\n  - name: e\n    sealing_key: KEY2\n    revoked: true\n",
            "fleet.yaml:7: unknown field 'revoked' in an escrow recipient");
    refused("nodes:\n  - a\n", "fleet.yaml:2: a node must be a map");
    /* an RSA public key is no sealing key */
    EVP_PKEY *rsa = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)1024);
    BIO *bio = BIO_new(BIO_s_mem());
    assert_int_equal(PEM_write_bio_PUBKEY(bio, rsa), 1);
    char *p = NULL;
    long n = BIO_get_mem_data(bio, &p);
    char *pem = strndup(p, (size_t)n);
    uint16_t kem = 0;
    uint8_t pk[KL_HPKE_MAX_ENC];
    size_t pl = 0;
    char err[256];
    assert_int_equal(kl_fleetfile_key(pem, &kem, pk, &pl, err, sizeof err),
                     KL_E_CONFIG);
    assert_non_null(strstr(err, "a sealing key is X25519 or P-256"));
    free(pem);
    BIO_free(bio);
    EVP_PKEY_free(rsa);
    /* base64 of 65 bytes that are not a point on P-256 */
    uint8_t bad[65] = {4};
    char b64[128];
    EVP_EncodeBlock((unsigned char *)b64, bad, 65);
    assert_int_equal(kl_fleetfile_key(b64, &kem, pk, &pl, err, sizeof err),
                     KL_E_CONFIG);
}

static void test_load(void **state)
{
    (void)state;
    kl_fleetfile *f = NULL;
    char err[512];
    assert_int_equal(
        kl_fleetfile_load("/nonexistent/fleet.yaml", &f, err, sizeof err),
        KL_E_CONFIG);
    assert_non_null(strstr(err, "/nonexistent/fleet.yaml: cannot open the "
                                "fleet file"));
}

int main(void)
{
    (void)suite_of; /* hpketest.h's, for the HPKE tests */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_and_select),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
