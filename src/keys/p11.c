/* SPDX-License-Identifier: Apache-2.0 */
/* PKCS#11 modules, tokens and their session pools (see p11.h).
 *
 * Modules are loaded through p11-kit as managed modules: p11-kit gives each
 * load its own view of the module and initializes it with OS locking, so
 * keylessd may call it from many threads, and two key stores (a reload) do
 * not share sessions. One mutex per token guards its pool; a session is
 * opened, logged in and closed outside that lock. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <p11-kit/p11-kit.h>

#include "core/time.h"
#include "keys/p11.h"

#define WHY(...) snprintf(why, whylen, __VA_ARGS__)

typedef struct p11_module {
    char *path;
    CK_FUNCTION_LIST *fl;
    struct p11_module *next;
} p11_module;

struct kl_p11_token {
    CK_FUNCTION_LIST *fl;
    const char *module_path; /* the module's */
    CK_SLOT_ID slot;
    char *pin; /* NULL: no login */
    char *name;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned max, open; /* open counts sessions in use and idle */
    unsigned n_idle;
    CK_SESSION_HANDLE *idle;
    struct kl_p11_token *next;
};

struct kl_p11_set {
    p11_module *modules;
    kl_p11_token *tokens;
};

const char *kl_p11_rv_str(CK_RV rv, char *buf, size_t len)
{
    static const struct {
        CK_RV rv;
        const char *name;
    } names[] = {
        {CKR_OK, "CKR_OK"},
        {CKR_GENERAL_ERROR, "CKR_GENERAL_ERROR"},
        {CKR_FUNCTION_FAILED, "CKR_FUNCTION_FAILED"},
        {CKR_ARGUMENTS_BAD, "CKR_ARGUMENTS_BAD"},
        {CKR_DEVICE_ERROR, "CKR_DEVICE_ERROR"},
        {CKR_DEVICE_REMOVED, "CKR_DEVICE_REMOVED"},
        {CKR_KEY_HANDLE_INVALID, "CKR_KEY_HANDLE_INVALID"},
        {CKR_MECHANISM_INVALID, "CKR_MECHANISM_INVALID"},
        {CKR_MECHANISM_PARAM_INVALID, "CKR_MECHANISM_PARAM_INVALID"},
        {CKR_DATA_INVALID, "CKR_DATA_INVALID"},
        {CKR_DATA_LEN_RANGE, "CKR_DATA_LEN_RANGE"},
        {CKR_OBJECT_HANDLE_INVALID, "CKR_OBJECT_HANDLE_INVALID"},
        {CKR_PIN_INCORRECT, "CKR_PIN_INCORRECT"},
        {CKR_PIN_LOCKED, "CKR_PIN_LOCKED"},
        {CKR_SESSION_CLOSED, "CKR_SESSION_CLOSED"},
        {CKR_SESSION_COUNT, "CKR_SESSION_COUNT"},
        {CKR_SESSION_HANDLE_INVALID, "CKR_SESSION_HANDLE_INVALID"},
        {CKR_SLOT_ID_INVALID, "CKR_SLOT_ID_INVALID"},
        {CKR_TOKEN_NOT_PRESENT, "CKR_TOKEN_NOT_PRESENT"},
        {CKR_USER_NOT_LOGGED_IN, "CKR_USER_NOT_LOGGED_IN"},
        {CKR_USER_PIN_NOT_INITIALIZED, "CKR_USER_PIN_NOT_INITIALIZED"},
        {CKR_CRYPTOKI_NOT_INITIALIZED, "CKR_CRYPTOKI_NOT_INITIALIZED"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].rv == rv)
            return names[i].name;
    snprintf(buf, len, "CKR_0x%lx", (unsigned long)rv);
    return buf;
}

bool kl_p11_rv_session_lost(CK_RV rv)
{
    return rv == CKR_SESSION_HANDLE_INVALID || rv == CKR_SESSION_CLOSED ||
           rv == CKR_USER_NOT_LOGGED_IN || rv == CKR_DEVICE_REMOVED ||
           rv == CKR_TOKEN_NOT_PRESENT;
}

