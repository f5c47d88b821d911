/* SPDX-License-Identifier: Apache-2.0 */
/* The fleet's options turned into registration and the directory feed
 * (daemon_fleet.h, docs/FLEET.md "Options"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>

#include "core/time.h"
#include "daemon/daemon_fleet.h"
#include "daemon/daemon_seal.h"
#include "daemon/settings.h"
#include "fleet/member.h"
#include "router/table_fleet.h"
#include "seal/hpke.h"

struct kl_dfleet {
    kl_fleet_member *member;
    kl_rt_fleet_feed *feed;
    kl_fleet_server record; /* for the draining update */
    uint64_t drain_delay_ns;
};

/* The endpoints split at commas (and spaces), in urls[] pointing into buf. */
typedef struct endpoints {
    char buf[4096];
    const char *urls[KL_ETCD_MAX_ENDPOINTS];
    size_t n;
    bool too_many;
} endpoints;

static void split_endpoints(const char *list, endpoints *e)
{
    memset(e, 0, sizeof *e);
    snprintf(e->buf, sizeof e->buf, "%s", list ? list : "");
    char *save = NULL;
    for (char *t = strtok_r(e->buf, ", ", &save); t;
         t = strtok_r(NULL, ", ", &save)) {
        if (e->n == KL_ETCD_MAX_ENDPOINTS) {
            e->too_many = true;
            break;
        }
        e->urls[e->n++] = t;
    }
}

static const char *or_null(const char *s)
{
    return s && *s ? s : NULL;
}

static kl_etcd_opts etcd_opts(const kl_config *cfg, const endpoints *e)
{
    return (kl_etcd_opts){.endpoints = e->urls,
                          .n_endpoints = e->n,
                          .ca_file = or_null(cfg->fleet_etcd_ca),
                          .cert_file = or_null(cfg->fleet_etcd_cert),
                          .key_file = or_null(cfg->fleet_etcd_key),
                          .user = or_null(cfg->fleet_etcd_user),
                          .password_file =
                              or_null(cfg->fleet_etcd_password_file),
                          .password_any_mode = cfg->allow_group_readable_keys};
}

bool kl_dfleet_configured(const kl_config *cfg)
{
    return cfg->fleet_etcd_endpoints && *cfg->fleet_etcd_endpoints;
}

/* Remote connections only where the role says so: a registered server
 * of role keys answers for its own keys and forwards nothing; egress and
 * router servers, and readers that do not register, route. */
bool kl_dfleet_routes(const kl_config *cfg)
{
    const char *table = kl_settings_of_c(cfg)->router.table_file;
    if (!kl_dfleet_configured(cfg) || (table && *table))
        return false;
    kl_fleet_role role = KL_FLEET_ROLE_KEYS;
    return !or_null(cfg->fleet_name) ||
           (kl_fleet_role_parse(cfg->fleet_role ? cfg->fleet_role : "",
                                &role) &&
            role != KL_FLEET_ROLE_KEYS);
}

bool kl_dfleet_routes_sealed(const kl_config *cfg)
{
    const char *table = kl_settings_of_c(cfg)->router.table_file;
    kl_fleet_role role = KL_FLEET_ROLE_KEYS;
    return kl_dfleet_configured(cfg) && !(table && *table) &&
           or_null(cfg->fleet_name) && or_null(cfg->sealing_key) &&
           kl_fleet_role_parse(cfg->fleet_role ? cfg->fleet_role : "", &role) &&
           role == KL_FLEET_ROLE_KEYS;
}

static bool wildcard(const char *a)
{
    return !a || !*a || !strcmp(a, "0.0.0.0") || !strcmp(a, "::") ||
           !strcmp(a, "[::]");
}

/* fleet_attributes "k=v,k=v" into r; the bad element in err. */
static bool parse_attrs(const char *list, kl_fleet_server *r, char *err,
                        size_t errlen)
{
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", list ? list : "");
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t;
         t = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(t, '=');
        if (!eq || r->nattrs == KL_FLEET_ATTR_MAX ||
            (size_t)(eq - t) > KL_FLEET_ATTR_KEY ||
            strlen(eq + 1) > KL_FLEET_ATTR_VAL) {
            kl_errf(err, errlen,
                    "\"%.80s\" is not name=value (at most 16, names up to 32 "
                    "bytes, values up to 64)",
                    t);
            return false;
        }
        kl_fleet_attr *a = &r->attrs[r->nattrs++];
        snprintf(a->key, sizeof a->key, "%.*s", (int)(eq - t), t);
        snprintf(a->value, sizeof a->value, "%s", eq + 1);
    }
    return true;
}

