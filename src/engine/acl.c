/* SPDX-License-Identifier: Apache-2.0 */
/* Access lists (see acl.h). A connection's client is matched against the
 * rules once, after its handshake (a bit set of rules); each key request
 * then only scans the keys of those rules.
 *
 * Reload without a lock per request: the lists in effect are one
 * immutable rule set behind an atomic pointer. A connection's grant holds
 * a reference to the set it was matched against, so a request compares
 * that with the pointer (one load) and scans its own set, which cannot be
 * freed under it. Only a match (after a handshake, or the first request
 * after a reload) takes the holder's mutex, to take a reference on the
 * current set without racing a replace that drops the last one. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "engine/acl.h"

#define FP_LEN 32

typedef enum { C_ANY, C_CN, C_SAN, C_FP } client_kind;
typedef enum { K_ANY, K_SKI, K_DIR, K_FILE } key_kind;

typedef struct acl_client {
    client_kind kind;
    char *text;  /* C_CN, C_SAN */
    size_t tlen; /* strlen(text): names are compared in full length */
    uint8_t fp[FP_LEN];
} acl_client;

typedef struct acl_key {
    key_kind kind;
    uint8_t ski[KL_SKI_LEN];
    char *path; /* K_DIR (without trailing '/'), K_FILE */
    size_t plen;
} acl_key;

typedef struct acl_rule {
    acl_client *clients;
    size_t nclients;
    acl_key *keys;
    size_t nkeys;
} acl_rule;

struct kl_acl_set {
    atomic_uint refs; /* the holder's, plus one per grant */
    acl_rule rules[KL_ACL_MAX_RULES];
    size_t nrules;
};

struct kl_acl {
    pthread_mutex_t mu;        /* serialises taking references on cur */
    _Atomic(kl_acl_set *) cur; /* one reference held by the holder */
};

static void set_free(kl_acl_set *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->nrules; i++) {
        acl_rule *r = &a->rules[i];
        for (size_t j = 0; j < r->nclients; j++)
            free(r->clients[j].text);
        for (size_t j = 0; j < r->nkeys; j++)
            free(r->keys[j].path);
        free(r->clients);
        free(r->keys);
    }
    free(a);
}

static void set_release(kl_acl_set *a)
{
    if (a && atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) == 1)
        set_free(a);
}

static kl_acl *fail(kl_acl_set *a, char *err, size_t errlen, const char *fmt,
                    ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    set_free(a);
    return NULL;
}

