/* SPDX-License-Identifier: Apache-2.0 */
/* kl_accel's device: one thread that holds up to `slots` operations, each
 * for `latency_us`, then answers it (accel.h has the settings). One mutex
 * guards everything here; the device signs with it released.
 *
 * Every operation is on the `all` list in submission order: with one
 * timeout for all, the oldest operation is the first to time out, so the
 * device checks deadlines at the head only. Operations waiting for a slot
 * are on `waiting` (FIFO); those on the device on `active`, ordered by the
 * time they are due. A lost operation (lose=) is on `all` only. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <openssl/async.h>
#include <openssl/crypto.h>

#include "accel_int.h"

#define CTL_MAX 4096
#define CTL_EVERY_NS (50ull * 1000 * 1000)
#define MEMO_SIZE 1024
/* the device thread's timer slack (below) */
#define DEVICE_SLACK_NS 1UL
/* operations the device answers in one pass at most */
#define DUE_BATCH 64

typedef enum { OP_WAITING, OP_ACTIVE, OP_LOST, OP_DONE } op_state;

typedef struct acc_op {
    acc_req req;
    size_t siglen; /* 0: failed */
    op_state state;
    bool fail; /* the device answers an error (fail=) */
    uint64_t due_ns, deadline_ns;
    int efd;      /* the job's eventfd; -1: none (blocks, or calls back) */
    uint64_t got; /* counts the caller read from efd (the device writes 1) */
    /* the application's completion callback (ASYNC_WAIT_CTX_set_callback)
     * and its wait context; armed while the job is paused for it */
    ASYNC_callback_fn cb;
    void *cb_arg;
    ASYNC_WAIT_CTX *wctx;
    bool cb_armed;
    struct acc_op *prev, *next;   /* all */
    struct acc_op *qprev, *qnext; /* waiting or active */
    size_t sigcap;
    /* the key's largest signature (a P-256 operation stays small enough
     * for the allocator's per-thread cache) */
    uint8_t sig[];
} acc_op;

typedef struct op_list {
    acc_op *head, *tail;
    size_t n;
} op_list;

typedef struct settings {
    unsigned latency_us, slots, timeout_ms, poll_us;
    bool software, stopped, memo, callback, in_caller, bad;
} settings;

typedef struct memo_entry {
    bool used;
    acc_req req; /* soft not referenced: compared by serial */
    uint8_t sig[ACC_MAX_SIG];
    size_t siglen;
} memo_entry;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t dev_wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t answered = PTHREAD_COND_INITIALIZER;
static op_list all, waiting, active;
#define DEFAULT_SETTINGS                                                       \
    ((settings){.latency_us = 1000,                                            \
                .slots = 64,                                                   \
                .timeout_ms = 2000,                                            \
                .callback = true})
static settings set = DEFAULT_SETTINGS;
static unsigned long fail_left, lose_left, busy_left;
static kl_accel_stats stats;
static memo_entry *memo; /* the device thread's */
/* inline=1 (and memo=1) as the callers see it without taking mu */
#define INLINE_ON 1u
#define INLINE_MEMO 2u
static _Atomic unsigned inline_mode;
static _Atomic uint64_t inlined, inline_memo_hits;
static pthread_key_t inline_memo_key; /* each caller thread's memo */
/* when the sleeping device wakes by itself: UINT64_MAX when it waits for a
 * signal, 0 while it works. A submission signals it only when it must wake
 * sooner: one futex wake fewer per operation, which a card's queue does
 * not cost either. */
static uint64_t dev_wakes_at;
static unsigned blocked_callers; /* waiting on `answered` */

static pthread_mutex_t ctl_mu = PTHREAD_MUTEX_INITIALIZER;
/* when the control file is next looked at: a submission before then
 * costs one clock read, no lock */
static _Atomic uint64_t ctl_due_ns;
static char ctl_text[CTL_MAX + 1];
static size_t ctl_len;
static bool ctl_seen;
static uint64_t ctl_checked_ns;
static int fd_key; /* the address names our eventfd in a wait context */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- lists ---- */

static void all_push(acc_op *op)
{
    op->prev = all.tail;
    op->next = NULL;
    if (all.tail)
        all.tail->next = op;
    else
        all.head = op;
    all.tail = op;
    all.n++;
}

