/* SPDX-License-Identifier: Apache-2.0 */
/* The fleet file (seal/fleetfile.h, docs/SEALING.md "The fleet file"):
 * libyaml's document tree, walked with every field checked; the first
 * problem is reported with the file and line. */
#include "seal/fleetfile.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include <openssl/err.h>
#include <openssl/pem.h>

#include "core/suggest.h"

#define LINE(n) ((unsigned long)(n)->start_mark.line + 1)

typedef struct build {
    const char *path;
    yaml_document_t *doc;
    kl_fleetfile *f;
    char *err;
    size_t errlen;
} build;

__attribute__((format(printf, 3, 4))) static kl_status
fail(build *b, const yaml_node_t *n, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kl_errf(b->err, b->errlen, "%s:%lu: %s", b->path, n ? LINE(n) : 1, msg);
    return KL_E_CONFIG;
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value
                                            : NULL;
}

static yaml_node_t *node(build *b, int id)
{
    return yaml_document_get_node(b->doc, id);
}

#define FOR_PAIRS(p, m)                                                        \
    for (yaml_node_pair_t *p = (m)->data.mapping.pairs.start;                  \
         p < (m)->data.mapping.pairs.top; p++)
#define FOR_ITEMS(i, l)                                                        \
    for (yaml_node_item_t *i = (l)->data.sequence.items.start;                 \
         i < (l)->data.sequence.items.top; i++)

/* "unknown field 'x' in <where>; did you mean 'y'?" */
static kl_status unknown(build *b, yaml_node_t *k, const char *where,
                         const char *const *known)
{
    const char *w = scalar(k) ? scalar(k) : "?";
    kl_suggest sg;
    kl_suggest_init(&sg, w);
    for (size_t i = 0; known[i]; i++)
        kl_suggest_add(&sg, known[i]);
    const char *best = kl_suggest_best(&sg);
    if (best)
        return fail(b, k, "unknown field '%s' in %s; did you mean '%s'?", w,
                    where, best);
    return fail(b, k, "unknown field '%s' in %s", w, where);
}

static kl_status raw_key(const char *text, uint16_t *kem, uint8_t *pk,
                         size_t *pk_len, char *err, size_t errlen)
{
    uint8_t out[96];
    int n = 0, fin = 0;
    size_t len = strlen(text);
    EVP_ENCODE_CTX *c = EVP_ENCODE_CTX_new();
    KL_ENSURE(c != NULL, KL_E_NOMEM);
    EVP_DecodeInit(c);
    /* at most 96 output bytes: a longer text is no raw key of ours */
    bool ok = len <= 128 &&
              EVP_DecodeUpdate(c, out, &n, (const unsigned char *)text,
                               (int)len) >= 0 &&
              EVP_DecodeFinal(c, out + n, &fin) == 1;
    EVP_ENCODE_CTX_free(c);
    size_t got = ok ? (size_t)(n + fin) : 0;
    *kem = got == 32 ? KL_HPKE_KEM_X25519 : KL_HPKE_KEM_P256;
    EVP_PKEY *k = NULL;
    if (!ok || (got != 32 && got != 65) ||
        kl_hpke_public_key(*kem, out, got, &k) != KL_OK) {
        ERR_clear_error();
        kl_errf(err, errlen,
                "not a PEM public key, nor base64 of a raw X25519 key (32 "
                "bytes) or P-256 point (65 bytes, 04 || X || Y, on the "
                "curve)");
        return KL_E_CONFIG;
    }
    EVP_PKEY_free(k);
    memcpy(pk, out, got);
    *pk_len = got;
    return KL_OK;
}

kl_status kl_fleetfile_key(const char *text, uint16_t *kem,
                           uint8_t pk[KL_HPKE_MAX_ENC], size_t *pk_len,
                           char *err, size_t errlen)
{
    while (*text == ' ' || *text == '\n' || *text == '\t' || *text == '\r')
        text++;
    if (strncmp(text, "-----BEGIN", 10) != 0)
        return raw_key(text, kem, pk, pk_len, err, errlen);
    BIO *bio = BIO_new_mem_buf(text, -1);
    KL_ENSURE(bio != NULL, KL_E_NOMEM);
    EVP_PKEY *k = PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL);
    BIO_free(bio);
    ERR_clear_error();
    if (!k) {
        kl_errf(err, errlen,
                "not a PEM public key (-----BEGIN PUBLIC KEY-----, as "
                "keyless-seal keygen prints it)");
        return KL_E_CONFIG;
    }
    *kem = EVP_PKEY_is_a(k, "X25519") ? KL_HPKE_KEM_X25519 : KL_HPKE_KEM_P256;
    kl_status st = kl_hpke_public(*kem, k, pk, KL_HPKE_MAX_ENC, pk_len);
    EVP_PKEY_free(k);
    ERR_clear_error();
    if (st != KL_OK) {
        kl_errf(err, errlen,
                "a PEM public key of another type or curve: a sealing key "
                "is X25519 or P-256");
        return KL_E_CONFIG;
    }
    return KL_OK;
}