void kl_acl_free(kl_acl *a)
{
    if (!a)
        return;
    set_release(atomic_load_explicit(&a->cur, memory_order_relaxed));
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* A reference on the set in effect. */
static kl_acl_set *current(kl_acl *a)
{
    pthread_mutex_lock(&a->mu);
    kl_acl_set *set = atomic_load_explicit(&a->cur, memory_order_acquire);
    atomic_fetch_add_explicit(&set->refs, 1, memory_order_relaxed);
    pthread_mutex_unlock(&a->mu);
    return set;
}

size_t kl_acl_count(const kl_acl *a)
{
    if (!a)
        return 0;
    kl_acl_set *set = current((kl_acl *)a);
    size_t n = set->nrules;
    set_release(set);
    return n;
}

void kl_acl_replace(kl_acl *a, kl_acl *from)
{
    kl_acl_set *set = atomic_load_explicit(&from->cur, memory_order_relaxed);
    atomic_store_explicit(&from->cur, NULL, memory_order_relaxed);
    kl_acl_free(from);
    pthread_mutex_lock(&a->mu);
    kl_acl_set *old =
        atomic_exchange_explicit(&a->cur, set, memory_order_acq_rel);
    pthread_mutex_unlock(&a->mu);
    set_release(old);
}

/* Hex with optional ':' separators into exactly n bytes. */
static bool parse_hex(const char *s, uint8_t *out, size_t n)
{
    size_t got = 0;
    int half = -1;
    for (; *s; s++) {
        if (*s == ':')
            continue;
        if (!isxdigit((unsigned char)*s) || got == n)
            return false;
        int v = isdigit((unsigned char)*s)
                    ? *s - '0'
                    : tolower((unsigned char)*s) - 'a' + 10;
        if (half < 0) {
            half = v;
        } else {
            out[got++] = (uint8_t)(half << 4 | v);
            half = -1;
        }
    }
    return got == n && half < 0;
}

/* "kind:value" -> the value, or NULL when s does not start with kind. */
static const char *after(const char *s, const char *kind)
{
    size_t n = strlen(kind);
    return strncmp(s, kind, n) == 0 && s[n] == ':' ? s + n + 1 : NULL;
}

static bool parse_client(const char *s, acl_client *c)
{
    const char *v;
    memset(c, 0, sizeof *c);
    if (strcmp(s, "*") == 0) {
        c->kind = C_ANY;
        return true;
    }
    if ((v = after(s, "fp"))) {
        c->kind = C_FP;
        return parse_hex(v, c->fp, FP_LEN);
    }
    if ((v = after(s, "cn")))
        c->kind = C_CN;
    else if ((v = after(s, "san")))
        c->kind = C_SAN;
    else
        return false;
    if (!*v)
        return false;
    c->text = strdup(v);
    c->tlen = strlen(v);
    return c->text != NULL;
}

static bool parse_key(const char *s, acl_key *k)
{
    const char *v;
    memset(k, 0, sizeof *k);
    if (strcmp(s, "*") == 0) {
        k->kind = K_ANY;
        return true;
    }
    if ((v = after(s, "ski"))) {
        k->kind = K_SKI;
        return parse_hex(v, k->ski, KL_SKI_LEN);
    }
    if ((v = after(s, "dir")))
        k->kind = K_DIR;
    else if ((v = after(s, "file")))
        k->kind = K_FILE;
    else
        return false;
    size_t n = strlen(v);
    while (k->kind == K_DIR && n > 1 && v[n - 1] == '/')
        n--;
    if (n == 0)
        return false;
    k->path = strndup(v, n);
    k->plen = n;
    return k->path != NULL;
}

#define LINE(node) ((unsigned long)(node)->start_mark.line + 1)

/* One list of "kind:value" scalars into rule->clients or rule->keys. */
static const char *parse_list(yaml_document_t *doc, yaml_node_t *list,
                              acl_rule *r, bool clients, unsigned long *line)
{
    *line = LINE(list);
    if (list->type != YAML_SEQUENCE_NODE)
        return "must be a list, e.g. [cn:edge-1]";
    size_t n = (size_t)(list->data.sequence.items.top -
                        list->data.sequence.items.start);
    if (n == 0)
        return "is empty";
    if (clients ? r->clients != NULL : r->keys != NULL)
        return "appears twice in one rule";
    void *arr = calloc(n, clients ? sizeof(acl_client) : sizeof(acl_key));
    if (!arr)
        return "out of memory";
    if (clients)
        r->clients = arr;
    else
        r->keys = arr;
    for (yaml_node_item_t *it = list->data.sequence.items.start;
         it < list->data.sequence.items.top; it++) {
        yaml_node_t *v = yaml_document_get_node(doc, *it);
        *line = LINE(v);
        if (v->type != YAML_SCALAR_NODE)
            return "entries must be text like cn:NAME or ski:HEX";
        const char *s = (const char *)v->data.scalar.value;
        /* YAML can write a NUL ("\0"); a C string would end there */
        if (strlen(s) != v->data.scalar.length)
            return "an entry holds a NUL byte (a certificate name with one "
                   "is refused at the handshake, docs/SECURITY.md)";
        bool ok = clients ? parse_client(s, &r->clients[r->nclients])
                          : parse_key(s, &r->keys[r->nkeys]);
        if (clients)
            r->nclients += ok;
        else
            r->nkeys += ok;
        if (!ok)
            return clients ? "a client is \"*\", cn:NAME, san:NAME or fp:HEX "
                             "(SHA-256, 64 hex digits)"
                           : "a key is \"*\", ski:HEX (40 hex digits), "
                             "dir:PATH or file:PATH";
    }
    return NULL;
}

static const char *parse_rule(yaml_document_t *doc, yaml_node_t *n, acl_rule *r,
                              unsigned long *line)
{
    *line = LINE(n);
    if (n->type != YAML_MAPPING_NODE)
        return "each rule must be a map with clients: and keys:";
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start;
         p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        *line = LINE(k);
        const char *name = k->type == YAML_SCALAR_NODE
                               ? (const char *)k->data.scalar.value
                               : "";
        const char *why;
        if (strcmp(name, "clients") == 0)
            why = parse_list(doc, v, r, true, line);
        else if (strcmp(name, "keys") == 0)
            why = parse_list(doc, v, r, false, line);
        else
            why = "unknown member (a rule has clients: and keys:)";
        if (why)
            return why;
    }
    *line = LINE(n);
    if (!r->clients || !r->keys)
        return "a rule needs both clients: and keys:";
    return NULL;
}

