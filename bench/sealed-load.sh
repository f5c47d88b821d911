#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Loading sealed keys against the same keys as plain files (docs/SEALING.md
# "Cost, measured"; the target: at most 2x the time):
#
#   N P-256 keys (default 100,000; bench/tools/keygen-many.c) as plain
#   *.key files, and the same keys sealed into *.sealed files with one
#   recipient, this server (`keyless-seal seal --out-dir`; X25519, or
#   P-256 with --kem p256). Both sets are kept under the build directory
#   for the next run.
#
#   Each round starts the real keylessd three times, alternating - one key
#   (the baseline), the plain directory, the sealed directory (with
#   --sealing-key) - until it listens, and reads:
#     load_s    the key store's own load line ("N keys loaded in X s",
#               src/daemon/daemon_load.c): reading, decoding (and for
#               sealed files parsing and opening) every key, one thread
#     cpu_s     keylessd's user + system CPU from exec to listening
#     heap_mib  the load line's heap growth (glibc mallinfo2)
#     rss_mib   VmRSS once listening, minus the one-key baseline's of the
#               same round: the key store's resident memory
#   and prints the medians over the rounds and the sealed/plain ratios.
#
#   bench/sealed-load.sh [--smoke] [--kem x25519|p256] [N] [ROUNDS]
#
# --smoke: 1,000 keys, one round. The machine may be shared: rounds
# alternate so that both sets see the same background load, and ratios
# are what to compare; cpu_s is the least sensitive to other processes.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${KL_BIN_DIR:-$ROOT/build}
KEYLESSD=$BUILD/keylessd
SEAL=$BUILD/keyless-seal
N=100000
ROUNDS=5
KEM=x25519
args=()
while [ $# -gt 0 ]; do
    case $1 in
    --smoke) N=1000; ROUNDS=1 ;;
    --kem) KEM=$2; shift ;;
    -h | --help) sed -n '3,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$1") ;;
    esac
    shift
