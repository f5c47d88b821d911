#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make valgrind`: a named set of integration tests with every
# keylessd they start running under valgrind memcheck. Any memcheck error
# or definite leak makes keylessd exit 99, which fails the test that
# stopped it (td_stop expects 0). The test programs themselves run
# natively. Usage: tests/valgrind/run.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
# Functional tests only: the timing tests' latency bounds do not hold at
# valgrind's speed.
tests="test_serve_ops|test_serve_errors|test_serve_pipeline|test_serve_vectors"
tests+="|test_serve_tls12|test_serve_drain|test_reload"
tests+="|test_acl|test_secrets|test_abuse_io"
export KL_DAEMON_WRAPPER="valgrind --error-exitcode=99 \
--leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite \
--track-origins=no --num-callers=30 --suppressions=$here/keylessd.supp"
start=$(date +%s)
cd "$build"
stamp=$(mktemp)
status=0
ctest --output-on-failure -j2 -R "^integration/($tests)\$" || status=$?
# evidence that keylessd did run under memcheck, and what it found
runs=$(find test-logs -name '*.log' -newer "$stamp" -print0 |
    xargs -0 -r grep -l "ERROR SUMMARY" | wc -l)
dirty=$(find test-logs -name '*.log' -newer "$stamp" -print0 |
    xargs -0 -r grep -L "ERROR SUMMARY: 0 errors" |
    xargs -r grep -l "ERROR SUMMARY" || true)
rm -f "$stamp"
echo "valgrind run: $(( $(date +%s) - start )) s, $runs keylessd runs under memcheck, status $status"
[ -z "$dirty" ] || { echo "memcheck errors in: $dirty"; status=1; }
exit $status
