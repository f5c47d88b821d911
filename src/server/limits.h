/* Abuse resistance (issue 10): admission of new connections under the
 * connection and handshake caps, and the process-wide settings that keep
 * key material out of core dumps and give the connection cap enough file
 * descriptors. See docs/SECURITY.md. */
#ifndef KL_SERVER_LIMITS_H
#define KL_SERVER_LIMITS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct kl_shard kl_shard;

/* Process setup, before any key is loaded: core dumps off (RLIMIT_CORE 0
 * and PR_SET_DUMPABLE 0) unless allow_core_dumps; RLIMIT_NOFILE soft limit
 * raised to the hard limit, with a warning when that cannot hold
 * max_connections plus a margin. Each step is logged when it fails; none is
 * fatal. */
void kl_limits_process_setup(bool allow_core_dumps, size_t max_connections);

/* On the shard thread, for a socket just accepted: true when it may become
 * a connection (counted as live and handshaking); false when a cap is
 * reached - the caller closes the socket at once (counted, and logged at
 * most once a second per shard). */
bool kl_limits_admit(kl_shard *s);
/* A connection finished its handshake (no longer counted as
 * handshaking). */
void kl_limits_handshake_done(kl_shard *s);
/* A connection admitted by kl_limits_admit closed; handshaking: it closed
 * before its handshake completed. */
void kl_limits_release(kl_shard *s, bool handshaking);

#endif
