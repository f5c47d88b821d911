/* SPDX-License-Identifier: Apache-2.0 */
/* A forwarded request's error, as the client gets it, is the error the
 * request metrics and the log name. keylessd with a
 * routing table, its /metrics scraped after one request per outcome:
 * - refused by the access lists before forwarding: `key not found`
 *   (it used to be counted as `internal error`: kl_routed_submit answered
 *   it but returned nothing, so the request path guessed);
 * - a compliance region no route satisfies, hops at the limit:
 *   `remote configuration error` (the router's refusals);
 * - a key the table routes but the remote does not hold: `key not found`;
 * - shed by router_max_inflight: `internal error`;
 * - forwarded and signed: `no error`.
 * Each keyless_request_{exec,total}_duration_per_opcode series counts
 * exactly the answers the client got with that error. */
#include "test_router_server_common.h"
#include "net.h"
#include "slowkey.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <sys/socket.h>

static char *tmp;

static int setup(void **state)
{
    (void)state;
    tmp = tp_tempdir("router-errors");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tp_rmtree(tmp);
    return 0;
}

/* GET /metrics over HTTP/1.0; the body (malloc'd). */
static char *scrape(uint16_t port)
{
    char *body;
    assert_int_equal(tn_http_get(port, "/metrics", &body), 200);
    return body;
}

/* The value of `family{error="err",type="ecdsa"}`; 0 when absent (the
 * exposition leaves out series that never counted). */
static double count_of(const char *text, const char *family, const char *err)
{
    char series[256];
    snprintf(series, sizeof series, "%s{error=\"%s\",type=\"ecdsa\"} ", family,
             err);
    const char *p = strstr(text, series);
    return p ? strtod(p + strlen(series), NULL) : 0;
}

static void expect_count(const char *text, const char *err, double want)
{
    static const char *const fams[] = {
        "keyless_request_exec_duration_per_opcode_count",
        "keyless_request_total_duration_per_opcode_count"};
    for (size_t i = 0; i < 2; i++) {
        double got = count_of(text, fams[i], err);
        if (got != want) {
            fprintf(stderr, "%s\n", text);
            fail_msg("%s{error=\"%s\"}: %g, expected %g", fams[i], err, got,
                     want);
        }
    }
}

static void expect_answer(const td_daemon *d, kl_client *c,
                          const kl_request_spec *s, uint8_t err,
                          const char *verify_with)
{
    if (err != KL_ERR_NONE) {
        td_expect_error(d, c, s, err);
        return;
    }
    kl_client_result r;
    td_call(d, c, s, &r);
    if (r.opcode != KL_OP_RESPONSE) {
        td_dump_log(d);
        fail_msg("expected a signature, got 0x%02x error 0x%02x", r.opcode,
                 r.error);
    }
    assert_true(rs_verify(verify_with, r.payload, r.payload_len));
    kl_client_result_free(&r);
}

