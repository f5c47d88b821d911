/* SPDX-License-Identifier: Apache-2.0 */
/* Running keylessd ($KL_BIN_DIR/keylessd) from a test: on a free loopback
 * port, with the test PKI, its output in a log file, stopped with SIGTERM
 * and its exit status returned. A daemon whose test process dies is killed
 * (PR_SET_PDEATHSIG), and every daemon still running at exit is killed, so
 * a failing test never leaves one behind. Also: running a program and
 * capturing its output (keyless-cli, scripts). */
#ifndef KL_TEST_DAEMON_H
#define KL_TEST_DAEMON_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "keyless/client.h"

typedef struct td_daemon {
    pid_t pid; /* 0 once stopped */
    uint16_t port;
    char log_path[1024];
    char name[64];
} td_daemon;

typedef struct td_opts {
    const char *name;      /* names the log file; default "keylessd" */
    const char *key_dirs;  /* --private-key-dirs (or NULL) */
    const char *key_files; /* --private-key-files (or NULL) */
    /* A key on a slow token (slowkey.h, td_slow_key's URI), or NULL. With
     * it the stores are given as --private-key-stores: the token first,
     * then key_dirs and key_files. */
    const char *slow_key;
    /* NULL-terminated extra flags, e.g. {"--idle-timeout=1s", NULL} */
    const char *const *extra;
    /* TLS identity and client CA; NULL: the test PKI's server.crt,
     * server.key and ca.crt */
    const char *cert, *key, *ca;
    int shards, workers; /* 0: 2 each (small, but still threaded) */
    uint16_t port;       /* 0: a free loopback port */
} td_opts;

/* Starts keylessd and waits (bounded) until it accepts TCP connections.
 * Fails the test, printing the log's tail, when it does not. */
void td_start(td_daemon *d, const td_opts *o);
/* SIGTERM, then waits up to timeout_ms (<= 0: 15 s) for the exit; kills it
 * with SIGKILL after that. Returns the exit status, 128 + signal when it
 * died of a signal, or -1 when it had to be killed. Prints the log's tail
 * when the status is not 0. */
int td_stop(td_daemon *d, int timeout_ms);
/* Sends a signal without waiting. */
void td_signal(td_daemon *d, int sig);
/* SIGSTOP, then waits until every thread of the daemon is stopped (fails
 * the test after 2 s). Resume with td_signal(d, SIGCONT); td_stop resumes
 * a daemon left frozen by a failed test. */
void td_freeze(td_daemon *d);
/* Waits up to timeout_ms for the daemon to exit by itself; returns its
 * status as td_stop does, or -2 when it is still running. */
int td_wait(td_daemon *d, int timeout_ms);
/* In a child of fork(), before exec: stdin from /dev/null, stdout and
 * stderr to log_path (appended or truncated), killed when the test process
 * dies (and _exit(127) if it already has). _exit(126) when the files
 * cannot be opened. */
void td_child_setup(const char *log_path, bool append, pid_t parent);

/* Prints the last bytes of the log to stderr. */
void td_dump_log(const td_daemon *d);
/* The log as text (malloc'd). */
char *td_read_log(const td_daemon *d);

/* Client options for this daemon with the test PKI's client certificate,
 * verifying the server against the test CA. */
kl_client_opts td_client_opts(const td_daemon *d);
/* Connects with td_client_opts; fails the test on error. */
kl_client *td_connect(const td_daemon *d);

/* Target options for these daemons (in this order of preference) with the
 * test PKI; the "127.0.0.1:PORT" strings live in addrs, which must outlive
 * the target's creation. Fast pings/backoff are left at their defaults. */
typedef struct td_addrs {
    char text[8][32];
    const char *list[8];
} td_addrs;
kl_target_opts td_target_opts(const td_daemon *const *d, size_t n,
                              td_addrs *addrs);
/* kl_target_new with td_target_opts; fails the test on error. */
kl_target *td_target(const td_daemon *const *d, size_t n,
                     const kl_target_opts *overrides);

/* Runs argv[0] (a path) with argv, stdin from /dev/null; *output (may be
 * NULL) gets stdout and stderr together (malloc'd). Returns the exit status
 * (128 + signal when killed; -1 on timeout, after killing it). */
int td_run(const char *const *argv, char **output, int timeout_ms);

/* Milliseconds since some fixed point (monotonic). */
double td_now_ms(void);

/* kl_client_call with a generous timeout that fails the test (printing the
 * daemon's log) unless a response arrives. */
void td_call(const td_daemon *d, kl_client *c, const kl_request_spec *spec,
             kl_client_result *r);
/* td_call, then asserts an error response with this code. */
void td_expect_error(const td_daemon *d, kl_client *c,
                     const kl_request_spec *spec, uint8_t err);
/* A ping with a payload must come back as a pong with the same bytes. */
void td_expect_ping(const td_daemon *d, kl_client *c);
#endif
