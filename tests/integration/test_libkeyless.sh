#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# libkeyless as another program uses it: `make install` (cmake --install,
# staged with DESTDIR), then a program built with nothing but the installed
# headers and `pkg-config --cflags --libs keyless` (tests/libkeyless/
# sign_example.c) signs through a real keylessd on 127.0.0.1, and openssl
# verifies the signature. Also checked: the SONAME, that the library
# exports exactly the functions of include/keyless/, and a refused request
# comes back as the protocol's error.
set -euo pipefail
src=${KL_SRC_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${KL_BIN_DIR:-$src/build}
cc=${KL_CC:-cc}
for t in pkg-config openssl curl python3 readelf nm; do
    command -v "$t" >/dev/null || { echo "libkeyless: $t is needed" >&2; exit 1; }
done
tmp=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "libkeyless: FAIL: $*" >&2
    [ -f "$tmp/kd.log" ] && tail -20 "$tmp/kd.log" >&2
    exit 1
}

# 1. Installed as an application finds it.
DESTDIR=$tmp/stage cmake --install "$bin" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }
pc=$(find "$tmp/stage" -name keyless.pc -path '*/pkgconfig/*')
[ -n "$pc" ] || fail "keyless.pc was not installed"
export PKG_CONFIG_PATH=${pc%/keyless.pc}
version=$(pkg-config --modversion keyless) || fail "pkg-config cannot read keyless.pc"
[ "$version" = "$(cat "$bin/VERSION")" ] || fail "keyless.pc says version $version"
cflags=$(pkg-config --cflags keyless)
libs=$(pkg-config --libs keyless)
libdir=$(pkg-config --variable=libdir keyless)
[ -f "$libdir/libkeyless.so.0" ] && [ -f "$(pkg-config --variable=includedir keyless)/keyless/client.h" ] ||
    fail "pkg-config points at $libdir and its include directory, which do not hold the library and headers"
echo "ok: installed; pkg-config keyless $version: $cflags $libs"

soname=$(readelf -d "$libdir/libkeyless.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = libkeyless.so.0 ] || fail "SONAME is '$soname', expected libkeyless.so.0"
# exported functions == the functions declared in the public headers
declared=$(cat "$src"/include/keyless/*.h | tr '\n' ' ' | grep -oE '\bkl_[a-z0-9_]+ *\(' |
    sed 's/ *(//' | sort -u | grep -vxE 'kl_client|kl_target')
exported=$(nm -D --defined-only "$libdir/libkeyless.so" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' | sort -u)
[ "$declared" = "$exported" ] || {
    diff <(echo "$declared") <(echo "$exported") >&2 || true
    fail "exported functions differ from include/keyless/ (< declared only, > exported only)"
}
echo "ok: SONAME $soname; exports the $(wc -l <<<"$exported") functions of include/keyless/ and nothing else"

# 2. A program built from the installed files alone. Under a sanitizer
#    build the library is instrumented, so the program is built the same way.
san=()
[ -n "${KL_SANITIZE:-}" ] && san=(-fsanitize="$KL_SANITIZE")
# shellcheck disable=SC2086 # pkg-config output is a word list
"$cc" -std=c11 -Wall -Wextra -Werror "${san[@]}" $cflags -o "$tmp/sign_example" \
    "$src/tests/libkeyless/sign_example.c" $libs || fail "the example does not build against the installed library"
deps=$(LD_LIBRARY_PATH=$libdir ldd "$tmp/sign_example") # whole, not piped into grep -q
grep -q "libkeyless.so.0 => $libdir/" <<<"$deps" ||
    fail "the example does not load the installed libkeyless.so.0: $deps"

# 3. ... signs through a real keylessd, and openssl verifies the signature.
bash "$src/scripts/dev-pki.sh" "$tmp/pki" >/dev/null
read -r port mport < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
p=$tmp/pki
"$bin/keylessd" --auth-cert "$p/server.crt" --auth-key "$p/server.key" \
    --cloudflare-ca-cert "$p/ca.crt" --private-key-dirs "$p/keys" \
    --listen-address 127.0.0.1 --port "$port" \
    --metrics-address 127.0.0.1 --metrics-port "$mport" 2>"$tmp/kd.log" &
pid=$!
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$mport/ready" >/dev/null && break
    kill -0 "$pid" 2>/dev/null || fail "keylessd exited"
    sleep 0.1
done
curl -sf "http://127.0.0.1:$mport/ready" >/dev/null || fail "keylessd not ready in 10 s"
ski=$("$bin/keyless-cli" ski "$p/pubkeys/ecdsa-p256.pem" | cut -d' ' -f1)
printf 'libkeyless' | openssl dgst -sha256 -binary >"$tmp/digest"
digest=$(od -An -tx1 "$tmp/digest" | tr -d ' \n')
run() {
    LD_LIBRARY_PATH=$libdir "$tmp/sign_example" 127.0.0.1 "$port" "$p/client.crt" "$p/client.key" \
        "$p/ca.crt" "$1" "$digest" "$tmp/sig"
}
run "$ski" || fail "the example could not sign"
openssl pkeyutl -verify -pubin -inkey "$p/pubkeys/ecdsa-p256.pem" -in "$tmp/digest" \
    -sigfile "$tmp/sig" >/dev/null || fail "the signature does not verify"
echo "ok: the example signed through keylessd; openssl verified the signature"

# 4. A key the server does not hold: the protocol's error, exit status 1.
rc=0
out=$(run 0102030405060708090a0b0c0d0e0f1011121314 2>&1) || rc=$?
[ "$rc" = 1 ] && grep -q "error 2 (key_not_found)" <<<"$out" ||
    fail "an unknown SKI gave exit $rc: $out"
echo "ok: an unknown key is answered with the protocol's error: $out"