/* With sealing_key: its public half and the attributes sealing policies
 * are judged by (docs/FLEET.md "The server record"): sealing_attributes,
 * or without them region=<fleet_region> and each fleet_attributes pair
 * the policy grammar can name - what a sealer choosing recipients from
 * the directory and a router choosing a remote for a sealed key read. */
static bool add_sealing(const kl_config *cfg, kl_fleet_server *r, char *err,
                        size_t errlen)
{
    if (!or_null(cfg->sealing_key))
        return true;
    kl_daemon_seal ds;
    kl_keystore_opts ko;
    memset(&ko, 0, sizeof ko);
    if (!kl_daemon_seal_prepare(cfg, &ds, &ko)) { /* logged the problem */
        kl_errf(err, errlen,
                "sealing_key / sealing_attributes: cannot publish the "
                "sealing key (above); fix the option");
        return false;
    }
    uint8_t pk[KL_HPKE_MAX_ENC];
    size_t n = 0;
    uint16_t kem = KL_HPKE_KEM_X25519;
    if (kl_hpke_public(kem, ds.key, pk, sizeof pk, &n) != KL_OK) {
        kem = KL_HPKE_KEM_P256;
        if (kl_hpke_public(kem, ds.key, pk, sizeof pk, &n) != KL_OK)
            n = 0;
    }
    ERR_clear_error();
    char why[256] = "";
    bool ok = n && kl_fleet_server_set_sealing(r, kem, pk, n, why,
                                               sizeof why) == KL_OK;
    for (size_t i = 0; ok && i < ds.n_attrs; i++)
        ok = kl_fleet_server_add_seal_attr(r, ds.attrs[i].name,
                                           ds.attrs[i].value, why,
                                           sizeof why) == KL_OK;
    if (ok && !ds.n_attrs) {
        if (kl_fleet_seal_value_ok(r->region, strlen(r->region)))
            ok = kl_fleet_server_add_seal_attr(r, "region", r->region, why,
                                               sizeof why) == KL_OK;
        for (size_t i = 0; ok && i < r->nattrs; i++) {
            const kl_fleet_attr *a = &r->attrs[i];
            if (kl_fleet_seal_name_ok(a->key, strlen(a->key)) &&
                kl_fleet_seal_value_ok(a->value, strlen(a->value)) &&
                strcmp(a->key, "region") != 0)
                ok = kl_fleet_server_add_seal_attr(r, a->key, a->value, why,
                                                   sizeof why) == KL_OK;
        }
    }
    kl_daemon_seal_release(&ds);
    if (!ok)
        kl_errf(err, errlen, "sealing_key: %s; fix the option",
                why[0] ? why : "no public key");
    return ok;
}

/* This server's record from the options; false with the option and the
 * fix in err. */
static bool make_record(const kl_config *cfg, kl_fleet_server *r, char *err,
                        size_t errlen)
{
    memset(r, 0, sizeof *r);
    const kl_server_opts *so = &kl_settings_of_c(cfg)->server;
    const char *host = or_null(cfg->fleet_advertise_host);
    if (!host && wildcard(so->listen_address)) {
        kl_errf(err, errlen,
                "fleet_advertise_host: unset while listen_address is a "
                "wildcard (%s); set it to the address other servers reach "
                "this one at",
                so->listen_address ? so->listen_address : "");
        return false;
    }
    snprintf(r->name, sizeof r->name, "%s", cfg->fleet_name);
    snprintf(r->region, sizeof r->region, "%s",
             cfg->fleet_region ? cfg->fleet_region : "");
    snprintf(r->host, sizeof r->host, "%s", host ? host : so->listen_address);
    r->port = (uint16_t)(cfg->fleet_advertise_port ? cfg->fleet_advertise_port
                                                   : so->port);
    r->priority = cfg->fleet_priority;
    r->started = (int64_t)time(NULL);
    snprintf(r->version, sizeof r->version, "keylessd");
    if (!kl_fleet_role_parse(cfg->fleet_role ? cfg->fleet_role : "",
                             &r->role)) {
        kl_errf(err, errlen,
                "fleet_role: \"%s\" is not a role; write keys, egress or "
                "router",
                cfg->fleet_role ? cfg->fleet_role : "");
        return false;
    }
    char why[256] = "";
    if (!parse_attrs(cfg->fleet_attributes, r, why, sizeof why)) {
        kl_errf(err, errlen,
                "fleet_attributes: %s; write e.g. country=US,dc=sfo", why);
        return false;
    }
    char sets[4096];
    snprintf(sets, sizeof sets, "%s",
             cfg->fleet_key_sets ? cfg->fleet_key_sets : "");
    char *save = NULL;
    for (char *t = strtok_r(sets, ", ", &save); t;
         t = strtok_r(NULL, ", ", &save))
        if (kl_fleet_server_add_set(r, t, why, sizeof why) != KL_OK) {
            kl_errf(err, errlen, "fleet_key_sets: %s; fix the name", why);
            return false;
        }
    if (!add_sealing(cfg, r, err, errlen))
        return false;
    if (kl_fleet_server_check(r, why, sizeof why) != KL_OK) {
        /* "server record: bad "region" (...)": name the option */
        const char *f = strchr(why, '"');
        char field[32] = "";
        if (f)
            snprintf(field, sizeof field, "%.*s", (int)strcspn(f + 1, "\""),
                     f + 1);
        kl_errf(err, errlen, "fleet_%s: %s; fix the option",
                !strcmp(field, "host")   ? "advertise_host"
                : !strcmp(field, "port") ? "advertise_port"
                : field[0]               ? field
                                         : "name",
                why);
        return false;
    }
    return true;
}

