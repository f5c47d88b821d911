/* SPDX-License-Identifier: Apache-2.0 */
/* Scaffolding shared by the configuration tests (tests/unit/config): a
 * temporary directory for configuration files, a hermetic file search,
 * and loading a command line as keylessd would. */
#ifndef KL_TEST_CFGTEST_H
#define KL_TEST_CFGTEST_H

#include <stddef.h>

#include "config/config.h"
#include "daemon/settings.h"

/* An empty environment. */
extern char *const tc_no_env[];

/* A NULL-terminated argument list in place: TC_ARGS("--port", "1"). */
#define TC_ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Creates /tmp/kl-<tag>-XXXXXX into dir (cap bytes) and makes the file
 * search hermetic (no gokeyless.yaml of the build directory or
 * /etc/keyless). Fails the test when it cannot. */
void tc_setup_dir(char *dir, size_t cap, const char *tag);
/* Removes dir and everything in it and restores the default search;
 * 0 on success (a cmocka teardown's value). */
int tc_teardown_dir(const char *dir);
/* Writes text to dir/name; the path, in a static buffer valid until the
 * next call. */
const char *tc_write(const char *dir, const char *name, const char *text);

/* kl_config_load with argv = {"keylessd", args...} (args NULL-terminated,
 * or NULL: none); the message, if any, in err. */
kl_status tc_load(kl_config *cfg, char *const *env, const char *const *args,
                  char *err, size_t errlen);

#endif
