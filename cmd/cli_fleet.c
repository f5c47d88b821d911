/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-cli fleet (docs/FLEET.md "keyless-cli fleet"): the directory as
 * etcd holds it - servers, regions, roles, health, how long each has been
 * up, what their leases have left, key sets - joined, with --router, to a
 * router's own view (its /remotes: up or down and the measured latency of
 * each remote), a table for people or JSON with -json; regions (the
 * compliance-region codes); and publish-set, which publishes a key set
 * from key, certificate or SKI-list files. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "cli_fleet.h"
#include "fleet/publish.h"
#include "keyless/client.h"

enum { F_OK = 0, F_FAIL = 1, F_USAGE = 2, F_CONNECT = 3 };

typedef struct fopts {
    char endpoints[2048];
    const char *urls[KL_ETCD_MAX_ENDPOINTS];
    size_t n;
    const char *prefix, *ca, *cert, *key, *regions, *skis_file;
    const char *user, *password_file; /* etcd password auth */
    const char *router;               /* a router's metrics URL */
    bool json;
} fopts;

static int fusage(const char *msg, const char *arg)
{
    fprintf(stderr, "keyless-cli fleet: ");
    fprintf(stderr, msg, arg ? arg : "");
    fprintf(stderr, "\n(keyless-cli --help lists the fleet commands)\n");
    return F_USAGE;
}

static int parse(fopts *o, int argc, char **argv, int *first)
{
    static const struct option lo[] = {
        {"etcd", required_argument, NULL, 'e'},
        {"prefix", required_argument, NULL, 'p'},
        {"etcd-ca", required_argument, NULL, 'A'},
        {"etcd-cert", required_argument, NULL, 'C'},
        {"etcd-key", required_argument, NULL, 'K'},
        {"etcd-user", required_argument, NULL, 'U'},
        {"etcd-password-file", required_argument, NULL, 'P'},
        {"router", required_argument, NULL, 'R'},
        {"regions", required_argument, NULL, 'r'},
        {"skis", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {NULL, 0, NULL, 0}};
    memset(o, 0, sizeof *o);
    snprintf(o->endpoints, sizeof o->endpoints, "http://127.0.0.1:2379");
    o->prefix = "/keyless/";
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long_only(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'e':
            snprintf(o->endpoints, sizeof o->endpoints, "%s", optarg);
            break;
        case 'p': o->prefix = optarg; break;
        case 'A': o->ca = optarg; break;
        case 'C': o->cert = optarg; break;
        case 'K': o->key = optarg; break;
        case 'U': o->user = optarg; break;
        case 'P': o->password_file = optarg; break;
        case 'R': o->router = optarg; break;
        case 'r': o->regions = optarg; break;
        case 's': o->skis_file = optarg; break;
        case 'j': o->json = true; break;
        default:
            return fusage("unknown or incomplete option %s", argv[optind - 1]);
        }
    }
    char *save = NULL;
    for (char *t = strtok_r(o->endpoints, ", ", &save);
         t && o->n < KL_ETCD_MAX_ENDPOINTS; t = strtok_r(NULL, ", ", &save))
        o->urls[o->n++] = t;
    *first = optind;
    return F_OK;
}

static int client(const fopts *o, kl_etcd **c)
{
    kl_etcd_opts eo = {.endpoints = o->urls,
                       .n_endpoints = o->n,
                       .ca_file = o->ca,
                       .cert_file = o->cert,
                       .key_file = o->key,
                       .user = o->user,
                       .password_file = o->password_file,
                       .timeout_ms = 30000};
    char err[1024];
    if (kl_etcd_new(&eo, c, err, sizeof err) != KL_OK)
        return fusage("%s", err);
    return F_OK;
}

/* ---- a router's view (its /remotes) ----------------------------------- */

typedef struct body {
    char *data;
    size_t len;
} body;

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    body *b = arg;
    size_t add = size * n;
    if (b->len + add > (1u << 20))
        return 0;
    char *d = realloc(b->data, b->len + add + 1);
    if (!d)
        return 0;
    memcpy(d + b->len, p, add);
    b->len += add;
    d[b->len] = '\0';
    b->data = d;
    return add;
}

/* One line of /remotes: "name region up|down [0.412ms|-]" into routes
 * (name -> {region, state, latency_ms}); false when it is not one. */