void kl_dfleet_check(const kl_config *cfg, kl_problems *p)
{
    if (!kl_dfleet_configured(cfg))
        return;
    const char *where = cfg->loaded_file ? cfg->loaded_file : "options";
    endpoints e;
    split_endpoints(cfg->fleet_etcd_endpoints, &e);
    char err[1024] = "";
    kl_etcd *c = NULL;
    kl_etcd_opts o = etcd_opts(cfg, &e);
    /* auth's options named on their own, before the client is made */
    if (!o.user != !o.password_file) {
        kl_error("%s: %s: set with%s %s; set both (or neither: no etcd "
                 "auth)",
                 where, o.user ? "fleet_etcd_user" : "fleet_etcd_password_file",
                 "out",
                 o.user ? "fleet_etcd_password_file" : "fleet_etcd_user");
        p->errors++;
        o.user = o.password_file = NULL;
    } else if (o.password_file &&
               kl_etcd_password_check(o.password_file, o.password_any_mode, err,
                                      sizeof err) != KL_OK) {
        kl_error("%s: fleet_etcd_password_file: %s", where, err);
        p->errors++;
        o.user = o.password_file = NULL;
    }
    err[0] = 0;
    if (e.too_many || e.n == 0)
        snprintf(err, sizeof err, "%s endpoints; give 1 to %d URLs",
                 e.n ? "too many" : "no", KL_ETCD_MAX_ENDPOINTS);
    else if (kl_etcd_new(&o, &c, err, sizeof err) == KL_OK)
        err[0] = 0;
    kl_etcd_free(c);
    if (err[0]) {
        kl_error("%s: fleet_etcd_endpoints: %s", where, err);
        p->errors++;
    }
    const char *pre = cfg->fleet_prefix ? cfg->fleet_prefix : "";
    if (!*pre || pre[strlen(pre) - 1] != '/' || strlen(pre) > 200) {
        kl_error("%s: fleet_prefix: \"%s\" must end with '/' (at most 200 "
                 "bytes); write e.g. /keyless/",
                 where, pre);
        p->errors++;
    }
    if (!or_null(cfg->fleet_name)) {
        if (cfg->fleet_region || cfg->fleet_key_sets)
            kl_warn("%s: fleet_region and fleet_key_sets take effect only with "
                    "fleet_name: this keylessd does not register",
                    where);
        return;
    }
    kl_fleet_server r;
    if (!make_record(cfg, &r, err, sizeof err)) {
        kl_error("%s: %s", where, err);
        p->errors++;
    }
    kl_fleet_server_clear(&r);
}