static void all_remove(acc_op *op)
{
    if (op->prev)
        op->prev->next = op->next;
    else
        all.head = op->next;
    if (op->next)
        op->next->prev = op->prev;
    else
        all.tail = op->prev;
    all.n--;
}

static void q_remove(op_list *l, acc_op *op)
{
    if (op->qprev)
        op->qprev->qnext = op->qnext;
    else
        l->head = op->qnext;
    if (op->qnext)
        op->qnext->qprev = op->qprev;
    else
        l->tail = op->qprev;
    l->n--;
}

/* Inserts after the last element with an earlier or equal due time
 * (usually the tail: the latency rarely changes). */
static void q_insert_due(op_list *l, acc_op *op)
{
    acc_op *after = l->tail;
    while (after && after->due_ns > op->due_ns)
        after = after->qprev;
    op->qprev = after;
    op->qnext = after ? after->qnext : l->head;
    if (op->qnext)
        op->qnext->qprev = op;
    else
        l->tail = op;
    if (after)
        after->qnext = op;
    else
        l->head = op;
    l->n++;
}

static void q_push(op_list *l, acc_op *op)
{
    op->due_ns = 0;
    op->qprev = l->tail;
    op->qnext = NULL;
    if (l->tail)
        l->tail->qnext = op;
    else
        l->head = op;
    l->tail = op;
    l->n++;
}

/* ---- the control file ---- */

static bool parse_setting(settings *s, const char *name, unsigned long v,
                          const char *text)
{
    if (!strcmp(name, "latency_us"))
        s->latency_us = (unsigned)v;
    else if (!strcmp(name, "slots") && v > 0)
        s->slots = (unsigned)v;
    else if (!strcmp(name, "timeout_ms") && v > 0)
        s->timeout_ms = (unsigned)v;
    else if (!strcmp(name, "poll_us"))
        s->poll_us = (unsigned)v;
    else if (!strcmp(name, "full") &&
             (!strcmp(text, "queue") || !strcmp(text, "software")))
        s->software = !strcmp(text, "software");
    else if (!strcmp(name, "stopped"))
        s->stopped = v != 0;
    else if (!strcmp(name, "memo"))
        s->memo = v != 0;
    else if (!strcmp(name, "callback"))
        s->callback = v != 0;
    else if (!strcmp(name, "inline"))
        s->in_caller = v != 0;
    else if (!strcmp(name, "fail"))
        fail_left = v;
    else if (!strcmp(name, "lose"))
        lose_left = v;
    else if (!strcmp(name, "busy"))
        busy_left = v;
    else
        return false;
    return true;
}

/* Parses text into *s (and the fail/lose counts); mu held. */
static void parse_ctl(char *text, settings *s)
{
    *s = DEFAULT_SETTINGS;
    fail_left = lose_left = busy_left = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        while (*line == ' ' || *line == '\t')
            line++;
        if (!*line || *line == '#')
            continue;
        char *eq = strchr(line, '=');
        if (!eq) {
            s->bad = true;
            continue;
        }
        *eq = '\0';
        char *val = eq + 1, *end = NULL;
        val[strcspn(val, " \t\r")] = '\0';
        errno = 0;
        unsigned long v = strtoul(val, &end, 10);
        bool numeric = end != val && !*end && errno == 0;
        if (!parse_setting(s, line, numeric ? v : 0, val) ||
            (!numeric && strcmp(line, "full")))
            s->bad = true;
    }
}

/* Re-reads the control file when due; its settings replace the old ones
 * when its content changed. */
