/* SPDX-License-Identifier: Apache-2.0 */
/* kl_p11shim, a test-only PKCS#11 module: it forwards every call
 * to a real module (SoftHSM2 in the tests) and, on command, makes the
 * faults a real HSM produces and SoftHSM does not.
 *
 * Environment, read when the module is first loaded:
 *   KL_P11SHIM_TARGET  path of the module to forward to (required)
 *   KL_P11SHIM_CTL     path of the control file (optional: no faults)
 *
 * The control file is re-read on every C_Sign, C_Decrypt and C_OpenSession;
 * when its content changed, its rules replace the old ones (and their
 * counts start afresh). Write it atomically (a temporary file, then
 * rename) so that the shim never sees half a file. One rule per line:
 *
 *   CALLS [error=CKR_NAME] [stall_ms=N] [count=N] [token=LABEL] [forward=0]
 *
 * CALLS: sign (C_Sign), decrypt (C_Decrypt), crypto (both), open
 * (C_OpenSession). The first rule that matches a call and has calls left
 * applies: the call is delayed by stall_ms (then forwarded), and/or
 * answered with the error. count: how many calls the rule applies to
 * (omitted: every call while the rule is in the file). token: only calls on
 * the token with this label. Empty lines and lines starting with '#' are
 * skipped. A malformed file makes every such call fail with
 * CKR_GENERAL_ERROR (and counts in bad_ctl), so a typo in a test is loud.
 *
 * An error is made real, not only answered, so the module's state matches
 * what it says (a sign or decrypt runs to its end first, so that no
 * operation stays active):
 *   CKR_SESSION_HANDLE_INVALID, CKR_SESSION_CLOSED: the session is closed;
 *   CKR_USER_NOT_LOGGED_IN: the token is logged out (C_Logout);
 *   CKR_DEVICE_REMOVED, CKR_TOKEN_NOT_PRESENT: every session of the token is
 *     closed (C_CloseAllSessions), which also logs it out;
 *   others (CKR_DEVICE_ERROR, CKR_GENERAL_ERROR, CKR_0x..): only answered.
 * forward=0 skips the real sign or decrypt: the error is answered and the
 * operation stays active on the session, as a module that does not end an
 * operation on error leaves it. A length query (NULL output buffer) is
 * never faulted. */
#ifndef KL_TESTS_P11SHIM_H
#define KL_TESTS_P11SHIM_H

/* Counters of the shim, for a test in the process that loaded it:
 * dlopen(path, RTLD_NOW | RTLD_NOLOAD) then dlsym(KL_P11SHIM_STATS_FN). */
typedef struct kl_p11shim_stats {
    unsigned long calls;       /* C_Sign, C_Decrypt, C_OpenSession seen */
    unsigned long errors;      /* error answers made */
    unsigned long stalls;      /* stalls begun */
    unsigned long stalls_done; /* stalled calls that have returned */
    unsigned long bad_ctl;     /* calls failed for a malformed control file */
} kl_p11shim_stats;

typedef void (*kl_p11shim_stats_fn)(kl_p11shim_stats *out);
#define KL_P11SHIM_STATS_FN "kl_p11shim_get_stats"

#endif