kl_acl *kl_acl_parse(const char *name, const uint8_t *text, size_t len,
                     char *err, size_t errlen)
{
    kl_acl_set *a = calloc(1, sizeof *a);
    if (!a)
        return fail(NULL, err, errlen, "%s: out of memory", name);
    atomic_init(&a->refs, 1);
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return fail(a, err, errlen, "%s: out of memory", name);
    yaml_parser_set_input_string(&parser, text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        unsigned long line = (unsigned long)parser.problem_mark.line + 1;
        char what[128];
        snprintf(what, sizeof what, "%s",
                 parser.problem ? parser.problem : "not YAML");
        yaml_parser_delete(&parser);
        return fail(a, err, errlen, "%s:%lu: %s", name, line, what);
    }
    yaml_parser_delete(&parser);
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    const char *why = NULL;
    unsigned long line = 1;
    if (!root || root->type != YAML_SEQUENCE_NODE) {
        why = "the access file must be a list of rules "
              "(- clients: [...]\\n  keys: [...])";
        if (root)
            line = LINE(root);
    } else {
        for (yaml_node_item_t *it = root->data.sequence.items.start;
             !why && it < root->data.sequence.items.top; it++) {
            if (a->nrules == KL_ACL_MAX_RULES) {
                why = "more than 64 rules";
                break;
            }
            why = parse_rule(&doc, yaml_document_get_node(&doc, *it),
                             &a->rules[a->nrules++], &line);
        }
    }
    yaml_document_delete(&doc);
    if (why)
        return fail(a, err, errlen, "%s:%lu: %s", name, line, why);
    kl_acl *h = calloc(1, sizeof *h);
    if (!h || pthread_mutex_init(&h->mu, NULL) != 0) {
        free(h);
        return fail(a, err, errlen, "%s: out of memory", name);
    }
    atomic_init(&h->cur, a);
    return h;
}

kl_acl *kl_acl_load(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open the access file: %s", path,
                 strerror(errno));
        return NULL;
    }
    uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    bool big = n == sizeof buf && fgetc(f) != EOF;
    fclose(f);
    if (big) {
        snprintf(err, errlen, "%s: larger than 64 KiB", path);
        return NULL;
    }
    return kl_acl_parse(path, buf, n, err, errlen);
}

/* ---- matching ---- */

typedef struct identity {
    unsigned char *cn; /* the first subject CN as UTF-8, or NULL */
    int cnlen;
    uint8_t fp[FP_LEN];
    GENERAL_NAMES *sans;
} identity;

static bool san_is(const GENERAL_NAME *g, const char *want, size_t want_len)
{
    int type;
    const ASN1_STRING *s = GENERAL_NAME_get0_value(g, &type);
    if (type == GEN_DNS || type == GEN_EMAIL || type == GEN_URI) {
        size_t n = (size_t)ASN1_STRING_length(s);
        return n == want_len && memcmp(ASN1_STRING_get0_data(s), want, n) == 0;
    }
    if (type == GEN_IPADD) {
        char text[INET6_ADDRSTRLEN] = "";
        int n = ASN1_STRING_length(s);
        const unsigned char *d = ASN1_STRING_get0_data(s);
        if (n == 4)
            inet_ntop(AF_INET, d, text, sizeof text);
        else if (n == 16)
            inet_ntop(AF_INET6, d, text, sizeof text);
        return text[0] && strcmp(text, want) == 0;
    }
    return false;
}

static bool client_matches(const acl_client *c, const identity *id)
{
    switch (c->kind) {
    case C_ANY: return true;
    case C_CN:
        /* in full: "edge-1\0.attacker" is not edge-1 (docs/SECURITY.md) */
        return id->cn && (size_t)id->cnlen == c->tlen &&
               memcmp(id->cn, c->text, c->tlen) == 0;
    case C_FP: return memcmp(id->fp, c->fp, FP_LEN) == 0;
    case C_SAN:
        for (int i = 0; id->sans && i < sk_GENERAL_NAME_num(id->sans); i++)
            if (san_is(sk_GENERAL_NAME_value(id->sans, i), c->text, c->tlen))
                return true;
        return false;
    }
    return false;
}

