/* SPDX-License-Identifier: Apache-2.0 */
/* faultproxy: a fault-injection TCP proxy for tests. It lets
 * several "data centres" run on one machine with realistic round trips,
 * since kernel netem is not available here.
 *
 *   faultproxy --target HOST:PORT [--listen PORT] [--port-file F]
 *              [--control F] [--stats F] [--latency MS]
 *              [--listen-netns F] [--target-netns F]
 *
 * It listens on 127.0.0.1 (port 0: any; the port is written to --port-file
 * once listening) and forwards every connection to the target as raw TCP,
 * so TLS passes through untouched. Faults, all changeable at run time by
 * rewriting the control file (re-read within ~10 ms of a change; write it
 * to a temporary name and rename it over, tests/tools/fpctl.h does):
 *
 *   latency_up_ms=N     delay client->target bytes by N ms
 *   latency_down_ms=N   delay target->client bytes by N ms
 *   latency_ms=N        both of the above
 *   jitter_ms=N         add 0..N ms per chunk (order is kept)
 *   bandwidth_kbps=N    per connection and direction (0: unlimited)
 *   blackhole=0|1       accept and read, forward nothing (bytes vanish)
 *   refuse=0|1          close new connections at once
 *   drop=N              a counter: each increase resets every connection
 *   target_port=N       new connections go to this port on the target host
 *                       (a restarted server behind the same address)
 *
 * Latency is applied per chunk with a timestamp (a delay queue per
 * direction), never by sleeping: a chunk read at t leaves at t + latency,
 * and a timerfd wakes the loop at the earliest due time. Buffers are
 * bounded: a direction that holds QUEUE_MAX bytes stops reading its source
 * (TCP backpressure) until it drains.
 *
 * --listen-netns and --target-netns (a network namespace's file, e.g.
 * /run/netns/NAME; root only) put the listening socket, or the sockets
 * toward the target, in that namespace instead of the proxy's own: one
 * proxy joins two namespaces that share no interface, which is how
 * bench/fleet-sim gives each pair of regions its own round trip with the
 * same advertised address everywhere (docs/FLEET.md "The fleet
 * simulation").
 *
 * The stats file (rewritten atomically when something changed, at most
 * every 20 ms) holds "accepted= active= bytes_up= bytes_down=
 * bytes_blackholed=" - bytes_up counts bytes delivered to the target,
 * which is how tests prove that no byte reached a server. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#define QUEUE_MAX (1024u * 1024u) /* bytes held per direction */
#define READ_CHUNK (64u * 1024u)
#define READS_PER_EVENT 4
#define POLL_CONTROL_NS (10ull * 1000000ull)
#define STATS_EVERY_NS (20ull * 1000000ull)

typedef struct chunk {
    struct chunk *next;
    uint64_t due_ns;
    size_t len, off;
    bool eof; /* the source closed: shut the destination down */
    uint8_t data[];
} chunk;

typedef struct conn conn;

/* One direction of a connection: bytes read from src wait in the queue
 * until due, then are written to dst. */
typedef struct dir {
    conn *c;
    int up; /* 1: client->target */
    chunk *head, *tail;
    size_t queued;
    uint64_t last_due;
    bool src_eof;
    bool dst_shut;
    double tokens; /* bandwidth bucket, bytes */
    uint64_t tokens_ns;
} dir;

struct conn {
    conn *prev, *next;
    int cfd, tfd; /* client side, target side */
    bool connected;
    dir d[2];          /* [0] up (client->target), [1] down */
    unsigned cev, tev; /* registered epoll interest */
    bool dead;
};

/* epoll data: which socket of which connection (or the listener / timer). */
typedef struct ref {
    int kind; /* 0 listener, 1 timer, 2 client side, 3 target side */
    conn *c;
} ref;

typedef struct cfg {
    unsigned lat_up, lat_down, jitter, kbps;
    bool blackhole, refuse;
    unsigned long drop;
    unsigned target_port; /* 0: the command line's */
} cfg;

static cfg g;
static int epfd, lfd, timer_fd;
static conn *conns;
static struct sockaddr_in target;
static const char *control_path, *stats_path;
static struct stat control_st;
static unsigned long long n_accepted, n_active, bytes_up, bytes_down,
    bytes_hole;
static bool stats_dirty = true;
static volatile sig_atomic_t stop;
static uint64_t rnd = 0x9e3779b97f4a7c15ull;
static ref listen_ref = {0, NULL}, timer_ref = {1, NULL};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t random64(void)
{
    rnd ^= rnd << 13;
    rnd ^= rnd >> 7;
    rnd ^= rnd << 17;
    return rnd;
}

