/* SPDX-License-Identifier: Apache-2.0 */
/* Sealing policies: which servers may open a sealed key, as a boolean
 * expression over the attributes a server publishes (region, country,
 * data centre, tier...). docs/DESIGN.md "Sealing policies
 * (src/seal/policy.c)" has the grammar, the canonical form, the
 * evaluation rules and the limits; in short:
 *
 *   policy     = or-expr
 *   or-expr    = and-expr { "or" and-expr }
 *   and-expr   = not-expr { "and" not-expr }
 *   not-expr   = "not" not-expr | "(" or-expr ")" | comparison
 *   comparison = name "=" value | name "!=" value
 *              | name "in" "(" value { "," value } ")"
 *   name       = [a-z] { [a-z0-9_-] }           (not a keyword)
 *   value      = [a-z0-9_.:-] { [a-z0-9_.:-] }  (not a keyword)
 *
 * Precedence: not > and > or. Keywords (and, or, not, in) are lower case
 * and reserved; '&&', '||' and '!' are not part of the language (one
 * spelling per operator, so that one policy has one canonical form) and
 * are refused with a message naming the keyword to write. Values are not
 * quoted: the vocabulary is identifiers, and a second (quoted) spelling
 * of the same value would be one more thing for the canonical form to
 * normalise. Space, tab, CR and LF separate tokens.
 *
 * Limits: KL_POLICY_MAX_LEN bytes of text (and of the canonical form),
 * nesting ('(' and 'not') KL_POLICY_MAX_DEPTH deep, KL_POLICY_MAX_TERMS
 * values compared (a comparison counts one, an 'in' list one per value),
 * names and values KL_POLICY_MAX_WORD bytes each.
 *
 * Errors carry the byte offset (from 0) into the text and a sentence:
 * "at 17: expected a value after '='". Nothing here crashes on any input:
 * the text is taken with its length and may hold any bytes. */
#ifndef KL_SEAL_POLICY_H
#define KL_SEAL_POLICY_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

#define KL_POLICY_MAX_LEN 4096
#define KL_POLICY_MAX_DEPTH 32
#define KL_POLICY_MAX_TERMS 256
#define KL_POLICY_MAX_WORD 64

typedef struct kl_policy kl_policy;

/* One attribute of a server. A server may have several values for one
 * name (two pairs with the same name): a comparison asks whether any of
 * them matches. Pairs with a NULL name or value are ignored. */
typedef struct kl_policy_attr {
    const char *name;
    const char *value;
} kl_policy_attr;

/* Parses len bytes of text into *out. On failure *out is NULL, *err_pos
 * (when not NULL) gets the byte offset of the problem and err the message
 * "at <offset>: <what>"; the status is KL_E_BAD_VALUE for a syntax error,
 * KL_E_TOO_LARGE for a limit passed, KL_E_NOMEM. The parsed policy is
 * already canonical: 'and' and 'or' chains are flattened (redundant
 * parentheses leave no trace), 'in' lists are sorted (bytewise) and
 * deduplicated; '!=' and 'not' stay as written. */
KL_WUR kl_status kl_policy_parse(const char *text, size_t len, kl_policy **out,
                                 size_t *err_pos, char *err, size_t errlen);

void kl_policy_free(kl_policy *p);

/* Writes the canonical form, NUL-terminated, into buf: single spaces
 * around keywords, none around '=' and '!=', "name in (a, b)", and
 * parentheses only where precedence needs them. It is at most
 * KL_POLICY_MAX_LEN bytes (the parser refuses a policy whose canonical
 * form would be longer), so a buffer of KL_POLICY_MAX_LEN + 1 always
 * suffices. *len (when not NULL) gets the length without the NUL, also
 * when buf is too small (or NULL, to measure), which returns
 * KL_E_TOO_LARGE. The same policy always prints the same bytes, and
 * parsing them gives an equal policy. */
KL_WUR kl_status kl_policy_print(const kl_policy *p, char *buf, size_t cap,
                                 size_t *len);

/* Whether a server with these attributes satisfies the policy:
 *   name=v        some pair (name, v) exists;
 *   name!=v       no pair (name, v) exists - exactly 'not name=v', so a
 *                 missing attribute makes it true;
 *   name in (..)  some pair (name, v) exists with v in the list.
 * A NULL policy is satisfied by nobody. */
bool kl_policy_eval(const kl_policy *p, const kl_policy_attr *attrs, size_t n);

/* Structural equality: the same tree, so the same canonical form. */
bool kl_policy_equal(const kl_policy *a, const kl_policy *b);

/* Whether a string is a valid attribute name or value (for whoever
 * publishes attributes: a server attribute outside the grammar could
 * never be named by a policy). */
bool kl_policy_name_ok(const char *s, size_t len);
bool kl_policy_value_ok(const char *s, size_t len);

#endif
