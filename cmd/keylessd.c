/* SPDX-License-Identifier: Apache-2.0 */
/* keylessd: the Keyless SSL key server. A thin main: everything it does is
 * in src/daemon/daemon*.c (modes, startup, serving, reload). */
#include "daemon/daemon.h"

#ifndef KEYLESSD_VERSION
#define KEYLESSD_VERSION "0.1.0"
#endif

int main(int argc, char **argv)
{
    return kl_daemon_main(argc, argv, KEYLESSD_VERSION);
}
