/* SPDX-License-Identifier: Apache-2.0 */
/* The shared hash map (src/core/hmap.h) against the hand-written maps it
 * replaced, at the sizes each user has: the key store's index (100,000
 * keys, a lookup per request), a connection's request ids (64-1024 in
 * flight, an add and a complete per request), the client's handle map,
 * the per-source handshake counts (thousands of sources, a take and a put
 * per connection) and the per-thread context cache (a lookup per RSA or
 * Ed25519 signature).
 *
 * "old" is the code as it was before the switch (hmap_bench_old.c);
 * "new" is the tree's own code on the shared map (kl_u64map_*, kl_src_*,
 * kl_ctx_cache_get) - but for the key store and the request ids, which
 * did not switch, where "new" is their table as the shared map would make
 * it (hmap_bench_old.c too). Each figure is the median over the runs of
 * ns per operation, old and new alternating so that a drifting machine
 * hurts both alike.
 * Written as a Markdown table:
 *
 *   build/hmap_bench [runs [only]]   (runs: default 7; only: keystore,
 *       reqtable, u64map, limits or ctx_cache; bench/RESULTS.md "Shared
 *       hash map" has a run and how to read it) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "client/u64map.h"
#include "core/hmap.h"
#include "core/time.h"
#include "crypto/ctx_cache.h"
#include "hmap_bench_old.h"
#include "keys/store.h"
#include "engine/limits.h"

static uint64_t rnd_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

/* Keeps a result alive so that the compiler cannot drop the work. */
static volatile uint64_t sink;

/* ==== timing =========================================================== */

#define MAX_RUNS 31

typedef struct stat_pair {
    double old_ns[MAX_RUNS], new_ns[MAX_RUNS];
} stat_pair;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void row(const char *user, const char *size, const char *op,
                stat_pair *p, int runs)
{
    double o = median(p->old_ns, runs), n = median(p->new_ns, runs);
    printf("| %s | %s | %s | %.1f | %.1f | %.2f |\n", user, size, op, o, n,
           n / o);
    fflush(stdout);
}

/* ---- key store: 100,000 keys ---- */

#define KS_KEYS 100000
#define KS_LOOKUPS 2000000

static kl_key *fake_key(void **spacer)
{
    /* A loaded key sits among its OpenSSL allocations (~1.9 KiB for P-256):
     * the spacer keeps the kl_keys as far apart, so they are as cold. */
    *spacer = malloc(1900);
    kl_key *k = calloc(1, sizeof *k + 32);
    if (!k || !*spacer)
        abort();
    for (size_t i = 0; i < KL_SKI_LEN; i += 8) {
        uint64_t r = rnd();
        memcpy(k->ski + i, &r, KL_SKI_LEN - i < 8 ? KL_SKI_LEN - i : 8);
    }
    snprintf(k->path, 32, "/etc/keyless/keys/%d.key", (int)(rnd() % 100000));
    return k;
}

