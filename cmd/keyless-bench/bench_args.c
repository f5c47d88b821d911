/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-bench's command line: a table of flags written the Go way
 * (-flag value, -flag=value, bare -flag for booleans; --flag too), the
 * reference bench tool's names where they overlap, and -mix. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "godur.h"
#include "client/opnames.h"
#include "core/time.h"

typedef enum ftype { F_STR, F_UINT, F_DUR, F_BOOL, F_RATE, F_ALIAS } ftype;

typedef struct flag {
    const char *name;
    ftype type;
    size_t off; /* into bench (F_ALIAS: -threads, the one flag aliased) */
    const char *arg, *help;
} flag;

#define OFF(m) offsetof(bench, m)

static const flag flags[] = {
    {"server", F_STR, OFF(server), "HOST[:PORT]",
     "key server; IPv6 as [::1]:2407 (default 127.0.0.1)"},
    {"port", F_UINT, OFF(port), "N", "port when -server has none (2407)"},
    {"ski", F_STR, OFF(ski_hex), "HEX", "SKI of the key to use"},
    {"pubkey", F_STR, OFF(pubkey_file), "FILE",
     "certificate or public key of the key (gives the SKI; needed for "
     "-verify and rsa-decrypt)"},
    {"ski-file", F_STR, OFF(ski_file), "FILE",
     "many keys: SKIs one per line (hex, the first word), each request "
     "signs with one picked at random"},
    {"op", F_STR, OFF(op_name), "OP",
     "operation (default: from -pubkey's key, rsa-sha256, ecdsa-sha256 or "
     "ed25519; else ecdsa-sha256)"},
    {"mix", F_STR, OFF(mix), "OP[@KEY][:W],...",
     "weighted mix of operations; KEY is an SKI or a key file (default: "
     "-ski/-pubkey), W a weight (1)"},
    {"workers", F_UINT, OFF(ref_workers), "N",
     "reference tool: N connections with one request in flight each"},
    {"connections", F_UINT, OFF(connections), "N", "connections (1)"},
    {"depth", F_UINT, OFF(depth), "D",
     "requests in flight per connection, closed loop (1; -bandwidth: "
     "256); open loop: the cap per connection (4096)"},
    {"rate", F_RATE, OFF(rate), "R",
     "open loop: R requests per second in all, latency from each "
     "request's intended send time"},
    {"tick", F_DUR, OFF(tick_ns), "DUR",
     "open loop: wake up to send at most once per DUR, sending every "
     "request due by then in one write; latency still runs from each "
     "request's own intended time (0: a wake-up per request)"},
    {"duration", F_DUR, OFF(duration_ns), "DUR", "measured time (10s)"},
    {"warmup", F_DUR, OFF(warmup_ns), "DUR",
     "load before the measured time, not counted (0)"},
    {"pause", F_DUR, OFF(pause_ns), "DUR",
     "closed loop: wait after each answer before the next request"},
    {"bandwidth", F_BOOL, OFF(bandwidth), NULL,
     "reference tool: as many requests as the connections take"},
    {"timeout", F_DUR, OFF(timeout_ms), "DUR",
     "deadline of each request, sent to the server (5s)"},
    {"threads", F_UINT, OFF(threads), "N",
     "event loops, connections shared among them (1)"},
    {"gmp", F_ALIAS, 0, "N", "the reference tool's GOMAXPROCS: -threads"},
    {"histogram-min", F_DUR, OFF(hist_min), "DUR", "first bucket's start"},
    {"histogram-max", F_DUR, OFF(hist_max), "DUR",
     "last bucket's end (default: 20 buckets up to the p99.9)"},
    {"histogram-step", F_DUR, OFF(hist_step), "DUR", "bucket width"},
    {"cert", F_STR, OFF(cert), "FILE", "client certificate (PEM)"},
    {"key", F_STR, OFF(key), "FILE", "its private key (PEM)"},
    {"ca", F_STR, OFF(ca), "FILE", "CA the server must chain to"},
    {"server-name", F_STR, OFF(server_name), "NAME",
     "name checked in the server certificate (default: HOST)"},
    {"tls12", F_BOOL, OFF(tls12), NULL, "negotiate TLS 1.2"},
    {"sni", F_STR, OFF(sni), "NAME", "SNI item in every request"},
    {"server-ip", F_STR, OFF(server_ip_text), "IP",
     "server IP item in every request"},
    {"verify", F_BOOL, OFF(verify), NULL,
     "verify every answer with the public key"},
    {"json", F_BOOL, OFF(json), NULL, "print the results as JSON"},
    {"idle", F_BOOL, OFF(idle), NULL,
     "open the connections and hold them idle for -duration"},
    {"progress", F_BOOL, OFF(progress_flag), NULL,
     "live progress line (default: when stdout is a terminal)"},
};
#define NFLAGS (sizeof flags / sizeof flags[0])

