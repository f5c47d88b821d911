/* SPDX-License-Identifier: Apache-2.0 */
/* kl_p11shim: a PKCS#11 module that forwards to a real one and makes
 * faults on command (see shim.h for the control file). Test-only.
 *
 * The function list is a copy of the target's with the entries keylessd
 * uses on sessions replaced. One mutex guards the rules and counters;
 * stalls and calls into the target happen outside it, so a stalled call
 * never holds up another one.
 *
 * A real HSM that loses its sessions does so safely; SoftHSM does not
 * expect a session to be closed while another thread is inside a call on
 * it (PKCS#11 makes that the application's fault, and SoftHSM crashes).
 * So the shim's own effects (closing sessions, logging out) take the gate
 * for writing, and every forwarded session call takes it for reading: an
 * effect waits for the calls in progress, then happens between calls. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <p11-kit/pkcs11.h>

#include "shim.h"

#define MAX_RULES 16
#define MAX_CTL 4096

enum { CALL_SIGN = 1, CALL_DECRYPT = 2, CALL_OPEN = 4 };

typedef struct rule {
    unsigned calls; /* CALL_* mask */
    CK_RV error;    /* CKR_OK: no error */
    unsigned stall_ms;
    long left;    /* -1: every call */
    bool forward; /* run the real call before answering an error */
    char token[33];
} rule;

/* What one call is to suffer. */
typedef struct fault {
    CK_RV error;
    unsigned stall_ms;
    bool forward;
    bool bad_ctl;
} fault;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static CK_FUNCTION_LIST *real; /* the target's list; NULL: not loaded */
static CK_FUNCTION_LIST shim;
static const char *ctl_path;

static pthread_rwlock_t gate;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char ctl_text[MAX_CTL + 1]; /* the content the rules came from */
static size_t ctl_len;
static bool ctl_seen; /* ctl_text is valid */
static bool ctl_bad;
static rule rules[MAX_RULES];
static size_t nrules;
static kl_p11shim_stats stats;

static const struct {
    const char *name;
    CK_RV rv;
} rv_names[] = {
    {"CKR_SESSION_HANDLE_INVALID", CKR_SESSION_HANDLE_INVALID},
    {"CKR_SESSION_CLOSED", CKR_SESSION_CLOSED},
    {"CKR_USER_NOT_LOGGED_IN", CKR_USER_NOT_LOGGED_IN},
    {"CKR_DEVICE_REMOVED", CKR_DEVICE_REMOVED},
    {"CKR_TOKEN_NOT_PRESENT", CKR_TOKEN_NOT_PRESENT},
    {"CKR_DEVICE_ERROR", CKR_DEVICE_ERROR},
    {"CKR_GENERAL_ERROR", CKR_GENERAL_ERROR},
};

static bool parse_ulong(const char *s, unsigned long max, unsigned long *out)
{
    if (*s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 0);
    if (errno || *end || v > max)
        return false;
    *out = v;
    return true;
}

static bool parse_rv(const char *s, CK_RV *out)
{
    for (size_t i = 0; i < sizeof rv_names / sizeof rv_names[0]; i++)
        if (strcmp(s, rv_names[i].name) == 0) {
            *out = rv_names[i].rv;
            return true;
        }
    unsigned long v;
    if (strncmp(s, "CKR_0x", 6) == 0 && parse_ulong(s + 4, 0xffffffffu, &v) &&
        v != CKR_OK) {
        *out = v;
        return true;
    }
    return false;
}

/* One rule line (modified in place by strtok_r). */
static bool parse_rule(char *line, rule *r)
{
    memset(r, 0, sizeof *r);
    r->left = -1;
    r->forward = true;
    char *save = NULL;
    char *w = strtok_r(line, " \t\r", &save);
    if (!w)
        return false;
    if (strcmp(w, "sign") == 0)
        r->calls = CALL_SIGN;
    else if (strcmp(w, "decrypt") == 0)
        r->calls = CALL_DECRYPT;
    else if (strcmp(w, "crypto") == 0)
        r->calls = CALL_SIGN | CALL_DECRYPT;
    else if (strcmp(w, "open") == 0)
        r->calls = CALL_OPEN;
    else
        return false;
    bool action = false;
    while ((w = strtok_r(NULL, " \t\r", &save))) {
        char *eq = strchr(w, '=');
        if (!eq || eq[1] == 0)
            return false;
        *eq = 0;
        const char *v = eq + 1;
        unsigned long n;
        if (strcmp(w, "error") == 0) {
            if (!parse_rv(v, &r->error))
                return false;
            action = true;
        } else if (strcmp(w, "stall_ms") == 0) {
            if (!parse_ulong(v, 600000, &n) || n == 0)
                return false;
            r->stall_ms = (unsigned)n;
            action = true;
        } else if (strcmp(w, "count") == 0) {
            if (!parse_ulong(v, 1000000, &n) || n == 0)
                return false;
            r->left = (long)n;
        } else if (strcmp(w, "forward") == 0) {
            if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
                return false;
            r->forward = v[0] == '1';
        } else if (strcmp(w, "token") == 0) {
            if (strlen(v) >= sizeof r->token)
                return false;
            strcpy(r->token, v);
        } else {
            return false;
        }
    }
    /* a rule that does nothing, or skips a call and answers OK with no
     * result, is a mistake */
    return action && (r->forward || r->error != CKR_OK);
}