static void test_metrics_name_the_wire_error(void **state)
{
    (void)state;
    /* the remote holds P-256 (fast) and P-384 (on a token that takes 400 ms
     * per request, slowkey.h, so that a second request arrives while it is
     * in flight) */
    uint8_t s256[20], s384[20], denied[20], ghost[20];
    char *kr = rs_keydir("rs-err-remote", "ecdsa-p256", s256);
    rs_ski_of("ecdsa-p384", s384);
    memset(denied, 0x33, sizeof denied); /* routed, but not for this client */
    memset(ghost, 0x77, sizeof ghost);   /* routed, unknown at the remote */
    td_daemon remote, local;
    td_opts ro = {.name = "rs-err-remote",
                  .key_dirs = kr,
                  .slow_key =
                      td_slow_key(tp_path("keys/ecdsa-p384.key"), 400, 1)};
    td_start(&remote, &ro);

    char table[1100], text[2048], acl[1100], hex[4][41];
    const uint8_t *skis[4] = {s256, s384, denied, ghost};
    for (int i = 0; i < 4; i++)
        snprintf(hex[i], sizeof hex[i], "%s", tp_ski_hex(skis[i]));
    snprintf(table, sizeof table, "%s/routes.yaml", tmp);
    snprintf(text, sizeof text,
             "region_codes: {2: eu, 3: us}\n"
             "servers:\n"
             "  - {name: r1, address: \"127.0.0.1:%u\", region: eu, "
             "serves: [%s, %s, %s, %s]}\n",
             remote.port, hex[0], hex[1], hex[2], hex[3]);
    fp_write_file(table, text);
    snprintf(acl, sizeof acl, "%s/access.yaml", tmp);
    snprintf(text, sizeof text,
             "- clients: [\"*\"]\n  keys: [ski:%s, ski:%s, ski:%s]\n", hex[0],
             hex[1], hex[3]);
    fp_write_file(acl, text);
    char a_acl[1200], a_port[64];
    uint16_t mport = tn_free_port();
    snprintf(a_acl, sizeof a_acl, "--access-file=%s", acl);
    snprintf(a_port, sizeof a_port, "--metrics-port=%u", mport);
    const char *extra[] = {a_acl,
                           "--metrics-address=127.0.0.1",
                           a_port,
                           "--router-max-inflight=1",
                           "--router-default-deadline=5s",
                           NULL};
    rs_start(&local, "rs-err-local", NULL, table, extra);
    rs_wait_log(&local, "metrics: http://127.0.0.1:", 1, 5000);

    kl_client *c = td_connect(&local);
    kl_request_spec s = rs_sign_spec(s256);
    expect_answer(&local, c, &s, KL_ERR_NONE, "ecdsa-p256");
    s = rs_sign_spec(denied); /* refused here, before forwarding */
    expect_answer(&local, c, &s, KL_ERR_KEY_NOT_FOUND, NULL);
    s = rs_sign_spec(ghost); /* forwarded; the remote does not know it */
    expect_answer(&local, c, &s, KL_ERR_KEY_NOT_FOUND, NULL);
    s = rs_sign_spec(s256); /* no route in region "us" */
    s.has_compliance = true;
    s.compliance = 3;
    expect_answer(&local, c, &s, KL_ERR_REMOTE_CONFIG, NULL);
    s = rs_sign_spec(s256); /* P9: already three hops */
    s.req_context = "{\"hops\":3}";
    expect_answer(&local, c, &s, KL_ERR_REMOTE_CONFIG, NULL);

    /* router_max_inflight = 1: a second forwarded request while the slow
     * one is in flight is shed */
    kl_request_spec slow = rs_sign_spec(s384), fast = rs_sign_spec(s256);
    uint32_t id_slow, id_fast;
    assert_int_equal(kl_client_send(c, &slow, &id_slow), KL_OK);
    assert_int_equal(kl_client_flush(c, 2000), KL_OK);
    fp_sleep_ms(100); /* the slow one reaches the router first */
    assert_int_equal(kl_client_send(c, &fast, &id_fast), KL_OK);
    bool got_slow = false, got_fast = false;
    for (int i = 0; i < 2; i++) {
        kl_client_result r;
        assert_int_equal(kl_client_recv(c, 5000, &r), KL_OK);
        if (r.id == id_fast) {
            assert_int_equal(r.opcode, KL_OP_ERROR);
            assert_int_equal(r.error, KL_ERR_INTERNAL);
            got_fast = true;
        } else {
            assert_int_equal(r.id, id_slow);
            assert_int_equal(r.opcode, KL_OP_RESPONSE);
            assert_true(rs_verify("ecdsa-p384", r.payload, r.payload_len));
            got_slow = true;
        }
        kl_client_result_free(&r);
    }
    assert_true(got_slow && got_fast);
    kl_client_close(c);

    char *m = scrape(mport);
    /* the labels are the P6 texts the log uses too */
    expect_count(m, kl_err_text(KL_ERR_NONE), 2);
    expect_count(m, kl_err_text(KL_ERR_KEY_NOT_FOUND), 2);
    expect_count(m, kl_err_text(KL_ERR_REMOTE_CONFIG), 2);
    expect_count(m, kl_err_text(KL_ERR_INTERNAL), 1);
    free(m);

    assert_int_equal(td_stop(&local, 0), 0);
    assert_int_equal(td_stop(&remote, 0), 0);
    /* the log line of each error names it and says why */
    char line[256];
    snprintf(line, sizeof line, "%s: %s: refused by the access lists",
             kl_err_text(KL_ERR_KEY_NOT_FOUND), hex[2]);
    assert_int_equal(rs_log_count(&local, line), 1);
    snprintf(line, sizeof line,
             "%s: forwarding: no remote key server knows the key",
             kl_err_text(KL_ERR_KEY_NOT_FOUND));
    assert_int_equal(rs_log_count(&local, line), 1);
    snprintf(line, sizeof line, "%s: forwarding: no route could serve",
             kl_err_text(KL_ERR_REMOTE_CONFIG));
    assert_int_equal(rs_log_count(&local, line), 2);
    snprintf(line, sizeof line,
             "%s: forwarding: deadline passed, shed or cancelled",
             kl_err_text(KL_ERR_INTERNAL));
    assert_int_equal(rs_log_count(&local, line), 1);
    tp_rmtree(kr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_name_the_wire_error),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
