#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The performance table of the performance issue, measured on this machine:
# keylessd loaded by keyless-bench in each scenario, the CPU's ceiling from
# `openssl speed -multi 2` of the same primitive in the same run, medians
# of 3 runs, ratios against the targets, written to bench/RESULTS.md with
# a chart (bench/results.png, when gnuplot is installed).
#
#   bench/run.sh            the full table (about 10 minutes, bounded)
#   bench/run.sh --smoke    every scenario once for about a second, results
#                           under the build directory (CI: keeps it working)
#   bench/run.sh --remote [--smoke]
#                           only the geo-routing remote path:
#                           keyless-bench -> keylessd router -> keylessd
#                           backend holding the key, against the backend
#                           directly; prints the "Geo routing (remote path)"
#                           rows for bench/RESULTS.md (about 3 minutes;
#                           ROUTER_FLAGS adds keylessd flags to the router)
#   bench/run.sh --rsa [--smoke]
#                           only the large-RSA rows (RSA-3072/4096 against
#                           their ceiling, isolation, mixed load; with and
#                           without background workers): bench/rsa.sh
#   bench/run.sh --accel [--smoke]
#                           only the accelerator rows: bench/accel.sh
#   bench/run.sh --scale [--smoke]
#                           only the scale and storm scenarios (100,000
#                           keys, reconnect storm, floods, ECDSA nonces:
#                           bench/scale.sh); prints their section for
#                           bench/RESULTS.md (about 10 minutes)
#
# Binaries come from $KL_BIN_DIR (default: build/). Everything runs on
# 127.0.0.1; every process started here is stopped on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${KL_BIN_DIR:-$ROOT/build}
KEYLESSD=$BUILD/keylessd
BENCH=$BUILD/keyless-bench
smoke=0
remote=0
scale=0
for arg in "$@"; do
    case "$arg" in
    --rsa) shift; exec bash "$ROOT/bench/rsa.sh" "$@" ;;
    --accel) shift; exec bash "$ROOT/bench/accel.sh" "$@" ;;
    --smoke) smoke=1 ;;
    --remote) remote=1 ;;
    --scale) scale=1 ;;
    *) echo "usage: $0 [--remote | --scale] [--smoke]" >&2; exit 2 ;;
    esac
done
for b in "$KEYLESSD" "$BENCH"; do
    [ -x "$b" ] || { echo "run.sh: $b missing: build first (make)" >&2; exit 1; }
done

if [ $smoke = 1 ]; then
    DUR=1; WARM=0.2; REPS=1; SPEED_S=1; PAIR_S=1; IDLE_N=200
    OUT=$BUILD/bench-smoke
else
    DUR=10; WARM=1; REPS=3; SPEED_S=5; PAIR_S=3; IDLE_N=10000
    OUT=$ROOT/bench
fi
mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kl-bench.XXXXXX")
SERVER_PID=
BG_PIDS=()

cleanup() {
    for p in "${BG_PIDS[@]}" $SERVER_PID; do
        kill "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 10,000 connections need as many descriptors on each side
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

log() { echo "run.sh: $*" >&2; }

# ---- keys and PKI --------------------------------------------------------
bash "$ROOT/scripts/dev-pki.sh" "$WORK/pki" >/dev/null
PKI=$WORK/pki
mkdir -p "$WORK/keys"
chmod 700 "$WORK/keys"
for k in ecdsa-p256 ed25519 rsa-2048; do
    cp "$PKI/keys/$k.key" "$WORK/keys/"
done
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:4096 \
    -out "$WORK/keys/rsa-4096.key" 2>/dev/null
chmod 600 "$WORK/keys/"*.key
openssl pkey -in "$WORK/keys/rsa-4096.key" -pubout -out "$WORK/rsa-4096.pem"
pub() { [ "$1" = rsa-4096 ] && echo "$WORK/rsa-4096.pem" || echo "$PKI/pubkeys/$1.pem"; }
op_of() {
    case $1 in
    ecdsa-p256) echo ecdsa-sha256 ;;
    ed25519) echo ed25519 ;;
    rsa-*) echo rsa-sha256 ;;
    esac
}
alg_of() { # the primitive's name for openssl speed
    case $1 in
    ecdsa-p256) echo ecdsap256 ;;
    ed25519) echo ed25519 ;;
    rsa-2048) echo rsa2048 ;;
    esac
}

