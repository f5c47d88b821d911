#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# End-to-end: nginx (a master and 2 workers) with
# `ssl_certificate_key` pointing at a keyless key reference, keyless.so
# loaded through OPENSSL_CONF, no private key on nginx's side.
#  - curl gets the page over HTTPS and verifies the chain; keylessd did the
#    signatures. The master loaded the key, the workers forked from it sign
#    over their own connections (fork safety).
#  - Key server down: new handshakes fail with a clear error in nginx's
#    error log, nginx stays up, sessions resumed from earlier tickets (TLS
#    1.3 and 1.2) still succeed without any key operation; key server back:
#    new handshakes work again.
. "$(dirname "$0")/lib.sh"
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
[ -x "$NGINX" ] || skip "nginx is not installed (Debian: nginx-light)"

make_pki
start_keylessd
ref ecdsa-p256

# nginx's side: the certificate and the reference only.
NG=$E2E_TMP/nginx
mkdir -p "$NG/logs" "$NG/conf" "$NG/site"
cp "$E2E_TMP/certs/ecdsa-p256.crt" "$E2E_TMP/certs/ecdsa-p256.ref" "$NG/conf/"
chmod -R a+rX "$NG"
if grep -q "PRIVATE KEY" "$NG"/conf/*; then fail "a private key on nginx's side"; fi
PORT=$(free_port)
cat >"$NG/conf/nginx.conf" <<CONF
worker_processes 2;
master_process on;
daemon off;
pid $NG/logs/nginx.pid;
error_log $NG/logs/error.log info;
env OPENSSL_CONF;
events { worker_connections 64; }
http {
    access_log off;
    ssl_session_cache off;
    server {
        listen 127.0.0.1:$PORT ssl;
        server_name localhost;
        ssl_certificate $NG/conf/ecdsa-p256.crt;
        ssl_certificate_key $NG/conf/ecdsa-p256.ref;
        ssl_protocols TLSv1.2 TLSv1.3;
        location / { return 200 "hello from keyless\n"; }
    }
}
CONF
OPENSSL_CONF=$OSSL_CNF "$NGINX" -p "$NG" -c "$NG/conf/nginx.conf" \
    >"$NG/logs/stdout.log" 2>&1 </dev/null &
NGINX_PID=$!
E2E_PIDS+=("$NGINX_PID")
for i in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    kill -0 "$NGINX_PID" 2>/dev/null ||
        { cat "$NG/logs/error.log" "$NG/logs/stdout.log" >&2; fail "nginx did not start"; }
    sleep 0.05
done
workers=$(pgrep -P "$NGINX_PID" | wc -l)
[ "$workers" -eq 2 ] || fail "expected 2 workers, found $workers"

get() {
    curl -sS --max-time 10 --cacert "$PKI/ca.crt" \
        --resolve "localhost:$PORT:127.0.0.1" "$@" "https://localhost:$PORT/"
}

# New connections, each a full handshake, spread over both workers.
for i in $(seq 8); do
    body=$(get) || { tail "$NG/logs/error.log" >&2; fail "request $i failed"; }
    [ "$body" = "hello from keyless" ] || fail "unexpected body: $body"
done
echo "ok: 8 HTTPS requests through 2 workers, chain verified"
for v in 1.3 1.2; do get --tlsv$v --tls-max $v >/dev/null || fail "TLS $v"; done
echo "ok: TLS 1.3 and TLS 1.2"

# Sessions to resume while the key server is down.
# (stdin stays open a moment: TLS 1.3 tickets arrive after the handshake)
sc() { sleep 0.5 | timeout 10 openssl s_client -connect "127.0.0.1:$PORT" \
        -servername localhost -CAfile "$PKI/ca.crt" "$@" 2>&1; }
sc -tls1_3 -sess_out "$E2E_TMP/s13" >/dev/null || fail "TLS 1.3 session"
sc -tls1_2 -sess_out "$E2E_TMP/s12" >/dev/null || fail "TLS 1.2 session"

stop_keylessd
n=$(requests_at_stop)
[ "${n:-0}" -ge 12 ] || fail "keylessd answered ${n:-0} requests, expected >= 12"
echo "ok: keylessd made the $n signatures"

if get >/dev/null 2>&1; then fail "a full handshake succeeded with keylessd down"; fi
sleep 0.3
grep -q "no keyless key server answered" "$NG/logs/error.log" ||
    { tail "$NG/logs/error.log" >&2; fail "no clear error in nginx's log"; }
kill -0 "$NGINX_PID" || fail "nginx died"
[ "$(pgrep -P "$NGINX_PID" | wc -l)" -eq 2 ] || fail "workers died"
echo "ok: key server down -> handshake fails, clear error, nginx up:"
grep "no keyless key server answered" "$NG/logs/error.log" | tail -1 | cut -c1-240

sc -tls1_3 -sess_in "$E2E_TMP/s13" | grep -q "^Reused" || fail "TLS 1.3 resumption while down"
sc -tls1_2 -sess_in "$E2E_TMP/s12" | grep -q "^Reused" || fail "TLS 1.2 resumption while down"
echo "ok: TLS 1.3 and 1.2 sessions resumed while the key server is down"

start_keylessd "$KD_PORT"
ok=0
for i in $(seq 40); do
    if get >/dev/null 2>&1; then ok=1; break; fi
    sleep 0.25
done
[ "$ok" = 1 ] || fail "no recovery after the key server came back"
echo "ok: key server back -> handshakes work again"
echo PASS
