/* Access lists (issue 10, docs/SECURITY.md): which client identities may
 * use which keys, beyond the mutual TLS every client passes.
 *
 * The access_file is YAML, a list of rules:
 *
 *   - clients: [cn:edge-1, san:edge-2.example.com, fp:3FA2...]
 *     keys: [ski:0123...ab, dir:/etc/keyless/keys/a, file:/etc/k/b.key]
 *   - clients: ["*"]
 *     keys: [dir:/etc/keyless/keys/shared]
 *
 * Clients: cn:NAME (the certificate's subject CN), san:NAME (any DNS,
 * e-mail, URI or IP subjectAltName, IPs as text), fp:HEX (SHA-256 of the
 * certificate's DER; colons and case ignored), "*" (every client). Keys:
 * ski:HEX (protocol P7), dir:PATH (every key loaded from a file below PATH,
 * written as in private_key_stores), file:PATH, "*" (every key). A request
 * is allowed when some rule names both the client and the key; with an
 * access file, a client no rule names may use no key. A refused request is
 * answered `key not found` (the key's existence is not revealed). At most
 * 64 rules. */
#ifndef KL_SERVER_ACL_H
#define KL_SERVER_ACL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "keys/keystore.h"
#include "tls/tls.h"

#define KL_ACL_MAX_RULES 64

typedef struct kl_acl kl_acl;

/* Reads and checks an access file. NULL with one message in err (naming
 * the file, line and problem) on failure. */
kl_acl *kl_acl_load(const char *path, char *err, size_t errlen);
/* The same from memory; name is used in messages. */
kl_acl *kl_acl_parse(const char *name, const uint8_t *text, size_t len,
                     char *err, size_t errlen);
void kl_acl_free(kl_acl *a);
size_t kl_acl_count(const kl_acl *a);

/* The rules (bit i: rule i) whose clients include the holder of this
 * certificate (DER). */
uint64_t kl_acl_match_cert(const kl_acl *a, const unsigned char *der,
                           size_t len);
/* The same for a connection's peer; 0 when a is NULL. */
uint64_t kl_acl_match_conn(const kl_acl *a, const kl_tls_conn *tls);
/* Whether one of these rules names the key; always true when a is NULL
 * (no access lists configured). */
bool kl_acl_allows(const kl_acl *a, uint64_t rules, const kl_key *key);

#endif
