/* SPDX-License-Identifier: Apache-2.0 */
/* The test PKI and test keys: scripts/dev-pki.sh --test-extras, created once
 * per build tree in $KL_BIN_DIR/test-pki (under a lock, so parallel test
 * programs share it), plus per-test key directories and keys generated at
 * test time (P-224, P-521, RSA-4096). */
#ifndef KL_TEST_PKI_H
#define KL_TEST_PKI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>
#include <openssl/ssl.h>

/* The PKI directory, created on first use (fails the test when the script
 * fails). Files: ca.crt, server.{crt,key}, client.{crt,key}, keys/NAME.key,
 * pubkeys/NAME.pem, other-ca.crt, client-other-ca.{crt,key},
 * client-serverauth.{crt,key}. */
const char *tp_dir(void);
/* tp_dir()/rel in one of 64 rotating static buffers. */
const char *tp_path(const char *rel);

/* A fresh empty directory (mode 0700) under $KL_BIN_DIR/test-tmp, named
 * after tag; malloc'd path. */
char *tp_tempdir(const char *tag);
/* Removes a directory tree made by tp_tempdir and frees the path. */
void tp_rmtree(char *dir);

/* Copies a key file into dir (mode 0600), keeping its base name. */
void tp_copy_key(const char *dir, const char *src);
/* Generates a key into dir/name (mode 0600): alg "EC" with group "P-224"
 * etc., "RSA" with bits, or "ED25519". Returns the key (the caller frees
 * it; only its public half is used by tests). */
EVP_PKEY *tp_genkey(const char *dir, const char *name, const char *alg,
                    const char *group, unsigned bits);

/* Loads a public key (certificate or public key file); fails the test on
 * error. */
EVP_PKEY *tp_load_pub(const char *path);
/* SKI of a key per protocol P7; fails the test on error. */
void tp_ski(EVP_PKEY *pk, uint8_t ski[20]);
/* Lower-case hex of an SKI (static rotating buffer). */
const char *tp_ski_hex(const uint8_t ski[20]);

/* A TLS client context with the test PKI's NAME.crt / NAME.key (NULL:
 * "client") that verifies the server against ca.crt. Fails the test when a
 * file does not load. */
SSL_CTX *tp_client_ssl_ctx(const char *name);
/* The same, held to one TLS version (TLS1_2_VERSION, TLS1_3_VERSION), for
 * session-resumption tests: the client keeps its sessions itself
 * (SSL_get1_session), none in the context's cache. */
SSL_CTX *tp_client_resume_ctx(const char *name, int version);
/* Issues cert, a server certificate (serverAuth, localhost and
 * 127.0.0.1) for the existing private key file key, subject subj, valid for
 * days, signed by the test CA; dir holds the extensions file it uses. */
void tp_issue_server_cert(const char *dir, const char *key, const char *subj,
                          int days, const char *cert);
/* Issues dir/name.crt and dir/name.key (P-256, mode 0600): a clientAuth
 * certificate signed by the test PKI's CA `ca` ("ca" or "other-ca"), with
 * subject O=keylessd test and a CN of exactly these cnlen bytes (any bytes:
 * NUL and control characters are written as they are, as a UTF8String),
 * and, when dns is not NULL, one DNS subjectAltName of exactly dnslen
 * bytes. For the tests of hostile certificate names (docs/SECURITY.md). */
void tp_issue_client_raw(const char *dir, const char *name, const char *ca,
                         const void *cn, size_t cnlen, const void *dns,
                         size_t dnslen);
/* Issues dir/NAME.crt and dir/NAME.key (a new P-256 key, mode 0600): a
 * client certificate (clientAuth) with subject CN cn, signed by the test
 * PKI's CA ca ("ca" or "other-ca": ca.crt and ca.key in tp_dir()), valid
 * from an hour ago until seconds from now (notAfter to the second). For
 * tests of certificates that expire while connected. */
void tp_issue_client_cert(const char *dir, const char *name, const char *cn,
                          const char *ca, long seconds);

#endif
