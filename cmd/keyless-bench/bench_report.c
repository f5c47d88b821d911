/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-bench's counting and reporting: each worker counts into its own
 * stats (no sharing on the hot path; two relaxed atomics published for the
 * progress line), merged once at the end into the reference tool's
 * histogram and summary lines, percentiles, errors and the tool's own CPU
 * use - as text or JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bench.h"
#include "godur.h"
#include "client/verify.h"
#include "core/time.h"

int bench_stats_init(bstats *s, const bench *b)
{
    memset(s, 0, sizeof *s);
    kl_lathist_init(&s->lat);
    if (b->nlin) {
        s->lin = calloc(b->nlin + 2, sizeof *s->lin);
        if (!s->lin)
            return -1;
    }
    return 0;
}

void bench_stats_free(bstats *s)
{
    free(s->lin);
    s->lin = NULL;
}

/* Does the answer hold what the operation must produce? */
static bool answer_checks(const bop *o, const breq *r, const kl_result *res)
{
    const uint8_t *in = o->in + (size_t)r->ini * o->inlen;
    if (o->op == KL_OP_PING)
        return res->opcode == KL_OP_PONG && res->payload_len == o->inlen &&
               !memcmp(res->payload, in, o->inlen);
    char why[256];
    return res->opcode == KL_OP_RESPONSE &&
           kl_verify_output(o->pub, o->op, in, o->inlen, res->payload,
                            res->payload_len, why, sizeof why) == KL_OK;
}

void bench_account(bworker *w, const breq *r, const kl_result *res,
                   uint64_t now)
{
    bstats *s = &w->st;
    const bench *b = w->b;
    const bop *o = &b->ops[r->opi];
    if (res->status != KL_OK) {
        if (res->status == KL_E_TIMEOUT)
            s->timeouts++;
        else
            s->failed++;
        s->op_err[r->opi]++;
        return;
    }
    if (res->opcode == KL_OP_ERROR) {
        s->err_answers++;
        s->last_err_code = res->error;
        s->op_err[r->opi]++;
        return;
    }
    if (b->verify && !answer_checks(o, r, res)) {
        s->verify_failed++;
        s->op_err[r->opi]++;
        return;
    }
    uint64_t lat = now > r->intended ? now - r->intended : 0;
    kl_lathist_record(&s->lat, lat);
    if (s->lin) {
        size_t i = lat < b->hist_min ? 0
                   : lat >= b->hist_max
                       ? b->nlin + 1
                       : 1 + (size_t)((lat - b->hist_min) / b->hist_step);
        s->lin[i < b->nlin + 1 ? i : b->nlin + 1]++;
    }
    s->ok++;
    s->op_ok[r->opi]++;
    atomic_store_explicit(&s->pub_ok, s->ok, memory_order_relaxed);
    if (!(s->ok & 1023))
        atomic_store_explicit(&s->pub_p99, kl_lathist_quantile(&s->lat, 0.99),
                              memory_order_relaxed);
}

static const char *dur(uint64_t ns, char *buf)
{
    return kl_dur_format(ns, buf, 32);
}

/* A latency to print: four significant digits are plenty. */
static const char *lat(uint64_t ns, char *buf)
{
    uint64_t unit = ns < KL_NS_PER_MS  ? 100ull
                    : ns < KL_NS_PER_S ? KL_NS_PER_US
                                       : KL_NS_PER_MS;
    if (ns >= 1000ull)
        ns = (ns + unit / 2) / unit * unit;
    return kl_dur_format(ns, buf, 32);
}

/* ---- the progress line ------------------------------------------------- */

void bench_progress(bench *b, uint64_t now)
{
    uint64_t ok = 0, p99 = 0;
    for (unsigned i = 0; i < b->threads; i++) {
        bstats *s = &b->workers[i].st;
        uint64_t p =
            i == 0 ? kl_lathist_quantile(&s->lat, 0.99)
                   : atomic_load_explicit(&s->pub_p99, memory_order_relaxed);
        ok += atomic_load_explicit(&s->pub_ok, memory_order_relaxed);
        if (p > p99)
            p99 = p;
    }
    char el[32], pd[32];
    double dt = b->last_prog_ns ? kl_ns_to_s_f(now - b->last_prog_ns) : 0;
    double rate = dt > 0 ? (double)(ok - b->last_prog_ok) / dt : 0;
    printf("\r\033[K%s %s  %.0f ops/s  p99 %s  %llu operations",
           now < b->t_measure ? "warmup" : "elapsed",
           kl_dur_format((now - b->t_start) / KL_NS_PER_S * KL_NS_PER_S, el,
                         sizeof el),
           rate, lat(p99, pd), (unsigned long long)ok);
    fflush(stdout);
    b->last_prog_ok = ok;
    b->last_prog_ns = now;
}

