/* SPDX-License-Identifier: Apache-2.0 */
/* The etcd gateway's answers as the client parses them (src/fleet/
 * etcd_json.c), without an etcd: the shapes etcd 3.4 sends (int64s as
 * strings, zero fields left out), and every way an answer can be wrong -
 * not JSON, cut short, a field of the wrong type, bad base64, an error
 * answer - each with its status and a message naming what was wrong. Also
 * base64 and the end of a prefix range. */
#include <stdlib.h>
#include <string.h>

#include "fleet/etcd.h"
#include "fleet/etcd_int.h"
#include "testutil.h"

#define HDR                                                                    \
    "\"header\":{\"cluster_id\":\"1\",\"member_id\":\"2\","                    \
    "\"revision\":\"42\",\"raft_term\":\"2\"}"

static void expect(const char *text, const char *want)
{
    if (!strstr(text, want))
        fail_msg("expected \"%s\" in: %s", want, text);
}

static void test_base64(void **state)
{
    (void)state;
    static const struct {
        const char *plain, *b64;
    } v[] = {{"", ""},
             {"f", "Zg=="},
             {"fo", "Zm8="},
             {"foo", "Zm9v"},
             {"foob", "Zm9vYg=="},
             {"fooba", "Zm9vYmE="},
             {"foobar", "Zm9vYmFy"}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char *e = kl_etcd_b64(v[i].plain, strlen(v[i].plain));
        assert_string_equal(e, v[i].b64);
        free(e);
        uint8_t *d;
        size_t n;
        assert_int_equal(kl_etcd_unb64(v[i].b64, strlen(v[i].b64), &d, &n),
                         KL_OK);
        assert_int_equal(n, strlen(v[i].plain));
        assert_memory_equal(d, v[i].plain, n);
        free(d);
    }
    uint8_t all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)i;
    char *e = kl_etcd_b64(all, sizeof all);
    uint8_t *d;
    size_t n;
    assert_int_equal(kl_etcd_unb64(e, strlen(e), &d, &n), KL_OK);
    assert_int_equal(n, 256);
    assert_memory_equal(d, all, 256);
    free(d);
    free(e);
    static const char *bad[] = {
        "Zg=",      "Z===", "=Zg=",     "Zg=a",
        "Zm9v!A==", "Zm 9", "Zg==Zg==", "\x80\x80\x80\x80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d = (uint8_t *)"x";
        assert_int_equal(kl_etcd_unb64(bad[i], strlen(bad[i]), &d, &n),
                         KL_E_BAD_VALUE);
        assert_null(d);
    }
}

static void test_prefix_end(void **state)
{
    (void)state;
    size_t n;
    uint8_t *e = etcd_prefix_end("ab", 2, &n);
    assert_int_equal(n, 2);
    assert_memory_equal(e, "ac", 2);
    free(e);
    e = etcd_prefix_end("a\xff\xff", 3, &n);
    assert_int_equal(n, 1);
    assert_memory_equal(e, "b", 1);
    free(e);
    /* empty or all 0xff: "\0", etcd's "to the end" */
    e = etcd_prefix_end("\xff", 1, &n);
    assert_int_equal(n, 1);
    assert_int_equal(e[0], 0);
    free(e);
    e = etcd_prefix_end("", 0, &n);
    assert_int_equal(n, 1);
    assert_int_equal(e[0], 0);
    free(e);
}

