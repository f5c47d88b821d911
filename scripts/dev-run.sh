#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make run`: keylessd on its embedded default. Creates the development PKI
# and demo keys in ./state on first run (scripts/dev-pki.sh), prints the
# keyless-cli commands to try, then runs keylessd on 127.0.0.1:2407 in the
# foreground (Ctrl-C stops it: SIGINT drains in-flight requests, then exits).
# KL_STATE_DIR (default ./state) and KL_PORT (default 2407) override the
# state folder and the port.
set -euo pipefail

build=${1:-build}
state=${KL_STATE_DIR:-./state}
port=${KL_PORT:-2407}
here=$(cd "$(dirname "$0")" && pwd)

if [ ! -x "$build/keylessd" ]; then
    echo "dev-run: $build/keylessd not found: build first (make build)" >&2
    exit 1
fi
bash "$here/dev-pki.sh" "$state"

cli="$build/keyless-cli"
tls="--cert $state/client.crt --key $state/client.key --ca $state/ca.crt"
cat <<MSG
keylessd: development PKI and demo keys in $state
Try, from another terminal:
  $cli ping --server 127.0.0.1:$port $tls
  $cli sign --server 127.0.0.1:$port $tls --op ecdsa-sha256 --pubkey $state/pubkeys/ecdsa-p256.pem --message hello
  $cli sign --server 127.0.0.1:$port $tls --op rsa-pss-sha256 --pubkey $state/pubkeys/rsa-2048.pem --message hello
  $cli sign --server 127.0.0.1:$port $tls --op ed25519 --pubkey $state/pubkeys/ed25519.pem --message hello
  $cli decrypt --server 127.0.0.1:$port $tls --pubkey $state/pubkeys/rsa-2048.pem --encrypt-test
  $cli ski $state/pubkeys/*.pem               # the SKIs keylessd serves
MSG

exec "$build/keylessd" \
    --listen-address 127.0.0.1 --port "$port" \
    --auth-cert "$state/server.crt" --auth-key "$state/server.key" \
    --cloudflare-ca-cert "$state/ca.crt" \
    --private-key-dirs "$state/keys"
