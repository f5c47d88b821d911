/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by unit and integration tests. */
#ifndef KL_TESTUTIL_H
#define KL_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* Decodes hex (no separators) into a malloc'd buffer; *len gets its size.
 * Aborts the test on invalid input. */
uint8_t *tu_unhex(const char *hex, size_t *len);
/* Reads a whole file into a malloc'd, NUL-terminated buffer. */
char *tu_read_file(const char *path, size_t *len);
/* $KL_VECTORS/<rel> (or the source tree's tests/vectors); static buffer. */
const char *tu_vector_path(const char *rel);
/* $KL_SRC_DIR and $KL_BIN_DIR with fallbacks. */
const char *tu_src_dir(void);
const char *tu_bin_dir(void);

/* Runs a shell command (printf format); fails the test, naming the
 * command, when it exits non-zero. Its output goes where the test's goes. */
void tu_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same in directory dir, output discarded (openssl's chatter). */
void tu_sh_in(const char *dir, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
