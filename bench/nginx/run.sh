#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Full TLS handshakes per second through nginx (the provider's evidence,
# bench/nginx/README.md): the
# same nginx serving the same certificate with its key on local disk and
# with a keyless key reference (keyless.so + keylessd on this machine), in
# the same run, as a ratio. Three cases:
#   p256-tls13    TLS 1.3, ECDSA P-256 certificate (target: ratio >= 0.8)
#   rsa2048-tls13 TLS 1.3, RSA-2048 certificate (RSA-PSS signatures)
#   rsa2048-kx    TLS 1.2, AES256-GCM-SHA384: RSA key exchange (the
#                 provider's decrypt path)
# Medians of REPS runs, local and keyless alternating (L K, then K L, ...)
# to cancel drift; `openssl speed -multi 2` of each primitive in the same
# run as the CPU's ceiling; CPU seconds of h2load, the nginx workers and
# keylessd over every run (/proc/PID/stat), written to
# bench/nginx/RESULTS.md by summarize.py.
#
#   bench/nginx/run.sh            the table (8-15 minutes, bounded)
#   bench/nginx/run.sh --smoke    every cell once for 1 s (about 10 s),
#                                 results under the build directory (CI)
#
# nginx: a master and 2 workers, tickets and session cache off,
# `keepalive_timeout 0` so that every request is a new connection and a
# full handshake. Client: h2load (Debian: nghttp2-client), HTTP/1.1 over
# TLS to 127.0.0.1, THREADS threads, CONC connections at a time, N
# requests per run (the same N for local and keyless, from a calibration
# run: about DUR seconds with the local key; h2load 1.52's -D hangs at its
# end when the server closes connections, nghttp2 issue 2250). keylessd's
# request count must equal the keyless handshakes (one key operation each,
# no resumption; plus its idle pings). A pair of runs during which other
# work on the machine used more than OTHER_MAX cores is run again, at most
# RETRIES times. Binaries come from $KL_BIN_DIR
# (default: build/), keyless.so from $KL_PROVIDER. Everything runs on
# 127.0.0.1; every process started here is stopped on exit.
#
# Knobs: REPS, DUR, CONC, THREADS, NG_WORKERS, CASES, KD_FLAGS, RETRIES,
# OTHER_MAX, OUT (see README.md). KEEP=1 keeps the work directory (raw
# outputs, logs). PERF=1 adds, after
# the table, one run per cell under `perf record` of the nginx workers and
# keylessd; RESULTS.md then shows where their time went (by process and
# library, and the top symbols).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
KL_BIN_DIR=${KL_BIN_DIR:-$ROOT/build}
KL_PROVIDER=${KL_PROVIDER:-$KL_BIN_DIR/keyless.so}
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
H2LOAD=${H2LOAD:-$(command -v h2load || echo /usr/bin/h2load)}
smoke=0
case "${1:-}" in
--smoke) smoke=1 ;;
"") ;;
*) echo "usage: $0 [--smoke]" >&2; exit 2 ;;
esac
for b in "$KL_BIN_DIR/keylessd" "$KL_BIN_DIR/keyless-keyref" "$KL_PROVIDER" \
    "$NGINX" "$H2LOAD"; do
    [ -x "$b" ] || [ -f "$b" ] || {
        echo "run.sh: $b missing (build first: make; nginx: nginx-light;" \
            "h2load: nghttp2-client)" >&2
        exit 1
    }
done
if [ $smoke = 1 ]; then
    DUR=1 REPS=1 SPEED_S=1 OUT=${OUT:-$KL_BIN_DIR/bench-nginx-smoke} RETRIES=0
    N=${N:-400}
else
    DUR=${DUR:-10} REPS=${REPS:-3} SPEED_S=${SPEED_S:-3} OUT=${OUT:-$ROOT/bench/nginx}
