/* SPDX-License-Identifier: Apache-2.0 */
/* The shared hash map (core/hmap.h): insert, find, delete, growth and
 * iteration with 64-bit and hashed keys; collisions and deletion inside
 * probe runs that wrap around the table's end; many random operations
 * checked against a plain array; and what the map refuses. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "core/hmap.h"

/* 24 bytes: the map strides by 32, and the payload must survive moves. */
typedef struct tslot {
    kl_hslot h;
    uint64_t val;
    uint32_t extra;
} tslot;

static uint64_t val_of(uint64_t key)
{
    return key * 7 + 3;
}

static void test_u64_basic(void **state)
{
    (void)state;
    kl_hmap m;
    kl_hmap_init(&m, sizeof(tslot));
    assert_null(kl_hmap_get(&m, 1)); /* nothing allocated yet */
    assert_int_equal(kl_hmap_count(&m), 0);
    bool found = true;
    tslot *a = kl_hmap_put(&m, 1, &found);
    assert_non_null(a);
    assert_false(found);
    assert_int_equal(a->val, 0); /* new slots come zeroed */
    a->val = 11;
    tslot *z = kl_hmap_put(&m, 0, &found); /* key 0 is an ordinary key */
    assert_non_null(z);
    assert_false(found);
    z->val = 22;
    tslot *again = kl_hmap_put(&m, 1, &found);
    assert_true(found);
    assert_int_equal(again->val, 11);
    assert_int_equal(kl_hmap_count(&m), 2);
    assert_int_equal(kl_hmap_key(again), 1);
    assert_int_equal(((tslot *)kl_hmap_get(&m, 0))->val, 22);
    assert_int_equal(kl_hmap_key(kl_hmap_get(&m, 0)), 0);
    kl_hmap_remove(&m, (tslot *)kl_hmap_get(&m, 1));
    assert_null(kl_hmap_get(&m, 1));
    assert_non_null(kl_hmap_get(&m, 0));
    assert_int_equal(kl_hmap_count(&m), 1);
    kl_hmap_free(&m);
    assert_null(kl_hmap_get(&m, 0));
    /* usable again after free, without another init */
    assert_non_null(kl_hmap_put(&m, 5, &found));
    assert_non_null(kl_hmap_get(&m, 5));
    kl_hmap_free(&m);
    kl_hmap_free(&m); /* twice is harmless */
}

#define GROW_N 20000

static void test_growth_and_iteration(void **state)
{
    (void)state;
    kl_hmap m;
    kl_hmap_init(&m, sizeof(tslot));
    bool found;
    for (uint64_t k = 0; k < GROW_N; k++) {
        tslot *s = kl_hmap_put(&m, k * 1000003, &found);
        assert_non_null(s);
        assert_false(found);
        s->val = val_of(k * 1000003);
        s->extra = (uint32_t)k;
        /* a power of two, never more than half full */
        assert_int_equal(m.cap & (m.cap - 1), 0);
        assert_true(m.count * 2 <= m.cap);
    }
    assert_int_equal(kl_hmap_count(&m), GROW_N);
    for (uint64_t k = 0; k < GROW_N; k++) {
        tslot *s = kl_hmap_get(&m, k * 1000003);
        assert_non_null(s);
        assert_int_equal(s->val, val_of(k * 1000003));
        assert_int_equal(s->extra, k);
    }
    assert_null(kl_hmap_get(&m, 1)); /* between the keys */
    /* iteration: every entry exactly once */
    uint8_t *seen = calloc(GROW_N, 1);
    assert_non_null(seen);
    size_t n = 0;
    tslot *s;
    for (size_t i = 0; (s = kl_hmap_next(&m, &i));) {
        assert_int_equal(kl_hmap_key(s) % 1000003, 0);
        uint64_t k = kl_hmap_key(s) / 1000003;
        assert_true(k < GROW_N);
        assert_int_equal(seen[k], 0);
        seen[k] = 1;
        n++;
    }
    assert_int_equal(n, GROW_N);
    free(seen);
    kl_hmap_free(&m);
}

static void test_reserve_means_no_growth(void **state)
{
    (void)state;
    kl_hmap m;
    kl_hmap_init(&m, sizeof(tslot));
    assert_int_equal(kl_hmap_reserve(&m, 100), KL_OK);
    assert_int_equal(m.cap, 256);
    unsigned char *slots = m.slots;
    bool found;
    for (uint64_t k = 0; k < 128; k++) {
        assert_false(kl_hmap_full(&m));
        assert_non_null(kl_hmap_put(&m, k, &found));
    }
    assert_true(kl_hmap_full(&m));
    assert_ptr_equal(m.slots, slots);                 /* nothing moved */
    assert_int_equal(kl_hmap_reserve(&m, 10), KL_OK); /* never shrinks */
    assert_int_equal(m.cap, 256);
    assert_non_null(kl_hmap_put(&m, 1000, &found)); /* grows past it */
    assert_int_equal(m.cap, 512);
    for (uint64_t k = 0; k < 128; k++)
        assert_non_null(kl_hmap_get(&m, k));
    kl_hmap_free(&m);
}

