/* SPDX-License-Identifier: Apache-2.0 */
/* Reload without dropping a request (docs/DESIGN.md "Reload without
 * dropping a request"): the key store and the TLS
 * context are swapped as a whole, never edited in place.
 *
 *  - kl_server_swap (main thread) builds nothing itself: it wraps the new
 *    objects, replaces the server's pointers under res_mu, bumps the
 *    generation and wakes every shard.
 *  - A shard notices the new generation with one relaxed load (per request,
 *    per accepted connection and per wake-up) and takes a reference on the
 *    new objects under res_mu - a lock taken once per shard per reload, so
 *    it costs nothing on the request path.
 *  - A request resolves its key in the shard's current store and its job
 *    pins that store (a plain counter: jobs are submitted and completed on
 *    the shard's thread). A store a reload retired stays alive until its
 *    last job came back; then its reference is dropped, and the last
 *    reference frees it, keys wiped. Jobs in flight therefore finish with
 *    the key they started with, and nothing is freed under a worker.
 *  - Connections need no pin: an SSL object holds its own reference on the
 *    SSL_CTX it was made from, so connections accepted before a reload keep
 *    the old certificate until they close, and new ones get the new one.
 *    A new context that trusts other client CAs makes the shard verify
 *    its open connections' clients again (lifetime.c).
 * The per-thread crypto context cache holds its own EVP_PKEY references
 * (crypto/ctx_cache.h), so it never sees a freed key either. */
#include <stdlib.h>

#include "core/log.h"
#include "engine/internal.h"

kl_res *kl_res_new(void *obj, void (*free_fn)(void *obj))
{
    kl_res *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    atomic_init(&r->refs, 1);
    r->obj = obj;
    r->free_fn = free_fn;
    return r;
}

static void res_ref(kl_res *r)
{
    atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
}

kl_res *kl_res_ref(kl_res *r)
{
    res_ref(r);
    return r;
}

void kl_res_release(kl_res *r)
{
    if (!r)
        return;
    /* acq_rel: every use of obj happens before the free */
    if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (r->free_fn)
        r->free_fn(r->obj);
    free(r);
}

static void pin_drop(kl_shard *s, kl_pin *p)
{
    if (--p->users > 0)
        return;
    for (kl_pin **pp = &s->res.old_keys; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    kl_res_release(p->res);
    free(p);
}

void kl_shard_sync(kl_shard *s)
{
    kl_server *srv = s->srv;
    if (atomic_load_explicit(&srv->gen, memory_order_acquire) == s->res.gen)
        return;
    kl_pin *fresh = calloc(1, sizeof *fresh);
    if (!fresh)
        return; /* keep serving with what we have; retried next time */
    pthread_mutex_lock(&srv->res_mu);
    kl_res *keys = srv->keys_res, *tls = srv->tls_res;
    res_ref(keys);
    res_ref(tls);
    s->res.gen = atomic_load_explicit(&srv->gen, memory_order_relaxed);
    pthread_mutex_unlock(&srv->res_mu);

    if (s->res.keys && s->res.keys->res == keys) {
        kl_res_release(keys); /* the same store: keep the pin */
        free(fresh);
    } else {
        fresh->res = keys;
        fresh->users = 1;
        kl_pin *old = s->res.keys;
        s->res.keys = fresh;
        if (old) {
            old->next = s->res.old_keys;
            s->res.old_keys = old;
            pin_drop(s, old); /* freed now unless jobs still use it */
        }
    }
    kl_res *old_tls = s->res.tls;
    s->res.tls = tls;
    /* docs/SECURITY.md "Revocation and expiry": other client CAs (or
     * CRLs) than before, so the open connections are verified again -
     * on this thread, from on_wake (kl_shard_recheck_trust) */
    if (old_tls && old_tls != tls &&
        !kl_tls_ctx_same_trust(old_tls->obj, tls->obj)) {
        s->res.trust_epoch++;
        s->res.trust_recheck = true;
    }
    kl_res_release(old_tls);
}

kl_pin *kl_pin_get(kl_shard *s)
{
    s->res.keys->users++;
    return s->res.keys;
}

void kl_pin_put(kl_shard *s, kl_pin *p)
{
    if (p)
        pin_drop(s, p);
}

void kl_shard_release_res(kl_shard *s)
{
    /* Only once no job is left: kl_shard_destroy runs after the pool
     * stopped and every job came back. */
    while (s->res.old_keys) {
        kl_pin *p = s->res.old_keys;
        s->res.old_keys = p->next;
        kl_res_release(p->res);
        free(p);
    }
    if (s->res.keys) {
        kl_res_release(s->res.keys->res);
        free(s->res.keys);
        s->res.keys = NULL;
    }
    kl_res_release(s->res.tls);
    s->res.tls = NULL;
}

void kl_res_free_keystore(void *obj)
{
    kl_keystore_free(obj);
}

void kl_res_free_tls(void *obj)
{
    kl_tls_ctx_free(obj);
}

kl_status kl_server_swap(kl_server *srv, kl_keystore *keys, kl_tls_ctx *tls)
{
    kl_res *k = keys ? kl_res_new(keys, kl_res_free_keystore) : NULL;
    kl_res *t = tls ? kl_res_new(tls, kl_res_free_tls) : NULL;
    if ((keys && !k) || (tls && !t)) {
        /* the caller still owns what was not taken */
        if (k)
            k->free_fn = NULL;
        if (t)
            t->free_fn = NULL;
        kl_res_release(k);
        kl_res_release(t);
        return KL_E_NOMEM;
    }
    pthread_mutex_lock(&srv->res_mu);
    kl_res *old_k = NULL, *old_t = NULL;
    if (k) {
        old_k = srv->keys_res;
        srv->keys_res = k;
    }
    if (t) {
        old_t = srv->tls_res;
        srv->tls_res = t;
    }
    atomic_fetch_add_explicit(&srv->gen, 1, memory_order_release);
    pthread_mutex_unlock(&srv->res_mu);
    kl_res_release(old_k);
    kl_res_release(old_t);
    /* Idle shards switch now and drop what they held. */
    for (int i = 0; i < srv->nshards; i++)
        kl_loop_wake(srv->shards[i].ev.loop);
    return KL_OK;
}

uint64_t kl_server_generation(const kl_server *srv)
{
    return atomic_load_explicit(&((kl_server *)srv)->gen, memory_order_relaxed);
}
