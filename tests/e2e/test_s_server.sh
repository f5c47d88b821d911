#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# End-to-end: `openssl s_server` holding only certificates
# and keyless key references (keyless.so loaded through openssl.cnf after
# the default provider) completes handshakes with `openssl s_client` while
# the private keys stay in keylessd: RSA, ECDSA (P-256, P-384) and Ed25519,
# TLS 1.3 and 1.2, and a TLS 1.2 RSA key exchange; also with `-async`
# (the key operations pause their async jobs). keylessd's counters
# show the operations. An ordinary key file works as before.
. "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || skip "no openssl command"

make_pki
start_keylessd
for k in rsa-2048 ecdsa-p256 ecdsa-p384 ed25519; do ref "$k"; done

# serve CERT KEYFILE N [s_server flags]: s_server for N handshakes on $PORT.
serve() {
    PORT=$(free_port)
    local cert=$1 key=$2 n=$3; shift 3
    OPENSSL_CONF=$OSSL_CNF openssl s_server -accept "127.0.0.1:$PORT" \
        -cert "$E2E_TMP/certs/$cert.crt" -key "$key" -naccept "$n" -www "$@" \
        >"$E2E_TMP/s_server-$PORT.log" 2>&1 </dev/null &
    SPID=$!
    E2E_PIDS+=("$SPID")
    local i
    for i in $(seq 100); do
        grep -q ACCEPT "$E2E_TMP/s_server-$PORT.log" && return 0
        kill -0 "$SPID" 2>/dev/null || break
        sleep 0.05
    done
    cat "$E2E_TMP/s_server-$PORT.log" >&2
    fail "s_server with $2 did not start"
}

# hs EXPECT_VERSION EXPECT_CIPHER EXPECT_SIG [s_client flags]
hs() {
    local ver=$1 cipher=$2 sig=$3; shift 3
    local out
    out=$(timeout 20 openssl s_client -connect "127.0.0.1:$PORT" -brief \
        -CAfile "$PKI/ca.crt" -verify_return_error -servername localhost \
        "$@" </dev/null 2>&1) || { echo "$out" >&2; tail "$E2E_TMP"/s_server-$PORT.log >&2; fail "handshake $* failed"; }
    echo "$out" | grep -q "Verification: OK" || fail "not verified: $out"
    echo "$out" | grep -q "Protocol version: $ver" || fail "not $ver: $out"
    echo "$out" | grep -q "Ciphersuite: $cipher" || fail "not $cipher: $out"
    if [ -n "$sig" ]; then
        echo "$out" | grep -q "Signature type: $sig" || fail "not $sig: $out"
    fi
    echo "ok: $ver $cipher ${sig:-(RSA key exchange)} $*"
}

before_ec=$(metric OpECDSASignSHA256)
before_pss=$(metric OpRSAPSSSignSHA256)
before_dec=$(metric OpRSADecrypt)
before_ed=$(metric OpEd25519Sign)
before_rsa=$(metric OpRSASignSHA256)

serve ecdsa-p256 "$E2E_TMP/certs/ecdsa-p256.ref" 2
hs TLSv1.3 TLS_AES_256_GCM_SHA384 ECDSA -tls1_3
hs TLSv1.2 ECDHE-ECDSA-AES128-GCM-SHA256 ECDSA -tls1_2 -cipher ECDHE-ECDSA-AES128-GCM-SHA256
wait "$SPID" || fail "s_server exited with an error"

serve ecdsa-p384 "$E2E_TMP/certs/ecdsa-p384.ref" 1
hs TLSv1.3 TLS_AES_256_GCM_SHA384 ECDSA -tls1_3

serve rsa-2048 "$E2E_TMP/certs/rsa-2048.ref" 4
hs TLSv1.3 TLS_AES_128_GCM_SHA256 RSA-PSS -tls1_3 -ciphersuites TLS_AES_128_GCM_SHA256
hs TLSv1.2 ECDHE-RSA-AES256-GCM-SHA384 RSA-PSS -tls1_2 -cipher ECDHE-RSA-AES256-GCM-SHA384
hs TLSv1.2 ECDHE-RSA-AES128-GCM-SHA256 RSA -tls1_2 -cipher ECDHE-RSA-AES128-GCM-SHA256 -sigalgs RSA+SHA256
hs TLSv1.2 AES128-GCM-SHA256 "" -tls1_2 -cipher AES128-GCM-SHA256
wait "$SPID" || fail "s_server exited with an error"

