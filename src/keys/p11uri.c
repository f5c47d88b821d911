/* SPDX-License-Identifier: Apache-2.0 */
/* PKCS#11 URIs for the key store: RFC 7512 parsing is p11-kit's;
 * this file adds the rules keylessd needs on top - a module to load, exactly
 * one way to name the token, something naming the key, at most one PIN -
 * and keeps the PIN out of every message. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <p11-kit/uri.h>

#include "keys/p11uri.h"

#define WHY(...) snprintf(why, whylen, __VA_ARGS__)

/* The longest PIN we accept from a pin-source file. */
#define MAX_PIN 256

static const char PIN_ATTR[] = "pin-value=";

char *kl_p11_uri_redact(const char *uri)
{
    size_t n = strlen(uri);
    /* each pin-value shrinks or grows to "***": at most 3 more bytes each */
    size_t cap = n + 1 + 3 * (n / (sizeof PIN_ATTR - 1) + 1);
    char *out = malloc(cap);
    if (!out)
        return NULL;
    const char *q = strchr(uri, '?');
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        /* an attribute starts the query or follows '&' */
        int starts =
            q && uri + i > q && (uri[i - 1] == '?' || uri[i - 1] == '&');
        if (starts && strncmp(uri + i, PIN_ATTR, sizeof PIN_ATTR - 1) == 0) {
            memcpy(out + o, PIN_ATTR, sizeof PIN_ATTR - 1);
            o += sizeof PIN_ATTR - 1;
            memcpy(out + o, "***", 3);
            o += 3;
            i += sizeof PIN_ATTR - 1;
            while (i < n && uri[i] != '&')
                i++;
            continue;
        }
        out[o++] = uri[i++];
    }
    out[o] = 0;
    return out;
}

/* A space-padded PKCS#11 text field into a C string; p11-kit leaves fields
 * that the URI did not set all zero. Returns whether it was set. */
static bool padded_field(const unsigned char *f, size_t n, char *out)
{
    bool set = false;
    for (size_t i = 0; i < n; i++)
        set |= f[i] != 0;
    if (!set)
        return false;
    size_t len = n;
    while (len > 0 && (f[len - 1] == ' ' || f[len - 1] == 0))
        len--;
    memcpy(out, f, len);
    out[len] = 0;
    return true;
}

static char *dup_attr(P11KitUri *p, CK_ATTRIBUTE_TYPE t, size_t *len,
                      bool *present)
{
    CK_ATTRIBUTE *a = p11_kit_uri_get_attribute(p, t);
    *present = a != NULL;
    if (!a)
        return NULL;
    char *v = malloc(a->ulValueLen + 1);
    if (!v)
        return NULL;
    if (a->ulValueLen)
        memcpy(v, a->pValue, a->ulValueLen);
    v[a->ulValueLen] = 0;
    *len = a->ulValueLen;
    return v;
}

static kl_status parse_sessions(const char *s, unsigned *out, char *why,
                                size_t whylen)
{
    char *end = NULL;
    errno = 0;
    unsigned long v =
        s && isdigit((unsigned char)s[0]) ? strtoul(s, &end, 10) : 0;
    if (!s || !end || *end || errno || v < 1 || v > KL_P11_MAX_SESSIONS) {
        WHY("max-sessions must be a number from 1 to %u", KL_P11_MAX_SESSIONS);
        return KL_E_CONFIG;
    }
    *out = (unsigned)v;
    return KL_OK;
}