static uint64_t match_cert(const kl_acl_set *a, const unsigned char *der,
                           size_t len)
{
    if (!der || !len)
        return 0;
    const unsigned char *p = der;
    X509 *x = d2i_X509(NULL, &p, (long)len);
    if (!x)
        return 0;
    identity id;
    memset(&id, 0, sizeof id);
    X509_NAME *subj = X509_get_subject_name(x);
    int cn = X509_NAME_get_index_by_NID(subj, NID_commonName, -1);
    id.cnlen = cn < 0 ? -1
                      : ASN1_STRING_to_UTF8(&id.cn,
                                            X509_NAME_ENTRY_get_data(
                                                X509_NAME_get_entry(subj, cn)));
    if (id.cnlen < 0) {
        ERR_clear_error(); /* the shard's queue: tls.c reads it */
        OPENSSL_free(id.cn);
        id.cn = NULL;
    }
    unsigned int fplen = 0;
    if (!EVP_Digest(der, len, id.fp, &fplen, EVP_sha256(), NULL))
        memset(id.fp, 0, sizeof id.fp);
    id.sans = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    uint64_t rules = 0;
    for (size_t i = 0; i < a->nrules; i++)
        for (size_t j = 0; j < a->rules[i].nclients; j++)
            if (client_matches(&a->rules[i].clients[j], &id)) {
                rules |= 1ull << i;
                break;
            }
    GENERAL_NAMES_free(id.sans);
    OPENSSL_free(id.cn);
    X509_free(x);
    return rules;
}

uint64_t kl_acl_match_cert(kl_acl *a, const unsigned char *der, size_t len)
{
    if (!a)
        return 0;
    kl_acl_set *set = current(a);
    uint64_t rules = match_cert(set, der, len);
    set_release(set);
    return rules;
}

void kl_acl_grant_conn(kl_acl *a, kl_acl_grant *g, const kl_tls_conn *tls)
{
    if (!a)
        return;
    kl_acl_grant_release(g);
    g->set = current(a);
    unsigned char *der = NULL;
    size_t n = tls ? kl_tls_peer_cert_der(tls, &der) : 0;
    g->rules = match_cert(g->set, der, n);
    free(der);
}

void kl_acl_grant_release(kl_acl_grant *g)
{
    set_release(g->set);
    g->set = NULL;
    g->rules = 0;
}

/* A rule's key entry against a key known by its SKI and, when it is held
 * here, the file it was loaded from (NULL: held elsewhere, protocol P7's
 * SKI is all there is - `dir:` and `file:` entries cannot name it). */
static bool key_matches(const acl_key *k, const uint8_t ski[KL_SKI_LEN],
                        const char *path)
{
    switch (k->kind) {
    case K_ANY: return true;
    case K_SKI: return memcmp(ski, k->ski, KL_SKI_LEN) == 0;
    case K_FILE: return path && strcmp(path, k->path) == 0;
    case K_DIR:
        return path && strncmp(path, k->path, k->plen) == 0 &&
               (path[k->plen] == '/' || k->path[k->plen - 1] == '/');
    }
    return false;
}

static bool allows(kl_acl *a, kl_acl_grant *g, const kl_tls_conn *tls,
                   const uint8_t ski[KL_SKI_LEN], const char *path)
{
    if (!a)
        return true;
    /* A reload replaced the lists: this client's rules are looked up in
     * the new ones (once per connection and reload). */
    if (g->set != atomic_load_explicit(&a->cur, memory_order_acquire))
        kl_acl_grant_conn(a, g, tls);
    const kl_acl_set *set = g->set;
    uint64_t rules = g->rules;
    for (size_t i = 0; rules && i < set->nrules; i++, rules >>= 1) {
        if (!(rules & 1))
            continue;
        const acl_rule *r = &set->rules[i];
        for (size_t j = 0; j < r->nkeys; j++)
            if (key_matches(&r->keys[j], ski, path))
                return true;
    }
    return false;
}

bool kl_acl_allows(kl_acl *a, kl_acl_grant *g, const kl_tls_conn *tls,
                   const kl_key *key)
{
    if (!a)
        return true;
    return allows(a, g, tls, kl_key_ski(key), kl_key_path(key));
}

bool kl_acl_allows_ski(kl_acl *a, kl_acl_grant *g, const kl_tls_conn *tls,
                       const uint8_t ski[KL_SKI_LEN])
{
    return allows(a, g, tls, ski, NULL);
}
