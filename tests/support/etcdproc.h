/* SPDX-License-Identifier: Apache-2.0 */
/* Real etcd processes for the tests of src/fleet: one member or a
 * cluster, on free 127.0.0.1 ports, data in a fresh directory under
 * /dev/shm (fsync costs nothing there), logs beside it. Each member dies
 * with the test process (PR_SET_PDEATHSIG) and every member still running
 * at exit is killed, so a failing test never leaves one behind. A missing
 * etcd binary fails the test, naming the package. */
#ifndef KL_TEST_ETCDPROC_H
#define KL_TEST_ETCDPROC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define TE_MAX_MEMBERS 5

typedef struct te_member {
    pid_t pid; /* 0: not running */
    uint16_t client_port, peer_port;
    char url[64]; /* http(s)://127.0.0.1:client_port */
    char name[16];
} te_member;

typedef struct te_cluster {
    int n;
    te_member m[TE_MAX_MEMBERS];
    char *dir; /* data directories and logs */
    bool tls;  /* client port over mutual TLS with the test PKI */
    char initial_cluster[512];
    /* etcd's --auth-token-ttl in seconds (0: etcd's default, 300); set
     * through te_start_auth */
    int auth_token_ttl;
    /* after te_auth_enable: root's password, for etcdctl */
    char root_password[32];
} te_cluster;

/* Starts n members (1 or 3, ...) and waits until the cluster serves a
 * linearizable read on every member. tls: clients must present a
 * certificate of the test PKI (tests/support/pki.h), the server presents
 * server.crt. Fails the test on error, with the logs' tails. */
void te_start(te_cluster *c, int n, bool tls);
/* te_start with simple tokens that expire after token_ttl_s seconds
 * unused (etcd's --auth-token-ttl), for the tests of password auth. */
void te_start_auth(te_cluster *c, int n, bool tls, int token_ttl_s);
/* Runs etcdctl (the Debian package etcd-client) against the cluster,
 * as root once auth is enabled, with args after the endpoints; fails the
 * test when it fails, with its output. */
void te_ctl(const te_cluster *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Adds user root (password in c->root_password) with the root role and
 * enables auth: from then on every call needs a user. */
void te_auth_enable(te_cluster *c);
/* Kills member i with sig (SIGKILL: a crash) and reaps it. */
void te_kill(te_cluster *c, int i, int sig);
/* Starts member i again on its data directory and ports, and waits until
 * it serves. */
void te_restart(te_cluster *c, int i);
/* Stops every member (SIGTERM, then SIGKILL) and removes the directory.
 * Safe to call twice and on a cluster never started. */
void te_stop(te_cluster *c);
/* The members' client URLs, for kl_etcd_opts.endpoints. */
void te_endpoints(const te_cluster *c, const char *urls[TE_MAX_MEMBERS]);
/* Prints the last bytes of member i's log. */
void te_dump_log(const te_cluster *c, int i);

#endif