static void bench_keystore(int runs)
{
    kl_key **keys = malloc(KS_KEYS * sizeof *keys);
    void **spacers = malloc(KS_KEYS * sizeof *spacers);
    uint32_t *order = malloc(KS_LOOKUPS * sizeof *order);
    uint8_t(*miss)[KL_SKI_LEN] = malloc(KS_LOOKUPS / 4 * sizeof *miss);
    if (!keys || !spacers || !order || !miss)
        abort();
    for (size_t i = 0; i < KS_KEYS; i++)
        keys[i] = fake_key(&spacers[i]);
    for (size_t i = 0; i < KS_LOOKUPS; i++)
        order[i] = (uint32_t)(rnd() % KS_KEYS);
    for (size_t i = 0; i < KS_LOOKUPS / 4; i++)
        for (size_t j = 0; j < KL_SKI_LEN; j++)
            miss[i][j] = (uint8_t)rnd();
    stat_pair build, hit, nohit;
    for (int r = 0; r < runs; r++) {
        /* old */
        old_index ox = {calloc(64, sizeof(kl_key *)), 63};
        uint64_t t0 = kl_now_ns();
        for (size_t i = 0; i < KS_KEYS; i++)
            oi_insert(&ox, keys, i);
        uint64_t t1 = kl_now_ns();
        uint64_t acc = 0;
        for (size_t i = 0; i < KS_LOOKUPS; i++)
            acc += oi_find(&ox, keys[order[i]]->ski)->info.bits;
        uint64_t t2 = kl_now_ns();
        for (size_t i = 0; i < KS_LOOKUPS / 4; i++)
            acc += oi_find(&ox, miss[i]) != NULL;
        uint64_t t3 = kl_now_ns();
        sink += acc;
        build.old_ns[r] = (double)(t1 - t0) / KS_KEYS;
        hit.old_ns[r] = (double)(t2 - t1) / KS_LOOKUPS;
        nohit.old_ns[r] = (double)(t3 - t2) / (KS_LOOKUPS / 4);
        free(ox.table);
        /* new: the index on the shared map */
        kl_hmap hm;
        hi_init(&hm);
        t0 = kl_now_ns();
        for (size_t i = 0; i < KS_KEYS; i++)
            hi_insert(&hm, keys[i]);
        t1 = kl_now_ns();
        acc = 0;
        for (size_t i = 0; i < KS_LOOKUPS; i++)
            acc += hi_find(&hm, keys[order[i]]->ski)->info.bits;
        t2 = kl_now_ns();
        for (size_t i = 0; i < KS_LOOKUPS / 4; i++)
            acc += hi_find(&hm, miss[i]) != NULL;
        t3 = kl_now_ns();
        sink += acc;
        build.new_ns[r] = (double)(t1 - t0) / KS_KEYS;
        hit.new_ns[r] = (double)(t2 - t1) / KS_LOOKUPS;
        nohit.new_ns[r] = (double)(t3 - t2) / (KS_LOOKUPS / 4);
        kl_hmap_free(&hm);
    }
    row("key store (not switched)", "100,000 keys", "insert (load)", &build,
        runs);
    row("key store (not switched)", "100,000 keys",
        "lookup, present (per request)", &hit, runs);
    row("key store (not switched)", "100,000 keys", "lookup, absent", &nohit,
        runs);
    for (size_t i = 0; i < KS_KEYS; i++) {
        free(keys[i]);
        free(spacers[i]);
    }
    free(keys);
    free(spacers);
    free(order);
    free(miss);
}

/* ---- request ids: one connection, `depth` in flight ---- */

#define RT_OPS 4000000

static void bench_reqtable(int runs, uint32_t depth)
{
    stat_pair cycle, look;
    for (int r = 0; r < runs; r++) {
        /* a request's life in the pipeline: the next id is checked free,
         * added; the answer to the oldest completes it */
        old_reqtable ot = {0};
        uint64_t sent, acc = 0;
        for (uint32_t id = 1; id <= depth; id++)
            ort_add(&ot, id, id);
        uint64_t t0 = kl_now_ns();
        for (uint32_t id = depth + 1; id < depth + 1 + RT_OPS; id++) {
            acc += ort_contains(&ot, id);
            ort_add(&ot, id, id);
            acc += (uint64_t)ort_complete(&ot, id - depth, &sent);
        }
        uint64_t t1 = kl_now_ns();
        for (uint32_t i = 0; i < RT_OPS; i++)
            acc += ort_contains(&ot, RT_OPS + 1 + i % depth);
        uint64_t t2 = kl_now_ns();
        cycle.old_ns[r] = (double)(t1 - t0) / RT_OPS;
        look.old_ns[r] = (double)(t2 - t1) / RT_OPS;
        free(ot.slots);

        kl_hmap nt;
        hr_init(&nt);
        for (uint32_t id = 1; id <= depth; id++)
            if (hr_add(&nt, id, id) != 0)
                abort();
        t0 = kl_now_ns();
        for (uint32_t id = depth + 1; id < depth + 1 + RT_OPS; id++) {
            acc += hr_contains(&nt, id);
            if (hr_add(&nt, id, id) != 0)
                abort();
            acc += (uint64_t)hr_complete(&nt, id - depth, &sent);
        }
        t1 = kl_now_ns();
        for (uint32_t i = 0; i < RT_OPS; i++)
            acc += hr_contains(&nt, RT_OPS + 1 + i % depth);
        t2 = kl_now_ns();
        cycle.new_ns[r] = (double)(t1 - t0) / RT_OPS;
        look.new_ns[r] = (double)(t2 - t1) / RT_OPS;
        kl_hmap_free(&nt);
        sink += acc;
    }
    char size[32];
    snprintf(size, sizeof size, "%u in flight", depth);
    row("request ids (reqtable, not switched)", size,
        "check + add + complete (per request)", &cycle, runs);
    row("request ids (reqtable, not switched)", size, "lookup, present", &look,
        runs);
}

/* ---- client handles and wire ids (u64map) ---- */