static void check_ctl(uint64_t now)
{
    if (now < atomic_load_explicit(&ctl_due_ns, memory_order_relaxed))
        return;
    const char *path = getenv("KL_ACCEL_CTL");
    if (!path || !*path)
        return;
    pthread_mutex_lock(&ctl_mu);
    if (ctl_seen && now - ctl_checked_ns < CTL_EVERY_NS) {
        pthread_mutex_unlock(&ctl_mu);
        return;
    }
    ctl_checked_ns = now;
    atomic_store_explicit(&ctl_due_ns, now + CTL_EVERY_NS,
                          memory_order_relaxed);
    char buf[CTL_MAX + 1];
    size_t n = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        n = fread(buf, 1, CTL_MAX, f);
        fclose(f);
    }
    buf[n] = '\0';
    if (!ctl_seen || n != ctl_len || memcmp(buf, ctl_text, n) != 0) {
        memcpy(ctl_text, buf, n + 1);
        ctl_len = n;
        ctl_seen = true;
        pthread_mutex_lock(&mu);
        parse_ctl(buf, &set);
        stats.max_in_slot = 0;
        atomic_store(&inline_mode,
                     set.in_caller && !set.bad
                         ? INLINE_ON | (set.memo ? INLINE_MEMO : 0)
                         : 0);
        pthread_cond_signal(&dev_wake);
        pthread_mutex_unlock(&mu);
    }
    pthread_mutex_unlock(&ctl_mu);
}

/* ---- the device thread ---- */

static uint64_t memo_hash(const acc_req *r)
{
    uint64_t h = 1469598103934665603ull ^ r->serial;
    for (size_t i = 0; i < r->tbslen; i++)
        h = (h ^ r->tbs[i]) * 1099511628211ull;
    h = (h ^ (uint64_t)r->pad) * 1099511628211ull;
    h ^= (uint64_t)(unsigned)r->saltlen;
    /* FNV's low bits (the table's index) barely move with inputs that
     * differ in every byte alike, such as a digest of one repeated byte:
     * mixed down from the high ones */
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 29);
}

static bool same_req(const acc_req *a, const acc_req *b)
{
    return a->serial == b->serial && a->tbslen == b->tbslen &&
           a->pad == b->pad && a->saltlen == b->saltlen &&
           !strcmp(a->md, b->md) && !strcmp(a->mgf1, b->mgf1) &&
           !memcmp(a->tbs, b->tbs, a->tbslen);
}

/* A request's entry is in the MEMO_PROBES buckets from its hash on: two
 * requests that share a bucket do not evict each other for ever. */
#define MEMO_PROBES 8

/* Copies table's answer to r into sig (cap bytes) and returns its
 * length; 0: not there. */
static size_t memo_get(const memo_entry *table, const acc_req *r, uint8_t *sig,
                       size_t cap)
{
    uint64_t h = memo_hash(r);
    for (unsigned i = 0; i < MEMO_PROBES; i++) {
        const memo_entry *m = &table[(h + i) % MEMO_SIZE];
        if (!m->used)
            return 0;
        if (m->siglen <= cap && same_req(&m->req, r)) {
            memcpy(sig, m->sig, m->siglen);
            return m->siglen;
        }
    }
    return 0;
}

/* Keeps sig as r's answer: in the first free bucket of its run, or over
 * the last one when all are taken. */
static void memo_put(memo_entry *table, const acc_req *r, const uint8_t *sig,
                     size_t n)
{
    uint64_t h = memo_hash(r);
    memo_entry *m = NULL;
    for (unsigned i = 0; i < MEMO_PROBES; i++) {
        m = &table[(h + i) % MEMO_SIZE];
        if (!m->used)
            break;
    }
    m->used = true;
    m->req = *r;
    m->req.soft = NULL;
    memcpy(m->sig, sig, n);
    m->siglen = n;
}

/* The device's work for one operation (mu not held; memo_hits counted
 * into stats when the caller next holds it). */
static void device_sign(acc_op *op, bool use_memo, uint64_t *memo_hits)
{
    if (op->fail) {
        op->siglen = 0;
        return;
    }
    use_memo = use_memo && memo;
    if (use_memo &&
        (op->siglen = memo_get(memo, &op->req, op->sig, op->sigcap)) != 0) {
        (*memo_hits)++;
        return;
    }
    op->siglen = acc_soft_sign(&op->req, op->sig, op->sigcap);
    if (use_memo && op->siglen)
        memo_put(memo, &op->req, op->sig, op->siglen);
}

/* The device thread's callbacks to make once it lets go of mu (a
 * callback may make a system call: callers must not wait on mu for it).
 * Full: made at once, under mu. */