static kl_status add_attr(build *b, kl_fleetfile_node *nd, yaml_node_t *at,
                          const char *name, yaml_node_t *v)
{
    const char *val = scalar(v);
    if (!val || !kl_policy_value_ok(val, strlen(val)))
        return fail(b, v,
                    "attribute %s: '%s' is not a value a policy can name "
                    "(lower case letters, digits, . _ : -; at most %d "
                    "bytes)",
                    name, val ? val : "(not a scalar)", KL_POLICY_MAX_WORD);
    if (nd->n_attrs == KL_FLEETFILE_MAX_ATTRS)
        return fail(b, at, "more than %d attribute values on one node",
                    KL_FLEETFILE_MAX_ATTRS);
    kl_policy_attr *a = &nd->attrs[nd->n_attrs];
    a->name = strdup(name);
    a->value = strdup(val);
    KL_ENSURE(a->name && a->value, KL_E_NOMEM);
    nd->n_attrs++;
    return KL_OK;
}

static kl_status parse_attrs(build *b, kl_fleetfile_node *nd, yaml_node_t *m)
{
    if (m->type != YAML_MAPPING_NODE)
        return fail(b, m,
                    "attributes must be a map: {region: eu-west, tier: "
                    "[edge, core]}");
    nd->attrs = calloc(KL_FLEETFILE_MAX_ATTRS, sizeof *nd->attrs);
    KL_ENSURE(nd->attrs != NULL, KL_E_NOMEM);
    FOR_PAIRS(p, m)
    {
        yaml_node_t *k = node(b, p->key), *v = node(b, p->value);
        const char *name = scalar(k);
        if (!name || !kl_policy_name_ok(name, strlen(name)))
            return fail(b, k,
                        "'%s' is not an attribute name a policy can use "
                        "(a lower case letter, then letters, digits, _ -)",
                        name ? name : "(not a scalar)");
        if (v->type != YAML_SEQUENCE_NODE) {
            KL_GUARD(add_attr(b, nd, k, name, v));
            continue;
        }
        FOR_ITEMS(it, v)
        KL_GUARD(add_attr(b, nd, k, name, node(b, *it)));
    }
    return KL_OK;
}

static kl_status parse_revoked(build *b, kl_fleetfile_node *nd, yaml_node_t *v)
{
    const char *s = scalar(v);
    if (s && !strcmp(s, "true"))
        nd->revoked = true;
    else if (s && !strcmp(s, "false"))
        nd->revoked = false;
    else
        return fail(b, v, "revoked: '%s' is neither true nor false",
                    s ? s : "(not a scalar)");
    return KL_OK;
}

