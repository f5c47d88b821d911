/* SPDX-License-Identifier: Apache-2.0 */
/* Running keylessd from tests: see daemon.h. */
#include "daemon.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pki.h"
#include "testutil.h"

#define MAX_DAEMONS 16
#define START_TIMEOUT_MS 20000

/* Every daemon started and not yet reaped, killed at exit. */
static pid_t live[MAX_DAEMONS];

static void kill_live(void)
{
    for (int i = 0; i < MAX_DAEMONS; i++) {
        if (live[i] > 0) {
            kill(live[i], SIGKILL);
            waitpid(live[i], NULL, 0);
            live[i] = 0;
        }
    }
}

static void track(pid_t pid, bool add)
{
    static bool registered;
    if (!registered) {
        atexit(kill_live);
        registered = true;
    }
    for (int i = 0; i < MAX_DAEMONS; i++) {
        if (add && live[i] == 0) {
            live[i] = pid;
            return;
        }
        if (!add && live[i] == pid) {
            live[i] = 0;
            return;
        }
    }
}

double td_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* A port the kernel just handed out for 127.0.0.1. Another process could
 * take it before keylessd binds it; td_start retries on that. */
static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t al = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* True when a TCP connect to the port succeeds within timeout_ms. */
static bool port_accepts(uint16_t port, int timeout_ms)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = false;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        ok = true;
    } else if (errno == EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        if (poll(&p, 1, timeout_ms) == 1) {
            int e = 0;
            socklen_t l = sizeof e;
            ok = getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) == 0 && e == 0;
        }
    }
    close(fd);
    return ok;
}

static int decode_status(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return -1;
}

char *td_read_log(const td_daemon *d)
{
    FILE *f = fopen(d->log_path, "rb");
    if (!f)
        return strdup("");
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    size_t n = b ? fread(b, 1, (size_t)sz, f) : 0;
    fclose(f);
    if (!b)
        return strdup("");
    b[n] = 0;
    return b;
}

void td_dump_log(const td_daemon *d)
{
    char *log = td_read_log(d);
    size_t n = strlen(log);
    const char *tail = n > 6000 ? log + n - 6000 : log;
    fprintf(stderr, "---- %s (%s), last %zu bytes ----\n%s\n---- end ----\n",
            d->name, d->log_path, strlen(tail), tail);
    free(log);
}

void td_child_setup(const char *log_path, bool append, pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    int in = open("/dev/null", O_RDONLY);
    int out = open(log_path, O_CREAT | (append ? O_APPEND : O_TRUNC) | O_WRONLY,
                   0644);
    if (in < 0 || out < 0)
        _exit(126);
    dup2(in, 0);
    dup2(out, 1);
    dup2(out, 2);
}