kl_p11_set *kl_p11_set_new(void)
{
    return calloc(1, sizeof(kl_p11_set));
}

static void token_free(kl_p11_token *t)
{
    for (unsigned i = 0; i < t->n_idle; i++)
        t->fl->C_CloseSession(t->idle[i]);
    if (t->pin) {
        OPENSSL_cleanse(t->pin, strlen(t->pin));
        free(t->pin);
    }
    free(t->idle);
    free(t->name);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

void kl_p11_set_free(kl_p11_set *s)
{
    if (!s)
        return;
    while (s->tokens) {
        kl_p11_token *t = s->tokens;
        s->tokens = t->next;
        token_free(t);
    }
    while (s->modules) {
        p11_module *m = s->modules;
        s->modules = m->next;
        p11_kit_module_finalize(m->fl);
        p11_kit_module_release(m->fl);
        free(m->path);
        free(m);
    }
    free(s);
}

size_t kl_p11_set_sessions(const kl_p11_set *s)
{
    size_t n = 0;
    for (const kl_p11_token *t = s ? s->tokens : NULL; t; t = t->next)
        n += t->max;
    return n;
}

CK_FUNCTION_LIST *kl_p11_token_fl(const kl_p11_token *t)
{
    return t->fl;
}

const char *kl_p11_token_name(const kl_p11_token *t)
{
    return t->name;
}

static kl_status load_module(kl_p11_set *s, const char *path, p11_module **out,
                             char *why, size_t whylen)
{
    for (p11_module *m = s->modules; m; m = m->next)
        if (strcmp(m->path, path) == 0) {
            *out = m;
            return KL_OK;
        }
    p11_module *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        return KL_E_NOMEM;
    }
    m->fl = p11_kit_module_load(path, 0);
    if (!m->fl) {
        const char *msg = p11_kit_message();
        WHY("cannot load PKCS#11 module %s: %s", path,
            msg ? msg : "unknown error");
        free(m->path);
        free(m);
        return KL_E_CONFIG;
    }
    CK_RV rv = p11_kit_module_initialize(m->fl);
    if (rv != CKR_OK) {
        char b[32];
        WHY("PKCS#11 module %s did not initialize: %s", path,
            kl_p11_rv_str(rv, b, sizeof b));
        p11_kit_module_release(m->fl);
        free(m->path);
        free(m);
        return KL_E_CONFIG;
    }
    m->next = s->modules;
    s->modules = m;
    *out = m;
    return KL_OK;
}

/* Compares a C string with a space-padded PKCS#11 field. */
static bool field_is(const unsigned char *f, size_t n, const char *want)
{
    size_t w = strlen(want);
    if (w > n || memcmp(f, want, w) != 0)
        return false;
    for (size_t i = w; i < n; i++)
        if (f[i] != ' ' && f[i] != 0)
            return false;
    return true;
}

static kl_status find_slot(CK_FUNCTION_LIST *fl, const kl_p11_uri *u,
                           CK_SLOT_ID *out, char *why, size_t whylen)
{
    CK_ULONG n = 0;
    CK_RV rv = fl->C_GetSlotList(CK_TRUE, NULL, &n);
    CK_SLOT_ID *slots = rv == CKR_OK && n ? calloc(n, sizeof *slots) : NULL;
    if (slots)
        rv = fl->C_GetSlotList(CK_TRUE, slots, &n);
    kl_status s = KL_E_CONFIG;
    for (CK_ULONG i = 0; slots && rv == CKR_OK && i < n && s != KL_OK; i++) {
        CK_TOKEN_INFO ti;
        if (u->has_slot_id) {
            if (slots[i] == u->slot_id)
                s = KL_OK;
        } else if (fl->C_GetTokenInfo(slots[i], &ti) == CKR_OK) {
            if (u->has_token ? field_is(ti.label, sizeof ti.label, u->token)
                             : field_is(ti.serialNumber, sizeof ti.serialNumber,
                                        u->serial))
                s = KL_OK;
        }
        if (s == KL_OK)
            *out = slots[i];
    }
    free(slots);
    if (s != KL_OK) {
        if (u->has_slot_id)
            WHY("no token in slot-id %lu of module %s", u->slot_id,
                u->module_path);
        else
            WHY("no token with %s \"%s\" in module %s",
                u->has_token ? "label" : "serial",
                u->has_token ? u->token : u->serial, u->module_path);
    }
    return s;
}

