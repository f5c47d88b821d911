/* SPDX-License-Identifier: Apache-2.0 */
/* Real etcd processes for tests: see etcdproc.h. */
#include "etcdproc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "fleet/etcd.h"
#include "net.h"
#include "pki.h"
#include "testutil.h"

#define READY_TIMEOUT_MS 30000

/* every member started and not reaped, killed at exit */
static pid_t live[4 * TE_MAX_MEMBERS];

/* data directories not yet removed: removed at exit, after the kill */
static char *dirs[8];

static void kill_live(void)
{
    for (size_t i = 0; i < sizeof live / sizeof live[0]; i++) {
        if (live[i] > 0) {
            kill(live[i], SIGKILL);
            waitpid(live[i], NULL, 0);
            live[i] = 0;
        }
    }
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        tp_rmtree(dirs[i]);
        dirs[i] = NULL;
    }
}

static void keep_dir(char *dir, bool add)
{
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        if (add ? dirs[i] == NULL : dirs[i] == dir) {
            dirs[i] = add ? dir : NULL;
            return;
        }
    }
}

static void at_exit_once(void)
{
    static bool registered;
    if (!registered) {
        atexit(kill_live);
        registered = true;
    }
}

static void track(pid_t pid, bool add)
{
    at_exit_once();
    for (size_t i = 0; i < sizeof live / sizeof live[0]; i++) {
        if (add ? live[i] == 0 : live[i] == pid) {
            live[i] = add ? pid : 0;
            return;
        }
    }
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The etcd binary on PATH, or a failed test naming the package. */
static const char *etcd_binary(void)
{
    static char found[1024];
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path ? path : "/usr/bin:/bin");
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d;
         d = strtok_r(NULL, ":", &save)) {
        snprintf(found, sizeof found, "%s/etcd", d);
        if (access(found, X_OK) == 0)
            return found;
    }
    fail_msg("etcd is not installed: the etcd tests need the Debian package "
             "etcd-server (and etcd-client); scripts/install-deps.sh "
             "installs them");
    return NULL;
}

static void log_path(const te_cluster *c, int i, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s.log", c->dir, c->m[i].name);
}

void te_dump_log(const te_cluster *c, int i)
{
    char p[1200];
    log_path(c, i, p, sizeof p);
    FILE *f = fopen(p, "rb");
    if (!f)
        return;
    static char b[8192];
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, sz > (long)sizeof b - 1 ? sz - (long)sizeof b + 1 : 0, SEEK_SET);
    size_t n = fread(b, 1, sizeof b - 1, f);
    b[n] = '\0';
    fclose(f);
    fprintf(stderr, "---- %s (%s), last %zu bytes ----\n%s\n---- end ----\n",
            c->m[i].name, p, n, b);
}

static void spawn(te_cluster *c, int i)
{
    te_member *m = &c->m[i];
    const char *bin = etcd_binary();
    char a[16][1200];
    char *argv[40];
    int n = 0;
    argv[n++] = (char *)bin;
#define ARG(...)                                                               \
    do {                                                                       \
        snprintf(a[n], sizeof a[n], __VA_ARGS__);                              \
        argv[n] = a[n];                                                        \
        n++;                                                                   \
    } while (0)
    ARG("--name=%s", m->name);
    ARG("--data-dir=%s/%s.data", c->dir, m->name);
    ARG("--listen-client-urls=%s", m->url);
    ARG("--advertise-client-urls=%s", m->url);
    ARG("--listen-peer-urls=http://127.0.0.1:%u", m->peer_port);
    ARG("--initial-advertise-peer-urls=http://127.0.0.1:%u", m->peer_port);
    ARG("--initial-cluster=%s", c->initial_cluster);
    ARG("--initial-cluster-token=kl-test-%d", (int)getpid());
    if (c->tls) {
        ARG("--cert-file=%s/etcd.crt", c->dir);
        ARG("--key-file=%s", tp_path("server.key"));
        ARG("--trusted-ca-file=%s", tp_path("ca.crt"));
        argv[n++] = "--client-cert-auth";
    }
    if (c->auth_token_ttl > 0)
        ARG("--auth-token-ttl=%d", c->auth_token_ttl);
#undef ARG
    argv[n] = NULL;
    char lp[1200];
    log_path(c, i, lp, sizeof lp);
    pid_t parent = getpid();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        td_child_setup(lp, true, parent);
        /* etcd takes ETCD_* variables as flags: none of the caller's */
        clearenv();
        setenv("PATH", "/usr/bin:/bin", 1);
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    m->pid = pid;
    track(pid, true);
}

