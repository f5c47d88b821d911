/* SPDX-License-Identifier: Apache-2.0 */
/* For the sealed-key tests that sign through keyless-cli against a real
 * keylessd (docs/SEALING.md "keylessd and sealed keys"): a signature that
 * must come back, a "key not found" that must, and one series of a
 * keylessd's /metrics. Header-only: each test is a program. */
#ifndef KL_TESTS_SEALED_COMMON_H
#define KL_TESTS_SEALED_COMMON_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon.h"
#include "net.h"
#include "tool.h"

/* Prints the logs of the daemons in logs (NULL-terminated) on a failure. */
static inline void sc_dump(const td_daemon *const *logs)
{
    for (size_t i = 0; logs && logs[i]; i++)
        td_dump_log(logs[i]);
}

/* keyless-cli sign --server server --pubkey pub: its exit status, its
 * output in *out (to free). */
static inline int sc_sign(tt_tool *cli, const char *server, const char *pub,
                          char **out)
{
    const char *lead[] = {"sign", "--server", server, NULL};
    const char *args[] = {"--pubkey", pub, "--message", "sealed", NULL};
    return tt_tool_run(cli, lead, args, out, 60000);
}

/* The signature comes back ("OK: ..." naming what). */
static inline void sc_expect_signs(tt_tool *cli, const char *server,
                                   const char *pub, const char *what,
                                   const td_daemon *const *logs)
{
    char *out = NULL;
    int st = sc_sign(cli, server, pub, &out);
    if (st != 0 || strncmp(out, "OK: ", 4) != 0 || !strstr(out, what)) {
        sc_dump(logs);
        fail_msg("keyless-cli sign: exit %d:\n%s", st, out);
    }
    free(out);
}

/* The answer is "key not found" (P6 0x02). */
static inline void sc_expect_not_found(tt_tool *cli, const char *server,
                                       const char *pub,
                                       const td_daemon *const *logs)
{
    char *out = NULL;
    int st = sc_sign(cli, server, pub, &out);
    if (st != 1 || !strstr(out, "key not found")) {
        sc_dump(logs);
        fail_msg("keyless-cli sign: exit %d, expected key not found:\n%s", st,
                 out);
    }
    free(out);
}

/* A series' value on 127.0.0.1:port/metrics (its whole name and labels);
 * -1: absent. */
static inline double sc_metric(uint16_t port, const char *series)
{
    char *body = NULL;
    assert_int_equal(tn_http_get(port, "/metrics", &body), 200);
    char want[256];
    snprintf(want, sizeof want, "\n%s ", series);
    char *p = strstr(body, want);
    double v = p ? strtod(p + strlen(want), NULL) : -1;
    free(body);
    return v;
}

#endif
