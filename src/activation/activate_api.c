/* SPDX-License-Identifier: Apache-2.0 */
/* The Origin CA "create certificate" request and answer (activate.h).
 * Fields as Cloudflare documents them for POST /client/v4/certificates:
 * request hostnames[], request_type ("keyless-certificate" for Keyless SSL
 * servers), requested_validity (days), csr; answer in the v4 envelope
 * {success, errors[{code, message}], messages[], result{id, certificate,
 * expires_on, ...}}. The answer is untrusted input: it is fuzzed
 * (fuzz/fuzz_activation.c) and every text from it that reaches a log line
 * is bounded and stripped of control characters. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "activation/activate.h"

/* how much of one API message, and of a body that is no JSON, reaches a
 * log line */
#define MSG_MAX 300

char *kl_activate_body(const char *hostname, const char *zone_id,
                       const char *csr_pem, int validity_days)
{
    json_t *o = json_object();
    json_t *names = json_array();
    char *text = NULL;
    if (!o || !names || json_array_append_new(names, json_string(hostname)) ||
        json_object_set_new(o, "hostnames", names))
        goto out;
    names = NULL; /* owned by o */
    if (json_object_set_new(o, "request_type",
                            json_string("keyless-certificate")) ||
        json_object_set_new(o, "requested_validity",
                            json_integer(validity_days)) ||
        json_object_set_new(o, "csr", json_string(csr_pem)))
        goto out;
    /* The reference sends zone_id; the API identifies the zone by the
     * hostnames, so keylessd sends it only when it is configured. */
    if (zone_id && *zone_id &&
        json_object_set_new(o, "zone_id", json_string(zone_id)))
        goto out;
    text = json_dumps(o, JSON_COMPACT);
out:
    json_decref(names);
    json_decref(o);
    return text;
}

/* Appends fmt to err at *at, never past errlen. */
__attribute__((format(printf, 4, 5))) static void
add(char *err, size_t errlen, size_t *at, const char *fmt, ...)
{
    if (!err || *at + 1 >= errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err + *at, errlen - *at, fmt, ap);
    va_end(ap);
    if (n > 0)
        *at = (size_t)n >= errlen - *at ? errlen - 1 : *at + (size_t)n;
}

/* Appends untrusted text, quoted, at most MSG_MAX bytes, control
 * characters and quotes replaced, so that it cannot forge log lines. */
static void add_quoted(char *err, size_t errlen, size_t *at, const char *s,
                       size_t n)
{
    char clean[MSG_MAX + 4];
    size_t k = 0;
    for (size_t i = 0; i < n && k < MSG_MAX; i++) {
        unsigned char c = (unsigned char)s[i];
        clean[k++] = (c < 0x20 || c == 0x7f || c == '"') ? '?' : (char)c;
    }
    if (n > MSG_MAX) {
        memcpy(clean + k, "...", 3);
        k += 3;
    }
    clean[k] = '\0';
    add(err, errlen, at, "\"%s\"", clean);
}

/* The API's errors[] as "code 1001: \"...\"; code 1002: \"...\"";
 * false when there are none. */
static bool add_api_errors(char *err, size_t errlen, size_t *at, json_t *root)
{
    json_t *errors =
        json_is_object(root) ? json_object_get(root, "errors") : NULL;
    if (!json_is_array(errors) || json_array_size(errors) == 0)
        return false;
    size_t i;
    json_t *e;
    bool any = false;
    json_array_foreach(errors, i, e)
    {
        if (i >= 8) {
            add(err, errlen, at, "; ...");
            break;
        }
        json_t *code = json_is_object(e) ? json_object_get(e, "code") : NULL;
        json_t *msg = json_is_object(e) ? json_object_get(e, "message") : e;
        add(err, errlen, at, "%s", any ? "; " : "");
        if (json_is_integer(code))
            add(err, errlen, at,
                "code %lld: ", (long long)json_integer_value(code));
        if (json_is_string(msg))
            add_quoted(err, errlen, at, json_string_value(msg),
                       json_string_length(msg));
        else
            add(err, errlen, at, "(no message)");
        any = true;
    }
    return any;
}

kl_status kl_activate_parse(long http_status, const char *body, size_t len,
                            char **cert_pem, char *err, size_t errlen)
{
    *cert_pem = NULL;
    size_t at = 0;
    if (err && errlen)
        err[0] = '\0';
    json_error_t jerr;
    json_t *root =
        body ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
    kl_status st = KL_E_BAD_VALUE;
    if (http_status < 200 || http_status > 299) {
        add(err, errlen, &at, "the certificate API answered HTTP %ld",
            http_status);
        if (http_status == 401 || http_status == 403)
            add(err, errlen, &at,
                " (not authorised: check origin_ca_api_key - the Origin CA "
                "key from the Cloudflare dashboard - and that hostname "
                "belongs to a zone of that account)");
        add(err, errlen, &at, ": ");
        if (!add_api_errors(err, errlen, &at, root)) {
            add(err, errlen, &at, "body ");
            add_quoted(err, errlen, &at, body ? body : "", body ? len : 0);
        }
        goto out;
    }
    if (!json_is_object(root)) {
        add(err, errlen, &at,
            "the certificate API's answer (HTTP %ld, %zu bytes) is not a JSON "
            "object",
            http_status, len);
        if (!root && body) {
            /* jansson's text may quote the offending bytes */
            add(err, errlen, &at, " (");
            add_quoted(err, errlen, &at, jerr.text, strlen(jerr.text));
            add(err, errlen, &at, ")");
        }
        add(err, errlen, &at, ": ");
        add_quoted(err, errlen, &at, body ? body : "", body ? len : 0);
        add(err, errlen, &at, ". Is init_endpoint the certificate API?");
        goto out;
    }
    json_t *success = json_object_get(root, "success");
    if (!json_is_true(success)) {
        add(err, errlen, &at, "the certificate API refused the request%s: ",
            json_is_boolean(success)
                ? ""
                : " (its answer has no \"success\": true)");
        if (!add_api_errors(err, errlen, &at, root))
            add(err, errlen, &at, "it gave no reason");
        goto out;
    }
    json_t *result = json_object_get(root, "result");
    json_t *cert =
        json_is_object(result) ? json_object_get(result, "certificate") : NULL;
    if (!json_is_string(cert) || json_string_length(cert) == 0) {
        add(err, errlen, &at,
            "the certificate API answered success but without a certificate "
            "(result.certificate is missing or empty)");
        goto out;
    }
    *cert_pem = strndup(json_string_value(cert), json_string_length(cert));
    st = *cert_pem ? KL_OK : KL_E_NOMEM;
out:
    json_decref(root);
    return st;
}
