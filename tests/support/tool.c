/* SPDX-License-Identifier: Apache-2.0 */
/* See tool.h. */
#include "tool.h"

#include <stdio.h>

#include "daemon.h"
#include "pki.h"
#include "testutil.h"

void tt_keep(char *dst, const char *src)
{
    snprintf(dst, TT_PATH_MAX, "%s", src);
}

void tt_tool_init(tt_tool *t, const char *name, const char *dash)
{
    snprintf(t->path, sizeof t->path, "%s/%s", tu_bin_dir(), name);
    static const char *const names[2][3] = {{"-cert", "-key", "-ca"},
                                            {"--cert", "--key", "--ca"}};
    int dd = dash[0] == '-' && dash[1] == '-';
    t->cert_flag = names[dd][0];
    t->key_flag = names[dd][1];
    t->ca_flag = names[dd][2];
    tt_keep(t->cert, tp_path("client.crt"));
    tt_keep(t->key, tp_path("client.key"));
    tt_keep(t->ca, tp_path("ca.crt"));
}

int tt_tool_run(const tt_tool *t, const char *const *lead,
                const char *const *args, char **out, int timeout_ms)
{
    enum { MAX = 64 };
    const char *argv[MAX];
    int n = 0;
    argv[n++] = t->path;
    for (int i = 0; lead && lead[i] && n < MAX - 8; i++)
        argv[n++] = lead[i];
    argv[n++] = t->cert_flag;
    argv[n++] = t->cert;
    argv[n++] = t->key_flag;
    argv[n++] = t->key;
    argv[n++] = t->ca_flag;
    argv[n++] = t->ca;
    for (int i = 0; args && args[i]; i++) {
        if (n == MAX - 1)
            fail_msg("%s: more than %d arguments", t->path, MAX - 1);
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    return td_run(argv, out, timeout_ms);
}
