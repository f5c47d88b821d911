/* SPDX-License-Identifier: Apache-2.0 */
/* A plain-socket HTTP/1.0 client for the metrics tests (127.0.0.1 only). */
#ifndef KL_MHTTP_H
#define KL_MHTTP_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

typedef struct mh_reply {
    int status;
    char *head; /* status line and headers */
    char *body; /* NUL-terminated */
    size_t body_len;
} mh_reply;

static inline void mh_free(mh_reply *r)
{
    free(r->head);
    free(r->body);
}

/* Sends `method path` (with an optional body) and reads the reply until the
 * server closes. Returns 0, or -1 when the connection failed. */
static inline int mh_request(uint16_t port, const char *method,
                             const char *path, const char *body, mh_reply *out)
{
    memset(out, 0, sizeof *out);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    char req[512];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, path, body ? strlen(body) : 0, body ? body : "");
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 4096 > cap)
            buf = realloc(buf, cap *= 2);
        ssize_t got = read(fd, buf + len, cap - len - 1);
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    close(fd);
    buf[len] = '\0';
    char *sep = strstr(buf, "\r\n\r\n");
    if (!sep || sscanf(buf, "HTTP/1.%*d %d", &out->status) != 1) {
        free(buf);
        return -1;
    }
    *sep = '\0';
    out->body_len = len - (size_t)(sep + 4 - buf);
    out->body = malloc(out->body_len + 1);
    memcpy(out->body, sep + 4, out->body_len + 1);
    out->head = buf;
    return 0;
}

#endif
