#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every source and build file of keylessd opens with its SPDX licence line
# (README.md "Licence"). scripts/spdx.sh --check lists the files that lack
# it and fails; scripts/spdx.sh --fix adds it (after a #! line if there is
# one). tests/lint/test_spdx.sh runs --check in the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
id="SPDX-License-Identifier: Apache-2.0"
mode=${1:---check}
case $mode in --check | --fix) ;; *)
    echo "usage: scripts/spdx.sh [--check|--fix]" >&2
    exit 2
    ;;
esac
missing=0
while IFS= read -r f; do
    [ -f "$f" ] || continue
    head -n 3 "$f" | grep -q "$id" && continue
    if [ "$mode" = --check ]; then
        echo "spdx: $f lacks '$id' in its first 3 lines (fix: scripts/spdx.sh --fix)" >&2
        missing=$((missing + 1))
        continue
    fi
    case $f in
    *.c | *.h | *.inc | *.map) line="/* $id */" ;;
    *) line="# $id" ;;
    esac
    tmp=$(mktemp)
    if head -n 1 "$f" | grep -q '^#!'; then
        { head -n 1 "$f"; echo "$line"; tail -n +2 "$f"; } >"$tmp"
    else
        { echo "$line"; cat "$f"; } >"$tmp"
    fi
    chmod --reference="$f" "$tmp"
    mv "$tmp" "$f"
done < <(git ls-files -co --exclude-standard '*.c' '*.h' '*.inc' '*.map' '*.sh' \
    '*.py' '*.cmake' 'CMakeLists.txt' 'Makefile' 'dev.sh' '.ci/run')
if [ "$mode" = --check ] && [ "$missing" -ne 0 ]; then
    echo "spdx: $missing file(s) without a licence line" >&2
    exit 1
fi
echo "spdx: ok"
