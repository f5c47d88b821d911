/* SPDX-License-Identifier: Apache-2.0 */
/* etcd password auth (docs/FLEET.md "etcd roles (operator's setup)",
 * docs/DESIGN.md "etcd client (src/fleet)") against a real etcd on
 * loopback whose tokens expire after 1 s unused (--auth-token-ttl=1), with
 * the roles the docs give: one per server (readwrite on its own record,
 * read on the prefix) and a read-only router role.
 *
 * - rollout: a client with a user works before auth is enabled and goes
 *   on working after (etcd wants a user: it authenticates then); a client
 *   without a user gets a clear refusal;
 * - a server's user writes only its own record: another's, or a key
 *   outside, is refused (permission denied, naming the user); the
 *   router's user only reads;
 * - leases: a grant needs no permission; a put on a lease needs write on
 *   the key and on every key already on the lease, a revoke on every key
 *   attached (so one server can neither hang its record on another's
 *   lease nor end another's lease); etcd 3.4 checks nothing on a
 *   keepalive or a time-to-live read;
 * - registration (src/fleet/member.c) with its own user: registered,
 *   renewed, an update written after the token expired (a new token at
 *   once), a clean stop's revoke too;
 * - the watch survives its token's expiry, and reconnecting with an
 *   expired token takes a new one without the caller seeing a failure;
 * - a wrong password: a clear error, tried again only after a backoff
 *   whoever calls, and registration succeeds once the file is fixed;
 * - a registered server whose write permission is revoked: its next
 *   update is logged as refused by etcd (not "unreachable"), and it
 *   registers again once the permission is back;
 * - keylessd: --check names a password file others can read; a wrong
 *   password or another server's user is logged clearly while keylessd
 *   serves its keys, and it registers once the password file is fixed;
 *   a router keylessd reading the directory as the read-only user stays
 *   in sync while its tokens expire between reads;
 * - mutual TLS and auth together: etcd 3.4's gateway refuses a client
 *   certificate with a CommonName while auth is on (said clearly, for
 *   calls and the watch); one without a CN and a user works, the user's
 *   roles apply; no user is refused. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "etcd_common.h"
#include "fleet/member.h"
#include "net.h"

#define TTL_S 2
#define PREFIX "/t/"

static te_cluster cluster;
static char *dir;
static char pw_a[1200], pw_b[1200], pw_rt[1200], pw_bad[1200], pw_open[1200];

static void write_pw(char *path, size_t cap, const char *name, const char *pw,
                     mode_t mode)
{
    snprintf(path, cap, "%s/%s.pw", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", pw);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, mode), 0);
}

/* The roles of docs/FLEET.md "etcd roles (operator's setup)". */
static void add_server_user(const char *name, const char *pw)
{
    te_ctl(&cluster, "role add keyless-server-%s", name);
    te_ctl(&cluster,
           "role grant-permission keyless-server-%s readwrite %s"
           "dir/servers/%s",
           name, PREFIX, name);
    te_ctl(&cluster, "role grant-permission keyless-server-%s read --prefix %s",
           name, PREFIX);
    te_ctl(&cluster, "user add %s --new-user-password '%s'", name, pw);
    te_ctl(&cluster, "user grant-role %s keyless-server-%s", name, name);
}

static int setup(void **state)
{
    (void)state;
    te_start_auth(&cluster, 1, false, 1);
    dir = tp_tempdir("fleet-auth");
    /* a password with characters JSON escapes */
    write_pw(pw_a, sizeof pw_a, "a-1", "pw-a \\\"1\"", 0600);
    write_pw(pw_b, sizeof pw_b, "b-1", "pw-b-1", 0600);
    write_pw(pw_rt, sizeof pw_rt, "rt", "pw-rt", 0600);
    write_pw(pw_bad, sizeof pw_bad, "bad", "not-it", 0600);
    write_pw(pw_open, sizeof pw_open, "open", "pw-b-1", 0644);
    add_server_user("a-1", "pw-a \\\"1\"");
    add_server_user("b-1", "pw-b-1");
    te_ctl(&cluster, "role add keyless-router");
    te_ctl(&cluster,
           "role grant-permission keyless-router read --prefix %sdir/", PREFIX);
    te_ctl(&cluster, "user add rt --new-user-password pw-rt");
    te_ctl(&cluster, "user grant-role rt keyless-router");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tp_rmtree(dir);
    te_stop(&cluster);
    return 0;
}