void bench_defaults(bench *b)
{
    memset(b, 0, sizeof *b);
    b->server = "127.0.0.1";
    b->port = 2407;
    b->connections = 1;
    b->depth = 1;
    b->threads = 1;
    b->duration_ns = 10 * KL_NS_PER_S;
    b->timeout_ms = 5000;
    b->progress_flag = -1;
}

static void usage(FILE *f)
{
    fputs("usage: keyless-bench [FLAGS]\n\n"
          "Loads a key server and measures throughput and latency.\n"
          "Flags take one dash or two, and -flag=value or -flag value.\n\n",
          f);
    for (size_t i = 0; i < NFLAGS; i++) {
        char left[64];
        snprintf(left, sizeof left, "-%s%s%s", flags[i].name,
                 flags[i].arg ? " " : "", flags[i].arg ? flags[i].arg : "");
        fprintf(f, "  %-26s %s\n", left, flags[i].help);
    }
    fprintf(f,
            "\nOperations: %s (or the protocol's names, e.g. "
            "OpECDSASignSHA256).\n"
            "Durations: 10s, 0.5ms, 20us or 20\xc2\xb5s, 1m30s.\n"
            "Exit status: 0 success, 1 errors during the run, 2 bad "
            "command line,\n3 connection failure.\n",
            kl_op_short_list());
}

static int bad(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "keyless-bench: ");
    fprintf(stderr, fmt, a ? a : "", b ? b : "");
    fprintf(stderr, "\n(see keyless-bench -h)\n");
    return BENCH_EXIT_USAGE;
}

static const flag *find(const char *name, size_t len)
{
    for (size_t i = 0; i < NFLAGS; i++)
        if (strlen(flags[i].name) == len && !strncmp(flags[i].name, name, len))
            return flags[i].type == F_ALIAS ? find("threads", 7) : &flags[i];
    return NULL;
}

static int set_value(bench *b, const flag *f, const char *v)
{
    void *p = (char *)b + f->off;
    char *end;
    uint64_t ns;
    switch (f->type) {
    case F_STR: *(const char **)p = v; return BENCH_EXIT_OK;
    case F_BOOL:
        if (!v || !strcmp(v, "true") || !strcmp(v, "1")) {
            if (f->off == OFF(progress_flag))
                *(int *)p = 1;
            else
                *(bool *)p = true;
        } else if (!strcmp(v, "false") || !strcmp(v, "0")) {
            if (f->off == OFF(progress_flag))
                *(int *)p = 0;
            else
                *(bool *)p = false;
        } else {
            return bad("-%s=%s: expected true or false", f->name, v);
        }
        return BENCH_EXIT_OK;
    case F_UINT: {
        errno = 0;
        unsigned long n = strtoul(v, &end, 10);
        if (errno || *end || end == v || *v == '-' || n > 1000000)
            return bad("-%s %s: expected a number", f->name, v);
        *(unsigned *)p = (unsigned)n;
        return BENCH_EXIT_OK;
    }
    case F_RATE: {
        errno = 0;
        double r = strtod(v, &end);
        if (errno || *end || end == v || !(r > 0) || !isfinite(r) || r > 1e8)
            return bad("-%s %s: expected requests per second (> 0)", f->name,
                       v);
        *(double *)p = r;
        return BENCH_EXIT_OK;
    }
    case F_DUR:
        if (kl_dur_parse(v, &ns) != KL_OK)
            return bad("-%s %s: expected a duration such as 10s, 0.5ms or "
                       "20us",
                       f->name, v);
        if (f->off == OFF(timeout_ms)) {
            if (ns < KL_NS_PER_MS || ns > 3600 * KL_NS_PER_S)
                return bad("-%s %s: between 1ms and 1h", f->name, v);
            *(int *)p = (int)(ns / KL_NS_PER_MS);
        } else {
            *(uint64_t *)p = ns;
        }
        return BENCH_EXIT_OK;
    case F_ALIAS: break;
    }
    return BENCH_EXIT_USAGE;
}

