/* SPDX-License-Identifier: Apache-2.0 */
/* Reconnect storm (performance issue: "10,000 clients with cached
 * sessions reconnect at once: >= 99% resumed, all served within 5 s").
 *
 *   storm -server 127.0.0.1:PORT -cert C -key K -ca CA [-n 10000]
 *         [-prime 50] [-timeout 30] [-tls12]
 *
 * 1. prime: N clients connect with full handshakes (at most -prime at
 *    once, within keylessd's handshake limits), each sends a ping, reads
 *    the pong - by then a TLS 1.3 server has sent its session tickets -
 *    keeps its session (SSL_get1_session) and closes;
 * 2. storm: all N reconnect at once offering their sessions (one thread,
 *    epoll, non-blocking), each sends a ping; a client is served when its
 *    pong arrives. A connection the server closes or refuses (its
 *    handshake limits) is retried after a short backoff, as an edge
 *    would, until -timeout. (keylessd closes none at max_handshaking: it
 *    stops accepting and the rest wait in the listen backlog.)
 * Prints one JSON object: the share resumed (SSL_session_reused), the
 * time until every client was served, percentiles of the time to be
 * served, retries, clients never served, and listen_drops: connection
 * attempts the kernel dropped during the storm because a listen backlog
 * was full (TcpExtListenDrops of the whole machine; such a client's SYN
 * is resent only after 1 s). Exit 0 when all were served. */
#include "tlsconn.h"

typedef enum { C_WAIT, C_ACTIVE, C_DONE } cstate;

typedef struct client {
    tc c;
    SSL_SESSION *sess;
    cstate st;
    bool sent_all, resumed;
    uint8_t out[32];
    size_t outlen, outoff;
    uint8_t in[2048];
    size_t inlen;
    uint64_t done_ns, retry_at;
    unsigned attempts;
} client;

typedef struct run {
    int ep;
    SSL_CTX *ctx;
    struct sockaddr_in sa;
    client *cl;
    size_t n, active, served, resumed, retries;
    size_t *waiting; /* clients to (re)start, with retry_at */
    size_t nwaiting;
    bool keep_session, offer_session;
    uint64_t rnd;
} run;

static uint64_t rnd_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static void failed_attempt(run *r, client *c, uint64_t now)
{
    tc_close(r->ep, &c->c);
    r->active--;
    r->retries++;
    c->attempts++;
    c->st = C_WAIT;
    /* 10 ms doubling to 160 ms, with jitter so retries do not come back
     * as one wave */
    unsigned shift = c->attempts < 5 ? c->attempts : 5;
    c->retry_at = now + (5000000ull << shift) + rnd_next(&r->rnd) % 10000000ull;
    r->waiting[r->nwaiting++] = (size_t)(c - r->cl);
}

static void served(run *r, client *c, uint64_t now)
{
    c->st = C_DONE;
    c->done_ns = now;
    r->served++;
    r->active--;
    if (r->keep_session) {
        SSL_SESSION_free(c->sess);
        c->sess = SSL_get1_session(c->c.ssl);
        /* a close_notify first: OpenSSL marks the session of a connection
         * freed without one as not resumable */
        (void)SSL_shutdown(c->c.ssl);
        tc_close(r->ep, &c->c);
        return;
    }
    c->resumed = SSL_session_reused(c->c.ssl);
    r->resumed += c->resumed;
    /* stays connected, as a reconnected edge does; no longer watched */
    (void)epoll_ctl(r->ep, EPOLL_CTL_DEL, c->c.fd, NULL);
    c->c.events = 0;
}

/* Advances one client as far as it goes without waiting. */
static void step(run *r, client *c, uint64_t now)
{
    int h = tc_handshake(r->ep, &c->c, r->ctx,
                         r->offer_session ? c->sess : NULL, c);
    if (h < 0) {
        failed_attempt(r, c, now);
        return;
    }
    if (h == 0)
        return;
    while (!c->sent_all) {
        ERR_clear_error();
        int w = SSL_write(c->c.ssl, c->out + c->outoff,
                          (int)(c->outlen - c->outoff));
        if (w <= 0) {
            int want = tc_want(&c->c, w);
            if (want < 0)
                failed_attempt(r, c, now);
            else
                tc_watch(r->ep, &c->c, (unsigned)want, c);
            return;
        }
        c->outoff += (size_t)w;
        c->sent_all = c->outoff == c->outlen;
    }
    for (;;) {
        ERR_clear_error();
        int n = SSL_read(c->c.ssl, c->in + c->inlen,
                         (int)(sizeof c->in - c->inlen));
        if (n <= 0) {
            int want = tc_want(&c->c, n);
            if (want < 0)
                failed_attempt(r, c, now);
            else
                tc_watch(r->ep, &c->c, (unsigned)want, c);
            return;
        }
        c->inlen += (size_t)n;
        if (c->inlen < 8)
            continue;
        size_t body = ((size_t)c->in[2] << 8) | c->in[3];
        if (8 + body > sizeof c->in) {
            failed_attempt(r, c, now);
            return;
        }
        if (c->inlen < 8 + body)
            continue;
        if (tc_opcode(c->in + 8, body) != 0xF2) { /* pong */
            failed_attempt(r, c, now);
            return;
        }
        served(r, c, now);
        return;
    }
}

