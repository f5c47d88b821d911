/* SPDX-License-Identifier: Apache-2.0 */
/* Abuse resistance (docs/SECURITY.md "Network: before authentication"):
 * admission of new connections under the
 * connection and handshake caps (global and per source address), the
 * bytes a client may send before its handshake completes, and the process-wide
 * settings that keep key material out of core dumps and give the connection cap
 * enough file descriptors. See docs/SECURITY.md. */
#ifndef KL_ENGINE_LIMITS_H
#define KL_ENGINE_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct kl_shard kl_shard;
typedef struct kl_conn kl_conn;

/* Process setup, before any key is loaded: core dumps off (RLIMIT_CORE 0
 * and PR_SET_DUMPABLE 0) unless allow_core_dumps; RLIMIT_NOFILE soft limit
 * raised to the hard limit, with a warning when that cannot hold
 * max_connections plus a margin. Each step is logged when it fails; none is
 * fatal. Returns the number of warnings logged (--check counts them). */
size_t kl_limits_process_setup(bool allow_core_dumps, size_t max_connections);

/* Where a connection comes from, for max_handshaking_per_source: the
 * client's IPv4 address, or the /64 of its IPv6 address (one host usually
 * has a whole /64). counted: it holds a slot in the server's table. */
typedef struct kl_src {
    uint8_t addr[16];
    bool counted;
} kl_src;

/* The per-source table of connections in their handshake (one per
 * server, shared by the shards). NULL when per_source cannot bind
 * (>= max_handshaking): nothing is tracked. */
typedef struct kl_src_table kl_src_table;
kl_src_table *kl_src_table_new(uint32_t max_handshaking, uint32_t per_source,
                               bool *oom);
void kl_src_table_free(kl_src_table *t);
/* One more handshake from addr (any thread): false when it has per_source
 * already. kl_src_put gives one back; kl_src_count tells (tests). */
bool kl_src_take(kl_src_table *t, const uint8_t addr[16]);
void kl_src_put(kl_src_table *t, const uint8_t addr[16]);
uint32_t kl_src_count(kl_src_table *t, const uint8_t addr[16]);

/* What kl_limits_admit decided for a socket just accepted. */
typedef enum kl_admit {
    /* counted as live and handshaking (and against its source in *src):
     * it becomes a connection */
    KL_ADMIT_OK,
    /* max_connections, or its source's max_handshaking_per_source, is
     * reached: the caller closes the socket at once (counted, logged at
     * most once a second per shard) */
    KL_ADMIT_CLOSE,
    /* max_handshaking is reached: nothing counted; the caller keeps the
     * socket, stops accepting (the kernel's listen backlog holds the
     * next ones) and calls kl_limits_wait_slot; it asks again when its
     * loop is woken (accept back-pressure) */
    KL_ADMIT_WAIT,
} kl_admit;

/* On the shard thread, for a socket just accepted from sa. */
kl_admit kl_limits_admit(kl_shard *s, const struct sockaddr *sa, kl_src *src);
/* On the shard thread, after KL_ADMIT_WAIT made it stop accepting: its
 * loop is woken (kl_loop_wake) as soon as a handshake slot frees on any
 * shard - or at once if one freed meanwhile. */
void kl_limits_wait_slot(kl_shard *s);
/* A connection finished its handshake (no longer counted as
 * handshaking); wakes the shards waiting for a slot. */
void kl_limits_handshake_done(kl_shard *s, kl_src *src);
/* A connection admitted by kl_limits_admit closed; handshaking: it closed
 * before its handshake completed. */
void kl_limits_release(kl_shard *s, bool handshaking, kl_src *src);

/* During the handshake: true (and c closed, counted as a failed handshake,
 * logged) when the client has sent more than max_handshake_bytes without
 * completing it. */
bool kl_limits_handshake_too_big(kl_conn *c);

#endif