static kl_status parse_node(build *b, kl_fleetfile_node *nd, yaml_node_t *m,
                            bool escrow)
{
    static const char *const node_fields[] = {"name", "attributes",
                                              "sealing_key", "revoked", NULL};
    static const char *const escrow_fields[] = {"name", "sealing_key", NULL};
    const char *const *known = escrow ? escrow_fields : node_fields;
    const char *what = escrow ? "an escrow recipient" : "a node";
    if (m->type != YAML_MAPPING_NODE)
        return fail(b, m, "%s must be a map with name and sealing_key", what);
    nd->line = LINE(m);
    bool has_key = false;
    unsigned seen = 0;
    FOR_PAIRS(p, m)
    {
        yaml_node_t *k = node(b, p->key), *v = node(b, p->value);
        const char *f = scalar(k) ? scalar(k) : "";
        const char *s = scalar(v);
        char why[200];
        for (unsigned i = 0; known[i]; i++)
            if (!strcmp(f, known[i]) && (seen & (1u << i)))
                return fail(b, k, "'%s' appears twice in %s", f, what);
            else if (!strcmp(f, known[i]))
                seen |= 1u << i;
        if (!strcmp(f, "name")) {
            if (!s || !kl_sealed_name_ok(s, strlen(s)))
                return fail(b, v,
                            "name: '%s' is not 1..%d bytes of A-Z a-z 0-9 . "
                            "_ : -",
                            s ? s : "(not a scalar)", KL_SEALED_MAX_NAME);
            memcpy(nd->name, s, strlen(s) + 1);
        } else if (!strcmp(f, "sealing_key")) {
            if (!s || kl_fleetfile_key(s, &nd->kem, nd->pk, &nd->pk_len, why,
                                       sizeof why) != KL_OK)
                return fail(b, v, "sealing_key: %s",
                            s ? why : "must be a string");
            has_key = true;
        } else if (!strcmp(f, "attributes") && !escrow) {
            KL_GUARD(parse_attrs(b, nd, v));
        } else if (!strcmp(f, "revoked") && !escrow) {
            KL_GUARD(parse_revoked(b, nd, v));
        } else {
            return unknown(b, k, what, known);
        }
    }
    if (!nd->name[0] || !has_key)
        return fail(b, m, "%s needs a name and a sealing_key", what);
    return KL_OK;
}

/* No name and no key twice across nodes and escrow recipients: a sealed
 * file refuses both (seal/sealed.h), so the fleet does too, at its line. */
static kl_status unique(build *b, const kl_fleetfile_node *nd, yaml_node_t *at)
{
    const kl_fleetfile *f = b->f;
    for (size_t pass = 0; pass < 2; pass++) {
        const kl_fleetfile_node *v = pass ? f->escrow : f->nodes;
        size_t n = pass ? f->n_escrow : f->n_nodes;
        for (size_t i = 0; i < n; i++) {
            if (&v[i] == nd)
                continue;
            if (!strcmp(v[i].name, nd->name))
                return fail(b, at, "the name '%s' is used at line %lu too",
                            nd->name, v[i].line);
            if (v[i].kem == nd->kem && v[i].pk_len == nd->pk_len &&
                !memcmp(v[i].pk, nd->pk, nd->pk_len))
                return fail(b, at,
                            "'%s' has the sealing key of '%s' (line %lu); "
                            "each node has its own",
                            nd->name, v[i].name, v[i].line);
        }
    }
    return KL_OK;
}

static kl_status parse_list(build *b, yaml_node_t *l, bool escrow)
{
    const char *what = escrow ? "escrow" : "nodes";
    if (l->type != YAML_SEQUENCE_NODE)
        return fail(b, l, "%s must be a list of maps", what);
    size_t n =
        (size_t)(l->data.sequence.items.top - l->data.sequence.items.start);
    if (n > KL_SEALED_MAX_RECIPIENTS)
        return fail(b, l, "%zu entries in %s; at most %d", n, what,
                    KL_SEALED_MAX_RECIPIENTS);
    kl_fleetfile_node **v = escrow ? &b->f->escrow : &b->f->nodes;
    size_t *cnt = escrow ? &b->f->n_escrow : &b->f->n_nodes;
    if (*v)
        return fail(b, l, "%s appears twice", what);
    *v = calloc(n ? n : 1, sizeof **v);
    KL_ENSURE(*v != NULL, KL_E_NOMEM);
    FOR_ITEMS(it, l)
    {
        yaml_node_t *m = node(b, *it);
        kl_fleetfile_node *nd = &(*v)[(*cnt)++];
        KL_GUARD(parse_node(b, nd, m, escrow));
        KL_GUARD(unique(b, nd, m));
    }
    return KL_OK;
}

static kl_status parse_root(build *b, yaml_node_t *root)
{
    static const char *const known[] = {"nodes", "escrow", NULL};
    if (!root || root->type != YAML_MAPPING_NODE)
        return fail(b, root,
                    "a fleet file is a map with 'nodes' (and optionally "
                    "'escrow')");
    FOR_PAIRS(p, root)
    {
        yaml_node_t *k = node(b, p->key), *v = node(b, p->value);
        const char *f = scalar(k) ? scalar(k) : "";
        if (!strcmp(f, "nodes"))
            KL_GUARD(parse_list(b, v, false));
        else if (!strcmp(f, "escrow"))
            KL_GUARD(parse_list(b, v, true));
        else
            return unknown(b, k, "the fleet file", known);
    }
    if (!b->f->n_nodes)
        return fail(b, root, "no nodes: list the servers under 'nodes'");
    if (b->f->n_nodes + b->f->n_escrow > KL_SEALED_MAX_RECIPIENTS)
        return fail(b, root, "more than %d nodes and escrow recipients",
                    KL_SEALED_MAX_RECIPIENTS);
    return KL_OK;
}