static bool route_line(char *line, json_t *routes)
{
    char *save = NULL;
    char *name = strtok_r(line, " ", &save);
    char *region = strtok_r(NULL, " ", &save);
    char *state = strtok_r(NULL, " ", &save);
    char *lat = strtok_r(NULL, " ", &save);
    if (!name || !region || !state ||
        (strcmp(state, "up") != 0 && strcmp(state, "down") != 0))
        return false;
    json_t *latency = json_null();
    if (lat && strcmp(lat, "-") != 0) {
        char *end;
        double ms = strtod(lat, &end);
        if (end == lat || strcmp(end, "ms") != 0 || ms < 0)
            return false;
        json_decref(latency);
        latency = json_real(ms);
    }
    json_object_set_new(routes, name,
                        json_pack("{s:s,s:s,s:o}", "region", region, "state",
                                  state, "latency_ms", latency));
    return true;
}

/* GET <url>/remotes of a router's metrics port into routes. */
static int read_router(const char *url, json_t *routes)
{
    char full[2048];
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        n--;
    bool has = n >= 8 && !strncmp(url + n - 8, "/remotes", 8);
    snprintf(full, sizeof full, "%.*s%s", (int)n, url, has ? "" : "/remotes");
    CURL *h = curl_easy_init();
    if (!h)
        return F_FAIL;
    body b = {0};
    char detail[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, full);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, detail);
    CURLcode rc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    int ret = F_OK;
    if (rc != CURLE_OK) {
        fprintf(stderr, "keyless-cli fleet: --router %s: %s\n", full,
                detail[0] ? detail : curl_easy_strerror(rc));
        ret = F_CONNECT;
    } else if (code == 404) {
        fprintf(stderr,
                "keyless-cli fleet: --router %s: not found: that keylessd "
                "routes nothing (give a router's metrics address)\n",
                full);
        ret = F_CONNECT;
    } else if (code != 200 && code != 503) {
        /* 503: no remote up, the same body */
        fprintf(stderr, "keyless-cli fleet: --router %s: HTTP %ld\n", full,
                code);
        ret = F_CONNECT;
    } else {
        char *save = NULL;
        char *first = b.data ? strtok_r(b.data, "\n", &save) : NULL;
        if (!first || !strstr(first, "remote key servers up")) {
            fprintf(stderr,
                    "keyless-cli fleet: --router %s: not a keylessd's "
                    "/remotes answer\n",
                    full);
            ret = F_CONNECT;
        }
        for (char *l = first ? strtok_r(NULL, "\n", &save) : NULL;
             l && ret == F_OK; l = strtok_r(NULL, "\n", &save))
            if (!route_line(l, routes)) {
                fprintf(stderr,
                        "keyless-cli fleet: --router %s: a line that is not "
                        "\"name region up|down latency\": %.100s\n",
                        full, l);
                ret = F_CONNECT;
            }
    }
    free(b.data);
    return ret;
}

/* ---- listing --------------------------------------------------------- */

static json_t *server_json(kl_etcd *c, const kl_fleet_server *s, int64_t lease,
                           time_t now, json_t *routes)
{
    json_t *o = json_object(), *sets = json_array(), *attrs = json_object();
    for (size_t i = 0; i < s->nsets; i++)
        json_array_append_new(sets, json_string(s->sets[i]));
    for (size_t i = 0; i < s->nattrs; i++)
        json_object_set_new(attrs, s->attrs[i].key,
                            json_string(s->attrs[i].value));
    json_object_set_new(o, "name", json_string(s->name));
    json_object_set_new(o, "region", json_string(s->region));
    json_object_set_new(o, "attrs", attrs);
    json_object_set_new(o, "address", json_sprintf("%s:%u", s->host, s->port));
    json_object_set_new(o, "role", json_string(kl_fleet_role_name(s->role)));
    json_object_set_new(o, "health",
                        json_string(kl_fleet_health_name(s->health)));
    json_object_set_new(o, "priority", json_integer(s->priority));
    json_object_set_new(o, "sets", sets);
    json_object_set_new(o, "up_seconds",
                        s->started ? json_integer(now - s->started)
                                   : json_null());
    json_object_set_new(o, "lease", json_sprintf("%" PRIx64, (uint64_t)lease));
    /* what the lease has left (renewed every TTL/3: a server whose lease
     * runs low is not renewing) */
    int64_t ttl = 0, granted = 0;
    char err[512];
    bool live = lease != 0 && kl_etcd_lease_ttl(c, lease, &ttl, &granted, err,
                                                sizeof err) == KL_OK;
    json_object_set_new(o, "lease_ttl", live ? json_integer(ttl) : json_null());
    json_object_set_new(o, "lease_granted_ttl",
                        live ? json_integer(granted) : json_null());
    json_object_set_new(o, "version", json_string(s->version));
    if (routes) {
        /* the router's view: null when it is not one of its remotes */
        json_t *r = json_object_get(routes, s->name);
        json_object_set(o, "route", r ? r : json_null());
        json_object_set_new(r, "seen", json_true());
    }
    return o;
}

