/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-bench's setup: the keys and inputs of each operation, checks on
 * the combination of flags, and the connections - kl_targets for a run,
 * plain kl_clients for -idle (one descriptor each instead of a target's
 * four, so 10,000 fit under the usual 20,000-descriptor limit). */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <openssl/rand.h>
#include <openssl/rsa.h>

#include "bench.h"
#include "godur.h"
#include "client/opnames.h"
#include "client/target_int.h"
#include "client/verify.h"
#include "core/time.h"
#include "keys/keystore.h"

#define CONNECT_BATCH 256

static int fail(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "keyless-bench: ");
    fprintf(stderr, fmt, a ? a : "", b ? b : "");
    fprintf(stderr, "\n");
    return BENCH_EXIT_USAGE;
}

/* ---- keys and inputs ---------------------------------------------------- */

/* The key an operation uses: its own KEY from -mix, else -pubkey/-ski. */
static int resolve_key(bench *b, bop *o)
{
    char err[512];
    const char *file = NULL, *ski = NULL;
    if (o->key_arg[0]) {
        if (strlen(o->key_arg) == 40 &&
            kl_ski_parse(o->key_arg, o->ski) == KL_OK)
            ski = o->key_arg;
        else
            file = o->key_arg;
    } else if (b->nskis) {
        /* -ski-file: the first SKI stands for the list (submit picks) */
        memcpy(o->ski, b->skis[0], 20);
        o->have_ski = o->from_list = true;
        if (o->op == KL_OP_RSA_DECRYPT || b->verify)
            return fail("-ski-file gives no public keys: %s%s",
                        b->verify ? "-verify needs -pubkey"
                                  : "rsa-decrypt needs -pubkey",
                        NULL);
        return BENCH_EXIT_OK;
    } else {
        file = b->pubkey_file;
        ski = b->ski_hex;
    }
    if (file) {
        if (kl_pubkey_load(file, &o->pub, err, sizeof err) != KL_OK)
            return fail("%s", err, NULL);
        if (kl_ski_from_pkey(o->pub, o->ski) != KL_OK)
            return fail("%s: cannot compute the SKI of this key", file, NULL);
    }
    if (ski) {
        uint8_t s[20];
        if (kl_ski_parse(ski, s) != KL_OK)
            return fail("-ski %s: expected 40 hex digits%s", ski, NULL);
        if (o->pub && memcmp(s, o->ski, 20) != 0)
            return fail("-ski %s does not match the SKI of %s", ski, file);
        memcpy(o->ski, s, 20);
    }
    o->have_ski = file || ski;
    if (o->op == KL_OP_PING)
        return BENCH_EXIT_OK;
    if (!o->have_ski)
        return fail("%s needs a key: -ski HEX, -pubkey FILE or OP@KEY in "
                    "-mix%s",
                    o->label, NULL);
    if (o->pub) {
        char why[256];
        uint8_t sig[8] = {0};
        /* kl_verify_output says "does not fit" before looking at bytes */
        if (kl_verify_output(o->pub, o->op, sig, 1, sig, 1, why, sizeof why) ==
                KL_E_BAD_VALUE &&
            strstr(why, "does not fit"))
            return fail("%s does not fit the key %s", o->label,
                        file ? file : "given");
    }
    if (b->verify && !o->pub)
        return fail("-verify needs the public key of %s: -pubkey FILE or "
                    "OP@FILE%s",
                    o->label, NULL);
    if (o->op == KL_OP_RSA_DECRYPT && !o->pub)
        return fail("rsa-decrypt needs the public key to make ciphertexts: "
                    "-pubkey FILE or rsa-decrypt@FILE%s%s",
                    NULL, NULL);
    return BENCH_EXIT_OK;
}

/* BENCH_NINPUT inputs: digests of the opcode's hash length, Ed25519
 * messages, PKCS#1 v1.5 ciphertexts made with the public key, ping
 * payloads. Random, so no two neighbours in a run sign the same bytes. */