fi
CONC=${CONC:-32}
THREADS=${THREADS:-2}
NG_WORKERS=${NG_WORKERS:-2}
RETRIES=${RETRIES:-2}
OTHER_MAX=${OTHER_MAX:-0.15}
N=${N:-}
read -r -a CASES <<<"${CASES:-p256-tls13 rsa2048-tls13 rsa2048-kx}"
mkdir -p "$OUT"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kl-bench-nginx.XXXXXX")
chmod 755 "$WORK"
KD_PID=
NG_PID=
PERF_PID=
cleanup() {
    local p
    [ -z "$PERF_PID" ] || kill -INT "$PERF_PID" 2>/dev/null || true
    for p in $NG_PID $KD_PID; do kill -TERM "$p" 2>/dev/null || true; done
    for p in $PERF_PID $NG_PID $KD_PID; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    if [ -n "${KEEP:-}" ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "run.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# a port nothing listens on (others run servers on this machine too)
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_port() { # PORT PID
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}
# user+system CPU seconds of a process and all its threads (stat 14, 15)
cpu_s() {
    awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' \
        "/proc/$1/stat" 2>/dev/null || echo 0
}
# busy and total jiffies of the whole machine
machine() { awk '/^cpu / { print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9 }' /proc/stat; }
now() { date +%s.%N; }

# ---- keys, certificates, key server, references ---------------------------
PKI=$WORK/pki
bash "$ROOT/scripts/dev-pki.sh" "$PKI" >/dev/null
mkdir -p "$WORK/keys" "$WORK/certs"
chmod 700 "$WORK/keys"
for k in ecdsa-p256 rsa-2048; do
    cp "$PKI/keys/$k.key" "$WORK/keys/"
    openssl req -new -key "$PKI/keys/$k.key" -subj /CN=localhost \
        -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
        -out "$WORK/certs/$k.csr" 2>/dev/null
    openssl x509 -req -in "$WORK/certs/$k.csr" -CA "$PKI/ca.crt" \
        -CAkey "$PKI/ca.key" -CAcreateserial -days 2 -copy_extensions copy \
        -out "$WORK/certs/$k.crt" 2>/dev/null || die "certificate $k"
done
chmod 600 "$WORK/keys/"*.key

KD_PORT=$(free_port)
KD_METRICS=$(free_port)
# KD_FLAGS: extra flags, split on blanks on purpose
# shellcheck disable=SC2086
"$KL_BIN_DIR/keylessd" --listen-address=127.0.0.1 --port="$KD_PORT" \
    --metrics-port="$KD_METRICS" --auth-cert="$PKI/server.crt" \
    --auth-key="$PKI/server.key" --cloudflare-ca-cert="$PKI/ca.crt" \
    --private-key-dirs="$WORK/keys" --loglevel=1 --idle-timeout=10m \
    ${KD_FLAGS:-} >"$WORK/keylessd.log" 2>&1 </dev/null &
KD_PID=$!
wait_port "$KD_PORT" "$KD_PID" || { cat "$WORK/keylessd.log" >&2; die "keylessd did not start"; }

# keylessd's keyless_requests, summed over opcodes, when it serves
# /metrics (builds without it: "-", and only the total at its stop counts)
METRICS=0
for _ in $(seq 20); do
    curl -sf --max-time 2 "http://127.0.0.1:$KD_METRICS/metrics" >/dev/null 2>&1 &&
        { METRICS=1; break; }
    sleep 0.1
done
kd_requests() {
    [ $METRICS = 1 ] || { echo -; return; }
    { curl -s --max-time 5 "http://127.0.0.1:$KD_METRICS/metrics" || true; } |
        awk 'index($0, "keyless_requests{") == 1 { n += $NF } END { printf "%d", n }'
}
# key operations outside the measured runs (priming, perf)
EXTRA_OPS=0

for k in ecdsa-p256 rsa-2048; do
    "$KL_BIN_DIR/keyless-keyref" write --cert "$WORK/certs/$k.crt" \
        --server "127.0.0.1:$KD_PORT" --client-cert "$PKI/client.crt" \
        --client-key "$PKI/client.key" --ca "$PKI/ca.crt" \
        --server-name localhost --timeout-ms 5000 \
        --out "$WORK/certs/$k.ref" >/dev/null || die "keyless-keyref $k"
done

# ---- nginx: one instance, a port per case and key location -----------------
OSSL_CNF=$WORK/openssl.cnf
bash "$ROOT/scripts/provider-cnf.sh" "$OSSL_CNF" "$KL_PROVIDER"

NG=$WORK/nginx
mkdir -p "$NG/logs" "$NG/conf"
declare -A PORT
servers=
for c in "${CASES[@]}"; do
    case $c in
    p256-*) cert=ecdsa-p256 ;;
    *) cert=rsa-2048 ;;
    esac
    case $c in
    *-tls13) tls="ssl_protocols TLSv1.3;" ;;
    *-kx) tls="ssl_protocols TLSv1.2; ssl_ciphers AES256-GCM-SHA384;" ;;
    esac
    for mode in local keyless; do
        p=$(free_port)
        PORT[$c.$mode]=$p
        key=$WORK/keys/$cert.key
        [ $mode = keyless ] && key=$WORK/certs/$cert.ref
        servers+="
    server {
        listen 127.0.0.1:$p ssl;
        ssl_certificate $WORK/certs/$cert.crt;
        ssl_certificate_key $key;
        $tls
        location / { return 200 \"hello\\n\"; }
    }"
    done
done
cat >"$NG/conf/nginx.conf" <<CONF
worker_processes $NG_WORKERS;
master_process on;
daemon off;
pid $NG/logs/nginx.pid;
error_log $NG/logs/error.log warn;
env OPENSSL_CONF;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_timeout 0;
    ssl_session_tickets off;
    ssl_session_cache off;
    client_body_temp_path $NG/tmp-body;
    proxy_temp_path $NG/tmp-proxy;
    fastcgi_temp_path $NG/tmp-fastcgi;
    uwsgi_temp_path $NG/tmp-uwsgi;
    scgi_temp_path $NG/tmp-scgi;
$servers
}
CONF
if grep -q "PRIVATE KEY" "$WORK"/certs/*.ref; then die "a private key in a reference"; fi

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
OPENSSL_CONF=$OSSL_CNF "$NGINX" -p "$NG" -c "$NG/conf/nginx.conf" \
    >"$NG/logs/stdout.log" 2>&1 </dev/null &
NG_PID=$!
for c in "${CASES[@]}"; do
    for mode in local keyless; do
        wait_port "${PORT[$c.$mode]}" "$NG_PID" ||
            { cat "$NG/logs/error.log" "$NG/logs/stdout.log" >&2; die "nginx did not start"; }
    done
done
WORKERS=()
for _ in $(seq 50); do
    mapfile -t WORKERS < <(pgrep -P "$NG_PID" || true)
    [ ${#WORKERS[@]} -eq "$NG_WORKERS" ] && break
    sleep 0.1
done
[ ${#WORKERS[@]} -eq "$NG_WORKERS" ] ||
    die "expected $NG_WORKERS nginx workers, found ${#WORKERS[@]}"
WORKER_LIST=$(IFS=,; echo "${WORKERS[*]}")

# ---- one run -----------------------------------------------------------------
# CPU seconds of each nginx worker, space-separated
workers_cpu() {
    local w out=
    for w in "${WORKERS[@]}"; do out+="$(cpu_s "$w") "; done
    echo "${out% }"
}
# h2load arguments of a case
h2args() {
    local a=(--h1 -t "$THREADS" -c "$CONC")
    case $1 in
    *-kx) a+=(--ciphers=AES256-GCM-SHA384) ;;
    esac
    echo "${a[@]}"
}

# run CASE MODE RUN: one h2load run of NREQ[CASE] requests; writes
# CASE.MODE.RUN.{h2load,cpu}.
run() {
    local c=$1 mode=$2 rep=$3 f=$WORK/$1.$2.$3
    local -a args
    read -r -a args <<<"$(h2args "$c")"
    local k0 k1 w0 w1 m0 m1 t0 t1 r0 r1 h2cpu
    r0=$(kd_requests)
    k0=$(cpu_s "$KD_PID")
    w0=$(workers_cpu)
    m0=$(machine)
    t0=$(now)
    # h2load's own CPU from the shell's rusage of the child (it is gone
    # before its /proc entry could be read)
    h2cpu=$( { TIMEFORMAT='%U %S'
        time timeout -k 5 $((DUR * 10 + 30)) "$H2LOAD" "${args[@]}" -n "${NREQ[$c]}" \
            "https://127.0.0.1:${PORT[$c.$mode]}/" >"$f.h2load" 2>&1; } 2>&1 ) ||
        log "$c $mode: h2load failed: $(tail -3 "$f.h2load")"
    t1=$(now)
    m1=$(machine)
    w1=$(workers_cpu)
    k1=$(cpu_s "$KD_PID")
    r1=$(kd_requests)
    {
        echo "wall $t0 $t1"
        echo "h2load $h2cpu"
        echo "workers $w0 $w1"
        echo "keylessd $k0 $k1"
        echo "machine $m0 $m1"
        echo "kdreq $r0 $r1"
    } >"$f.cpu"
    local ops=-
    [ $METRICS = 0 ] || ops=$((r1 - r0))
    log "$c $mode run $rep: $(grep -o '[0-9.]* req/s' "$f.h2load" || echo '?'), key ops $ops," \
        "other work $(other_cores "$f.cpu") cores"
}

# other_cores CPUFILE: cores that the rest of the machine used during a run
# (its busy time minus h2load's, the workers' and keylessd's)
other_cores() {
    awk -v hz="$(getconf CLK_TCK)" '
        $1 == "wall" { wall = $3 - $2 }
        $1 == "h2load" { ours += $2 + $3 }
        $1 == "workers" { n = (NF - 1) / 2; for (i = 2; i <= n + 1; i++) ours += $(i + n) - $i }
        $1 == "keylessd" { ours += $3 - $2 }
        $1 == "machine" { busy = ($4 - $2) / hz }
        END { o = (busy - ours) / wall; printf "%.2f", o < 0 ? 0 : o }' "$1"
}

# pair CASE REP: the local and the keyless run of one repetition, in the
# order given by REP. Other work on the machine (other jobs share these
# two cores) lowers a run's rate, and not evenly: so when it used more
# than OTHER_MAX cores during either run, the pair is run again, at most
# RETRIES times, and the least disturbed attempt is kept (kept.CASE.REP;
# every attempt is listed in RESULTS.md).
pair() {
    local c=$1 rep=$2 order a worst best=0 bestv=99 mode
    if [ $((rep % 2)) = 1 ]; then order="local keyless"; else order="keyless local"; fi
    for a in $(seq 0 "$RETRIES"); do
        for mode in $order; do run "$c" "$mode" "$rep-$a"; done
        worst=$(printf '%s\n' "$(other_cores "$WORK/$c.local.$rep-$a.cpu")" \
            "$(other_cores "$WORK/$c.keyless.$rep-$a.cpu")" | sort -g | tail -1)
        if awk -v w="$worst" -v b="$bestv" 'BEGIN { exit !(w < b) }'; then
            best=$a bestv=$worst
        fi
        awk -v w="$worst" -v m="$OTHER_MAX" 'BEGIN { exit !(w <= m) }' && break
        [ "$a" = "$RETRIES" ] || log "$c run $rep: other work used $worst cores: again"
    done
    echo "$best" >"$WORK/kept.$c.$rep"
}

# ---- the ceiling ----------------------------------------------------------------
date -u +%Y-%m-%dT%H:%M:%SZ >"$WORK/date"
cat /proc/loadavg >"$WORK/loadavg.before"
# what the rest of the machine was doing just before (other work shares
# these cores: it shows in every run's "other" column too)
m0=$(machine)
sleep 2
echo "$m0 $(machine)" >"$WORK/machine.before"
log "ceiling: openssl speed -multi 2"
for alg in ecdsap256 rsa2048; do
    for rep in $(seq "$REPS"); do
        openssl speed -multi 2 -seconds "$SPEED_S" "$alg" >"$WORK/speed.$alg.$rep" 2>/dev/null ||
            log "openssl speed $alg failed"
    done
done

# ---- the table ---------------------------------------------------------------------
# one request each first: every worker opens its key server connection
# outside the measured runs
for c in "${CASES[@]}"; do
    read -r -a args <<<"$(h2args "$c")"
    for mode in local keyless; do
        timeout 20 "$H2LOAD" "${args[@]}" -c 2 -n 8 "https://127.0.0.1:${PORT[$c.$mode]}/" \
            >"$WORK/prime.$c.$mode" 2>&1 || true
        grep -q "8 succeeded" "$WORK/prime.$c.$mode" ||
            { cat "$WORK/prime.$c.$mode" "$NG/logs/error.log" >&2; die "$c $mode: no HTTPS"; }
        [ $mode = local ] || EXTRA_OPS=$((EXTRA_OPS + 8))
    done
done
# requests per run: about DUR seconds with the local key
declare -A NREQ
for c in "${CASES[@]}"; do
    if [ -n "$N" ]; then NREQ[$c]=$N; continue; fi
    read -r -a args <<<"$(h2args "$c")"
    timeout -k 5 60 "$H2LOAD" "${args[@]}" -n 2000 "https://127.0.0.1:${PORT[$c.local]}/" \
        >"$WORK/calibrate.$c" 2>&1 || true
    rate=$(grep -o '[0-9.]* req/s' "$WORK/calibrate.$c" | cut -d. -f1)
    NREQ[$c]=$(( ${rate:-200} * DUR / 100 * 100 ))
    [ "${NREQ[$c]}" -ge 400 ] || NREQ[$c]=400
    log "$c: ${rate:-?} handshakes/s in calibration: ${NREQ[$c]} requests per run"
done

for rep in $(seq "$REPS"); do
    for c in "${CASES[@]}"; do pair "$c" "$rep"; done
done
cat /proc/loadavg >"$WORK/loadavg.after"

# ---- where the time goes (optional) ----------------------------------------------
if [ "${PERF:-0}" = 1 ] && command -v perf >/dev/null; then
    for c in "${CASES[@]}"; do
        read -r -a args <<<"$(h2args "$c")"
        for mode in local keyless; do
            log "perf: $c $mode"
            perf record -q -o "$WORK/perf.$c.$mode.data" \
                -p "$WORKER_LIST,$KD_PID" 2>/dev/null &
            PERF_PID=$!
            sleep 0.5
            timeout -k 5 $((DUR * 10 + 30)) "$H2LOAD" "${args[@]}" -n "${NREQ[$c]}" \
                "https://127.0.0.1:${PORT[$c.$mode]}/" >"$WORK/perf.$c.$mode.h2load" 2>&1 || true
            [ $mode = local ] || EXTRA_OPS=$((EXTRA_OPS + NREQ[$c]))
            kill -INT "$PERF_PID" 2>/dev/null || true
            wait "$PERF_PID" || true
            PERF_PID=
            perf report -i "$WORK/perf.$c.$mode.data" --no-children -g none \
                --sort comm,dso --percent-limit 0.5 --stdio >"$WORK/perf-dso.$c.$mode" 2>/dev/null || true
            perf report -i "$WORK/perf.$c.$mode.data" --no-children -g none \
                --sort comm,dso,sym --percent-limit 0.4 --stdio >"$WORK/perf-sym.$c.$mode" 2>/dev/null || true
            rm -f "$WORK/perf.$c.$mode.data"
        done
    done
fi

# ---- results ----------------------------------------------------------------------
# keylessd's own count of every request it answered, from its summary at
# stop: the keyless runs' handshakes plus EXTRA_OPS, if each handshake
# made exactly one key operation
kill -TERM "$KD_PID" 2>/dev/null || true
wait "$KD_PID" 2>/dev/null || true
KD_PID=
{
    echo "extra $EXTRA_OPS"
    # libkeyless pings a connection idle for 10 s: at most this many pings
    # (a connection per key and nginx worker)
    echo "maxpings $(( (SECONDS / 10 + 1) * 2 * NG_WORKERS ))"
    echo "metrics $METRICS"
    grep -o 'stopped: [0-9]* connections, [0-9]* requests, [0-9]* errors' \
        "$WORK/keylessd.log" | tail -1 | awk '{ print "stopped", $2, $4, $6 }'
} >"$WORK/kdtotal"
{
    echo "nginx $("$NGINX" -v 2>&1 | sed 's/^nginx version: //')"
    echo "h2load $("$H2LOAD" --version 2>&1 | head -1)"
    echo "openssl $(openssl version)"
    # the commit of the sources the binaries were built from
    src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$KL_BIN_DIR/CMakeCache.txt" 2>/dev/null)
    src=${src:-$ROOT}
    echo "commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
        git -C "$src" diff --quiet HEAD -- src include 2>/dev/null ||
            echo ' (with uncommitted changes in src/ or include/)') in $src"
    echo "keylessd $KL_BIN_DIR/keylessd ${KD_FLAGS:-}"
    echo "conc $CONC"
    echo "threads $THREADS"
    echo "ngworkers $NG_WORKERS"
    echo "retries $RETRIES"
    echo "other_max $OTHER_MAX"
    for c in "${CASES[@]}"; do echo "nreq $c ${NREQ[$c]}"; done
    echo "dur $DUR"
    echo "reps $REPS"
    echo "speed_s $SPEED_S"
    for c in "${CASES[@]}"; do echo "case $c $(h2args "$c")"; done
} >"$WORK/meta"
cp "$NG/conf/nginx.conf" "$WORK/nginx.conf.txt"
grep -c . "$NG/logs/error.log" >"$WORK/nginx-errors" 2>/dev/null || echo 0 >"$WORK/nginx-errors"
python3 "$ROOT/bench/nginx/summarize.py" "$WORK" "$OUT" "$smoke"
log "wrote $OUT/RESULTS.md"
