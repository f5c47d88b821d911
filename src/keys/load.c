/* SPDX-License-Identifier: Apache-2.0 */
/* Loading key files and directories into the store.
 * Startup rule: the first key that fails stops the load, reported by path
 * and reason. Key files that group or others can read are refused unless
 * the operator opts in; key directories that group or others can write are
 * refused (docs/OPERATIONS.md "Key files"). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>

#include "core/log.h"
#include "keys/store.h"

/* The largest RSA-8192 PEM with a certificate chain beside it is far
 * below this; anything bigger is not a key file. */
#define MAX_KEY_FILE (1u << 20)
/* Directory nesting we follow before calling it a mistake. */
#define MAX_DEPTH 32

static const char KEY_SUFFIX[] = ".key";
static const char SEALED_SUFFIX[] = ".sealed"; /* docs/SEALING.md */

/* Reads the whole file; the caller wipes and frees *buf. */
kl_status kl_keystore_read_file(kl_keystore *ks, const char *path,
                                bool any_mode, uint8_t **buf, size_t *len)
{
    /* O_NONBLOCK: a FIFO named x.key must not hang the load. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        kl_keystore_report(ks, KL_LOG_ERROR, path, "cannot open: %s",
                           strerror(errno));
        return KL_E_KEY;
    }
    struct stat st;
    kl_status s = KL_E_KEY;
    uint8_t *b = NULL;
    if (fstat(fd, &st) != 0) {
        kl_keystore_report(ks, KL_LOG_ERROR, path, "cannot stat: %s",
                           strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        kl_keystore_report(ks, KL_LOG_ERROR, path, "not a regular file");
    } else if ((st.st_mode & (S_IRGRP | S_IROTH)) && !any_mode &&
               !ks->opts.allow_group_readable) {
        kl_keystore_report(
            ks, KL_LOG_ERROR, path,
            "key file is readable by %s (mode %03o): run chmod 600 on it, "
            "or allow group-readable key files in the configuration",
            (st.st_mode & S_IROTH) ? "others" : "its group",
            (unsigned)(st.st_mode & 0777));
    } else if (st.st_size > MAX_KEY_FILE) {
        kl_keystore_report(ks, KL_LOG_ERROR, path,
                           "file is %lld bytes, too large for a key file",
                           (long long)st.st_size);
    } else if (!(b = OPENSSL_malloc((size_t)st.st_size + 1))) {
        s = KL_E_NOMEM;
    } else {
        size_t got = 0, want = (size_t)st.st_size;
        ssize_t r = 1;
        while (got < want && (r = read(fd, b + got, want - got)) != 0) {
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0)
                break;
            got += (size_t)r;
        }
        if (r < 0) {
            kl_keystore_report(ks, KL_LOG_ERROR, path, "cannot read: %s",
                               strerror(errno));
        } else {
            *buf = b;
            *len = got;
            b = NULL;
            s = KL_OK;
        }
    }
    if (b)
        OPENSSL_clear_free(b, (size_t)st.st_size + 1);
    close(fd);
    return s;
}

/* --check: a key that decodes may still be corrupt (a private part that
 * does not match its public part); verify the pair once. */
static kl_status pairwise_check(kl_keystore *ks, EVP_PKEY *pkey,
                                const char *path)
{
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_pkey(NULL, pkey, NULL);
    int ok = ctx && EVP_PKEY_pairwise_check(ctx) == 1;
    EVP_PKEY_CTX_free(ctx);
    ERR_clear_error();
    if (!ok) {
        kl_keystore_report(ks, KL_LOG_ERROR, path,
                           "the private and public parts of the key do not "
                           "match (corrupt key file)");
        return KL_E_KEY;
    }
    return KL_OK;
}

static int ends_with(const char *s, size_t n, const char *suffix);

kl_status kl_keystore_add_file(kl_keystore *ks, const char *path)
{
    KL_ENSURE(ks != NULL && path != NULL, KL_E_KEY);
    if (ends_with(path, strlen(path), SEALED_SUFFIX))
        return kl_keystore_add_sealed(ks, path);
    if (!ks->decoder && !(ks->decoder = kl_key_decoder_new()))
        return KL_E_NOMEM;
    uint8_t *buf = NULL;
    size_t len = 0;
    KL_GUARD(kl_keystore_read_file(ks, path, false, &buf, &len));

    EVP_PKEY *pkey = NULL;
    kl_key_info info;
    char why[KL_KEY_WHY_LEN];
    kl_status s = kl_key_decode_buffer(ks->decoder, buf, len, &pkey, &info, why,
                                       sizeof why);
    OPENSSL_clear_free(buf, len + 1);
    if (s == KL_E_KEY) {
        /* a key another provider holds (a TPM's "TSS2 PRIVATE KEY"):
         * its decoders, through OSSL_STORE; else the decoder's reason */
        char pwhy[KL_KEY_WHY_LEN];
        kl_status ps = kl_keystore_add_provider_key(ks, path, path, true, pwhy,
                                                    sizeof pwhy);
        if (ps == KL_OK)
            return KL_OK;
        /* a provider read a key there but it is not usable: say why */
        if (ps == KL_E_KEY && strncmp(pwhy, "no private key", 14) != 0 &&
            strncmp(pwhy, "not a key of another", 20) != 0) {
            kl_keystore_report(ks, KL_LOG_ERROR, path, "%s", pwhy);
            return ps;
        }
    }
    if (s != KL_OK) {
        kl_keystore_report(ks, KL_LOG_ERROR, path, "%s", why);
        return s;
    }
    if (ks->opts.check_mode && pairwise_check(ks, pkey, path) != KL_OK) {
        EVP_PKEY_free(pkey);
        return KL_E_KEY;
    }
    return kl_keystore_insert(ks, pkey, &info, path);
}

static int ends_with(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Entry names of a directory, sorted so that load order (and so which of
 * two duplicate keys is kept) does not depend on the file system. */
static kl_status list_dir(kl_keystore *ks, const char *dir, char ***names,
                          size_t *count)
{
    DIR *d = opendir(dir);
    if (!d) {
        kl_keystore_report(ks, KL_LOG_ERROR, dir, "cannot open directory: %s",
                           strerror(errno));
        return KL_E_IO;
    }
    char **v = NULL;
    size_t n = 0, cap = 0;
    kl_status s = KL_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **nv = realloc(v, nc * sizeof *nv);
            if (!nv) {
                s = KL_E_NOMEM;
                break;
            }
            v = nv;
            cap = nc;
        }
        if (!(v[n] = strdup(e->d_name))) {
            s = KL_E_NOMEM;
            break;
        }
        n++;
    }
    closedir(d);
    if (s != KL_OK) {
        for (size_t i = 0; i < n; i++)
            free(v[i]);
        free(v);
        return s;
    }
    if (n)
        qsort(v, n, sizeof *v, by_name);
    *names = v;
    *count = n;
    return KL_OK;
}