#define CB_BATCH 128
static struct {
    ASYNC_callback_fn fn;
    void *arg;
} cbs[CB_BATCH];
static size_t ncbs;

static void run_callbacks(void)
{
    if (!ncbs)
        return;
    for (size_t i = 0; i < ncbs; i++)
        cbs[i].fn(cbs[i].arg);
    ncbs = 0;
}

/* Ends op (mu held): off every list, its caller woken. On the device
 * thread, a callback is queued for run_callbacks after mu is released:
 * op itself may be gone by then (its caller resumed for another reason
 * and saw it done), so the callback and its argument are copied. */
static void finish(acc_op *op)
{
    if (op->state == OP_WAITING)
        q_remove(&waiting, op);
    else if (op->state == OP_ACTIVE)
        q_remove(&active, op);
    all_remove(op);
    op->state = OP_DONE;
    stats.in_flight--;
    if (op->cb_armed) { /* small and non-blocking, as OpenSSL asks */
        op->cb_armed = false;
        if (ncbs == CB_BATCH)
            run_callbacks();
        cbs[ncbs].fn = op->cb;
        cbs[ncbs++].arg = op->cb_arg;
    } else if (op->efd >= 0) {
        uint64_t one = 1;
        if (write(op->efd, &one, sizeof one) < 0 && errno != EAGAIN)
            op->siglen = 0;
    }
    if (blocked_callers)
        pthread_cond_broadcast(&answered);
}

static void expire(uint64_t now)
{
    while (all.head && all.head->deadline_ns <= now) {
        acc_op *op = all.head;
        op->siglen = 0;
        stats.timed_out++;
        finish(op);
    }
}

static void fill_slots(uint64_t now)
{
    while (waiting.head && active.n < set.slots) {
        acc_op *op = waiting.head;
        q_remove(&waiting, op);
        op->state = OP_ACTIVE;
        op->due_ns = now + (uint64_t)set.latency_us * 1000;
        q_insert_due(&active, op);
        if (active.n > stats.max_in_slot)
            stats.max_in_slot = active.n;
    }
}

static void wait_next(uint64_t now)
{
    uint64_t next = UINT64_MAX;
    if (active.head && !set.stopped) {
        next = active.head->due_ns;
        /* poll_us: answers leave at the next look at the device, as a
         * driver that polls its response ring (or an interrupt that is
         * moderated) posts them: a batch per look */
        uint64_t poll = (uint64_t)set.poll_us * 1000;
        if (poll)
            next = (next + poll - 1) / poll * poll;
    }
    if (all.head && all.head->deadline_ns < next)
        next = all.head->deadline_ns;
    if (next <= now)
        return;
    dev_wakes_at = next;
    if (next == UINT64_MAX) {
        pthread_cond_wait(&dev_wake, &mu);
    } else {
        /* dev_wake uses CLOCK_MONOTONIC (acc_dev_start) */
        struct timespec ts = {.tv_sec = (time_t)(next / 1000000000ull),
                              .tv_nsec = (long)(next % 1000000000ull)};
        pthread_cond_timedwait(&dev_wake, &mu, &ts);
    }
    dev_wakes_at = 0;
}