static void test_range_answer(void **state)
{
    (void)state;
    char err[256] = "";
    const char *ok =
        "{" HDR ",\"kvs\":[{\"key\":\"Zm9v\",\"create_revision\":\"2\","
        "\"mod_revision\":\"40\",\"version\":\"3\",\"value\":\"AP8=\","
        "\"lease\":\"7587\"},{\"key\":\"Zm9w\",\"mod_revision\":\"41\"}],"
        "\"more\":true,\"count\":\"10\"}";
    kl_etcd_page p;
    assert_int_equal(kl_etcd_parse_range(ok, strlen(ok), &p, err, sizeof err),
                     KL_OK);
    assert_int_equal(p.revision, 42);
    assert_int_equal(p.count, 10);
    assert_true(p.more);
    assert_int_equal(p.n, 2);
    assert_int_equal(p.kvs[0].key_len, 3);
    assert_memory_equal(p.kvs[0].key, "foo", 3);
    assert_int_equal(p.kvs[0].value_len, 2);
    assert_memory_equal(p.kvs[0].value, "\x00\xff", 2);
    assert_int_equal(p.kvs[0].lease, 7587);
    assert_int_equal(p.kvs[0].version, 3);
    /* left out: zero */
    assert_int_equal(p.kvs[1].value_len, 0);
    assert_int_equal(p.kvs[1].create_revision, 0);
    kl_etcd_page_clear(&p);

    /* an empty range: no kvs, no count */
    const char *empty = "{" HDR "}";
    assert_int_equal(
        kl_etcd_parse_range(empty, strlen(empty), &p, err, sizeof err), KL_OK);
    assert_int_equal(p.n, 0);
    assert_int_equal(p.count, 0);
    assert_false(p.more);
    kl_etcd_page_clear(&p);

    static const struct {
        const char *body;
        kl_status st;
        const char *msg;
    } bad[] = {
        {"", KL_E_TRUNCATED, "truncated"},
        {"{\"header\":{\"revision\":\"4", KL_E_TRUNCATED, "truncated"},
        {"<html>502</html>", KL_E_KEY, "malformed"},
        {"[1,2]", KL_E_KEY, "not a JSON object"},
        {"{}", KL_E_KEY, "no \"header\""},
        {"{\"header\":[]}", KL_E_KEY, "wrong \"header\""},
        {"{\"header\":{\"revision\":\"4x\"}}", KL_E_KEY, "\"revision\""},
        {"{\"header\":{\"revision\":\"99999999999999999999\"}}", KL_E_KEY,
         "not an int64"},
        {"{\"header\":{\"revision\":true}}", KL_E_KEY, "not an int64"},
        {"{" HDR ",\"kvs\":{}}", KL_E_KEY, "\"kvs\""},
        {"{" HDR ",\"kvs\":[7]}", KL_E_KEY, "not an object"},
        {"{" HDR ",\"kvs\":[{\"key\":\"Zm9\"}]}", KL_E_KEY, "not base64"},
        {"{" HDR ",\"kvs\":[{\"key\":5}]}", KL_E_KEY, "not base64"},
        {"{" HDR ",\"more\":\"yes\"}", KL_E_KEY, "not a bool"},
        {"{" HDR ",\"count\":\"1\",\"count\":\"2\"}", KL_E_KEY, "duplicate"},
        {"{\"error\":\"etcdserver: mvcc: required revision has been "
         "compacted\",\"code\":11,\"message\":\"x\"}",
         KL_E_BAD_VALUE, "x (code 11)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        kl_status st = kl_etcd_parse_range(bad[i].body, strlen(bad[i].body), &p,
                                           err, sizeof err);
        if (st != bad[i].st)
            fail_msg("%s: status %d, want %d (%s)", bad[i].body, st, bad[i].st,
                     err);
        expect(err, bad[i].msg);
        assert_null(p.kvs);
        assert_int_equal(p.n, 0);
    }
    /* a truncation anywhere in a good answer is refused */
    for (size_t cut = 0; cut < strlen(ok); cut++) {
        kl_status st = kl_etcd_parse_range(ok, cut, &p, err, sizeof err);
        assert_int_not_equal(st, KL_OK);
    }
}

static void test_write_and_lease_answers(void **state)
{
    (void)state;
    char err[256] = "";
    int64_t rev, del, id, ttl;
    const char *put = "{" HDR "}";
    assert_int_equal(
        kl_etcd_parse_write(put, strlen(put), &rev, &del, err, sizeof err),
        KL_OK);
    assert_int_equal(rev, 42);
    assert_int_equal(del, 0);
    const char *d = "{" HDR ",\"deleted\":\"3\"}";
    assert_int_equal(
        kl_etcd_parse_write(d, strlen(d), &rev, &del, err, sizeof err), KL_OK);
    assert_int_equal(del, 3);

    const char *grant =
        "{" HDR ",\"ID\":\"4111120437056922120\",\"TTL\":\"5\"}";
    assert_int_equal(kl_etcd_parse_lease(grant, strlen(grant), false, &id, &ttl,
                                         err, sizeof err),
                     KL_OK);
    assert_int_equal(id, 4111120437056922120LL);
    assert_int_equal(ttl, 5);
    /* a keepalive's one answer is wrapped in "result"; a gone lease has
     * no TTL */
    const char *ka = "{\"result\":{" HDR ",\"ID\":\"9\",\"TTL\":\"4\"}}";
    assert_int_equal(
        kl_etcd_parse_lease(ka, strlen(ka), true, &id, &ttl, err, sizeof err),
        KL_OK);
    assert_int_equal(ttl, 4);
    const char *gone = "{\"result\":{" HDR ",\"ID\":\"9\"}}";
    assert_int_equal(kl_etcd_parse_lease(gone, strlen(gone), true, &id, &ttl,
                                         err, sizeof err),
                     KL_OK);
    assert_int_equal(ttl, 0);
    assert_int_equal(kl_etcd_parse_lease(grant, strlen(grant), true, &id, &ttl,
                                         err, sizeof err),
                     KL_E_KEY);
    expect(err, "\"result\"");
    const char *lerr = "{" HDR ",\"error\":\"too many \\n leases\"}";
    assert_int_equal(kl_etcd_parse_lease(lerr, strlen(lerr), false, &id, &ttl,
                                         err, sizeof err),
                     KL_E_BAD_VALUE);
    expect(err, "too many ? leases"); /* control characters replaced */

    kl_etcd_error e;
    const char *ge = "{\"error\":\"etcdserver: requested lease not found\","
                     "\"message\":\"etcdserver: requested lease not found\","
                     "\"code\":5}";
    assert_true(kl_etcd_parse_error(ge, strlen(ge), &e));
    assert_int_equal(e.code, 5);
    assert_string_equal(e.message, "etcdserver: requested lease not found");
    assert_false(kl_etcd_parse_error(put, strlen(put), &e));
    assert_false(kl_etcd_parse_error("nope", 4, &e));
}