static int make_inputs(bop *o)
{
    const EVP_MD *md = kl_op_md(o->op);
    if (o->op == KL_OP_RSA_DECRYPT)
        o->inlen = (size_t)EVP_PKEY_get_size(o->pub);
    else if (md)
        o->inlen = (size_t)EVP_MD_get_size(md);
    else
        o->inlen = o->op == KL_OP_PING ? 16 : 32;
    o->in = malloc(BENCH_NINPUT * o->inlen);
    if (!o->in || RAND_bytes(o->in, (int)(BENCH_NINPUT * o->inlen)) != 1)
        return fail("cannot make inputs%s%s", NULL, NULL);
    if (o->op != KL_OP_RSA_DECRYPT)
        return BENCH_EXIT_OK;
    for (size_t i = 0; i < BENCH_NINPUT; i++) {
        uint8_t pt[46]; /* a TLS premaster secret's size */
        size_t len = o->inlen;
        EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_pkey(NULL, o->pub, NULL);
        bool ok = ctx && RAND_bytes(pt, sizeof pt) == 1 &&
                  EVP_PKEY_encrypt_init(ctx) == 1 &&
                  EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_PADDING) == 1 &&
                  EVP_PKEY_encrypt(ctx, o->in + i * o->inlen, &len, pt,
                                   sizeof pt) == 1 &&
                  len == o->inlen;
        EVP_PKEY_CTX_free(ctx);
        if (!ok)
            return fail("cannot encrypt with the public key%s%s", NULL, NULL);
    }
    return BENCH_EXIT_OK;
}

/* ---- flags together -------------------------------------------------------
 */

static int check_mode(bench *b)
{
    if (b->rate > 0) {
        b->mode = MODE_OPEN;
        if (b->bandwidth || b->pause_ns || b->ref_workers)
            return fail("-rate (open loop) does not go with -bandwidth, "
                        "-pause or -workers%s%s",
                        NULL, NULL);
    }
    if (b->tick_ns && b->mode != MODE_OPEN)
        return fail("-tick batches the open loop's sends: give -rate too%s%s",
                    NULL, NULL);
    if (b->tick_ns > KL_NS_PER_S)
        return fail("-tick: at most 1s (it delays every request by up to "
                    "that much)%s%s",
                    NULL, NULL);
    if (b->ref_workers) {
        if (b->connections_set)
            return fail("-workers is -connections N with one request in "
                        "flight each: give one of them%s%s",
                        NULL, NULL);
        b->connections = b->ref_workers;
    }
    if (b->bandwidth && b->pause_ns)
        return fail("-bandwidth and -pause do not go together%s%s", NULL, NULL);
    if (b->bandwidth && !b->depth_set)
        b->depth = 256;
    if (b->mode == MODE_OPEN && !b->depth_set)
        b->depth = 4096;
    if (!b->connections || !b->depth || !b->threads)
        return fail("-connections, -depth and -threads must be at least "
                    "1%s%s",
                    NULL, NULL);
    if (b->depth > 65536)
        return fail("-depth: at most 65536%s%s", NULL, NULL);
    if (b->threads > b->connections)
        b->threads = b->connections;
    if (!b->duration_ns)
        return fail("-duration must be more than 0%s%s", NULL, NULL);
    if (b->hist_set) {
        if (!b->hist_max)
            b->hist_max = b->hist_min + KL_NS_PER_MS;
        if (b->hist_max <= b->hist_min)
            return fail("-histogram-max must be above -histogram-min%s%s", NULL,
                        NULL);
        if (!b->hist_step)
            b->hist_step = (b->hist_max - b->hist_min + 19) / 20;
        b->nlin = (size_t)((b->hist_max - b->hist_min + b->hist_step - 1) /
                           b->hist_step);
        if (b->nlin > 1000)
            return fail("-histogram-step: at most 1000 buckets%s%s", NULL,
                        NULL);
    }
    b->progress = b->progress_flag == 1 ||
                  (b->progress_flag < 0 && isatty(STDOUT_FILENO) && !b->json);
    return BENCH_EXIT_OK;
}