static kl_etcd *client_as(const char *user, const char *pwfile)
{
    const char *urls[TE_MAX_MEMBERS];
    te_endpoints(&cluster, urls);
    kl_etcd_opts o = {.endpoints = urls,
                      .n_endpoints = (size_t)cluster.n,
                      .timeout_ms = 3000,
                      .user = user,
                      .password_file = pwfile};
    kl_etcd *c;
    char err[512] = "";
    ec_ok(kl_etcd_new(&o, &c, err, sizeof err), err);
    return c;
}

static kl_status put(kl_etcd *c, const char *key, int64_t lease, char *err,
                     size_t errlen)
{
    return kl_etcd_put(c, key, strlen(key), "x", 1, lease, NULL, err, errlen);
}

static void test_rollout(void **state)
{
    (void)state;
    kl_etcd *a = client_as("a-1", pw_a), *anon = client_as(NULL, NULL);
    char err[512] = "";
    /* auth not enabled yet: etcd says so, the client goes on without */
    ec_ok(put(a, PREFIX "dir/servers/a-1", 0, err, sizeof err), err);
    te_auth_enable(&cluster);
    /* the same client: etcd now wants a user, it authenticates */
    ec_ok(put(a, PREFIX "dir/servers/a-1", 0, err, sizeof err), err);
    kl_etcd_kv kv;
    ec_status(kl_etcd_get(anon, PREFIX "dir/servers/a-1", 18, &kv, NULL, err,
                          sizeof err),
              KL_E_CONFIG, err);
    ec_expect(err, "has authentication enabled: configure an etcd user");
    kl_etcd_free(a);
    kl_etcd_free(anon);
}

static void test_own_record_only(void **state)
{
    (void)state;
    kl_etcd *a = client_as("a-1", pw_a), *rt = client_as("rt", pw_rt);
    char err[512] = "";
    ec_ok(put(a, PREFIX "dir/servers/a-1", 0, err, sizeof err), err);
    /* another server's record: refused, the user named */
    ec_status(put(a, PREFIX "dir/servers/b-1", 0, err, sizeof err), KL_E_CONFIG,
              err);
    ec_expect(err, "permission denied: etcd user \"a-1\" may not write");
    ec_status(put(a, PREFIX "dir/sets/web", 0, err, sizeof err), KL_E_CONFIG,
              err);
    ec_status(
        kl_etcd_delete(a, PREFIX "dir/", 7, true, NULL, NULL, err, sizeof err),
        KL_E_CONFIG, err);
    /* read on the prefix: another's record (absent) reads as absent */
    kl_etcd_kv kv;
    ec_status(kl_etcd_get(a, PREFIX "dir/servers/b-1", 18, &kv, NULL, err,
                          sizeof err),
              KL_E_NOT_FOUND, err);
    /* the router's user reads the directory, writes nothing */
    kl_etcd_page pg;
    ec_ok(kl_etcd_range(rt, PREFIX "dir/", 7, NULL, 0, 0, 0, &pg, err,
                        sizeof err),
          err);
    assert_int_equal(pg.n, 1);
    kl_etcd_page_clear(&pg);
    ec_status(put(rt, PREFIX "dir/servers/rt", 0, err, sizeof err), KL_E_CONFIG,
              err);
    ec_expect(err, "etcd user \"rt\"");
    /* outside its prefix it reads nothing */
    ec_status(kl_etcd_range(rt, PREFIX "skis/", 8, NULL, 0, 0, 0, &pg, err,
                            sizeof err),
              KL_E_CONFIG, err);
    ec_expect(err, "may not read");
    ec_ok(kl_etcd_delete(a, PREFIX "dir/servers/a-1", 18, false, NULL, NULL,
                         err, sizeof err),
          err);
    kl_etcd_free(a);
    kl_etcd_free(rt);
}

