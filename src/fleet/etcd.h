/* SPDX-License-Identifier: Apache-2.0 */
/* A small etcd v3 client over etcd's JSON gateway (HTTP/1.1, optionally
 * with mutual TLS), with libcurl: key-value reads and writes, leases and a
 * watch over a prefix. docs/DESIGN.md "etcd client (src/fleet)" gives the
 * endpoints, the JSON shapes, the failure semantics and the limits.
 *
 * Keys and values are bytes (any bytes, NUL included). Revisions, lease
 * ids and TTLs are etcd's int64s. Every call returns a kl_status and, on a
 * failure, a sentence in err naming the endpoint and what was wrong:
 *   KL_E_TIMEOUT    no answer within the call's timeout
 *   KL_E_IO         no endpoint could be reached (each tried once)
 *   KL_E_NOT_FOUND  the key or lease does not exist; a range at a
 *                   compacted revision
 *   KL_E_BAD_VALUE  etcd refused the request (its message is in err)
 *   KL_E_TOO_LARGE  an answer larger than max_response, or a key or value
 *                   larger than etcd accepts
 *   KL_E_TRUNCATED  an answer that ends before its JSON does
 *   KL_E_KEY        an answer that is not the JSON the gateway sends
 *   KL_E_TLS        the TLS handshake failed (certificates)
 *   KL_E_CONFIG     etcd refused the user or its password, wants a user
 *                   and none is configured, or the user's roles do not
 *                   permit the call (permission denied)
 * A kl_etcd is used by one thread at a time; a watch is its own object and
 * may live on another thread than the client it was made from. */
#ifndef KL_FLEET_ETCD_H
#define KL_FLEET_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define KL_ETCD_MAX_ENDPOINTS 16
/* etcd's default --max-request-bytes is 1.5 MiB; a key or value we send
 * is held under it so the refusal is ours, with a clear message. */
#define KL_ETCD_MAX_VALUE (1536u * 1024u - 4096u)

typedef struct kl_etcd kl_etcd;

typedef struct kl_etcd_opts {
    /* "http://127.0.0.1:2379" or "https://host:2379"; tried in order, the
     * next one on a connection failure (at most KL_ETCD_MAX_ENDPOINTS) */
    const char *const *endpoints;
    size_t n_endpoints;
    /* mutual TLS (https endpoints): the CA that signed etcd's certificate,
     * and this client's certificate and key; NULL: the system CA store and
     * no client certificate */
    const char *ca_file, *cert_file, *key_file;
    int timeout_ms;         /* one call, all endpoints; 0: 5000 */
    int connect_timeout_ms; /* one endpoint's connect; 0: 1000 */
    size_t max_response;    /* bytes of one answer; 0: 16 MiB */
    /* etcd's password auth (docs/FLEET.md "etcd roles (operator's
     * setup)"): the user, and a file whose first line is its password,
     * readable by its owner only (unless password_any_mode). The file is
     * read again at each authentication, so a new password needs no
     * restart. The token etcd gives goes in an Authorization header on
     * every call and watch; one etcd refuses (expired) is replaced at
     * once. NULL user: no auth. The password and the token are never put
     * in a message. */
    const char *user, *password_file;
    bool password_any_mode;
} kl_etcd_opts;

/* The longest user name and password (bytes) and token (etcd's simple
 * tokens are about 20 bytes, its JWTs a few hundred). */
#define KL_ETCD_USER_MAX 128
#define KL_ETCD_PASSWORD_MAX 1024
#define KL_ETCD_TOKEN_MAX 2048

/* Checks a password file as kl_etcd_new does: a regular file, not
 * readable by group or others (unless any_mode), a first line of 1 to
 * KL_ETCD_PASSWORD_MAX bytes. KL_E_CONFIG with the path and the fix. */
kl_status kl_etcd_password_check(const char *path, bool any_mode, char *err,
                                 size_t errlen) KL_WUR;

/* Checks the options (URLs, files exist) and makes a client; connects
 * lazily, on the first call. */
kl_status kl_etcd_new(const kl_etcd_opts *o, kl_etcd **out, char *err,
                      size_t errlen) KL_WUR;
void kl_etcd_free(kl_etcd *c);
/* The endpoint the next call tries first (the last one that answered). */
const char *kl_etcd_endpoint(const kl_etcd *c);

typedef struct kl_etcd_kv {
    uint8_t *key, *value; /* malloc'd, each with a NUL after its length */
    size_t key_len, value_len;
    int64_t create_revision, mod_revision, version, lease;
} kl_etcd_kv;