/* -server HOST, HOST:PORT or [V6]:PORT, with -port when it has none. */
static int server_address(bench *b)
{
    const char *s = b->server;
    if (!*s)
        return fail("-server: empty%s%s", NULL, NULL);
    if (b->port < 1 || b->port > 65535)
        return fail("-port: 1..65535%s%s", NULL, NULL);
    const char *last = strrchr(s, ':');
    bool v6 = last && strchr(s, ':') != last && s[0] != '[';
    bool has_port = last && !v6 && (s[0] != '[' || last > strchr(s, ']'));
    if (has_port)
        snprintf(b->addr, sizeof b->addr, "%s", s);
    else if (v6)
        snprintf(b->addr, sizeof b->addr, "[%s]:%u", s, b->port);
    else
        snprintf(b->addr, sizeof b->addr, "%s:%u", s, b->port);
    return BENCH_EXIT_OK;
}

int bench_prepare(bench *b)
{
    char err[512];
    int rc;
    if ((rc = check_mode(b)) != BENCH_EXIT_OK ||
        (rc = server_address(b)) != BENCH_EXIT_OK)
        return rc;
    if (b->idle)
        return BENCH_EXIT_OK; /* no requests: no operation, no key */
    if (b->mix && b->op_name)
        return fail("-op and -mix: give one%s%s", NULL, NULL);
    /* without -op the key given says what to do, as keyless-cli does:
     * rsa-sha256, ecdsa-sha256 or ed25519 (client/opnames.h) */
    const char *op = b->op_name ? b->op_name : "ecdsa-sha256";
    if (!b->mix && !b->op_name && b->pubkey_file && !b->ski_file) {
        EVP_PKEY *pk = NULL;
        if (kl_pubkey_load(b->pubkey_file, &pk, err, sizeof err) != KL_OK)
            return fail("%s%s", err, NULL);
        op = kl_op_short(kl_op_default_for_key(pk));
        EVP_PKEY_free(pk);
    }
    if (b->mix) {
        if (bench_parse_mix(b, b->mix, err, sizeof err) != BENCH_EXIT_OK)
            return fail("-mix: %s%s", err, NULL);
    } else if (bench_parse_mix(b, op, err, sizeof err) != BENCH_EXIT_OK) {
        return fail("-op: %s%s", err, NULL);
    }
    if (b->server_ip_text) {
        if (inet_pton(AF_INET, b->server_ip_text, b->server_ip) == 1)
            b->server_ip_len = 4;
        else if (inet_pton(AF_INET6, b->server_ip_text, b->server_ip) == 1)
            b->server_ip_len = 16;
        else
            return fail("-server-ip %s: not an IP address", b->server_ip_text,
                        NULL);
    }
    if (!!b->cert != !!b->key)
        return fail("-cert and -key go together%s%s", NULL, NULL);
    if (b->ski_file) {
        if (b->ski_hex || b->pubkey_file)
            return fail("-ski-file and -ski/-pubkey: give one%s%s", NULL, NULL);
        if (bench_load_skis(b, b->ski_file, err, sizeof err) != BENCH_EXIT_OK)
            return fail("-ski-file: %s%s", err, NULL);
    }
    for (unsigned i = 0; i < b->nops; i++)
        if ((rc = resolve_key(b, &b->ops[i])) != BENCH_EXIT_OK ||
            (rc = make_inputs(&b->ops[i])) != BENCH_EXIT_OK)
            return rc;
    return BENCH_EXIT_OK;
}

/* ---- connections ------------------------------------------------------ */

typedef struct conn_check {
    bool done;
    kl_status st;
    uint8_t opcode;
} conn_check;

static void on_ping(void *arg, const kl_result *res)
{
    conn_check *c = arg;
    c->done = true;
    c->st = res->status;
    c->opcode = res->opcode;
}

/* Connects conns [from, to) at once: a ping on each makes its target
 * connect; the loop runs until every ping has its answer or failure. */
