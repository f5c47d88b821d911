/* SPDX-License-Identifier: Apache-2.0 */
/* The TLS 1.2 RSA key exchange check, done by the provider because the key
 * server returns the raw RSA result (protocol P4, opcode 0x01) and leaves
 * the padding to the client. RFC 5246 7.4.7.1: a premaster secret whose
 * padding or version is wrong is replaced by a random one, and nothing -
 * timing, errors, memory access pattern - may tell which happened
 * (Bleichenbacher's attack). */
#ifndef KL_PROVIDER_TLSPAD_H
#define KL_PROVIDER_TLSPAD_H

#include <stddef.h>
#include <stdint.h>

#define KLP_PREMASTER_LEN 48u

/* em is the k-byte raw decryption (k >= 59: 11 bytes of PKCS#1 framing and
 * 48 of premaster). Writes to out the premaster em carries when em is
 * 00 02 PS(non-zero) 00 M with |M| = 48 and M starting with the client
 * version (or with alt_version when it is not 0: the rollback-bug
 * workaround), and rnd otherwise - in time and memory accesses that depend
 * only on k. Returns 1 when em was accepted, 0 when rnd was used (for tests
 * only: callers must not branch on it). */
unsigned klp_tls_premaster(const uint8_t *em, size_t k, unsigned client_version,
                           unsigned alt_version,
                           const uint8_t rnd[KLP_PREMASTER_LEN],
                           uint8_t out[KLP_PREMASTER_LEN]);

#endif
