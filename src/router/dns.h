/* SPDX-License-Identifier: Apache-2.0 */
/* DNS for the routing table's `dns:` entries: the A and AAAA
 * records of a name together with their TTL, so that the router re-resolves
 * a name when its record expires rather than on a fixed interval.
 * getaddrinfo() does not report TTLs: the query goes through the resolver
 * library (res_nquery, glibc's libc) and the answer is read here. Blocking:
 * the control thread calls it, never the router or a shard thread. */
#ifndef KL_ROUTER_DNS_H
#define KL_ROUTER_DNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define KL_RT_DNS_NO_TTL UINT32_MAX /* no record seen (e.g. /etc/hosts) */
#define KL_RT_DNS_TYPE_A 1
#define KL_RT_DNS_TYPE_CNAME 5
#define KL_RT_DNS_TYPE_AAAA 28

/* Reads a DNS response (RFC 1035 section 4.1): appends the addresses of
 * its answer records of type qtype (A or AAAA, class IN) to out as text,
 * skipping ones already there (*n in: how many out holds; out: after),
 * and lowers *min_ttl to the smallest TTL of the answer records it used
 * and of the CNAMEs leading to them (RFC 2181 section 8: a TTL with the top
 * bit set counts as 0). KL_E_PARSE for a message that is not a well-formed
 * response; KL_E_NOT_FOUND for a response with an error code (NXDOMAIN,
 * SERVFAIL...). A well-formed response without such records is KL_OK
 * with nothing added. */
KL_WUR kl_status kl_rt_dns_parse(const uint8_t *msg, size_t len, uint16_t qtype,
                                 char (*out)[64], size_t max, size_t *n,
                                 uint32_t *min_ttl);

/* Whether server is a name server address kl_rt_dns_resolve takes. */
bool kl_rt_dns_server_valid(const char *server);

/* Resolves host's A and AAAA records; fills up to max addresses and sets
 * *ttl to the smallest TTL among them (KL_RT_DNS_NO_TTL when they came
 * from getaddrinfo: a name DNS does not answer for, as in /etc/hosts).
 * server: "a.b.c.d:port" of the name server to ask instead of those of
 * /etc/resolv.conf (then there is no getaddrinfo fallback), or NULL.
 * timeout_ms: per query. Returns how many addresses (0: failed). */
size_t kl_rt_dns_resolve(const char *server, int timeout_ms, const char *host,
                         char (*out)[64], size_t max, uint32_t *ttl);

#endif
