/* SPDX-License-Identifier: Apache-2.0 */
/* The directory's copy of <prefix>dir/ (directory.h): server records and
 * key sets in arrays sorted by name, changed one key at a time by the
 * snapshot read and the watch, and a set's SKIs read from its chunks when
 * its meta names a generation not held yet. Used by the directory's
 * thread only. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "fleet/directory_int.h"

void kl_fdir_state_clear(kl_fdir_state *s)
{
    for (size_t i = 0; i < s->nsrv; i++)
        kl_fleet_server_clear(&s->srv[i]);
    for (size_t i = 0; i < s->nsets; i++) {
        kl_fleet_set_meta_clear(&s->sets[i].meta);
        free(s->sets[i].skis);
    }
    free(s->srv);
    free(s->sets);
    free(s->regions);
    memset(s, 0, sizeof *s);
}

/* Index of name in a sorted array of elem-byte items whose first field is
 * the name; *found says whether it is there (else: where it goes). */
static size_t bfind(const void *arr, size_t n, size_t elem, const char *name,
                    bool *found)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp((const char *)arr + mid * elem, name);
        if (!c) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

/* Makes room at i in *arr (n items, *cap capacity). */
static kl_status insert_at(void **arr, size_t *n, size_t *cap, size_t elem,
                           size_t i)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        void *p = realloc(*arr, nc * elem);
        if (!p)
            return KL_E_NOMEM;
        *arr = p;
        *cap = nc;
    }
    char *a = *arr;
    memmove(a + (i + 1) * elem, a + i * elem, (*n - i) * elem);
    memset(a + i * elem, 0, elem);
    (*n)++;
    return KL_OK;
}

static void remove_at(void *arr, size_t *n, size_t elem, size_t i)
{
    char *a = arr;
    memmove(a + i * elem, a + (i + 1) * elem, (*n - i - 1) * elem);
    (*n)--;
}

bool kl_fdir_server_put(kl_fdir_state *s, const char *name, const uint8_t *v,
                        size_t len)
{
    kl_fleet_server rec;
    char err[256];
    bool found;
    size_t i = bfind(s->srv, s->nsrv, sizeof *s->srv, name, &found);
    kl_status ps = kl_fleet_server_parse(v, len, &rec, err, sizeof err);
    if (ps != KL_OK || strcmp(rec.name, name) != 0) {
        if (ps == KL_OK)
            snprintf(err, sizeof err, "its \"name\" (%s) is not its key's",
                     rec.name);
        kl_fleet_server_clear(&rec);
        /* a record that does not parse names no usable address: as if
         * absent; the rest of the directory still routes */
        kl_warn("fleet: directory: record of %s skipped: %s", name, err);
        return kl_fdir_server_del(s, name);
    }
    if (!found && insert_at((void **)&s->srv, &s->nsrv, &s->srv_cap,
                            sizeof *s->srv, i) != KL_OK) {
        kl_fleet_server_clear(&rec);
        return false;
    }
    kl_fleet_server_clear(&s->srv[i]);
    s->srv[i] = rec;
    return true;
}

bool kl_fdir_server_del(kl_fdir_state *s, const char *name)
{
    bool found;
    size_t i = bfind(s->srv, s->nsrv, sizeof *s->srv, name, &found);
    if (!found)
        return false;
    kl_fleet_server_clear(&s->srv[i]);
    remove_at(s->srv, &s->nsrv, sizeof *s->srv, i);
    return true;
}

bool kl_fdir_set_del(kl_fdir_state *s, const char *name)
{
    bool found;
    size_t i = bfind(s->sets, s->nsets, sizeof *s->sets, name, &found);
    if (!found)
        return false;
    kl_fleet_set_meta_clear(&s->sets[i].meta);
    free(s->sets[i].skis);
    remove_at(s->sets, &s->nsets, sizeof *s->sets, i);
    return true;
}

/* Reads generation m->generation of the set's chunks (paged: a chunk is
 * up to 1 MB) and checks them against m. *skis malloc'd. */
static kl_status read_chunks(kl_etcd *c, const char *prefix, const char *set,
                             const kl_fleet_set_meta *m, uint8_t **skis,
                             char *err, size_t errlen)
{
    char pfx[512];
    KL_GUARD(kl_fleet_key_chunks(prefix, set, m->generation, pfx, sizeof pfx));
    size_t want = (size_t)m->keys * KL_FLEET_SKI_LEN, have = 0;
    uint8_t *buf = malloc(want ? want : 1);
    KL_ENSURE(buf != NULL, KL_E_NOMEM);
    kl_etcd_page pg = {0};
    uint8_t *after = NULL;
    size_t after_len = 0, chunks = 0;
    kl_status st = KL_OK;
    for (;;) {
        st = kl_etcd_range(c, pfx, strlen(pfx), after, after_len, 4, 0, &pg,
                           err, errlen);
        free(after);
        after = NULL;
        if (st != KL_OK)
            break;
        for (size_t i = 0; i < pg.n && st == KL_OK; i++, chunks++) {
            const kl_etcd_kv *kv = &pg.kvs[i];
            if (kv->value_len % KL_FLEET_SKI_LEN ||
                have + kv->value_len > want) {
                kl_errf(err, errlen,
                        "key set %s generation %" PRId64
                        ": chunk %zu holds %zu bytes, not what its meta says",
                        set, m->generation, chunks, kv->value_len);
                st = KL_E_BAD_VALUE;
                break;
            }
            memcpy(buf + have, kv->value, kv->value_len);
            have += kv->value_len;
        }
        bool more = pg.more && pg.n > 0;
        if (st == KL_OK && more) {
            after_len = pg.kvs[pg.n - 1].key_len;
            after = malloc(after_len);
            if (!after)
                st = KL_E_NOMEM;
            else
                memcpy(after, pg.kvs[pg.n - 1].key, after_len);
        }
        kl_etcd_page_clear(&pg);
        if (st != KL_OK || !more)
            break;
    }
    if (st == KL_OK && chunks != m->chunks) {
        kl_errf(err, errlen,
                "key set %s generation %" PRId64 ": %zu chunks, its meta "
                "says %" PRIu32,
                set, m->generation, chunks, m->chunks);
        st = KL_E_BAD_VALUE;
    }
    if (st == KL_OK)
        st = kl_fleet_set_verify(m, buf, have / KL_FLEET_SKI_LEN, err, errlen);
    if (st != KL_OK) {
        free(buf);
        return st;
    }
    *skis = buf;
    return KL_OK;
}