/* Called with mu held: replaces the rules by those of text. */
static void parse_ctl(char *text)
{
    nrules = 0;
    ctl_bad = false;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        while (*line == ' ' || *line == '\t')
            line++;
        if (*line == 0 || *line == '#' || *line == '\r')
            continue;
        if (nrules == MAX_RULES || !parse_rule(line, &rules[nrules])) {
            ctl_bad = true;
            fprintf(stderr, "kl_p11shim: bad control line: %s\n", line);
            nrules = 0;
            return;
        }
        nrules++;
    }
}

/* Called with mu held: re-reads the control file; a changed content
 * replaces the rules. A missing file means no rules. */
static void reload(void)
{
    char buf[MAX_CTL + 2];
    size_t n = 0;
    FILE *f = ctl_path ? fopen(ctl_path, "r") : NULL;
    if (f) {
        n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
    }
    bool too_long = n > MAX_CTL;
    if (too_long)
        n = MAX_CTL;
    buf[n] = 0;
    if (ctl_seen && n == ctl_len && memcmp(buf, ctl_text, n) == 0)
        return;
    memcpy(ctl_text, buf, n + 1);
    ctl_len = n;
    ctl_seen = true;
    if (too_long) {
        fprintf(stderr, "kl_p11shim: control file over %d bytes\n", MAX_CTL);
        nrules = 0;
        ctl_bad = true;
        return;
    }
    parse_ctl(buf); /* tokenizes buf, not ctl_text */
}

/* The label of the token in slot ("" when unknown), trimmed of its
 * padding. The caller holds the gate. */
static void token_label(CK_SLOT_ID slot, char out[33])
{
    CK_TOKEN_INFO ti;
    out[0] = 0;
    if (real->C_GetTokenInfo(slot, &ti) != CKR_OK)
        return;
    size_t n = sizeof ti.label;
    while (n > 0 && (ti.label[n - 1] == ' ' || ti.label[n - 1] == 0))
        n--;
    memcpy(out, ti.label, n);
    out[n] = 0;
}

/* The caller holds the gate. */
static bool session_slot(CK_SESSION_HANDLE h, CK_SLOT_ID *slot)
{
    CK_SESSION_INFO si;
    if (real->C_GetSessionInfo(h, &si) != CKR_OK)
        return false;
    *slot = si.slotID;
    return true;
}

/* Decides what a call of kind suffers, on session h or on slot (open). */
static fault decide(unsigned kind, CK_SESSION_HANDLE h, CK_SLOT_ID slot)
{
    fault f = {CKR_OK, 0, true, false};
    bool need_label = false;
    pthread_mutex_lock(&mu);
    stats.calls++;
    reload();
    if (ctl_bad) {
        stats.bad_ctl++;
        f.bad_ctl = true;
        pthread_mutex_unlock(&mu);
        return f;
    }
    for (size_t i = 0; i < nrules; i++)
        if ((rules[i].calls & kind) && rules[i].token[0])
            need_label = true;
    pthread_mutex_unlock(&mu);

    /* asked outside the lock: these are calls into the target */
    char label[33] = "";
    if (need_label) {
        pthread_rwlock_rdlock(&gate);
        if (kind == CALL_OPEN || session_slot(h, &slot))
            token_label(slot, label);
        pthread_rwlock_unlock(&gate);
    }

    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nrules; i++) {
        rule *r = &rules[i];
        if (!(r->calls & kind) || r->left == 0 ||
            (r->token[0] && strcmp(r->token, label) != 0))
            continue;
        if (r->left > 0)
            r->left--;
        f.error = r->error;
        f.stall_ms = r->stall_ms;
        f.forward = r->forward;
        if (f.stall_ms)
            stats.stalls++;
        if (f.error != CKR_OK)
            stats.errors++;
        break;
    }
    pthread_mutex_unlock(&mu);
    return f;
}

