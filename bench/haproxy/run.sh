#!/usr/bin/env bash
# HAProxy handshakes per second through the keyless provider (issue 8):
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
# reference points at a keylessd on 127.0.0.1; keylessd holds each request
# on that key for the latency (--test-delay, a stand-in for a key server
# across a network: it sleeps, it does not use CPU). The client is
# tests/e2e/hsload.c: 64 handshakes in flight (TLS 1.3, a new connection
# and a full handshake each, no resumption), for DUR seconds; medians of
# REPS runs, async and blocking alternating. A row with the key on local
# disk (no keylessd) gives the machine's ceiling. Binaries come from
# $KL_BIN_DIR (default: build/), keyless.so from $KL_PROVIDER.
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
for b in "$KL_BIN_DIR/keylessd" "$KL_BIN_DIR/keyless-keyref" "$KL_PROVIDER"; do
    [ -e "$b" ] || { echo "run.sh: $b missing: build first (make)" >&2; exit 1; }
done
if [ $smoke = 1 ]; then
    DUR=1 REPS=1 OUT=$KL_BIN_DIR/bench-haproxy-smoke
else
    DUR=${DUR:-8} REPS=${REPS:-3} OUT=$ROOT/bench/haproxy
fi
CONC=${CONC:-64}
mkdir -p "$OUT"

. "$ROOT/tests/e2e/lib.sh"
. "$ROOT/tests/e2e/haproxy_lib.sh"

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
make_pki
named_cert fast.test ecdsa-p256
named_cert slow.test ecdsa-p384
build_hsload

# one COLUMN PORT: one run; prints "rate p50 p99".
one() {
    local out
    out=$("$HSLOAD" -a "127.0.0.1:$1" -s fast.test -c "$CONC" -t "$DUR" -3)
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

warm() { "$HSLOAD" -a "127.0.0.1:$1" -s fast.test -c 8 -n 200 >/dev/null; }

# The key on local disk: the ceiling of this machine for this load.
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
    # Enough keylessd workers that the delay, not the pool, is the limit.
    KD_EXTRA=(--test-delay "$(ski fast.test):$ms" --workers $((CONC * 2)))
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

col() { echo "${RES[$1]}" | awk -v c="$2" '{ print $c }'; }
ratio() { awk -v a="$(col "$1" 1)" -v b="$(col "$2" 1)" 'BEGIN { printf "%.1f", (b > 0) ? a / b : 0 }'; }
row() { printf '| %s | %s | %s | %s | %s |\n' "$1" "$2" "$(col "$3" 1)" "$(col "$3" 2)" "$(col "$3" 3)"; }
{
    echo "# HAProxy with keyless keys: async versus blocking (issue 8)"
    echo
    echo "Written by \`bench/haproxy/run.sh\` on $(date -u +%Y-%m-%d)."
    echo "HAProxy $("$HAPROXY" -v | awk 'NR == 1 { print $3 }'), master-worker, 2 threads;"
    echo "$(openssl version | cut -d' ' -f1-2); $(nproc) CPUs ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo))"
    echo "shared by HAProxy, keylessd and the client. TLS 1.3, ECDSA P-256 certificate,"
    echo "a full handshake per connection, $CONC handshakes in flight"
    echo "(tests/e2e/hsload.c), ${DUR} s per run, median of $REPS runs, the"
    echo "columns of a table measured alternately in the same run. Key server"
    echo "latency: keylessd holds each request that long (--test-delay)."
    echo "Load average when the run started: $LOAD0 (other work on the machine"
    echo "shows there; the columns of one latency share it alike)."
    echo
    echo "| key server latency | HAProxy key operations | handshakes/s | p50 ms | p99 ms |"
    echo "|---|---|---|---|---|"
    row "- (key on local disk)" "local" local
    for ms in 1 50; do
        row "$ms ms" "blocking" "blocking-$ms"
        row "$ms ms" "**ssl-mode-async**" "async-$ms"
    done
    echo
    echo "Async / blocking: $(ratio async-1 blocking-1)x at 1 ms, $(ratio async-50 blocking-50)x at 50 ms."
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