static kl_status fill(P11KitUri *p, kl_p11_uri *u, char *why, size_t whylen)
{
    const char *mp = p11_kit_uri_get_module_path(p);
    if (!mp || !*mp) {
        WHY("no module-path: name the PKCS#11 module to load, e.g. "
            "?module-path=/usr/lib/softhsm/libsofthsm2.so");
        return KL_E_CONFIG;
    }
    if (!(u->module_path = strdup(mp)))
        return KL_E_NOMEM;
    CK_TOKEN_INFO *ti = p11_kit_uri_get_token_info(p);
    u->has_token = padded_field(ti->label, sizeof ti->label, u->token);
    u->has_serial =
        padded_field(ti->serialNumber, sizeof ti->serialNumber, u->serial);
    CK_SLOT_ID slot = p11_kit_uri_get_slot_id(p);
    u->has_slot_id = slot != (CK_SLOT_ID)-1;
    u->slot_id = slot;
    int named = u->has_token + u->has_serial + u->has_slot_id;
    if (named != 1) {
        WHY("%s: name the token with exactly one of token=, serial= or "
            "slot-id=",
            named ? "the token is named more than once" : "no token");
        return KL_E_CONFIG;
    }
    bool has_obj, has_id;
    size_t olen = 0;
    u->object = dup_attr(p, CKA_LABEL, &olen, &has_obj);
    if (has_obj && !u->object)
        return KL_E_NOMEM;
    if (has_obj && strlen(u->object) != olen) {
        WHY("object= holds a NUL byte");
        return KL_E_CONFIG;
    }
    u->id = (uint8_t *)dup_attr(p, CKA_ID, &u->id_len, &has_id);
    if (has_id && !u->id)
        return KL_E_NOMEM;
    if (!has_obj && !has_id) {
        WHY("no key named: give object= (label) and/or id=");
        return KL_E_CONFIG;
    }
    const char *pv = p11_kit_uri_get_pin_value(p);
    const char *ps = p11_kit_uri_get_pin_source(p);
    if (pv && ps) {
        WHY("both pin-value and pin-source given: use one");
        return KL_E_CONFIG;
    }
    if (pv && !(u->pin = strdup(pv)))
        return KL_E_NOMEM;
    if (ps && !(u->pin_source = strdup(ps)))
        return KL_E_NOMEM;
    const char *ms = p11_kit_uri_get_vendor_query(p, "max-sessions");
    u->max_sessions = KL_P11_DEFAULT_SESSIONS;
    if (ms)
        KL_GUARD(parse_sessions(ms, &u->max_sessions, why, whylen));
    return KL_OK;
}

kl_status kl_p11_uri_parse(const char *uri, kl_p11_uri *u, char *why,
                           size_t whylen)
{
    memset(u, 0, sizeof *u);
    if (!uri) {
        WHY("no URI");
        return KL_E_CONFIG;
    }
    P11KitUri *p = p11_kit_uri_new();
    if (!p || !(u->redacted = kl_p11_uri_redact(uri))) {
        p11_kit_uri_free(p);
        return KL_E_NOMEM;
    }
    kl_status s = KL_E_CONFIG;
    int rc = p11_kit_uri_parse(uri, P11_KIT_URI_FOR_ANY, p);
    if (rc != P11_KIT_URI_OK)
        WHY("not a valid PKCS#11 URI (%s)", p11_kit_uri_message(rc));
    else if (p11_kit_uri_any_unrecognized(p))
        WHY("the URI has an attribute keylessd does not know");
    else
        s = fill(p, u, why, whylen);
    /* p11-kit keeps its own copy of pin-value (a malloc'd string it frees
     * without wiping): wipe it first */
    const char *pv = p11_kit_uri_get_pin_value(p);
    if (pv)
        OPENSSL_cleanse((char *)pv, strlen(pv));
    p11_kit_uri_free(p);
    if (s != KL_OK) {
        if (s == KL_E_NOMEM)
            WHY("out of memory");
        kl_p11_uri_clear(u);
    }
    return s;
}

kl_status kl_p11_uri_read_pin(kl_p11_uri *u, char *why, size_t whylen)
{
    if (!u->pin_source)
        return KL_OK;
    const char *path = u->pin_source;
    if (strncmp(path, "file:", 5) == 0)
        path += 5;
    FILE *f = fopen(path, "re");
    if (!f) {
        WHY("cannot read pin-source %s: %s", path, strerror(errno));
        return KL_E_CONFIG;
    }
    char *buf = OPENSSL_zalloc(MAX_PIN + 2);
    kl_status s = KL_E_NOMEM;
    if (buf) {
        size_t n = fread(buf, 1, MAX_PIN + 1, f);
        size_t len = strcspn(buf, "\r\n");
        if (n > MAX_PIN && len > MAX_PIN) {
            WHY("pin-source %s: the PIN is longer than %d bytes", path,
                MAX_PIN);
            s = KL_E_CONFIG;
        } else {
            buf[len] = 0;
            u->pin = strdup(buf);
            s = u->pin ? KL_OK : KL_E_NOMEM;
        }
        OPENSSL_clear_free(buf, MAX_PIN + 2);
    }
    fclose(f);
    return s;
}

void kl_p11_uri_clear(kl_p11_uri *u)
{
    if (!u)
        return;
    if (u->pin)
        OPENSSL_cleanse(u->pin, strlen(u->pin));
    free(u->pin);
    free(u->module_path);
    free(u->object);
    free(u->id);
    free(u->pin_source);
    free(u->redacted);
    memset(u, 0, sizeof *u);
}