static int connect_batch(bench *b, size_t from, size_t to, conn_check *chk)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        return fail("epoll: %s%s", strerror(errno), NULL);
    kl_request_spec ping = {.opcode = KL_OP_PING};
    size_t left = to - from;
    for (size_t i = from; i < to; i++) {
        struct epoll_event e = {.events = EPOLLIN, .data.u64 = i};
        int fd = kl_async_fd(b->conns[i].t);
        if (fd < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) != 0 ||
            kl_async_submit(b->conns[i].t, &ping, 0, on_ping, &chk[i], NULL) !=
                KL_OK) {
            chk[i].done = true;
            chk[i].st = KL_E_IO;
            left--;
        }
    }
    struct epoll_event ev[64];
    while (left) {
        int n = epoll_wait(ep, ev, 64, 1000);
        for (int k = 0; k < n; k++) {
            size_t i = (size_t)ev[k].data.u64;
            bool was = chk[i].done;
            kl_status st = kl_async_process(b->conns[i].t);
            (void)st; /* a failure shows as the ping's outcome */
            if (!was && chk[i].done)
                left--;
        }
    }
    close(ep);
    return BENCH_EXIT_OK;
}

static kl_target_opts target_opts(const bench *b, const char *const *servers)
{
    kl_target_opts o = {.servers = servers,
                        .nservers = 1,
                        .cert_file = b->cert,
                        .key_file = b->key,
                        .ca_file = b->ca,
                        .server_name = b->server_name,
                        .tls12_only = b->tls12,
                        .timeout_ms = b->timeout_ms,
                        .ping_interval_ms = -1,
                        .max_inflight = (int)b->depth};
    return o;
}

int bench_connect(bench *b)
{
    char err[512];
    const char *servers[] = {b->addr};
    kl_target_opts o = target_opts(b, servers);
    b->nconns = b->connections;
    b->conns = calloc(b->nconns, sizeof *b->conns);
    conn_check *chk = calloc(b->nconns, sizeof *chk);
    if (!b->conns || !chk) {
        free(chk);
        return fail("out of memory%s%s", NULL, NULL);
    }
    uint64_t t0 = kl_now_ns();
    for (size_t i = 0; i < b->nconns; i++) {
        kl_status st = kl_target_new(&o, &b->conns[i].t, err, sizeof err);
        if (st != KL_OK) {
            free(chk);
            return fail("%s%s", err, NULL);
        }
        /* keyless-bench ignores SIGPIPE for the whole run: the target
         * need not check it on every round */
        struct sigaction sa;
        if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
            kl_tgt_set_sigpipe_ignored(b->conns[i].t);
    }
    for (size_t i = 0; i < b->nconns; i += CONNECT_BATCH) {
        size_t to =
            i + CONNECT_BATCH < b->nconns ? i + CONNECT_BATCH : b->nconns;
        int rc = connect_batch(b, i, to, chk);
        if (rc != BENCH_EXIT_OK) {
            free(chk);
            return rc;
        }
    }
    b->connect_s = kl_ns_to_s_f(kl_now_ns() - t0);
    int rc = BENCH_EXIT_OK;
    for (size_t i = 0; i < b->nconns && rc == BENCH_EXIT_OK; i++) {
        if (chk[i].st == KL_OK && chk[i].opcode == KL_OP_PONG)
            continue;
        kl_conn_info ci;
        kl_target_conn_info(b->conns[i].t, &ci);
        fprintf(
            stderr, "keyless-bench: connection %zu to %s: %s\n", i + 1, b->addr,
            chk[i].st != KL_OK
                ? (ci.last_error[0] ? ci.last_error : kl_status_str(chk[i].st))
                : "the ping was not answered with a pong");
        rc = BENCH_EXIT_CONNECT;
    }
    free(chk);
    if (rc == BENCH_EXIT_OK) {
        kl_conn_info ci;
        kl_target_conn_info(b->conns[0].t, &ci);
        snprintf(b->tls_version, sizeof b->tls_version, "%s", ci.tls_version);
        snprintf(b->cipher, sizeof b->cipher, "%s", ci.cipher);
    }
    return rc;
}

/* ---- -idle -------------------------------------------------------------- */