/* The daemon side of fork(): its log, its death with the test, exec. */
static void child_exec(char **argv, const char *log_path, pid_t parent)
{
    td_child_setup(log_path, false, parent);
    execvp(argv[0], argv); /* a wrapper is found on PATH */
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Appends one store entry per item of the comma list to *p. */
static void add_stores(char **p, char *end, const char *kind, const char *list)
{
    char *copy = strdup(list), *save = NULL;
    assert_non_null(copy);
    for (char *w = strtok_r(copy, ",", &save); w;
         w = strtok_r(NULL, ",", &save))
        *p += snprintf(*p, (size_t)(end - *p), ", {%s: \"%s\"}", kind, w);
    free(copy);
    assert_true(*p < end);
}

/* --private-key-stores for o: the slow token's key, then the key
 * directories and files. */
static void stores_flag(const td_opts *o, char *buf, size_t len)
{
    char *p = buf, *end = buf + len;
    p += snprintf(p, len, "--private-key-stores=[{uri: \"%s\"}", o->slow_key);
    assert_true(p < end);
    if (o->key_dirs)
        add_stores(&p, end, "dir", o->key_dirs);
    if (o->key_files)
        add_stores(&p, end, "file", o->key_files);
    assert_true(p + 1 < end);
    *p++ = ']';
    *p = 0;
}

static bool try_start(td_daemon *d, const td_opts *o, bool *port_taken)
{
    char bin[1024], port[16], shards[16], workers[16];
    char a_port[32], a_cert[1100], a_key[1100], a_ca[1100], a_kd[2100],
        a_kf[2100], a_stores[PATH_MAX + 8192];
    char *argv[64];
    int n = 0;

    *port_taken = false;
    d->port = o->port ? o->port : free_port();
    snprintf(bin, sizeof bin, "%s/keylessd", tu_bin_dir());
    snprintf(port, sizeof port, "%u", d->port);
    snprintf(a_port, sizeof a_port, "--port=%s", port);
    snprintf(a_cert, sizeof a_cert, "--auth-cert=%s",
             o->cert ? o->cert : tp_path("server.crt"));
    snprintf(a_key, sizeof a_key, "--auth-key=%s",
             o->key ? o->key : tp_path("server.key"));
    snprintf(a_ca, sizeof a_ca, "--cloudflare-ca-cert=%s",
             o->ca ? o->ca : tp_path("ca.crt"));
    snprintf(shards, sizeof shards, "--shards=%d", o->shards ? o->shards : 2);
    snprintf(workers, sizeof workers, "--workers=%d",
             o->workers ? o->workers : 2);
    /* KL_DAEMON_WRAPPER (`make valgrind`): words run in front
     * of keylessd, e.g. "valgrind --error-exitcode=99 --leak-check=full" */
    static char wrapper[1024];
    const char *w = getenv("KL_DAEMON_WRAPPER");
    if (w && *w) {
        snprintf(wrapper, sizeof wrapper, "%s", w);
        for (char *save = NULL, *word = strtok_r(wrapper, " ", &save);
             word && n < 16; word = strtok_r(NULL, " ", &save))
            argv[n++] = word;
    }
    argv[n++] = bin;
    argv[n++] = "--listen-address=127.0.0.1";
    argv[n++] = a_port;
    argv[n++] = a_cert;
    argv[n++] = a_key;
    argv[n++] = a_ca;
    argv[n++] = shards;
    argv[n++] = workers;
    argv[n++] = "--loglevel=0";
    /* no metrics endpoint on the default port 2406, which parallel daemons
     * would fight over; a test that wants one passes --metrics-port=N in
     * extra (the last flag wins) */
    argv[n++] = "--metrics-port=0";
    if (o->slow_key) {
        /* private_key_dirs and _files would replace the stores */
        stores_flag(o, a_stores, sizeof a_stores);
        argv[n++] = a_stores;
    } else {
        if (o->key_dirs) {
            snprintf(a_kd, sizeof a_kd, "--private-key-dirs=%s", o->key_dirs);
            argv[n++] = a_kd;
        }
        if (o->key_files) {
            snprintf(a_kf, sizeof a_kf, "--private-key-files=%s", o->key_files);
            argv[n++] = a_kf;
        }
    }
    for (int i = 0; o->extra && o->extra[i] && n < 62; i++)
        argv[n++] = (char *)o->extra[i];
    argv[n] = NULL;

    /* a test that asked for a metrics endpoint may scrape it as soon as
     * td_start returns: wait for it too (the last flag wins, as in
     * keylessd) */
    uint16_t metrics_port = 0;
    for (int i = 0; o->extra && o->extra[i]; i++)
        if (!strncmp(o->extra[i], "--metrics-port=", 15))
            metrics_port = (uint16_t)atoi(o->extra[i] + 15);

    pid_t parent = getpid();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        child_exec(argv, d->log_path, parent);
    d->pid = pid;
    track(pid, true);

    double until = td_now_ms() + START_TIMEOUT_MS;
    while (td_now_ms() < until) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            track(pid, false);
            d->pid = 0;
            char *log = td_read_log(d);
            *port_taken = strstr(log, "in use") != NULL;
            free(log);
            if (!*port_taken) {
                td_dump_log(d);
                fail_msg("keylessd exited during startup with status %d",
                         decode_status(st));
            }
            return false;
        }
        if (port_accepts(d->port, 200) &&
            (!metrics_port || port_accepts(metrics_port, 200)))
            return true;
        sleep_ms(20);
    }
    td_dump_log(d);
    fail_msg("keylessd did not accept connections on port %u%s within %d ms",
             d->port, metrics_port ? " and its metrics port" : "",
             START_TIMEOUT_MS);
    return false;
}