/* A key directory that group or others can write lets them add or replace
 * keys: refused like a key file they can read (docs/OPERATIONS.md "Key
 * files"). */
static kl_status check_dir_mode(kl_keystore *ks, const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return KL_OK; /* list_dir says what is wrong */
    if (!(st.st_mode & (S_IWGRP | S_IWOTH)))
        return KL_OK;
    kl_keystore_report(ks, KL_LOG_ERROR, dir,
                       "key directory is writable by %s (mode %03o), who "
                       "could add or replace keys: run chmod 700 on it (750 "
                       "to let a group read it)",
                       (st.st_mode & S_IWOTH) ? "others" : "its group",
                       (unsigned)(st.st_mode & 0777));
    return KL_E_KEY;
}

static kl_status walk(kl_keystore *ks, const char *dir, int depth)
{
    if (depth > MAX_DEPTH) {
        kl_keystore_report(ks, KL_LOG_ERROR, dir,
                           "directories nested more than %d deep", MAX_DEPTH);
        return KL_E_IO;
    }
    KL_GUARD(check_dir_mode(ks, dir));
    char **names = NULL;
    size_t n = 0;
    KL_GUARD(list_dir(ks, dir, &names, &n));
    kl_status s = KL_OK;
    char path[4096];
    for (size_t i = 0; i < n && s == KL_OK; i++) {
        const char *name = names[i];
        size_t nlen = strlen(name);
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >=
            sizeof path) {
            kl_keystore_report(ks, KL_LOG_ERROR, dir, "path too long: %s",
                               name);
            s = KL_E_IO;
            break;
        }
        struct stat st;
        if (lstat(path, &st) != 0)
            continue; /* vanished while we looked */
        /* Real subdirectories only: a symlinked directory could loop. */
        if (S_ISDIR(st.st_mode)) {
            s = walk(ks, path, depth + 1);
            if (s != KL_OK && s != KL_E_NOMEM && ks->opts.skip_bad_keys)
                s = KL_OK; /* reported; the other directories still load */
        } else if (ends_with(name, nlen, KEY_SUFFIX) ||
                   ends_with(name, nlen, SEALED_SUFFIX)) {
            s = kl_keystore_add_file(ks, path);
            if (s != KL_OK && s != KL_E_NOMEM && ks->opts.skip_bad_keys)
                s = KL_OK; /* reported by add_file; keep walking */
        } else if (ks->opts.check_mode && strstr(name, KEY_SUFFIX)) {
            kl_keystore_report(ks, KL_LOG_WARN, path,
                               "not loaded: keylessd loads only files whose "
                               "name ends in \".key\"");
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return s;
}

kl_status kl_keystore_add_dir(kl_keystore *ks, const char *dir)
{
    KL_ENSURE(ks != NULL && dir != NULL, KL_E_KEY);
    return walk(ks, dir, 0);
}
