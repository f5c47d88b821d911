/* SPDX-License-Identifier: Apache-2.0 */
/* Sealing policies: a recursive-descent parser over a small lexer, a tree
 * that is canonical as parsed, a printer and an evaluator.
 * docs/DESIGN.md "Sealing policies (src/seal/policy.c)" is the
 * specification; seal/policy.h the summary. */
#include "seal/policy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum kind { K_OR, K_AND, K_NOT, K_EQ, K_NE, K_IN } kind;

/* OR and AND hold n >= 2 kids (a chain, flattened), NOT one kid; EQ and
 * NE one value, IN n >= 1 values, sorted and distinct. */
typedef struct node {
    kind k;
    size_t n;
    struct node **kids;
    char *attr;
    char **vals;
} node;

struct kl_policy {
    node *root;
};

/* ---- the lexer ----------------------------------------------------------- */

typedef enum tok_kind {
    T_END,
    T_WORD, /* a run of [A-Za-z0-9_.:-]: checked as a name or a value */
    T_AND,
    T_OR,
    T_NOT,
    T_IN,
    T_LP,
    T_RP,
    T_COMMA,
    T_EQ,
    T_NE,
    T_BANG,  /* '!' not followed by '=' */
    T_AMP,   /* '&' or '&&' */
    T_PIPE,  /* '|' or '||' */
    T_OTHER, /* any other byte */
} tok_kind;

typedef struct tok {
    tok_kind k;
    size_t pos, len;
} tok;

typedef struct parser {
    const char *s;
    size_t len, at;
    tok t; /* the current token */
    size_t terms;
    size_t err_pos;
    kl_status status;
    char *err;
    size_t errlen;
} parser;

static bool is_lower(char c)
{
    return c >= 'a' && c <= 'z';
}
static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}
static bool is_upper(char c)
{
    return c >= 'A' && c <= 'Z';
}

static bool name_char(char c)
{
    return is_lower(c) || is_digit(c) || c == '-' || c == '_';
}

static bool value_char(char c)
{
    return name_char(c) || c == '.' || c == ':';
}

/* What the lexer takes as one word: more than either charset, so that
 * "Region" or "eu/west" is reported whole as a bad name or value. */
static bool word_char(char c)
{
    return value_char(c) || is_upper(c);
}

static const char *const keywords[] = {"and", "or", "not", "in"};

/* Which keyword the word is, ignoring case; -1 for none. */
static int keyword_ci(const char *w, size_t len)
{
    for (size_t i = 0; i < 4; i++) {
        const char *k = keywords[i];
        size_t kl = strlen(k), j = 0;
        if (kl != len)
            continue;
        while (j < len && (w[j] | 0x20) == k[j])
            j++;
        if (j == len)
            return (int)i;
    }
    return -1;
}

static void next(parser *p)
{
    while (p->at < p->len && (p->s[p->at] == ' ' || p->s[p->at] == '\t' ||
                              p->s[p->at] == '\n' || p->s[p->at] == '\r'))
        p->at++;
    tok t = {T_END, p->at, 0};
    if (p->at >= p->len) {
        p->t = t;
        return;
    }
    const char *c = p->s + p->at;
    size_t left = p->len - p->at;
    t.len = 1;
    switch (*c) {
    case '(': t.k = T_LP; break;
    case ')': t.k = T_RP; break;
    case ',': t.k = T_COMMA; break;
    case '=': t.k = T_EQ; break;
    case '!':
        t.k = left > 1 && c[1] == '=' ? T_NE : T_BANG;
        t.len = t.k == T_NE ? 2 : 1;
        break;
    case '&':
    case '|':
        t.k = *c == '&' ? T_AMP : T_PIPE;
        t.len = left > 1 && c[1] == *c ? 2 : 1;
        break;
    default: {
        static const tok_kind kw[] = {T_AND, T_OR, T_NOT, T_IN};
        if (!word_char(*c)) {
            t.k = T_OTHER;
            break;
        }
        while (t.len < left && word_char(c[t.len]))
            t.len++;
        t.k = T_WORD;
        int k = keyword_ci(c, t.len);
        if (k >= 0 && memcmp(c, keywords[k], t.len) == 0)
            t.k = kw[k];
        break;
    }
    }
    p->at += t.len;
    p->t = t;
}

