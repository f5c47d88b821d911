/* SPDX-License-Identifier: Apache-2.0 */
/* For the tests that drive the test accelerator (accel.h): its control
 * file, written atomically, then a wait for the provider's next look at it
 * (it looks at most every 50 ms). Header-only: each test is a program. */
#ifndef KL_TESTS_ACCELCTL_H
#define KL_TESTS_ACCELCTL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include <cmocka.h>

/* Every write differs from the one before (a numbered comment), so that
 * the same settings written again re-arm fail=, lose= and busy=. */
static inline void accel_ctl(const char *path, const char *text)
{
    static unsigned writes;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(text, f);
    fprintf(f, "\n# write %u\n", ++writes);
    fclose(f);
    assert_int_equal(rename(tmp, path), 0);
    usleep(60 * 1000);
}

#endif
