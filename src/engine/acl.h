/* SPDX-License-Identifier: Apache-2.0 */
/* Access lists (docs/SECURITY.md): which client identities may
 * use which keys, beyond the mutual TLS every client passes.
 *
 * The access_file is YAML, a list of rules:
 *
 *   - clients: [cn:edge-1, san:edge-2.example.com, fp:3FA2...]
 *     keys: [ski:0123...ab, dir:/etc/keyless/keys/a, file:/etc/k/b.key]
 *   - clients: ["*"]
 *     keys: [dir:/etc/keyless/keys/shared]
 *
 * Clients: cn:NAME (the certificate's first subject CN, as UTF-8), san:NAME
 * (any DNS, e-mail, URI or IP subjectAltName, IPs as text) - names are
 * compared in full length, and an entry holding a NUL byte is refused; fp:HEX
 * (SHA-256 of the certificate's DER; colons and case ignored), "*" (every
 * client). Keys: ski:HEX (protocol P7), dir:PATH (every key loaded from a file
 * below PATH, written as in private_key_stores), file:PATH, "*" (every key). A
 * request is allowed when some rule names both the client and the key; with an
 * access file, a client no rule names may use no key. A refused request is
 * answered `key not found` (the key's existence is not revealed). At most
 * 64 rules. Reloadable: a new file is parsed beside the lists in effect
 * and replaces them at once; a broken one changes nothing. */
#ifndef KL_ENGINE_ACL_H
#define KL_ENGINE_ACL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "keys/keystore.h"
#include "tls/tls.h"

#define KL_ACL_MAX_RULES 64

/* The access lists in effect: a rule set that a reload can replace while
 * the shards serve (kl_acl_replace). Rule sets are reference counted: a
 * connection keeps the set it was matched against until it is matched
 * again, so requests never take a lock unless the lists changed. */
typedef struct kl_acl kl_acl;
typedef struct kl_acl_set kl_acl_set;

/* A connection's match: the rules (bit i: rule i of set) that name its
 * client. Zero-initialised: not matched yet. Touched by one thread. */
typedef struct kl_acl_grant {
    kl_acl_set *set; /* a reference; NULL: not matched */
    uint64_t rules;
} kl_acl_grant;

/* Reads and checks an access file. NULL with one message in err (naming
 * the file, line, problem and the accepted forms) on failure. */
kl_acl *kl_acl_load(const char *path, char *err, size_t errlen);
/* The same from memory; name is used in messages. */
kl_acl *kl_acl_parse(const char *name, const uint8_t *text, size_t len,
                     char *err, size_t errlen);
void kl_acl_free(kl_acl *a);
/* Rules in effect. */
size_t kl_acl_count(const kl_acl *a);
/* Reload (any thread): a's rules become those of from, at once for new
 * matches; connections take them up at their next key request. Frees
 * from. The previous set is freed when its last connection lets go. */
void kl_acl_replace(kl_acl *a, kl_acl *from);

/* The rules in effect (bit i: rule i) whose clients include the holder of
 * this certificate (DER). */
uint64_t kl_acl_match_cert(kl_acl *a, const unsigned char *der, size_t len);
/* After a handshake: matches the connection's peer (no-op when a is
 * NULL). */
void kl_acl_grant_conn(kl_acl *a, kl_acl_grant *g, const kl_tls_conn *tls);
/* Whether the client may use the key: one of its rules names it. Always
 * true when a is NULL (no access lists configured). When the lists were
 * replaced since g was matched, the peer (tls) is matched again first. */
bool kl_acl_allows(kl_acl *a, kl_acl_grant *g, const kl_tls_conn *tls,
                   const kl_key *key);
/* The same for a key this server does not hold (forwarded to a
 * remote key server), known here by its SKI only: `ski:` and "*" rules can
 * name it, `dir:` and `file:` rules (local files) cannot. */
bool kl_acl_allows_ski(kl_acl *a, kl_acl_grant *g, const kl_tls_conn *tls,
                       const uint8_t ski[KL_SKI_LEN]);
/* The connection closed: lets go of its rule set. */
void kl_acl_grant_release(kl_acl_grant *g);

#endif