/* ---- hashed keys: collisions ---------------------------------------- */

typedef struct hslot {
    kl_hslot h;
    uint32_t key;
    uint32_t val;
} hslot;

static bool same_key(const void *slot, const void *key)
{
    return ((const hslot *)slot)->key == *(const uint32_t *)key;
}

static uint64_t (*hash_fn)(uint32_t);

static uint64_t three_hashes(uint32_t k)
{
    return k % 3; /* 0 too: the map takes any hash */
}

static hslot *hput(kl_hmap *m, uint32_t k, bool *found)
{
    hslot *s = kl_hmap_put_h(m, hash_fn(k), same_key, &k, found);
    if (s && !*found) {
        s->key = k;
        s->val = k ^ 0x5a5a5a5au;
    }
    return s;
}

static hslot *hget(kl_hmap *m, uint32_t k)
{
    return kl_hmap_get_h(m, hash_fn(k), same_key, &k);
}

static void test_hashed_collisions(void **state)
{
    (void)state;
    hash_fn = three_hashes;
    kl_hmap m;
    kl_hmap_init(&m, sizeof(hslot));
    bool found;
    for (uint32_t k = 0; k < 300; k++) {
        assert_non_null(hput(&m, k, &found));
        assert_false(found);
    }
    for (uint32_t k = 0; k < 300; k++) {
        hslot *s = hput(&m, k, &found);
        assert_true(found);
        assert_int_equal(s->val, k ^ 0x5a5a5a5au);
    }
    /* delete every other key, from the middle of three long runs */
    for (uint32_t k = 0; k < 300; k += 2)
        kl_hmap_remove(&m, hget(&m, k));
    for (uint32_t k = 0; k < 300; k++) {
        hslot *s = hget(&m, k);
        if (k % 2) {
            assert_non_null(s);
            assert_int_equal(s->key, k);
        } else {
            assert_null(s);
        }
    }
    assert_int_equal(kl_hmap_count(&m), 150);
    assert_null(hget(&m, 1000)); /* a hash that is there, a key that is not */
    kl_hmap_free(&m);
}

/* Keys whose home is one of the table's last two slots, so their probe
 * runs wrap past the end; deleting any of them must keep the others (and
 * a key homed at slot 0 pushed along by them) reachable. */
static void test_delete_in_wrapping_runs(void **state)
{
    (void)state;
    for (int victim = 0; victim < 7; victim++) {
        kl_hmap m;
        kl_hmap_init(&m, sizeof(tslot));
        assert_int_equal(kl_hmap_reserve(&m, 8), KL_OK);
        assert_int_equal(m.cap, 16);
        uint64_t keys[7];
        int n = 0;
        /* home is computed on key + 1, the map's tag for a 64-bit key */
        for (uint64_t k = 0; n < 6; k++) {
            size_t h = kl_hmap_home_(&m, k + 1);
            if (h >= 14)
                keys[n++] = k;
        }
        for (uint64_t k = 0; n < 7; k++)
            if (kl_hmap_home_(&m, k + 1) == 0)
                keys[n++] = k;
        bool found;
        for (int i = 0; i < 7; i++) {
            tslot *s = kl_hmap_put(&m, keys[i], &found);
            assert_non_null(s);
            s->val = val_of(keys[i]);
        }
        assert_int_equal(m.cap, 16); /* 7 of 16: no growth moved them */
        kl_hmap_remove(&m, (tslot *)kl_hmap_get(&m, keys[victim]));
        for (int i = 0; i < 7; i++) {
            tslot *s = kl_hmap_get(&m, keys[i]);
            if (i == victim) {
                assert_null(s);
            } else {
                assert_non_null(s);
                assert_int_equal(s->val, val_of(keys[i]));
            }
        }
        /* and the rest, one by one, in another order */
        for (int i = 6; i >= 0; i--) {
            if (i == victim)
                continue;
            kl_hmap_remove(&m, (tslot *)kl_hmap_get(&m, keys[i]));
            for (int j = 0; j < i; j++)
                if (j != victim)
                    assert_non_null(kl_hmap_get(&m, keys[j]));
        }
        assert_int_equal(kl_hmap_count(&m), 0);
        size_t it = 0;
        assert_null(kl_hmap_next(&m, &it));
        kl_hmap_free(&m);
    }
}

/* ---- random operations against a plain array ------------------------ */

