/* SPDX-License-Identifier: Apache-2.0 */
/* The fleet directory feeding the router (table_fleet.h): the directory's
 * thread builds each view's table and installs it, as a file reload does
 * (docs/FLEET.md "Routing from the directory"). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "router/router.h"
#include "router/table_fleet.h"

struct kl_rt_fleet_feed {
    kl_router *r;
    kl_fleet_dir *dir;
    kl_rt_fleet_cache cache; /* the directory thread's */
    char self[KL_FLEET_NAME_MAX + 1];
    bool sealed_only; /* a keys server's sealed keys only (table_fleet.h) */
    atomic_uint_fast64_t installs;
};

static void on_view(void *arg, const kl_fleet_view *v)
{
    kl_rt_fleet_feed *f = arg;
    kl_rt_table *t;
    char err[256] = "";
    const char *self = f->self[0] ? f->self : NULL;
    kl_status st =
        f->sealed_only
            ? kl_rt_table_from_fleet_sealed(v, self, &t, err, sizeof err)
            : kl_rt_table_from_fleet(v, self, &f->cache, &t, err, sizeof err);
    if (st != KL_OK) {
        kl_warn("fleet: routing table not rebuilt, the last one stays: %s",
                err);
        return;
    }
    if (kl_router_install_table(f->r, t) == KL_OK)
        atomic_fetch_add(&f->installs, 1);
}

kl_status kl_rt_fleet_feed_start(kl_router *r, const kl_fleet_dir_opts *o,
                                 const char *self, bool sealed_only,
                                 kl_rt_fleet_feed **out, char *err,
                                 size_t errlen)
{
    *out = NULL;
    kl_rt_fleet_feed *f = calloc(1, sizeof *f);
    KL_ENSURE(f != NULL, KL_E_NOMEM);
    f->r = r;
    snprintf(f->self, sizeof f->self, "%s", self ? self : "");
    f->sealed_only = sealed_only;
    kl_fleet_dir_opts d = *o;
    d.records_only = d.records_only || sealed_only; /* no SKIs needed */
    d.fn = on_view;
    d.arg = f;
    kl_status st = kl_fleet_dir_start(&d, &f->dir, err, errlen);
    if (st != KL_OK) {
        free(f);
        return st;
    }
    *out = f;
    return KL_OK;
}

void kl_rt_fleet_feed_stop(kl_rt_fleet_feed *f)
{
    if (!f)
        return;
    kl_fleet_dir_stop(f->dir); /* no view runs after this */
    kl_rt_fleet_cache_clear(&f->cache);
    free(f);
}

uint64_t kl_rt_fleet_feed_installs(kl_rt_fleet_feed *f)
{
    return atomic_load(&f->installs);
}

void kl_rt_fleet_feed_status(kl_rt_fleet_feed *f, kl_fleet_dir_status *s)
{
    kl_fleet_dir_status_get(f->dir, s);
}
