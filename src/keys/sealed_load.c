/* SPDX-License-Identifier: Apache-2.0 */
/* Sealed key files in the key store (docs/SEALING.md "keylessd and
 * sealed keys"): a file wrapped to this server's sealing key is opened at
 * load (start, reload, watch) and its key indexed like a key file's; a
 * file for other servers is recorded as held elsewhere, which is not an
 * error; a file that does not parse or does not open although wrapped to
 * this server is refused, named and counted. Plaintext exists only while
 * the key is decoded (wiped by seal/) and then inside the EVP_PKEY, which
 * the store frees (and OpenSSL wipes) as it does every key. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>

#include "core/log.h"
#include "keys/store.h"
#include "seal/sealed.h"

static _Atomic uint64_t sealed_refused;

uint64_t kl_keys_sealed_refused_total(void)
{
    return atomic_load(&sealed_refused);
}

/* Refuses the file: one report line naming it, one count. */
__attribute__((format(printf, 3, 4))) static kl_status
refuse(kl_keystore *ks, const char *path, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    atomic_fetch_add(&sealed_refused, 1);
    kl_keystore_report(ks, KL_LOG_ERROR, path, "sealed key refused: %s", msg);
    return KL_E_KEY;
}

void kl_keystore_free_elsewhere(kl_keystore *ks)
{
    for (size_t i = 0; i < ks->n_elsewhere; i++)
        free(ks->elsewhere[i].policy);
    free(ks->elsewhere);
    kl_hmap_free(&ks->elsewhere_map);
    ks->elsewhere = NULL;
    ks->n_elsewhere = ks->cap_elsewhere = 0;
}

/* Held elsewhere: a list, and a map by SKI over it - a request for a key
 * this server does not hold asks it (the geo router forwards the key to
 * a server its policy admits: docs/SEALING.md "keylessd and sealed
 * keys"), so the lookup is one probe, not a walk. */
typedef struct elsewhere_slot {
    kl_hslot h; /* the SKI's first 8 bytes: SHA-1 output, uniform */
    uint8_t ski[KL_SKI_LEN];
    uint32_t i; /* in ks->elsewhere */
} elsewhere_slot;

static uint64_t ski_hash(const uint8_t ski[KL_SKI_LEN])
{
    uint64_t h;
    memcpy(&h, ski, sizeof h);
    return h;
}

static bool ski_eq(const void *slot, const void *key)
{
    return !memcmp(((const elsewhere_slot *)slot)->ski, key, KL_SKI_LEN);
}

static kl_status add_elsewhere(kl_keystore *ks, const kl_sealed *s,
                               const char *path, const char *why)
{
    if (kl_keystore_held_elsewhere(ks, s->ski))
        return KL_OK; /* two files for one key elsewhere: one record */
    if (ks->n_elsewhere == ks->cap_elsewhere) {
        size_t nc = ks->cap_elsewhere ? ks->cap_elsewhere * 2 : 8;
        kl_elsewhere *nv = realloc(ks->elsewhere, nc * sizeof *nv);
        KL_ENSURE(nv != NULL, KL_E_NOMEM);
        ks->elsewhere = nv;
        ks->cap_elsewhere = nc;
    }
    if (!ks->n_elsewhere)
        kl_hmap_init(&ks->elsewhere_map, sizeof(elsewhere_slot));
    KL_GUARD(kl_hmap_reserve(&ks->elsewhere_map, ks->n_elsewhere + 1));
    kl_elsewhere *e = &ks->elsewhere[ks->n_elsewhere];
    KL_ENSURE((e->policy = strdup(s->policy_text)) != NULL, KL_E_NOMEM);
    memcpy(e->ski, s->ski, KL_SKI_LEN);
    bool found;
    elsewhere_slot *slot = kl_hmap_put_h(&ks->elsewhere_map, ski_hash(s->ski),
                                         ski_eq, s->ski, &found);
    if (!slot) { /* reserved above: cannot happen */
        free(e->policy);
        return KL_E_NOMEM;
    }
    memcpy(slot->ski, s->ski, KL_SKI_LEN);
    slot->i = (uint32_t)ks->n_elsewhere;
    ks->n_elsewhere++;
    char hex[2 * KL_SKI_LEN + 1];
    kl_ski_hex(s->ski, hex);
    kl_keystore_report(ks, KL_LOG_INFO, path,
                       "sealed key %s held elsewhere (%s; policy: %s)", hex,
                       why, s->policy_text);
    return KL_OK;
}

