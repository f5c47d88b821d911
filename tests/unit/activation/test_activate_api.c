/* SPDX-License-Identifier: Apache-2.0 */
/* The Origin CA request body and the interpretation of its answer
 * (activation/activate.h): the fields the API documents, and every way an
 * answer can be wrong - HTTP status, no JSON, success false, no
 * certificate - with the message an operator reads. Also init_endpoint's
 * rules (https, or http to loopback only). */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "activation/activate.h"
#include "testutil.h"

#define CERT "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

static void expect(const char *text, const char *want)
{
    if (!strstr(text, want))
        fail_msg("expected:\n  %s\nin:\n  %s", want, text);
}

static void test_body_fields(void **state)
{
    (void)state;
    char *text = kl_activate_body("ks.example.com", "zone1", "CSR\n", 5475);
    assert_non_null(text);
    json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
    assert_non_null(o);
    assert_int_equal(json_object_size(o), 5);
    json_t *h = json_object_get(o, "hostnames");
    assert_int_equal(json_array_size(h), 1);
    assert_string_equal(json_string_value(json_array_get(h, 0)),
                        "ks.example.com");
    assert_string_equal(json_string_value(json_object_get(o, "request_type")),
                        "keyless-certificate");
    assert_int_equal(
        json_integer_value(json_object_get(o, "requested_validity")), 5475);
    assert_string_equal(json_string_value(json_object_get(o, "csr")), "CSR\n");
    assert_string_equal(json_string_value(json_object_get(o, "zone_id")),
                        "zone1");
    json_decref(o);
    free(text);

    /* no zone_id when unset or empty; quotes in values stay JSON */
    text = kl_activate_body("a\"b", "", "x", 7);
    o = json_loads(text, 0, NULL);
    assert_non_null(o);
    assert_null(json_object_get(o, "zone_id"));
    assert_string_equal(
        json_string_value(json_array_get(json_object_get(o, "hostnames"), 0)),
        "a\"b");
    json_decref(o);
    free(text);
    text = kl_activate_body("h", NULL, "x", 7);
    assert_null(strstr(text, "zone_id"));
    free(text);
}

static kl_status parse(long status, const char *body, char **cert, char *err)
{
    return kl_activate_parse(status, body, body ? strlen(body) : 0, cert, err,
                             1024);
}

static void test_parse_success(void **state)
{
    (void)state;
    char err[1024], *cert = NULL;
    json_t *o = json_pack("{s:b, s:[], s:{s:s}}", "success", 1, "errors",
                          "result", "certificate", CERT);
    char *text = json_dumps(o, 0);
    assert_int_equal(parse(200, text, &cert, err), KL_OK);
    assert_string_equal(cert, CERT);
    free(cert);
    /* any 2xx */
    assert_int_equal(parse(201, text, &cert, err), KL_OK);
    free(cert);
    free(text);
    json_decref(o);
}