int bench_parse_args(bench *b, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "-help") || !strcmp(a, "--help")) {
            usage(stdout);
            return BENCH_EXIT_HELP;
        }
        if (a[0] != '-' || !a[1])
            return bad("unexpected argument \"%s\"%s", a, NULL);
        const char *name = a + (a[1] == '-' ? 2 : 1);
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const flag *f = find(name, len);
        if (!f)
            return bad("unknown flag %s%s", a, NULL);
        const char *v = eq ? eq + 1 : NULL;
        if (!v && f->type != F_BOOL) {
            if (i + 1 >= argc)
                return bad("-%s needs a value%s", f->name, NULL);
            v = argv[++i];
        }
        int rc = set_value(b, f, v);
        if (rc != BENCH_EXIT_OK)
            return rc;
        if (f->off == OFF(connections))
            b->connections_set = true;
        else if (f->off == OFF(depth))
            b->depth_set = true;
        else if (f->off == OFF(hist_min) || f->off == OFF(hist_max) ||
                 f->off == OFF(hist_step))
            b->hist_set = true;
    }
    return BENCH_EXIT_OK;
}

/* ---- -mix ---------------------------------------------------------- */

/* One item: OP, OP@KEY, OP:W or OP@KEY:W. */
static int mix_item(bop *o, char *item, char *err, size_t errlen)
{
    o->weight = 1;
    char *colon = strrchr(item, ':');
    if (colon && colon[1] &&
        strspn(colon + 1, "0123456789") == strlen(colon + 1)) {
        unsigned long w = strtoul(colon + 1, NULL, 10);
        if (w < 1 || w > 1000000) {
            snprintf(err, errlen, "\"%s\": weight must be 1..1000000", item);
            return BENCH_EXIT_USAGE;
        }
        o->weight = (unsigned)w;
        *colon = 0;
    }
    char *at = strchr(item, '@');
    if (at) {
        *at = 0;
        if (!at[1] || strlen(at + 1) >= sizeof o->key_arg) {
            snprintf(err, errlen, "\"%s\": key after @ missing or too long",
                     item);
            return BENCH_EXIT_USAGE;
        }
        snprintf(o->key_arg, sizeof o->key_arg, "%s", at + 1);
    }
    if (!kl_op_parse(item, &o->op)) {
        snprintf(err, errlen, "unknown operation \"%s\"", item);
        return BENCH_EXIT_USAGE;
    }
    const char *s = kl_op_short(o->op);
    if (s)
        snprintf(o->label, sizeof o->label, "%s", s);
    else
        snprintf(o->label, sizeof o->label, "0x%02x", o->op);
    return BENCH_EXIT_OK;
}

int bench_parse_mix(bench *b, const char *mix, char *err, size_t errlen)
{
    char buf[4096];
    if (strlen(mix) >= sizeof buf) {
        snprintf(err, errlen, "list too long");
        return BENCH_EXIT_USAGE;
    }
    snprintf(buf, sizeof buf, "%s", mix);
    b->nops = 0;
    b->total_weight = 0;
    char *save = NULL;
    for (char *it = strtok_r(buf, ",", &save); it;
         it = strtok_r(NULL, ",", &save)) {
        if (b->nops == BENCH_MAX_OPS) {
            snprintf(err, errlen, "at most %d operations", BENCH_MAX_OPS);
            return BENCH_EXIT_USAGE;
        }
        bop *o = &b->ops[b->nops];
        memset(o, 0, sizeof *o);
        int rc = mix_item(o, it, err, errlen);
        if (rc != BENCH_EXIT_OK)
            return rc;
        b->total_weight += o->weight;
        b->nops++;
    }
    if (!b->nops) {
        snprintf(err, errlen, "no operation in \"%s\"", mix);
        return BENCH_EXIT_USAGE;
    }
    return BENCH_EXIT_OK;
}
