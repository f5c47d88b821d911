#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make test-packaging`: every tests/packaging/test_*.sh; a test that exits
# 77 is skipped (it says why). KL_BIN_DIR is the build to take keylessd from.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export KL_SRC_DIR=${KL_SRC_DIR:-$(cd "$here/../.." && pwd)}
export KL_BIN_DIR=${KL_BIN_DIR:-$KL_SRC_DIR/build}
passed=() failed=() skipped=()
for t in "$here"/test_*.sh; do
    name=$(basename "$t" .sh)
    echo "=== $name"
    bash "$t"
    case $? in
    0) passed+=("$name") ;;
    77) skipped+=("$name") ;;
    *) failed+=("$name") ;;
    esac
done
echo "=== packaging: ${#passed[@]} passed, ${#skipped[@]} skipped${skipped:+ (${skipped[*]})}, ${#failed[@]} failed${failed:+ (${failed[*]})}"
[ ${#failed[@]} -eq 0 ]