typedef struct seen {
    kl_etcd_event ev[4];
    char keys[4][16];
    int n;
} seen;

static void on_event(void *arg, const kl_etcd_event *ev)
{
    seen *s = arg;
    assert_true(s->n < 4);
    s->ev[s->n] = *ev;
    memcpy(s->keys[s->n], ev->key, ev->key_len < 15 ? ev->key_len : 15);
    s->n++;
}

static void test_watch_messages(void **state)
{
    (void)state;
    char err[256] = "";
    kl_etcd_watch_msg m;
    seen s = {0};
    const char *created = "{\"result\":{" HDR ",\"created\":true}}";
    assert_int_equal(kl_etcd_parse_watch(created, strlen(created), &m, on_event,
                                         &s, err, sizeof err),
                     KL_OK);
    assert_true(m.created);
    assert_int_equal(m.revision, 42);
    assert_int_equal(s.n, 0);

    /* a PUT has no "type" (the zero value); a DELETE has no value */
    const char *evs =
        "{\"result\":{" HDR ",\"events\":[{\"kv\":{\"key\":\"YQ==\","
        "\"value\":\"MQ==\",\"mod_revision\":\"43\"}},{\"type\":\"DELETE\","
        "\"kv\":{\"key\":\"Yg==\",\"mod_revision\":\"44\"}}]}}";
    assert_int_equal(kl_etcd_parse_watch(evs, strlen(evs), &m, on_event, &s,
                                         err, sizeof err),
                     KL_OK);
    assert_int_equal(m.n_events, 2);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.ev[0].type, KL_ETCD_PUT);
    assert_string_equal(s.keys[0], "a");
    assert_int_equal(s.ev[0].mod_revision, 43);
    assert_int_equal(s.ev[1].type, KL_ETCD_DELETE);
    assert_string_equal(s.keys[1], "b");
    assert_int_equal(s.ev[1].value_len, 0);

    const char *compacted = "{\"result\":{\"header\":{\"raft_term\":\"2\"},"
                            "\"canceled\":true,\"compact_revision\":\"7\"}}";
    assert_int_equal(kl_etcd_parse_watch(compacted, strlen(compacted), &m,
                                         on_event, &s, err, sizeof err),
                     KL_OK);
    assert_true(m.canceled);
    assert_int_equal(m.compact_revision, 7);

    const char *serr = "{\"error\":{\"grpc_code\":14,\"http_code\":503,"
                       "\"message\":\"no leader\",\"http_status\":\"x\"}}";
    assert_int_equal(kl_etcd_parse_watch(serr, strlen(serr), &m, on_event, &s,
                                         err, sizeof err),
                     KL_OK);
    assert_int_equal(m.error.code, 14);
    assert_string_equal(m.error.message, "no leader");

    /* a bad event anywhere: the message delivers none of its events */
    s.n = 0;
    static const char *bad[] = {
        "{\"result\":{" HDR ",\"events\":[{\"kv\":{\"key\":\"YQ==\","
        "\"mod_revision\":\"43\"}},{\"type\":\"EXPIRE\",\"kv\":{}}]}}",
        "{\"result\":{" HDR ",\"events\":[{\"kv\":{\"key\":\"YQ==\","
        "\"mod_revision\":\"43\"}},{\"kv\":{\"key\":\"YQ==\"}}]}}",
        "{\"result\":{" HDR ",\"events\":[{\"kv\":{\"key\":\"YQ==\","
        "\"mod_revision\":\"43\"}},{\"kv\":[]}]}}",
        "{\"result\":{" HDR ",\"events\":{}}}",
        "{\"result\":{" HDR ",\"events\":[1]}}",
        "{\"result\":7}",
        "{\"result\":{" HDR ",\"events\":[{\"kv\":{\"key\":\"YQ==\"",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        kl_status st = kl_etcd_parse_watch(bad[i], strlen(bad[i]), &m, on_event,
                                           &s, err, sizeof err);
        if (st == KL_OK)
            fail_msg("accepted: %s", bad[i]);
        assert_true(err[0] != '\0');
        assert_int_equal(s.n, 0);
    }
}