typedef struct kl_etcd_page {
    kl_etcd_kv *kvs;
    size_t n;
    /* the store's revision when etcd answered: what a read at the latest
     * revision saw (a read at an older revision still gets the current) */
    int64_t revision;
    int64_t count; /* keys in the whole range (not only this page) */
    bool more;     /* more keys after the last one returned */
} kl_etcd_page;

void kl_etcd_kv_clear(kl_etcd_kv *kv);
void kl_etcd_page_clear(kl_etcd_page *r);

/* Writes key = value, attached to lease (0: none). *revision (may be NULL)
 * gets the store's revision after the write. */
kl_status kl_etcd_put(kl_etcd *c, const void *key, size_t key_len,
                      const void *value, size_t value_len, int64_t lease,
                      int64_t *revision, char *err, size_t errlen) KL_WUR;

/* Reads one key; KL_E_NOT_FOUND (and *revision set) when it is absent. */
kl_status kl_etcd_get(kl_etcd *c, const void *key, size_t key_len,
                      kl_etcd_kv *kv, int64_t *revision, char *err,
                      size_t errlen) KL_WUR;

/* One page of the keys that start with prefix (empty: every key), in key
 * order: at most limit keys (0: all of them, bounded by max_response),
 * after the key `after` (NULL: from the start; pass the last key of the
 * previous page), read at revision at_rev (0: the latest; pass the first
 * page's r->revision so that the pages are one snapshot). A range at a
 * compacted revision is KL_E_NOT_FOUND: start again at 0. */
kl_status kl_etcd_range(kl_etcd *c, const void *prefix, size_t prefix_len,
                        const void *after, size_t after_len, size_t limit,
                        int64_t at_rev, kl_etcd_page *r, char *err,
                        size_t errlen) KL_WUR;

/* Deletes the key (prefix false) or every key starting with it (true).
 * *deleted and *revision may be NULL. */
kl_status kl_etcd_delete(kl_etcd *c, const void *key, size_t key_len,
                         bool prefix, int64_t *deleted, int64_t *revision,
                         char *err, size_t errlen) KL_WUR;

/* Compacts the store's history up to revision (maintenance, and the tests
 * of a watch that falls behind it). */
kl_status kl_etcd_compact(kl_etcd *c, int64_t revision, char *err,
                          size_t errlen) KL_WUR;

/* A lease of ttl seconds; *id gets its id, *granted (may be NULL) the TTL
 * etcd granted (it raises TTLs below its minimum). */
kl_status kl_etcd_lease_grant(kl_etcd *c, int64_t ttl, int64_t *id,
                              int64_t *granted, char *err,
                              size_t errlen) KL_WUR;
/* Renews the lease; *ttl gets the TTL it has again. KL_E_NOT_FOUND (and
 * *ttl 0) when the lease expired or was revoked: its keys are gone. */
kl_status kl_etcd_lease_keepalive(kl_etcd *c, int64_t id, int64_t *ttl,
                                  char *err, size_t errlen) KL_WUR;
/* The seconds the lease has left (*ttl) and the TTL it was granted
 * (*granted, may be NULL); KL_E_NOT_FOUND when it is gone. */
kl_status kl_etcd_lease_ttl(kl_etcd *c, int64_t id, int64_t *ttl,
                            int64_t *granted, char *err, size_t errlen) KL_WUR;
/* Ends the lease now, deleting its keys; KL_E_NOT_FOUND when it is gone.
 * With auth on, the user needs write permission on every key attached. */
kl_status kl_etcd_lease_revoke(kl_etcd *c, int64_t id, char *err,
                               size_t errlen) KL_WUR;

/* ---- watch ----------------------------------------------------------- */

typedef enum kl_etcd_event_type {
    KL_ETCD_PUT,
    KL_ETCD_DELETE,
    /* the revision the watch wanted is compacted: changes were lost. The
     * caller re-reads the prefix (kl_etcd_range) and restarts the watch
     * from that read's revision + 1 (kl_etcd_watch_restart). mod_revision
     * is the compaction's revision. */
    KL_ETCD_COMPACTED,
} kl_etcd_event_type;

typedef struct kl_etcd_event {
    kl_etcd_event_type type;
    const uint8_t *key, *value; /* valid during the callback only */
    size_t key_len, value_len;  /* a DELETE has no value */
    int64_t mod_revision;
} kl_etcd_event;

typedef void (*kl_etcd_watch_cb)(void *arg, const kl_etcd_event *ev);

