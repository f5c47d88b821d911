/* SPDX-License-Identifier: Apache-2.0 */
/* sd_notify without libsystemd: the protocol is a single datagram on an
 * AF_UNIX socket, so a dozen lines of socket code replace a library
 * dependency the package would otherwise need. systemd identifies the
 * sender by the kernel-supplied credentials (it enables SO_PASSCRED), so
 * nothing but the text is sent; with the unit's default NotifyAccess=main
 * the call must come from the main process, which it does (any thread). */
#include "core/sdnotify.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/status.h"
#include "core/time.h"

/* Fills *sa from $NOTIFY_SOCKET's value; *len gets the address length. */
static kl_status notify_addr(const char *name, struct sockaddr_un *sa,
                             socklen_t *len)
{
    size_t n = strlen(name);
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (name[0] == '/') {
        /* a path needs its terminating NUL inside sun_path */
        KL_ENSURE(n < sizeof sa->sun_path, KL_E_CONFIG);
        memcpy(sa->sun_path, name, n);
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
        return KL_OK;
    }
    /* Abstract namespace: '@' stands for the leading NUL byte, and the
     * name is exactly the remaining bytes (no terminator counted). */
    KL_ENSURE(name[0] == '@' && n >= 2, KL_E_CONFIG);
    KL_ENSURE(n <= sizeof sa->sun_path, KL_E_CONFIG);
    sa->sun_path[0] = '\0';
    memcpy(sa->sun_path + 1, name + 1, n - 1);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    return KL_OK;
}

kl_status kl_sd_notify(const char *state)
{
    KL_ENSURE(state != NULL && state[0] != '\0', KL_E_BAD_VALUE);
    const char *name = getenv("NOTIFY_SOCKET");
    if (name == NULL || name[0] == '\0')
        return KL_OK;

    struct sockaddr_un sa;
    socklen_t salen;
    KL_GUARD(notify_addr(name, &sa, &salen));

    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    KL_ENSURE(fd >= 0, KL_E_IO);
    size_t n = strlen(state);
    ssize_t sent;
    do {
        sent =
            sendto(fd, state, n, MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
    } while (sent < 0 && errno == EINTR);
    int saved = errno;
    close(fd);
    errno = saved;
    /* a datagram is sent whole or not at all */
    KL_ENSURE(sent == (ssize_t)n, KL_E_IO);
    return KL_OK;
}

kl_status kl_sd_notify_reloading(void)
{
    char msg[64];
    int n = snprintf(msg, sizeof msg, "RELOADING=1\nMONOTONIC_USEC=%" PRIu64,
                     kl_now_ns() / 1000u);
    KL_ENSURE(n > 0 && (size_t)n < sizeof msg, KL_E_INTERNAL);
    return kl_sd_notify(msg);
}
