#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs each libFuzzer target in BUILD_DIR for SECONDS on its corpus
# (fuzz/corpus/<target>/, checked in). New inputs go to a scratch directory,
# not into the checked-in corpus; crashes land in fuzz/artifacts/.
set -euo pipefail
build=${1:-build-fuzz}
secs=${2:-30}
top=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$top/fuzz/artifacts"
rc=0
for f in "$build"/fuzz_*; do
    [ -x "$f" ] || continue
    name=$(basename "$f")
    corpus="$top/fuzz/corpus/${name#fuzz_}"
    scratch=$(mktemp -d)
    echo "== $name for ${secs}s (corpus $corpus)"
    if ! "$f" -max_total_time="$secs" -print_final_stats=0 \
        -artifact_prefix="$top/fuzz/artifacts/$name-" "$scratch" "$corpus" \
        2>"$scratch.log"; then
        tail -40 "$scratch.log"
        echo "!! $name found a failure (see fuzz/artifacts/)"
        rc=1
    else
        grep -E '^(#[0-9]+.*DONE|Done)' "$scratch.log" | tail -1 || true
    fi
    rm -rf "$scratch" "$scratch.log"
done
exit $rc
