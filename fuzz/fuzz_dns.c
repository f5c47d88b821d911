/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the router's DNS answer reader (src/router/dns.c),
 * which reads responses that come from the network. Any input gives KL_OK
 * with at most max well-formed addresses, or an error with nothing added;
 * never a crash, an overread or a leak. The first byte picks the type
 * asked for (A or AAAA). */
#include <arpa/inet.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "router/dns.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size)
        return 0;
    uint16_t qtype = data[0] & 1 ? KL_RT_DNS_TYPE_AAAA : KL_RT_DNS_TYPE_A;
    char out[4][64];
    size_t n = 0;
    uint32_t ttl = KL_RT_DNS_NO_TTL;
    kl_status st = kl_rt_dns_parse(data + 1, size - 1, qtype, out, 4, &n, &ttl);
    if (st != KL_OK && (n != 0 || ttl != KL_RT_DNS_NO_TTL))
        __builtin_trap(); /* a refused answer must leave nothing behind */
    if (n > 4 || (n && ttl == KL_RT_DNS_NO_TTL))
        __builtin_trap();
    for (size_t i = 0; i < n; i++) {
        uint8_t a[16];
        if (inet_pton(qtype == KL_RT_DNS_TYPE_A ? AF_INET : AF_INET6, out[i],
                      a) != 1)
            __builtin_trap();
    }
    return 0;
}