static void test_leases(void **state)
{
    (void)state;
    kl_etcd *a = client_as("a-1", pw_a), *b = client_as("b-1", pw_b),
            *rt = client_as("rt", pw_rt), *anon = client_as(NULL, NULL);
    char err[512] = "";
    int64_t la = 0, lr = 0, ttl = 0;
    /* a grant needs no key permission: even the read-only user */
    ec_ok(kl_etcd_lease_grant(rt, 30, &lr, NULL, err, sizeof err), err);
    ec_ok(kl_etcd_lease_revoke(rt, lr, err, sizeof err), err);
    ec_ok(kl_etcd_lease_grant(a, 30, &la, NULL, err, sizeof err), err);
    ec_ok(put(a, PREFIX "dir/servers/a-1", la, err, sizeof err), err);
    /* etcd 3.4 checks nothing on a keepalive or a time to live: anyone
     * who reaches the gateway can renew any lease */
    ec_ok(kl_etcd_lease_keepalive(anon, la, &ttl, err, sizeof err), err);
    int64_t granted = 0;
    ec_ok(kl_etcd_lease_ttl(anon, la, &ttl, &granted, err, sizeof err), err);
    assert_int_equal(granted, 30);
    assert_true(ttl > 0 && ttl <= 30);
    /* a put on a lease needs write on the key and on every key already
     * on the lease: b-1 cannot hang its record on a-1's lease (which
     * would block a-1's revoke) */
    ec_status(put(b, PREFIX "dir/servers/b-1", la, err, sizeof err),
              KL_E_CONFIG, err);
    ec_expect(err, "permission denied: etcd user \"b-1\"");
    /* nor a-1 its own on a lease holding b-1's record */
    int64_t lb = 0;
    ec_ok(kl_etcd_lease_grant(b, 30, &lb, NULL, err, sizeof err), err);
    ec_ok(put(b, PREFIX "dir/servers/b-1", lb, err, sizeof err), err);
    ec_status(put(a, PREFIX "dir/servers/a-1", lb, err, sizeof err),
              KL_E_CONFIG, err);
    /* a revoke needs write on every key attached: a-1 cannot end b-1's */
    ec_status(kl_etcd_lease_revoke(a, lb, err, sizeof err), KL_E_CONFIG, err);
    ec_ok(kl_etcd_lease_revoke(b, lb, err, sizeof err), err);
    ec_ok(kl_etcd_lease_revoke(a, la, err, sizeof err), err);
    kl_etcd_kv kv;
    ec_status(kl_etcd_get(a, PREFIX "dir/servers/a-1", 18, &kv, NULL, err,
                          sizeof err),
              KL_E_NOT_FOUND, err);
    ec_status(kl_etcd_lease_ttl(a, la, &ttl, NULL, err, sizeof err),
              KL_E_NOT_FOUND, err);
    kl_etcd_free(a);
    kl_etcd_free(b);
    kl_etcd_free(rt);
    kl_etcd_free(anon);
}

static void record(kl_fleet_server *s, const char *name)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->region, sizeof s->region, "eu");
    snprintf(s->host, sizeof s->host, "127.0.0.1");
    s->port = 2407;
    s->role = KL_FLEET_ROLE_KEYS;
    s->priority = 100;
}

static kl_fleet_member *member_as(const char *name, const char *user,
                                  const char *pwfile)
{
    const char *urls[TE_MAX_MEMBERS];
    te_endpoints(&cluster, urls);
    kl_fleet_server s;
    record(&s, name);
    kl_fleet_member_opts o = {.etcd = {.endpoints = urls,
                                       .n_endpoints = (size_t)cluster.n,
                                       .user = user,
                                       .password_file = pwfile},
                              .prefix = PREFIX,
                              .ttl_s = TTL_S,
                              .record = &s};
    kl_fleet_member *m;
    char err[512] = "";
    ec_ok(kl_fleet_member_start(&o, &m, err, sizeof err), err);
    kl_fleet_server_clear(&s);
    return m;
}

static bool wait_state(kl_fleet_member *m, kl_fleet_member_state want,
                       int timeout_ms)
{
    double until = td_now_ms() + timeout_ms;
    kl_fleet_member_status st;
    do {
        kl_fleet_member_status_get(m, &st);
        if (st.state == want)
            return true;
        ec_sleep_ms(20);
    } while (td_now_ms() < until);
    return false;
}

/* name's record health as root reads it; -1: absent. */
static int health_of(kl_etcd *c, const char *name)
{
    char key[128], err[512] = "";
    snprintf(key, sizeof key, PREFIX "dir/servers/%s", name);
    kl_etcd_kv kv;
    kl_status st = kl_etcd_get(c, key, strlen(key), &kv, NULL, err, sizeof err);
    if (st == KL_E_NOT_FOUND)
        return -1;
    ec_ok(st, err);
    kl_fleet_server s;
    ec_ok(kl_fleet_server_parse(kv.value, kv.value_len, &s, err, sizeof err),
          err);
    kl_etcd_kv_clear(&kv);
    int h = (int)s.health;
    kl_fleet_server_clear(&s);
    return h;
}