const char *kl_keystore_held_elsewhere(const kl_keystore *ks,
                                       const uint8_t ski[KL_SKI_LEN])
{
    if (!ks || !ks->n_elsewhere)
        return NULL;
    const elsewhere_slot *slot =
        kl_hmap_get_h(&ks->elsewhere_map, ski_hash(ski), ski_eq, ski);
    return slot ? ks->elsewhere[slot->i].policy : NULL;
}

size_t kl_keystore_held_elsewhere_count(const kl_keystore *ks)
{
    return ks ? ks->n_elsewhere : 0;
}

const char *kl_keystore_elsewhere_policy(const kl_keystore *ks, size_t i)
{
    return ks && i < ks->n_elsewhere ? ks->elsewhere[i].policy : NULL;
}

/* The plaintext through the key file decoder (the same formats, types,
 * sizes and pair check as a key file, with its cached contexts), its SKI
 * checked against the file's - which the parser checked against the
 * file's public key - then indexed. */
static kl_status insert_opened(kl_keystore *ks, const kl_sealed *s,
                               const uint8_t *der, size_t len, const char *path)
{
    kl_key_info info;
    char why[KL_KEY_WHY_LEN];
    uint8_t ski[KL_SKI_LEN];
    EVP_PKEY *key = NULL;
    if (!ks->decoder && !(ks->decoder = kl_key_decoder_new()))
        return KL_E_NOMEM;
    kl_status st = kl_key_decode_buffer(ks->decoder, der, len, &key, &info, why,
                                        sizeof why);
    if (st == KL_E_NOMEM)
        return st;
    if (st != KL_OK)
        return refuse(ks, path, "the key inside: %s", why);
    if (kl_ski_from_pkey(key, ski) != KL_OK ||
        memcmp(ski, s->ski, KL_SKI_LEN) != 0) {
        EVP_PKEY_free(key);
        return refuse(ks, path,
                      "the key inside is not the SKI the file "
                      "names");
    }
    /* the SKI just computed, not a second time (~4 us a key) */
    return kl_keystore_insert_ski(ks, key, NULL, &info, path, ski);
}

static kl_status open_parsed(kl_keystore *ks, const kl_sealed *s,
                             const char *path)
{
    const kl_keystore_opts *o = &ks->opts;
    size_t idx = 0;
    if (!o->sealing_key)
        return add_elsewhere(ks, s, path, "no sealing_key configured here");
    if (kl_sealed_find(s, o->sealing_key, &idx) != KL_OK)
        return add_elsewhere(ks, s, path, "not wrapped to this server");
    if (o->n_sealing_attrs &&
        !kl_policy_eval(s->policy, o->sealing_attrs, o->n_sealing_attrs))
        return add_elsewhere(ks, s, path,
                             "this server's sealing_attributes do not "
                             "satisfy its policy");
    uint8_t *der = NULL;
    size_t len = 0;
    char err[512];
    kl_status st =
        kl_sealed_open_der(s, idx, o->sealing_key, &der, &len, err, sizeof err);
    if (st == KL_E_NOMEM)
        return st;
    if (st != KL_OK)
        return refuse(ks, path, "%s", err);
    st = insert_opened(ks, s, der, len, path);
    OPENSSL_clear_free(der, len);
    return st;
}

kl_status kl_keystore_add_sealed(kl_keystore *ks, const char *path)
{
    KL_ENSURE(ks != NULL && path != NULL, KL_E_KEY);
    uint8_t *buf = NULL;
    size_t len = 0;
    KL_GUARD(kl_keystore_read_file(ks, path, true, &buf, &len));
    kl_sealed *s = NULL;
    char err[512];
    kl_status st = kl_sealed_parse(buf, len, &s, err, sizeof err);
    OPENSSL_clear_free(buf, len + 1);
    if (st == KL_E_NOMEM)
        return st;
    if (st != KL_OK)
        return refuse(ks, path, "not a valid sealed key file (%s)", err);
    st = open_parsed(ks, s, path);
    kl_sealed_free(s);
    ERR_clear_error();
    return st;
}