static void *device_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "kl-accel-dev");
    /* a device answers on time: no timer slack (default 50 us) on its
     * waits, or 64 slots of 1 ms would deliver ~5% less than 64,000/s
     * (measured: 57,900/s with 50 us, 60,400/s without; the host's CPU
     * per operation the same within noise) */
    prctl(PR_SET_TIMERSLACK, DEVICE_SLACK_NS, 0, 0, 0);
    pthread_mutex_lock(&mu);
    for (;;) {
        uint64_t now = now_ns();
        expire(now);
        if (ncbs) { /* the expired operations' callbacks */
            pthread_mutex_unlock(&mu);
            run_callbacks();
            pthread_mutex_lock(&mu);
        }
        fill_slots(now);
        /* Every operation due now leaves in one pass with one hold of mu
         * before and after, as a card posts a batch of responses to its
         * ring: the callers' lock is not taken and given back per
         * operation. Off the device's lists while it signs, so that no
         * deadline ends them meanwhile: the device is answering. */
        acc_op *due[DUE_BATCH];
        size_t n = 0;
        uint64_t poll = (uint64_t)set.poll_us * 1000;
        uint64_t cut = poll ? now / poll * poll : now; /* the last look */
        while (n < DUE_BATCH && active.head && !set.stopped &&
               active.head->due_ns <= cut) {
            acc_op *op = active.head;
            q_remove(&active, op);
            op->state = OP_LOST;
            due[n++] = op;
        }
        if (n) {
            /* their slots are free from now: the next operations' time
             * starts before this batch's answers are posted */
            fill_slots(now);
            bool use_memo = set.memo;
            uint64_t hits = 0;
            pthread_mutex_unlock(&mu);
            for (size_t i = 0; i < n; i++)
                device_sign(due[i], use_memo, &hits);
            pthread_mutex_lock(&mu);
            stats.memo_hits += hits;
            for (size_t i = 0; i < n; i++) {
                stats.completed++;
                if (!due[i]->siglen)
                    stats.failed++;
                finish(due[i]);
            }
            pthread_mutex_unlock(&mu);
            run_callbacks();
            pthread_mutex_lock(&mu);
            continue;
        }
        wait_next(now);
    }
    return NULL;
}

/* The calling thread's block under key, made (zeroed, size bytes) on its
 * first use and freed by the key's destructor at the thread's exit; NULL:
 * out of memory. */
static void *thread_block(pthread_key_t key, size_t size)
{
    void *b = pthread_getspecific(key);
    if (!b && (b = calloc(1, size)) != NULL &&
        pthread_setspecific(key, b) != 0) {
        free(b);
        b = NULL;
    }
    return b;
}

/* Operation records come from the calling thread's cache, as a card's
 * driver fills entries of a request ring it allocated once: a malloc and
 * free per operation (a record of ~400 bytes, freed after hundreds of
 * others) cost the caller ~0.3 us in the allocator. Records for
 * signatures of up to OP_CACHED_SIG bytes are cached, at most
 * OP_CACHE_MAX per thread. */
#define OP_CACHED_SIG 512
#define OP_CACHE_MAX 4096
typedef struct op_cache {
    acc_op *head; /* linked through next */
    unsigned n;
} op_cache;
static pthread_key_t op_cache_key;

static void op_cache_free(void *p)
{
    op_cache *c = p;
    while (c->head) {
        acc_op *op = c->head;
        c->head = op->next;
        free(op);
    }
    free(c);
}

static acc_op *op_new(size_t cap)
{
    op_cache *c =
        cap <= OP_CACHED_SIG ? pthread_getspecific(op_cache_key) : NULL;
    acc_op *op = c ? c->head : NULL;
    if (op) {
        c->head = op->next;
        c->n--;
        memset(op, 0, sizeof *op);
    } else {
        op = calloc(1,
                    sizeof *op + (cap <= OP_CACHED_SIG ? OP_CACHED_SIG : cap));
    }
    return op;
}

/* Wipes what op carried and keeps it for the thread's next operation. */
static void op_done(acc_op *op)
{
    OPENSSL_cleanse(op->req.tbs, op->req.tbslen);
    OPENSSL_cleanse(op->sig, op->siglen);
    op_cache *c = op->sigcap <= OP_CACHED_SIG
                      ? thread_block(op_cache_key, sizeof *c)
                      : NULL;
    if (!c || c->n >= OP_CACHE_MAX) {
        free(op);
        return;
    }
    op->next = c->head;
    c->head = op;
    c->n++;
}

static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned users; /* provider instances loaded */
static bool device_running;

static void init_wake(void)
{
    (void)pthread_key_create(&inline_memo_key, free);
    (void)pthread_key_create(&op_cache_key, op_cache_free);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_destroy(&dev_wake);
    pthread_cond_init(&dev_wake, &ca);
    pthread_condattr_destroy(&ca);
}

bool acc_dev_start(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_wake);
    pthread_mutex_lock(&start_mu);
    bool ok = true;
    if (!device_running) {
        memo = calloc(MEMO_SIZE, sizeof *memo);
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_t t;
        ok = memo && pthread_create(&t, &a, device_main, NULL) == 0;
        pthread_attr_destroy(&a);
        device_running = ok;
    }
    users += ok;
    pthread_mutex_unlock(&start_mu);
    return ok;
}

