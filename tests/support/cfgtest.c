/* SPDX-License-Identifier: Apache-2.0 */
/* See cfgtest.h. */
#include "cfgtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

char *const tc_no_env[] = {NULL};

void tc_setup_dir(char *dir, size_t cap, const char *tag)
{
    snprintf(dir, cap, "/tmp/kl-%s-XXXXXX", tag);
    assert_non_null(mkdtemp(dir));
    static const char *const none[] = {NULL};
    kl_config_set_search_dirs(none);
}

int tc_teardown_dir(const char *dir)
{
    kl_config_set_search_dirs(NULL);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

const char *tc_write(const char *dir, const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

kl_status tc_load(kl_config *cfg, char *const *env, const char *const *args,
                  char *err, size_t errlen)
{
    enum { MAX = 64 };
    char *argv[MAX] = {"keylessd"};
    int argc = 1;
    for (; args && *args; args++) {
        if (argc == MAX - 1)
            fail_msg("tc_load: more than %d arguments", MAX - 2);
        argv[argc++] = (char *)*args; /* kl_config_load does not write */
    }
    argv[argc] = NULL;
    err[0] = 0;
    return kl_config_load(cfg, argc, argv, env, err, errlen);
}
