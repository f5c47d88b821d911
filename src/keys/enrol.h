/* SPDX-License-Identifier: Apache-2.0 */
/* The key server's own identity made locally, for activation:
 * a new ECDSA P-384 key, a certificate signing request for the server's
 * hostname, and the files that hold them, written so that a crash or a
 * full disk never leaves half a key behind. This is the only code outside
 * the key store that creates private key material, so it lives here with
 * the rest of the key handling; the Origin CA API call and
 * the startup policy are in activation/activate.h. */
#ifndef KL_KEYS_ENROL_H
#define KL_KEYS_ENROL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <openssl/evp.h>

#include "core/status.h"

/* A new ECDSA key on P-384, the key type the reference server enrols
 * with. NULL when OpenSSL fails. */
EVP_PKEY *kl_enrol_new_key(void);

/* A PEM certificate signing request for key: subject CN=hostname, one
 * subjectAltName dNSName=hostname, signed with SHA-384. *pem is malloc'd
 * and NUL-terminated. KL_E_BAD_VALUE when hostname is empty or too long
 * for a CN (64 characters). */
KL_WUR kl_status kl_enrol_make_csr(EVP_PKEY *key, const char *hostname,
                                   char **pem);

/* The private key as unencrypted PKCS#8 PEM (the form auth_key is read
 * in). *pem is secret: release it with kl_enrol_free_secret. */
KL_WUR kl_status kl_enrol_key_pem(EVP_PKEY *key, char **pem, size_t *len);
/* Wipes and frees a buffer from kl_enrol_key_pem (NULL is fine). */
void kl_enrol_free_secret(char *p, size_t len);

/* Reads an unencrypted PEM private key. NULL with a reason in err when the
 * file cannot be read or holds no usable private key. */
EVP_PKEY *kl_enrol_load_key(const char *path, char *err, size_t errlen);

/* Whether the first certificate of a PEM text was issued for key's public
 * key. KL_E_BAD_VALUE (reason in err) when the text holds no certificate
 * or the keys differ. */
KL_WUR kl_status kl_enrol_cert_matches(const char *pem, size_t len,
                                       EVP_PKEY *key, char *err, size_t errlen);

enum {
    /* Fail (KL_E_IO, EEXIST in the message) when path exists: the file is
     * published with link(2), which never replaces. Without it the file
     * is published with rename(2) over any old one. */
    KL_ENROL_NO_REPLACE = 1u,
};

/* Writes data to path atomically: a temporary file in the same directory
 * created with O_EXCL and the final mode (so a key is never readable by
 * others, not even for a moment), written, fsync'd, then published in one
 * step and the directory fsync'd. On any failure the temporary file is
 * removed and path is unchanged. err names the file and the reason. */
KL_WUR kl_status kl_enrol_write_file(const char *path, const void *data,
                                     size_t len, mode_t mode, unsigned flags,
                                     char *err, size_t errlen);

/* Keeps a copy of an existing file as "<path>.<UTC time>.bak" (a hard
 * link, so it keeps its mode and costs no space; a numbered name when that
 * exists). *backup (may be NULL) gets the name, malloc'd. KL_OK with
 * *backup NULL when path does not exist. */
KL_WUR kl_status kl_enrol_backup(const char *path, long long now, char **backup,
                                 char *err, size_t errlen);

#endif