void bench_progress_clear(void)
{
    printf("\r\033[K");
    fflush(stdout);
}

/* ---- the report ------------------------------------------------------- */

typedef struct totals {
    bstats s;
    uint64_t errors;
    double secs, ops_per_s;
    uint64_t avg_op_ns;
    uint64_t q[5]; /* p50 p90 p99 p99.9 max */
    /* the reference histogram */
    uint64_t hmin, hmax, hstep;
    size_t nlin;
    uint64_t *lin;
} totals;

/* 1, 2 or 5 times a power of ten, at least v. */
static uint64_t nice_ceil(uint64_t v)
{
    uint64_t p = 1;
    while (p * 10 <= v)
        p *= 10;
    for (uint64_t m = 1;; m = m == 1 ? 2 : m == 2 ? 5 : 10)
        if (p * m >= v)
            return p * m;
}

/* Without -histogram-*: 20 buckets up to the p99.9, counted from the
 * log-linear histogram (a bucket's samples go where its middle lies). */
static int auto_histogram(totals *t)
{
    t->hmin = 0;
    t->hmax = nice_ceil(t->q[3] > 20 ? t->q[3] : 20);
    t->hstep = t->hmax / 20;
    t->nlin = 20;
    t->lin = calloc(t->nlin + 2, sizeof *t->lin);
    if (!t->lin)
        return -1;
    for (unsigned i = 0; i < KL_LATHIST_BUCKETS; i++) {
        uint64_t n = t->s.lat.b[i], lo, hi;
        if (!n)
            continue;
        kl_lathist_bucket_bounds(i, &lo, &hi);
        uint64_t mid = lo + (hi - lo) / 2;
        size_t k = mid >= t->hmax ? t->nlin + 1 : 1 + mid / t->hstep;
        t->lin[k] += n;
    }
    return 0;
}

static int totals_make(bench *b, totals *t)
{
    memset(t, 0, sizeof *t);
    if (bench_stats_init(&t->s, b) != 0)
        return -1;
    for (unsigned i = 0; i < b->threads; i++) {
        const bstats *s = &b->workers[i].st;
        kl_lathist_merge(&t->s.lat, &s->lat);
        t->s.ok += s->ok;
        t->s.err_answers += s->err_answers;
        t->s.timeouts += s->timeouts;
        t->s.failed += s->failed;
        t->s.verify_failed += s->verify_failed;
        if (s->err_answers)
            t->s.last_err_code = s->last_err_code;
        for (unsigned k = 0; k < BENCH_MAX_OPS; k++) {
            t->s.op_ok[k] += s->op_ok[k];
            t->s.op_err[k] += s->op_err[k];
        }
        for (size_t k = 0; s->lin && k < b->nlin + 2; k++)
            t->s.lin[k] += s->lin[k];
    }
    t->errors =
        t->s.err_answers + t->s.timeouts + t->s.failed + t->s.verify_failed;
    t->secs = kl_ns_to_s_f(b->measured_ns);
    t->ops_per_s = t->secs > 0 ? (double)t->s.ok / t->secs : 0;
    t->avg_op_ns = t->s.ok ? b->measured_ns / t->s.ok : 0;
    const double qs[] = {0.5, 0.9, 0.99, 0.999, 1.0};
    for (int i = 0; i < 5; i++)
        t->q[i] = kl_lathist_quantile(&t->s.lat, qs[i]);
    if (b->nlin) {
        t->hmin = b->hist_min;
        t->hmax = b->hist_max;
        t->hstep = b->hist_step;
        t->nlin = b->nlin;
        t->lin = t->s.lin;
        return 0;
    }
    return auto_histogram(t);
}

static void describe(const bench *b, char *out, size_t cap)
{
    if (b->mode == MODE_OPEN)
        snprintf(out, cap, "open loop at %.0f/s over %zu connection%s", b->rate,
                 b->nconns, b->nconns == 1 ? "" : "s");
    else
        snprintf(out, cap, "closed loop, %zu connection%s x %u in flight%s",
                 b->nconns, b->nconns == 1 ? "" : "s", b->depth,
                 b->bandwidth ? " (bandwidth)" : "");
}