static json_t *set_json(const char *name, const kl_fleet_set_meta *m)
{
    json_t *o = json_object(), *r = json_array();
    for (size_t i = 0; i < m->nregions; i++)
        json_array_append_new(r, json_string(m->regions[i]));
    json_object_set_new(o, "name", json_string(name));
    json_object_set_new(o, "generation", json_integer(m->generation));
    json_object_set_new(o, "keys", json_integer(m->keys));
    json_object_set_new(o, "chunks", json_integer(m->chunks));
    json_object_set_new(o, "regions", m->any_region ? json_null() : r);
    if (m->any_region)
        json_decref(r);
    return o;
}

/* One key of dir/ into the two arrays; a bad one into "skipped". */
static void add_kv(const fopts *o, kl_etcd *c, const kl_etcd_kv *kv,
                   json_t *servers, json_t *sets, json_t *codes,
                   json_t *skipped, time_t now, json_t *routes)
{
    char name[KL_FLEET_NAME_MAX + 1], err[256] = "";
    kl_fleet_key_kind k =
        kl_fleet_key_parse(o->prefix, kv->key, kv->key_len, name);
    if (k == KL_FLEET_KEY_SERVER) {
        kl_fleet_server s;
        if (kl_fleet_server_parse(kv->value, kv->value_len, &s, err,
                                  sizeof err) == KL_OK) {
            json_array_append_new(servers,
                                  server_json(c, &s, kv->lease, now, routes));
            kl_fleet_server_clear(&s);
            return;
        }
    } else if (k == KL_FLEET_KEY_SET) {
        kl_fleet_set_meta m;
        if (kl_fleet_set_meta_parse(kv->value, kv->value_len, &m, err,
                                    sizeof err) == KL_OK) {
            json_array_append_new(sets, set_json(name, &m));
            kl_fleet_set_meta_clear(&m);
            return;
        }
    } else if (k == KL_FLEET_KEY_REGIONS) {
        kl_fleet_regions *r = malloc(sizeof *r);
        bool ok = r && kl_fleet_regions_parse(kv->value, kv->value_len, r, err,
                                              sizeof err) == KL_OK;
        for (int b = 1; ok && b < 256; b++)
            if (r->name[b][0]) {
                char kb[4];
                snprintf(kb, sizeof kb, "%d", b);
                json_object_set_new(codes, kb, json_string(r->name[b]));
            }
        free(r);
        if (ok)
            return;
    } else
        return;
    json_array_append_new(skipped, json_sprintf("%.*s: %s", (int)kv->key_len,
                                                (const char *)kv->key, err));
}