#define REF_KEYS 600
#define REF_OPS 300000

static uint64_t rnd_state = 0x243F6A8885A308D3ull;

static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

static uint64_t small_hash(uint32_t k)
{
    return k & 31; /* heavy collisions, long runs */
}

static void check_all(kl_hmap *m, const uint64_t *ref, bool hashed)
{
    size_t n = 0;
    for (uint32_t k = 0; k < REF_KEYS; k++) {
        if (hashed) {
            hslot *s = hget(m, k);
            assert_true((s != NULL) == (ref[k] != 0));
            if (s)
                assert_int_equal(s->val, ref[k]);
        } else {
            tslot *s = kl_hmap_get(m, (uint64_t)k << 40);
            assert_true((s != NULL) == (ref[k] != 0));
            if (s)
                assert_int_equal(s->val, ref[k]);
        }
        n += ref[k] != 0;
    }
    assert_int_equal(kl_hmap_count(m), n);
    size_t it = 0, seen = 0;
    while (kl_hmap_next(m, &it))
        seen++;
    assert_int_equal(seen, n);
}

static void random_run(bool hashed)
{
    hash_fn = small_hash;
    kl_hmap m;
    kl_hmap_init(&m, hashed ? sizeof(hslot) : sizeof(tslot));
    uint64_t *ref = calloc(REF_KEYS, sizeof *ref); /* 0: absent */
    assert_non_null(ref);
    for (int op = 0; op < REF_OPS; op++) {
        uint32_t k = (uint32_t)(rnd() % REF_KEYS);
        bool found;
        if (rnd() % 2) { /* put, then set a new value */
            uint64_t v = (rnd() | 1) & 0xffffffffu;
            if (hashed) {
                hslot *s = hput(&m, k, &found);
                assert_non_null(s);
                s->val = (uint32_t)v;
            } else {
                tslot *s = kl_hmap_put(&m, (uint64_t)k << 40, &found);
                assert_non_null(s);
                s->val = v;
            }
            assert_true(found == (ref[k] != 0));
            ref[k] = v;
        } else { /* delete */
            hslot *hs = hashed ? hget(&m, k) : NULL;
            tslot *ts = hashed ? NULL : kl_hmap_get(&m, (uint64_t)k << 40);
            assert_true((hs || ts) == (ref[k] != 0));
            if (hs)
                kl_hmap_remove(&m, hs);
            if (ts)
                kl_hmap_remove(&m, ts);
            ref[k] = 0;
        }
        if (op % 10007 == 0)
            check_all(&m, ref, hashed);
    }
    check_all(&m, ref, hashed);
    free(ref);
    kl_hmap_free(&m);
}

static void test_random_u64_against_reference(void **state)
{
    (void)state;
    random_run(false);
}

static void test_random_hashed_against_reference(void **state)
{
    (void)state;
    random_run(true);
}

/* ---- what the map refuses ------------------------------------------- */

static void test_negative(void **state)
{
    (void)state;
    kl_hmap m;
    kl_hmap_init(&m, sizeof(tslot));
    size_t it = 0;
    assert_null(kl_hmap_next(&m, &it)); /* nothing allocated */
    bool found = true;
    /* the one key a map cannot hold */
    assert_null(kl_hmap_put(&m, KL_HMAP_KEY_NONE, &found));
    assert_false(found);
    assert_int_equal(kl_hmap_count(&m), 0);
    assert_null(kl_hmap_get(&m, KL_HMAP_KEY_NONE));
    assert_non_null(kl_hmap_put(&m, KL_HMAP_KEY_NONE - 1, &found));
    assert_null(kl_hmap_get(&m, KL_HMAP_KEY_NONE));
    assert_non_null(kl_hmap_get(&m, KL_HMAP_KEY_NONE - 1));
    /* a size nobody can allocate leaves the map as it was */
    size_t cap = m.cap;
    assert_int_equal(kl_hmap_reserve(&m, SIZE_MAX / 2), KL_E_NOMEM);
    assert_int_equal(kl_hmap_reserve(&m, SIZE_MAX / 64), KL_E_NOMEM);
    assert_int_equal(m.cap, cap);
    assert_non_null(kl_hmap_get(&m, KL_HMAP_KEY_NONE - 1));
    /* an absent key in a map that has others */
    assert_null(kl_hmap_get(&m, 7));
    kl_hmap_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_u64_basic),
        cmocka_unit_test(test_growth_and_iteration),
        cmocka_unit_test(test_reserve_means_no_growth),
        cmocka_unit_test(test_hashed_collisions),
        cmocka_unit_test(test_delete_in_wrapping_runs),
        cmocka_unit_test(test_random_u64_against_reference),
        cmocka_unit_test(test_random_hashed_against_reference),
        cmocka_unit_test(test_negative),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
