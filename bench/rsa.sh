#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Large RSA keys (docs/DESIGN.md "Large RSA: background workers"): each row
# with keylessd's background workers (the default) and without them
# (--background-workers=-1, the rule alone), in the same run:
#
#   rsa-3072 / rsa-4096   8 connections x 64 in flight: throughput against
#                         `openssl speed -multi 2` of that size (run just
#                         before), and keylessd's CPU per operation against
#                         the ceiling's (2 CPUs / its rate)
#   iso                   ECDSA P-256 open loop at 10,000/s alone, then next
#                         to one connection keeping 64 RSA-4096 in flight:
#                         p99 of each and their ratio
#   mixed                 RSA-4096 8 x 64 saturating plus ECDSA open loop at
#                         half of its own 8 x 64 peak: the ECDSA rate served
#                         (share of what was offered) and its p99
#
# Medians of REPS runs. keylessd and the client share the 2 CPUs (the
# client's CPU per RSA operation is small). Prints the rows for
# bench/RESULTS.md.
#   bench/rsa.sh [--smoke]
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${KL_BIN_DIR:-$ROOT/build}
KEYLESSD=$BUILD/keylessd
BENCH=$BUILD/keyless-bench
DUR=5; REPS=3; SPEED_S=4; ISO_RATE=10000
if [ "${1:-}" = --smoke ]; then
    DUR=1; REPS=1; SPEED_S=1; ISO_RATE=2000
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kl-rsa.XXXXXX")
SERVER_PID=
NB_PID=
cleanup() {
    for p in $NB_PID $SERVER_PID; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "rsa.sh: $*" >&2; }

bash "$ROOT/scripts/dev-pki.sh" "$WORK/pki" >/dev/null
PKI=$WORK/pki
mkdir -p "$WORK/keys" && chmod 700 "$WORK/keys"
cp "$PKI/keys/ecdsa-p256.key" "$WORK/keys/"
for b in 3072 4096; do
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:$b \
        -out "$WORK/keys/rsa-$b.key" 2>/dev/null
    openssl pkey -in "$WORK/keys/rsa-$b.key" -pubout -out "$WORK/rsa-$b.pem"
done
chmod 600 "$WORK/keys/"*.key
PORT=$((20000 + RANDOM % 20000))
TLS=(-cert "$PKI/client.crt" -key "$PKI/client.key" -ca "$PKI/ca.crt"
     -server "127.0.0.1:$PORT")
EC=(-pubkey "$PKI/pubkeys/ecdsa-p256.pem")