/* Password auth's answers (docs/DESIGN.md "etcd client (src/fleet)"):
 * the token, which goes into a header line, and a lease's time to live
 * (keyless-cli fleet's lease column). */
static void test_auth_and_timetolive(void **state)
{
    (void)state;
    char err[256] = "", tok[KL_ETCD_TOKEN_MAX];
    const char *ok = "{" HDR ",\"token\":\"sZnvWGxxVkrLBqRD.15\"}";
    assert_int_equal(
        kl_etcd_parse_auth(ok, strlen(ok), tok, sizeof tok, err, sizeof err),
        KL_OK);
    assert_string_equal(tok, "sZnvWGxxVkrLBqRD.15");
    static const char *const bad[] = {
        "{" HDR "}",                                /* no token */
        "{" HDR ",\"token\":\"\"}",                 /* empty */
        "{" HDR ",\"token\":\"a b\"}",              /* a space */
        "{" HDR ",\"token\":\"a\\r\\nX-Evil: 1\"}", /* a header injected */
        "{" HDR ",\"token\":7}",                    /* not a string */
        "{\"error\":\"etcdserver: authentication failed, invalid user ID "
        "or password\",\"code\":3,\"message\":\"etcdserver: authentication "
        "failed, invalid user ID or password\"}",
        "{" HDR ",\"token\":\"abc",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(tok, 'x', sizeof tok);
        kl_status st = kl_etcd_parse_auth(bad[i], strlen(bad[i]), tok,
                                          sizeof tok, err, sizeof err);
        if (st == KL_OK)
            fail_msg("accepted: %s", bad[i]);
        assert_int_equal(tok[0], '\0');
    }
    /* a token longer than the buffer is refused, not cut */
    char big[4200];
    int n = snprintf(big, sizeof big, "{" HDR ",\"token\":\"");
    memset(big + n, 'a', 3000);
    snprintf(big + n + 3000, sizeof big - (size_t)n - 3000, "\"}");
    assert_int_equal(
        kl_etcd_parse_auth(big, strlen(big), tok, sizeof tok, err, sizeof err),
        KL_E_KEY);
    expect(err, "token");

    int64_t ttl, granted;
    const char *live = "{" HDR ",\"ID\":\"9\",\"TTL\":\"7\","
                       "\"grantedTTL\":\"10\"}";
    assert_int_equal(kl_etcd_parse_timetolive(live, strlen(live), &ttl,
                                              &granted, err, sizeof err),
                     KL_OK);
    assert_int_equal(ttl, 7);
    assert_int_equal(granted, 10);
    const char *gone = "{" HDR ",\"ID\":\"9\",\"TTL\":\"-1\"}";
    assert_int_equal(kl_etcd_parse_timetolive(gone, strlen(gone), &ttl,
                                              &granted, err, sizeof err),
                     KL_OK);
    assert_int_equal(ttl, -1);
    assert_int_equal(granted, 0);
    const char *wrong = "{" HDR ",\"TTL\":\"x\"}";
    assert_int_equal(kl_etcd_parse_timetolive(wrong, strlen(wrong), &ttl,
                                              &granted, err, sizeof err),
                     KL_E_KEY);
    expect(err, "TTL");

    /* a watch etcd cancels says why */
    kl_etcd_watch_msg m;
    const char *cancel =
        "{\"result\":{" HDR ",\"watch_id\":\"-1\",\"created\":true,"
        "\"canceled\":true,\"cancel_reason\":\"rpc error: code = "
        "Unauthenticated desc = etcdserver: invalid auth token\"}}";
    assert_int_equal(kl_etcd_parse_watch(cancel, strlen(cancel), &m, NULL, NULL,
                                         err, sizeof err),
                     KL_OK);
    assert_true(m.canceled);
    expect(m.cancel_reason, "invalid auth token");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_prefix_end),
        cmocka_unit_test(test_range_answer),
        cmocka_unit_test(test_write_and_lease_answers),
        cmocka_unit_test(test_watch_messages),
        cmocka_unit_test(test_auth_and_timetolive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