/* Same generation and digest: the SKIs held are this meta's. */
static bool same_skis(const kl_fleet_set_meta *a, const kl_fleet_set_meta *b)
{
    return a->generation == b->generation && a->keys == b->keys &&
           !memcmp(a->sha256, b->sha256, sizeof a->sha256);
}

/* The SKIs of m from old, when old holds them: a snapshot does not read
 * the chunks of the sets it already has again. */
static uint8_t *copy_held(const kl_fdir_state *old, const char *name,
                          const kl_fleet_set_meta *m)
{
    bool found;
    if (!old)
        return NULL;
    size_t i = bfind(old->sets, old->nsets, sizeof *old->sets, name, &found);
    if (!found || !same_skis(&old->sets[i].meta, m))
        return NULL;
    size_t n = (size_t)m->keys * KL_FLEET_SKI_LEN;
    uint8_t *p = malloc(n ? n : 1);
    if (p && n)
        memcpy(p, old->sets[i].skis, n);
    return p;
}

kl_status kl_fdir_set_put(kl_fdir_state *s, const kl_fdir_state *old,
                          kl_etcd *c, const char *prefix, const char *name,
                          const uint8_t *v, size_t len, int64_t mod_revision)
{
    kl_fleet_set_meta m;
    char err[512] = "";
    if (kl_fleet_set_meta_parse(v, len, &m, err, sizeof err) != KL_OK) {
        kl_warn("fleet: directory: key set %s: meta skipped, the SKIs held "
                "stay: %s",
                name, err);
        return KL_OK;
    }
    bool found;
    size_t i = bfind(s->sets, s->nsets, sizeof *s->sets, name, &found);
    uint8_t *skis = NULL;
    if (!found || !same_skis(&s->sets[i].meta, &m))
        skis = copy_held(old, name, &m);
    if (!skis && (!found || !same_skis(&s->sets[i].meta, &m))) {
        kl_status st = read_chunks(c, prefix, name, &m, &skis, err, sizeof err);
        if (st == KL_E_BAD_VALUE) {
            kl_warn("fleet: directory: key set %s generation %" PRId64
                    " not taken (%s); %s",
                    name, m.generation, err,
                    found ? "the previous generation stays" : "not routed");
            kl_fleet_set_meta_clear(&m);
            return KL_OK;
        }
        if (st != KL_OK) { /* etcd failed: read again later */
            kl_fleet_set_meta_clear(&m);
            return st;
        }
    }
    if (!found && insert_at((void **)&s->sets, &s->nsets, &s->sets_cap,
                            sizeof *s->sets, i) != KL_OK) {
        free(skis);
        kl_fleet_set_meta_clear(&m);
        return KL_E_NOMEM;
    }
    kl_fdir_set *fs = &s->sets[i];
    snprintf(fs->name, sizeof fs->name, "%s", name);
    kl_fleet_set_meta_clear(&fs->meta);
    fs->meta = m;
    fs->mod_revision = mod_revision;
    if (skis) {
        free(fs->skis);
        fs->skis = skis;
    }
    return KL_OK;
}

/* dir/regions written or deleted; a bad one keeps the codes held. */
static kl_status regions_put(kl_fdir_state *s, bool del, const uint8_t *v,
                             size_t len)
{
    if (del) {
        free(s->regions);
        s->regions = NULL;
        return KL_OK;
    }
    kl_fleet_regions *r = malloc(sizeof *r);
    if (!r)
        return KL_E_NOMEM;
    char err[256];
    if (kl_fleet_regions_parse(v, len, r, err, sizeof err) != KL_OK) {
        kl_warn("fleet: directory: region codes skipped, the codes held "
                "stay: %s",
                err);
        free(r);
        return KL_OK;
    }
    free(s->regions);
    s->regions = r;
    return KL_OK;
}

kl_status kl_fdir_apply(kl_fdir_state *s, const kl_fdir_state *old, kl_etcd *c,
                        const char *prefix, const uint8_t *key, size_t key_len,
                        const uint8_t *v, size_t len, bool del,
                        int64_t mod_revision, bool *changed)
{
    char name[KL_FLEET_NAME_MAX + 1];
    switch (kl_fleet_key_parse(prefix, key, key_len, name)) {
    case KL_FLEET_KEY_SERVER:
        if (del)
            *changed |= kl_fdir_server_del(s, name);
        else {
            (void)kl_fdir_server_put(s, name, v, len);
            *changed = true;
        }
        return KL_OK;
    case KL_FLEET_KEY_SET:
        *changed = true;
        if (del) {
            kl_fdir_set_del(s, name);
            return KL_OK;
        }
        return kl_fdir_set_put(s, old, c, prefix, name, v, len, mod_revision);
    case KL_FLEET_KEY_REGIONS:
        *changed = true;
        return regions_put(s, del, v, len);
    default: return KL_OK; /* not ours (a newer layout's key) */
    }
}