start() {
    "$KEYLESSD" --listen-address=127.0.0.1 --port=$PORT --metrics-port=0 \
        --auth-cert="$PKI/server.crt" --auth-key="$PKI/server.key" \
        --cloudflare-ca-cert="$PKI/ca.crt" --private-key-dirs="$WORK/keys" \
        --loglevel=2 --idle-timeout=10m "$@" >"$WORK/keylessd.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
        sleep 0.1
    done
    cat "$WORK/keylessd.log" >&2
    exit 1
}
stop() {
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
}
cpu_s() {
    awk -v hz="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); printf "%.3f", ($12 + $13) / hz}' \
        "/proc/$SERVER_PID/stat"
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
field() { # FILE python-expression-on-j
    python3 -c "import json; j = json.load(open('$1')); print($2)"
}

# one measured client run: BENCH ARGS...; prints "ops p99_ms cpu_us_per_op"
measure() {
    "$BENCH" "${TLS[@]}" -json -warmup 0.5s -duration ${DUR}s "$@" \
        >"$WORK/m.json" 2>"$WORK/m.err" &
    local bp=$! c0 c1
    sleep 0.55
    c0=$(cpu_s)
    wait $bp || true
    c1=$(cpu_s)
    [ -s "$WORK/m.json" ] || { cat "$WORK/m.err" "$WORK/keylessd.log" >&2; exit 1; }
    python3 - "$c0" "$c1" "$WORK/m.json" <<'PY'
import json, sys
c0, c1, j = float(sys.argv[1]), float(sys.argv[2]), json.load(open(sys.argv[3]))
ops = j["ops_per_sec"]
n = ops * j["duration_s"] or 1
print(f"{ops:.1f} {j['latency_us']['p99'] / 1000:.3f} {(c1 - c0) / n * 1e6:.1f}")
PY
}
neighbour() { # BENCH ARGS... (runs until killed)
    "$BENCH" "${TLS[@]}" -duration 3600s "$@" >/dev/null 2>&1 &
    NB_PID=$!
    sleep 1
}
neighbour_stop() {
    kill -INT "$NB_PID" 2>/dev/null || true
    wait "$NB_PID" 2>/dev/null || true
    NB_PID=
}
ceiling() { # rsa3072 | rsa4096
    openssl speed -multi 2 -seconds $SPEED_S "$1" 2>/dev/null |
        awk '/sign\/s/ {getline; print $(NF-1)}'
}

rows=$WORK/rows
: >"$rows"
for mode in background rule; do
    flags=()
    [ $mode = rule ] && flags=(--background-workers=-1)
    for b in 3072 4096; do
        : >"$WORK/r"
        for r in $(seq $REPS); do
            c=$(ceiling rsa$b)
            start "${flags[@]}"
            m=$(measure -pubkey "$WORK/rsa-$b.pem" -op rsa-sha256 \
                -connections 8 -depth 64)
            stop
            echo "$m $c" >>"$WORK/r"
            log "$mode rsa-$b run $r: $m (ceiling $c)"
        done
        # ratio and CPU ratio per run, then medians
        awk -v b=$b -v mode=$mode '{
            print $1, $4, $1 / $4, $3 / (2e6 / $4) }' "$WORK/r" >"$WORK/rr"
        printf '%s rsa-%s %s %s %s %s\n' $mode $b \
            "$(awk '{print $1}' "$WORK/rr" | median)" \
            "$(awk '{print $2}' "$WORK/rr" | median)" \
            "$(awk '{print $3}' "$WORK/rr" | median)" \
            "$(awk '{print $4}' "$WORK/rr" | median)" >>"$rows"
    done

    start "${flags[@]}"
    : >"$WORK/solo"; : >"$WORK/nb"
    for r in $(seq $REPS); do
        measure "${EC[@]}" -connections 1 -rate $ISO_RATE >>"$WORK/solo"
        neighbour -pubkey "$WORK/rsa-4096.pem" -op rsa-sha256 \
            -connections 1 -depth 64
        measure "${EC[@]}" -connections 1 -rate $ISO_RATE >>"$WORK/nb"
        neighbour_stop
        log "$mode iso run $r: solo $(tail -1 "$WORK/solo"), next to RSA-4096 $(tail -1 "$WORK/nb")"
    done
    solo=$(awk '{print $2}' "$WORK/solo" | median)
    nb=$(awk '{print $2}' "$WORK/nb" | median)
    echo "$mode iso $solo $nb" >>"$rows"

    peak=$(measure "${EC[@]}" -connections 8 -depth 64 | awk '{print $1}')
    rate=$(python3 -c "print(max(100, int($peak / 2)))")
    : >"$WORK/mix"
    for r in $(seq $REPS); do
        neighbour -pubkey "$WORK/rsa-4096.pem" -op rsa-sha256 \
            -connections 8 -depth 64
        measure "${EC[@]}" -connections 8 -rate "$rate" >>"$WORK/mix"
        neighbour_stop
        log "$mode mixed run $r: $(tail -1 "$WORK/mix") (offered $rate/s)"
    done
    echo "$mode mixed $rate $(awk '{print $1}' "$WORK/mix" | median) $(awk '{print $2}' "$WORK/mix" | median)" >>"$rows"
    stop
done

echo
echo "Machine: $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ); medians of $REPS runs"
echo
echo "| workers | key, 8 x 64 | ops/s | openssl speed -multi 2 | ratio | CPU/op vs ceiling's |"
echo "|---|---|---:|---:|---:|---:|"
awk '$2 ~ /^rsa-/ {printf "| %s | %s | %.0f | %.0f | %.2f | %.2fx |\n", $1, $2, $3, $4, $5, $6}' "$rows"
echo
echo "| workers | ECDSA open loop $ISO_RATE/s p99 alone | next to 64 RSA-4096 | ratio |"
echo "|---|---:|---:|---:|"
awk '$2 == "iso" {printf "| %s | %.3f ms | %.3f ms | %.2fx |\n", $1, $3, $4, $4 / $3}' "$rows"
echo
echo "| workers | mixed: ECDSA offered (half its peak) | served | share | p99 |"
echo "|---|---:|---:|---:|---:|"
awk '$2 == "mixed" {printf "| %s | %d/s | %.0f/s | %.2f | %.3f ms |\n", $1, $3, $4, $4 / $3, $5}' "$rows"