/* first: the store's first session on the token, where the PIN is
 * checked (p11_login.c) */
static CK_RV open_session_ex(kl_p11_token *t, CK_SESSION_HANDLE *h, bool first)
{
    CK_RV rv = t->fl->C_OpenSession(t->slot, CKF_SERIAL_SESSION, NULL, NULL, h);
    if (rv != CKR_OK || !t->pin)
        return rv;
    /* the login state is the token's, shared by all our sessions: the
     * first session logs in, the others find it done */
    if (first) {
        rv = kl_p11_first_login(t->fl, *h, t->module_path, t->slot, t->pin);
    } else {
        rv = t->fl->C_Login(*h, CKU_USER, (CK_UTF8CHAR *)t->pin,
                            (CK_ULONG)strlen(t->pin));
        if (rv == CKR_USER_ALREADY_LOGGED_IN)
            rv = CKR_OK;
    }
    if (rv != CKR_OK)
        t->fl->C_CloseSession(*h);
    return rv;
}

static CK_RV open_session(kl_p11_token *t, CK_SESSION_HANDLE *h)
{
    return open_session_ex(t, h, false);
}

static kl_status new_token(p11_module *m, CK_SLOT_ID slot, const kl_p11_uri *u,
                           kl_p11_token **out, char *why, size_t whylen)
{
    kl_p11_token *t = calloc(1, sizeof *t);
    if (!t)
        return KL_E_NOMEM;
    t->fl = m->fl;
    t->module_path = m->path;
    t->slot = slot;
    t->max = u->max_sessions;
    t->idle = calloc(t->max, sizeof *t->idle);
    t->name = strdup(u->redacted);
    t->pin = u->pin ? strdup(u->pin) : NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (!t->idle || !t->name || (u->pin && !t->pin)) {
        token_free(t);
        return KL_E_NOMEM;
    }
    CK_SESSION_HANDLE h;
    CK_RV rv = open_session_ex(t, &h, true);
    if (rv != CKR_OK) {
        char b[32];
        WHY("cannot open a session%s: %s", t->pin ? " and log in" : "",
            kl_p11_rv_str(rv, b, sizeof b));
        token_free(t);
        return rv == CKR_PIN_INCORRECT || rv == CKR_PIN_LOCKED ? KL_E_CONFIG
                                                               : KL_E_KEY;
    }
    t->idle[t->n_idle++] = h;
    t->open = 1;
    *out = t;
    return KL_OK;
}

kl_status kl_p11_set_token(kl_p11_set *s, const kl_p11_uri *u,
                           kl_p11_token **out, char *why, size_t whylen)
{
    p11_module *m;
    KL_GUARD(load_module(s, u->module_path, &m, why, whylen));
    CK_SLOT_ID slot;
    KL_GUARD(find_slot(m->fl, u, &slot, why, whylen));
    for (kl_p11_token *t = s->tokens; t; t = t->next)
        if (t->fl == m->fl && t->slot == slot) {
            /* one pool per token: the first URI sized it and gave the PIN */
            if ((t->pin == NULL) != (u->pin == NULL) ||
                (t->pin && strcmp(t->pin, u->pin) != 0)) {
                WHY("the PIN differs from the one %s gave for this token",
                    t->name);
                return KL_E_CONFIG;
            }
            *out = t;
            return KL_OK;
        }
    kl_p11_token *t;
    KL_GUARD(new_token(m, slot, u, &t, why, whylen));
    t->next = s->tokens;
    s->tokens = t;
    *out = t;
    return KL_OK;
}

