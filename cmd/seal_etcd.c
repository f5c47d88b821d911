/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-seal's recipients from the fleet directory (seal_etcd.h). */
#include "seal_etcd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>

#include "fleet/etcd.h"
#include "fleet/record.h"
#include "seal/hpke.h"

/* Appends the record's sealing key and attributes as a node; false (and
 * a line on stderr) when a sealed file could not carry it. */
static bool add_node(kl_fleetfile *f, const kl_fleet_server *s)
{
    if (!s->seal_kem) {
        fprintf(stderr,
                "keyless-seal: %s: publishes no sealing key (no "
                "sealing_key set): not a recipient\n",
                s->name);
        return true;
    }
    EVP_PKEY *pk = NULL;
    if (strlen(s->name) > KL_SEALED_MAX_NAME ||
        kl_hpke_public_key(s->seal_kem, s->seal_pk, s->seal_pk_len, &pk) !=
            KL_OK) {
        ERR_clear_error();
        fprintf(stderr,
                "keyless-seal: %s: its record's sealing key is not a valid "
                "public key: not a recipient\n",
                s->name);
        return true;
    }
    EVP_PKEY_free(pk);
    kl_fleetfile_node *nd = &f->nodes[f->n_nodes];
    memset(nd, 0, sizeof *nd);
    snprintf(nd->name, sizeof nd->name, "%s", s->name);
    nd->kem = s->seal_kem;
    memcpy(nd->pk, s->seal_pk, s->seal_pk_len);
    nd->pk_len = s->seal_pk_len;
    nd->attrs =
        calloc(s->n_seal_attrs ? s->n_seal_attrs : 1, sizeof *nd->attrs);
    if (!nd->attrs)
        return false;
    f->n_nodes++; /* freed with the file from here on */
    for (size_t i = 0; i < s->n_seal_attrs; i++) {
        char *n = strdup(s->seal_attrs[i].name);
        char *v = strdup(s->seal_attrs[i].value);
        nd->attrs[nd->n_attrs++] = (kl_policy_attr){n, v};
        if (!n || !v)
            return false;
    }
    return true;
}

/* The records of one page into f. */
static int add_page(kl_fleetfile *f, const char *prefix, const kl_etcd_page *pg,
                    size_t *cap, char *err, size_t errlen)
{
    for (size_t i = 0; i < pg->n; i++) {
        const kl_etcd_kv *kv = &pg->kvs[i];
        char name[KL_FLEET_NAME_MAX + 1];
        if (kl_fleet_key_parse(prefix, kv->key, kv->key_len, name) !=
            KL_FLEET_KEY_SERVER)
            continue;
        kl_fleet_server s;
        char why[256] = "";
        if (kl_fleet_server_parse(kv->value, kv->value_len, &s, why,
                                  sizeof why) != KL_OK) {
            fprintf(stderr, "keyless-seal: %s: record skipped: %s\n", name,
                    why);
            continue;
        }
        if (f->n_nodes == *cap) {
            size_t nc = *cap ? *cap * 2 : 16;
            void *p = realloc(f->nodes, nc * sizeof *f->nodes);
            if (!p) {
                kl_fleet_server_clear(&s);
                snprintf(err, errlen, "out of memory");
                return 1;
            }
            f->nodes = p;
            *cap = nc;
        }
        bool ok = add_node(f, &s);
        kl_fleet_server_clear(&s);
        if (!ok) {
            snprintf(err, errlen, "out of memory");
            return 1;
        }
    }
    return 0;
}

int seal_fleet_from_etcd(const seal_etcd_opts *o, kl_fleetfile **out, char *err,
                         size_t errlen)
{
    *out = NULL;
    const char *prefix = o->prefix ? o->prefix : "/keyless/";
    char urls[2048];
    const char *list[KL_ETCD_MAX_ENDPOINTS];
    size_t n = 0;
    snprintf(urls, sizeof urls, "%s", o->urls);
    char *save = NULL;
    for (char *t = strtok_r(urls, ", ", &save); t;
         t = strtok_r(NULL, ", ", &save)) {
        if (n == KL_ETCD_MAX_ENDPOINTS) {
            snprintf(err, errlen, "--etcd: more than %d URLs",
                     KL_ETCD_MAX_ENDPOINTS);
            return 2;
        }
        list[n++] = t;
    }
    kl_etcd_opts eo = {.endpoints = list,
                       .n_endpoints = n,
                       .ca_file = o->ca,
                       .cert_file = o->cert,
                       .key_file = o->key,
                       .user = o->user,
                       .password_file = o->password_file};
    kl_etcd *c = NULL;
    char why[512] = "";
    if (!n || kl_etcd_new(&eo, &c, why, sizeof why) != KL_OK) {
        snprintf(err, errlen, "--etcd: %s", n ? why : "no URL");
        return 2;
    }
    char pfx[400];
    if (kl_fleet_key_server(prefix, "", pfx, sizeof pfx) != KL_OK ||
        !prefix[0] || prefix[strlen(prefix) - 1] != '/') {
        kl_etcd_free(c);
        snprintf(err, errlen, "--prefix \"%.200s\" must end with '/'", prefix);
        return 2;
    }
    kl_fleetfile *f = calloc(1, sizeof *f);
    int rc = f ? 0 : 1;
    size_t cap = 0;
    uint8_t *after = NULL;
    size_t after_len = 0;
    int64_t at = 0;
    while (rc == 0) { /* pages of one snapshot */
        kl_etcd_page pg = {0};
        kl_status st = kl_etcd_range(c, pfx, strlen(pfx), after, after_len, 500,
                                     at, &pg, why, sizeof why);
        free(after);
        after = NULL;
        if (st != KL_OK) {
            snprintf(err, errlen, "etcd: %s", why);
            rc = 1;
            break;
        }
        if (!at)
            at = pg.revision;
        rc = add_page(f, prefix, &pg, &cap, err, errlen);
        bool more = rc == 0 && pg.more && pg.n > 0;
        if (more) {
            after_len = pg.kvs[pg.n - 1].key_len;
            after = malloc(after_len);
            if (after)
                memcpy(after, pg.kvs[pg.n - 1].key, after_len);
            else
                rc = 1;
        }
        kl_etcd_page_clear(&pg);
        if (!more)
            break;
    }
    free(after);
    kl_etcd_free(c);
    if (rc != 0) {
        kl_fleetfile_free(f);
        if (!err[0])
            snprintf(err, errlen, "out of memory");
        return rc;
    }
    fprintf(stderr,
            "keyless-seal: fleet directory %s%s at revision %lld: %zu "
            "server(s) with a sealing key\n",
            o->urls, prefix, (long long)at, f->n_nodes);
    *out = f;
    return 0;
}