/* ---- errors -------------------------------------------------------------- */

__attribute__((format(printf, 4, 5))) static void
fail(parser *p, kl_status s, size_t pos, const char *fmt, ...)
{
    if (p->status != KL_OK)
        return; /* the first problem is the one reported */
    char msg[192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->status = s;
    p->err_pos = pos;
    kl_errf(p->err, p->errlen, "at %zu: %s", pos, msg);
}

/* A token as the message shows it: "the end", "'('", "'Region'"
 * (a long word cut to 32 bytes, a byte outside printable ASCII in hex). */
static void describe(const parser *p, const tok *t, char *out, size_t cap)
{
    if (t->k == T_END) {
        snprintf(out, cap, "the end");
        return;
    }
    unsigned char c = (unsigned char)p->s[t->pos];
    if (t->k == T_OTHER && (c < 0x21 || c > 0x7e)) {
        snprintf(out, cap, "byte 0x%02x", c);
        return;
    }
    int n = t->len > 32 ? 32 : (int)t->len;
    snprintf(out, cap, "'%.*s%s'", n, p->s + t->pos, t->len > 32 ? "..." : "");
}

/* The current token is not what the grammar wants here: say what was
 * expected, or - for an operator from another language, a keyword in
 * the wrong case - what to write instead. */
static void unexpected(parser *p, const char *expected)
{
    const tok *t = &p->t;
    const char *s = p->s + t->pos;
    int k;
    switch (t->k) {
    case T_BANG:
        fail(p, KL_E_BAD_VALUE, t->pos, "'!' is not an operator; write 'not'");
        return;
    case T_AMP:
        fail(p, KL_E_BAD_VALUE, t->pos,
             "'%.*s' is not an operator; write 'and'", (int)t->len, s);
        return;
    case T_PIPE:
        fail(p, KL_E_BAD_VALUE, t->pos, "'%.*s' is not an operator; write 'or'",
             (int)t->len, s);
        return;
    case T_WORD:
        k = keyword_ci(s, t->len);
        if (k >= 0) {
            fail(p, KL_E_BAD_VALUE, t->pos,
                 "'%.*s': keywords are lower case; write '%s'", (int)t->len, s,
                 keywords[k]);
            return;
        }
        break;
    default: break;
    }
    char found[48];
    describe(p, t, found, sizeof found);
    fail(p, KL_E_BAD_VALUE, t->pos, "expected %s, found %s", expected, found);
}

/* ---- the tree ------------------------------------------------------------ */

static void node_free(node *n)
{
    if (!n)
        return;
    if (n->kids)
        for (size_t i = 0; i < n->n; i++)
            node_free(n->kids[i]);
    if (n->vals)
        for (size_t i = 0; i < n->n; i++)
            free(n->vals[i]);
    free(n->kids);
    free(n->vals);
    free(n->attr);
    free(n);
}

static node *node_new(parser *p, kind k)
{
    node *n = calloc(1, sizeof *n);
    if (!n)
        fail(p, KL_E_NOMEM, p->t.pos, "out of memory");
    else
        n->k = k;
    return n;
}

static char *dup_tok(parser *p, const tok *t)
{
    char *s = malloc(t->len + 1);
    if (!s) {
        fail(p, KL_E_NOMEM, t->pos, "out of memory");
        return NULL;
    }
    memcpy(s, p->s + t->pos, t->len);
    s[t->len] = 0;
    return s;
}

/* Appends kid to a chain of kind k, splicing it in when it is a chain of
 * the same kind (a parenthesised "a and b" inside "x and (...)"): the
 * tree then has one shape per meaning, whatever the parentheses were. */
static bool chain_add(parser *p, node *chain, node *kid)
{
    size_t add = kid->k == chain->k ? kid->n : 1;
    node **kids = realloc(chain->kids, (chain->n + add) * sizeof *kids);
    if (!kids) {
        fail(p, KL_E_NOMEM, p->t.pos, "out of memory");
        node_free(kid);
        return false;
    }
    chain->kids = kids;
    if (kid->k == chain->k) {
        memcpy(kids + chain->n, kid->kids, kid->n * sizeof *kids);
        chain->n += kid->n;
        free(kid->kids);
        free(kid);
    } else {
        kids[chain->n++] = kid;
    }
    return true;
}

/* ---- the parser ---------------------------------------------------------- */

static node *parse_or(parser *p, unsigned depth);

/* The current token as a value (after '=', '!=' or in an 'in' list);
 * after_eq: right after a '=' token, where another '=' is a '=='. */
static char *take_value(parser *p, const char *after, bool after_eq)
{
    tok t = p->t;
    if (after_eq && t.k == T_EQ && p->s[t.pos - 1] == '=') {
        fail(p, KL_E_BAD_VALUE, t.pos - 1,
             "'==' is not an operator; write '='");
        return NULL;
    }
    if (t.k == T_AND || t.k == T_OR || t.k == T_NOT || t.k == T_IN) {
        fail(p, KL_E_BAD_VALUE, t.pos,
             "'%.*s' is a keyword and cannot be a value", (int)t.len,
             p->s + t.pos);
        return NULL;
    }
    if (t.k != T_WORD) {
        char want[40];
        snprintf(want, sizeof want, "a value %s", after);
        unexpected(p, want);
        return NULL;
    }
    if (!kl_policy_value_ok(p->s + t.pos, t.len)) {
        if (t.len > KL_POLICY_MAX_WORD) {
            fail(p, KL_E_TOO_LARGE, t.pos, "value longer than %d bytes",
                 KL_POLICY_MAX_WORD);
            return NULL;
        }
        fail(p, KL_E_BAD_VALUE, t.pos,
             "bad value '%.*s': values are lower-case letters, digits, '-', "
             "'_', '.' and ':'",
             t.len > 32 ? 32 : (int)t.len, p->s + t.pos);
        return NULL;
    }
    if (++p->terms > KL_POLICY_MAX_TERMS) {
        fail(p, KL_E_TOO_LARGE, t.pos, "more than %d values compared",
             KL_POLICY_MAX_TERMS);
        return NULL;
    }
    next(p);
    return dup_tok(p, &t);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "name in ( v, ... )" after the name and 'in'. */
static bool parse_list(parser *p, node *n)
{
    if (p->t.k != T_LP) {
        unexpected(p, "'(' after 'in'");
        return false;
    }
    next(p);
    const char *after = "in the 'in' list";
    for (;;) {
        char *v = take_value(p, after, false);
        if (!v)
            return false;
        char **vals = realloc(n->vals, (n->n + 1) * sizeof *vals);
        if (!vals) {
            free(v);
            fail(p, KL_E_NOMEM, p->t.pos, "out of memory");
            return false;
        }
        n->vals = vals;
        vals[n->n++] = v;
        if (p->t.k == T_RP)
            break;
        if (p->t.k != T_COMMA) {
            unexpected(p, "',' or ')' in the 'in' list");
            return false;
        }
        next(p);
        after = "after ','";
    }
    next(p);
    /* Sorted and distinct: the set's meaning, in one spelling. */
    qsort(n->vals, n->n, sizeof *n->vals, cmp_str);
    size_t w = 1;
    for (size_t i = 1; i < n->n; i++) {
        if (strcmp(n->vals[i], n->vals[w - 1]) == 0)
            free(n->vals[i]);
        else
            n->vals[w++] = n->vals[i];
    }
    n->n = w;
    return true;
}

static node *parse_comparison(parser *p)
{
    tok name = p->t;
    const char *s = p->s + name.pos;
    if (name.k != T_WORD) {
        if (name.k == T_AND || name.k == T_OR || name.k == T_IN)
            fail(p, KL_E_BAD_VALUE, name.pos,
                 "expected a comparison, '(' or 'not', found '%.*s'",
                 (int)name.len, s);
        else
            unexpected(p, "a comparison, '(' or 'not'");
        return NULL;
    }
    if (!kl_policy_name_ok(s, name.len)) {
        if (keyword_ci(s, name.len) >= 0) {
            unexpected(p, "");
        } else if (name.len > KL_POLICY_MAX_WORD) {
            fail(p, KL_E_TOO_LARGE, name.pos,
                 "attribute name longer than %d bytes", KL_POLICY_MAX_WORD);
        } else {
            fail(p, KL_E_BAD_VALUE, name.pos,
                 "bad attribute name '%.*s': names are lower-case letters, "
                 "digits, '-' and '_', starting with a letter",
                 name.len > 32 ? 32 : (int)name.len, s);
        }
        return NULL;
    }
    next(p);
    kind k;
    switch (p->t.k) {
    case T_EQ: k = K_EQ; break;
    case T_NE: k = K_NE; break;
    case T_IN: k = K_IN; break;
    default:
        unexpected(p, "'=', '!=' or 'in' after the attribute name");
        return NULL;
    }
    next(p);
    node *n = node_new(p, k);
    if (!n)
        return NULL;
    n->attr = dup_tok(p, &name);
    if (!n->attr) {
        node_free(n);
        return NULL;
    }
    if (k == K_IN) {
        if (!parse_list(p, n)) {
            node_free(n);
            return NULL;
        }
        return n;
    }
    n->vals = calloc(1, sizeof *n->vals);
    if (!n->vals) {
        fail(p, KL_E_NOMEM, p->t.pos, "out of memory");
        node_free(n);
        return NULL;
    }
    n->vals[0] =
        take_value(p, k == K_EQ ? "after '='" : "after '!='", k == K_EQ);
    if (!n->vals[0]) {
        node_free(n);
        return NULL;
    }
    n->n = 1;
    return n;
}

/* not-expr; depth counts the '(' and 'not' around it. */
static node *parse_not(parser *p, unsigned depth)
{
    if (p->t.k != T_NOT && p->t.k != T_LP)
        return parse_comparison(p);
    if (depth >= KL_POLICY_MAX_DEPTH) {
        fail(p, KL_E_TOO_LARGE, p->t.pos, "nested deeper than %d",
             KL_POLICY_MAX_DEPTH);
        return NULL;
    }
    if (p->t.k == T_NOT) {
        next(p);
        if (p->t.k == T_END || p->t.k == T_RP || p->t.k == T_AND ||
            p->t.k == T_OR) {
            unexpected(p, "a comparison, '(' or 'not' after 'not'");
            return NULL;
        }
        node *kid = parse_not(p, depth + 1);
        if (!kid)
            return NULL;
        node *n = node_new(p, K_NOT);
        if (n)
            n->kids = malloc(sizeof *n->kids);
        if (!n || !n->kids) {
            fail(p, KL_E_NOMEM, p->t.pos, "out of memory");
            node_free(n);
            node_free(kid);
            return NULL;
        }
        n->kids[0] = kid;
        n->n = 1;
        return n;
    }
    size_t open = p->t.pos;
    next(p);
    node *n = parse_or(p, depth + 1);
    if (!n)
        return NULL;
    if (p->t.k != T_RP) {
        if (p->t.k == T_END)
            fail(p, KL_E_BAD_VALUE, p->t.pos, "'(' at %zu is not closed", open);
        else
            unexpected(p, "'and', 'or' or ')'");
        node_free(n);
        return NULL;
    }
    next(p);
    return n;
}

/* A chain of operands of one operator; sub parses an operand. */
static node *parse_chain(parser *p, unsigned depth, kind k, tok_kind op,
                         node *(*sub)(parser *, unsigned))
{
    node *first = sub(p, depth);
    if (!first || p->t.k != op)
        return first;
    node *chain = node_new(p, k);
    if (!chain || !chain_add(p, chain, first)) {
        if (!chain)
            node_free(first);
        node_free(chain);
        return NULL;
    }
    while (p->t.k == op) {
        next(p);
        if (p->t.k == T_END || p->t.k == T_RP || p->t.k == T_AND ||
            p->t.k == T_OR) {
            unexpected(p, k == K_AND ? "a comparison, '(' or 'not' after 'and'"
                                     : "a comparison, '(' or 'not' after 'or'");
            node_free(chain);
            return NULL;
        }
        node *kid = sub(p, depth);
        if (!kid || !chain_add(p, chain, kid)) {
            node_free(chain);
            return NULL;
        }
    }
    return chain;
}

static node *parse_and(parser *p, unsigned depth)
{
    return parse_chain(p, depth, K_AND, T_AND, parse_not);
}

static node *parse_or(parser *p, unsigned depth)
{
    return parse_chain(p, depth, K_OR, T_OR, parse_and);
}

/* ---- printing ------------------------------------------------------------ */

typedef struct out {
    char *buf;
    size_t cap, len;
} out;

static void put(out *o, const char *s, size_t n)
{
    if (o->len < o->cap) {
        size_t room = o->cap - o->len;
        memcpy(o->buf + o->len, s, n < room ? n : room);
    }
    o->len += n;
}

static void puts_(out *o, const char *s)
{
    put(o, s, strlen(s));
}

static void print_node(out *o, const node *n)
{
    switch (n->k) {
    case K_EQ:
    case K_NE:
        puts_(o, n->attr);
        puts_(o, n->k == K_EQ ? "=" : "!=");
        puts_(o, n->vals[0]);
        return;
    case K_IN:
        puts_(o, n->attr);
        puts_(o, " in (");
        for (size_t i = 0; i < n->n; i++) {
            if (i)
                puts_(o, ", ");
            puts_(o, n->vals[i]);
        }
        puts_(o, ")");
        return;
    case K_NOT: {
        /* 'not' binds tighter than both chains: they need parentheses */
        const node *kid = n->kids[0];
        bool paren = kid->k == K_AND || kid->k == K_OR;
        puts_(o, paren ? "not (" : "not ");
        print_node(o, kid);
        if (paren)
            puts_(o, ")");
        return;
    }
    case K_AND:
    case K_OR:
        for (size_t i = 0; i < n->n; i++) {
            if (i)
                puts_(o, n->k == K_AND ? " and " : " or ");
            /* only an 'or' inside an 'and' (a chain never holds its own
             * kind: they are flattened) */
            bool paren = n->k == K_AND && n->kids[i]->k == K_OR;
            if (paren)
                puts_(o, "(");
            print_node(o, n->kids[i]);
            if (paren)
                puts_(o, ")");
        }
        return;
    }
}

kl_status kl_policy_print(const kl_policy *p, char *buf, size_t cap,
                          size_t *len)
{
    if (len)
        *len = 0;
    if (!p || !p->root)
        return KL_E_BAD_VALUE;
    out o = {buf, buf ? cap : 0, 0};
    print_node(&o, p->root);
    if (len)
        *len = o.len;
    if (!buf || o.len >= cap) {
        if (buf && cap)
            buf[cap - 1] = 0;
        return KL_E_TOO_LARGE;
    }
    buf[o.len] = 0;
    return KL_OK;
}

/* ---- parse --------------------------------------------------------------- */

kl_status kl_policy_parse(const char *text, size_t len, kl_policy **out_p,
                          size_t *err_pos, char *err, size_t errlen)
{
    parser p = {.s = text, .len = len, .err = err, .errlen = errlen};
    if (err && errlen)
        err[0] = 0;
    if (err_pos)
        *err_pos = 0;
    if (!out_p)
        return KL_E_BAD_VALUE;
    *out_p = NULL;
    node *root = NULL;
    if (!text && len) {
        fail(&p, KL_E_BAD_VALUE, 0, "no text");
    } else if (len > KL_POLICY_MAX_LEN) {
        fail(&p, KL_E_TOO_LARGE, KL_POLICY_MAX_LEN,
             "policy longer than %d bytes", KL_POLICY_MAX_LEN);
    } else {
        const char *nul = len ? memchr(text, 0, len) : NULL;
        if (nul)
            fail(&p, KL_E_BAD_VALUE, (size_t)(nul - text),
                 "NUL byte inside the policy");
    }
    if (p.status == KL_OK) {
        next(&p);
        if (p.t.k == T_END)
            fail(&p, KL_E_BAD_VALUE, p.t.pos, "empty policy");
    }
    if (p.status == KL_OK)
        root = parse_or(&p, 0);
    if (p.status == KL_OK && p.t.k != T_END) {
        if (p.t.k == T_RP)
            fail(&p, KL_E_BAD_VALUE, p.t.pos, "')' without a matching '('");
        else
            unexpected(&p, "'and', 'or' or the end");
    }
    kl_policy *pol = NULL;
    if (p.status == KL_OK) {
        /* The canonical form may be a little longer than the text
         * ("(a=x or b=y)and(c=z or d=w)" gains two spaces); it is what a
         * sealed file stores, so it is held to the same limit. */
        out o = {NULL, 0, 0};
        print_node(&o, root);
        if (o.len > KL_POLICY_MAX_LEN)
            fail(&p, KL_E_TOO_LARGE, len,
                 "canonical form of %zu bytes is longer than %d", o.len,
                 KL_POLICY_MAX_LEN);
    }
    if (p.status == KL_OK) {
        pol = malloc(sizeof *pol);
        if (!pol)
            fail(&p, KL_E_NOMEM, 0, "out of memory");
    }
    if (p.status != KL_OK) {
        node_free(root);
        free(pol);
        if (err_pos)
            *err_pos = p.err_pos;
        return p.status;
    }
    pol->root = root;
    *out_p = pol;
    return KL_OK;
}

void kl_policy_free(kl_policy *p)
{
    if (!p)
        return;
    node_free(p->root);
    free(p);
}

/* ---- evaluation and equality ----------------------------------------------
 */

static bool has(const kl_policy_attr *a, size_t n, const char *name,
                const char *value)
{
    for (size_t i = 0; i < n; i++)
        if (a[i].name && a[i].value && strcmp(a[i].name, name) == 0 &&
            strcmp(a[i].value, value) == 0)
            return true;
    return false;
}

static bool eval_node(const node *n, const kl_policy_attr *a, size_t na)
{
    switch (n->k) {
    case K_EQ: return has(a, na, n->attr, n->vals[0]);
    case K_NE: return !has(a, na, n->attr, n->vals[0]);
    case K_IN:
        for (size_t i = 0; i < n->n; i++)
            if (has(a, na, n->attr, n->vals[i]))
                return true;
        return false;
    case K_NOT: return !eval_node(n->kids[0], a, na);
    case K_AND:
        for (size_t i = 0; i < n->n; i++)
            if (!eval_node(n->kids[i], a, na))
                return false;
        return true;
    case K_OR:
        for (size_t i = 0; i < n->n; i++)
            if (eval_node(n->kids[i], a, na))
                return true;
        return false;
    }
    return false;
}

bool kl_policy_eval(const kl_policy *p, const kl_policy_attr *attrs, size_t n)
{
    if (!p || !p->root)
        return false;
    return eval_node(p->root, attrs, attrs ? n : 0);
}

static bool node_equal(const node *a, const node *b)
{
    if (a->k != b->k || a->n != b->n)
        return false;
    if (a->k == K_AND || a->k == K_OR || a->k == K_NOT) {
        for (size_t i = 0; i < a->n; i++)
            if (!node_equal(a->kids[i], b->kids[i]))
                return false;
        return true;
    }
    if (strcmp(a->attr, b->attr) != 0)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->vals[i], b->vals[i]) != 0)
            return false;
    return true;
}

bool kl_policy_equal(const kl_policy *a, const kl_policy *b)
{
    if (!a || !b || !a->root || !b->root)
        return a == b;
    return node_equal(a->root, b->root);
}

/* ---- the character sets ---------------------------------------------------
 */

static bool reserved(const char *s, size_t len)
{
    for (size_t i = 0; i < 4; i++)
        if (strlen(keywords[i]) == len && memcmp(s, keywords[i], len) == 0)
            return true;
    return false;
}

bool kl_policy_name_ok(const char *s, size_t len)
{
    if (!s || len == 0 || len > KL_POLICY_MAX_WORD || !is_lower(s[0]))
        return false;
    for (size_t i = 1; i < len; i++)
        if (!name_char(s[i]))
            return false;
    return !reserved(s, len);
}

bool kl_policy_value_ok(const char *s, size_t len)
{
    if (!s || len == 0 || len > KL_POLICY_MAX_WORD)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!value_char(s[i]))
            return false;
    return !reserved(s, len);
}
