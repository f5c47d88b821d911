#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Readiness notification: keylessd, run with a fake NOTIFY_SOCKET,
# must send READY=1 once its keys are loaded and its port listens, and
# STOPPING=1 when SIGTERM starts the drain; a start that fails must not
# send READY=1. systemd itself is not needed (notify_check.py plays it).
set -uo pipefail
. "$(dirname "$0")/lib.sh"

exe=$KL_BIN_DIR/keylessd
[ -x "$exe" ] || skip "$exe not built (needs a full build)"
command -v python3 >/dev/null || skip "python3 not found"
command -v openssl >/dev/null || skip "openssl not found"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

bash "$KL_SRC_DIR/scripts/dev-pki.sh" "$tmp/pki" 2>/dev/null || die "dev-pki.sh failed"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# keylessd's flags for a key directory
args_for() {
    args=(--listen-address 127.0.0.1 --port "$port"
          --auth-cert "$tmp/pki/server.crt" --auth-key "$tmp/pki/server.key"
          --cloudflare-ca-cert "$tmp/pki/ca.crt" --private-key-dirs "$1"
          --loglevel 2)
}
args_for "$tmp/pki/keys"
check "READY=1 when listening, STOPPING=1 on SIGTERM" \
    python3 "$(dirname "$0")/notify_check.py" "$port" -- "$exe" "${args[@]}"

# A key file keylessd cannot use stops startup: no READY=1.
cp -r "$tmp/pki/keys" "$tmp/badkeys"
echo "not a key" >"$tmp/badkeys/broken.key"
chmod 600 "$tmp/badkeys/broken.key"
args_for "$tmp/badkeys"
check "no READY=1 when a key fails to load" \
    python3 "$(dirname "$0")/notify_check.py" --expect-fail "$port" -- "$exe" "${args[@]}"

finish