static void print_histogram(const totals *t)
{
    uint64_t top = 1;
    for (size_t i = 0; i < t->nlin + 2; i++)
        if (t->lin[i] > top)
            top = t->lin[i];
    char a[32], z[32], bar[52];
    for (size_t i = 0; i < t->nlin + 2; i++) {
        if ((i == 0 || i == t->nlin + 1) && !t->lin[i])
            continue; /* the open-ended buckets only when used */
        if (i == 0) {
            snprintf(a, sizeof a, "0s");
            dur(t->hmin, z);
        } else if (i == t->nlin + 1) {
            dur(t->hmax, a);
            snprintf(z, sizeof z, "inf");
        } else {
            dur(t->hmin + (i - 1) * t->hstep, a);
            uint64_t e = t->hmin + i * t->hstep;
            dur(e < t->hmax ? e : t->hmax, z);
        }
        size_t n = (size_t)(t->lin[i] * 50 / top);
        if (t->lin[i] && !n)
            n = 1;
        memset(bar, '=', n);
        bar[n] = 0;
        /* the reference tool's line, character for character */
        printf("[ %s, %s) %llu | %s\n", a, z, (unsigned long long)t->lin[i],
               bar);
    }
}

static void print_text(const bench *b, const totals *t)
{
    char d[5][32], what[128], x[32];
    describe(b, what, sizeof what);
    printf("keyless-bench: %s, %s, %u thread%s, %s %s\n", b->addr, what,
           b->threads, b->threads == 1 ? "" : "s", b->tls_version, b->cipher);
    for (unsigned i = 0; i < b->nops; i++) {
        const bop *o = &b->ops[i];
        char ski[41] = "";
        for (int k = 0; o->op != KL_OP_PING && k < 20; k++)
            snprintf(ski + 2 * k, 3, "%02x", o->ski[k]);
        printf("  %-16s %s%s weight %u: %llu operations, %llu errors\n",
               o->label, ski[0] ? "key " : "", ski, o->weight,
               (unsigned long long)t->s.op_ok[i],
               (unsigned long long)t->s.op_err[i]);
    }
    print_histogram(t);
    printf("Total operations completed: %llu\n", (unsigned long long)t->s.ok);
    printf("Average operation duration: %s\n", dur(t->avg_op_ns, x));
    printf("Measured for: %s\n", dur(b->measured_ns, x));
    printf("Operations per second: %.1f\n", t->ops_per_s);
    for (int i = 0; i < 5; i++)
        lat(t->q[i], d[i]);
    printf("Latency: p50 %s, p90 %s, p99 %s, p99.9 %s, max %s, mean %s\n", d[0],
           d[1], d[2], d[3], d[4], lat(kl_lathist_mean(&t->s.lat), x));
    printf("Errors: %llu (error answers %llu, timeouts %llu, connection "
           "failures %llu, verification failures %llu)\n",
           (unsigned long long)t->errors, (unsigned long long)t->s.err_answers,
           (unsigned long long)t->s.timeouts, (unsigned long long)t->s.failed,
           (unsigned long long)t->s.verify_failed);
    if (t->s.err_answers)
        printf("Last error answer: %s\n", kl_err_text(t->s.last_err_code));
    double cpu = b->cpu_user_s + b->cpu_sys_s;
    double wall = kl_ns_to_s_f(b->elapsed_ns);
    printf("Client CPU: %.2fs user, %.2fs system: %.1f%% of one core, %s per "
           "operation\n",
           b->cpu_user_s, b->cpu_sys_s, wall > 0 ? 100 * cpu / wall : 0,
           dur(t->s.ok ? (uint64_t)(cpu * (double)KL_NS_PER_S / (double)t->s.ok)
                       : 0,
               x));
    if (b->stopped)
        printf("Warning: keyless-bench was stopped and resumed (SIGSTOP/"
               "SIGCONT) during the run: the figures include the stop\n");
}

static double us(uint64_t ns)
{
    return (double)ns / (double)KL_NS_PER_US;
}