static void print_table(json_t *servers, json_t *sets, json_t *codes,
                        json_t *skipped, json_t *routes, json_t *others)
{
    printf("%-20s %-14s %-7s %-9s %-22s %8s %9s", "SERVER", "REGION", "ROLE",
           "HEALTH", "ADDRESS", "UP", "LEASE");
    if (routes)
        printf(" %-5s %10s", "ROUTE", "LATENCY");
    printf("  %s\n", "SETS");
    size_t i;
    json_t *s;
    json_array_foreach(servers, i, s)
    {
        char setlist[512] = "";
        size_t j;
        json_t *n;
        json_array_foreach(json_object_get(s, "sets"), j, n) snprintf(
            setlist + strlen(setlist), sizeof setlist - strlen(setlist), "%s%s",
            j ? "," : "", json_string_value(n));
        json_t *up = json_object_get(s, "up_seconds");
        char upt[32] = "-";
        if (json_is_integer(up))
            snprintf(upt, sizeof upt, "%llds",
                     (long long)json_integer_value(up));
        char lease[48] = "-";
        json_t *lt = json_object_get(s, "lease_ttl");
        if (json_is_integer(lt))
            snprintf(lease, sizeof lease, "%lld/%llds",
                     (long long)json_integer_value(lt),
                     (long long)json_integer_value(
                         json_object_get(s, "lease_granted_ttl")));
        printf("%-20s %-14s %-7s %-9s %-22s %8s %9s",
               json_string_value(json_object_get(s, "name")),
               json_string_value(json_object_get(s, "region")),
               json_string_value(json_object_get(s, "role")),
               json_string_value(json_object_get(s, "health")),
               json_string_value(json_object_get(s, "address")), upt, lease);
        if (routes) {
            json_t *r = json_object_get(s, "route");
            json_t *ms = json_object_get(r, "latency_ms");
            char lat[32] = "-";
            if (json_is_real(ms))
                snprintf(lat, sizeof lat, "%.2fms", json_real_value(ms));
            printf(" %-5s %10s",
                   json_is_object(r)
                       ? json_string_value(json_object_get(r, "state"))
                       : "-",
                   lat);
        }
        printf("  %s\n", setlist);
    }
    /* remotes the router holds that the directory does not list (a
     * table file's, or a record gone since) */
    json_array_foreach(others, i, s)
    {
        json_t *ms = json_object_get(s, "latency_ms");
        char lat[32] = "-";
        if (json_is_real(ms))
            snprintf(lat, sizeof lat, "%.2fms", json_real_value(ms));
        printf("%-20s %-14s %-7s %-9s %-22s %8s %9s %-5s %10s  %s\n",
               json_string_value(json_object_get(s, "name")),
               json_string_value(json_object_get(s, "region")), "-", "-",
               "(not in the directory)", "-", "-",
               json_string_value(json_object_get(s, "state")), lat, "");
    }
    printf("\n%-20s %10s %10s %7s  %s\n", "KEY SET", "GENERATION", "KEYS",
           "CHUNKS", "REGIONS");
    json_array_foreach(sets, i, s)
    {
        char rl[512] = "any";
        json_t *r = json_object_get(s, "regions");
        if (json_is_array(r)) {
            rl[0] = 0;
            size_t j;
            json_t *n;
            json_array_foreach(r, j, n)
                snprintf(rl + strlen(rl), sizeof rl - strlen(rl), "%s%s",
                         j ? "," : "", json_string_value(n));
        }
        printf("%-20s %10lld %10lld %7lld  %s\n",
               json_string_value(json_object_get(s, "name")),
               (long long)json_integer_value(json_object_get(s, "generation")),
               (long long)json_integer_value(json_object_get(s, "keys")),
               (long long)json_integer_value(json_object_get(s, "chunks")), rl);
    }
    const char *b;
    json_t *r;
    if (json_object_size(codes))
        printf("\nREGION CODES (tag 0x17)\n");
    json_object_foreach(codes, b, r)
        printf("  %s = %s\n", b, json_string_value(r));
    json_array_foreach(skipped, i, s)
        printf("skipped %s\n", json_string_value(s));
}

