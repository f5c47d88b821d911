#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two builds of keylessd compared by server CPU per operation, for a change
# that must not move performance (a restructuring, a refactor):
#
#   bench/ab-cpu.sh BEFORE_BIN_DIR AFTER_BIN_DIR [PAIRS]
#
# For ECDSA P-256, Ed25519 and RSA-2048, PAIRS (default 5) pairs of runs,
# the two builds alternating (A B, then B A, ...) so that both see the same
# drift of this shared machine; each run is bench/run.sh's closed-loop
# scenario (keyless-bench from AFTER_BIN_DIR, 8 connections x 64 in flight,
# 1 s warm-up, DUR seconds measured, keylessd with --workers=0 as in
# run.sh). Prints a markdown table: median CPU per operation of each build,
# the median of the per-pair ratios (after / before), throughput, and the
# ceiling (`openssl speed -multi 2`, before and after the runs).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BEFORE_BIN_DIR AFTER_BIN_DIR [PAIRS]" >&2; exit 2; }
A=$(cd "$1" && pwd)
B=$(cd "$2" && pwd)
PAIRS=${3:-5}
DUR=${DUR:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$B/keyless-bench
for f in "$A/keylessd" "$B/keylessd" "$BENCH"; do
    [ -x "$f" ] || { echo "ab-cpu: $f not built" >&2; exit 1; }
done
WORK=$(mktemp -d)
SERVER_PID=
cleanup() {
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "ab-cpu: $*" >&2; }

bash "$ROOT/scripts/dev-pki.sh" "$WORK/pki" >/dev/null
PKI=$WORK/pki
mkdir -m 700 "$WORK/keys"
cp "$PKI/keys/ecdsa-p256.key" "$PKI/keys/ed25519.key" "$PKI/keys/rsa-2048.key" "$WORK/keys/"
chmod 600 "$WORK/keys/"*.key
op_of() { case $1 in ecdsa-p256) echo ecdsa-sha256 ;; ed25519) echo ed25519 ;; *) echo rsa-sha256 ;; esac; }
alg_of() { case $1 in ecdsa-p256) echo ecdsap256 ;; ed25519) echo ed25519 ;; *) echo rsa2048 ;; esac; }

pick_port() {
    while :; do
        PORT=$((20000 + RANDOM % 20000))
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null || break
    done
}
# The port is free when picked, but another process may bind it before
# keylessd does: a keylessd that exits saying so starts again on another.
start_server() { # BIN_DIR
    for _ in 1 2 3 4 5; do
        try_start "$1" && return 0
        grep -qi "address already in use" "$WORK/keylessd.log" || break
        log "port $PORT taken meanwhile; another"
    done
    cat "$WORK/keylessd.log" >&2
    log "keylessd ($1) did not start"
    exit 1
}
try_start() { # BIN_DIR
    pick_port
    KEYLESS_METRICS_PORT=0 "$1/keylessd" --listen-address=127.0.0.1 --port=$PORT \
        --auth-cert="$PKI/server.crt" --auth-key="$PKI/server.key" \
        --cloudflare-ca-cert="$PKI/ca.crt" --private-key-dirs="$WORK/keys" \
        --workers=0 --loglevel=2 --idle-timeout=10m >"$WORK/keylessd.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
        kill -0 $SERVER_PID 2>/dev/null || break
        sleep 0.1
    done
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
    return 1
}
stop_server() {
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
}
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.3f", ($14 + $15) / hz}' "/proc/$SERVER_PID/stat"; }
ceiling() { # PRIM: openssl speed -multi 2, signatures/s
    openssl speed -multi 2 -seconds 3 "$(alg_of "$1")" 2>/dev/null | awk '/sign\/s/ {getline; print $(NF-1)}'
}

# one PRIM BIN_DIR TAG: appends "TAG us_per_op ops_per_s" to $WORK/PRIM.txt
one() {
    local prim=$1 dir=$2 tag=$3
    start_server "$dir"
    "$BENCH" -cert "$PKI/client.crt" -key "$PKI/client.key" -ca "$PKI/ca.crt" \
        -server "127.0.0.1:$PORT" -json -warmup 1s -duration ${DUR}s \
        -pubkey "$PKI/pubkeys/$prim.pem" -op "$(op_of "$prim")" \
        -connections 8 -depth 64 >"$WORK/run.json" 2>"$WORK/run.err" &
    local bp=$! c0 c1
    sleep 1.05
    c0=$(cpu_s)
    sleep "$DUR"
    c1=$(cpu_s)
    wait $bp || { cat "$WORK/run.err" >&2; log "$prim $tag: keyless-bench failed"; exit 1; }
    stop_server
    python3 - "$WORK/run.json" "$c0" "$c1" "$DUR" "$tag" >>"$WORK/$prim.txt" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
ops = r["ops_per_sec"]
cpu = float(sys.argv[3]) - float(sys.argv[2])
print(sys.argv[5], f"{cpu * 1e6 / (ops * float(sys.argv[4])):.3f}", int(ops))
EOF
}

for prim in ecdsa-p256 ed25519 rsa-2048; do
    ceiling "$prim" >"$WORK/$prim.ceil0"
    for p in $(seq "$PAIRS"); do
        if [ $((p % 2)) = 1 ]; then order="A B"; else order="B A"; fi
        for t in $order; do
            if [ "$t" = A ]; then one "$prim" "$A" A; else one "$prim" "$B" B; fi
            log "$prim pair $p: $(tail -1 "$WORK/$prim.txt")"
        done
    done
    ceiling "$prim" >"$WORK/$prim.ceil1"
done

python3 - "$WORK" "$PAIRS" "$DUR" <<'EOF'
import statistics as st, sys
work, pairs, dur = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print(f"| primitive | CPU/op before (us) | CPU/op after (us) | after / before (median of {pairs} pairs) | ops/s before | ops/s after | ceiling, openssl speed -multi 2 (start / end) |")
print("|---|---|---|---|---|---|---|")
for prim in ["ecdsa-p256", "ed25519", "rsa-2048"]:
    rows = [l.split() for l in open(f"{work}/{prim}.txt")]
    a = [(float(u), int(o)) for t, u, o in rows if t == "A"]
    b = [(float(u), int(o)) for t, u, o in rows if t == "B"]
    ratios = [bu / au for (au, _), (bu, _) in zip(a, b)]
    c0 = open(f"{work}/{prim}.ceil0").read().strip()
    c1 = open(f"{work}/{prim}.ceil1").read().strip()
    print(f"| {prim} | {st.median(u for u, _ in a):.2f} | {st.median(u for u, _ in b):.2f} "
          f"| {st.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}) "
          f"| {st.median(o for _, o in a)} | {st.median(o for _, o in b)} | {c0} / {c1} |")
EOF
