/* SPDX-License-Identifier: Apache-2.0 */
/* keyless-cli's fleet commands (cli_fleet.c) and what they borrow from
 * the rest of keyless-cli (keyless-cli.c). */
#ifndef KL_CMD_CLI_FLEET_H
#define KL_CMD_CLI_FLEET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* keyless-cli fleet ...: argv[0] is "fleet". Returns the exit status. */
int kl_cli_fleet(int argc, char **argv);
/* 40 hex digits into 20 bytes. */
bool kl_cli_parse_ski(const char *hex, uint8_t ski[20]);
/* The SKI of a certificate, public key or private key file. */
bool kl_cli_file_ski(const char *path, uint8_t ski[20], char *err,
                     size_t errlen);

#endif