/* The last instance's teardown lets the device go idle. The thread itself
 * stays until the process exits (the module pins itself, accel_prov.c):
 * OpenSSL 3.0 leaves a finished thread's random generators behind, so a
 * device thread that ended would show as a leak in every sanitizer run. */
void acc_dev_stop(void)
{
    pthread_mutex_lock(&start_mu);
    if (users)
        users--;
    pthread_mutex_unlock(&start_mu);
}

void kl_accel_get_stats(kl_accel_stats *out)
{
    pthread_mutex_lock(&mu);
    *out = stats;
    pthread_mutex_unlock(&mu);
    out->inlined = atomic_load(&inlined);
    out->memo_hits += atomic_load(&inline_memo_hits);
}

/* ---- the caller's side ---- */

static void close_fd(ASYNC_WAIT_CTX *w, const void *key, OSSL_ASYNC_FD fd,
                     void *custom)
{
    (void)w, (void)key, (void)custom;
    close(fd);
    pthread_mutex_lock(&mu);
    stats.open_fds--;
    pthread_mutex_unlock(&mu);
}

/* The eventfd of the job's wait context w (mu held): one per context, made
 * on its first operation and closed when the context is freed, so that the
 * caller adds it to its poll set once. -1: no fd. */
static int job_fd(ASYNC_WAIT_CTX *w)
{
    OSSL_ASYNC_FD fd;
    void *custom;
    if (ASYNC_WAIT_CTX_get_fd(w, &fd_key, &fd, &custom))
        return fd;
    fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0)
        return -1;
    if (!ASYNC_WAIT_CTX_set_wait_fd(w, &fd_key, fd, NULL, close_fd)) {
        close(fd);
        return -1;
    }
    stats.open_fds++;
    return fd;
}

/* Queues op (mu held); false when the caller is to sign in software. */
static bool submit(acc_op *op, uint64_t now)
{
    if (set.bad) {
        stats.bad_ctl++;
        op->siglen = 0;
        op->state = OP_DONE;
        return true;
    }
    if (set.software && waiting.n + active.n >= set.slots) {
        stats.software++;
        return false;
    }
    stats.submitted++;
    stats.in_flight++;
    op->deadline_ns = now + (uint64_t)set.timeout_ms * 1000000ull;
    all_push(op);
    if (lose_left) {
        lose_left--;
        op->state = OP_LOST;
    } else {
        op->fail = fail_left > 0;
        fail_left -= op->fail;
        op->state = OP_WAITING;
        q_push(&waiting, op);
        fill_slots(now); /* its due time counts from now */
    }
    uint64_t wake = op->deadline_ns;
    if (op->state == OP_ACTIVE && !set.stopped && op->due_ns < wake)
        wake = op->due_ns;
    if (dev_wakes_at && wake < dev_wakes_at)
        pthread_cond_signal(&dev_wake);
    return true;
}

/* Blocks until the device answers op (mu held). */
static void wait_blocked(acc_op *op)
{
    blocked_callers++;
    while (op->state != OP_DONE)
        pthread_cond_wait(&answered, &mu);
    blocked_callers--;
}

/* Waits for op's answer: pauses the job (resumed when the eventfd is
 * written or the callback called; a resume before the answer pauses
 * again) or blocks. */
static void await(acc_op *op)
{
    if (!op->cb && op->efd < 0) {
        stats.blocked++;
        wait_blocked(op);
        return;
    }
    stats.paused++;
    while (op->state != OP_DONE) {
        if (op->cb) {
            /* the callback will come: said before the pause, as a card's
             * provider does once its request is on the ring */
            op->cb_armed = true;
            ASYNC_WAIT_CTX_set_status(op->wctx, ASYNC_STATUS_OK);
        }
        pthread_mutex_unlock(&mu);
        if (!ASYNC_pause_job()) {
            /* cannot pause: wait here instead */
            pthread_mutex_lock(&mu);
            op->cb_armed = false;
            wait_blocked(op);
            break;
        }
        if (op->efd >= 0) {
            /* one read takes an eventfd's whole count (and resets it) */
            uint64_t v;
            if (read(op->efd, &v, sizeof v) == (ssize_t)sizeof v)
                op->got += v;
        }
        pthread_mutex_lock(&mu);
    }
}

