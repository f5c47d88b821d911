#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Accelerators (docs/DESIGN.md "Accelerators: ASYNC jobs"), measured with
# the test accelerator (tests/accel) as a device of SLOTS slots and
# LATENCY_US per operation, answering repeated inputs from memo (no host
# CPU for the device; keyless-bench repeats 64 inputs):
#
#   async      keylessd with async_providers=kl_accel: the shards pause jobs
#   async-poll the same, the device answering every POLL_US (default 100)
#              what is due, together, instead of each at its own time
#   blocking   the same keys without it: blocking workers wait for the device
#   fallback   async, and the device's full=software (busy slots: software)
#   software   no accelerator: OpenSSL's own ECDSA on the CPU
#   ping       no key operation: pings with the async run's pattern (512 in
#              flight, each answered ~8 ms later - the device's queue), so
#              keylessd's CPU per operation is the non-crypto part alone
#              (TLS records, parse, encode, writes, wake-ups) at that rate
#   inline     async, but the device answers in keylessd's thread at once
#              from memo (inline=1): sign requests whose crypto costs
#              nothing, with ping's pattern (512 in flight, each held 8 ms
#              by the client) - the sign request's non-crypto part at that
#              rate, which `async` is judged against
#   pairs      async and inline alternated PAIRS times (default 9) in one
#              keylessd, the control file switching the device: the
#              median of the rounds' ratios is the comparison that
#              survives a shared machine (either row alone moves by 30%
#              from one minute to the next)
#   faults     FAULT_OPS (default 1,000,000) operations with device errors and lost operations
#              mixed in: descriptors, RSS and operations in progress before
#              and after
#
# keylessd's CPU per operation leaves out the device thread (kl-accel-dev):
# a card does that work off the host. The ceiling is `openssl speed -multi 2
# ecdsap256` in the same run. Medians of REPS runs.
#
#   bench/accel.sh [--smoke]     prints the rows for bench/RESULTS.md
#
# ONLY="async ping" runs those scenarios alone (and no faults row unless
# named): for A/B runs of one change. NOTIFY=fd makes the device signal
# through eventfds even though keylessd offers completion callbacks.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${KL_BIN_DIR:-$ROOT/build}
KEYLESSD=$BUILD/keylessd
BENCH=$BUILD/keyless-bench
ACCEL=$BUILD/kl_accel.so
SLOTS=${SLOTS:-64}
POLL_US=${POLL_US:-100}
LATENCY_US=${LATENCY_US:-1000}
DUR=${DUR:-5}
REPS=${REPS:-3}
PAIRS=${PAIRS:-9}
FAULT_OPS=${FAULT_OPS:-1000000}
if [ "${1:-}" = --smoke ]; then
    DUR=1; REPS=1; PAIRS=1; FAULT_OPS=20000
