#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# HSM throughput: the same RSA-2048 and ECDSA P-256 keys served by
# keylessd from a SoftHSM2 token (a `uri:` key store) and from disk, loaded
# by keyless-bench with the same settings in the same run; medians of 3.
#
#   bench/hsm.sh            writes bench/HSM-RESULTS.md
#   bench/hsm.sh --smoke    one short run each, output under the build dir
#
# Binaries come from $KL_BIN_DIR (default build/). Everything runs on
# 127.0.0.1, and every process started here is stopped on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${KL_BIN_DIR:-$ROOT/build}
DUR=5s REPS=3 OUT=$ROOT/bench/HSM-RESULTS.md
if [ "${1:-}" = --smoke ]; then
    DUR=1s REPS=1 OUT=$BUILD/HSM-RESULTS.md
fi
MODULE=
for m in /usr/lib/softhsm/libsofthsm2.so \
    /usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so; do
    [ -r "$m" ] && MODULE=$m && break
done
[ -n "$MODULE" ] || { echo "hsm.sh: SoftHSM2 not installed" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kl-hsm-bench.XXXXXX")
PID=
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

bash "$ROOT/scripts/dev-pki.sh" "$WORK/pki" >/dev/null
export SOFTHSM2_CONF=$WORK/softhsm2.conf
mkdir -p "$WORK/tokens" "$WORK/disk"
printf 'directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n' \
    "$WORK/tokens" >"$SOFTHSM2_CONF"
softhsm2-util --init-token --free --label bench --pin 1234 --so-pin 000000 >/dev/null
for k in rsa-2048 ecdsa-p256; do
    openssl pkcs8 -topk8 -nocrypt -in "$WORK/pki/keys/$k.key" -out "$WORK/$k.p8"
    softhsm2-util --import "$WORK/$k.p8" --token bench --label "$k" \
        --id "$([ $k = rsa-2048 ] && echo 01 || echo 02)" --pin 1234 >/dev/null
    install -m 600 "$WORK/pki/keys/$k.key" "$WORK/disk/$k.key"
done

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
TLS=(-cert "$WORK/pki/client.crt" -key "$WORK/pki/client.key" -ca "$WORK/pki/ca.crt")

start() { # start STORES
    "$BUILD/keylessd" --listen-address 127.0.0.1 --port "$PORT" \
        --metrics-port 0 --auth-cert "$WORK/pki/server.crt" \
        --auth-key "$WORK/pki/server.key" --cloudflare-ca-cert "$WORK/pki/ca.crt" \
        --private-key-stores "$1" 2>"$WORK/keylessd.log" &
    PID=$!
    for _ in $(seq 100); do
        "$BUILD/keyless-cli" ping --server "127.0.0.1:$PORT" --cert "$WORK/pki/client.crt" \
            --key "$WORK/pki/client.key" --ca "$WORK/pki/ca.crt" >/dev/null 2>&1 && return
        sleep 0.1
    done
    cat "$WORK/keylessd.log" >&2
    exit 1
}
stop() { kill "$PID"; wait "$PID" || true; PID=; }

# ops/s of one run: bench OP KEY
run() {
    "$BUILD/keyless-bench" -server "127.0.0.1:$PORT" "${TLS[@]}" -op "$1" \
        -pubkey "$WORK/pki/pubkeys/$2.pem" -connections 4 -depth 16 \
        -duration "$DUR" -warmup 0.5s -json |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.0f" % d["ops_per_sec"])'
}
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A R
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for where in disk hsm; do
    if [ $where = disk ]; then
        start "[{dir: $WORK/disk}]"
    else
        q="module-path=$MODULE&pin-value=1234&max-sessions=4"
        start "[{uri: \"pkcs11:token=bench;object=rsa-2048?$q\"}, {uri: \"pkcs11:token=bench;object=ecdsa-p256?$q\"}]"
    fi
    for k in rsa-2048:rsa-sha256 ecdsa-p256:ecdsa-sha256; do
        key=${k%%:*} op=${k#*:} vals=()
        for _ in $(seq "$REPS"); do vals+=("$(run "$op" "$key")"); done
        R[$where.$key]=$(median "${vals[@]}")
        echo "$where $key: ${vals[*]} -> median ${R[$where.$key]}/s" >&2
    done
    stop
done

# The ceiling: the CPU's own signatures per second on both cores.
speed=$(openssl speed -multi 2 -seconds "${DUR%s}" rsa2048 ecdsap256 2>/dev/null)
R[ceil.rsa-2048]=$(awk '/^rsa 2048 bits/ {print int($6)}' <<<"$speed")
R[ceil.ecdsa-p256]=$(awk '/ecdsa \(nistp256\)/ {print int($(NF-1))}' <<<"$speed")

{
    echo "# SoftHSM2 through keylessd, next to the same keys on disk"
    echo
    echo "- date: $(date -u +%Y-%m-%dT%H:%MZ); machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"
    echo "- command: \`bench/hsm.sh\` (keyless-bench, 4 connections x 16 in flight, $DUR per run, median of $REPS)"
    echo "- SoftHSM2 token with max-sessions=4 (the blocking workers follow it)"
    echo "- load average before / after: $load_before / $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine)"
    echo
    echo "| key | ceiling: openssl speed -multi 2 (sign/s) | on disk (ops/s) | SoftHSM2 (ops/s) | SoftHSM2 / disk | disk / ceiling |"
    echo "|---|---|---|---|---|---|"
    for key in rsa-2048 ecdsa-p256; do
        c=${R[ceil.$key]} d=${R[disk.$key]} h=${R[hsm.$key]}
        echo "| $key | $c | $d | $h | $(python3 -c "print('%.2f' % ($h / $d if $d else 0))") | $(python3 -c "print('%.2f' % ($d / $c if $c else 0))") |"
    done
    echo
    echo "Client, server and SoftHSM2 share the 2 cores; the machine is shared and"
    echo "noisy, so compare the ratios of one run rather than absolute rates."
} >"$OUT"
cat "$OUT"