kl_status kl_fleetfile_parse(const char *path, const uint8_t *text, size_t len,
                             kl_fleetfile **out, char *err, size_t errlen)
{
    *out = NULL;
    kl_fleetfile *f = calloc(1, sizeof *f);
    KL_ENSURE(f != NULL, KL_E_NOMEM);
    build b = {.path = path, .f = f, .err = err, .errlen = errlen};
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        free(f);
        return KL_E_NOMEM;
    }
    yaml_parser_set_input_string(&parser, text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        kl_errf(err, errlen,
                "%s:%lu: YAML syntax: %s; fix the indentation or quoting "
                "there",
                path, (unsigned long)parser.problem_mark.line + 1,
                parser.problem ? parser.problem : "invalid");
        yaml_parser_delete(&parser);
        free(f);
        return KL_E_CONFIG;
    }
    b.doc = &doc;
    kl_status st = parse_root(&b, yaml_document_get_root_node(&doc));
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (st != KL_OK) {
        if (st == KL_E_NOMEM)
            kl_errf(err, errlen, "%s: out of memory", path);
        kl_fleetfile_free(f);
        return st;
    }
    *out = f;
    return KL_OK;
}

kl_status kl_fleetfile_load(const char *path, kl_fleetfile **out, char *err,
                            size_t errlen)
{
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        kl_errf(err, errlen, "%s: cannot open the fleet file: %m", path);
        return KL_E_CONFIG;
    }
    size_t cap = 1u << 16, len = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - len, fp);
        if (len < cap)
            break;
        uint8_t *nb =
            cap < KL_FLEETFILE_MAX_SIZE ? realloc(buf, cap * 2) : NULL;
        if (!nb) {
            kl_errf(err, errlen, "%s: larger than %u MiB", path,
                    KL_FLEETFILE_MAX_SIZE >> 20);
            free(buf);
            fclose(fp);
            return KL_E_CONFIG;
        }
        buf = nb;
        cap *= 2;
    }
    fclose(fp);
    KL_ENSURE(buf != NULL, KL_E_NOMEM);
    kl_status st = kl_fleetfile_parse(path, buf, len, out, err, errlen);
    free(buf);
    return st;
}

static void free_nodes(kl_fleetfile_node *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        for (size_t j = 0; j < v[i].n_attrs; j++) {
            free((char *)v[i].attrs[j].name);
            free((char *)v[i].attrs[j].value);
        }
        free(v[i].attrs);
    }
    free(v);
}

void kl_fleetfile_free(kl_fleetfile *f)
{
    if (!f)
        return;
    free_nodes(f->nodes, f->n_nodes);
    free_nodes(f->escrow, f->n_escrow);
    free(f);
}

static kl_sealed_to to_of(const kl_fleetfile_node *nd, kl_sealed_kind kind)
{
    return (kl_sealed_to){kind, nd->name, nd->kem, nd->pk, nd->pk_len};
}

kl_status kl_fleetfile_select(const kl_fleetfile *f, const kl_policy *p,
                              kl_sealed_to **to, size_t *n_to, size_t *n_nodes)
{
    *to = NULL;
    *n_to = *n_nodes = 0;
    kl_sealed_to *v = calloc(f->n_nodes + f->n_escrow + 1, sizeof *v);
    KL_ENSURE(v != NULL, KL_E_NOMEM);
    size_t n = 0;
    for (size_t i = 0; i < f->n_nodes; i++) {
        const kl_fleetfile_node *nd = &f->nodes[i];
        if (!nd->revoked && kl_policy_eval(p, nd->attrs, nd->n_attrs))
            v[n++] = to_of(nd, KL_SEALED_NODE);
    }
    *n_nodes = n;
    if (!n) {
        free(v);
        return KL_E_NOT_FOUND;
    }
    for (size_t i = 0; i < f->n_escrow; i++)
        v[n++] = to_of(&f->escrow[i], KL_SEALED_ESCROW);
    *to = v;
    *n_to = n;
    return KL_OK;
}
