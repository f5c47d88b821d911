/* SPDX-License-Identifier: Apache-2.0 */
/* Readiness notification to the service manager (systemd's sd_notify
 * protocol), without linking libsystemd: one datagram of "KEY=VALUE" lines
 * to the AF_UNIX socket named by $NOTIFY_SOCKET. Outside systemd (variable
 * unset) every call is a no-op that succeeds, so callers need no special
 * case. The unit is Type=notify (packaging/keylessd.service): systemd
 * considers keylessd started only after "READY=1". */
#ifndef KL_CORE_SDNOTIFY_H
#define KL_CORE_SDNOTIFY_H

#include "keyless/status.h"

/* Sends `state` (e.g. "READY=1", "STOPPING=1", "STATUS=serving 4 keys";
 * several assignments separated by '\n') as one datagram.
 * $NOTIFY_SOCKET is a filesystem path ("/run/systemd/notify") or an abstract
 * socket name written with a leading '@'.
 * Returns KL_OK when sent or when $NOTIFY_SOCKET is unset or empty;
 * KL_E_BAD_VALUE for a NULL or empty state; KL_E_CONFIG when $NOTIFY_SOCKET
 * is neither form or too long for sockaddr_un; KL_E_IO when the socket
 * cannot be reached (errno is left set). */
kl_status kl_sd_notify(const char *state) KL_WUR;

/* "RELOADING=1" plus the MONOTONIC_USEC=<now> that systemd (>= 253) wants
 * with it, so a reload is reported as such; follow it with
 * kl_sd_notify("READY=1") once the reload is done. Same results. */
kl_status kl_sd_notify_reloading(void) KL_WUR;

#endif