static void print_json(const bench *b, const totals *t)
{
    json_t *j = json_object(), *lat = json_object(), *ops = json_array(),
           *hist = json_array(), *err = json_object(), *cpu = json_object();
    json_object_set_new(j, "server", json_string(b->addr));
    json_object_set_new(j, "mode",
                        json_string(b->mode == MODE_OPEN ? "open"
                                    : b->bandwidth       ? "bandwidth"
                                                         : "closed"));
    json_object_set_new(j, "connections", json_integer((json_int_t)b->nconns));
    if (b->nskis) /* -ski-file: keys the requests were spread over */
        json_object_set_new(j, "keys", json_integer((json_int_t)b->nskis));
    json_object_set_new(j, "depth", json_integer(b->depth));
    json_object_set_new(j, "threads", json_integer(b->threads));
    if (b->mode == MODE_OPEN)
        json_object_set_new(j, "rate", json_real(b->rate));
    json_object_set_new(j, "tls_version", json_string(b->tls_version));
    json_object_set_new(j, "cipher", json_string(b->cipher));
    json_object_set_new(j, "duration_s", json_real(t->secs));
    json_object_set_new(j, "operations", json_integer((json_int_t)t->s.ok));
    json_object_set_new(j, "ops_per_sec", json_real(t->ops_per_s));
    json_object_set_new(j, "avg_op_duration_us", json_real(us(t->avg_op_ns)));
    json_object_set_new(lat, "p50", json_real(us(t->q[0])));
    json_object_set_new(lat, "p90", json_real(us(t->q[1])));
    json_object_set_new(lat, "p99", json_real(us(t->q[2])));
    json_object_set_new(lat, "p99.9", json_real(us(t->q[3])));
    json_object_set_new(lat, "max", json_real(us(t->q[4])));
    json_object_set_new(lat, "mean", json_real(us(kl_lathist_mean(&t->s.lat))));
    json_object_set_new(j, "latency_us", lat);
    json_object_set_new(j, "errors", json_integer((json_int_t)t->errors));
    json_object_set_new(err, "error_answers",
                        json_integer((json_int_t)t->s.err_answers));
    json_object_set_new(err, "timeouts",
                        json_integer((json_int_t)t->s.timeouts));
    json_object_set_new(err, "connection_failures",
                        json_integer((json_int_t)t->s.failed));
    json_object_set_new(err, "verification_failures",
                        json_integer((json_int_t)t->s.verify_failed));
    json_object_set_new(j, "error_detail", err);
    for (unsigned i = 0; i < b->nops; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "op", json_string(b->ops[i].label));
        json_object_set_new(o, "weight", json_integer(b->ops[i].weight));
        json_object_set_new(o, "operations",
                            json_integer((json_int_t)t->s.op_ok[i]));
        json_object_set_new(o, "errors",
                            json_integer((json_int_t)t->s.op_err[i]));
        json_array_append_new(ops, o);
    }
    json_object_set_new(j, "ops", ops);
    for (size_t i = 1; i <= t->nlin; i++) {
        json_t *h = json_object();
        json_object_set_new(h, "from_us",
                            json_real(us(t->hmin + (i - 1) * t->hstep)));
        json_object_set_new(h, "to_us", json_real(us(t->hmin + i * t->hstep)));
        json_object_set_new(h, "count", json_integer((json_int_t)t->lin[i]));
        json_array_append_new(hist, h);
    }
    json_object_set_new(j, "histogram", hist);
    json_object_set_new(j, "below_histogram",
                        json_integer((json_int_t)t->lin[0]));
    json_object_set_new(j, "above_histogram",
                        json_integer((json_int_t)t->lin[t->nlin + 1]));
    double wall = kl_ns_to_s_f(b->elapsed_ns);
    json_object_set_new(cpu, "user_s", json_real(b->cpu_user_s));
    json_object_set_new(cpu, "system_s", json_real(b->cpu_sys_s));
    json_object_set_new(
        cpu, "core_share",
        json_real(wall > 0 ? (b->cpu_user_s + b->cpu_sys_s) / wall : 0));
    json_object_set_new(cpu, "us_per_op",
                        json_real(t->s.ok ? (b->cpu_user_s + b->cpu_sys_s) *
                                                (double)KL_US_PER_S /
                                                (double)t->s.ok
                                          : 0));
    json_object_set_new(j, "client_cpu", cpu);
    json_object_set_new(j, "client_stopped", json_boolean(b->stopped));
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    if (text)
        printf("%s\n", text);
    free(text);
    json_decref(j);
}

int bench_report(bench *b)
{
    totals t;
    if (totals_make(b, &t) != 0) {
        fprintf(stderr, "keyless-bench: out of memory\n");
        return BENCH_EXIT_FAIL;
    }
    if (b->json)
        print_json(b, &t);
    else
        print_text(b, &t);
    fflush(stdout);
    if (t.lin != t.s.lin)
        free(t.lin);
    bench_stats_free(&t.s);
    return t.errors || !t.s.ok ? BENCH_EXIT_FAIL : BENCH_EXIT_OK;
}
