/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the fleet directory's records (fleet/record.h):
 * values any server or operator can write under the fleet prefix, read by
 * every router. Input: one byte choosing the parser (server record, set
 * meta, key name, region codes), then the bytes. Checked: a failure leaves
 * nothing allocated and a terminated message; a success gives a record that
 * passes kl_fleet_server_check and encodes to JSON that parses back to
 * the same fields, the sealing key and attributes included (set meta: the
 * same generation, count and digest). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/record.h"

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            abort();                                                           \
    } while (0)

static void server(const uint8_t *d, size_t n)
{
    kl_fleet_server s, again;
    char err[256];
    if (kl_fleet_server_parse(d, n, &s, err, sizeof err) != KL_OK) {
        CHECK(strnlen(err, sizeof err) < sizeof err);
        CHECK(s.sets == NULL && s.nsets == 0);
        CHECK(s.seal_attrs == NULL && s.n_seal_attrs == 0 && !s.seal_kem);
        return;
    }
    CHECK(kl_fleet_server_check(&s, err, sizeof err) == KL_OK);
    char *json;
    size_t len;
    CHECK(kl_fleet_server_encode(&s, &json, &len) == KL_OK);
    CHECK(kl_fleet_server_parse((const uint8_t *)json, len, &again, err,
                                sizeof err) == KL_OK);
    CHECK(!strcmp(s.name, again.name) && !strcmp(s.host, again.host) &&
          s.port == again.port && s.role == again.role &&
          s.nsets == again.nsets && s.nattrs == again.nattrs);
    for (size_t i = 0; i < s.nsets; i++)
        CHECK(!strcmp(s.sets[i], again.sets[i]));
    /* the sealing key and attributes (values of one name stay in order) */
    CHECK(s.seal_kem == again.seal_kem && s.seal_pk_len == again.seal_pk_len &&
          !memcmp(s.seal_pk, again.seal_pk, s.seal_pk_len) &&
          s.n_seal_attrs == again.n_seal_attrs);
    for (size_t i = 0; i < s.n_seal_attrs; i++) {
        CHECK(kl_fleet_seal_name_ok(s.seal_attrs[i].name,
                                    strlen(s.seal_attrs[i].name)));
        CHECK(kl_fleet_seal_value_ok(s.seal_attrs[i].value,
                                     strlen(s.seal_attrs[i].value)));
        bool found = false;
        for (size_t j = 0; j < again.n_seal_attrs; j++)
            found |= !strcmp(s.seal_attrs[i].name, again.seal_attrs[j].name) &&
                     !strcmp(s.seal_attrs[i].value, again.seal_attrs[j].value);
        CHECK(found);
    }
    kl_fleet_server copy;
    memset(&copy, 0, sizeof copy);
    CHECK(kl_fleet_server_copy(&copy, &s) == KL_OK);
    CHECK(copy.n_seal_attrs == s.n_seal_attrs && copy.nsets == s.nsets);
    kl_fleet_server_clear(&copy);
    free(json);
    kl_fleet_server_clear(&again);
    kl_fleet_server_clear(&s);
}

static void meta(const uint8_t *d, size_t n)
{
    kl_fleet_set_meta m, again;
    char err[256];
    if (kl_fleet_set_meta_parse(d, n, &m, err, sizeof err) != KL_OK) {
        CHECK(strnlen(err, sizeof err) < sizeof err);
        CHECK(m.regions == NULL);
        return;
    }
    char *json;
    size_t len;
    CHECK(kl_fleet_set_meta_encode(&m, &json, &len) == KL_OK);
    CHECK(kl_fleet_set_meta_parse((const uint8_t *)json, len, &again, err,
                                  sizeof err) == KL_OK);
    CHECK(m.generation == again.generation && m.keys == again.keys &&
          m.chunks == again.chunks && m.nregions == again.nregions &&
          !memcmp(m.sha256, again.sha256, 32));
    free(json);
    kl_fleet_set_meta_clear(&again);
    kl_fleet_set_meta_clear(&m);
}

static void regions(const uint8_t *d, size_t n)
{
    kl_fleet_regions r, again;
    char err[256];
    if (kl_fleet_regions_parse(d, n, &r, err, sizeof err) != KL_OK) {
        CHECK(strnlen(err, sizeof err) < sizeof err);
        return;
    }
    CHECK(r.name[0][0] == 0);
    char *json;
    size_t len;
    CHECK(kl_fleet_regions_encode(&r, &json, &len) == KL_OK);
    CHECK(kl_fleet_regions_parse((const uint8_t *)json, len, &again, err,
                                 sizeof err) == KL_OK);
    CHECK(!memcmp(&r, &again, sizeof r));
    free(json);
}

static void key(const uint8_t *d, size_t n)
{
    char name[KL_FLEET_NAME_MAX + 1];
    kl_fleet_key_kind k = kl_fleet_key_parse("/keyless/", d, n, name);
    if (k == KL_FLEET_KEY_REGIONS)
        CHECK(name[0] == 0); /* one key, no name */
    else if (k != KL_FLEET_KEY_OTHER)
        CHECK(kl_fleet_name_ok(name, strlen(name)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    switch (data[0] % 4) {
    case 0: server(data + 1, size - 1); break;
    case 1: meta(data + 1, size - 1); break;
    case 3: regions(data + 1, size - 1); break;
    default: key(data + 1, size - 1);
    }
    return 0;
}