static void start(run *r, client *c, uint64_t now)
{
    c->outlen = tc_ping(c->out, (uint32_t)(c - r->cl), 4);
    c->outoff = c->inlen = 0;
    c->sent_all = false;
    if (tc_connect(&c->c, &r->sa) != 0) {
        r->active++;
        failed_attempt(r, c, now);
        return;
    }
    c->st = C_ACTIVE;
    r->active++;
    tc_watch(r->ep, &c->c, EPOLLOUT, c);
}

/* Runs until every client is served or the deadline; starts at most
 * conc at once. The seconds it took. */
static double phase(run *r, size_t conc, uint64_t deadline)
{
    uint64_t t0 = tc_now_ns(), last_scan = 0;
    r->nwaiting = 0;
    r->active = r->served = r->resumed = r->retries = 0;
    for (size_t i = 0; i < r->n; i++) {
        /* one left open by a previous phase that ran out of time */
        if (r->cl[i].c.fd >= 0)
            tc_close(r->ep, &r->cl[i].c);
        r->cl[i].st = C_WAIT;
        r->cl[i].retry_at = 0;
        r->cl[i].attempts = 0;
        r->waiting[r->nwaiting++] = i;
    }
    struct epoll_event ev[256];
    while (r->served < r->n) {
        uint64_t now = tc_now_ns();
        if (now >= deadline)
            break;
        /* (re)starts due, oldest first, while there is room */
        if (r->nwaiting && r->active < conc && now - last_scan >= 2000000) {
            last_scan = now;
            size_t cnt = r->nwaiting, keep = 0;
            for (size_t k = 0; k < cnt; k++) {
                client *c = &r->cl[r->waiting[k]];
                if (r->active < conc && c->retry_at <= now)
                    start(r, c, now); /* a failure appends after cnt */
                else
                    r->waiting[keep++] = r->waiting[k];
            }
            memmove(r->waiting + keep, r->waiting + cnt,
                    (r->nwaiting - cnt) * sizeof *r->waiting);
            r->nwaiting = keep + (r->nwaiting - cnt);
        }
        int n = epoll_wait(r->ep, ev, 256, r->nwaiting ? 2 : 100);
        now = tc_now_ns();
        for (int i = 0; i < n; i++) {
            client *c = ev[i].data.ptr;
            if (c->st == C_ACTIVE)
                step(r, c, now);
        }
    }
    return (double)(tc_now_ns() - t0) / 1e9;
}

/* TcpExt ListenDrops from /proc/net/netstat (a header line of names, then
 * a line of values); -1 when unknown. */
