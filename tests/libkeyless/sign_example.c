/* SPDX-License-Identifier: Apache-2.0 */
/* A program built against the installed libkeyless only (its headers and
 * `pkg-config --cflags --libs keyless`), as an application would be:
 *
 *   sign_example HOST PORT CERT KEY CA SKIHEX DIGESTHEX OUT
 *
 * asks the key server for an ECDSA-SHA256 signature of DIGESTHEX (32 bytes)
 * with the key SKIHEX (20 bytes) over mutual TLS and writes the DER
 * signature to OUT. tests/integration/test_libkeyless.sh verifies it with
 * openssl. Exit status: 0 signed, 1 the server refused or failed, 2 usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <keyless/client.h>
#include <keyless/protocol.h>

static int unhex(const char *s, uint8_t *out, size_t n)
{
    if (strlen(s) != 2 * n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    return 0;
}

int main(int argc, char **argv)
{
    uint8_t ski[20], digest[32];
    if (argc != 9 || unhex(argv[6], ski, sizeof ski) ||
        unhex(argv[7], digest, sizeof digest)) {
        fprintf(stderr, "usage: sign_example HOST PORT CERT KEY CA SKIHEX "
                        "DIGESTHEX OUT\n");
        return 2;
    }
    kl_client_opts o = {.host = argv[1],
                        .port = (uint16_t)atoi(argv[2]),
                        .cert_file = argv[3],
                        .key_file = argv[4],
                        .ca_file = argv[5]};
    char err[256];
    kl_client *c = NULL;
    kl_status st = kl_client_connect(&o, &c, err, sizeof err);
    if (st != KL_OK) {
        fprintf(stderr, "connect: %s: %s\n", kl_status_str(st), err);
        return 1;
    }
    kl_request_spec spec = {.opcode = KL_OP_ECDSA_SIGN_SHA256,
                            .payload = digest,
                            .payload_len = sizeof digest,
                            .ski = ski};
    kl_client_result r;
    st = kl_client_call(c, &spec, 5000, &r);
    if (st != KL_OK) {
        fprintf(stderr, "call: %s: %s\n", kl_status_str(st),
                kl_client_last_error(c));
        kl_client_close(c);
        return 1;
    }
    int rc = 1;
    if (r.opcode == KL_OP_RESPONSE && r.payload_len) {
        FILE *f = fopen(argv[8], "wb");
        if (f && fwrite(r.payload, 1, r.payload_len, f) == r.payload_len)
            rc = 0;
        if (f && fclose(f))
            rc = 1;
        printf("signed: %zu bytes, TLS %s\n", r.payload_len,
               kl_client_tls_version(c));
    } else {
        fprintf(stderr, "server answered opcode 0x%02x error %u (%s)\n",
                r.opcode, r.error, kl_err_name(r.error));
    }
    kl_client_result_free(&r);
    kl_client_close(c);
    return rc;
}