kl_dfleet *kl_dfleet_start(const kl_config *cfg, kl_router *router, bool *ok)
{
    *ok = true;
    if (!kl_dfleet_configured(cfg))
        return NULL;
    kl_problems p = {0};
    kl_dfleet_check(cfg, &p);
    if (p.errors) {
        *ok = false;
        return NULL;
    }
    kl_dfleet *f = calloc(1, sizeof *f);
    if (!f) {
        *ok = false;
        return NULL;
    }
    f->drain_delay_ns = cfg->fleet_drain_delay_ns;
    endpoints e;
    split_endpoints(cfg->fleet_etcd_endpoints, &e);
    char err[1024] = "";
    if (or_null(cfg->fleet_name)) {
        (void)make_record(cfg, &f->record, err, sizeof err); /* checked */
        kl_fleet_member_opts mo = {.etcd = etcd_opts(cfg, &e),
                                   .prefix = cfg->fleet_prefix,
                                   .ttl_s = cfg->fleet_lease_ttl,
                                   .record = &f->record};
        if (kl_fleet_member_start(&mo, &f->member, err, sizeof err) != KL_OK) {
            kl_error("fleet: %s; not starting", err);
            *ok = false;
        }
    }
    bool sealed_only = !kl_dfleet_routes(cfg) && kl_dfleet_routes_sealed(cfg);
    if (*ok && router && (kl_dfleet_routes(cfg) || sealed_only)) {
        kl_fleet_dir_opts d = {.etcd = etcd_opts(cfg, &e),
                               .prefix = cfg->fleet_prefix};
        if (kl_rt_fleet_feed_start(router, &d, or_null(cfg->fleet_name),
                                   sealed_only, &f->feed, err,
                                   sizeof err) != KL_OK) {
            kl_error("fleet: directory: %s; not starting", err);
            *ok = false;
        }
    }
    if (!*ok) {
        kl_dfleet_stop(f);
        return NULL;
    }
    kl_info("fleet: etcd %s, prefix %s%s%s%s", cfg->fleet_etcd_endpoints,
            cfg->fleet_prefix, f->member ? ", registering as " : "",
            f->member ? cfg->fleet_name : "",
            !f->feed      ? ""
            : sealed_only ? ", routing its sealed keys held elsewhere from "
                            "the directory"
                          : ", routing from the directory");
    return f;
}

void kl_dfleet_scrape(kl_dfleet *f, kl_metrics *m)
{
    if (!f || !m)
        return;
    kl_metrics_fleet mf = {0};
    if (f->feed) {
        kl_fleet_dir_status ds;
        kl_rt_fleet_feed_status(f->feed, &ds);
        mf.reading = true;
        mf.in_sync = ds.in_sync;
        mf.sync_age_s = (double)ds.sync_age_ms / (double)KL_MS_PER_S;
        mf.servers = ds.nservers;
    }
    if (f->member) {
        kl_fleet_member_status ms;
        kl_fleet_member_status_get(f->member, &ms);
        mf.registering = true;
        mf.registered = ms.state == KL_FLEET_MEMBER_REGISTERED;
        mf.registrations = ms.registrations;
    }
    kl_metrics_set_fleet(m, &mf);
}

void kl_dfleet_health(kl_dfleet *f, bool ok, size_t nkeys)
{
    if (!f || !f->member || f->record.health == KL_FLEET_HEALTH_DRAINING)
        return;
    kl_fleet_health h =
        ok && (nkeys > 0 || f->record.role != KL_FLEET_ROLE_KEYS)
            ? KL_FLEET_HEALTH_OK
            : KL_FLEET_HEALTH_DEGRADED;
    if (h == f->record.health)
        return;
    f->record.health = h;
    char err[256];
    if (kl_fleet_member_update(f->member, &f->record, err, sizeof err) != KL_OK)
        kl_warn("fleet: cannot update this server's health: %s", err);
    else
        kl_info("fleet: this server's record says %s%s",
                kl_fleet_health_name(h),
                h == KL_FLEET_HEALTH_DEGRADED
                    ? (nkeys ? " (the last reload had a problem)"
                             : " (no key loaded)")
                    : "");
}

void kl_dfleet_draining(kl_dfleet *f)
{
    if (!f || !f->member)
        return;
    /* routers choose this server last from now on; its record goes (the
     * lease revoked) at kl_dfleet_stop, once it has answered what it has */
    f->record.health = KL_FLEET_HEALTH_DRAINING;
    char err[256];
    if (kl_fleet_member_update(f->member, &f->record, err, sizeof err) != KL_OK)
        kl_warn("fleet: cannot mark this server draining: %s", err);
}

uint64_t kl_dfleet_drain_delay(const kl_dfleet *f)
{
    return f && f->member ? f->drain_delay_ns : 0;
}

void kl_dfleet_stop(kl_dfleet *f)
{
    if (!f)
        return;
    kl_rt_fleet_feed_stop(f->feed); /* before the router goes */
    kl_fleet_member_stop(f->member);
    kl_fleet_server_clear(&f->record);
    free(f);
}