void td_start(td_daemon *d, const td_opts *o)
{
    static const td_opts none;
    char dir[512];
    if (!o)
        o = &none;
    memset(d, 0, sizeof *d);
    /* writes to a connection the server closed must fail, not kill the
     * test (see include/keyless/client.h) */
    signal(SIGPIPE, SIG_IGN);
    snprintf(d->name, sizeof d->name, "%s", o->name ? o->name : "keylessd");
    snprintf(dir, sizeof dir, "%s/test-logs", tu_bin_dir());
    (void)mkdir(dir, 0755);
    (void)tp_dir(); /* create the PKI before timing the start */
    for (int attempt = 0; attempt < 4; attempt++) {
        bool taken;
        snprintf(d->log_path, sizeof d->log_path, "%s/%s-%d-%d.log", dir,
                 d->name, (int)getpid(), attempt);
        if (try_start(d, o, &taken))
            return;
    }
    fail_msg("keylessd: no free port after 4 attempts");
}

void td_signal(td_daemon *d, int sig)
{
    if (d->pid > 0)
        kill(d->pid, sig);
}

/* Whether every thread of pid is stopped (state T in /proc). */
static bool all_stopped(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *dir = opendir(path);
    if (!dir)
        return false;
    bool stopped = true;
    struct dirent *e;
    while (stopped && (e = readdir(dir))) {
        if (e->d_name[0] == '.')
            continue;
        char stat[512], buf[512];
        snprintf(stat, sizeof stat, "%s/%s/stat", path, e->d_name);
        FILE *f = fopen(stat, "r");
        if (!f)
            continue; /* the thread exited */
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *close = strrchr(buf, ')');
        stopped = close && close[1] == ' ' && close[2] == 'T';
    }
    closedir(dir);
    return stopped;
}

void td_freeze(td_daemon *d)
{
    assert_true(d->pid > 0);
    assert_int_equal(kill(d->pid, SIGSTOP), 0);
    /* kill() returns once the signal is queued: a thread running on
     * another CPU may still answer a request written now */
    for (int i = 0; i < 2000 && !all_stopped(d->pid); i++)
        usleep(1000);
    if (!all_stopped(d->pid))
        fail_msg("%s: not stopped 2 s after SIGSTOP", d->name);
}

int td_wait(td_daemon *d, int timeout_ms)
{
    if (d->pid <= 0)
        return -1;
    double until = td_now_ms() + timeout_ms;
    for (;;) {
        int st;
        pid_t r = waitpid(d->pid, &st, WNOHANG);
        if (r == d->pid) {
            track(d->pid, false);
            d->pid = 0;
            return decode_status(st);
        }
        if (td_now_ms() >= until)
            return -2;
        sleep_ms(10);
    }
}

int td_stop(td_daemon *d, int timeout_ms)
{
    if (d->pid <= 0)
        return -1;
    if (timeout_ms <= 0)
        timeout_ms = 15000;
    kill(d->pid, SIGTERM);
    /* a test that failed while the daemon was frozen (td_freeze) must not
     * leave it unable to act on the SIGTERM */
    kill(d->pid, SIGCONT);
    int st = td_wait(d, timeout_ms);
    if (st == -2) {
        fprintf(stderr, "%s did not exit %d ms after SIGTERM: killing it\n",
                d->name, timeout_ms);
        kill(d->pid, SIGKILL);
        waitpid(d->pid, NULL, 0);
        track(d->pid, false);
        d->pid = 0;
        st = -1;
    }
    if (st != 0)
        td_dump_log(d);
    return st;
}

kl_client_opts td_client_opts(const td_daemon *d)
{
    kl_client_opts o = {.host = "127.0.0.1",
                        .port = d->port,
                        .cert_file = tp_path("client.crt"),
                        .key_file = tp_path("client.key"),
                        .ca_file = tp_path("ca.crt"),
                        .connect_timeout_ms = 10000};
    return o;
}

kl_client *td_connect(const td_daemon *d)
{
    kl_client_opts o = td_client_opts(d);
    kl_client *c = NULL;
    char err[512];
    if (kl_client_connect(&o, &c, err, sizeof err) != KL_OK) {
        td_dump_log(d);
        fail_msg("connect to keylessd: %s", err);
    }
    return c;
}

