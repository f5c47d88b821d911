#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# HAProxy handshakes per second through the keyless provider:
# with 1 ms and with 50 ms of key server latency, `ssl-mode-async` versus
# blocking key operations, in the same run, written to
# bench/haproxy/RESULTS.md.
#
#   bench/haproxy/run.sh            the table (about 3 minutes)
#   bench/haproxy/run.sh --smoke    every cell once for 1 s, results under
#                                   the build directory (keeps it working)
#
# Set-up: HAProxy (Debian package) in master-worker mode, 2 threads, the
# keyless provider loaded by ssl-provider, a P-256 certificate whose key
# reference points at a keylessd on 127.0.0.1; each request on that key
# takes the latency: keylessd serves the key from a SoftHSM2 token behind
# the test-only fault shim, which stalls each signature that long (slow_key
# in tests/e2e/lib.sh; a stand-in for a key server across a network: the
# stall sleeps, it does not use CPU; SoftHSM2 then signs). The client is
# tests/e2e/hsload.c: 64 handshakes in flight (TLS 1.3, a new connection
# and a full handshake each, no resumption), for DUR seconds; medians of
# REPS runs, async and blocking alternating. A row with the key on local
# disk (no keylessd) gives HAProxy's own rate for this load. The CPU's
# ceiling comes from the same invocation: `openssl speed -multi 2 -seconds
# SPEED_S ecdsap256` (P-256 signatures per second on both cores), REPS
# runs, the best one the ceiling; every row's handshakes/s is also written
# as a share of it. Every process is bounded by `timeout` and stopped on
# exit (tests/e2e/lib.sh). Binaries come from $KL_BIN_DIR (default:
# build/), keyless.so from $KL_PROVIDER, the shim from $KL_P11SHIM (default:
# $KL_BIN_DIR/libkl_p11shim.so, built with the tests).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export KL_SRC_DIR=$ROOT
export KL_BIN_DIR=${KL_BIN_DIR:-$ROOT/build}
export KL_PROVIDER=${KL_PROVIDER:-$KL_BIN_DIR/keyless.so}
smoke=0
case "${1:-}" in
--smoke) smoke=1 ;;
"") ;;
*) echo "usage: $0 [--smoke]" >&2; exit 2 ;;
esac
for b in "$KL_BIN_DIR/keylessd" "$KL_BIN_DIR/keyless-keyref" "$KL_PROVIDER" \
    "${KL_P11SHIM:-$KL_BIN_DIR/libkl_p11shim.so}"; do
    [ -e "$b" ] || { echo "run.sh: $b missing: build first (make)" >&2; exit 1; }
done
if [ $smoke = 1 ]; then
    DUR=1 REPS=1 SPEED_S=1 OUT=$KL_BIN_DIR/bench-haproxy-smoke
else
    DUR=${DUR:-8} REPS=${REPS:-3} SPEED_S=${SPEED_S:-5} OUT=$ROOT/bench/haproxy
fi
CONC=${CONC:-64}
mkdir -p "$OUT"

. "$ROOT/tests/e2e/lib.sh"
. "$ROOT/tests/e2e/haproxy_lib.sh"
# A signal ends the script through lib.sh's EXIT trap, which stops HAProxy
# and keylessd.
trap 'exit 130' INT
trap 'exit 143' TERM

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

# The ceiling: P-256 signatures per second on both cores, REPS runs of
# `openssl speed` (sign then verify, SPEED_S seconds each). The best run is
# the ceiling: other work on the machine can only lower it.
echo "ceiling: openssl speed -multi 2 -seconds $SPEED_S ecdsap256"
: >"$E2E_TMP/speed"
for r in $(seq "$REPS"); do
    timeout -k 5 $((SPEED_S * 2 + 60)) openssl speed -multi 2 -seconds "$SPEED_S" ecdsap256 2>/dev/null |
        awk '/sign\/s/ { getline; print $(NF - 1), $NF }' >>"$E2E_TMP/speed" || true
done
[ -s "$E2E_TMP/speed" ] || fail "openssl speed ecdsap256 gave no result"
CEIL=$(sort -n -k1,1 "$E2E_TMP/speed" | tail -1 | cut -d' ' -f1)
CEIL_V=$(sort -n -k1,1 "$E2E_TMP/speed" | tail -1 | cut -d' ' -f2)
CEIL_MED=$(cut -d' ' -f1 "$E2E_TMP/speed" | sort -n | awk '{ r[NR] = $1 } END { print r[int((NR + 1) / 2)] }')
CEIL_RUNS=$(cut -d' ' -f1 "$E2E_TMP/speed" | paste -sd' ')
echo "  sign/s: $CEIL_RUNS (best $CEIL, verify/s in that run $CEIL_V)"
make_pki
named_cert fast.test ecdsa-p256
named_cert slow.test ecdsa-p384
build_hsload