static void bench_u64map(int runs, uint32_t depth)
{
    stat_pair cycle;
    static int val;
    for (int r = 0; r < runs; r++) {
        /* a request: put by handle, found once by its answer, deleted */
        old_u64map om = {0};
        uint64_t acc = 0;
        for (uint64_t h = 1; h <= depth; h++)
            ou_put(&om, h, &val);
        uint64_t t0 = kl_now_ns();
        for (uint64_t h = depth + 1; h < depth + 1 + RT_OPS; h++) {
            ou_put(&om, h, &val);
            acc += ou_get(&om, h - depth / 2) != NULL;
            acc += ou_del(&om, h - depth) != NULL;
        }
        uint64_t t1 = kl_now_ns();
        cycle.old_ns[r] = (double)(t1 - t0) / RT_OPS;
        free(om.slots);

        kl_u64map nm;
        kl_u64map_init(&nm);
        for (uint64_t h = 1; h <= depth; h++)
            if (kl_u64map_put(&nm, h, &val) != KL_OK)
                abort();
        t0 = kl_now_ns();
        for (uint64_t h = depth + 1; h < depth + 1 + RT_OPS; h++) {
            if (kl_u64map_put(&nm, h, &val) != KL_OK)
                abort();
            acc += kl_u64map_get(&nm, h - depth / 2) != NULL;
            acc += kl_u64map_del(&nm, h - depth) != NULL;
        }
        t1 = kl_now_ns();
        cycle.new_ns[r] = (double)(t1 - t0) / RT_OPS;
        kl_u64map_free(&nm);
        sink += acc;
    }
    char size[32];
    snprintf(size, sizeof size, "%u in flight", depth);
    row("client handles (u64map)", size, "put + get + delete (per request)",
        &cycle, runs);
}

/* ---- per-source handshake counts ---- */

#define SRC_OPS 2000000

static void addr_of(uint32_t i, uint8_t out[16])
{
    memset(out, 0, 16);
    out[10] = out[11] = 0xff;
    memcpy(out + 12, &i, 4);
}

static void bench_limits(int runs, uint32_t sources)
{
    const uint32_t max_handshaking = 2 * sources;
    uint32_t *pick = malloc(SRC_OPS * sizeof *pick);
    if (!pick)
        abort();
    for (size_t i = 0; i < SRC_OPS; i++)
        pick[i] = (uint32_t)(rnd() % sources);
    stat_pair churn, count;
    uint8_t a[16];
    for (int r = 0; r < runs; r++) {
        /* every source holds one handshake; one ends (its entry goes),
         * another from the same source starts (the entry comes back) */
        old_src_table *ot = os_new(max_handshaking, 4, rnd(), rnd());
        for (uint32_t s = 0; s < sources; s++) {
            addr_of(s, a);
            os_take(ot, a);
        }
        uint64_t acc = 0;
        uint64_t t0 = kl_now_ns();
        for (size_t i = 0; i < SRC_OPS; i++) {
            addr_of(pick[i], a);
            os_put(ot, a);
            acc += os_take(ot, a);
        }
        uint64_t t1 = kl_now_ns();
        for (size_t i = 0; i < SRC_OPS; i++) {
            addr_of(pick[i], a);
            acc += os_count(ot, a);
        }
        uint64_t t2 = kl_now_ns();
        churn.old_ns[r] = (double)(t1 - t0) / SRC_OPS;
        count.old_ns[r] = (double)(t2 - t1) / SRC_OPS;
        pthread_mutex_destroy(&ot->mu);
        free(ot);

        bool oom;
        kl_src_table *nt = kl_src_table_new(max_handshaking, 4, &oom);
        if (!nt)
            abort();
        for (uint32_t s = 0; s < sources; s++) {
            addr_of(s, a);
            kl_src_take(nt, a);
        }
        t0 = kl_now_ns();
        for (size_t i = 0; i < SRC_OPS; i++) {
            addr_of(pick[i], a);
            kl_src_put(nt, a);
            acc += kl_src_take(nt, a);
        }
        t1 = kl_now_ns();
        for (size_t i = 0; i < SRC_OPS; i++) {
            addr_of(pick[i], a);
            acc += kl_src_count(nt, a);
        }
        t2 = kl_now_ns();
        churn.new_ns[r] = (double)(t1 - t0) / SRC_OPS;
        count.new_ns[r] = (double)(t2 - t1) / SRC_OPS;
        kl_src_table_free(nt);
        sink += acc;
    }
    char size[48];
    snprintf(size, sizeof size, "%u sources, max_handshaking %u", sources,
             max_handshaking);
    row("per-source limits", size, "put + take (delete + insert, locked)",
        &churn, runs);
    row("per-source limits", size, "count (lookup, locked)", &count, runs);
    free(pick);
}

