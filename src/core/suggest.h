/* SPDX-License-Identifier: Apache-2.0 */
/* "Did you mean ...?" for a misspelt name (a configuration option, a
 * routing table field): the candidate nearest to the word by edit
 * distance - insertions, deletions, substitutions and swaps of two
 * neighbouring characters, case ignored - when it is near enough to be a
 * typing mistake rather than another word. */
#ifndef KL_CORE_SUGGEST_H
#define KL_CORE_SUGGEST_H

#include <stddef.h>

/* Words longer than this are never matched (their distance is "far"). */
#define KL_SUGGEST_MAX_LEN 64

/* The edit distance between a and b (see above); SIZE_MAX when either is
 * longer than KL_SUGGEST_MAX_LEN. */
size_t kl_edit_distance(const char *a, const char *b);

/* Feed the candidates one by one, then ask for the best. */
typedef struct kl_suggest {
    const char *word;
    const char *best; /* NULL: none near enough yet */
    size_t best_distance;
} kl_suggest;

void kl_suggest_init(kl_suggest *s, const char *word);
void kl_suggest_add(kl_suggest *s, const char *candidate);
/* The nearest candidate within max(1, length of the word / 3) edits (the
 * first one added on a tie), or NULL. A candidate equal to the word is
 * not suggested (one that differs in case only is). */
const char *kl_suggest_best(const kl_suggest *s);

#endif
