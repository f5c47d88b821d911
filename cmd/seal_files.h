/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-seal's files (docs/SEALING.md "Operator workflow"): a sealed
 * file or key read whole, and every output written whole or not at all.
 * Each function prints its own error and returns a keyless-seal exit
 * status. */
#ifndef KL_CMD_SEAL_FILES_H
#define KL_CMD_SEAL_FILES_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum {
    EXIT_OK = 0,
    EXIT_FAIL = 1,  /* cannot open, policy selects nobody, I/O */
    EXIT_USAGE = 2, /* bad command line or input file */
};

/* A new file is written whole or not at all (docs/SEALING.md "Operator
 * workflow"): into a temporary file of the same directory
 * (".NAME.XXXXXX", a name no key store loads), flushed to disk, then
 * renamed into place without replacing anything - so that a watched key
 * directory never sees a half-written file, and an existing output is
 * never overwritten. */
typedef struct pending {
    char tmp[PATH_MAX], path[PATH_MAX];
} pending;

/* The whole file (up to a sealed file's limit) into *buf (free()). */
int seal_read_all(const char *path, uint8_t **buf, size_t *len);
/* fsync of a directory, so that a new name in it is on disk too. */
void seal_sync_dir(const char *dir);
/* The data into a fresh temporary file beside path (into pd), of the
 * given mode; fsync'd when sync (otherwise the caller flushes it). */
int seal_write_tmp(const char *path, const void *p, size_t n, mode_t mode,
                   bool sync, pending *pd);
/* The temporary file renamed into place (never over an existing one), or
 * removed. */
int seal_commit(const pending *pd);
/* Writes the new file path (never over an existing one) of the given mode,
 * whole, flushed to disk with its name. */
int seal_write_new(const char *path, const void *p, size_t n, mode_t mode);

#endif
