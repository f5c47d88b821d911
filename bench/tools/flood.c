/* SPDX-License-Identifier: Apache-2.0 */
/* Client floods for the memory scenario of bench/run.sh (performance
 * issue: "memory under any client behaviour (floods included): bounded
 * by configuration; <= 200 MB by default"). One thread, epoll.
 *
 *   flood -mode tcp|pipeline|oversized -server IP:PORT [-n N]
 *         [-duration S (or until SIGINT)] [-cert C -key K -ca CA]
 *         [-ski HEX] [-conc 50] [-bind SOURCE-IP]
 *
 *   tcp        N TCP connections that never start TLS (held until the
 *              server closes them or -duration ends)
 *   pipeline   N mutual-TLS connections, each writing ECDSA-SHA256
 *              requests for -ski as fast as the server takes them and
 *              never reading an answer
 *   oversized  N mutual-TLS connections, each writing the largest frames
 *              there are - pings with a 65,528-byte payload, a 64 KiB
 *              message each way - and never reading the pongs
 * TLS connections are opened at most -conc at a time (keylessd's
 * handshake limits); -bind gives them a source address of their own
 * (127.0.0.2 ...: another source for keylessd's per-source limit). Prints one
 * line: connections established, frames and bytes written, connections the
 * server closed. */
#include "tlsconn.h"

enum { F_TCP, F_PIPELINE, F_OVERSIZED };

static volatile sig_atomic_t stop; /* SIGINT/SIGTERM: report and end */

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

typedef struct fconn {
    tc c;
    size_t off; /* into the frame being written */
    bool flooding;
} fconn;

typedef struct flood {
    int mode, ep;
    SSL_CTX *ctx;
    struct sockaddr_in sa;
    fconn *fc;
    size_t n, started, handshaking, established, closed, refused;
    uint64_t frames, bytes;
    uint8_t *frame;
    size_t framelen;
} flood;

static void lost(flood *f, fconn *c)
{
    if (c->c.state == TC_CONNECTING || c->c.state == TC_HANDSHAKE) {
        f->handshaking--;
        f->refused++;
    } else {
        f->closed++;
    }
    tc_close(f->ep, &c->c);
}

static void pump(flood *f, fconn *c)
{
    /* a bounded turn (256 KiB), so that a server that keeps reading one
     * connection does not keep the loop from the others and the clock;
     * level-triggered EPOLLOUT brings it back */
    for (size_t turn = 0; turn < 262144;) {
        ERR_clear_error();
        int w =
            SSL_write(c->c.ssl, f->frame + c->off, (int)(f->framelen - c->off));
        if (w <= 0) {
            int want = tc_want(&c->c, w);
            if (want < 0)
                lost(f, c);
            else
                tc_watch(f->ep, &c->c, (unsigned)want, c);
            return;
        }
        f->bytes += (size_t)w;
        turn += (size_t)w;
        c->off += (size_t)w;
        if (c->off == f->framelen) {
            c->off = 0;
            f->frames++;
        }
    }
    tc_watch(f->ep, &c->c, EPOLLOUT, c);
}

