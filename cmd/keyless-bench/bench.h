/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-bench's parts (cmd/keyless-bench/keyless-bench.c is its event loop):
 * the command line (bench_args.c), keys, inputs and connections
 * (bench_setup.c), and counting and reporting (bench_report.c). They live
 * in the client library so the tool stays a set of small files and the
 * parsers can be unit-tested; nothing else uses them. */
#ifndef KL_BENCH_H
#define KL_BENCH_H

#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "lathist.h"
#include "keyless/client.h"

enum {
    BENCH_EXIT_OK = 0,
    BENCH_EXIT_FAIL = 1,    /* errors during the run */
    BENCH_EXIT_USAGE = 2,   /* bad command line, key or input file */
    BENCH_EXIT_CONNECT = 3, /* a connection could not be made */
    BENCH_EXIT_HELP = 100,  /* -h: printed, exit 0 */
};

#define BENCH_NINPUT 64 /* distinct inputs per operation */
#define BENCH_MAX_OPS 16

typedef enum bench_mode {
    MODE_CLOSED = 0, /* -depth in flight per connection */
    MODE_OPEN,       /* -rate R per second, from intended send times */
} bench_mode;

/* One operation of the mix: opcode, key, weight and its inputs. */
typedef struct bop {
    uint8_t op;
    uint8_t ski[20];
    bool have_ski;
    EVP_PKEY *pub; /* NULL unless a key file was given */
    unsigned weight;
    char key_arg[512]; /* the SKI or file as given */
    char label[64];    /* "ecdsa-sha256" */
    uint8_t *in;       /* BENCH_NINPUT inputs of inlen bytes */
    size_t inlen;
    bool from_list; /* -ski-file: each request picks one of b->skis */
} bop;

typedef struct bconn {
    kl_target *t;
    unsigned inflight;
    bool dirty; /* submitted to since its last kl_async_process */
} bconn;

typedef struct bworker bworker;

typedef struct breq {
    bworker *w;
    bconn *c;
    uint64_t intended; /* when it was meant to leave (ns) */
    uint16_t opi, ini; /* operation and input */
    struct breq *next; /* free list */
} breq;

typedef struct bstats {
    kl_lathist lat;
    uint64_t *lin; /* reference histogram: nlin buckets + under + over */
    uint64_t ok, err_answers, timeouts, failed, verify_failed;
    uint64_t op_ok[BENCH_MAX_OPS], op_err[BENCH_MAX_OPS];
    uint8_t last_err_code;
    _Atomic uint64_t pub_ok;  /* ok, published for the progress line */
    _Atomic uint64_t pub_p99; /* p99 so far (ns), likewise */
} bstats;

typedef struct bench bench;

struct bworker {
    bench *b;
    int id;
    bconn *conns;
    size_t nconns;
    int epfd, tfd;
    bool no_pwait2; /* an old kernel: the timerfd wakes the loop */
    uint64_t rnd;
    breq *free, *chunks;
    /* open loop */
    uint64_t next_send, interval_ns;
    size_t rr;
    /* closed loop with -pause */
    struct {
        bconn *c;
        uint64_t at;
    } * paused;
    size_t pause_head, npaused, pause_cap;
    bconn **dirty; /* connections to process at the end of the round */
    size_t ndirty;
    bstats st;
    _Atomic bool done;
};

struct bench {
    /* flags */
    const char *server;
    unsigned port;
    const char *ski_hex, *pubkey_file;
    const char *ski_file; /* -ski-file: many keys, one picked per request */
    const char *op_name, *mix;
    const char *cert, *key, *ca, *server_name;
    const char *sni, *server_ip_text;
    bool tls12;
    unsigned ref_workers, connections, depth, threads;
    bool connections_set, depth_set;
    uint64_t duration_ns, warmup_ns, pause_ns;
    uint64_t tick_ns; /* -tick: open-loop sends batched on this grid */
    bool bandwidth, verify, json, idle;
    double rate;
    int timeout_ms;
    uint64_t hist_min, hist_max, hist_step;
    bool hist_set;
    int progress_flag; /* -1 auto (a terminal), 0 off, 1 on */
    /* derived */
    bench_mode mode;
    bool progress;
    bop ops[BENCH_MAX_OPS];
    unsigned nops;
    uint64_t total_weight;
    uint8_t server_ip[16];
    size_t server_ip_len;
    uint8_t (*skis)[20]; /* -ski-file's SKIs */
    size_t nskis;
    char addr[300];
    size_t nlin;
    /* the run */
    bconn *conns;
    size_t nconns;
    bworker *workers;
    char tls_version[16], cipher[64];
    double connect_s;
    uint64_t t_start, t_measure, t_end;
    uint64_t measured_ns, elapsed_ns;
    double cpu_user_s, cpu_sys_s;
    bool stopped; /* the process was stopped and resumed during the run */
    uint64_t last_prog_ok, last_prog_ns;
    volatile sig_atomic_t *stop; /* set by SIGINT/SIGTERM: end early */
};

/* bench_args.c */
void bench_defaults(bench *b);
/* Parses the command line (Go-style single-dash flags; double dashes
 * work too). BENCH_EXIT_OK, BENCH_EXIT_HELP or BENCH_EXIT_USAGE (the
 * message printed). */
int bench_parse_args(bench *b, int argc, char **argv);
/* Parses a -mix list "OP[@KEY][:WEIGHT],..." into b->ops (KEY: 40 hex
 * digits of an SKI or a certificate/public key file). err says why not. */
int bench_parse_mix(bench *b, const char *mix, char *err, size_t errlen);

/* bench_setup.c */
/* Keys, inputs, the mode; checks the combination of flags. */
int bench_prepare(bench *b);
/* Opens every connection (in parallel, bounded), checks each with a ping. */
int bench_connect(bench *b);
/* -idle: holds -connections idle connections for -duration (memory per
 * connection is measured on the server meanwhile), then reports. */
int bench_hold_idle(bench *b);
void bench_free(bench *b);
/* Reads -ski-file: one SKI per line as 40 hex digits, the line's first
 * word (so `keyless-cli ski` and `keylessd --keystore-debug` output work
 * as they are); blank lines and # comments skipped. err names file:line. */
int bench_load_skis(bench *b, const char *path, char *err, size_t errlen);

/* bench_report.c */
int bench_stats_init(bstats *s, const bench *b);
void bench_stats_free(bstats *s);
/* Counts one completed request (inside the measured window). */
void bench_account(bworker *w, const breq *r, const kl_result *res,
                   uint64_t now);
void bench_progress(bench *b, uint64_t now);
void bench_progress_clear(void);
/* Prints the results (text or JSON); the exit status. */
int bench_report(bench *b);

#endif
