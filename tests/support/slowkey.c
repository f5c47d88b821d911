/* SPDX-License-Identifier: Apache-2.0 */
/* Slow keys on SoftHSM2 tokens behind the fault shim: see slowkey.h. */
#include "slowkey.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pki.h"
#include "testutil.h"

#define MAX_SLOW 16

static char *dir;   /* the token directory, the config, the shim's rules */
static pid_t owner; /* the process that removes dir at exit */
static char shim[PATH_MAX];
static struct {
    char label[32];
    char uri[PATH_MAX + 256];
    unsigned ms;
} slow[MAX_SLOW];
static int nslow;

const char *tp_softhsm_module(void)
{
    static const char *paths[] = {
        "/usr/lib/softhsm/libsofthsm2.so",
        "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
        "/usr/lib64/softhsm/libsofthsm2.so",
        "/usr/local/lib/softhsm/libsofthsm2.so",
    };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (access(paths[i], R_OK) == 0)
            return paths[i];
    return NULL;
}

static void remove_dir(void)
{
    if (dir && getpid() == owner) {
        tp_rmtree(dir);
        dir = NULL;
    }
}

/* The shim's rules (tests/p11shim/shim.h), written atomically: one stall
 * rule per slow token. */
static void write_rules(void)
{
    char path[1200], tmp[1300];
    snprintf(path, sizeof path, "%s/shim.ctl", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    for (int i = 0; i < nslow; i++)
        if (slow[i].ms)
            fprintf(f, "crypto stall_ms=%u token=%s\n", slow[i].ms,
                    slow[i].label);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, path), 0);
}

static void init(void)
{
    if (dir)
        return;
    const char *module = tp_softhsm_module();
    if (!module)
        fail_msg("SoftHSM2 is not installed (scripts/install-deps.sh)");
    /* p11-kit looks for a relative module path in its own directory */
    char path[1024];
    const char *s = getenv("KL_P11SHIM");
    if (s && *s)
        snprintf(path, sizeof path, "%s", s);
    else
        snprintf(path, sizeof path, "%s/libkl_p11shim.so", tu_bin_dir());
    if (!realpath(path, shim))
        fail_msg("the fault shim %s is missing (build kl_p11shim; ctest "
                 "sets KL_P11SHIM)",
                 path);
    dir = tp_tempdir("slowkey");
    owner = getpid();
    atexit(remove_dir);
    char conf[1200], ctl[1200];
    snprintf(conf, sizeof conf, "%s/softhsm2.conf", dir);
    snprintf(ctl, sizeof ctl, "%s/shim.ctl", dir);
    tu_sh("mkdir -p %s/tokens && printf 'directories.tokendir = "
          "%s/tokens\\nobjectstore.backend = file\\nlog.level = ERROR\\n' > "
          "%s",
          dir, dir, conf);
    setenv("SOFTHSM2_CONF", conf, 1);
    setenv("KL_P11SHIM_TARGET", module, 1);
    setenv("KL_P11SHIM_CTL", ctl, 1);
    write_rules();
}

const char *td_slow_key(const char *key, unsigned ms, unsigned sessions)
{
    init();
    assert_true(nslow < MAX_SLOW);
    int i = nslow;
    char label[32];
    snprintf(label, sizeof label, "kl-slow-%d", i + 1);
    tu_sh("softhsm2-util --init-token --free --label %s --pin " TD_SLOW_PIN
          " --so-pin 000000 >/dev/null",
          label);
    tu_sh("openssl pkcs8 -topk8 -nocrypt -in %s -out %s/key.p8 && "
          "softhsm2-util --import %s/key.p8 --token %s --label key --id 01 "
          "--pin " TD_SLOW_PIN " >/dev/null && rm -f %s/key.p8",
          key, dir, dir, label, dir);
    memcpy(slow[i].label, label, sizeof label);
    slow[i].ms = ms;
    snprintf(slow[i].uri, sizeof slow[i].uri,
             "pkcs11:token=%s;object=key?module-path=%s&pin-value=" TD_SLOW_PIN
             "&max-sessions=%u",
             label, shim, sessions ? sessions : 1);
    nslow++;
    write_rules();
    return slow[i].uri;
}

void td_slow_key_set(const char *uri, unsigned ms)
{
    for (int i = 0; i < nslow; i++)
        if (uri == slow[i].uri || !strcmp(uri, slow[i].uri)) {
            slow[i].ms = ms;
            write_rules();
            return;
        }
    fail_msg("td_slow_key_set: %s is not a slow key of this process", uri);
}
