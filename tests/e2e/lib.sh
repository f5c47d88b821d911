# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Shared by the end-to-end tests of the keyless provider: a test
# PKI, a keylessd holding the real keys, certificates and key references
# for them, and an openssl.cnf that loads keyless.so after the default
# provider; for the asynchronous key operations also certificates named
# for SNI, a slow key (a demo key on a token that stalls each operation)
# and the handshake client hsload.
# Sourced; every helper fails the test with a message.
set -euo pipefail

: "${KL_SRC_DIR:?}" "${KL_BIN_DIR:?}" "${KL_PROVIDER:?}"
E2E_TMP=$(mktemp -d "${KL_BIN_DIR}/e2e-XXXXXX")
chmod 755 "$E2E_TMP"
KD_PID=
KD_PORT=
KD_METRICS=
KD_STORES=
declare -a E2E_PIDS=()

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }

cleanup() {
    local p
    for p in "${E2E_PIDS[@]}" $KD_PID; do kill "$p" 2>/dev/null || true; done
    sleep 0.2
    for p in "${E2E_PIDS[@]}" $KD_PID; do kill -9 "$p" 2>/dev/null || true; done
    if [ "${KEEP_E2E:-}" = "" ]; then rm -rf "$E2E_TMP"; fi
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# The dev PKI plus certificates signed by its CA for the demo keys.
PKI=$E2E_TMP/pki
make_pki() {
    bash "$KL_SRC_DIR/scripts/dev-pki.sh" --test-extras "$PKI" >/dev/null
    mkdir -p "$E2E_TMP/certs"
    local k
    for k in rsa-2048 ecdsa-p256 ecdsa-p384 ed25519; do
        openssl req -new -key "$PKI/keys/$k.key" -subj /CN=localhost \
            -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
            -out "$E2E_TMP/certs/$k.csr" 2>/dev/null
        openssl x509 -req -in "$E2E_TMP/certs/$k.csr" -CA "$PKI/ca.crt" \
            -CAkey "$PKI/ca.key" -CAcreateserial -days 2 -copy_extensions copy \
            -out "$E2E_TMP/certs/$k.crt" 2>/dev/null || fail "cert $k"
    done
}

# keylessd flags a test adds (e.g. --workers) before calling
# start_keylessd.
declare -a KD_EXTRA=()

# has_flag NAME: this keylessd knows --NAME (checked in its --help, so the
# tests run against builds with and without newer options).
# (The help is read whole first: grep -q may exit early, and with pipefail
# the writer's SIGPIPE would fail the check.)
KD_HELP=
has_flag() {
    [ -n "$KD_HELP" ] || KD_HELP=$("$KL_BIN_DIR/keylessd" --help 2>&1 || true)
    grep -q -- "--$1\b" <<<"$KD_HELP"
}

# named_cert NAME KEY: certs/NAME.crt for the demo key KEY (rsa-2048,
# ecdsa-p256...), subject and SAN NAME (certificates told apart by SNI).
named_cert() {
    openssl req -new -key "$PKI/keys/$2.key" -subj "/CN=$1" \
        -addext "subjectAltName=DNS:$1" -out "$E2E_TMP/certs/$1.csr" 2>/dev/null
    openssl x509 -req -in "$E2E_TMP/certs/$1.csr" -CA "$PKI/ca.crt" \
        -CAkey "$PKI/ca.key" -CAcreateserial -days 2 -copy_extensions copy \
        -out "$E2E_TMP/certs/$1.crt" 2>/dev/null || fail "cert $1"
}

# slow_key KEY MS SESSIONS: from the next start_keylessd on, keylessd
# serves the demo key KEY (rsa-2048, ecdsa-p384...) from a SoftHSM2 token
# on which every signature and decryption takes MS milliseconds, SESSIONS
# of them at a time; the other demo keys stay files. keylessd has no test
# hook in its request path: the token is behind the test-only fault shim
# (tests/p11shim, $KL_P11SHIM or $KL_BIN_DIR/libkl_p11shim.so), which
# stalls each operation, and keylessd serves it like any slow HSM, on its
# blocking workers (one per session). Called again (same KEY): a new MS
# and SESSIONS for the same token.
slow_key() {
    local d=$E2E_TMP/slowkey m module='' shim=${KL_P11SHIM:-$KL_BIN_DIR/libkl_p11shim.so}
    [ -r "$shim" ] || fail "the fault shim $shim is missing (build kl_p11shim)"
    shim=$(realpath "$shim")
    for m in /usr/lib/softhsm/libsofthsm2.so /usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so \
        /usr/lib64/softhsm/libsofthsm2.so /usr/local/lib/softhsm/libsofthsm2.so; do
        [ -r "$m" ] && module=$m && break
    done
    [ -n "$module" ] || fail "SoftHSM2 is not installed (scripts/install-deps.sh)"
    export SOFTHSM2_CONF=$d/softhsm2.conf KL_P11SHIM_TARGET=$module KL_P11SHIM_CTL=$d/shim.ctl
    if [ ! -d "$d" ]; then
        mkdir -p "$d/tokens" "$d/keys"
        printf 'directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n' \
            "$d/tokens" >"$SOFTHSM2_CONF"
        softhsm2-util --init-token --free --label kl-slow --pin 1234 --so-pin 000000 \
            >/dev/null || fail "softhsm2-util --init-token"
        openssl pkcs8 -topk8 -nocrypt -in "$PKI/keys/$1.key" -out "$d/key.p8" ||
            fail "cannot read $1"
        softhsm2-util --import "$d/key.p8" --token kl-slow --label key --id 01 \
            --pin 1234 >/dev/null || fail "cannot put $1 on the token"
        rm -f "$d/key.p8"
        # the other demo keys: the slow one once only (one SKI twice)
        for m in "$PKI"/keys/*.key; do
            [ "$(basename "$m" .key)" = "$1" ] || install -m 600 "$m" "$d/keys/"
        done
    fi
    # the shim re-reads its rules at every operation: written atomically
    echo "crypto stall_ms=$2 token=kl-slow" >"$d/shim.ctl.tmp"
    mv "$d/shim.ctl.tmp" "$d/shim.ctl"
    KD_STORES="[{uri: \"pkcs11:token=kl-slow;object=key?module-path=$shim&pin-value=1234&max-sessions=$3\"}, {dir: $d/keys}]"
}

# build_hsload: the concurrent handshake client (tests/e2e/hsload.c) as
# $HSLOAD.
HSLOAD=$E2E_TMP/hsload
build_hsload() {
    "${CC:-cc}" -O2 -o "$HSLOAD" "$KL_SRC_DIR/tests/e2e/hsload.c" -lssl -lcrypto ||
        fail "cannot build hsload"
}

# start_keylessd [PORT]: keylessd with the demo keys (one of them on a slow
# token after slow_key), metrics on when this
# keylessd has --metrics-port (metric() reads 0 otherwise and the tests
# count from the shutdown summary instead: metrics_up, requests_at_stop).
start_keylessd() {
    KD_PORT=${1:-$(free_port)}
    local -a metrics=()
    if has_flag metrics-port; then
        KD_METRICS=${KD_METRICS:-$(free_port)}
        metrics=(--metrics-port "$KD_METRICS")
    else
        KD_METRICS=${KD_METRICS:-0}
    fi
    local -a keys=(--private-key-dirs "$PKI/keys")
    [ -z "$KD_STORES" ] || keys=(--private-key-stores "$KD_STORES")
    "$KL_BIN_DIR/keylessd" --auth-cert "$PKI/server.crt" \
        --auth-key "$PKI/server.key" --cloudflare-ca-cert "$PKI/ca.crt" \
        "${keys[@]}" --listen-address 127.0.0.1 \
        --port "$KD_PORT" "${metrics[@]}" "${KD_EXTRA[@]}" \
        >>"$E2E_TMP/keylessd.log" 2>&1 </dev/null &
    KD_PID=$!
    local i
    for i in $(seq 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$KD_PORT") 2>/dev/null; then return 0; fi
        kill -0 "$KD_PID" 2>/dev/null || break
        sleep 0.05
    done
    tail -20 "$E2E_TMP/keylessd.log" >&2
    fail "keylessd did not start"
}

# metrics_up: keylessd serves /metrics (else the tests count requests from
# its shutdown summary, "stopped: N connections, M requests, ...").
metrics_up() {
    [ "${KD_METRICS:-0}" != 0 ] &&
        curl -sf "http://127.0.0.1:$KD_METRICS/metrics" >/dev/null 2>&1
}

# metric_samples: /metrics has keyless_requests samples (a keylessd whose
# counters are not wired would have only the HELP and TYPE lines; the tests
# then count from the shutdown summary too, and say so).
metric_samples() {
    local m
    m=$(curl -s "http://127.0.0.1:$KD_METRICS/metrics" || true)
    grep -q '^keyless_requests{' <<<"$m" && return 0
    echo "note: keylessd's /metrics has no keyless_requests samples; counting from its shutdown summary" >&2
    return 1
}

# requests_at_stop: M from the last shutdown summary in keylessd's log.
requests_at_stop() {
    grep -o 'stopped: [0-9]* connections, [0-9]* requests' "$E2E_TMP/keylessd.log" |
        tail -1 | awk '{ print $4 }'
}

stop_keylessd() {
    kill "$KD_PID" 2>/dev/null || true
    wait "$KD_PID" 2>/dev/null || true
    KD_PID=
}

# metric OPCODE_NAME: keylessd's keyless_requests counter for it (0: none).
metric() {
    [ "${KD_METRICS:-0}" != 0 ] || { echo 0; return; }
    { curl -s "http://127.0.0.1:$KD_METRICS/metrics" || true; } |
        awk -v op="opcode=\"$1\"" 'index($0, "keyless_requests{") == 1 && index($0, op) { v = $NF } END { print v + 0 }'
}

# ref NAME [extra keyless-keyref flags...]: the reference for certs/NAME.crt.
ref() {
    local name=$1; shift
    "$KL_BIN_DIR/keyless-keyref" write --cert "$E2E_TMP/certs/$name.crt" \
        --server "127.0.0.1:$KD_PORT" --client-cert "$PKI/client.crt" \
        --client-key "$PKI/client.key" --ca "$PKI/ca.crt" \
        --server-name localhost --timeout-ms 2000 "$@" \
        --out "$E2E_TMP/certs/$name.ref" || fail "keyless-keyref $name"
}

# The openssl.cnf a terminator loads: default first, then keyless.
OSSL_CNF=$E2E_TMP/openssl.cnf
bash "$KL_SRC_DIR/scripts/provider-cnf.sh" "$OSSL_CNF" "$KL_PROVIDER"