static void test_member_token_expiry(void **state)
{
    (void)state;
    kl_etcd *rd = client_as("rt", pw_rt);
    kl_fleet_member *m = member_as("a-1", "a-1", pw_a);
    assert_true(wait_state(m, KL_FLEET_MEMBER_REGISTERED, 3000));
    assert_int_equal(health_of(rd, "a-1"), KL_FLEET_HEALTH_OK);
    /* three TTLs: renewed (keepalives need no token) while the token
     * expired (1 s unused) */
    ec_sleep_ms(3 * TTL_S * 1000);
    kl_fleet_member_status st;
    kl_fleet_member_status_get(m, &st);
    assert_int_equal(st.state, KL_FLEET_MEMBER_REGISTERED);
    assert_int_equal(st.registrations, 1);
    /* an update: etcd refuses the old token, a new one, written */
    kl_fleet_server s;
    record(&s, "a-1");
    s.health = KL_FLEET_HEALTH_DEGRADED;
    char err[512] = "";
    ec_ok(kl_fleet_member_update(m, &s, err, sizeof err), err);
    kl_fleet_server_clear(&s);
    double t0 = td_now_ms();
    while (health_of(rd, "a-1") != KL_FLEET_HEALTH_DEGRADED &&
           td_now_ms() - t0 < 3000)
        ec_sleep_ms(10);
    fprintf(stderr, "update after the token expired: written in %.0f ms\n",
            td_now_ms() - t0);
    assert_int_equal(health_of(rd, "a-1"), KL_FLEET_HEALTH_DEGRADED);
    kl_fleet_member_status_get(m, &st);
    assert_int_equal(st.registrations, 1); /* the same lease */
    /* the stop's revoke (a write) after the token expired again */
    ec_sleep_ms(2500);
    kl_fleet_member_stop(m);
    assert_int_equal(health_of(rd, "a-1"), -1); /* gone at once */
    kl_etcd_free(rd);
}

static void on_ev(void *arg, const kl_etcd_event *ev)
{
    ec_events *e = arg;
    if (e->n < sizeof e->e / sizeof e->e[0]) {
        snprintf(e->e[e->n].key, sizeof e->e[0].key, "%.*s", (int)ev->key_len,
                 (const char *)ev->key);
        e->e[e->n].rev = ev->mod_revision;
        e->n++;
    }
}

/* Steps w until n events are held (every step must succeed). */
static void step_until(kl_etcd_watch *w, ec_events *e, size_t n)
{
    double until = td_now_ms() + 5000;
    char err[512] = "";
    while (e->n < n && td_now_ms() < until)
        ec_ok(kl_etcd_watch_step(w, 50, on_ev, e, err, sizeof err), err);
    if (e->n < n)
        fail_msg("%zu events of %zu", e->n, n);
}

static void test_watch_token_expiry(void **state)
{
    (void)state;
    kl_etcd *rt = client_as("rt", pw_rt), *a = client_as("a-1", pw_a);
    char err[512] = "";
    kl_etcd_watch *w;
    ec_ok(kl_etcd_watch_new(rt, PREFIX "dir/", 7, 0, &w, err, sizeof err), err);
    ec_events *e = calloc(1, sizeof *e);
    double until = td_now_ms() + 3000;
    while (!kl_etcd_watch_connected(w) && td_now_ms() < until)
        ec_ok(kl_etcd_watch_step(w, 50, on_ev, e, err, sizeof err), err);
    assert_true(kl_etcd_watch_connected(w));
    /* the token expires; the stream goes on */
    ec_sleep_ms(2500);
    ec_ok(put(a, PREFIX "dir/servers/a-1", 0, err, sizeof err), err);
    step_until(w, e, 1);
    /* connecting again with the expired token: a new one, no failure */
    ec_sleep_ms(2500);
    kl_etcd_watch_restart(w, kl_etcd_watch_next_revision(w));
    ec_ok(put(a, PREFIX "dir/servers/a-1", 0, err, sizeof err), err);
    step_until(w, e, 2);
    assert_true(e->e[1].rev > e->e[0].rev);
    assert_string_equal(e->e[1].key, PREFIX "dir/servers/a-1");
    /* a watch outside the role's prefix: refused, naming the user */
    kl_etcd_watch *w2;
    ec_ok(kl_etcd_watch_new(rt, PREFIX "skis/", 8, 0, &w2, err, sizeof err),
          err);
    kl_status st = KL_OK;
    until = td_now_ms() + 3000;
    while (st == KL_OK && td_now_ms() < until)
        st = kl_etcd_watch_step(w2, 50, NULL, NULL, err, sizeof err);
    ec_status(st, KL_E_CONFIG, err);
    ec_expect(err, "permission denied: etcd user \"rt\" may not watch");
    kl_etcd_watch_free(w2);
    kl_etcd_watch_free(w);
    free(e);
    ec_ok(kl_etcd_delete(a, PREFIX "dir/servers/a-1", 18, false, NULL, NULL,
                         err, sizeof err),
          err);
    kl_etcd_free(rt);
    kl_etcd_free(a);
}