typedef struct kl_etcd_watch kl_etcd_watch;

/* A watch on every key starting with prefix, from start_rev (0: changes
 * after now). It copies what it needs from c (c may be freed after). It
 * connects on the first step. */
kl_status kl_etcd_watch_new(const kl_etcd *c, const void *prefix,
                            size_t prefix_len, int64_t start_rev,
                            kl_etcd_watch **out, char *err,
                            size_t errlen) KL_WUR;
void kl_etcd_watch_free(kl_etcd_watch *w);

/* Runs the watch for at most timeout_ms (0: only what is ready now),
 * calling cb for each event in revision order. Connects (trying each
 * endpoint) when not connected, resuming after the last revision
 * delivered. Returns KL_OK while the stream is up; after a disconnect an
 * error naming the cause (the next step reconnects: a thread calls it in a
 * loop with a backoff of its choice, an event loop from a timer or when
 * kl_etcd_watch_fd is readable). After KL_ETCD_COMPACTED it returns
 * KL_E_CLOSED until kl_etcd_watch_restart. */
kl_status kl_etcd_watch_step(kl_etcd_watch *w, int timeout_ms,
                             kl_etcd_watch_cb cb, void *arg, char *err,
                             size_t errlen) KL_WUR;
/* The revision the watch resumes from (the last delivered + 1). */
int64_t kl_etcd_watch_next_revision(const kl_etcd_watch *w);
/* Drops the stream and watches again from start_rev. */
void kl_etcd_watch_restart(kl_etcd_watch *w, int64_t start_rev);
/* The stream's socket, for an event loop (-1: not connected). */
int kl_etcd_watch_fd(const kl_etcd_watch *w);
/* True when the stream is up (its "created" answer seen). */
bool kl_etcd_watch_connected(const kl_etcd_watch *w);

/* ---- the answers' parsers (pure; etcd_json.c, fuzzed) ----------------- */

/* Each takes one JSON answer body of len bytes (not NUL-terminated). */
kl_status kl_etcd_parse_range(const char *body, size_t len, kl_etcd_page *r,
                              char *err, size_t errlen) KL_WUR;
/* A put, delete, compaction or revoke answer: the header's revision and,
 * for a delete, "deleted" (both may be NULL). */
kl_status kl_etcd_parse_write(const char *body, size_t len, int64_t *revision,
                              int64_t *deleted, char *err,
                              size_t errlen) KL_WUR;
kl_status kl_etcd_parse_lease(const char *body, size_t len, bool keepalive,
                              int64_t *id, int64_t *ttl, char *err,
                              size_t errlen) KL_WUR;
/* An error answer ({"error":..,"code":..,"message":..}) or NULL. */
typedef struct kl_etcd_error {
    int code; /* gRPC status code; -1: none */
    char message[256];
} kl_etcd_error;
bool kl_etcd_parse_error(const char *body, size_t len, kl_etcd_error *e);

/* A lease's time to live: "TTL" (-1 when it is gone) and "grantedTTL". */
kl_status kl_etcd_parse_timetolive(const char *body, size_t len, int64_t *ttl,
                                   int64_t *granted, char *err,
                                   size_t errlen) KL_WUR;
/* An authenticate answer: its "token" (printable ASCII without spaces, at
 * most KL_ETCD_TOKEN_MAX - 1 bytes) into token. */
kl_status kl_etcd_parse_auth(const char *body, size_t len, char *token,
                             size_t cap, char *err, size_t errlen) KL_WUR;

/* One message of the watch stream. */
typedef struct kl_etcd_watch_msg {
    bool created, canceled;
    int64_t revision;         /* the header's */
    int64_t compact_revision; /* > 0: the start revision was compacted */
    kl_etcd_error error;      /* code >= 0: the stream reported an error */
    size_t n_events;
    char cancel_reason[256]; /* with canceled: etcd's reason, or "" */
} kl_etcd_watch_msg;
/* Parses one message and calls cb for each event in it (cb may be NULL).
 * An event's key and value are decoded into memory freed on return. */
kl_status kl_etcd_parse_watch(const char *body, size_t len,
                              kl_etcd_watch_msg *m, kl_etcd_watch_cb cb,
                              void *arg, char *err, size_t errlen) KL_WUR;

/* Base64 (RFC 4648, padded) as the gateway carries bytes. */
char *kl_etcd_b64(const void *data, size_t len);
kl_status kl_etcd_unb64(const char *s, size_t slen, uint8_t **out,
                        size_t *out_len);

#endif
