/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the Origin CA answer (activation/activate.h): the
 * body of an HTTP response from init_endpoint, which keylessd must treat as
 * untrusted. Input: two bytes of HTTP status (big-endian, taken modulo
 * 1000), then the body. Checked: a result is either a certificate or a
 * message, never both; the message fits its buffer, is terminated, and
 * holds no control character (it goes into a log line as it is); a small
 * buffer is never overrun. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "activation/activate.h"

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            abort();                                                           \
    } while (0)

static void check_message(const char *err, size_t cap)
{
    size_t n = strnlen(err, cap);
    CHECK(n < cap);
    for (size_t i = 0; i < n; i++)
        CHECK((unsigned char)err[i] >= 0x20 && err[i] != 0x7f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    long status = ((long)data[0] << 8 | data[1]) % 1000;
    const char *body = (const char *)data + 2;
    size_t len = size - 2;
    char err[2048], *cert = NULL;
    memset(err, 'x', sizeof err);
    kl_status st = kl_activate_parse(status, body, len, &cert, err, sizeof err);
    if (st == KL_OK) {
        CHECK(cert && *cert && status >= 200 && status <= 299);
        free(cert);
    } else {
        CHECK(!cert);
        CHECK(err[0] != '\0');
        check_message(err, sizeof err);
    }
    char tiny[24];
    st = kl_activate_parse(status, body, len, &cert, tiny, sizeof tiny);
    if (st == KL_OK)
        free(cert);
    else
        check_message(tiny, sizeof tiny);
    return 0;
}
