/* SPDX-License-Identifier: Apache-2.0 */
/* Keyless key references (docs/PROVIDER.md "The key reference"): the small file
 * that stands in for a private key. It names the key (SKI, protocol P7), the
 * key servers and the client TLS files, and carries the public key, so a TLS
 * terminator can match it to its certificate without holding the private key.
 *
 * On disk it is a PEM block with its own label:
 *
 *   -----BEGIN KEYLESS KEY REFERENCE-----
 *   (base64 of the body below)
 *   -----END KEYLESS KEY REFERENCE-----
 *
 * alone in a file or after the certificate in a HAProxy-style bundle. No PEM
 * headers: OpenSSL 3.0's own PEM decoder treats any header block longer than
 * ten characters as encryption parameters and fails hard on it, which would
 * stop PEM_read_bio_PrivateKey before our decoder is asked.
 *
 * Body: the magic "KLR1", then items `tag (1) | length (2, big-endian) |
 * value` as on the wire (protocol P3), in any order:
 *   0x01 SKI (20 bytes, required)      0x02 key server "host:port" (1..8)
 *   0x03 client certificate file       0x04 client key file
 *   0x05 CA file for the key servers   0x06 server name to check
 *   0x07 timeout in ms (4 bytes)       0x08 local fallback key file
 *   0x09 public key, DER SubjectPublicKeyInfo (required)
 * Tags below 0x80 are understood or the reference is refused (a newer file
 * must not be half-read); tags from 0x80 up are optional and skipped. A tag
 * other than 0x02 may appear once. Strings are 1..4095 bytes without NUL.
 * The parser is pure (no I/O, no OpenSSL) and fuzzed (fuzz/fuzz_keyref.c). */
#ifndef KL_PROVIDER_KEYREF_H
#define KL_PROVIDER_KEYREF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "keyless/protocol.h"

#define KL_KEYREF_PEM_LABEL "KEYLESS KEY REFERENCE"
#define KL_KEYREF_MAGIC "KLR1"
#define KL_KEYREF_MAX_SERVERS 8u
#define KL_KEYREF_MAX_STRING 4095u
/* A body larger than this is refused before it is parsed. */
#define KL_KEYREF_MAX_BODY 65536u

enum kl_keyref_tag {
    KL_KREF_SKI = 0x01,
    KL_KREF_SERVER = 0x02,
    KL_KREF_CERT = 0x03,
    KL_KREF_KEY = 0x04,
    KL_KREF_CA = 0x05,
    KL_KREF_SERVER_NAME = 0x06,
    KL_KREF_TIMEOUT = 0x07,
    KL_KREF_FALLBACK = 0x08,
    KL_KREF_SPKI = 0x09,
};

typedef struct kl_keyref {
    uint8_t ski[KL_SKI_LEN];
    size_t nservers;
    char *servers[KL_KEYREF_MAX_SERVERS];
    char *cert_file, *key_file, *ca_file; /* NULL when absent */
    char *server_name;
    char *fallback_key;  /* local key used only while no server answers */
    uint32_t timeout_ms; /* 0: the provider's default */
    uint8_t *spki;       /* DER SubjectPublicKeyInfo */
    size_t spki_len;
} kl_keyref;

/* Parses a body (the bytes under the PEM armour). On success *out owns
 * malloc'd copies (free with kl_keyref_clear); on failure *out is cleared
 * and err says what is wrong. KL_E_BAD_VALUE for every malformed input,
 * KL_E_NOMEM when out of memory. */
KL_WUR kl_status kl_keyref_parse(const uint8_t *buf, size_t len, kl_keyref *out,
                                 char *err, size_t errlen);

/* Encodes *r (which must carry an SKI, a server and a public key) into a
 * malloc'd body. KL_E_BAD_VALUE for a reference that would not parse back,
 * KL_E_TOO_LARGE beyond KL_KEYREF_MAX_BODY. */
KL_WUR kl_status kl_keyref_encode(const kl_keyref *r, uint8_t **out,
                                  size_t *out_len);

/* Frees what the reference owns and zeroes it. NULL is fine. */
void kl_keyref_clear(kl_keyref *r);

#endif