done
[ ${#args[@]} -ge 1 ] && N=${args[0]}
[ ${#args[@]} -ge 2 ] && ROUNDS=${args[1]}
case $KEM in x25519 | p256) ;; *) echo "--kem x25519|p256" >&2; exit 2 ;; esac
for b in "$KEYLESSD" "$SEAL"; do
    [ -x "$b" ] || { echo "sealed-load.sh: build $b first" >&2; exit 2; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kl-sealed-load.XXXXXX")
SERVER_PID=
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; fi
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "sealed-load.sh: $*" >&2; }

# ---- keys -------------------------------------------------------------------
TOOLS=$BUILD/bench-tools
mkdir -p "$TOOLS"
if [ ! -x "$TOOLS/keygen-many" ] ||
    [ "$ROOT/bench/tools/keygen-many.c" -nt "$TOOLS/keygen-many" ]; then
    ${CC:-cc} -O2 -std=gnu11 -Wall -Wextra -Werror -o "$TOOLS/keygen-many" \
        "$ROOT/bench/tools/keygen-many.c" -lssl -lcrypto
fi
SET=$BUILD/bench-sealed-$N-$KEM
if [ ! -e "$SET/complete" ]; then
    rm -rf "$SET"
    mkdir -p "$SET"
    log "generating $N P-256 keys into $SET/plain (kept for the next run)"
    "$TOOLS/keygen-many" "$SET/plain" "$N"
    rm -f "$SET/plain/skis.txt"
    "$SEAL" keygen --out "$SET/node.key" --kem "$KEM" >"$SET/node.pub"
    { echo "nodes:"
      echo "  - name: bench-node"
      echo "    attributes: {region: bench}"
      echo "    sealing_key: |"
      sed 's/^/      /' "$SET/node.pub"; } >"$SET/fleet.yaml"
    log "sealing them into $SET/sealed (one $KEM recipient)"
    "$SEAL" seal --policy region=bench --fleet "$SET/fleet.yaml" \
        --out-dir "$SET/sealed" "$SET/plain" 2>"$SET/seal.log" ||
        { cat "$SET/seal.log" >&2; exit 1; }
    grep 'keys/s' "$SET/seal.log" >&2
    chmod 700 "$SET/sealed"
    touch "$SET/complete"
fi
mkdir -m 700 "$WORK/one"
cp "$(find "$SET/plain" -name '*.key' | head -1)" "$WORK/one/"

bash "$ROOT/scripts/dev-pki.sh" "$WORK/pki" >/dev/null
PKI=$WORK/pki
PORT=$((20000 + RANDOM % 20000))

calc() { awk "BEGIN {printf \"%.2f\", $*}"; }

# ---- one start ----------------------------------------------------------------
# stop: SIGTERM, and SIGKILL if keylessd has not exited 30 s later (a run
# once waited on a keylessd that had not stopped).
stop() {
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 300); do
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        log "keylessd $SERVER_PID did not stop on SIGTERM in 30 s: SIGKILL"
        kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
}

# start DIR [FLAGS...]: keylessd until it listens; writes
# "load_s cpu_s heap_mib rss_kib wall_s keys" to $WORK/m (in this shell,
# not a command substitution, so that SERVER_PID is the cleanup's)
start() {
    local dir=$1 logf=$WORK/keylessd.log t0 t1 up
    shift
    for _try in 1 2 3; do
        t0=$(date +%s.%N)
        "$KEYLESSD" --listen-address=127.0.0.1 --port=$PORT --metrics-port=0 \
            --auth-cert="$PKI/server.crt" --auth-key="$PKI/server.key" \
            --cloudflare-ca-cert="$PKI/ca.crt" --private-key-dirs="$dir" \
            --loglevel=1 "$@" >"$logf" 2>&1 &
        SERVER_PID=$!
        up=0
        for _ in $(seq 12000); do # 10 minutes
            if grep -q "listening on" "$logf"; then
                up=1
                break
            fi
            kill -0 $SERVER_PID 2>/dev/null || break
            sleep 0.05
        done
        t1=$(date +%s.%N)
        if [ $up = 1 ]; then
            local cpu rss line
            cpu=$(awk -v hz="$(getconf CLK_TCK)" \
                '{sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz}' \
                "/proc/$SERVER_PID/stat")
            rss=$(awk '$1 == "VmRSS:" {print $2}' "/proc/$SERVER_PID/status")
            stop
            # "key store: 100000 keys loaded in 5.31s, about 123.4 MiB of
            # memory" (debug level below 1,000 keys and 1 s: then 0 0)
            line=$(grep -o 'key store: [0-9]* keys loaded in [0-9.]*s, about [0-9.]* MiB' "$logf" || true)
            set -- $line
            local load=${7:-0s,}
            echo "${load%s,} $cpu ${9:-0} $rss $(calc "$t1 - $t0") ${3:-0}" >"$WORK/m"
            return 0
        fi
        stop
        grep -q "already in use" "$logf" || break
        PORT=$((20000 + RANDOM % 20000))
    done
    tail -20 "$logf" >&2
    log "keylessd did not start"
    exit 1
}

: >"$WORK/plain" && : >"$WORK/sealed"
for r in $(seq "$ROUNDS"); do
    log "round $r/$ROUNDS"
    start "$WORK/one"
    base_rss=$(awk '{print $4}' "$WORK/m")
    for which in plain sealed; do
        flags=()
        [ $which = sealed ] && flags=(--sealing-key="$SET/node.key")
        start "$SET/$which" "${flags[@]}"
        set -- $(cat "$WORK/m")
        [ "$6" = "$N" ] || { log "$which: $6 keys loaded, not $N"; exit 1; }
        echo "$1 $2 $3 $(calc "($4 - $base_rss) / 1024") $5" \
            >>"$WORK/$which"
        log "  $which: load ${1}s, cpu ${2}s, heap ${3} MiB, rss +$(tail -1 "$WORK/$which" | awk '{print $4}') MiB"
    done
done

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
col() { awk -v c="$2" '{print $c}' "$WORK/$1" | median; }
echo "keys: $N P-256; sealed: 1 $KEM recipient; rounds: $ROUNDS (medians)"
printf '%-8s %8s %8s %9s %9s %8s\n' set load_s cpu_s heap_MiB rss_MiB wall_s
for w in plain sealed; do
    printf '%-8s %8s %8s %9s %9s %8s\n' $w "$(col $w 1)" "$(col $w 2)" \
        "$(col $w 3)" "$(col $w 4)" "$(col $w 5)"
done
# ratio of the medians, and the median of the per-round ratios (load_s)
paste "$WORK/plain" "$WORK/sealed" |
    awk '{print $6 / $1, $7 / $2}' >"$WORK/ratios"
printf 'ratio sealed/plain: load_s %.2f (per-round median %.2f), cpu_s %.2f (per-round median %.2f)\n' \
    "$(calc "$(col sealed 1) / $(col plain 1)")" \
    "$(awk '{print $1}' "$WORK/ratios" | median)" \
    "$(calc "$(col sealed 2) / $(col plain 2)")" \
    "$(awk '{print $2}' "$WORK/ratios" | median)"
echo "per round (load_s cpu_s heap_MiB rss_MiB wall_s): plain | sealed"
paste -d'|' "$WORK/plain" "$WORK/sealed"