/* busy=: the device's queue refuses the submission (mu held). A paused
 * job asks to be resumed and tries again, as a card's provider does when
 * its request ring is full: ASYNC_STATUS_EAGAIN for an application that
 * takes callbacks, a readable fd for one that polls fds. True when it
 * waited. */
static bool refused(acc_op *op)
{
    bool waited = false;
    while (busy_left && (op->cb || op->efd >= 0)) {
        busy_left--;
        stats.busy++;
        if (op->cb) {
            ASYNC_WAIT_CTX_set_status(op->wctx, ASYNC_STATUS_EAGAIN);
        } else {
            uint64_t one = 1;
            (void)!write(op->efd, &one, sizeof one);
        }
        pthread_mutex_unlock(&mu);
        bool paused = ASYNC_pause_job();
        if (paused && op->efd >= 0) {
            uint64_t v;
            (void)!read(op->efd, &v, sizeof v);
        }
        check_ctl(now_ns()); /* a new control file may end busy= */
        pthread_mutex_lock(&mu);
        waited = true;
        if (!paused)
            break;
    }
    return waited;
}

/* inline=1: the calling thread answers at once, from its own memo (no
 * lock) or in software; no device, no pause, no wake-up - the cost of a
 * signature whose crypto is free, which a benchmark compares the device's
 * path with. */
static size_t sign_inline(const acc_req *req, uint8_t *sig, size_t cap,
                          bool use_memo)
{
    atomic_fetch_add_explicit(&inlined, 1, memory_order_relaxed);
    memo_entry *table =
        use_memo ? thread_block(inline_memo_key, MEMO_SIZE * sizeof *table)
                 : NULL;
    size_t n = table ? memo_get(table, req, sig, cap) : 0;
    if (n) {
        atomic_fetch_add_explicit(&inline_memo_hits, 1, memory_order_relaxed);
        return n;
    }
    n = acc_soft_sign(req, sig, cap);
    if (table && n)
        memo_put(table, req, sig, n);
    return n;
}

size_t acc_dev_sign(const acc_req *req, uint8_t *sig, size_t cap)
{
    uint64_t now = now_ns();
    check_ctl(now);
    if (cap > ACC_MAX_SIG)
        cap = ACC_MAX_SIG;
    unsigned im = atomic_load_explicit(&inline_mode, memory_order_relaxed);
    if (im)
        return sign_inline(req, sig, cap, im & INLINE_MEMO);
    acc_op *op = op_new(cap);
    if (!op)
        return 0;
    op->req = *req;
    op->sigcap = cap;
    op->efd = -1;
    ASYNC_JOB *job = ASYNC_get_current_job();
    ASYNC_WAIT_CTX *w = job ? ASYNC_get_wait_ctx(job) : NULL;
    ASYNC_callback_fn cb = NULL;
    void *cb_arg = NULL;
    if (w && !ASYNC_WAIT_CTX_get_callback(w, &cb, &cb_arg))
        cb = NULL;
    pthread_mutex_lock(&mu);
    if (cb && set.callback) { /* the application's choice, unless callback=0 */
        op->cb = cb;
        op->cb_arg = cb_arg;
        op->wctx = w;
    } else if (w) {
        op->efd = job_fd(w);
    }
    if (refused(op))
        now = now_ns(); /* the device's time counts from the submission */
    if (!submit(op, now)) {
        pthread_mutex_unlock(&mu);
        op_done(op);
        return acc_soft_sign(req, sig, cap);
    }
    await(op);
    pthread_mutex_unlock(&mu);
    /* The device writes the eventfd once per operation: unless a read
     * after a pause took that count, it is still there (an answer that
     * came before the pause, or between the last read and the check). */
    uint64_t v;
    if (op->efd >= 0 && !op->got)
        (void)!read(op->efd, &v, sizeof v);
    size_t n = op->siglen <= cap ? op->siglen : 0;
    memcpy(sig, op->sig, n);
    op_done(op);
    return n;
}
