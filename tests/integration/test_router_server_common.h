/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the keylessd-with-router tests (test_router_server*.c): a
 * keylessd started with a routing table, tables written as files, waiting
 * for a line in a daemon's log, and a client request for an SKI. */
#ifndef KL_TEST_ROUTER_SERVER_COMMON_H
#define KL_TEST_ROUTER_SERVER_COMMON_H

#include "../tools/rtharness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

/* A keylessd holding the keys in keydir (NULL: none) and routing with the
 * table file (NULL: no routing), the test PKI's client certificate as its
 * identity toward remotes, and the extra flags (NULL-terminated, may be
 * NULL). */
static inline void rs_start(td_daemon *d, const char *name, const char *keydir,
                            const char *table, const char *const *extra)
{
    static char a_table[4400], a_cert[4400], a_key[4400];
    const char *flags[40];
    size_t n = 0;
    if (table) {
        snprintf(a_table, sizeof a_table, "--router-table=%s", table);
        snprintf(a_cert, sizeof a_cert, "--router-cert=%s",
                 tp_path("client.crt"));
        snprintf(a_key, sizeof a_key, "--router-key=%s", tp_path("client.key"));
        flags[n++] = a_table;
        flags[n++] = a_cert;
        flags[n++] = a_key;
    }
    flags[n++] = "--metrics-port=0";
    for (size_t i = 0; extra && extra[i] && n < 38; i++)
        flags[n++] = extra[i];
    flags[n] = NULL;
    td_opts o = {.name = name, .key_dirs = keydir, .extra = flags};
    td_start(d, &o);
}

/* How many times needle occurs in the daemon's log. */
static inline unsigned rs_log_count(const td_daemon *d, const char *needle)
{
    char *log = td_read_log(d);
    unsigned n = 0;
    for (const char *p = log; p && (p = strstr(p, needle)); p += strlen(needle))
        n++;
    free(log);
    return n;
}

/* Waits up to ms for the log to hold needle at least n times. */
static inline void rs_wait_log(const td_daemon *d, const char *needle,
                               unsigned n, int ms)
{
    double until = td_now_ms() + ms;
    while (td_now_ms() < until) {
        if (rs_log_count(d, needle) >= n)
            return;
        fp_sleep_ms(20);
    }
    td_dump_log(d);
    fail_msg("%s: \"%s\" not logged %u time(s) within %d ms", d->name, needle,
             n, ms);
}

/* A key directory holding one test key (keys/<name>.key); its SKI. */
static inline char *rs_keydir(const char *tag, const char *name,
                              uint8_t ski[20])
{
    char *dir = tp_tempdir(tag);
    char rel[128];
    snprintf(rel, sizeof rel, "keys/%s.key", name);
    tp_copy_key(dir, tp_path(rel));
    snprintf(rel, sizeof rel, "pubkeys/%s.pem", name);
    EVP_PKEY *pub = tp_load_pub(tp_path(rel));
    tp_ski(pub, ski);
    EVP_PKEY_free(pub);
    return dir;
}

static inline void rs_ski_of(const char *name, uint8_t ski[20])
{
    char rel[128];
    snprintf(rel, sizeof rel, "pubkeys/%s.pem", name);
    EVP_PKEY *pub = tp_load_pub(tp_path(rel));
    tp_ski(pub, ski);
    EVP_PKEY_free(pub);
}

/* An ECDSA-SHA256 signing request for ski over a fixed digest. */
static inline kl_request_spec rs_sign_spec(const uint8_t *ski)
{
    static const uint8_t digest[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    kl_request_spec s = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                         .payload = digest,
                         .payload_len = sizeof digest,
                         .ski = ski};
    return s;
}

/* Whether sig is a valid ECDSA signature over rs_sign_spec's digest by the
 * public key pubkeys/<name>.pem. */
static inline bool rs_verify(const char *name, const uint8_t *sig, size_t len)
{
    static const uint8_t digest[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    char rel[128];
    snprintf(rel, sizeof rel, "pubkeys/%s.pem", name);
    EVP_PKEY *pub = tp_load_pub(tp_path(rel));
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new(pub, NULL);
    bool ok = ctx && EVP_PKEY_verify_init(ctx) == 1 &&
              EVP_PKEY_verify(ctx, sig, len, digest, sizeof digest) == 1;
    EVP_PKEY_CTX_free(ctx);
    EVP_PKEY_free(pub);
    return ok;
}

#endif
