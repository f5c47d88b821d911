/* SPDX-License-Identifier: Apache-2.0 */
/* Many P-256 keys for the key-store scale scenario of bench/run.sh.
 *
 *   keygen-many DIR N
 *
 * Writes N fresh P-256 private keys as DIR/NNNNNN.key (PKCS#8 PEM, mode
 * 0600, the layout keylessd's private_key_dirs reads) and DIR/skis.txt,
 * one SKI per line in hex (protocol P7: SHA-1 of the uncompressed point),
 * for keyless-bench -ski-file. DIR/skis.txt is written last, so a
 * directory that has it is complete and can be reused by the next run.
 * One process, no openssl(1) per key: 100,000 keys take seconds. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

static int fail(const char *what, const char *path)
{
    fprintf(stderr, "keygen-many: %s%s%s: %s\n", what, path ? " " : "",
            path ? path : "", errno ? strerror(errno) : "OpenSSL error");
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 3 || atol(argv[2]) < 1 || atol(argv[2]) > 10000000) {
        fprintf(stderr, "usage: keygen-many DIR N (1..10000000)\n");
        return 2;
    }
    const char *dir = argv[1];
    long n = atol(argv[2]);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return fail("cannot create", dir);
    char path[4096], tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/skis.txt.tmp", dir);
    FILE *skis = fopen(tmp, "w");
    if (!skis)
        return fail("cannot create", tmp);
    EVP_PKEY_CTX *kctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    if (!kctx || EVP_PKEY_keygen_init(kctx) != 1 ||
        EVP_PKEY_CTX_set_group_name(kctx, "P-256") != 1)
        return fail("P-256 key generation setup", NULL);
    for (long i = 0; i < n; i++) {
        EVP_PKEY *pk = NULL;
        unsigned char pt[65], md[20];
        size_t ptlen = 0;
        unsigned mdlen = 0;
        errno = 0;
        if (EVP_PKEY_keygen(kctx, &pk) != 1 ||
            EVP_PKEY_get_octet_string_param(pk,
                                            OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY,
                                            pt, sizeof pt, &ptlen) != 1 ||
            ptlen != 65 || /* uncompressed 04 || X || Y */
            EVP_Digest(pt, ptlen, md, &mdlen, EVP_sha1(), NULL) != 1)
            return fail("key generation", NULL);
        snprintf(path, sizeof path, "%s/%06ld.key", dir, i);
        FILE *f = fopen(path, "w");
        if (!f || fchmod(fileno(f), 0600) != 0 ||
            PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL) != 1 ||
            fclose(f) != 0)
            return fail("cannot write", path);
        for (unsigned k = 0; k < mdlen; k++)
            fprintf(skis, "%02x", md[k]);
        fputc('\n', skis);
        EVP_PKEY_free(pk);
    }
    EVP_PKEY_CTX_free(kctx);
    snprintf(path, sizeof path, "%s/skis.txt", dir);
    if (fclose(skis) != 0 || rename(tmp, path) != 0)
        return fail("cannot write", path);
    return 0;
}
