/* SPDX-License-Identifier: Apache-2.0 */
/* Running the command-line tools (keyless-cli, keyless-bench) against a
 * test daemon, with the test PKI's client certificate, key and CA on the
 * command line: the scaffolding test_cli.c and test_bench.c share. */
#ifndef KL_TEST_TOOL_H
#define KL_TEST_TOOL_H

#include <stddef.h>

#define TT_PATH_MAX 1024

typedef struct tt_tool {
    char path[TT_PATH_MAX]; /* $KL_BIN_DIR/<name> */
    /* the TLS flags' names ("--cert" or "-cert", ...) */
    const char *cert_flag, *key_flag, *ca_flag;
    /* the test PKI's client files, copied once (tp_path rotates buffers) */
    char cert[TT_PATH_MAX], key[TT_PATH_MAX], ca[TT_PATH_MAX];
} tt_tool;

/* Copies src into a TT_PATH_MAX buffer (keeps a tp_path/tu_vector_path
 * result). */
void tt_keep(char *dst, const char *src);

/* The tool name in the build directory; dash: "--" for keyless-cli's
 * flags, "-" for keyless-bench's (the reference tool's spelling). */
void tt_tool_init(tt_tool *t, const char *name, const char *dash);

/* Runs the tool: lead (words before the TLS flags, e.g. a command; NULL:
 * none), the TLS flags, then args (both NULL-terminated). Returns the exit
 * status; the output (stdout and stderr) in *out, to free. */
int tt_tool_run(const tt_tool *t, const char *const *lead,
                const char *const *args, char **out, int timeout_ms);

#endif
