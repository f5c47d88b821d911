#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# keyless-seal's sealing throughput (docs/SEALING.md "Cost, measured"):
# KEYS P-256 keys (default 1,000; bench/tools/keygen-many.c) sealed to a
# fleet of RCPTS X25519 servers (default 100), all selected by the
# policy, with one `keyless-seal seal --out-dir` run per round. Prints
# keyless-seal's own rate (keys sealed per second, the sealing and the
# writing of the files, not the reading of the keys), its CPU time per
# key, and the medians over the rounds.
#
#   bench/seal-throughput.sh [--smoke] [KEYS] [RCPTS] [ROUNDS]
#
# One process on one core; the machine may be shared, so the CPU time per
# key is the steadier figure.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${KL_BIN_DIR:-$ROOT/build}
SEAL=${KL_SEAL:-$BUILD/keyless-seal} # KL_SEAL: another build's, to compare
KEYS=1000
RCPTS=100
ROUNDS=3
args=()
for a in "$@"; do
    case $a in
    --smoke) KEYS=20; RCPTS=5; ROUNDS=1 ;;
    -h | --help) sed -n '3,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$a") ;;
    esac
done
[ ${#args[@]} -ge 1 ] && KEYS=${args[0]}
[ ${#args[@]} -ge 2 ] && RCPTS=${args[1]}
[ ${#args[@]} -ge 3 ] && ROUNDS=${args[2]}
[ -x "$SEAL" ] || { echo "seal-throughput.sh: build $SEAL first" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kl-seal-tp.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
TOOLS=$BUILD/bench-tools
mkdir -p "$TOOLS"
if [ ! -x "$TOOLS/keygen-many" ] ||
    [ "$ROOT/bench/tools/keygen-many.c" -nt "$TOOLS/keygen-many" ]; then
    ${CC:-cc} -O2 -std=gnu11 -Wall -Wextra -Werror -o "$TOOLS/keygen-many" \
        "$ROOT/bench/tools/keygen-many.c" -lssl -lcrypto
fi
"$TOOLS/keygen-many" "$WORK/keys" "$KEYS" >/dev/null
rm -f "$WORK/keys/skis.txt"
echo "nodes:" >"$WORK/fleet.yaml"
for i in $(seq "$RCPTS"); do
    "$SEAL" keygen --out "$WORK/node$i.key" >"$WORK/node$i.pub" 2>/dev/null
    { echo "  - name: node-$i"
      echo "    attributes: {region: bench}"
      echo "    sealing_key: |"
      sed 's/^/      /' "$WORK/node$i.pub"; } >>"$WORK/fleet.yaml"
done

: >"$WORK/rates"
for r in $(seq "$ROUNDS"); do
    rm -rf "$WORK/out"
    /usr/bin/env time -f '%U %S' -o "$WORK/time" "$SEAL" seal \
        --policy region=bench --fleet "$WORK/fleet.yaml" \
        --out-dir "$WORK/out" "$WORK/keys" 2>"$WORK/seal.log" ||
        { cat "$WORK/seal.log" >&2; exit 1; }
    line=$(grep 'keys/s' "$WORK/seal.log")
    # "sealed 1000 of 1000 keys to 100 recipients in 12.3 s (81.3 keys/s)"
    rate=$(echo "$line" | sed -E 's/.*\(([0-9.]+) keys\/s\).*/\1/')
    secs=$(echo "$line" | sed -E 's/.* in ([0-9.]+) s .*/\1/')
    cpu=$(awk -v n="$KEYS" '{printf "%.2f", ($1 + $2) / n * 1000}' "$WORK/time")
    size=$(stat -c %s "$(find "$WORK/out" -name '*.sealed' | head -1)")
    echo "$rate $secs $cpu $size" >>"$WORK/rates"
    echo "seal-throughput.sh: round $r/$ROUNDS: $rate keys/s ($secs s), $cpu ms CPU per key (whole process), $size bytes per file" >&2
done
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "$KEYS P-256 keys x $RCPTS X25519 recipients, $ROUNDS rounds (medians):" \
    "$(awk '{print $1}' "$WORK/rates" | median) keys/s," \
    "$(awk '{print $2}' "$WORK/rates" | median) s," \
    "$(awk '{print $3}' "$WORK/rates" | median) ms CPU per key," \
    "$(awk '{print $4}' "$WORK/rates" | median) bytes per file"
