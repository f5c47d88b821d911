/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the etcd gateway's answers (fleet/etcd.h): the
 * bodies keylessd reads from etcd, which it must treat as untrusted (a
 * proxy, a wrong port, a cut connection). Input: one byte choosing the
 * parser (range, write, lease, keepalive, watch message, error, lease
 * time to live, authenticate), then the
 * body. Checked: a failure leaves nothing allocated and no partial
 * answer, its message is terminated and fits its buffer; a success gives
 * keys and values of the lengths it says (read in full, so ASan sees an
 * overrun), with a NUL after each. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/etcd.h"

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            abort();                                                           \
    } while (0)

static volatile uint8_t sink;

static void touch(const uint8_t *p, size_t n)
{
    CHECK(p || n == 0);
    for (size_t i = 0; i < n; i++)
        sink ^= p[i];
    if (p)
        CHECK(p[n] == 0);
}

static void check_message(const char *err, size_t cap)
{
    CHECK(strnlen(err, cap) < cap);
}

static void on_event(void *arg, const kl_etcd_event *ev)
{
    size_t *n = arg;
    CHECK(ev->type == KL_ETCD_PUT || ev->type == KL_ETCD_DELETE);
    CHECK(ev->mod_revision > 0);
    touch(ev->key, ev->key_len);
    touch(ev->value, ev->value_len);
    (*n)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    char err[160];
    memset(err, 'x', sizeof err);
    kl_status st;
    switch (data[0] % 8) {
    case 0: {
        kl_etcd_page p;
        st = kl_etcd_parse_range(body, len, &p, err, sizeof err);
        if (st == KL_OK) {
            for (size_t i = 0; i < p.n; i++) {
                touch(p.kvs[i].key, p.kvs[i].key_len);
                touch(p.kvs[i].value, p.kvs[i].value_len);
            }
            kl_etcd_page_clear(&p);
        } else {
            CHECK(p.n == 0 && p.kvs == NULL);
        }
        break;
    }
    case 1: {
        int64_t rev = -1, del = -1;
        st = kl_etcd_parse_write(body, len, &rev, &del, err, sizeof err);
        if (st != KL_OK)
            CHECK(rev == 0 && del == 0);
        break;
    }
    case 2:
    case 3: {
        int64_t id = -1, ttl = -1;
        st = kl_etcd_parse_lease(body, len, data[0] % 8 == 3, &id, &ttl, err,
                                 sizeof err);
        if (st != KL_OK)
            CHECK(id == 0 && ttl == 0);
        break;
    }
    case 4: {
        kl_etcd_watch_msg m;
        size_t n = 0;
        st = kl_etcd_parse_watch(body, len, &m, on_event, &n, err, sizeof err);
        if (st == KL_OK) {
            CHECK(n == m.n_events);
            check_message(m.error.message, sizeof m.error.message);
            check_message(m.cancel_reason, sizeof m.cancel_reason);
        } else {
            CHECK(n == 0);
        }
        break;
    }
    case 6: {
        int64_t ttl = 5, granted = 5;
        st = kl_etcd_parse_timetolive(body, len, &ttl, &granted, err,
                                      sizeof err);
        if (st != KL_OK)
            CHECK(ttl == 0 && granted == 0);
        break;
    }
    case 7: {
        char tok[KL_ETCD_TOKEN_MAX];
        st = kl_etcd_parse_auth(body, len, tok, sizeof tok, err, sizeof err);
        if (st == KL_OK) {
            /* it goes into a header line */
            CHECK(tok[0] != 0);
            for (const char *p = tok; *p; p++)
                CHECK(*p > 0x20 && *p < 0x7f);
        } else {
            CHECK(tok[0] == 0);
        }
        break;
    }
    default: {
        kl_etcd_error e;
        if (kl_etcd_parse_error(body, len, &e))
            CHECK(e.code >= 0);
        check_message(e.message, sizeof e.message);
        return 0;
    }
    }
    if (st != KL_OK) {
        CHECK(st < 0);
        check_message(err, sizeof err);
    }
    return 0;
}