static void on_event(flood *f, fconn *c, unsigned ev)
{
    if (f->mode == F_TCP) {
        if (c->c.state == TC_CONNECTING) {
            int err = 0;
            socklen_t l = sizeof err;
            if (getsockopt(c->c.fd, SOL_SOCKET, SO_ERROR, &err, &l) != 0 ||
                err) {
                lost(f, c);
                return;
            }
            c->c.state = TC_READY;
            f->handshaking--;
            f->established++;
            tc_watch(f->ep, &c->c, EPOLLIN | EPOLLRDHUP, c);
            return;
        }
        if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
            char b[64];
            if (read(c->c.fd, b, sizeof b) <= 0)
                lost(f, c);
        }
        return;
    }
    if (!c->flooding) {
        int h = tc_handshake(f->ep, &c->c, f->ctx, NULL, c);
        if (h < 0) {
            lost(f, c);
            return;
        }
        if (h == 0)
            return;
        c->flooding = true;
        f->handshaking--;
        f->established++;
    }
    pump(f, c);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: flood -mode tcp|pipeline|oversized -server IP:PORT [-n N] "
            "[-duration S] [-cert F -key F -ca F] [-ski HEX] [-conc N] "
            "[-bind SOURCE-IP]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *server = NULL, *cert = NULL, *key = NULL, *ca = NULL,
               *mode = NULL, *ski_hex = NULL;
    long n = 100, duration = 10, conc = 50;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "-server"))
            server = v;
        else if (!strcmp(a, "-cert"))
            cert = v;
        else if (!strcmp(a, "-key"))
            key = v;
        else if (!strcmp(a, "-ca"))
            ca = v;
        else if (!strcmp(a, "-mode"))
            mode = v;
        else if (!strcmp(a, "-ski"))
            ski_hex = v;
        else if (!strcmp(a, "-n"))
            n = atol(v);
        else if (!strcmp(a, "-duration"))
            duration = atol(v);
        else if (!strcmp(a, "-conc"))
            conc = atol(v);
        else if (!strcmp(a, "-bind")) {
            tc_source.sin_family = AF_INET;
            if (inet_pton(AF_INET, v, &tc_source.sin_addr) != 1)
                usage();
        } else
            usage();
    }
    if (argc % 2 == 0 || !server || !mode || n < 1 || n > 1000000 ||
        duration < 1 || conc < 1)
        usage();
    flood f = {.n = (size_t)n};
    if (!strcmp(mode, "tcp"))
        f.mode = F_TCP;
    else if (!strcmp(mode, "pipeline"))
        f.mode = F_PIPELINE;
    else if (!strcmp(mode, "oversized"))
        f.mode = F_OVERSIZED;
    else
        usage();
    char host[64];
    if (tc_parse_addr(server, &f.sa, host, sizeof host) != 0) {
        fprintf(stderr, "flood: -server %s: expected IPv4:PORT\n", server);
        return 2;
    }
    tc_process_setup();
    if (f.mode != F_TCP) {
        if (!cert || !key || !ca) {
            fprintf(stderr, "flood: -mode %s needs -cert, -key and -ca\n",
                    mode);
            return 2;
        }
        if (!(f.ctx = tc_ctx_new(cert, key, ca, host, false)))
            return 1;
        f.frame = malloc(65536 + 8);
        if (!f.frame)
            return 1;
        if (f.mode == F_PIPELINE) {
            uint8_t ski[20], dg[32];
            if (!ski_hex || tc_hex20(ski_hex, ski) != 0) {
                fprintf(stderr, "flood: -mode pipeline needs -ski HEX (40 "
                                "digits) of a key the server has\n");
                return 2;
            }
            memset(dg, 0x5a, sizeof dg);
            f.framelen = tc_sign(f.frame, 0, ski, dg);
        } else {
            f.framelen = tc_ping(f.frame, 0, 65535 - 7);
        }
    }
    /* TCP connects need no handshake slot: all at once */
    if (f.mode == F_TCP)
        conc = n;
    f.fc = calloc(f.n, sizeof *f.fc);
    f.ep = epoll_create1(EPOLL_CLOEXEC);
    if (!f.fc || f.ep < 0)
        return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    uint64_t t0 = tc_now_ns(), end = t0 + (uint64_t)duration * 1000000000ull;
    struct epoll_event ev[256];
    while (tc_now_ns() < end && !stop) {
        while (f.started < f.n && f.handshaking < (size_t)conc) {
            fconn *c = &f.fc[f.started++];
            if (tc_connect(&c->c, &f.sa) != 0) {
                f.refused++;
                c->c.state = TC_CLOSED;
                continue;
            }
            f.handshaking++;
            tc_watch(f.ep, &c->c, EPOLLOUT, c);
        }
        int k = epoll_wait(f.ep, ev, 256, 100);
        for (int i = 0; i < k; i++) {
            fconn *c = ev[i].data.ptr;
            if (c->c.state != TC_CLOSED)
                on_event(&f, c, ev[i].events);
        }
    }
    printf("flood %s: %zu connections tried, %zu established, %zu refused or "
           "failed before established, %zu closed by the server later; %llu "
           "frames (%llu bytes) written in %.1fs\n",
           mode, f.n, f.established, f.refused, f.closed,
           (unsigned long long)f.frames, (unsigned long long)f.bytes,
           (double)(tc_now_ns() - t0) / 1e9);
    fflush(stdout);
    for (size_t i = 0; i < f.n; i++)
        if (f.fc[i].c.state != TC_CLOSED && f.fc[i].c.state != TC_IDLE)
            tc_close(f.ep, &f.fc[i].c);
    free(f.fc);
    free(f.frame);
    close(f.ep);
    SSL_CTX_free(f.ctx);
    return 0;
}
