/* SPDX-License-Identifier: Apache-2.0 */
/* Loopback helpers for integration tests: a free TCP port and an HTTP/1.0
 * GET against a local listener (the metrics endpoint). */
#ifndef KL_TEST_NET_H
#define KL_TEST_NET_H

#include <stdint.h>

/* A TCP port on 127.0.0.1 that was free a moment ago (bound, then
 * released). */
uint16_t tn_free_port(void);
/* A listening TCP socket on 127.0.0.1 and an ephemeral port (*port). */
int tn_listen(int backlog, uint16_t *port);
/* GET path from 127.0.0.1:port over HTTP/1.0; returns the status code and
 * the body in *body (malloc'd). Fails the test when it cannot connect. */
int tn_http_get(uint16_t port, const char *path, char **body);
/* A blocking TCP connection to 127.0.0.1:port from source address src
 * (another 127.0.0.x; NULL: any), with TCP_NODELAY. On loopback connect()
 * completes from the listen backlog, accepted or not. Fails the test when
 * it cannot connect. */
int tn_tcp_from(const char *src, uint16_t port);

#endif
