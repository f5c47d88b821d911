/* SPDX-License-Identifier: Apache-2.0 */
/* Edit distance and the nearest name (suggest.h). The distance is the
 * "optimal string alignment" variant: the classic dynamic programme over
 * prefixes, keeping three rows, plus a swap of two neighbours as one
 * edit. */
#include "core/suggest.h"

#include <ctype.h>
#include <stdint.h>
#include <string.h>

static size_t min3(size_t a, size_t b, size_t c)
{
    size_t m = a < b ? a : b;
    return m < c ? m : c;
}

size_t kl_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > KL_SUGGEST_MAX_LEN || lb > KL_SUGGEST_MAX_LEN)
        return SIZE_MAX;
    /* rows i-2, i-1 and i of the table d[i][j]: the distance between the
     * first i characters of a and the first j of b */
    size_t rows[3][KL_SUGGEST_MAX_LEN + 1];
    size_t *back2 = rows[0], *back = rows[1], *cur = rows[2];
    for (size_t j = 0; j <= lb; j++)
        back[j] = j;
    for (size_t i = 1; i <= la; i++) {
        int ca = tolower((unsigned char)a[i - 1]);
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            int cb = tolower((unsigned char)b[j - 1]);
            size_t cost = ca == cb ? 0 : 1;
            cur[j] = min3(back[j] + 1, cur[j - 1] + 1, back[j - 1] + cost);
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb &&
                back2[j - 2] + 1 < cur[j])
                cur[j] = back2[j - 2] + 1;
        }
        size_t *t = back2;
        back2 = back;
        back = cur;
        cur = t;
    }
    return back[lb];
}

void kl_suggest_init(kl_suggest *s, const char *word)
{
    s->word = word ? word : "";
    s->best = NULL;
    s->best_distance = SIZE_MAX;
}

void kl_suggest_add(kl_suggest *s, const char *candidate)
{
    if (!candidate || !*candidate)
        return;
    size_t d = kl_edit_distance(s->word, candidate);
    if (!strcmp(s->word, candidate) || d >= s->best_distance)
        return;
    size_t len = strlen(s->word), limit = len / 3 > 1 ? len / 3 : 1;
    if (d > limit)
        return;
    s->best = candidate;
    s->best_distance = d;
}

const char *kl_suggest_best(const kl_suggest *s)
{
    return s->best;
}