# a port nothing listens on (others may run servers on this machine too)
pick_port() {
    while :; do
        PORT=$((20000 + RANDOM % 20000))
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null || break
    done
    TLS=(-cert "$PKI/client.crt" -key "$PKI/client.key" -ca "$PKI/ca.crt"
         -server "127.0.0.1:$PORT")
}
pick_port

# ---- the server -------------------------------------------------------------
start_server() { # SHARDS [EXTRA KEYLESSD FLAGS...]
    local shards=$1
    shift
    for _try in 1 2 3; do
        # no metrics listener: its fixed default port could clash with
        # another keylessd on this machine (and /metrics is not measured)
        KEYLESS_METRICS_PORT=0 "${SERVER_PREFIX[@]}" "$KEYLESSD" \
            --listen-address=127.0.0.1 \
            --port=$PORT --auth-cert="$PKI/server.crt" \
            --auth-key="$PKI/server.key" --cloudflare-ca-cert="$PKI/ca.crt" \
            --private-key-dirs="$WORK/keys" --shards="$shards" --workers=0 \
            --loglevel=2 --idle-timeout=10m "$@" >"$WORK/keylessd.log" 2>&1 &
        SERVER_PID=$!
        for _ in $(seq 100); do
            if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
                kill -0 $SERVER_PID 2>/dev/null && return 0
            fi
            kill -0 $SERVER_PID 2>/dev/null || break
            sleep 0.1
        done
        wait $SERVER_PID 2>/dev/null || true
        SERVER_PID=
        grep -q "already in use" "$WORK/keylessd.log" || break
        pick_port # taken meanwhile by someone else: another port
    done
    cat "$WORK/keylessd.log" >&2
    log "keylessd did not start"
    exit 1
}

stop_server() {
    [ -n "$SERVER_PID" ] || return 0
    kill -TERM $SERVER_PID 2>/dev/null || true
    wait $SERVER_PID 2>/dev/null || true
    SERVER_PID=
}

