/* SPDX-License-Identifier: Apache-2.0 */
/* `dns:` entries resolved with their records' TTL (dns.h).
 *
 * The query goes out through res_nquery (a private resolver state per
 * call, so nothing is shared between threads and a configured name server
 * replaces those of /etc/resolv.conf for this query only); the answer is
 * read here with the bounded cursor: it comes from the
 * network. libresolv's ns_parserr would do the same, but it is a separate
 * library while res_nquery is in libc. */
#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <netdb.h>
#include <netinet/in.h>
#include <resolv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cursor.h"
#include "router/dns.h"

#define CLASS_IN 1
#define NAME_MAX_LABELS 128 /* a name is at most 255 bytes */

/* Skips a (possibly compressed) name: labels up to a zero byte or a
 * pointer, which ends the name where it stands (RFC 1035 4.1.4). */
static kl_status skip_name(kl_cursor *c)
{
    for (int i = 0; i < NAME_MAX_LABELS; i++) {
        uint8_t len;
        KL_GUARD(kl_read_u8(c, &len));
        if (len == 0)
            return KL_OK;
        if ((len & 0xC0) == 0xC0) {
            uint8_t low;
            return kl_read_u8(c, &low);
        }
        KL_ENSURE((len & 0xC0) == 0, KL_E_BAD_VALUE); /* reserved forms */
        const uint8_t *label;
        KL_GUARD(kl_read_bytes(c, len, &label));
    }
    return KL_E_BAD_VALUE;
}

static void add_addr(const char *text, char (*out)[64], size_t max, size_t *n)
{
    for (size_t i = 0; i < *n; i++)
        if (!strcmp(out[i], text))
            return;
    /* addresses from inet_ntop fit in 64 bytes (INET6_ADDRSTRLEN 46) */
    size_t len = strnlen(text, 63);
    if (*n < max) {
        memcpy(out[*n], text, len);
        out[(*n)++][len] = '\0';
    }
}

kl_status kl_rt_dns_parse(const uint8_t *msg, size_t len, uint16_t qtype,
                          char (*out)[64], size_t max, size_t *n,
                          uint32_t *min_ttl)
{
    kl_cursor c;
    kl_cursor_init(&c, msg, len);
    uint16_t id, flags, qd, an, ns, ar;
    KL_GUARD(kl_read_u16(&c, &id));
    KL_GUARD(kl_read_u16(&c, &flags));
    KL_GUARD(kl_read_u16(&c, &qd));
    KL_GUARD(kl_read_u16(&c, &an));
    KL_GUARD(kl_read_u16(&c, &ns));
    KL_GUARD(kl_read_u16(&c, &ar));
    (void)id;
    (void)ns;
    (void)ar;
    KL_ENSURE(flags & 0x8000, KL_E_BAD_VALUE);        /* QR: a response */
    KL_ENSURE((flags & 0x000F) == 0, KL_E_NOT_FOUND); /* RCODE */
    for (uint16_t i = 0; i < qd; i++) {
        uint32_t type_class;
        KL_GUARD(skip_name(&c));
        KL_GUARD(kl_read_u32(&c, &type_class));
    }
    /* parsed first, used after: a truncated answer adds nothing */
    char found[16][64];
    size_t nfound = 0;
    uint32_t ttl_min = KL_RT_DNS_NO_TTL;
    for (uint16_t i = 0; i < an; i++) {
        uint16_t type, klass, rdlen;
        uint32_t ttl;
        kl_cursor rdata;
        KL_GUARD(skip_name(&c));
        KL_GUARD(kl_read_u16(&c, &type));
        KL_GUARD(kl_read_u16(&c, &klass));
        KL_GUARD(kl_read_u32(&c, &ttl));
        KL_GUARD(kl_read_u16(&c, &rdlen));
        KL_GUARD(kl_read_sub(&c, rdlen, &rdata));
        if (ttl & 0x80000000u)
            ttl = 0; /* RFC 2181 8 */
        if (klass != CLASS_IN)
            continue;
        if (type == KL_RT_DNS_TYPE_CNAME) {
            if (ttl < ttl_min)
                ttl_min = ttl; /* the alias expires too */
            continue;
        }
        size_t want = qtype == KL_RT_DNS_TYPE_A      ? 4
                      : qtype == KL_RT_DNS_TYPE_AAAA ? 16
                                                     : 0;
        if (type != qtype || !want)
            continue;
        KL_ENSURE(rdlen == want, KL_E_BAD_VALUE);
        const uint8_t *a;
        KL_GUARD(kl_read_bytes(&rdata, want, &a));
        char text[64];
        if (!inet_ntop(want == 4 ? AF_INET : AF_INET6, a, text, sizeof text))
            return KL_E_BAD_VALUE;
        if (ttl < ttl_min)
            ttl_min = ttl;
        add_addr(text, found, sizeof found / sizeof found[0], &nfound);
    }
    for (size_t i = 0; i < nfound; i++)
        add_addr(found[i], out, max, n);
    if (nfound && ttl_min < *min_ttl)
        *min_ttl = ttl_min;
    return KL_OK;
}