/* Waits until member i answers a linearizable read (it has a leader). */
static void wait_ready(te_cluster *c, int i)
{
    te_member *m = &c->m[i];
    const char *ep[1] = {m->url};
    kl_etcd_opts o = {.endpoints = ep, .n_endpoints = 1, .timeout_ms = 1000};
    if (c->tls) {
        o.ca_file = tp_path("ca.crt");
        o.cert_file = tp_path("client.crt");
        o.key_file = tp_path("client.key");
    }
    kl_etcd *cl;
    char err[512] = "";
    assert_int_equal(kl_etcd_new(&o, &cl, err, sizeof err), KL_OK);
    double until = td_now_ms() + READY_TIMEOUT_MS;
    kl_status st = KL_E_IO;
    while (td_now_ms() < until) {
        int ws;
        if (waitpid(m->pid, &ws, WNOHANG) == m->pid) {
            track(m->pid, false);
            m->pid = 0;
            te_dump_log(c, i);
            kl_etcd_free(cl);
            fail_msg("etcd %s exited during startup (status 0x%x)", m->name,
                     ws);
        }
        kl_etcd_kv kv;
        st = kl_etcd_get(cl, "te-probe", 8, &kv, NULL, err, sizeof err);
        /* KL_E_CONFIG: it answered, wanting a user (auth enabled) */
        if (st == KL_OK || st == KL_E_NOT_FOUND || st == KL_E_CONFIG)
            break;
        sleep_ms(50);
    }
    kl_etcd_free(cl);
    if (st != KL_OK && st != KL_E_NOT_FOUND && st != KL_E_CONFIG) {
        te_dump_log(c, i);
        fail_msg("etcd %s did not serve within %d ms: %s", m->name,
                 READY_TIMEOUT_MS, err);
    }
}

/* etcd 3.4's gateway dials etcd's own gRPC port with the server
 * certificate as its client certificate, so with --client-cert-auth that
 * certificate needs clientAuth as well as serverAuth (docs/DESIGN.md "etcd
 * client (src/fleet)"): the test PKI's server key, certified for both. */
static void issue_cert(te_cluster *c)
{
    char ext[1200];
    snprintf(ext, sizeof ext, "%s/etcd-ext.cnf", c->dir);
    FILE *f = fopen(ext, "w");
    assert_non_null(f);
    fputs("basicConstraints=critical,CA:FALSE\n"
          "keyUsage=critical,digitalSignature\n"
          "extendedKeyUsage=serverAuth,clientAuth\n"
          "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
          f);
    assert_int_equal(fclose(f), 0);
    tu_sh("openssl req -new -key %s -subj '/CN=etcd test' 2>/dev/null | "
          "openssl x509 -req -CA %s -CAkey %s -days 2 -extfile %s "
          "-out %s/etcd.crt 2>/dev/null",
          tp_path("server.key"), tp_path("ca.crt"), tp_path("ca.key"), ext,
          c->dir);
}

void te_start(te_cluster *c, int n, bool tls)
{
    te_start_auth(c, n, tls, 0);
}