static void test_parse_http_errors(void **state)
{
    (void)state;
    char err[1024], *cert = (char *)1;
    assert_int_equal(
        parse(403,
              "{\"success\":false,\"errors\":[{\"code\":10000,\"message\":"
              "\"Authentication error\"},{\"code\":10001,\"message\":\"x\"}]}",
              &cert, err),
        KL_E_BAD_VALUE);
    assert_null(cert);
    expect(err, "the certificate API answered HTTP 403 (not authorised");
    expect(err, "code 10000: \"Authentication error\"; code 10001: \"x\"");

    assert_int_equal(parse(500, "oops\r\nInjected: line", &cert, err),
                     KL_E_BAD_VALUE);
    /* control characters cannot forge a log line */
    expect(err, "HTTP 500: body \"oops??Injected: line\"");
    assert_int_equal(parse(502, NULL, &cert, err), KL_E_BAD_VALUE);
    expect(err, "HTTP 502: body \"\"");
    assert_int_equal(parse(302, "", &cert, err), KL_E_BAD_VALUE);
    expect(err, "HTTP 302");

    /* a long body is cut */
    char big[2000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(parse(500, big, &cert, err), KL_E_BAD_VALUE);
    expect(err, "aaa...\"");
    assert_true(strlen(err) < 400);
}

static void test_parse_bad_answers(void **state)
{
    (void)state;
    char err[1024], *cert = NULL;
    static const struct {
        const char *body, *want;
    } cases[] = {
        {"<html>no</html>", "is not a JSON object (\"'[' or '{' expected near "
                            "'<'\"): \"<html>no</html>\". Is init_endpoint"},
        {"[1,2]", "is not a JSON object"},
        {"{\"success\":true,\"success\":true}", "is not a JSON object"},
        {"{\"success\":true", "is not a JSON object"},
        {"{\"success\":false,\"errors\":[{\"code\":1010,\"message\":\"bad "
         "hostname\"}]}",
         "refused the request: code 1010: \"bad hostname\""},
        {"{\"success\":false}", "refused the request: it gave no reason"},
        {"{\"success\":\"true\",\"result\":{\"certificate\":\"x\"}}",
         "refused the request (its answer has no \"success\": true)"},
        {"{\"result\":{\"certificate\":\"x\"}}", "no \"success\": true"},
        {"{\"success\":false,\"errors\":[\"plain text\",7,{}]}",
         "\"plain text\"; (no message); (no message)"},
        {"{\"success\":true}", "without a certificate"},
        {"{\"success\":true,\"result\":null}", "without a certificate"},
        {"{\"success\":true,\"result\":{\"certificate\":\"\"}}",
         "without a certificate"},
        {"{\"success\":true,\"result\":{\"certificate\":42}}",
         "without a certificate"},
        {"{\"success\":true,\"result\":[\"x\"]}", "without a certificate"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cert = NULL;
        assert_int_equal(parse(200, cases[i].body, &cert, err), KL_E_BAD_VALUE);
        assert_null(cert);
        expect(err, cases[i].want);
    }
    /* many errors are cut after eight */
    char many[4096] = "{\"success\":false,\"errors\":[";
    for (int i = 0; i < 20; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many),
                 "%s{\"code\":%d,\"message\":\"m\"}", i ? "," : "", i);
    strcat(many, "]}");
    assert_int_equal(parse(200, many, &cert, err), KL_E_BAD_VALUE);
    expect(err, "code 7: \"m\"; ...");
    assert_null(strstr(err, "code 8:"));
    /* a small err buffer is never overrun */
    char tiny[16];
    assert_int_equal(
        kl_activate_parse(200, many, strlen(many), &cert, tiny, sizeof tiny),
        KL_E_BAD_VALUE);
    assert_int_equal(strlen(tiny), sizeof tiny - 1);
}

static void test_endpoint_rules(void **state)
{
    (void)state;
    char err[512];
    bool plain;
    assert_int_equal(kl_activate_check_endpoint(
                         "https://api.cloudflare.com/client/v4/certificates/",
                         &plain, err, sizeof err),
                     KL_OK);
    assert_false(plain);
    const char *loop[] = {"http://127.0.0.1:8080/x", "http://127.1.2.3/",
                          "http://localhost/c", "http://[::1]:99/c"};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(
            kl_activate_check_endpoint(loop[i], &plain, err, sizeof err),
            KL_OK);
        assert_true(plain);
    }
    assert_int_equal(kl_activate_check_endpoint("http://api.cloudflare.com/",
                                                &plain, err, sizeof err),
                     KL_E_CONFIG);
    expect(err, "plain http would send the Origin CA key unencrypted");
    assert_int_equal(kl_activate_check_endpoint("http://127.0.0.1.evil.com/",
                                                &plain, err, sizeof err),
                     KL_E_CONFIG);
    assert_int_equal(
        kl_activate_check_endpoint("ftp://127.0.0.1/", &plain, err, sizeof err),
        KL_E_CONFIG);
    expect(err, "scheme ftp is not supported");
    assert_int_equal(kl_activate_check_endpoint("https://user:pw@h/", &plain,
                                                err, sizeof err),
                     KL_E_CONFIG);
    expect(err, "must not carry credentials");
    assert_int_equal(
        kl_activate_check_endpoint("not a url", &plain, err, sizeof err),
        KL_E_CONFIG);
    expect(err, "is not a URL");
    assert_int_equal(kl_activate_check_endpoint(NULL, &plain, err, sizeof err),
                     KL_E_CONFIG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_body_fields),
        cmocka_unit_test(test_parse_success),
        cmocka_unit_test(test_parse_http_errors),
        cmocka_unit_test(test_parse_bad_answers),
        cmocka_unit_test(test_endpoint_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