serve ed25519 "$E2E_TMP/certs/ed25519.ref" 2
hs TLSv1.3 TLS_AES_256_GCM_SHA384 ed25519 -tls1_3
hs TLSv1.2 ECDHE-ECDSA-AES256-GCM-SHA384 ed25519 -tls1_2

# `s_server -async` (SSL_MODE_ASYNC): the key operations run in
# async jobs, which pause while the provider's I/O thread waits for
# keylessd - signatures and a TLS 1.2 RSA key exchange decryption.
serve ecdsa-p256 "$E2E_TMP/certs/ecdsa-p256.ref" 2 -async
hs TLSv1.3 TLS_AES_256_GCM_SHA384 ECDSA -tls1_3
hs TLSv1.2 ECDHE-ECDSA-AES128-GCM-SHA256 ECDSA -tls1_2 -cipher ECDHE-ECDSA-AES128-GCM-SHA256
wait "$SPID" || fail "s_server -async exited with an error"
grep -q "I/O thread started" "$E2E_TMP/s_server-$PORT.log" ||
    fail "s_server -async: the key operations did not run asynchronously"
serve rsa-2048 "$E2E_TMP/certs/rsa-2048.ref" 2 -async
hs TLSv1.3 TLS_AES_128_GCM_SHA256 RSA-PSS -tls1_3 -ciphersuites TLS_AES_128_GCM_SHA256
hs TLSv1.2 AES128-GCM-SHA256 "" -tls1_2 -cipher AES128-GCM-SHA256
wait "$SPID" || fail "s_server -async exited with an error"
grep -q "I/O thread started" "$E2E_TMP/s_server-$PORT.log" ||
    fail "s_server -async: the key operations did not run asynchronously"
echo "ok: s_server -async"

# An ordinary key, provider loaded: served by the default provider as before
# (keylessd sees nothing).
serve ecdsa-p256 "$PKI/keys/ecdsa-p256.key" 1
hs TLSv1.3 TLS_AES_256_GCM_SHA384 ECDSA -tls1_3
echo "ok: ordinary key unchanged"

# The operations were done by keylessd: 13 key operations above (the
# ordinary key's handshake made none).
if metrics_up && metric_samples; then
    [ "$(metric OpECDSASignSHA256)" -ge $((before_ec + 4)) ] || fail "ECDSA count"
    [ "$(metric OpRSAPSSSignSHA256)" -ge $((before_pss + 3)) ] || fail "PSS count"
    [ "$(metric OpRSASignSHA256)" -ge $((before_rsa + 1)) ] || fail "PKCS#1 count"
    [ "$(metric OpRSADecrypt)" -ge $((before_dec + 2)) ] || fail "decrypt count"
    [ "$(metric OpEd25519Sign)" -ge $((before_ed + 2)) ] || fail "Ed25519 count"
    stop_keylessd
else
    stop_keylessd
    n=$(requests_at_stop)
    [ "${n:-0}" -eq 13 ] || fail "keylessd answered ${n:-0} requests, not 13"
fi
echo "ok: keylessd counted the operations"

# Key server down: the handshake fails and s_server reports keyless's error.
serve ecdsa-p256 "$E2E_TMP/certs/ecdsa-p256.ref" 1
if timeout 20 openssl s_client -connect "127.0.0.1:$PORT" -brief </dev/null >/dev/null 2>&1; then
    fail "handshake succeeded with keylessd down"
fi
sleep 0.2
grep -q "no keyless key server answered" "$E2E_TMP/s_server-$PORT.log" ||
    { cat "$E2E_TMP/s_server-$PORT.log" >&2; fail "no clear error in s_server's log"; }
echo "ok: key server down -> clear error"
echo PASS