static long long listen_drops(void)
{
    FILE *f = fopen("/proc/net/netstat", "re");
    if (!f)
        return -1;
    static char names[8192], values[8192];
    long long v = -1;
    while (fgets(names, sizeof names, f) && fgets(values, sizeof values, f)) {
        if (strncmp(names, "TcpExt:", 7) != 0)
            continue;
        char *sn, *sv;
        char *n = strtok_r(names, " \n", &sn),
             *x = strtok_r(values, " \n", &sv);
        while (n && x) {
            if (!strcmp(n, "ListenDrops")) {
                v = atoll(x);
                break;
            }
            n = strtok_r(NULL, " \n", &sn);
            x = strtok_r(NULL, " \n", &sv);
        }
        break;
    }
    fclose(f);
    return v;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void usage(void)
{
    fprintf(stderr, "usage: storm -server IP:PORT -cert FILE -key FILE -ca "
                    "FILE [-n 10000] [-prime 50] [-timeout 30] [-tls12]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *server = NULL, *cert = NULL, *key = NULL, *ca = NULL;
    long n = 10000, prime = 50, timeout = 30;
    bool tls12 = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-tls12")) {
            tls12 = true;
            continue;
        }
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (!strcmp(a, "-server"))
            server = v;
        else if (!strcmp(a, "-cert"))
            cert = v;
        else if (!strcmp(a, "-key"))
            key = v;
        else if (!strcmp(a, "-ca"))
            ca = v;
        else if (!strcmp(a, "-n"))
            n = atol(v);
        else if (!strcmp(a, "-prime"))
            prime = atol(v);
        else if (!strcmp(a, "-timeout"))
            timeout = atol(v);
        else
            usage();
    }
    if (!server || !cert || !key || !ca || n < 1 || n > 1000000 || prime < 1 ||
        timeout < 1)
        usage();
    run r = {.rnd = 0x9E3779B97F4A7C15ull ^ tc_now_ns()};
    char host[64];
    if (tc_parse_addr(server, &r.sa, host, sizeof host) != 0) {
        fprintf(stderr, "storm: -server %s: expected IPv4:PORT\n", server);
        return 2;
    }
    tc_process_setup();
    r.ctx = tc_ctx_new(cert, key, ca, host, tls12);
    r.n = (size_t)n;
    r.cl = calloc(r.n, sizeof *r.cl);
    r.waiting = calloc(2 * r.n + 1, sizeof *r.waiting);
    r.ep = epoll_create1(EPOLL_CLOEXEC);
    if (!r.ctx || !r.cl || !r.waiting || r.ep < 0) {
        fprintf(stderr, "storm: setup failed\n");
        return 1;
    }
    for (size_t i = 0; i < r.n; i++)
        r.cl[i].c.fd = -1;
    /* 1: full handshakes, sessions kept */
    r.keep_session = true;
    r.offer_session = false;
    double prime_s = phase(&r, (size_t)prime,
                           tc_now_ns() + (uint64_t)timeout * 4000000000ull);
    size_t primed = 0, resumable = 0;
    for (size_t i = 0; i < r.n; i++) {
        primed += r.cl[i].st == C_DONE;
        resumable += r.cl[i].sess && SSL_SESSION_is_resumable(r.cl[i].sess);
    }
    size_t prime_retries = r.retries;
    if (primed < r.n)
        fprintf(stderr, "storm: only %zu of %zu clients could be primed\n",
                primed, r.n);
    /* 2: everyone at once, offering the kept sessions (the line tells a
     * profiler when to start) */
    fprintf(stderr, "storm: %zu primed in %.1f s; reconnecting all at once\n",
            primed, prime_s);
    r.keep_session = false;
    r.offer_session = true;
    long long drops0 = listen_drops();
    uint64_t t0 = tc_now_ns();
    double storm_s = phase(&r, r.n, t0 + (uint64_t)timeout * 1000000000ull);
    long long drops1 = listen_drops();
    uint64_t *t = calloc(r.n, sizeof *t);
    size_t nt = 0;
    const char *version = "-";
    for (size_t i = 0; t && i < r.n; i++) {
        if (r.cl[i].st != C_DONE)
            continue;
        t[nt++] = r.cl[i].done_ns - t0;
        version = SSL_get_version(r.cl[i].c.ssl);
    }
    if (t)
        qsort(t, nt, sizeof *t, cmp_u64);
#define PCT(p) (nt ? (double)t[(size_t)((double)(nt - 1) * (p))] / 1e9 : 0)
    char all[32] = "null"; /* not every client served before -timeout */
    if (nt == r.n)
        snprintf(all, sizeof all, "%.3f", (double)t[nt - 1] / 1e9);
    printf("{\"clients\": %zu, \"primed\": %zu, \"resumable_sessions\": %zu, "
           "\"prime_s\": %.3f, \"prime_retries\": %zu, \"tls_version\": "
           "\"%s\", \"served\": %zu, \"resumed\": %zu, \"resumed_share\": "
           "%.4f, \"all_served_s\": %s, \"storm_s\": %.3f, "
           "\"served_p50_s\": %.3f, \"served_p99_s\": %.3f, \"retries\": "
           "%zu, \"never_served\": %zu, \"listen_drops\": %lld}\n",
           r.n, primed, resumable, prime_s, prime_retries, version, r.served,
           r.resumed, (double)r.resumed / (double)r.n, all, storm_s, PCT(0.5),
           PCT(0.99), r.retries, r.n - r.served,
           drops0 >= 0 && drops1 >= drops0 ? drops1 - drops0 : -1);
    for (size_t i = 0; i < r.n; i++) {
        tc_close(r.ep, &r.cl[i].c);
        SSL_SESSION_free(r.cl[i].sess);
    }
    free(t);
    free(r.cl);
    free(r.waiting);
    close(r.ep);
    SSL_CTX_free(r.ctx);
    return r.served == r.n ? 0 : 1;
}