void te_start_auth(te_cluster *c, int n, bool tls, int token_ttl_s)
{
    memset(c, 0, sizeof *c);
    c->auth_token_ttl = token_ttl_s;
    assert_true(n >= 1 && n <= TE_MAX_MEMBERS);
    etcd_binary(); /* fails now, naming the package, when missing */
    c->n = n;
    c->tls = tls;
    c->dir = strdup("/dev/shm/kl-etcd.XXXXXX");
    assert_non_null(c->dir);
    if (!mkdtemp(c->dir))
        fail_msg("mkdtemp %s: %s", c->dir, strerror(errno));
    at_exit_once();
    keep_dir(c->dir, true);
    if (tls)
        issue_cert(c);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        te_member *m = &c->m[i];
        snprintf(m->name, sizeof m->name, "n%d", i + 1);
        m->client_port = tn_free_port();
        do {
            m->peer_port = tn_free_port();
        } while (m->peer_port == m->client_port);
        snprintf(m->url, sizeof m->url, "%s://127.0.0.1:%u",
                 tls ? "https" : "http", m->client_port);
        off += (size_t)snprintf(
            c->initial_cluster + off, sizeof c->initial_cluster - off,
            "%s%s=http://127.0.0.1:%u", i ? "," : "", m->name, m->peer_port);
        assert_true(off < sizeof c->initial_cluster);
    }
    for (int i = 0; i < n; i++)
        spawn(c, i);
    for (int i = 0; i < n; i++)
        wait_ready(c, i);
}

void te_kill(te_cluster *c, int i, int sig)
{
    te_member *m = &c->m[i];
    if (m->pid <= 0)
        return;
    kill(m->pid, sig);
    waitpid(m->pid, NULL, 0);
    track(m->pid, false);
    m->pid = 0;
}

void te_restart(te_cluster *c, int i)
{
    assert_int_equal(c->m[i].pid, 0);
    spawn(c, i);
    wait_ready(c, i);
}

void te_stop(te_cluster *c)
{
    for (int i = 0; i < c->n; i++) {
        te_member *m = &c->m[i];
        if (m->pid <= 0)
            continue;
        kill(m->pid, SIGTERM);
        double until = td_now_ms() + 5000;
        while (waitpid(m->pid, NULL, WNOHANG) == 0) {
            if (td_now_ms() > until) {
                kill(m->pid, SIGKILL);
                waitpid(m->pid, NULL, 0);
                break;
            }
            sleep_ms(10);
        }
        track(m->pid, false);
        m->pid = 0;
    }
    if (c->dir) {
        keep_dir(c->dir, false);
        tp_rmtree(c->dir);
        c->dir = NULL;
    }
    c->n = 0;
}

void te_endpoints(const te_cluster *c, const char *urls[TE_MAX_MEMBERS])
{
    for (int i = 0; i < c->n; i++)
        urls[i] = c->m[i].url;
}

void te_ctl(const te_cluster *c, const char *fmt, ...)
{
    char args[2048], eps[512] = "", tls[1024] = "", user[64] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    for (int i = 0; i < c->n; i++)
        snprintf(eps + strlen(eps), sizeof eps - strlen(eps), "%s%s",
                 i ? "," : "", c->m[i].url);
    if (c->tls)
        snprintf(tls, sizeof tls, "--cacert %s --cert %s --key %s",
                 tp_path("ca.crt"), tp_path("client.crt"),
                 tp_path("client.key"));
    if (c->root_password[0])
        snprintf(user, sizeof user, "--user root:%s", c->root_password);
    if (access("/usr/bin/etcdctl", X_OK) != 0)
        fail_msg("etcdctl is not installed: the auth tests need the Debian "
                 "package etcd-client (scripts/install-deps.sh)");
    char out[1200];
    snprintf(out, sizeof out, "%s/etcdctl.out", c->dir);
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "env -i PATH=/usr/bin:/bin ETCDCTL_API=3 etcdctl --endpoints %s "
             "%s %s %s >%s 2>&1",
             eps, tls, user, args, out);
    int rc = system(cmd);
    if (rc != 0) {
        size_t len = 0;
        char *text = tu_read_file(out, &len);
        fail_msg("etcdctl %s: exit 0x%x: %s", args, rc, text ? text : "");
    }
}

void te_auth_enable(te_cluster *c)
{
    snprintf(c->root_password, sizeof c->root_password, "root-%d",
             (int)getpid());
    char pw[32];
    snprintf(pw, sizeof pw, "%s", c->root_password);
    c->root_password[0] = 0; /* no user yet */
    te_ctl(c, "user add root --new-user-password %s", pw);
    te_ctl(c, "user grant-role root root");
    te_ctl(c, "auth enable");
    snprintf(c->root_password, sizeof c->root_password, "%s", pw);
}