static void die(const char *what)
{
    fprintf(stderr, "faultproxy: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* ---- control and stats files ------------------------------------------ */

static void apply_line(cfg *c, const char *key, unsigned long v)
{
    if (!strcmp(key, "latency_ms"))
        c->lat_up = c->lat_down = (unsigned)v;
    else if (!strcmp(key, "latency_up_ms"))
        c->lat_up = (unsigned)v;
    else if (!strcmp(key, "latency_down_ms"))
        c->lat_down = (unsigned)v;
    else if (!strcmp(key, "jitter_ms"))
        c->jitter = (unsigned)v;
    else if (!strcmp(key, "bandwidth_kbps"))
        c->kbps = (unsigned)v;
    else if (!strcmp(key, "blackhole"))
        c->blackhole = v != 0;
    else if (!strcmp(key, "refuse"))
        c->refuse = v != 0;
    else if (!strcmp(key, "drop"))
        c->drop = v;
    else if (!strcmp(key, "target_port"))
        c->target_port = v <= 65535 ? (unsigned)v : 0;
    else
        fprintf(stderr, "faultproxy: control: unknown key %s\n", key);
}

static void drop_all(void);

/* Re-reads the control file when its inode, size or mtime changed. Keys
 * absent from the file keep the command line's values (latency only) or
 * 0. */
static void poll_control(void)
{
    if (!control_path)
        return;
    struct stat st;
    if (stat(control_path, &st) != 0)
        return;
    if (st.st_ino == control_st.st_ino && st.st_size == control_st.st_size &&
        st.st_mtim.tv_sec == control_st.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == control_st.st_mtim.tv_nsec)
        return;
    FILE *f = fopen(control_path, "r");
    if (!f)
        return;
    control_st = st;
    cfg c = {0};
    c.drop = g.drop;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        char key[64];
        unsigned long v;
        if (line[0] == '#' || sscanf(line, " %63[a-z_] = %lu", key, &v) != 2)
            continue;
        apply_line(&c, key, v);
    }
    fclose(f);
    bool drop = c.drop != g.drop;
    g = c;
    if (drop)
        drop_all();
}

static void write_stats(uint64_t now)
{
    static uint64_t last;
    if (!stats_path || !stats_dirty || now - last < STATS_EVERY_NS)
        return;
    last = now;
    stats_dirty = false;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", stats_path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fprintf(f,
            "accepted=%llu\nactive=%llu\nbytes_up=%llu\nbytes_down=%llu\n"
            "bytes_blackholed=%llu\n",
            n_accepted, n_active, bytes_up, bytes_down, bytes_hole);
    fclose(f);
    (void)rename(tmp, stats_path);
}

/* ---- connections ------------------------------------------------------- */

static int src_fd(const dir *d)
{
    return d->up ? d->c->cfd : d->c->tfd;
}
static int dst_fd(const dir *d)
{
    return d->up ? d->c->tfd : d->c->cfd;
}

static void set_interest(int fd, unsigned *have, unsigned want, ref *r)
{
    if (fd < 0 || *have == want)
        return;
    struct epoll_event e = {.events = want, .data.ptr = r};
    (void)epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &e);
    *have = want;
}

static void free_queue(dir *d)
{
    chunk *n;
    for (chunk *k = d->head; k; k = n) {
        n = k->next;
        free(k);
    }
    d->head = d->tail = NULL;
    d->queued = 0;
}

