# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Helpers for the packaging tests (sourced). Exit status 77 means skipped,
# as CTest's SKIP_RETURN_CODE and automake use it.
KL_SRC_DIR=${KL_SRC_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
KL_BIN_DIR=${KL_BIN_DIR:-$KL_SRC_DIR/build}
T=$(basename "$0" .sh)
nfail=0

ok() { echo "$T: ok: $*"; }
bad() {
    echo "$T: FAIL: $*" >&2
    nfail=$((nfail + 1))
}
skip() {
    echo "$T: SKIP: $*"
    exit 77
}
die() {
    echo "$T: FAIL: $*" >&2
    exit 1
}
# check DESCRIPTION COMMAND...: runs the command, counts a failure if it fails.
check() {
    local what=$1
    shift
    if "$@"; then ok "$what"; else bad "$what"; fi
}
# mode_is PATH OCTAL [OWNER:GROUP]
mode_is() {
    local got want="$2"
    got=$(stat -c '%a' "$1" 2>/dev/null) || {
        bad "$1: missing"
        return 1
    }
    if [ "$got" != "$want" ]; then
        bad "$1: mode $got, expected $want"
        return 1
    fi
    if [ -n "${3:-}" ]; then
        got=$(stat -c '%U:%G' "$1")
        if [ "$got" != "$3" ]; then
            bad "$1: owner $got, expected $3"
            return 1
        fi
    fi
    ok "$1 is $want${3:+ $3}"
}
finish() {
    if [ "$nfail" -gt 0 ]; then
        echo "$T: $nfail check(s) failed" >&2
        exit 1
    fi
    echo "$T: all checks passed"
    exit 0
}
# quiet COMMAND...: runs it with stdout discarded
quiet() { "$@" >/dev/null; }