kl_status kl_p11_session_get(kl_p11_token *t, uint64_t deadline_ns,
                             CK_SESSION_HANDLE *h)
{
    struct timespec ts = kl_ns_to_timespec(deadline_ns);
    pthread_mutex_lock(&t->mu);
    while (t->n_idle == 0 && t->open >= t->max) {
        if (kl_now_ns() >= deadline_ns ||
            pthread_cond_timedwait(&t->cv, &t->mu, &ts) == ETIMEDOUT) {
            if (t->n_idle == 0 && t->open >= t->max) {
                pthread_mutex_unlock(&t->mu);
                return KL_E_TIMEOUT;
            }
        }
    }
    if (t->n_idle) {
        *h = t->idle[--t->n_idle];
        pthread_mutex_unlock(&t->mu);
        return KL_OK;
    }
    t->open++; /* our place, filled outside the lock */
    pthread_mutex_unlock(&t->mu);
    if (open_session(t, h) == CKR_OK)
        return KL_OK;
    kl_p11_session_drop(t);
    return KL_E_KEY;
}

void kl_p11_session_put(kl_p11_token *t, CK_SESSION_HANDLE h)
{
    pthread_mutex_lock(&t->mu);
    t->idle[t->n_idle++] = h; /* n_idle < open <= max */
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

void kl_p11_session_drop(kl_p11_token *t)
{
    pthread_mutex_lock(&t->mu);
    t->open--;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

void kl_p11_session_discard(kl_p11_token *t, CK_SESSION_HANDLE h)
{
    t->fl->C_CloseSession(h);
    kl_p11_session_drop(t);
}

CK_RV kl_p11_session_recover(kl_p11_token *t, CK_SESSION_HANDLE *h, CK_RV rv)
{
    if (rv == CKR_USER_NOT_LOGGED_IN && !t->pin)
        return CKR_OK; /* nothing to log in with: the session stays */
    if (rv == CKR_USER_NOT_LOGGED_IN) {
        rv = t->fl->C_Login(*h, CKU_USER, (CK_UTF8CHAR *)t->pin,
                            (CK_ULONG)strlen(t->pin));
        if (rv == CKR_OK || rv == CKR_USER_ALREADY_LOGGED_IN)
            return CKR_OK;
        if (!kl_p11_rv_session_lost(rv)) {
            t->fl->C_CloseSession(*h);
            return rv;
        }
    }
    return open_session(t, h);
}

CK_RV kl_p11_find(kl_p11_token *t, CK_SESSION_HANDLE h, CK_OBJECT_CLASS cls,
                  const kl_p11_key *k, CK_OBJECT_HANDLE *out, size_t *count)
{
    CK_ATTRIBUTE tmpl[3];
    CK_ULONG n = 0;
    tmpl[n++] = (CK_ATTRIBUTE){CKA_CLASS, &cls, sizeof cls};
    if (k->has_label)
        tmpl[n++] = (CK_ATTRIBUTE){CKA_LABEL, k->label, strlen(k->label)};
    if (k->has_id)
        tmpl[n++] = (CK_ATTRIBUTE){CKA_ID, k->id, k->id_len};
    *count = 0;
    CK_RV rv = t->fl->C_FindObjectsInit(h, tmpl, n);
    if (rv != CKR_OK)
        return rv;
    CK_OBJECT_HANDLE found[2];
    CK_ULONG got = 0;
    rv = t->fl->C_FindObjects(h, found, 2, &got);
    CK_RV rv2 = t->fl->C_FindObjectsFinal(h);
    if (rv == CKR_OK)
        rv = rv2;
    if (rv == CKR_OK) {
        *count = got;
        if (got == 1)
            *out = found[0];
    }
    return rv;
}

void kl_p11_key_free(kl_p11_key *k)
{
    if (!k)
        return;
    free(k->label);
    free(k->id);
    free(k->modulus);
    free(k);
}