# user+system CPU of the server in seconds (fields 14 and 15 of stat)
cpu_s() {
    awk -v hz="$(getconf CLK_TCK)" '{printf "%.3f", ($14 + $15) / hz}' \
        "/proc/$SERVER_PID/stat"
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$SERVER_PID/status"; }
# busy and total jiffies of the whole machine: what else ran meanwhile
machine() { awk '/^cpu / {print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }

# ---- one scenario -------------------------------------------------------------
# scenario NAME PRIMITIVE "DESCRIPTION" BENCH-ARGS...: REPS runs, each a
# JSON result plus the server's CPU seconds over the measured window.
scenario() {
    local name=$1 prim=$2 desc=$3
    shift 3
    printf '%s\t%s\t%s\tkeyless-bench %s\n' "$name" "$prim" "$desc" "$*" \
        >>"$WORK/scenarios.tsv"
    for rep in $(seq $REPS); do
        log "$name run $rep/$REPS"
        if [ -n "$PAIR_ALG" ]; then
            # the ceiling again right before this run: the host's speed
            # drifts by several % within the hour (bench/README.md)
            openssl speed -multi 2 -seconds $PAIR_S "$PAIR_ALG" 2>/dev/null |
                awk '/sign\/s/ {getline; print $(NF-1)}' \
                    >"$WORK/$name.$rep.ceiling"
        fi
        local np=
        if [ ${#NEIGHBOUR[@]} -gt 0 ]; then
            # from before the measured window to after it
            "$BENCH" "${TLS[@]}" -json "${NEIGHBOUR[@]}" \
                -duration "$(calc "$DUR + $WARM + 1.5")s" \
                >"$WORK/$name.$rep.neighbour.json" 2>&1 &
            np=$!
            sleep 0.3
        fi
        "$BENCH" "${TLS[@]}" -json -warmup ${WARM}s -duration ${DUR}s "$@" \
            >"$WORK/$name.$rep.json" 2>"$WORK/$name.$rep.err" &
        local bp=$!
        # the bench connects (milliseconds), warms up, then measures
        sleep "$(calc "$WARM + 0.05")"
        local c0 c1 r0 m0 m1
        c0=$(cpu_s)
        m0=$(machine)
        sleep $DUR
        c1=$(cpu_s)
        m1=$(machine)
        r0=$(rss_kb)
        wait $bp || { cat "$WORK/$name.$rep.err" >&2; log "$name failed"; }
        echo "$c0 $c1 $r0 $m0 $m1" >"$WORK/$name.$rep.cpu"
        [ -z "$np" ] || wait $np || true
    done
}
NEIGHBOUR=()
PAIR_ALG= # set: each run of the scenario gets its own ceiling (openssl speed)
SERVER_PREFIX=(env) # a command keylessd runs under (start_server)
calc() { awk "BEGIN { print $1 }"; }

median_ops() { # NAME: median ops/s of its runs
    python3 - "$WORK" "$1" <<'EOF'
import json, glob, statistics, sys
v = [json.load(open(f))["ops_per_sec"] for f in glob.glob(f"{sys.argv[1]}/{sys.argv[2]}.*.json")]
print(int(statistics.median(v)) if v else 0)
EOF
}

# ---- scale and storm scenarios (bench/scale.sh; --scale runs only them) ----
source "$ROOT/bench/scale.sh"
if [ $scale = 1 ]; then
    date -u +%Y-%m-%dT%H:%M:%SZ >"$WORK/date"
    la0=$(cut -d' ' -f1-3 /proc/loadavg)
    scale_all
    echo "Run $(cat "$WORK/date"), $(nproc) cores, load average before / after: $la0 / $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    python3 "$ROOT/bench/scale.py" "$WORK" $([ $smoke = 1 ] && echo --smoke)
    exit 0
fi
# ---- end of the scale and storm scenarios ----------------------------------

# ---- geo routing: the remote path (--remote) ---------------------------------
# A backend keylessd holds the key; a router keylessd holds no key and
# forwards to the backend through its routing table (both on 127.0.0.1).
# The same load runs against the backend directly and through the router:
# closed loop (8 connections x 64) for throughput, open loop for latency.
# REPS runs each, alternating direct and routed so that both see the same
# background load; medians printed as markdown rows.
if [ $remote = 1 ]; then
    RDUR=$DUR; [ $smoke = 1 ] || RDUR=8
    PORT_B=$PORT
    start_server 0
    pick_port
    while [ "$PORT" = "$PORT_B" ]; do pick_port; done
    PORT_R=$PORT
    mkdir -p "$WORK/nokeys" && chmod 700 "$WORK/nokeys"
    SKI=$("$BUILD/keyless-cli" ski "$(pub ecdsa-p256)" | awk '{print $1}')
    printf 'servers:\n  - {name: backend, address: "127.0.0.1:%s", region: local, serves: [%s]}\n' \
        "$PORT_B" "$SKI" >"$WORK/routes.yaml"
    KEYLESS_METRICS_PORT=0 "$KEYLESSD" --listen-address=127.0.0.1 \
        --port=$PORT_R --auth-cert="$PKI/server.crt" \
        --auth-key="$PKI/server.key" --cloudflare-ca-cert="$PKI/ca.crt" \
        --private-key-dirs="$WORK/nokeys" --workers=0 --loglevel=2 \
        --router-table="$WORK/routes.yaml" --router-cert="$PKI/client.crt" \
        --router-key="$PKI/client.key" --router-ca="$PKI/ca.crt" \
        --router-server-name=127.0.0.1 --idle-timeout=10m \
        ${ROUTER_FLAGS:-} \
        >"$WORK/router.log" 2>&1 &
    ROUTER_PID=$!
    BG_PIDS+=($ROUTER_PID)
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT_R") 2>/dev/null && break
        kill -0 $ROUTER_PID 2>/dev/null || { cat "$WORK/router.log" >&2; exit 1; }
        sleep 0.1
    done
    sleep 1 # the router's first probe measures the backend
    rate=2000
    date -u +%Y-%m-%dT%H:%M:%SZ >"$WORK/date"
    for rep in $(seq $REPS); do
        for via in direct router; do
            port=$PORT_B
            [ $via = router ] && port=$PORT_R
            T=(-cert "$PKI/client.crt" -key "$PKI/client.key" -ca "$PKI/ca.crt"
               -server "127.0.0.1:$port" -server-name 127.0.0.1
               -pubkey "$(pub ecdsa-p256)" -op ecdsa-sha256 -verify -json)
            log "remote path: $via run $rep/$REPS"
            # exit 1 = some requests failed: counted in the table
            "$BENCH" "${T[@]}" -warmup ${WARM}s -duration ${RDUR}s \
                -connections 8 -depth 64 >"$WORK/r-closed-$via.$rep.json" ||
                [ $? = 1 ]
            "$BENCH" "${T[@]}" -warmup ${WARM}s -duration ${RDUR}s \
                -connections 1 -rate $rate >"$WORK/r-open-$via.$rep.json" ||
                [ $? = 1 ]
        done
    done
    grep -h "router:" "$WORK/router.log" | tail -5 >&2 || true
    python3 - "$WORK" "$REPS" "$rate" "$(cat "$WORK/date")" "$(nproc)" <<'PYEOF'
import json, statistics, sys
work, reps, rate, date, ncpu = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def med(kind, via, f):
    return statistics.median(
        f(json.load(open(f"{work}/r-{kind}-{via}.{r}.json"))) for r in range(1, reps + 1))
ops = lambda j: j["ops_per_sec"]
p50 = lambda j: j["latency_us"]["p50"] / 1000
p99 = lambda j: j["latency_us"]["p99"] / 1000
err = lambda j: j["errors"]
print(f"Run {date}, {ncpu} cores, medians of {reps} runs (keyless-bench -verify: every signature checked).")
print()
print(f"| path (ECDSA P-256) | 8 x 64: ops/s | 8 x 64: p50 / p99 ms | open loop {rate}/s: p50 / p99 ms | errors |")
print("|---|---|---|---|---|")
for via, name in (("direct", "backend directly"), ("router", "through the router (1 hop)")):
    print(f"| {name} | {med('closed', via, ops):.0f} | {med('closed', via, p50):.2f} / {med('closed', via, p99):.2f} "
          f"| {med('open', via, p50):.3f} / {med('open', via, p99):.3f} "
          f"| {med('closed', via, err) + med('open', via, err):.0f} |")
d50 = med('open', 'router', p50) - med('open', 'direct', p50)
d99 = med('open', 'router', p99) - med('open', 'direct', p99)
ratio = med('closed', 'router', ops) / max(1, med('closed', 'direct', ops))
print()
print(f"Added by the hop (open loop): p50 +{d50:.3f} ms, p99 +{d99:.3f} ms; "
      f"routed throughput {ratio:.2f}x direct (8 x 64).")
PYEOF
    exit 0
fi

# ---- the ceiling ---------------------------------------------------------------
log "ceiling: openssl speed -multi 2"
for alg in ecdsap256 ed25519 rsa2048; do
    for rep in $(seq $REPS); do
        openssl speed -multi 2 -seconds $SPEED_S "$alg" 2>/dev/null |
            awk '/sign\/s/ {getline; print $(NF-1)}' >>"$WORK/ceiling.$alg"
    done
done

# ---- the table -------------------------------------------------------------------
date -u +%Y-%m-%dT%H:%M:%SZ >"$WORK/date"
cat /proc/loadavg >"$WORK/loadavg.before"
start_server 0
for p in ecdsa-p256 ed25519 rsa-2048; do
    PAIR_ALG=$(alg_of $p)
    scenario "$p-8x64" $p "8 connections x 64 in flight" \
        -pubkey "$(pub $p)" -op "$(op_of $p)" -connections 8 -depth 64
    PAIR_ALG=
    scenario "$p-1x1024" $p "1 connection x 1024 in flight" \
        -pubkey "$(pub $p)" -op "$(op_of $p)" -connections 1 -depth 1024
done
for p in ecdsa-p256 rsa-2048; do
    peak=$(median_ops "$p-8x64")
    rate=$((peak / 2))
    [ $rate -gt 0 ] || rate=100
    scenario "$p-open50" $p "open loop at 50% of peak ($rate/s), 8 connections" \
        -pubkey "$(pub $p)" -op "$(op_of $p)" -connections 8 -rate $rate
    # the same load with the client's sends batched on a 100 us grid (the
    # wait counted in the latency): a client that wakes per request spends
    # ~20 us per ECDSA request of the 2 cores it shares with the server
    [ $p = ecdsa-p256 ] &&
        scenario "$p-open50-tick" $p \
            "open loop at 50% of peak ($rate/s), 8 connections, sends on a 100 us grid (-tick)" \
            -pubkey "$(pub $p)" -op "$(op_of $p)" -connections 8 -rate $rate \
            -tick 100us
done
iso_rate=10000
[ $smoke = 1 ] && iso_rate=2000
scenario "ecdsa-p256-iso-solo" ecdsa-p256 "open loop $iso_rate/s alone" \
    -pubkey "$(pub ecdsa-p256)" -connections 1 -rate $iso_rate
# the noisy neighbour: another connection keeping 64 RSA-4096 in flight
NEIGHBOUR=(-pubkey "$(pub rsa-4096)" -op rsa-sha256 -connections 1 -depth 64)
scenario "ecdsa-p256-iso-rsa4096" ecdsa-p256 \
    "open loop $iso_rate/s next to 64 RSA-4096 in flight (server CPU: both)" \
    -pubkey "$(pub ecdsa-p256)" -connections 1 -rate $iso_rate
NEIGHBOUR=()
stop_server

# The open loop again with keylessd's loops and workers under SCHED_FIFO
# (--realtime-priority, docs/DESIGN.md "Real-time event loops"): a woken
# loop runs at once instead of waiting a scheduler slice behind the client.
# The closed loop shows its cost when the client shares the cores.
start_server 0 --realtime-priority=1
if grep -q "refused SCHED_FIFO" "$WORK/keylessd.log"; then
    log "realtime rows skipped: $(grep -o 'the kernel refused[^;]*' "$WORK/keylessd.log")"
else
    rate=$(($(median_ops ecdsa-p256-8x64) / 2))
    [ $rate -gt 0 ] || rate=100
    scenario "ecdsa-p256-open50-rt" ecdsa-p256 \
        "open loop at 50% of peak ($rate/s), 8 connections, keylessd --realtime-priority=1" \
        -pubkey "$(pub ecdsa-p256)" -connections 8 -rate $rate
    scenario "ecdsa-p256-open50-tick-rt" ecdsa-p256 \
        "open loop at 50% of peak ($rate/s), 8 connections, -tick 100us, keylessd --realtime-priority=1" \
        -pubkey "$(pub ecdsa-p256)" -connections 8 -rate $rate -tick 100us
    scenario "ecdsa-p256-8x64-rt" ecdsa-p256 \
        "8 x 64, keylessd --realtime-priority=1 (the client gets the CPU keylessd leaves)" \
        -pubkey "$(pub ecdsa-p256)" -connections 8 -depth 64
fi
stop_server

start_server 1
scenario "ecdsa-p256-1shard" ecdsa-p256 "8 x 64, keylessd --shards=1" \
    -pubkey "$(pub ecdsa-p256)" -connections 8 -depth 64
stop_server
start_server 2
scenario "ecdsa-p256-2shards" ecdsa-p256 "8 x 64, keylessd --shards=2" \
    -pubkey "$(pub ecdsa-p256)" -connections 8 -depth 64
stop_server
# scaling with the CPUs given to keylessd: one shard and one worker held to
# CPU 0 (the client free to use both), against the 2 shards above
SERVER_PREFIX=(taskset -c 0)
start_server 1 --workers=1
scenario "ecdsa-p256-1cpu" ecdsa-p256 \
    "8 x 64, keylessd --shards=1 --workers=1 on one CPU (taskset -c 0)" \
    -pubkey "$(pub ecdsa-p256)" -connections 8 -depth 64
stop_server
SERVER_PREFIX=(env)

# ---- memory per idle connection ----------------------------------------------
start_server 0
rss0=$(rss_kb)
log "memory: $IDLE_N idle connections"
"$BENCH" "${TLS[@]}" -idle -connections $IDLE_N -duration 600s \
    >"$WORK/idle.out" 2>&1 &
BG_PIDS+=($!)
for _ in $(seq 1200); do
    grep -q "Idle connections open" "$WORK/idle.out" && break
    kill -0 "${BG_PIDS[0]}" 2>/dev/null || break
    sleep 0.1
done
sleep 2
rss1=$(rss_kb)
kill -INT "${BG_PIDS[0]}" 2>/dev/null || true
wait "${BG_PIDS[@]}" 2>/dev/null || true
BG_PIDS=()
echo "$IDLE_N $rss0 $rss1 $(grep -o 'connected in [0-9.]*s' "$WORK/idle.out" || true)" \
    >"$WORK/idle.mem"
stop_server
scale_all # bench/scale.sh: 100,000 keys, reconnect storm, floods, nonces
cat /proc/loadavg >"$WORK/loadavg.after"

# ---- results -----------------------------------------------------------------------
python3 "$ROOT/bench/summarize.py" "$WORK" "$OUT" $smoke
log "wrote $OUT/RESULTS.md"