static void conn_close(conn *c)
{
    if (c->dead)
        return;
    c->dead = true;
    /* an abortive close (RST): a dropped link, as the client should see */
    struct linger lg = {1, 0};
    if (c->cfd >= 0) {
        (void)setsockopt(c->cfd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(c->cfd);
    }
    if (c->tfd >= 0) {
        (void)setsockopt(c->tfd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(c->tfd);
    }
    free_queue(&c->d[0]);
    free_queue(&c->d[1]);
    if (c->prev)
        c->prev->next = c->next;
    else
        conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    n_active--;
    stats_dirty = true;
    /* freed after the current epoll batch: see reap() */
    c->next = NULL;
}

static conn *graveyard[4096];
static size_t ngrave;

static void reap(void)
{
    for (size_t i = 0; i < ngrave; i++)
        free(graveyard[i]);
    ngrave = 0;
}

static void bury(conn *c)
{
    if (c->dead)
        return;
    conn_close(c);
    if (ngrave < sizeof graveyard / sizeof *graveyard)
        graveyard[ngrave++] = c;
}

static void drop_all(void)
{
    while (conns)
        bury(conns);
}

static ref *side_ref(conn *c, bool client)
{
    /* two refs live right after the conn struct (allocated together) */
    return (ref *)(c + 1) + (client ? 0 : 1);
}

/* What each socket should be polled for: read when its queue toward the
 * other side has room, write when a due chunk is waiting for it. */
static void update_interest(conn *c, uint64_t now)
{
    if (c->dead)
        return;
    unsigned cw = 0, tw = 0;
    dir *up = &c->d[0], *down = &c->d[1];
    if (!up->src_eof && up->queued < QUEUE_MAX)
        cw |= EPOLLIN;
    if (!down->src_eof && down->queued < QUEUE_MAX && c->connected)
        tw |= EPOLLIN;
    if (!c->connected)
        tw |= EPOLLOUT;
    (void)now;
    set_interest(c->cfd, &c->cev, cw | (c->cev & EPOLLOUT), side_ref(c, 1));
    set_interest(c->tfd, &c->tev, tw | (c->tev & EPOLLOUT), side_ref(c, 0));
}

static void want_write(conn *c, bool to_target, bool on)
{
    int fd = to_target ? c->tfd : c->cfd;
    unsigned *have = to_target ? &c->tev : &c->cev;
    unsigned want = on ? (*have | EPOLLOUT) : (*have & ~(unsigned)EPOLLOUT);
    if (to_target && !c->connected)
        want |= EPOLLOUT;
    set_interest(fd, have, want, side_ref(c, !to_target));
}

/* Reads what the source has (bounded per event) into the delay queue. */
static void pump_in(dir *d, uint64_t now)
{
    conn *c = d->c;
    for (int i = 0; i < READS_PER_EVENT && !d->src_eof && d->queued < QUEUE_MAX;
         i++) {
        chunk *k = malloc(sizeof *k + READ_CHUNK);
        if (!k)
            return;
        ssize_t n = read(src_fd(d), k->data, READ_CHUNK);
        if (n < 0) {
            free(k);
            if (errno == EAGAIN || errno == EINTR)
                return;
            bury(c);
            return;
        }
        k->next = NULL;
        k->off = 0;
        k->len = (size_t)n;
        k->eof = n == 0;
        if (n == 0)
            d->src_eof = true;
        if (g.blackhole && n > 0) {
            bytes_hole += (unsigned long long)n; /* vanishes */
            stats_dirty = true;
            free(k);
            continue;
        }
        uint64_t lat = (uint64_t)(d->up ? g.lat_up : g.lat_down) * 1000000ull;
        if (g.jitter)
            lat += random64() % ((uint64_t)g.jitter * 1000000ull + 1);
        /* from the moment of this read, not the loop's wake-up: bytes
         * that arrived while the loop was busy (or descheduled) after it
         * woke would otherwise be delayed by less than the latency */
        k->due_ns = now_ns() + lat;
        if (k->due_ns < d->last_due)
            k->due_ns = d->last_due; /* jitter never reorders bytes */
        d->last_due = k->due_ns;
        if (d->tail)
            d->tail->next = k;
        else
            d->head = k;
        d->tail = k;
        d->queued += k->len;
        if ((size_t)n < READ_CHUNK)
            break;
    }
}

/* Bytes the bandwidth limit allows now; 0 with *wait_ns set when none. */
static size_t allowance(dir *d, uint64_t now, uint64_t *wait_ns)
{
    if (!g.kbps)
        return SIZE_MAX;
    double rate = (double)g.kbps * 1000.0 / 8.0; /* bytes per second */
    if (!d->tokens_ns)
        d->tokens_ns = now;
    d->tokens += rate * (double)(now - d->tokens_ns) / 1e9;
    d->tokens_ns = now;
    if (d->tokens > rate / 10.0 + 16384.0)
        d->tokens = rate / 10.0 + 16384.0; /* burst: 100 ms or 16 KiB */
    if (d->tokens >= 1.0)
        return (size_t)d->tokens;
    *wait_ns = (uint64_t)((1.0 - d->tokens) / rate * 1e9) + 1000;
    return 0;
}

/* Writes due chunks; returns the next time this direction needs the loop
 * (UINT64_MAX: nothing timed). */
static uint64_t pump_out(dir *d, uint64_t now)
{
    conn *c = d->c;
    while (!c->dead && d->head && d->head->due_ns <= now) {
        chunk *k = d->head;
        if (d->up && !c->connected)
            return UINT64_MAX; /* written once the connect completes */
        if (k->eof) {
            (void)shutdown(dst_fd(d), SHUT_WR);
            d->dst_shut = true;
        } else if (g.blackhole) {
            bytes_hole += k->len - k->off; /* in flight when it began */
            stats_dirty = true;
        } else {
            uint64_t wait = 0;
            size_t room = allowance(d, now, &wait);
            if (!room)
                return now + wait;
            size_t n = k->len - k->off;
            if (n > room)
                n = room;
            ssize_t w = write(dst_fd(d), k->data + k->off, n);
            if (w < 0) {
                if (errno == EAGAIN) {
                    want_write(c, d->up, true);
                    return UINT64_MAX;
                }
                bury(c);
                return UINT64_MAX;
            }
            if (g.kbps)
                d->tokens -= (double)w;
            k->off += (size_t)w;
            d->queued -= (size_t)w;
            if (d->up)
                bytes_up += (unsigned long long)w;
            else
                bytes_down += (unsigned long long)w;
            stats_dirty = true;
            if (k->off < k->len)
                continue;
        }
        d->queued -= k->len - k->off;
        d->head = k->next;
        if (!d->head)
            d->tail = NULL;
        free(k);
    }
    want_write(c, d->up, false);
    if (d->src_eof && d->dst_shut && c->d[!d->up].src_eof &&
        c->d[!d->up].dst_shut) {
        bury(c);
        return UINT64_MAX;
    }
    return d->head ? d->head->due_ns : UINT64_MAX;
}

static void accept_some(uint64_t now)
{
    for (int i = 0; i < 16; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        n_accepted++;
        stats_dirty = true;
        if (g.refuse) {
            struct linger lg = {1, 0};
            (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
            close(fd);
            continue;
        }
        conn *c = calloc(1, sizeof *c + 2 * sizeof(ref));
        int tfd =
            socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (!c || tfd < 0) {
            free(c);
            close(fd);
            if (tfd >= 0)
                close(tfd);
            continue;
        }
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        (void)setsockopt(tfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->cfd = fd;
        c->tfd = tfd;
        for (int k = 0; k < 2; k++) {
            c->d[k].c = c;
            c->d[k].up = k == 0;
        }
        *side_ref(c, 1) = (ref){2, c};
        *side_ref(c, 0) = (ref){3, c};
        struct sockaddr_in to = target;
        if (g.target_port)
            to.sin_port = htons((uint16_t)g.target_port);
        if (connect(tfd, (struct sockaddr *)&to, sizeof to) == 0)
            c->connected = true;
        else if (errno != EINPROGRESS) {
            close(fd);
            close(tfd);
            free(c);
            continue;
        }
        c->cev = EPOLLIN;
        c->tev = c->connected ? EPOLLIN : EPOLLOUT;
        struct epoll_event e1 = {.events = c->cev, .data.ptr = side_ref(c, 1)};
        struct epoll_event e2 = {.events = c->tev, .data.ptr = side_ref(c, 0)};
        (void)epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e1);
        (void)epoll_ctl(epfd, EPOLL_CTL_ADD, tfd, &e2);
        c->next = conns;
        if (conns)
            conns->prev = c;
        conns = c;
        n_active++;
        (void)now;
    }
}

static void on_socket(conn *c, bool client_side, unsigned ev, uint64_t now)
{
    if (c->dead)
        return;
    if (!client_side && !c->connected && (ev & (EPOLLOUT | EPOLLERR))) {
        int err = 0;
        socklen_t l = sizeof err;
        (void)getsockopt(c->tfd, SOL_SOCKET, SO_ERROR, &err, &l);
        if (err) {
            bury(c); /* target refused: the client sees a reset */
            return;
        }
        c->connected = true;
    }
    /* reading side: client_side reads feed the up direction */
    dir *in = &c->d[client_side ? 0 : 1];
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR))
        pump_in(in, now);
    /* EPOLLHUP is reported whatever the interest: once this socket's
     * input has ended, a hang-up means it is finished both ways */
    if (!c->dead && (ev & (EPOLLHUP | EPOLLERR)) && in->src_eof)
        bury(c);
    if (c->dead)
        return;
    if (ev & EPOLLOUT) {
        (void)pump_out(&c->d[client_side ? 1 : 0], now);
        if (c->dead)
            return;
    }
}

/* One pass over every connection: write what is due, arm the timer for
 * the earliest pending chunk, refresh interest. */
static void service_all(uint64_t now)
{
    /* without a control file nothing needs a wake-up but the queues: an
     * idle proxy sleeps (the fleet simulation runs about 200 of them) */
    uint64_t next = control_path ? now + POLL_CONTROL_NS : UINT64_MAX;
    for (conn *c = conns, *n; c; c = n) {
        n = c->next;
        for (int k = 0; k < 2 && !c->dead; k++) {
            uint64_t at = pump_out(&c->d[k], now);
            if (at < next)
                next = at;
        }
        if (!c->dead)
            update_interest(c, now);
    }
    if (stats_path && stats_dirty && now + STATS_EVERY_NS < next)
        next = now + STATS_EVERY_NS;
    struct itimerspec its = {0}; /* all zero: disarmed */
    if (next != UINT64_MAX) {
        its.it_value.tv_sec = (time_t)(next / 1000000000ull);
        its.it_value.tv_nsec = (long)(next % 1000000000ull);
    }
    (void)timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static bool parse_hostport(const char *s, struct sockaddr_in *out)
{
    char host[64];
    unsigned port;
    memset(out, 0, sizeof *out);
    out->sin_family = AF_INET;
    if (sscanf(s, "%63[^:]:%u", host, &port) != 2 || port == 0 || port > 65535)
        return false;
    out->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &out->sin_addr) == 1;
}

static void usage(void)
{
    fprintf(stderr, "usage: faultproxy --target HOST:PORT [--listen PORT] "
                    "[--port-file F] [--control F] [--stats F] "
                    "[--latency MS] [--listen-netns F] [--target-netns F]\n");
    exit(2);
}

/* Enters the network namespace of file path (NULL: none); sockets created
 * after it belong to that namespace, and keep it. */
static void enter_netns(const char *path)
{
    if (!path)
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0)
        die(path);
    close(fd);
}

