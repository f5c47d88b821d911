/* SPDX-License-Identifier: Apache-2.0 */
/* The fault shim (tests/p11shim) in front of SoftHSM2, for the token tests
 * (header-only: each test_*.c is a program). After ht_setup: shim_start
 * points the shim at SoftHSM with no faults; keys are added through
 * shim_uri; once one is loaded, shim_bind_stats finds the shim's counters
 * in the instance p11-kit loaded; ctl() replaces the fault rules. */
#ifndef KL_TEST_SHIMTEST_H
#define KL_TEST_SHIMTEST_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../../p11shim/shim.h"
#include "hsmtest.h"

static kl_p11shim_stats_fn shim_stats;
static char ctl_path[128];

/* Replaces the shim's rules atomically (see shim.h). */
static inline void ctl(const char *text)
{
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", ctl_path);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, ctl_path), 0);
}

static inline kl_p11shim_stats stats(void)
{
    kl_p11shim_stats s;
    shim_stats(&s);
    return s;
}

/* A PKCS#11 URI for a SoftHSM object, through the shim module. */
static inline const char *shim_uri(const char *attrs, const char *query)
{
    static char buf[1024];
    snprintf(buf, sizeof buf, "pkcs11:%s?module-path=%s&%s", attrs,
             getenv("KL_P11SHIM"), query);
    return buf;
}

static inline void shim_start(void)
{
    const char *shim = getenv("KL_P11SHIM");
    if (!shim || access(shim, R_OK) != 0)
        fail_msg("KL_P11SHIM does not name the shim module (run via ctest)");
    snprintf(ctl_path, sizeof ctl_path, "%s/shim.ctl", ht_dir);
    setenv("KL_P11SHIM_TARGET", ht_module, 1);
    setenv("KL_P11SHIM_CTL", ctl_path, 1);
    ctl("");
}

/* The shim p11-kit loaded (the same instance), for its counters. */
static inline void shim_bind_stats(void)
{
    void *lib = dlopen(getenv("KL_P11SHIM"), RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(lib);
    *(void **)&shim_stats = dlsym(lib, KL_P11SHIM_STATS_FN);
    assert_non_null(shim_stats);
    dlclose(lib); /* drops our reference only; p11-kit keeps it loaded */
}

#endif
