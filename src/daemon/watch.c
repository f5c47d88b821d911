/* SPDX-License-Identifier: Apache-2.0 */
/* inotify on key directories (watch.h). Watches are re-made at every
 * reload from the configuration, so a new subdirectory is watched after the
 * reload its creation caused. */
#include "daemon/watch.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"

#define MAX_DEPTH 32
#define EVENTS                                                                 \
    (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE |    \
     IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)

struct kl_watcher {
    int fd;
    int *wds;
    int n, cap;
};

kl_watcher *kl_watcher_new(void)
{
    kl_watcher *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->fd < 0) {
        kl_warn("inotify: %s; key directories are not watched (reload with "
                "SIGHUP)",
                strerror(errno));
        free(w);
        return NULL;
    }
    return w;
}

void kl_watcher_free(kl_watcher *w)
{
    if (!w)
        return;
    close(w->fd);
    free(w->wds);
    free(w);
}

int kl_watcher_fd(const kl_watcher *w)
{
    return w->fd;
}

int kl_watcher_count(const kl_watcher *w)
{
    return w ? w->n : 0;
}

static void add(kl_watcher *w, const char *dir, int depth)
{
    if (depth > MAX_DEPTH)
        return;
    int wd = inotify_add_watch(w->fd, dir, EVENTS | IN_ONLYDIR);
    if (wd < 0) {
        kl_warn("%s: cannot watch the key directory: %s%s", dir,
                strerror(errno),
                errno == ENOSPC ? " (raise fs.inotify.max_user_watches)" : "");
        return;
    }
    if (w->n == w->cap) {
        int cap = w->cap ? w->cap * 2 : 8;
        int *v = realloc(w->wds, (size_t)cap * sizeof *v);
        if (!v) {
            inotify_rm_watch(w->fd, wd);
            return;
        }
        w->wds = v;
        w->cap = cap;
    }
    w->wds[w->n++] = wd;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' &&
            (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        char path[4096];
        struct stat st;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) <
                sizeof path &&
            lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
            add(w, path, depth + 1);
    }
    closedir(d);
}

void kl_watcher_set(kl_watcher *w, const kl_config *cfg)
{
    if (!w)
        return;
    for (int i = 0; i < w->n; i++)
        inotify_rm_watch(w->fd, w->wds[i]);
    w->n = 0;
    kl_watcher_drain(w); /* IN_IGNORED of the removed watches */
    if (!cfg->watch_key_dirs)
        return;
    for (size_t i = 0; i < cfg->nstores; i++)
        if (cfg->stores[i].kind == KL_STORE_DIR)
            add(w, cfg->stores[i].path, 0);
}

bool kl_watcher_drain(kl_watcher *w)
{
    bool changed = false;
    /* aligned as inotify(7) asks */
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        ssize_t n = read(w->fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            if (ev->mask & (EVENTS | IN_Q_OVERFLOW))
                changed = true;
            p += sizeof *ev + ev->len;
        }
    }
    return changed;
}
