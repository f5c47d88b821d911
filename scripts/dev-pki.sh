#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Creates, only where missing, the development PKI and demo keys that
# `make run` and the tests use (README.md: the embedded default):
#   STATE_DIR/ca.{key,crt}          dev CA (signs the server and the client)
#   STATE_DIR/server.{key,crt}      server certificate: localhost, 127.0.0.1, ::1
#                                   (EKU serverAuth)
#   STATE_DIR/client.{key,crt}      client certificate (EKU clientAuth)
#   STATE_DIR/keys/*.key            demo keys RSA-2048, P-256, P-384, Ed25519
#                                   (mode 0600, directory 0700)
#   STATE_DIR/pubkeys/*.pem         their public keys, for keyless-cli --pubkey
# With --test-extras, also the certificates negative tests need:
#   other-ca.{key,crt}              an unrelated CA
#   client-other-ca.{key,crt}       a clientAuth certificate from that CA
#   client-serverauth.{key,crt}     a serverAuth-only certificate from the dev CA
# Idempotent: existing files are kept. Development use only.
set -euo pipefail

usage() { echo "usage: $0 [--test-extras] STATE_DIR" >&2; exit 2; }
extras=0
if [ "${1:-}" = "--test-extras" ]; then extras=1; shift; fi
[ $# -eq 1 ] || usage
state=$1
command -v openssl >/dev/null || { echo "dev-pki: the openssl command is needed" >&2; exit 1; }

umask 077
mkdir -p "$state/keys" "$state/pubkeys"
chmod 700 "$state/keys"
cd "$state"
created=()
days=3650

# genkey FILE ALG [OPTS...]: a new private key unless FILE exists.
genkey() {
    local f=$1; shift
    [ -s "$f" ] && return 0
    openssl genpkey -quiet "$@" -out "$f.tmp" 2>/dev/null ||
        openssl genpkey "$@" -out "$f.tmp" >/dev/null 2>&1
    chmod 600 "$f.tmp"
    mv "$f.tmp" "$f"
    created+=("$f")
}
ec_key() { genkey "$1" -algorithm EC -pkeyopt "ec_paramgen_curve:$2" -pkeyopt ec_param_enc:named_curve; }

# ca NAME CN: a self-signed CA certificate unless NAME.crt exists.
make_ca() {
    local name=$1 cn=$2
    ec_key "$name.key" P-256
    [ -s "$name.crt" ] && return 0
    openssl req -new -x509 -key "$name.key" -out "$name.crt.tmp" -days "$days" \
        -subj "/O=keylessd development/CN=$cn" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -addext "subjectKeyIdentifier=hash" 2>/dev/null
    mv "$name.crt.tmp" "$name.crt"
    created+=("$name.crt")
}

# leaf NAME CA CN EKU [SAN]: a certificate for NAME.key signed by CA.
leaf() {
    local name=$1 ca=$2 cn=$3 eku=$4 san=${5:-}
    ec_key "$name.key" P-256
    # keep a certificate that still chains to its CA (a re-created CA
    # invalidates the old ones)
    if [ -s "$name.crt" ] &&
        openssl verify -purpose any -CAfile "$ca.crt" "$name.crt" >/dev/null 2>&1; then
        return 0
    fi
    local ext
    ext=$(mktemp)
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature"
        echo "extendedKeyUsage=$eku"
        echo "subjectKeyIdentifier=hash"
        echo "authorityKeyIdentifier=keyid"
        [ -n "$san" ] && echo "subjectAltName=$san"
    } >"$ext"
    openssl req -new -key "$name.key" -subj "/O=keylessd development/CN=$cn" 2>/dev/null |
        openssl x509 -req -CA "$ca.crt" -CAkey "$ca.key" \
            -set_serial "0x$(openssl rand -hex 12)" -days "$days" \
            -extfile "$ext" -out "$name.crt.tmp" 2>/dev/null
    rm -f "$ext"
    mv "$name.crt.tmp" "$name.crt"
    created+=("$name.crt")
}

make_ca ca "keylessd dev CA"
leaf server ca localhost serverAuth "DNS:localhost,IP:127.0.0.1,IP:::1"
leaf client ca "keyless dev client" clientAuth

genkey keys/rsa-2048.key -algorithm RSA -pkeyopt rsa_keygen_bits:2048
ec_key keys/ecdsa-p256.key P-256
ec_key keys/ecdsa-p384.key P-384
genkey keys/ed25519.key -algorithm ED25519
for k in keys/*.key; do
    base=$(basename "$k" .key)
    pub=pubkeys/$base.pem
    if [ ! -s "$pub" ] || [ "$k" -nt "$pub" ]; then
        openssl pkey -in "$k" -pubout -out "$pub" 2>/dev/null
        chmod 644 "$pub"
    fi
done

# keylessd refuses private keys that group or others can read and key
# directories they can write (docs/OPERATIONS.md "Key files"): a state
# folder from before, or copied with another umask, is put right.
chmod 600 ./*.key keys/*.key
chmod 700 keys

if [ $extras -eq 1 ]; then
    make_ca other-ca "unrelated CA"
    leaf client-other-ca other-ca "client of another CA" clientAuth
    leaf client-serverauth ca "serverAuth-only client" serverAuth
fi

if [ ${#created[@]} -gt 0 ]; then
    echo "dev-pki: created in $state: ${created[*]}" >&2
fi
