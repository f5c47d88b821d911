#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the whole test suite several times, without retries, optionally with
# CPU hogs competing for the cores, and tabulates which tests failed in
# which runs: how flaky tests are found (a flaky test is a bug; the test
# command never retries). `make flaky-hunt RUNS=5 LOAD=2`.
#   scripts/flaky-hunt.sh [-n RUNS] [-l HOGS] [-R REGEX] [BUILD]
# Logs: BUILD/flaky-hunt/run-N.log; the table is printed at the end and
# kept in BUILD/flaky-hunt/summary.txt. Exit status 1 if any run failed.
set -uo pipefail
runs=3 hogs=0 regex=
while getopts "n:l:R:" o; do
    case $o in
    n) runs=$OPTARG ;;
    l) hogs=$OPTARG ;;
    R) regex=$OPTARG ;;
    *) echo "usage: $0 [-n RUNS] [-l HOGS] [-R REGEX] [BUILD]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
build=$(cd "${1:-build}" && pwd) || exit 2
out=$build/flaky-hunt
rm -rf "$out"
mkdir -p "$out"
pids=()
stop_hogs() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null; pids=(); }
trap stop_hogs EXIT
for ((i = 0; i < hogs; i++)); do
    sh -c 'while :; do :; done' &
    pids+=($!)
done
declare -A fails=()
bad=0
for ((r = 1; r <= runs; r++)); do
    start=$(date +%s)
    (cd "$build" && ctest -j "$(nproc)" --output-on-failure ${regex:+-R "$regex"}) \
        >"$out/run-$r.log" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    failed=$(sed -n '/^The following tests FAILED:/,$s/^[[:space:]]*[0-9]* - \([^ ]*\) (.*)$/\1/p' "$out/run-$r.log")
    echo "run $r: exit $rc in ${took}s${failed:+; failed: $(echo $failed)}" | tee -a "$out/summary.txt"
    for t in $failed; do fails[$t]="${fails[$t]:-} $r"; done
    [ $rc -eq 0 ] || bad=1
done
stop_hogs
{
    echo "runs: $runs, CPU hogs: $hogs"
    if [ ${#fails[@]} -eq 0 ]; then
        echo "no test failed"
    else
        printf '%-45s %s\n' test "failed in runs"
        for t in "${!fails[@]}"; do printf '%-45s%s\n' "$t" "${fails[$t]}"; done | sort
    fi
} | tee -a "$out/summary.txt"
exit $bad
