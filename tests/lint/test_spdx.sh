#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every source and build file carries the project's licence line
# (README.md "Licence"); scripts/spdx.sh names each file that does not.
set -euo pipefail
src=${KL_SRC_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
# Outside a git checkout (an unpacked source tarball) there is no file list.
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || { echo "not a git checkout: skipped"; exit 77; }
cd "$src"
exec bash scripts/spdx.sh --check
