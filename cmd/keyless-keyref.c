/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-keyref: writes and shows keyless key references, the
 * files the `keyless` OpenSSL provider loads in place of private keys.
 *
 *   keyless-keyref write (--cert FILE | --pubkey FILE) --server HOST:PORT...
 *       [--client-cert FILE --client-key FILE] [--ca FILE]
 *       [--server-name NAME] [--timeout-ms N] [--fallback-key FILE]
 *       [--bundle] [--out FILE]
 *   keyless-keyref show FILE
 *
 * --bundle writes the certificate file first and the reference after it
 * (a HAProxy-style bundle). Paths are written as given: make them absolute
 * for a server that changes directory. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/evp.h>

#include "client/verify.h"
#include "keys/keystore.h"
#include "provider/keyref_pem.h"

static int usage(void)
{
    fprintf(stderr,
            "usage: keyless-keyref write (--cert FILE | --pubkey FILE) "
            "--server HOST:PORT...\n"
            "           [--client-cert FILE --client-key FILE] [--ca FILE]\n"
            "           [--server-name NAME] [--timeout-ms N] "
            "[--fallback-key FILE]\n"
            "           [--bundle] [--out FILE]\n"
            "       keyless-keyref show FILE\n");
    return 2;
}

static int copy_file(BIO *out, const char *path)
{
    char buf[4096];
    int n, ok = 1;
    BIO *in = BIO_new_file(path, "r");
    if (!in)
        return 0;
    while ((n = BIO_read(in, buf, sizeof(buf))) > 0)
        ok &= BIO_write(out, buf, n) == n;
    BIO_free(in);
    return ok;
}

static int cmd_write(int argc, char **argv)
{
    static const struct option opts[] = {
        {"cert", required_argument, NULL, 'c'},
        {"pubkey", required_argument, NULL, 'p'},
        {"server", required_argument, NULL, 's'},
        {"client-cert", required_argument, NULL, 'C'},
        {"client-key", required_argument, NULL, 'K'},
        {"ca", required_argument, NULL, 'A'},
        {"server-name", required_argument, NULL, 'n'},
        {"timeout-ms", required_argument, NULL, 't'},
        {"fallback-key", required_argument, NULL, 'f'},
        {"bundle", no_argument, NULL, 'b'},
        {"out", required_argument, NULL, 'o'},
        {NULL, 0, NULL, 0},
    };
    kl_keyref r;
    memset(&r, 0, sizeof(r));
    const char *cert = NULL, *pub = NULL, *outpath = NULL;
    int bundle = 0, c, rc = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'c': cert = optarg; break;
        case 'p': pub = optarg; break;
        case 's':
            if (r.nservers == KL_KEYREF_MAX_SERVERS) {
                fprintf(stderr, "keyless-keyref: at most %u servers\n",
                        KL_KEYREF_MAX_SERVERS);
                return 2;
            }
            r.servers[r.nservers++] = optarg;
            break;
        case 'C': r.cert_file = optarg; break;
        case 'K': r.key_file = optarg; break;
        case 'A': r.ca_file = optarg; break;
        case 'n': r.server_name = optarg; break;
        case 't': r.timeout_ms = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'f': r.fallback_key = optarg; break;
        case 'b': bundle = 1; break;
        case 'o': outpath = optarg; break;
        default: return usage();
        }
    }
    if (optind != argc || !cert == !pub || r.nservers == 0 || (bundle && !cert))
        return usage();
    char err[512];
    EVP_PKEY *pk = NULL;
    if (kl_pubkey_load(cert ? cert : pub, &pk, err, sizeof(err)) != KL_OK) {
        fprintf(stderr, "keyless-keyref: %s\n", err);
        return 1;
    }
    BIO *out =
        outpath ? BIO_new_file(outpath, "w") : BIO_new_fp(stdout, BIO_NOCLOSE);
    kl_status s = out ? kl_keyref_set_pubkey(&r, pk) : KL_E_IO;
    if (s == KL_OK && bundle && !copy_file(out, cert))
        s = KL_E_IO;
    if (s == KL_OK)
        s = kl_keyref_write_pem(out, &r);
    if (s != KL_OK)
        fprintf(stderr, "keyless-keyref: cannot write the reference%s%s: %s\n",
                outpath ? " to " : "", outpath ? outpath : "",
                kl_status_str(s));
    else
        rc = 0;
    free(r.spki); /* the strings are argv's */
    BIO_free(out);
    EVP_PKEY_free(pk);
    return rc;
}

static void show_one(const kl_keyref *r)
{
    char hex[2 * KL_SKI_LEN + 1], desc[64], err[256];
    EVP_PKEY *pk = NULL;
    kl_ski_hex(r->ski, hex);
    printf("ski: %s\n", hex);
    for (size_t i = 0; i < r->nservers; i++)
        printf("server: %s\n", r->servers[i]);
    const char *names[] = {"client-cert", "client-key", "ca", "server-name",
                           "fallback-key"};
    const char *vals[] = {r->cert_file, r->key_file, r->ca_file, r->server_name,
                          r->fallback_key};
    for (size_t i = 0; i < 5; i++)
        if (vals[i])
            printf("%s: %s\n", names[i], vals[i]);
    if (r->timeout_ms)
        printf("timeout-ms: %u\n", r->timeout_ms);
    if (kl_keyref_pubkey(r, NULL, NULL, &pk, err, sizeof(err)) == KL_OK)
        printf("public-key: %s\n", kl_pubkey_desc(pk, desc, sizeof(desc)));
    else
        printf("public-key: INVALID (%s)\n", err);
    EVP_PKEY_free(pk);
}

static int cmd_show(const char *path)
{
    BIO *in = BIO_new_file(path, "r");
    if (!in) {
        fprintf(stderr, "keyless-keyref: cannot open %s\n", path);
        return 1;
    }
    int found = 0, rc = 0;
    for (;;) {
        kl_keyref r;
        bool is_ref;
        char err[256];
        kl_status s = kl_keyref_read_pem(in, &r, &is_ref, err, sizeof(err));
        if (s == KL_E_NOT_FOUND)
            break;
        if (s != KL_OK) {
            fprintf(stderr, "keyless-keyref: %s: %s\n", path, err);
            rc = 1;
            break;
        }
        if (is_ref) {
            show_one(&r);
            kl_keyref_clear(&r);
            found++;
        }
    }
    BIO_free(in);
    if (!found && !rc) {
        fprintf(stderr, "keyless-keyref: no key reference in %s\n", path);
        rc = 1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "write") == 0)
        return cmd_write(argc - 1, argv + 1);
    if (argc == 3 && strcmp(argv[1], "show") == 0)
        return cmd_show(argv[2]);
    return usage();
}