kl_target_opts td_target_opts(const td_daemon *const *d, size_t n,
                              td_addrs *addrs)
{
    assert_true(n >= 1 && n <= 8);
    for (size_t i = 0; i < n; i++) {
        snprintf(addrs->text[i], sizeof addrs->text[i], "127.0.0.1:%u",
                 (unsigned)d[i]->port);
        addrs->list[i] = addrs->text[i];
    }
    kl_target_opts o = {.servers = addrs->list,
                        .nservers = n,
                        .cert_file = tp_path("client.crt"),
                        .key_file = tp_path("client.key"),
                        .ca_file = tp_path("ca.crt")};
    return o;
}

kl_target *td_target(const td_daemon *const *d, size_t n,
                     const kl_target_opts *overrides)
{
    static td_addrs addrs; /* copied by kl_target_new */
    kl_target_opts o = td_target_opts(d, n, &addrs);
    if (overrides) {
        kl_target_opts x = *overrides;
        x.servers = o.servers;
        x.nservers = o.nservers;
        x.cert_file = o.cert_file;
        x.key_file = o.key_file;
        x.ca_file = o.ca_file;
        o = x;
    }
    kl_target *t = NULL;
    char err[512];
    if (kl_target_new(&o, &t, err, sizeof err) != KL_OK)
        fail_msg("kl_target_new: %s", err);
    return t;
}

int td_run(const char *const *argv, char **output, int timeout_ms)
{
    int pfd[2];
    if (output)
        *output = NULL;
    assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
    pid_t parent = getpid();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int in = open("/dev/null", O_RDONLY);
        dup2(in, 0);
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    assert_non_null(buf);
    double until = td_now_ms() + timeout_ms;
    bool timed_out = false;
    for (;;) {
        int left = (int)(until - td_now_ms());
        if (left <= 0) {
            timed_out = true;
            break;
        }
        struct pollfd p = {.fd = pfd[0], .events = POLLIN};
        int r = poll(&p, 1, left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            timed_out = r == 0;
            break;
        }
        if (cap - len < 1024) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        ssize_t n = read(pfd[0], buf + len, cap - len - 1);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(pfd[0]);
    buf[len] = 0;
    int st = -1;
    if (timed_out) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    } else {
        int ws;
        waitpid(pid, &ws, 0);
        st = decode_status(ws);
    }
    if (output)
        *output = buf;
    else
        free(buf);
    return st;
}

void td_call(const td_daemon *d, kl_client *c, const kl_request_spec *spec,
             kl_client_result *r)
{
    kl_status st = kl_client_call(c, spec, 30000, r);
    if (st != KL_OK) {
        td_dump_log(d);
        fail_msg("%s request: %s (%s)", kl_op_name(spec->opcode),
                 kl_status_str(st), kl_client_last_error(c));
    }
}

void td_expect_error(const td_daemon *d, kl_client *c,
                     const kl_request_spec *spec, uint8_t err)
{
    kl_client_result r;
    td_call(d, c, spec, &r);
    if (r.opcode != KL_OP_ERROR || r.error != err)
        fail_msg("%s: expected error 0x%02x (%s), got opcode 0x%02x error "
                 "0x%02x",
                 kl_op_name(spec->opcode), err, kl_err_text(err), r.opcode,
                 r.error);
    /* P5: an error response is exactly 1024 bytes */
    assert_int_equal(r.msg_len, 1024);
    assert_int_equal(r.payload_len, 1);
    kl_client_result_free(&r);
}

void td_expect_ping(const td_daemon *d, kl_client *c)
{
    static const char p[] = "still there?";
    kl_request_spec s = {.opcode = KL_OP_PING,
                         .payload = (const uint8_t *)p,
                         .payload_len = sizeof p - 1};
    kl_client_result r;
    td_call(d, c, &s, &r);
    assert_int_equal(r.opcode, KL_OP_PONG);
    assert_int_equal(r.payload_len, sizeof p - 1);
    assert_memory_equal(r.payload, p, sizeof p - 1);
    kl_client_result_free(&r);
}
