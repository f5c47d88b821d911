#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The long fuzz run (`make fuzz-long`): every libFuzzer target in
# BUILD_DIR for SECONDS, starting from its checked-in corpus
# (fuzz/corpus/<target>/). New inputs go to a scratch directory that is
# deleted afterwards (merge worthwhile ones by hand with -merge=1); crashes
# land in fuzz/artifacts/. Prints one Markdown table for bench/RESULTS.md:
# executions, executions per second, corpus files before and after, the
# coverage reached and the findings. Exit 1 when any target found one.
# Usage: fuzz/long-run.sh BUILD_DIR SECONDS [TARGET...]
set -euo pipefail
build=${1:-build-fuzz}
secs=${2:-600}
shift 2 || true
top=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$top/fuzz/artifacts"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for f in "$build"/fuzz_*; do
        [ -x "$f" ] && targets+=("$(basename "$f")")
    done
fi
rc=0
rows=()
for name in "${targets[@]}"; do
    f="$build/$name"
    corpus="$top/fuzz/corpus/${name#fuzz_}"
    scratch=$(mktemp -d)
    log=$(mktemp)
    seeds=$(find "$corpus" -type f 2>/dev/null | wc -l)
    echo "== $name for ${secs}s (corpus $corpus, $seeds files)" >&2
    found=none
    if ! "$f" -max_total_time="$secs" -print_final_stats=1 -timeout=10 \
        -rss_limit_mb=2048 -artifact_prefix="$top/fuzz/artifacts/$name-" \
        "$scratch" "$corpus" 2>"$log"; then
        tail -40 "$log" >&2
        found=$(grep -oE '^==[0-9]+==ERROR: [A-Za-z]+: [a-z-]+|deadly signal|timeout|out-of-memory' "$log" |
            head -1 || echo failure)
        rc=1
    fi
    execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log" | tail -1)
    rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+)/\1/p' "$log" | tail -1)
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
    grown=$(find "$scratch" -type f | wc -l)
    rows+=("| $name | $secs | ${execs:-?} | ${rate:-?} | $seeds | $((seeds + grown)) | ${cov:-?} | $found |")
    rm -rf "$scratch" "$log"
done
echo "| target | seconds | executions | exec/s | corpus before | corpus after | coverage (edges, features) | findings |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
exit $rc