static int cmd_list(const fopts *o)
{
    kl_etcd *c;
    int rc = client(o, &c);
    if (rc != F_OK)
        return rc;
    char dir[512];
    if (kl_fleet_key_dir(o->prefix, dir, sizeof dir) != KL_OK)
        return fusage("--prefix %s is too long", o->prefix);
    json_t *servers = json_array(), *sets = json_array(),
           *codes = json_object(), *skipped = json_array(),
           *routes = o->router ? json_object() : NULL, *others = json_array();
    if (routes && (rc = read_router(o->router, routes)) != F_OK) {
        json_decref(routes);
        routes = NULL;
    }
    kl_etcd_page pg = {0};
    uint8_t *after = NULL;
    size_t after_len = 0;
    int64_t at = 0;
    char err[1024] = "";
    time_t now = time(NULL);
    for (; rc == F_OK;) {
        kl_status st = kl_etcd_range(c, dir, strlen(dir), after, after_len, 500,
                                     at, &pg, err, sizeof err);
        free(after);
        after = NULL;
        if (st != KL_OK) {
            fprintf(stderr, "keyless-cli fleet: %s\n", err);
            rc = F_CONNECT;
            break;
        }
        at = at ? at : pg.revision;
        for (size_t i = 0; i < pg.n; i++)
            add_kv(o, c, &pg.kvs[i], servers, sets, codes, skipped, now,
                   routes);
        bool more = pg.more && pg.n > 0;
        if (more) {
            after_len = pg.kvs[pg.n - 1].key_len;
            after = malloc(after_len);
            memcpy(after, pg.kvs[pg.n - 1].key, after_len);
        }
        kl_etcd_page_clear(&pg);
        if (!more)
            break;
    }
    const char *rn;
    json_t *rv;
    json_object_foreach(routes, rn, rv)
    {
        if (json_object_get(rv, "seen")) {
            json_object_del(rv, "seen");
            continue;
        }
        json_t *x = json_deep_copy(rv);
        json_object_set_new(x, "name", json_string(rn));
        json_array_append_new(others, x);
    }
    if (rc == F_OK) {
        if (o->json) {
            json_t *all =
                json_pack("{s:I,s:O,s:O,s:O,s:O}", "revision", (json_int_t)at,
                          "servers", servers, "sets", sets, "region_codes",
                          codes, "skipped", skipped);
            if (routes) {
                json_object_set_new(all, "router", json_string(o->router));
                json_object_set(all, "router_only", others);
            }
            json_dumpf(all, stdout, JSON_INDENT(2));
            putchar('\n');
            json_decref(all);
        } else
            print_table(servers, sets, codes, skipped, routes, others);
    }
    json_decref(routes);
    json_decref(others);
    json_decref(codes);
    json_decref(servers);
    json_decref(sets);
    json_decref(skipped);
    kl_etcd_free(c);
    return rc;
}

/* ---- regions --------------------------------------------------------- */

/* <prefix>dir/regions: the compliance-region codes (tag 0x17) as the
 * routers map them. */
static int cmd_regions(const fopts *o)
{
    char key[512], err[1024] = "";
    if (kl_fleet_key_regions(o->prefix, key, sizeof key) != KL_OK)
        return fusage("--prefix %s is too long", o->prefix);
    kl_etcd *c;
    int rc = client(o, &c);
    if (rc != F_OK)
        return rc;
    kl_etcd_kv kv;
    int64_t rev = 0;
    kl_status st = kl_etcd_get(c, key, strlen(key), &kv, &rev, err, sizeof err);
    kl_fleet_regions *r = calloc(1, sizeof *r);
    bool present = st == KL_OK;
    if (st != KL_OK && st != KL_E_NOT_FOUND) {
        fprintf(stderr, "keyless-cli fleet: %s\n", err);
        rc = F_CONNECT;
    } else if (!r) {
        rc = F_FAIL;
    } else if (present && kl_fleet_regions_parse(kv.value, kv.value_len, r, err,
                                                 sizeof err) != KL_OK) {
        fprintf(stderr,
                "keyless-cli fleet: %s does not parse (routers keep the "
                "codes they hold): %s\n",
                key, err);
        rc = F_FAIL;
    }
    if (rc == F_OK) {
        /* byte 1 is fedramp-high unless the directory maps it */
        bool default1 = !r->name[1][0];
        if (default1)
            snprintf(r->name[1], sizeof r->name[1], "fedramp-high");
        json_t *codes = json_object();
        for (int b = 1; b < 256; b++)
            if (r->name[b][0]) {
                char kb[4];
                snprintf(kb, sizeof kb, "%d", b);
                json_object_set_new(codes, kb, json_string(r->name[b]));
            }
        if (o->json) {
            json_t *all =
                json_pack("{s:I,s:s,s:b,s:o}", "revision", (json_int_t)rev,
                          "key", key, "present", present, "codes", codes);
            json_dumpf(all, stdout, JSON_INDENT(2));
            putchar('\n');
            json_decref(all);
        } else {
            printf("%-6s %s\n", "CODE", "REGION");
            const char *b;
            json_t *v;
            json_object_foreach(codes, b, v)
                printf("%-6s %s%s\n", b, json_string_value(v),
                       !strcmp(b, "1") && default1 ? " (the default)" : "");
            if (!present)
                printf("(%s is absent: only the default)\n", key);
            json_decref(codes);
        }
    }
    if (present)
        kl_etcd_kv_clear(&kv);
    free(r);
    kl_etcd_free(c);
    return rc;
}