/* ---- per-thread context cache ---- */

static unsigned setups;

static int count_setup(kl_ctx_entry *e)
{
    (void)e;
    setups++;
    return 1;
}

#define CC_OPS 2000000

static void bench_ctx_cache(int runs, uint32_t nkeys)
{
    EVP_PKEY **k = malloc(nkeys * sizeof *k);
    void **spacers = malloc(nkeys * sizeof *spacers);
    uint32_t *pick = malloc(CC_OPS * sizeof *pick);
    if (!k || !spacers || !pick)
        abort();
    /* A loaded key's EVP_PKEY sits among the key's other allocations, a
     * varying distance from the next key's: without spacers the addresses
     * would be evenly strided, which flatters a direct-mapped table. */
    for (uint32_t i = 0; i < nkeys; i++)
        if (!(k[i] = EVP_PKEY_new()) ||
            !(spacers[i] = malloc(1024 + rnd() % 2048)))
            abort();
    for (size_t i = 0; i < CC_OPS; i++)
        pick[i] = (uint32_t)(rnd() % nkeys);
    stat_pair get;
    unsigned old_miss = 0, new_miss = 0;
    for (int r = 0; r < runs; r++) {
        /* warm: the steady state of a busy thread (tables grown) */
        for (size_t i = 0; i < CC_OPS; i++)
            oc_get(k[pick[i]], 1, count_setup);
        setups = 0;
        uint64_t t0 = kl_now_ns();
        for (size_t i = 0; i < CC_OPS; i++)
            sink += (uintptr_t)oc_get(k[pick[i]], 1, count_setup)->pkey;
        uint64_t t1 = kl_now_ns();
        get.old_ns[r] = (double)(t1 - t0) / CC_OPS;
        old_miss = setups;
        oc_free();

        for (size_t i = 0; i < CC_OPS; i++)
            kl_ctx_cache_get(k[pick[i]], 1, NULL, count_setup);
        setups = 0;
        t0 = kl_now_ns();
        for (size_t i = 0; i < CC_OPS; i++)
            sink +=
                (uintptr_t)kl_ctx_cache_get(k[pick[i]], 1, NULL, count_setup)
                    ->pkey;
        t1 = kl_now_ns();
        get.new_ns[r] = (double)(t1 - t0) / CC_OPS;
        new_miss = setups;
        kl_ctx_cache_thread_free();
    }
    char size[32], op[96];
    snprintf(size, sizeof size, "%u keys", nkeys);
    snprintf(op, sizeof op,
             "get (per signature; misses old %.1f%%, new %.1f%%)",
             100.0 * old_miss / CC_OPS, 100.0 * new_miss / CC_OPS);
    row("context cache", size, op, &get, runs);
    for (uint32_t i = 0; i < nkeys; i++) {
        EVP_PKEY_free(k[i]);
        free(spacers[i]);
    }
    free(k);
    free(spacers);
    free(pick);
}

static bool want(const char *only, const char *name)
{
    return !only || strcmp(only, name) == 0;
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 7;
    const char *only = argc > 2 ? argv[2] : NULL;
    if (runs < 1 || runs > MAX_RUNS) {
        fprintf(stderr,
                "usage: %s [runs, 1..%d] "
                "[keystore|reqtable|u64map|limits|ctx_cache]\n",
                argv[0], MAX_RUNS);
        return 2;
    }
    printf("ns per operation, median of %d runs (old and new alternating)\n\n",
           runs);
    printf("| map | size | operation | old ns | new ns | new / old |\n");
    printf("|---|---|---|---:|---:|---:|\n");
    if (want(only, "keystore"))
        bench_keystore(runs);
    if (want(only, "reqtable")) {
        bench_reqtable(runs, 64);
        bench_reqtable(runs, 1024);
    }
    if (want(only, "u64map")) {
        bench_u64map(runs, 64);
        bench_u64map(runs, 1024);
    }
    if (want(only, "limits")) {
        bench_limits(runs, 1000);
        bench_limits(runs, 5000);
    }
    if (want(only, "ctx_cache")) {
        bench_ctx_cache(runs, 4);
        bench_ctx_cache(runs, 1000);
        bench_ctx_cache(runs, 100000);
    }
    return 0;
}
