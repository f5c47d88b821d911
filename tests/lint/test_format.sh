#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every C source and header is formatted as .clang-format says (`make
# format` fixes it); clang-format names each line that is not.
set -euo pipefail
src=${KL_SRC_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
# Outside a git checkout (an unpacked source tarball) there is no file list.
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || { echo "not a git checkout: skipped"; exit 77; }
command -v clang-format >/dev/null || { echo "clang-format not installed (scripts/install-deps.sh installs it)"; exit 1; }
cd "$src"
mapfile -t files < <(git ls-files '*.c' '*.h')
if ! clang-format --dry-run -Werror "${files[@]}"; then
    echo "not formatted: run 'make format' and commit the result" >&2
    exit 1
fi
echo "${#files[@]} files formatted"