int main(int argc, char **argv)
{
    unsigned listen_port = 0;
    const char *port_file = NULL, *listen_ns = NULL, *target_ns = NULL;
    bool have_target = false;
    /* every flag takes a value: step over flag and value together */
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        if (!strcmp(a, "--target"))
            have_target = parse_hostport(v, &target);
        else if (!strcmp(a, "--listen"))
            listen_port = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--port-file"))
            port_file = v;
        else if (!strcmp(a, "--control"))
            control_path = v;
        else if (!strcmp(a, "--stats"))
            stats_path = v;
        else if (!strcmp(a, "--latency"))
            g.lat_up = g.lat_down = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--listen-netns"))
            listen_ns = v;
        else if (!strcmp(a, "--target-netns"))
            target_ns = v;
        else
            usage();
    }
    if (!have_target)
        usage();
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    rnd ^= (uint64_t)getpid() * 0x2545f4914f6cdd1dull;
    poll_control();

    /* the listener in its namespace, then the namespace of the target
     * (each socket keeps the one it was made in) */
    int home_ns = target_ns || !listen_ns
                      ? -1
                      : open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    enter_netns(listen_ns);
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    (void)setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in la = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)listen_port)};
    la.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&la, sizeof la) != 0 ||
        listen(lfd, 512) != 0)
        die("listen");
    if (target_ns)
        enter_netns(target_ns);
    else if (home_ns >= 0 &&
             (setns(home_ns, CLONE_NEWNET) != 0 || close(home_ns) != 0))
        die("back to the proxy's own network namespace");
    socklen_t ll = sizeof la;
    (void)getsockname(lfd, (struct sockaddr *)&la, &ll);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (epfd < 0 || timer_fd < 0)
        die("epoll");
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = &listen_ref};
    (void)epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &e);
    e.data.ptr = &timer_ref;
    (void)epoll_ctl(epfd, EPOLL_CTL_ADD, timer_fd, &e);
    if (port_file) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
        FILE *f = fopen(tmp, "w");
        if (!f)
            die("port file");
        fprintf(f, "%u\n", ntohs(la.sin_port));
        fclose(f);
        if (rename(tmp, port_file) != 0)
            die("port file");
    }
    fprintf(stderr, "faultproxy: 127.0.0.1:%u -> %s:%u\n", ntohs(la.sin_port),
            inet_ntoa(target.sin_addr), ntohs(target.sin_port));

    uint64_t last_poll = 0;
    struct epoll_event evs[256];
    while (!stop) {
        uint64_t now = now_ns();
        service_all(now);
        write_stats(now);
        int n = epoll_wait(epfd, evs, 256, -1);
        if (n < 0 && errno != EINTR)
            die("epoll_wait");
        now = now_ns();
        for (int i = 0; i < n; i++) {
            ref *r = evs[i].data.ptr;
            if (r->kind == 0)
                accept_some(now);
            else if (r->kind == 1) {
                uint64_t x;
                (void)!read(timer_fd, &x, sizeof x);
            } else
                on_socket(r->c, r->kind == 2, evs[i].events, now);
        }
        if (now - last_poll >= POLL_CONTROL_NS) {
            last_poll = now;
            poll_control();
        }
        reap();
    }
    drop_all();
    reap();
    write_stats(UINT64_MAX / 2);
    return 0;
}