# one COLUMN PORT: one run; prints "rate p50 p99".
one() {
    local out
    out=$(timeout -k 5 $((DUR + 60)) "$HSLOAD" -a "127.0.0.1:$1" -s fast.test -c "$CONC" -t "$DUR" -3) ||
        fail "hsload on port $1 did not finish"
    echo "$out" >>"$E2E_TMP/runs.log"
    local f
    f=$(echo "$out" | grep -o 'failed=[0-9]*' | cut -d= -f2)
    [ "$f" = 0 ] || echo "warning: $f failed handshakes: $out" >&2
    echo "$out" | awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        print v["rate"], v["p50_ms"], v["p99_ms"] }'
}

# median of the lines on stdin, per column
median() {
    sort -n -k1,1 | awk '{ r[NR] = $0 } END { print r[int((NR + 1) / 2)] }'
}

declare -A RES
measure() { # measure LABEL PORT...: alternating runs, median per label
    local -a labels=() ports=()
    while [ $# -gt 0 ]; do labels+=("$1"); ports+=("$2"); shift 2; done
    local i r
    for i in "${!labels[@]}"; do : >"$E2E_TMP/m.${labels[$i]}"; done
    for r in $(seq "$REPS"); do
        for i in "${!labels[@]}"; do
            one "${ports[$i]}" >>"$E2E_TMP/m.${labels[$i]}"
        done
    done
    for i in "${!labels[@]}"; do
        RES[${labels[$i]}]=$(median <"$E2E_TMP/m.${labels[$i]}")
        echo "  ${labels[$i]}: ${RES[${labels[$i]}]} (rate p50 p99)"
    done
}

warm() { timeout -k 5 60 "$HSLOAD" -a "127.0.0.1:$1" -s fast.test -c 8 -n 200 >/dev/null; }

# The key on local disk: HAProxy's own rate for this load, no keylessd.
mkdir -p "$H"
cat "$E2E_TMP/certs/fast.test.crt" "$PKI/keys/ecdsa-p256.key" >"$H/fast.pem"
cp "$H/fast.pem" "$H/slow.pem"
start_haproxy local 0
L_PID=$HP_PID
warm "$HP_PORT"
echo "local key"
measure local "$HP_PORT"
kill "$L_PID"; wait "$L_PID" 2>/dev/null || true

for ms in 1 50; do
    # Enough token sessions (keylessd's blocking workers) that the latency,
    # not the pool, is the limit.
    slow_key ecdsa-p256 "$ms" $((CONC * 2))
    start_keylessd
    hp_setup
    start_haproxy "blocking-$ms" 0
    B_PID=$HP_PID B_PORT=$HP_PORT
    start_haproxy "async-$ms" 1
    A_PID=$HP_PID A_PORT=$HP_PORT
    warm "$B_PORT"; warm "$A_PORT"
    echo "key server latency $ms ms"
    measure "blocking-$ms" "$B_PORT" "async-$ms" "$A_PORT"
    kill "$B_PID" "$A_PID"; wait "$B_PID" "$A_PID" 2>/dev/null || true
    stop_keylessd
done

LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
col() { echo "${RES[$1]}" | awk -v c="$2" '{ print $c }'; }
ratio() { awk -v a="$(col "$1" 1)" -v b="$(col "$2" 1)" 'BEGIN { printf "%.1f", (b > 0) ? a / b : 0 }'; }
share() { awk -v a="$1" -v c="$CEIL" 'BEGIN { printf "%.4f", (c > 0) ? a / c : 0 }'; }
pct() { awk -v a="$1" 'BEGIN { printf "%.2f%%", a * 100 }'; }
num() { awk -v a="$1" 'BEGIN { printf "%.0f\n", a }' | sed ':a; s/\B[0-9]\{3\}\>/,&/; ta'; }
row() {
    local r
    r=$(col "$3" 1)
    printf '| %s | %s | %s | %s (%s) | %s | %s |\n' "$1" "$2" "$r" "$(share "$r")" \
        "$(pct "$(share "$r")")" "$(col "$3" 2)" "$(col "$3" 3)"
}
# the two ECDSA operations of a handshake (server sign, client verify) at
# RATE handshakes/s, as a share of the two cores
ecdsa_cpu() { awk -v a="$1" -v s="$CEIL" -v v="$CEIL_V" 'BEGIN { printf "%.1f", (s > 0 && v > 0) ? 100 * a * (1 / s + 1 / v) : 0 }'; }
{
    echo "# HAProxy with keyless keys: async versus blocking"
    echo
    echo "Written by \`bench/haproxy/run.sh\` on $(date -u +%Y-%m-%d)."
    echo "HAProxy $("$HAPROXY" -v | awk 'NR == 1 { print $3 }'), master-worker, 2 threads;"
    echo "$(openssl version | cut -d' ' -f1-2); $(nproc) CPUs ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo))"
    echo "shared by HAProxy, keylessd and the client. TLS 1.3, ECDSA P-256 certificate,"
    echo "a full handshake per connection, $CONC handshakes in flight"
    echo "(tests/e2e/hsload.c), ${DUR} s per run, median of $REPS runs, the"
    echo "columns of a table measured alternately in the same run. Key server"
    echo "latency: each request takes that long on a SoftHSM2 token behind a shim"
    echo "that stalls it (then SoftHSM2 signs)."
    echo "Load average when the run started: $LOAD0, when it ended: $LOAD1"
    echo "(other work on the machine shows there; the columns of one latency"
    echo "share it alike, the ceiling is measured before them)."
    echo
    echo "## Ceiling: \`openssl speed -multi 2 -seconds $SPEED_S ecdsap256\` (same run)"
    echo
    echo "| primitive | sign/s, 2 cores (best run) | runs (sign/s) | median | verify/s (best run) |"
    echo "|---|---:|---|---:|---:|"
    echo "| ECDSA P-256 | $(num "$CEIL") | $(for v in $CEIL_RUNS; do num "$v"; done | paste -sd' ' | sed 's/ /, /g') | $(num "$CEIL_MED") | $(num "$CEIL_V") |"
    echo
    echo "Measured just before the handshakes, on the same two cores. The best"
    echo "run is the ceiling: other work on the machine can only lower it."
    echo
    echo "## Handshakes"
    echo
    echo "| key server latency | HAProxy key operations | handshakes/s | share of the ceiling | p50 ms | p99 ms |"
    echo "|---|---|---:|---:|---:|---:|"
    row "- (key on local disk)" "local" local
    for ms in 1 50; do
        row "$ms ms" "blocking" "blocking-$ms"
        row "$ms ms" "**ssl-mode-async**" "async-$ms"
    done
    echo
    echo "Async / blocking: $(ratio async-1 blocking-1)x at 1 ms, $(ratio async-50 blocking-50)x at 50 ms."
    echo
    echo "What the share means: handshakes/s divided by the P-256 signatures/s"
    echo "both cores can do, which is the share of the machine's CPU that the"
    echo "server's signatures alone take at that rate (one signature per"
    echo "handshake, if it costs inside the handshake what it costs in"
    echo "\`openssl speed\`). 1.0 would be a handshake that costs nothing but"
    echo "its signature. A full TLS 1.3 handshake costs more: the client"
    echo "verifies that signature (one verification costs about"
    echo "$(awk -v s="$CEIL" -v v="$CEIL_V" 'BEGIN { printf "%.1f", (v > 0) ? s / v : 0 }') signatures, from verify/s above), both sides generate an X25519"
    echo "key share and derive the shared secret (not measured here), then the"
    echo "key schedule, the records, a TCP connection, and HAProxy's and the"
    echo "client's own work, all on the same two cores (with keylessd, also"
    echo "keylessd and the provider's TLS connection to it). At the local-disk"
    echo "rate the two ECDSA operations of each handshake take $(ecdsa_cpu "$(col local 1)")% of the"
    echo "CPU; everything else takes the other $(awk -v x="$(ecdsa_cpu "$(col local 1)")" 'BEGIN { printf "%.1f", 100 - x }')%. The share measures the"
    echo "handshake against its signature; it is not a target of 1.0: compare"
    echo "the rows with one another and with the local-disk row."
    echo
    echo "Blocking, each of HAProxy's 2 threads waits for every signature, so"
    echo "at most 2 handshakes progress per key server round trip (2 / 50 ms ="
    echo "40/s), and every other connection on that thread waits too. With"
    echo "ssl-mode-async the handshake's job pauses, the thread serves other"
    echo "connections, and the provider's I/O thread collects the answers: the"
    echo "round trips overlap, up to the $CONC the client keeps in flight"
    echo "($CONC / 50 ms = $((CONC * 20))/s) or the CPU, whichever comes first."
} >"$OUT/RESULTS.md"
echo "wrote $OUT/RESULTS.md"
cat "$OUT/RESULTS.md"
