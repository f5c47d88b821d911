/* SPDX-License-Identifier: Apache-2.0 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

uint8_t *tu_unhex(const char *hex, size_t *len)
{
    size_t n = strlen(hex);
    assert_true(n % 2 == 0);
    uint8_t *out = malloc(n / 2 + 1);
    assert_non_null(out);
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        assert_true(hi >= 0 && lo >= 0);
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    *len = n / 2;
    return out;
}

char *tu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)sz + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    buf[sz] = 0;
    if (len)
        *len = (size_t)sz;
    return buf;
}

const char *tu_src_dir(void)
{
    const char *d = getenv("KL_SRC_DIR");
    return d ? d : ".";
}

const char *tu_bin_dir(void)
{
    const char *d = getenv("KL_BIN_DIR");
    return d ? d : ".";
}

const char *tu_vector_path(const char *rel)
{
    static __thread char buf[4096];
    const char *d = getenv("KL_VECTORS");
    if (d)
        snprintf(buf, sizeof buf, "%s/%s", d, rel);
    else
        snprintf(buf, sizeof buf, "%s/tests/vectors/%s", tu_src_dir(), rel);
    return buf;
}

static void run_sh(const char *dir, const char *fmt, va_list ap)
{
    char cmd[8192], full[8600];
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    if (dir)
        snprintf(full, sizeof full, "cd %s && (%s) >/dev/null 2>&1", dir, cmd);
    else
        snprintf(full, sizeof full, "%s", cmd);
    if (system(full) != 0)
        fail_msg("command failed: %s", cmd);
}

void tu_sh(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    run_sh(NULL, fmt, ap);
    va_end(ap);
}

void tu_sh_in(const char *dir, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    run_sh(dir, fmt, ap);
    va_end(ap);
}