static void test_wrong_password(void **state)
{
    (void)state;
    char err[512] = "";
    char fixable[1200];
    write_pw(fixable, sizeof fixable, "fixable", "not-it", 0600);
    kl_etcd *c = client_as("b-1", fixable);
    kl_etcd_kv kv;
    ec_status(kl_etcd_get(c, PREFIX "x", 4, &kv, NULL, err, sizeof err),
              KL_E_CONFIG, err);
    ec_expect(err, "refused user \"b-1\": wrong user name or password");
    ec_expect(err, fixable);
    assert_null(strstr(err, "not-it")); /* never the password */
    /* at once again: the backoff answers, etcd is not asked */
    double t0 = td_now_ms();
    ec_status(kl_etcd_get(c, PREFIX "x", 4, &kv, NULL, err, sizeof err),
              KL_E_CONFIG, err);
    ec_expect(err, "tried again in");
    assert_true(td_now_ms() - t0 < 50);
    kl_etcd_free(c);

    /* registration keeps trying; the file fixed, it registers */
    kl_fleet_member *m = member_as("b-1", "b-1", fixable);
    assert_false(wait_state(m, KL_FLEET_MEMBER_REGISTERED, 2500));
    write_pw(fixable, sizeof fixable, "fixable", "pw-b-1", 0600);
    t0 = td_now_ms();
    assert_true(wait_state(m, KL_FLEET_MEMBER_REGISTERED, 10000));
    fprintf(stderr, "registered %.0f ms after the password file was fixed\n",
            td_now_ms() - t0);
    kl_fleet_member_stop(m);

    /* another server's user: never registered */
    m = member_as("a-1", "b-1", pw_b);
    assert_false(wait_state(m, KL_FLEET_MEMBER_REGISTERED, 2000));
    kl_fleet_member_stop(m);
}

/* A registered server whose write permission is taken away: its next
 * record update is refused, and the log says etcd refused it - not that
 * etcd is unreachable (it answered). Permission back: registered again. */
static void test_refused_after_registration(void **state)
{
    (void)state;
    char logpath[] = "/tmp/kl-fleet-auth-log.XXXXXX";
    int logfd = mkstemp(logpath);
    assert_true(logfd >= 0);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_int_equal(dup2(logfd, STDERR_FILENO), STDERR_FILENO);

    kl_fleet_member *m = member_as("b-1", "b-1", pw_b);
    bool registered = wait_state(m, KL_FLEET_MEMBER_REGISTERED, 3000);
    te_ctl(&cluster,
           "role revoke-permission keyless-server-b-1 %sdir/servers/b-1",
           PREFIX);
    kl_fleet_server s;
    record(&s, "b-1");
    s.priority = 50; /* a change: the record is written again */
    char err[512] = "";
    kl_status up = kl_fleet_member_update(m, &s, err, sizeof err);
    bool refused = wait_state(m, KL_FLEET_MEMBER_UNREACHABLE, 5000);
    te_ctl(&cluster,
           "role grant-permission keyless-server-b-1 readwrite "
           "%sdir/servers/b-1",
           PREFIX);
    /* another change, so that the write is tried again at once */
    s.priority = 60;
    kl_status up2 = kl_fleet_member_update(m, &s, err, sizeof err);
    bool back = wait_state(m, KL_FLEET_MEMBER_REGISTERED, 10000);
    kl_fleet_server_clear(&s);
    kl_fleet_member_stop(m);

    fflush(stderr);
    assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
    close(saved);
    char *log = tu_read_file(logpath, NULL);
    close(logfd);
    unlink(logpath);
    assert_non_null(log);
    fprintf(stderr, "%s", log); /* the test's own output, as before */
    assert_true(registered);
    ec_ok(up, err);
    ec_ok(up2, err);
    assert_true(refused);
    assert_true(back);
    ec_expect(log, "fleet: etcd refused to keep " PREFIX "dir/servers/b-1 "
                   "registered");
    ec_expect(log, "permission denied: etcd user \"b-1\" may not write");
    assert_null(strstr(log, "etcd unreachable"));
    free(log);
}