fi
for b in "$KEYLESSD" "$BENCH" "$ACCEL"; do
    [ -e "$b" ] || { echo "accel.sh: $b missing: build first (make)" >&2; exit 1; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kl-accel.XXXXXX")
SERVER_PID=
cleanup() {
    [ -z "$SERVER_PID" ] || kill "$SERVER_PID" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "accel.sh: $*" >&2; }

bash "$ROOT/scripts/dev-pki.sh" "$WORK/pki" >/dev/null
PKI=$WORK/pki
mkdir -p "$WORK/keys" && chmod 700 "$WORK/keys"
cp "$PKI/keys/ecdsa-p256.key" "$WORK/keys/" && chmod 600 "$WORK/keys/"*.key
cat >"$WORK/openssl.cnf" <<EOF
openssl_conf = openssl_init
[openssl_init]
providers = provider_sect
[provider_sect]
default = default_sect
kl_accel = accel_sect
[default_sect]
activate = 1
[accel_sect]
module = $ACCEL
activate = 1
EOF
export KL_ACCEL_CTL=$WORK/accel.ctl
ctl() { # one temporary file per writer: the faults loop writes too
    local tmp=$KL_ACCEL_CTL.tmp.$BASHPID
    printf '%s\n' "$@" >"$tmp" && mv "$tmp" "$KL_ACCEL_CTL"
    sleep 0.1
}

PORT=$((20000 + RANDOM % 20000))
MPORT=$((PORT + 1))
TLS=(-cert "$PKI/client.crt" -key "$PKI/client.key" -ca "$PKI/ca.crt"
     -server "127.0.0.1:$PORT" -pubkey "$PKI/pubkeys/ecdsa-p256.pem")

start() { # [KEYLESSD FLAGS...]
    OPENSSL_CONF=$WORK/openssl.cnf "$KEYLESSD" --listen-address=127.0.0.1 \
        --port=$PORT --metrics-port=$MPORT --auth-cert="$PKI/server.crt" \
        --auth-key="$PKI/server.key" --cloudflare-ca-cert="$PKI/ca.crt" \
        --private-key-dirs="$WORK/keys" --loglevel=2 --idle-timeout=10m \
        "$@" >"$WORK/keylessd.log" 2>&1 &
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
# keylessd's CPU seconds without the device thread
host_cpu() {
    local hz t=0
    hz=$(getconf CLK_TCK)
    for s in /proc/"$SERVER_PID"/task/*/stat; do
        grep -q '(kl-accel-dev)' "$s" 2>/dev/null && continue
        t=$(awk -v t="$t" -v hz="$hz" '{
            sub(/^.*\) /, ""); printf "%.4f", t + ($12 + $13) / hz }' "$s" \
            2>/dev/null || echo "$t")
    done
    echo "$t"
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# one closed-loop run: prints "ops_per_s us_cpu_per_op"
run_once() {
    local c0 c1 json
    "$BENCH" "${TLS[@]}" -json -connections 8 -depth 64 -warmup 0.5s \
        -duration ${DUR}s ${RUN_FLAGS:-} >"$WORK/b.json" 2>"$WORK/b.err" &
    local bp=$!
    sleep 0.55
    c0=$(host_cpu)
    wait $bp
    c1=$(host_cpu)
    json=$(cat "$WORK/b.json")
    python3 - "$c0" "$c1" "$json" <<'PY'
import json, sys
c0, c1, j = float(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3])
ops = j["ops_per_sec"]
n = ops * j["duration_s"] or 1
print(f"{ops:.0f} {(c1 - c0) / n * 1e6:.2f}")
PY
}

wanted() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
scenario() { # NAME [KEYLESSD FLAGS...]
    local name=$1
    shift
    wanted "$name" || return 0
    start "$@"
    : >"$WORK/$name.runs"
    for r in $(seq $REPS); do
        run_once >>"$WORK/$name.runs"
        log "$name run $r: $(tail -1 "$WORK/$name.runs")"
    done
    stop
    printf '%s %s %s\n' "$name" \
        "$(awk '{print $1}' "$WORK/$name.runs" | median)" \
        "$(awk '{print $2}' "$WORK/$name.runs" | median)" >>"$WORK/table"
}

: >"$WORK/table"
# 8 x 64 in flight on 2 shards: up to ~320 on one; no overflow to the
# blocking workers
ASYNC=(--async-providers=kl_accel --key-propquery=?provider=kl_accel
       --max-async-jobs=1024)
case ${NOTIFY:-callback} in
callback) DEV=("latency_us=$LATENCY_US" "slots=$SLOTS" "memo=1") ;;
fd) DEV=("latency_us=$LATENCY_US" "slots=$SLOTS" "memo=1" "callback=0") ;;
*) echo "accel.sh: NOTIFY is callback or fd" >&2; exit 2 ;;
esac
ctl "${DEV[@]}"
scenario async "${ASYNC[@]}"
# the device's answers in batches, every POLL_US (a driver polling its
# response ring): how much of the host's CPU per operation is wake-ups
ctl "${DEV[@]}" "poll_us=$POLL_US"
scenario async-poll "${ASYNC[@]}"
ctl "${DEV[@]}"
scenario blocking --key-propquery=?provider=kl_accel
ctl "${DEV[@]}" "full=software"
scenario fallback "${ASYNC[@]}"
scenario software
RUN_FLAGS="-op ping -pause 8ms" scenario ping
ctl "${DEV[@]}" "inline=1"
RUN_FLAGS="-pause 8ms" scenario inline "${ASYNC[@]}"
run_pairs() {
    start "${ASYNC[@]}"
    : >"$WORK/pairs"
    for r in $(seq "$PAIRS"); do
        ctl "${DEV[@]}"
        local a b
        a=$(RUN_FLAGS= run_once)
        ctl "${DEV[@]}" "inline=1"
        b=$(RUN_FLAGS="-pause 8ms" run_once)
        echo "$a $b" >>"$WORK/pairs"
        log "pair $r: async $a, inline $b"
    done
    stop
    pairs=$(python3 - "$WORK/pairs" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
a = [r[1] for r in rows]; b = [r[3] for r in rows]
q = sorted(x / y for x, y in zip(a, b))
print(f"{len(rows)} rounds: async {statistics.median(a):.2f} us, inline "
      f"{statistics.median(b):.2f} us per operation (medians); ratio per "
      f"round {statistics.median(q):.2f} (median; {q[0]:.2f}-{q[-1]:.2f}); "
      f"async ops/s {statistics.median(r[0] for r in rows):.0f}")
PY
)
}
pairs=
if wanted pairs; then
    run_pairs
fi
ceiling=$(openssl speed -multi 2 -seconds $DUR ecdsap256 2>/dev/null |
    awk '/sign\/s/ {getline; print $(NF-1)}')

# faults: FAULT_OPS operations with errors and lost ones mixed in - every
# 0.25 s the next 50 operations fail and the next 5 are never answered
# (they end at the device's 200 ms timeout); the provider re-arms the
# counts whenever the file's content changes
run_faults() {
    ctl "${DEV[@]}" "timeout_ms=200"
    start "${ASYNC[@]}"
    fds() { ls /proc/"$SERVER_PID"/fd | wc -l; }
    rss() { awk '/^VmRSS:/ {print $2}' /proc/"$SERVER_PID"/status; }
    jobs_now() {
        curl -s "http://127.0.0.1:$MPORT/metrics" |
            awk '/^keylessd_async_jobs\{/ {s += $2} END {print s + 0}'
    }
    # (keyless-bench exits 1 when answers were errors: they are expected here)
    # the same load first, so that every ASYNC slot it uses exists (with
    # NOTIFY=fd each keeps its eventfd): what follows is the steady state
    "$BENCH" "${TLS[@]}" -connections 8 -depth 64 -duration 2s >/dev/null 2>&1 ||
        true
    sleep 0.3
    secs=$(python3 -c "print(max(1, round($FAULT_OPS / 2 / 55000)))")
    # two halves: the first brings every slot into use (lost operations hold
    # slots for 200 ms, so more of them than a clean run), the second must
    # leave descriptors, memory and operations in progress where the first did
    fault_half() { # N
        (
            n=0
            while :; do
                n=$((n + 1))
                ctl "${DEV[@]}" \
                    "timeout_ms=200" "fail=50" "lose=5" "# round $n"
                sleep 0.15
            done
        ) &
        local faulter=$!
        "$BENCH" "${TLS[@]}" -json -connections 8 -depth 64 -duration "${secs}s" \
            >"$WORK/faults.$1.json" 2>/dev/null || true
        kill $faulter 2>/dev/null || true
        wait $faulter 2>/dev/null || true
        ctl "${DEV[@]}" "timeout_ms=200"
        sleep 0.5 # the lost operations' 200 ms
    }
    f0=$(fds); r0=$(rss); j0=$(jobs_now)
    fault_half 1
    f1=$(fds); r1=$(rss); j1=$(jobs_now)
    fault_half 2
    f2=$(fds); r2=$(rss); j2=$(jobs_now)
    count() {
        python3 -c "import json
t = 0
for f in ['$WORK/faults.1.json', '$WORK/faults.2.json']:
    j = json.load(open(f)); t += j['$1'] + (j['errors'] if '$1' == 'operations' else 0)
print(t)"
    }
    fault_ops=$(count operations)
    fault_err=$(count errors)
    stop
}
fault_ops=
if wanted faults; then
    run_faults
fi

device=$((SLOTS * 1000000 / LATENCY_US))
echo
echo "Machine: $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ); device: $SLOTS slots x ${LATENCY_US} us = $device ops/s"
echo "Ceiling: openssl speed -multi 2 ecdsap256 = $ceiling sign/s"
echo
base=$(awk '$1 == "inline" {print $3}' "$WORK/table")
echo "| scenario | ops/s (ECDSA P-256; ping: pings) | vs device | keylessd CPU/op (us, no device thread) | CPU/op vs inline |"
echo "|---|---:|---:|---:|---:|"
while read -r name ops cpu; do
    printf '| %s | %s | %.2f | %s | %s |\n' "$name" "$ops" \
        "$(python3 -c "print($ops / $device)")" "$cpu" \
        "$([ -z "$base" ] && echo - || python3 -c "print(f'{$cpu / $base:.2f}')")"
done <"$WORK/table"
echo
[ -z "$pairs" ] || echo "Pairs (async vs inline alternated in one keylessd): $pairs"
[ -z "$fault_ops" ] || echo "Faults: $fault_ops operations, $fault_err errors (device errors and lost operations); before / after the first half / after the second: fds $f0 / $f1 / $f2, RSS $r0 / $r1 / $r2 KiB, async jobs in progress $j0 / $j1 / $j2"
