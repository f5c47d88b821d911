/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-seal's files: inputs read whole, outputs written whole or not at
 * all (seal_files.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seal/sealed.h"
#include "seal_files.h"

int seal_read_all(const char *path, uint8_t **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "keyless-seal: %s: %s\n", path, strerror(errno));
        return EXIT_USAGE;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap || cap > KL_SEALED_MAX_FILE)
            break;
        uint8_t *nb = realloc(b, cap * 2);
        if (!nb)
            free(b);
        b = nb;
        cap *= 2;
    }
    fclose(f);
    if (!b)
        return EXIT_FAIL;
    *buf = b;
    *len = n;
    return EXIT_OK;
}

/* fsync of a directory, so that a new name in it is on disk too. */
void seal_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* The data into a fresh temporary file beside path (into pd), of the
 * given mode; fsync'd when sync (otherwise the caller flushes it). */
int seal_write_tmp(const char *path, const void *p, size_t n, mode_t mode,
                   bool sync, pending *pd)
{
    const char *slash = strrchr(path, '/');
    int dl = slash ? (int)(slash - path + 1) : 0;
    if (access(path, F_OK) == 0) {
        fprintf(stderr, "keyless-seal: %s: %s (remove it first)\n", path,
                strerror(EEXIST));
        return EXIT_FAIL;
    }
    int len = snprintf(pd->tmp, sizeof pd->tmp, "%.*s.%s.XXXXXX", dl, path,
                       path + dl);
    if (len < 0 || (size_t)len >= sizeof pd->tmp ||
        strlen(path) >= sizeof pd->path) {
        fprintf(stderr, "keyless-seal: %s: %s\n", path, strerror(ENAMETOOLONG));
        return EXIT_FAIL;
    }
    strcpy(pd->path, path);
    int fd = mkostemp(pd->tmp, O_CLOEXEC); /* mode 0600 */
    if (fd < 0) {
        fprintf(stderr, "keyless-seal: %s: %s\n", path, strerror(errno));
        return EXIT_FAIL;
    }
    mode_t um = umask(0); /* the mode open(2) would have given it */
    umask(um);
    const uint8_t *b = p;
    int err = fchmod(fd, mode & ~um) != 0 ? errno : 0;
    while (!err && n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            err = w < 0 ? errno : EIO;
            break;
        }
        b += w;
        n -= (size_t)w;
    }
    if (!err && sync && fsync(fd) != 0)
        err = errno;
    if (close(fd) != 0 && !err)
        err = errno;
    if (err) {
        unlink(pd->tmp);
        fprintf(stderr, "keyless-seal: %s: %s\n", path, strerror(err));
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* The temporary file renamed into place, or removed. RENAME_NOREPLACE:
 * an output that appeared meanwhile is kept; a file system without it
 * gets link(2), which never replaces either. */
int seal_commit(const pending *pd)
{
    if (renameat2(AT_FDCWD, pd->tmp, AT_FDCWD, pd->path, RENAME_NOREPLACE) == 0)
        return EXIT_OK;
    int err = errno;
    if ((err == EINVAL || err == ENOSYS) && link(pd->tmp, pd->path) == 0)
        err = 0;
    unlink(pd->tmp);
    if (err) {
        fprintf(stderr, "keyless-seal: %s: %s%s\n", pd->path, strerror(err),
                err == EEXIST ? " (remove it first)" : "");
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* Writes the new file path (never over an existing one) of the given mode,
 * whole, flushed to disk with its name. */
int seal_write_new(const char *path, const void *p, size_t n, mode_t mode)
{
    pending pd;
    int rc = seal_write_tmp(path, p, n, mode, true, &pd);
    if (rc == EXIT_OK)
        rc = seal_commit(&pd);
    if (rc == EXIT_OK) {
        char *slash = strrchr(pd.tmp, '/');
        if (slash)
            slash[1] = 0; /* the directory of path */
        seal_sync_dir(slash ? pd.tmp : ".");
    }
    return rc;
}