int bench_hold_idle(bench *b)
{
    char host[256], err[512];
    unsigned port = b->port;
    /* the address bench_prepare composed: [v6]:port or host:port */
    const char *colon = strrchr(b->addr, ':');
    size_t hl = (size_t)(colon - b->addr);
    const char *h = b->addr;
    if (h[0] == '[') {
        h++;
        hl -= 2;
    }
    snprintf(host, sizeof host, "%.*s", (int)hl, h);
    port = (unsigned)atoi(colon + 1);
    signal(SIGPIPE, SIG_IGN); /* kl_client leaves SIGPIPE to the process */
    kl_client **cs = calloc(b->connections, sizeof *cs);
    if (!cs)
        return fail("out of memory%s%s", NULL, NULL);
    kl_client_opts o = {.host = host,
                        .port = (uint16_t)port,
                        .cert_file = b->cert,
                        .key_file = b->key,
                        .ca_file = b->ca,
                        .server_name = b->server_name,
                        .tls12_only = b->tls12};
    int rc = BENCH_EXIT_OK;
    unsigned n = 0;
    uint64_t t0 = kl_now_ns();
    for (; n < b->connections; n++) {
        if (kl_client_connect(&o, &cs[n], err, sizeof err) != KL_OK) {
            fprintf(stderr, "keyless-bench: connection %u: %s\n", n + 1, err);
            rc = BENCH_EXIT_CONNECT;
            break;
        }
    }
    double conn_s = kl_ns_to_s_f(kl_now_ns() - t0);
    if (rc == BENCH_EXIT_OK) {
        /* say so at once, so a script can measure the server meanwhile */
        printf("Idle connections open: %u (connected in %.2fs)\n", n, conn_s);
        fflush(stdout);
        uint64_t end = kl_now_ns() + b->duration_ns;
        while (kl_now_ns() < end && !(b->stop && *b->stop)) {
            uint64_t left = (end - kl_now_ns()) / KL_NS_PER_MS;
            (void)poll(NULL, 0, left > 200 ? 200 : (int)left + 1);
        }
        char d[32];
        printf("Idle connections held: %u for %s\n", n,
               kl_dur_format(b->duration_ns, d, sizeof d));
    }
    for (unsigned i = 0; i < n; i++)
        kl_client_close(cs[i]);
    free(cs);
    return rc;
}

int bench_load_skis(bench *b, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return BENCH_EXIT_USAGE;
    }
    char line[1024];
    size_t cap = 0, lineno = 0;
    int rc = BENCH_EXIT_OK;
    while (rc == BENCH_EXIT_OK && fgets(line, sizeof line, f)) {
        lineno++;
        char *w = line + strspn(line, " \t");
        size_t wl = strcspn(w, " \t\r\n");
        if (!wl || *w == '#')
            continue;
        char hex[41];
        if (wl != 40) {
            snprintf(err, errlen,
                     "%s:%zu: expected an SKI (40 hex digits) as the first "
                     "word",
                     path, lineno);
            rc = BENCH_EXIT_USAGE;
            break;
        }
        memcpy(hex, w, 40);
        hex[40] = 0;
        if (b->nskis == cap) {
            size_t nc = cap ? 2 * cap : 1024;
            void *p = realloc(b->skis, nc * sizeof *b->skis);
            if (!p) {
                snprintf(err, errlen, "out of memory");
                rc = BENCH_EXIT_USAGE;
                break;
            }
            b->skis = p;
            cap = nc;
        }
        if (kl_ski_parse(hex, b->skis[b->nskis]) != KL_OK) {
            snprintf(err, errlen, "%s:%zu: \"%s\" is not an SKI", path, lineno,
                     hex);
            rc = BENCH_EXIT_USAGE;
            break;
        }
        b->nskis++;
    }
    if (rc == BENCH_EXIT_OK && ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        rc = BENCH_EXIT_USAGE;
    }
    fclose(f);
    if (rc == BENCH_EXIT_OK && !b->nskis) {
        snprintf(err, errlen, "%s: no SKI in the file", path);
        rc = BENCH_EXIT_USAGE;
    }
    return rc;
}

void bench_free(bench *b)
{
    free(b->skis);
    b->skis = NULL;
    b->nskis = 0;
    for (unsigned i = 0; i < b->nops; i++) {
        EVP_PKEY_free(b->ops[i].pub);
        free(b->ops[i].in);
    }
    free(b->conns);
    free(b->workers);
    b->conns = NULL;
    b->workers = NULL;
}