/* ---- publish-set ----------------------------------------------------- */

/* Appends the SKIs of a text file (one 40-hex SKI a line; # comments). */
static int read_ski_list(const char *path, uint8_t **skis, size_t *n,
                         size_t *cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return fusage("--skis %s: cannot open", path);
    char line[256];
    size_t lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line + strspn(line, " \t");
        p[strcspn(p, " \t\r\n#")] = 0;
        if (!*p)
            continue;
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 1024;
            *skis = realloc(*skis, *cap * KL_FLEET_SKI_LEN);
        }
        if (strlen(p) != 40 || !kl_cli_parse_ski(p, *skis + *n * 20)) {
            fclose(f);
            fprintf(stderr,
                    "keyless-cli fleet: %s:%zu: \"%s\" is not an SKI; write "
                    "40 hex digits a line\n",
                    path, lineno, p);
            return F_USAGE;
        }
        (*n)++;
    }
    fclose(f);
    return F_OK;
}

static int cmd_publish(const fopts *o, int n, char **files)
{
    if (n < 1)
        return fusage("publish-set needs a set name%s", NULL);
    const char *set = files[0];
    uint8_t *skis = NULL;
    size_t count = 0, cap = 0;
    int rc = F_OK;
    if (o->skis_file)
        rc = read_ski_list(o->skis_file, &skis, &count, &cap);
    for (int i = 1; i < n && rc == F_OK; i++) {
        if (count == cap) {
            cap = cap ? cap * 2 : 1024;
            skis = realloc(skis, cap * KL_FLEET_SKI_LEN);
        }
        char err[512];
        if (!kl_cli_file_ski(files[i], skis + count * 20, err, sizeof err)) {
            fprintf(stderr, "keyless-cli fleet: %s\n", err);
            rc = F_USAGE;
        } else
            count++;
    }
    char regions[KL_FLEET_MAX_REGIONS][KL_FLEET_NAME_MAX + 1];
    size_t nregions = 0;
    if (rc == F_OK && o->regions) {
        char buf[4096];
        snprintf(buf, sizeof buf, "%s", o->regions);
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t && rc == F_OK;
             t = strtok_r(NULL, ",", &save)) {
            if (nregions == KL_FLEET_MAX_REGIONS ||
                !kl_fleet_name_ok(t, strlen(t)))
                rc = fusage("--regions: \"%s\" is not a region name", t);
            else
                snprintf(regions[nregions++], sizeof regions[0], "%s", t);
        }
    }
    kl_etcd *c = NULL;
    if (rc == F_OK)
        rc = client(o, &c);
    if (rc == F_OK) {
        kl_fleet_publish p = {.prefix = o->prefix,
                              .set = set,
                              .skis = skis,
                              .n = count,
                              .regions = (const char(*)[KL_FLEET_NAME_MAX + 1])
                                  regions,
                              .nregions = nregions};
        kl_fleet_publish_result res;
        char err[1024] = "";
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (kl_fleet_publish_set(c, &p, &res, err, sizeof err) != KL_OK) {
            fprintf(stderr, "FAIL: publish-set %s: %s\n", set, err);
            rc = F_FAIL;
        } else {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
                        (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
            printf("OK: key set %s generation %" PRId64 ": %" PRId64
                   " keys in %" PRIu32 " chunks, %.0f ms\n",
                   set, res.generation, res.keys, res.chunks, ms);
        }
    }
    kl_etcd_free(c);
    free(skis);
    return rc;
}

int kl_cli_fleet(int argc, char **argv)
{
    fopts o;
    int first = argc;
    int rc = parse(&o, argc, argv, &first);
    if (rc != F_OK)
        return rc;
    if (o.prefix[0] == 0 || o.prefix[strlen(o.prefix) - 1] != '/')
        return fusage("--prefix %s must end with '/'", o.prefix);
    if (first < argc && !strcmp(argv[first], "publish-set"))
        return cmd_publish(&o, argc - first - 1, argv + first + 1);
    if (first < argc && !strcmp(argv[first], "regions"))
        return cmd_regions(&o);
    if (first < argc && strcmp(argv[first], "servers") != 0)
        return fusage("unknown fleet command \"%s\": servers (the default), "
                      "regions or publish-set",
                      argv[first]);
    return cmd_list(&o);
}
