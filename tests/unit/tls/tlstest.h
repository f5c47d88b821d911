/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers for the src/tls tests (header-only: each test_*.c is a program):
 * a temporary directory of P-256 certificates made with the openssl CLI. */
#ifndef KL_TEST_TLSTEST_H
#define KL_TEST_TLSTEST_H

#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

static char tt_dir[256];

/* tt_dir/name (eight results may be in use at once). */
static const char *tt_path(const char *name)
{
    static char buf[8][512];
    static int i;
    i = (i + 1) % 8;
    snprintf(buf[i], sizeof buf[i], "%s/%s", tt_dir, name);
    return buf[i];
}

/* Creates tt_dir from a mkdtemp template ("/tmp/kl-tls-XXXXXX"). */
static int tt_mkdir(const char *template)
{
    snprintf(tt_dir, sizeof tt_dir, "%s", template);
    return mkdtemp(tt_dir) ? 0 : -1;
}

/* A self-signed CA: NAME.key and NAME.pem, CN=cn. */
static void tt_ca(const char *name, const char *cn)
{
    tu_sh_in(tt_dir,
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
             "-nodes -days 2 -subj /CN=%s -keyout %s.key -out %s.pem "
             "-addext basicConstraints=critical,CA:TRUE "
             "-addext keyUsage=critical,keyCertSign,cRLSign",
             cn, name, name);
}

/* A leaf NAME.key and NAME.pem, CN=cn, with extendedKeyUsage eku and
 * subjectAltName san, issued by the CA named ca (tt_ca). */
static void tt_leaf(const char *name, const char *cn, const char *eku,
                    const char *san, const char *ca)
{
    tu_sh_in(tt_dir,
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
             "-subj /CN=%s -keyout %s.key -out %s.csr && "
             "printf '%%s\\n' 'basicConstraints=CA:FALSE' "
             "'extendedKeyUsage=%s' 'subjectAltName=%s' > %s.ext && "
             "openssl x509 -req -in %s.csr -CA %s.pem -CAkey %s.key "
             "-CAcreateserial -days 2 -extfile %s.ext -out %s.pem",
             cn, name, name, eku, san, name, name, ca, ca, name, name);
}

/* cmocka group teardown: removes tt_dir. */
static int tt_remove(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tt_dir);
    return system(cmd) == 0 ? 0 : -1;
}

#endif