/* ---- keylessd --------------------------------------------------------- */

/* The value of series name on 127.0.0.1:port/metrics (-1: absent or no
 * answer yet). */
static double metric(uint16_t port, const char *name)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool up = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    if (!up)
        return -1;
    char *body = NULL;
    assert_int_equal(tn_http_get(port, "/metrics", &body), 200);
    char needle[128];
    snprintf(needle, sizeof needle, "\n%s ", name);
    const char *at = strstr(body, needle);
    double v = at ? strtod(at + strlen(needle), NULL) : -1;
    free(body);
    return v;
}

static void daemon_flags(char flags[8][1300], const char *name,
                         const char *user, const char *pwfile, const char *more,
                         const char *argv[14])
{
    snprintf(flags[0], sizeof flags[0], "--fleet-etcd-endpoints=%s",
             cluster.m[0].url);
    snprintf(flags[1], sizeof flags[1], "--fleet-name=%s", name);
    snprintf(flags[2], sizeof flags[2], "--fleet-etcd-user=%s", user);
    snprintf(flags[3], sizeof flags[3], "--fleet-etcd-password-file=%s",
             pwfile);
    int n = 0;
    for (int i = 0; i < 4; i++)
        argv[n++] = flags[i];
    argv[n++] = "--fleet-prefix=" PREFIX;
    argv[n++] = "--fleet-region=eu";
    argv[n++] = "--fleet-advertise-host=127.0.0.1";
    argv[n++] = "--fleet-lease-ttl=2";
    argv[n++] = "--metrics-port=0";
    argv[n++] = more;
    argv[n] = NULL;
}

