/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the request line of the metrics listener's HTTP heads
 * (src/metrics/http.c, docs/METRICS.md "The HTTP listener"). Whatever the
 * bytes, the split stays inside the head and what it accepts has the shape
 * it promises: a non-empty method and a path without spaces, query or
 * fragment. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192) /* the listener's head limit */
        return 0;
    char *head = malloc(size + 1);
    if (!head)
        return 0;
    memcpy(head, data, size);
    head[size] = '\0';
    char *end = head + strlen(head);
    char *method = NULL, *path = NULL;
    if (mx_http_request_line(head, &method, &path)) {
        if (!method || !path || method != head || !*method || path <= method ||
            path > end || strchr(method, ' ') || strpbrk(path, " ?#\r\n"))
            abort(); /* accepted a line that is not one */
    }
    free(head);
    return 0;
}