/* "a.b.c.d:port" (IPv4: the resolver's name server list holds
 * sockaddr_in). */
static int server_addr(const char *server, struct sockaddr_in *sin)
{
    char host[64];
    const char *colon = strrchr(server, ':');
    size_t hl = colon ? (size_t)(colon - server) : strlen(server);
    if (hl >= sizeof host)
        return -1;
    memcpy(host, server, hl);
    host[hl] = 0;
    long port = colon ? strtol(colon + 1, NULL, 10) : 53;
    memset(sin, 0, sizeof *sin);
    sin->sin_family = AF_INET;
    sin->sin_port = htons((uint16_t)port);
    if (port <= 0 || port > 65535 ||
        inet_pton(AF_INET, host, &sin->sin_addr) != 1)
        return -1;
    return 0;
}

bool kl_rt_dns_server_valid(const char *server)
{
    struct sockaddr_in sin;
    return server_addr(server, &sin) == 0;
}

static size_t query(const char *server, int timeout_ms, const char *host,
                    uint16_t qtype, char (*out)[64], size_t max, size_t *n,
                    uint32_t *ttl)
{
    struct __res_state st;
    memset(&st, 0, sizeof st);
    if (res_ninit(&st) != 0)
        return 0;
    if (server) {
        struct sockaddr_in sin;
        if (server_addr(server, &sin) != 0) {
            res_nclose(&st);
            return 0;
        }
        st.nscount = 1;
        st.nsaddr_list[0] = sin;
    }
    /* seconds; a name server that does not answer costs retrans x retry */
    st.retrans = timeout_ms >= 1000 ? timeout_ms / 1000 : 1;
    st.retry = 2;
    uint8_t answer[4096];
    int len = res_nquery(&st, host, CLASS_IN, qtype, answer, sizeof answer);
    res_nclose(&st);
    if (len <= 0)
        return 0;
    size_t before = *n;
    if (kl_rt_dns_parse(answer, (size_t)len, qtype, out, max, n, ttl) != KL_OK)
        return 0;
    return *n - before;
}

/* A name DNS does not know may still be the system's (/etc/hosts). */
static size_t system_lookup(const char *host, char (*out)[64], size_t max)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return 0;
    size_t n = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        char text[64];
        const void *p =
            a->ai_family == AF_INET
                ? (const void *)&((struct sockaddr_in *)a->ai_addr)->sin_addr
                : (const void *)&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr;
        if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
            inet_ntop(a->ai_family, p, text, sizeof text))
            add_addr(text, out, max, &n);
    }
    freeaddrinfo(res);
    return n;
}

size_t kl_rt_dns_resolve(const char *server, int timeout_ms, const char *host,
                         char (*out)[64], size_t max, uint32_t *ttl)
{
    *ttl = KL_RT_DNS_NO_TTL;
    size_t n = 0;
    /* an address literal is not a name: nothing to ask, nothing expires */
    struct in6_addr a6;
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1 ||
        inet_pton(AF_INET6, host, &a6) == 1) {
        add_addr(host, out, max, &n);
        return n;
    }
    query(server, timeout_ms, host, KL_RT_DNS_TYPE_A, out, max, &n, ttl);
    query(server, timeout_ms, host, KL_RT_DNS_TYPE_AAAA, out, max, &n, ttl);
    if (n || server)
        return n;
    *ttl = KL_RT_DNS_NO_TTL;
    return system_lookup(host, out, max);
}