static void test_daemon(void **state)
{
    (void)state;
    kl_etcd *rd = client_as("rt", pw_rt);
    char *keydir = tp_tempdir("fleet-auth-keys");
    tp_copy_key(keydir, tp_path("keys/ecdsa-p256.key"));

    /* --check: a password file others can read, named with its fix */
    char bin[1100], kd[1300], cert[1300], key[1300], ca[1300];
    snprintf(bin, sizeof bin, "%s/keylessd", tu_bin_dir());
    snprintf(kd, sizeof kd, "--private-key-dirs=%s", keydir);
    snprintf(cert, sizeof cert, "--auth-cert=%s", tp_path("server.crt"));
    snprintf(key, sizeof key, "--auth-key=%s", tp_path("server.key"));
    snprintf(ca, sizeof ca, "--cloudflare-ca-cert=%s", tp_path("ca.crt"));
    static char flags[8][1300];
    const char *fl[14];
    daemon_flags(flags, "b-1", "b-1", pw_open, "--check", fl);
    const char *argv[20] = {bin, cert, key, ca, kd};
    int n = 5;
    for (int i = 0; fl[i]; i++)
        argv[n++] = fl[i];
    argv[n] = NULL;
    char *out = NULL;
    int rc = td_run(argv, &out, 20000);
    fprintf(stderr, "%s", out);
    assert_int_not_equal(rc, 0);
    ec_expect(out, "fleet_etcd_password_file: etcd password file");
    ec_expect(out, "readable by others (mode 644): run chmod 600");
    free(out);
    const char *argv2[] = {
        bin,       cert, key, ca, kd, flags[0], "--fleet-etcd-user=b-1",
        "--check", NULL};
    rc = td_run(argv2, &out, 20000);
    assert_int_not_equal(rc, 0);
    ec_expect(out, "fleet_etcd_user: set without fleet_etcd_password_file");
    free(out);

    /* a wrong password: logged, it serves its keys, registers once the
     * file is fixed */
    char fixable[1200];
    write_pw(fixable, sizeof fixable, "fixd", "not-it", 0600);
    daemon_flags(flags, "b-1", "b-1", fixable, NULL, fl);
    td_daemon d;
    td_opts o = {.name = "auth-b", .key_dirs = keydir, .extra = fl};
    td_start(&d, &o);
    kl_client *cl = td_connect(&d);
    double until = td_now_ms() + 5000;
    char *log = NULL;
    while (td_now_ms() < until) {
        free(log);
        log = td_read_log(&d);
        if (strstr(log, "refused user \"b-1\""))
            break;
        ec_sleep_ms(50);
    }
    fprintf(stderr, "%s", log);
    ec_expect(log, "fleet: cannot register " PREFIX "dir/servers/b-1 yet, "
                   "retrying: etcd at");
    ec_expect(log, "refused user \"b-1\": wrong user name or password");
    assert_null(strstr(log, "not-it"));
    free(log);
    td_expect_ping(&d, cl);
    assert_int_equal(health_of(rd, "b-1"), -1);
    write_pw(fixable, sizeof fixable, "fixd", "pw-b-1", 0600);
    until = td_now_ms() + 10000;
    while (health_of(rd, "b-1") < 0 && td_now_ms() < until)
        ec_sleep_ms(50);
    assert_int_equal(health_of(rd, "b-1"), KL_FLEET_HEALTH_OK);
    td_expect_ping(&d, cl);
    kl_client_close(cl);

    /* a router reading the directory as the read-only user, its tokens
     * expiring between the liveness reads (every 2 s): in sync, and b-1
     * listed */
    uint16_t mport = tn_free_port();
    static char rf[6][1300];
    snprintf(rf[0], sizeof rf[0], "--fleet-etcd-endpoints=%s",
             cluster.m[0].url);
    snprintf(rf[1], sizeof rf[1], "--fleet-etcd-password-file=%s", pw_rt);
    snprintf(rf[2], sizeof rf[2], "--router-cert=%s", tp_path("client.crt"));
    snprintf(rf[3], sizeof rf[3], "--router-key=%s", tp_path("client.key"));
    snprintf(rf[4], sizeof rf[4], "--metrics-port=%u", mport);
    const char *rfl[] = {rf[0],
                         rf[1],
                         rf[2],
                         rf[3],
                         rf[4],
                         "--fleet-prefix=" PREFIX,
                         "--fleet-etcd-user=rt",
                         NULL};
    td_daemon rtd;
    td_opts ro = {.name = "auth-rt", .key_dirs = keydir, .extra = rfl};
    td_start(&rtd, &ro);
    until = td_now_ms() + 5000;
    while ((metric(mport, "keylessd_fleet_directory_in_sync") != 1 ||
            metric(mport, "keylessd_fleet_directory_servers") != 1) &&
           td_now_ms() < until)
        ec_sleep_ms(50);
    assert_true(metric(mport, "keylessd_fleet_directory_in_sync") == 1);
    assert_true(metric(mport, "keylessd_fleet_directory_servers") == 1);
    ec_sleep_ms(4500); /* two liveness reads, each with a new token */
    assert_true(metric(mport, "keylessd_fleet_directory_in_sync") == 1);
    log = td_read_log(&rtd);
    assert_null(strstr(log, "out of sync"));
    free(log);
    assert_int_equal(td_stop(&rtd, 0), 0);

    assert_int_equal(td_stop(&d, 0), 0);
    assert_int_equal(health_of(rd, "b-1"), -1); /* revoked at the stop */

    /* another server's user: permission denied, logged with the user */
    daemon_flags(flags, "a-1", "b-1", pw_b, NULL, fl);
    td_opts o2 = {.name = "auth-a", .key_dirs = keydir, .extra = fl};
    td_start(&d, &o2);
    until = td_now_ms() + 5000;
    log = NULL;
    while (td_now_ms() < until) {
        free(log);
        log = td_read_log(&d);
        if (strstr(log, "permission denied"))
            break;
        ec_sleep_ms(50);
    }
    fprintf(stderr, "%s", log);
    ec_expect(log, "fleet: cannot register " PREFIX "dir/servers/a-1 yet");
    ec_expect(log, "permission denied: etcd user \"b-1\" may not write there");
    free(log);
    cl = td_connect(&d);
    td_expect_ping(&d, cl);
    kl_client_close(cl);
    assert_int_equal(td_stop(&d, 0), 0);
    tp_rmtree(keydir);
    kl_etcd_free(rd);
}

/* Mutual TLS and password auth together, as docs/FLEET.md sets them up:
 * the certificate gets a client to the gateway, the user decides what it
 * may do. */
