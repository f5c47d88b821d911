# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# HAProxy for the end-to-end test (test_haproxy.sh) and the benchmark
# (bench/haproxy/run.sh). Sourced after lib.sh; skips when the
# Debian package `haproxy` (2.6+, OpenSSL 3) is missing.
HAPROXY=${HAPROXY:-$(command -v haproxy || echo /usr/sbin/haproxy)}
[ -x "$HAPROXY" ] || skip "haproxy is not installed (Debian: haproxy)"
# (read whole: with pipefail, grep -q closing the pipe early would fail it)
HP_VV=$("$HAPROXY" -vv 2>&1 || true)
grep -q "Running on OpenSSL version : OpenSSL 3" <<<"$HP_VV" ||
    skip "haproxy without OpenSSL 3 (providers)"

# hp_setup: HAProxy-style bundles (certificate, then key reference) for
# certs/fast.test.crt and certs/slow.test.crt, naming the running keylessd,
# in $H. No private key on HAProxy's side.
H=$E2E_TMP/haproxy
hp_setup() {
    mkdir -p "$H"
    ref fast.test --bundle
    ref slow.test --bundle
    cp "$E2E_TMP/certs/fast.test.ref" "$H/fast.pem"
    cp "$E2E_TMP/certs/slow.test.ref" "$H/slow.pem"
    if grep -q "PRIVATE KEY" "$H"/*.pem; then fail "a private key on HAProxy's side"; fi
}

# start_haproxy NAME ASYNC(0|1): HAProxy in master-worker mode with
# $HP_THREADS threads (2), keyless.so loaded by ssl-provider after the
# default provider, ssl-mode-async when ASYNC is 1. Frontends on $HP_PORT
# (both certificates, by SNI; the first is the default) and $HP_SHORT (slow
# only, 100 ms handshake timeout). Sets HP_PID (master), HP_WORKER; log in
# $H/NAME.log (HAProxy's stderr and its log lines).
start_haproxy() {
    local name=$1 async=$2 cfg=$H/$1.cfg
    HP_PORT=$(free_port)
    HP_SHORT=$(free_port)
    {
        echo "global"
        echo "    master-worker"
        echo "    nbthread ${HP_THREADS:-2}"
        echo "    maxconn 4096"
        if [ "$async" = 1 ]; then echo "    ssl-mode-async"; fi
        echo "    ssl-provider-path $(dirname "$KL_PROVIDER")"
        echo "    ssl-provider default"
        echo "    ssl-provider $(basename "$KL_PROVIDER" .so)"
        echo "    pidfile $H/$name.pid"
        echo "    log stderr format raw local0 info"
        cat <<CFG
defaults
    mode http
    log global
    timeout connect 2s
    timeout client 10s
    timeout server 10s
    error-log-format "%ci:%cp %ft handshake failed: %[fc_err_str] / %[ssl_fc_err_str]"
frontend fe
    bind 127.0.0.1:$HP_PORT ssl crt $H/fast.pem crt $H/slow.pem
    http-request return status 200 content-type text/plain string "hello from keyless"
frontend fe_short
    timeout client 100ms
    bind 127.0.0.1:$HP_SHORT ssl crt $H/slow.pem
    http-request return status 200 content-type text/plain string "slow"
CFG
    } >"$cfg"
    "$HAPROXY" -f "$cfg" >"$H/$name.log" 2>&1 </dev/null &
    HP_PID=$!
    E2E_PIDS+=("$HP_PID")
    local i
    for i in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$HP_PORT") 2>/dev/null && break
        kill -0 "$HP_PID" 2>/dev/null || { cat "$H/$name.log" >&2; fail "haproxy ($name) did not start"; }
        sleep 0.05
    done
    HP_WORKER=$(pgrep -P "$HP_PID" | head -1)
    [ -n "$HP_WORKER" ] || fail "haproxy ($name): no worker"
}