static void stall(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000,
                          .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void stall_done(void)
{
    pthread_mutex_lock(&mu);
    stats.stalls_done++;
    pthread_mutex_unlock(&mu);
}

/* Calls the target with the gate held for reading. */
#define FORWARD(call)                                                          \
    do {                                                                       \
        pthread_rwlock_rdlock(&gate);                                          \
        CK_RV rv_ = real->call;                                                \
        pthread_rwlock_unlock(&gate);                                          \
        return rv_;                                                            \
    } while (0)

static CK_RV shim_close_session(CK_SESSION_HANDLE h)
{
    FORWARD(C_CloseSession(h));
}

static CK_RV shim_login(CK_SESSION_HANDLE h, CK_USER_TYPE u,
                        CK_UTF8CHAR_PTR pin, CK_ULONG len)
{
    FORWARD(C_Login(h, u, pin, len));
}

static CK_RV shim_logout(CK_SESSION_HANDLE h)
{
    FORWARD(C_Logout(h));
}

static CK_RV shim_find_init(CK_SESSION_HANDLE h, CK_ATTRIBUTE_PTR t, CK_ULONG n)
{
    FORWARD(C_FindObjectsInit(h, t, n));
}

static CK_RV shim_find(CK_SESSION_HANDLE h, CK_OBJECT_HANDLE_PTR o,
                       CK_ULONG max, CK_ULONG_PTR n)
{
    FORWARD(C_FindObjects(h, o, max, n));
}

static CK_RV shim_find_final(CK_SESSION_HANDLE h)
{
    FORWARD(C_FindObjectsFinal(h));
}

static CK_RV shim_get_attr(CK_SESSION_HANDLE h, CK_OBJECT_HANDLE o,
                           CK_ATTRIBUTE_PTR t, CK_ULONG n)
{
    FORWARD(C_GetAttributeValue(h, o, t, n));
}

static CK_RV shim_sign_init(CK_SESSION_HANDLE h, CK_MECHANISM_PTR m,
                            CK_OBJECT_HANDLE k)
{
    FORWARD(C_SignInit(h, m, k));
}

static CK_RV shim_decrypt_init(CK_SESSION_HANDLE h, CK_MECHANISM_PTR m,
                               CK_OBJECT_HANDLE k)
{
    FORWARD(C_DecryptInit(h, m, k));
}

static CK_RV real_sign(CK_SESSION_HANDLE h, CK_BYTE_PTR data, CK_ULONG len,
                       CK_BYTE_PTR sig, CK_ULONG_PTR sig_len)
{
    FORWARD(C_Sign(h, data, len, sig, sig_len));
}

static CK_RV real_decrypt(CK_SESSION_HANDLE h, CK_BYTE_PTR enc, CK_ULONG len,
                          CK_BYTE_PTR data, CK_ULONG_PTR data_len)
{
    FORWARD(C_Decrypt(h, enc, len, data, data_len));
}

/* Makes error true of session h (see shim.h), then answers it. */
static CK_RV make_real(CK_SESSION_HANDLE h, CK_RV error)
{
    CK_SLOT_ID slot;
    pthread_rwlock_wrlock(&gate);
    switch (error) {
    case CKR_SESSION_HANDLE_INVALID:
    case CKR_SESSION_CLOSED: real->C_CloseSession(h); break;
    case CKR_USER_NOT_LOGGED_IN: real->C_Logout(h); break;
    case CKR_DEVICE_REMOVED:
    case CKR_TOKEN_NOT_PRESENT:
        if (session_slot(h, &slot))
            real->C_CloseAllSessions(slot);
        break;
    default: break;
    }
    pthread_rwlock_unlock(&gate);
    return error;
}

static CK_RV shim_sign(CK_SESSION_HANDLE h, CK_BYTE_PTR data, CK_ULONG len,
                       CK_BYTE_PTR sig, CK_ULONG_PTR sig_len)
{
    if (!sig)
        return real_sign(h, data, len, sig, sig_len);
    fault f = decide(CALL_SIGN, h, 0);
    if (f.stall_ms)
        stall(f.stall_ms);
    CK_RV rv = CKR_OK;
    if (f.forward)
        rv = real_sign(h, data, len, sig, sig_len);
    if (f.bad_ctl)
        return CKR_GENERAL_ERROR; /* the operation ended above */
    if (f.error != CKR_OK)
        rv = make_real(h, f.error);
    if (f.stall_ms)
        stall_done();
    return rv;
}

static CK_RV shim_decrypt(CK_SESSION_HANDLE h, CK_BYTE_PTR enc, CK_ULONG len,
                          CK_BYTE_PTR data, CK_ULONG_PTR data_len)
{
    if (!data)
        return real_decrypt(h, enc, len, data, data_len);
    fault f = decide(CALL_DECRYPT, h, 0);
    if (f.stall_ms)
        stall(f.stall_ms);
    CK_RV rv = CKR_OK;
    if (f.forward)
        rv = real_decrypt(h, enc, len, data, data_len);
    if (f.bad_ctl)
        return CKR_GENERAL_ERROR; /* the operation ended above */
    if (f.error != CKR_OK)
        rv = make_real(h, f.error);
    if (f.stall_ms)
        stall_done();
    return rv;
}

static CK_RV real_open(CK_SLOT_ID slot, CK_FLAGS flags, CK_VOID_PTR app,
                       CK_NOTIFY notify, CK_SESSION_HANDLE_PTR out)
{
    FORWARD(C_OpenSession(slot, flags, app, notify, out));
}

static CK_RV shim_open_session(CK_SLOT_ID slot, CK_FLAGS flags, CK_VOID_PTR app,
                               CK_NOTIFY notify, CK_SESSION_HANDLE_PTR out)
{
    fault f = decide(CALL_OPEN, 0, slot);
    if (f.bad_ctl)
        return CKR_GENERAL_ERROR;
    if (f.stall_ms)
        stall(f.stall_ms);
    /* no session for an error: the token is "absent" */
    CK_RV rv =
        f.error != CKR_OK ? f.error : real_open(slot, flags, app, notify, out);
    if (f.stall_ms)
        stall_done();
    return rv;
}

static CK_RV shim_get_function_list(CK_FUNCTION_LIST_PTR_PTR out);

static void load(void)
{
    const char *path = getenv("KL_P11SHIM_TARGET");
    if (!path || !*path) {
        fprintf(stderr, "kl_p11shim: KL_P11SHIM_TARGET is not set\n");
        return;
    }
    /* kept loaded for the life of the process, like the shim itself */
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "kl_p11shim: %s\n", dlerror());
        return;
    }
    CK_C_GetFunctionList get;
    *(void **)&get = dlsym(lib, "C_GetFunctionList");
    CK_FUNCTION_LIST *fl = NULL;
    if (!get || get(&fl) != CKR_OK || !fl) {
        fprintf(stderr, "kl_p11shim: %s has no function list\n", path);
        return;
    }
    /* writers first: an effect is not put off by a stream of calls */
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra,
                                  PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&gate, &ra);
    pthread_rwlockattr_destroy(&ra);
    const char *ctl = getenv("KL_P11SHIM_CTL");
    ctl_path = ctl && *ctl ? strdup(ctl) : NULL;
    shim = *fl;
    shim.C_GetFunctionList = shim_get_function_list;
    shim.C_OpenSession = shim_open_session;
    shim.C_Sign = shim_sign;
    shim.C_Decrypt = shim_decrypt;
    shim.C_CloseSession = shim_close_session;
    shim.C_Login = shim_login;
    shim.C_Logout = shim_logout;
    shim.C_FindObjectsInit = shim_find_init;
    shim.C_FindObjects = shim_find;
    shim.C_FindObjectsFinal = shim_find_final;
    shim.C_GetAttributeValue = shim_get_attr;
    shim.C_SignInit = shim_sign_init;
    shim.C_DecryptInit = shim_decrypt_init;
    real = fl;
}

static CK_RV shim_get_function_list(CK_FUNCTION_LIST_PTR_PTR out)
{
    if (!out)
        return CKR_ARGUMENTS_BAD;
    pthread_once(&load_once, load);
    if (!real)
        return CKR_GENERAL_ERROR;
    *out = &shim;
    return CKR_OK;
}

/* The module's two exported symbols. */
__attribute__((visibility("default"))) CK_RV
C_GetFunctionList(CK_FUNCTION_LIST_PTR_PTR out)
{
    return shim_get_function_list(out);
}

__attribute__((visibility("default"))) void
kl_p11shim_get_stats(kl_p11shim_stats *out)
{
    pthread_mutex_lock(&mu);
    *out = stats;
    pthread_mutex_unlock(&mu);
}