static void test_tls_and_auth(void **state)
{
    (void)state;
    te_cluster tc;
    te_start_auth(&tc, 1, true, 0);
    te_ctl(&tc, "role add keyless-server-a-1");
    te_ctl(&tc, "role grant-permission keyless-server-a-1 readwrite "
                "/t/dir/servers/a-1");
    te_ctl(&tc, "role grant-permission keyless-server-a-1 read --prefix /t/");
    te_ctl(&tc, "user add a-1 --new-user-password 'pw-a \\\"1\"'");
    te_ctl(&tc, "user grant-role a-1 keyless-server-a-1");
    te_auth_enable(&tc);
    const char *urls[TE_MAX_MEMBERS];
    te_endpoints(&tc, urls);
    /* a client certificate without a CommonName (etcd's gateway refuses
     * one with a CN while auth is on) */
    char ext[1300];
    snprintf(ext, sizeof ext, "%s/nocn-ext.cnf", dir);
    FILE *f = fopen(ext, "w");
    assert_non_null(f);
    fputs("basicConstraints=critical,CA:FALSE\n"
          "keyUsage=critical,digitalSignature\n"
          "extendedKeyUsage=clientAuth\n",
          f);
    assert_int_equal(fclose(f), 0);
    tu_sh("openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
          "-nodes -keyout %s/nocn.key -subj '/O=keyless fleet' 2>/dev/null | "
          "openssl x509 -req -CA %s -CAkey %s -days 2 -extfile %s "
          "-out %s/nocn.crt 2>/dev/null",
          dir, tp_path("ca.crt"), tp_path("ca.key"), ext, dir);
    char nocn_crt[1300], nocn_key[1300];
    snprintf(nocn_crt, sizeof nocn_crt, "%s/nocn.crt", dir);
    snprintf(nocn_key, sizeof nocn_key, "%s/nocn.key", dir);
    kl_etcd_opts o = {.endpoints = urls,
                      .n_endpoints = 1,
                      .timeout_ms = 3000,
                      .ca_file = tp_path("ca.crt"),
                      .cert_file = tp_path("client.crt"),
                      .key_file = tp_path("client.key"),
                      .user = "a-1",
                      .password_file = pw_a};
    kl_etcd *a, *anon, *cn;
    char err[512] = "";
    /* the test PKI's client certificate has a CN: refused, said so */
    ec_ok(kl_etcd_new(&o, &cn, err, sizeof err), err);
    ec_status(put(cn, PREFIX "dir/servers/a-1", 0, err, sizeof err),
              KL_E_CONFIG, err);
    ec_expect(err, "an etcd certificate without a CN");
    kl_etcd_watch *w;
    ec_ok(kl_etcd_watch_new(cn, PREFIX "dir/", 7, 0, &w, err, sizeof err), err);
    kl_etcd_free(cn);
    o.cert_file = nocn_crt;
    o.key_file = nocn_key;
    ec_ok(kl_etcd_new(&o, &a, err, sizeof err), err);
    o.user = o.password_file = NULL;
    ec_ok(kl_etcd_new(&o, &anon, err, sizeof err), err);
    ec_ok(put(a, PREFIX "dir/servers/a-1", 0, err, sizeof err), err);
    ec_status(put(a, PREFIX "dir/servers/b-1", 0, err, sizeof err), KL_E_CONFIG,
              err);
    ec_expect(err, "permission denied: etcd user \"a-1\"");
    /* without a user: no token, and the gateway's own certificate is no
     * user: refused */
    kl_status st = put(anon, PREFIX "dir/servers/a-1", 0, err, sizeof err);
    fprintf(stderr, "TLS, no user: %s\n", err);
    ec_status(st, KL_E_CONFIG, err);
    /* the watch with the CN certificate: refused too, said so */
    kl_etcd_watch *wa;
    ec_ok(kl_etcd_watch_new(a, PREFIX "dir/", 7, 0, &wa, err, sizeof err), err);
    double until = td_now_ms() + 3000;
    while (!kl_etcd_watch_connected(wa) && td_now_ms() < until)
        ec_ok(kl_etcd_watch_step(wa, 50, NULL, NULL, err, sizeof err), err);
    assert_true(kl_etcd_watch_connected(wa));
    kl_etcd_watch_free(wa);
    st = KL_OK;
    until = td_now_ms() + 3000;
    while (st == KL_OK && td_now_ms() < until)
        st = kl_etcd_watch_step(w, 50, NULL, NULL, err, sizeof err);
    ec_status(st, KL_E_CONFIG, err);
    kl_etcd_watch_free(w);
    kl_etcd_free(a);
    kl_etcd_free(anon);
    te_stop(&tc);
}

int main(void)
{
    /* in order: the first enables auth */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rollout),
        cmocka_unit_test(test_own_record_only),
        cmocka_unit_test(test_leases),
        cmocka_unit_test(test_member_token_expiry),
        cmocka_unit_test(test_watch_token_expiry),
        cmocka_unit_test(test_wrong_password),
        cmocka_unit_test(test_refused_after_registration),
        cmocka_unit_test(test_daemon),
        cmocka_unit_test(test_tls_and_auth),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
