#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# keyless-seal through the real binary (docs/SEALING.md "Operator
# workflow"): three servers' sealing keys in two regions (X25519 and
# P-256), a fleet file, an ECDSA and an RSA key sealed to one region;
# inspect shows policy, SKI (the one keyless-cli computes) and recipients;
# a server in the region opens the file and the key signs what OpenSSL
# verifies with the original public key; the server outside cannot open
# it; any changed byte is refused; a policy that selects nobody and a
# malformed one are refused; rewrap after revoking a server (and with an
# escrow key after removing another) leaves them out.
set -euo pipefail
src=${KL_SRC_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${KL_BIN_DIR:-$src/build}
seal=$bin/keyless-seal
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail() {
    echo "seal_tool: FAIL: $*" >&2
    exit 1
}
# expect CODE CMD...: runs CMD, which must exit with CODE
expect() {
    local want=$1 rc=0
    shift
    "$@" >out.txt 2>err.txt || rc=$?
    [ "$rc" = "$want" ] || { cat err.txt >&2; fail "exit $rc, not $want: $*"; }
}

# 1. Sealing keys: eu-1 (X25519), eu-2 (P-256), us-1 (X25519), an escrow.
for n in eu-1:x25519 eu-2:p256 us-1:x25519 vault:x25519; do
    expect 0 "$seal" keygen --out "${n%%:*}.key" --kem "${n##*:}"
    cp out.txt "${n%%:*}.pub"
    grep -q 'BEGIN PUBLIC KEY' "${n%%:*}.pub" || fail "keygen printed no public key"
    [ "$(stat -c %a "${n%%:*}.key")" = 600 ] || fail "${n%%:*}.key is not mode 0600"
done
expect 1 "$seal" keygen --out eu-1.key
grep -q 'File exists' err.txt || fail "keygen overwrote a key"
openssl pkey -in eu-2.key -noout -text 2>/dev/null | grep -q 'P-256' ||
    fail "eu-2.key is not a P-256 key"

fleet() { # fleet FILE NODE:REGION[:revoked]...
    local f=$1
    shift
    echo "nodes:" >"$f"
    for e in "$@"; do
        IFS=: read -r n r rev <<<"$e"
        { echo "  - name: $n"
          echo "    attributes: {region: $r, tier: [edge, core]}"
          echo "    sealing_key: |"
          sed 's/^/      /' "$n.pub"
          if [ -n "$rev" ]; then echo "    revoked: true"; fi; } >>"$f"
    done
}
fleet fleet.yaml eu-1:eu-west eu-2:eu-west us-1:us-east
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ec.pem 2>/dev/null
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out rsa.pem 2>/dev/null
chmod 600 ec.pem rsa.pem

# 2. Seal to eu-west; inspect.
for k in ec rsa; do
    expect 0 "$seal" seal --policy 'region = eu-west' --fleet fleet.yaml "$k.pem" -o "$k.sealed"
    grep -q 'recipient node   eu-1' err.txt && grep -q 'recipient node   eu-2' err.txt ||
        fail "seal did not list the eu-west servers"
    ! grep -q us-1 err.txt || fail "seal wrapped to us-1"
    expect 0 "$seal" inspect "$k.sealed"
    ski=$("$bin/keyless-cli" ski "$k.pem" | grep -oE '[0-9a-f]{40}' | head -1)
    grep -qx "ski:        $ski" out.txt || { cat out.txt; fail "inspect SKI is not keyless-cli's $ski"; }
    grep -qx 'policy:     region=eu-west' out.txt || fail "inspect policy"
    grep -qx 'recipients: 2 (2 node(s), 0 escrow)' out.txt || fail "inspect recipients"
    expect 0 "$seal" inspect -json "$k.sealed"
    python3 - "$ski" "$k" <<'EOF' || fail "inspect -json"
import json, sys
d = json.load(open("out.txt"))
assert d["ski"] == sys.argv[1] and d["policy"] == "region=eu-west"
assert d["key"] == ("ECDSA-P-256" if sys.argv[2] == "ec" else "RSA-2048"), d["key"]
assert [(r["name"], r["kem"]) for r in d["recipients"]] == \
    [("eu-1", "DHKEM(X25519)"), ("eu-2", "DHKEM(P-256)")], d
EOF
done
echo "ok: sealed to eu-west, inspected"

# 3. In-region servers open; the key signs, the original public key verifies.
echo "message to sign" >msg
signs() { # signs OPENED ORIGINAL
    openssl dgst -sha256 -sign "$1" -out sig msg 2>/dev/null || fail "$1 does not sign"
    openssl pkey -in "$2" -pubout -out pub.pem
    openssl dgst -sha256 -verify pub.pem -signature sig msg >/dev/null ||
        fail "a signature by $1 does not verify with $2's public key"
}
for n in eu-1 eu-2; do
    for k in ec rsa; do
        rm -f "$k.$n.pem"
        expect 0 "$seal" open --key "$n.key" "$k.sealed" -o "$k.$n.pem"
        [ "$(stat -c %a "$k.$n.pem")" = 600 ] || fail "opened key not mode 0600"
        signs "$k.$n.pem" "$k.pem"
    done
done
echo "ok: eu-1 (X25519) and eu-2 (P-256) open; the keys sign and verify"

# 4. The server outside the region cannot.
expect 1 "$seal" open --key us-1.key ec.sealed -o x.pem
grep -q 'not sealed to the key in us-1.key' err.txt || fail "us-1: $(cat err.txt)"
[ ! -e x.pem ] || fail "us-1 wrote a key"
echo "ok: us-1 cannot open"

# 5. Any changed byte: refused (a sample over every field, and the end).
size=$(stat -c %s ec.sealed)
for off in 0 9 11 13 20 40 60 100 150 200 250 300 350 400 $((size - 40)) $((size - 1)); do
    cp ec.sealed bad.sealed
    printf "$(printf '\\x%02x' $(( ($(od -An -tu1 -j "$off" -N1 ec.sealed) ^ 1) )))" |
        dd of=bad.sealed bs=1 seek="$off" conv=notrunc status=none
    cmp -s bad.sealed ec.sealed && fail "byte $off not changed"
    rc=0
    "$seal" open --key eu-1.key bad.sealed -o bad.pem 2>err.txt || rc=$?
    [ "$rc" != 0 ] && [ ! -e bad.pem ] || fail "byte $off changed still opens"
done
head -c $((size - 1)) ec.sealed >cut.sealed
expect 2 "$seal" inspect cut.sealed
grep -q 'not a valid sealed key file: at' err.txt || fail "truncated: $(cat err.txt)"
echo "ok: changed and truncated files refused"

# 6. Policies: selecting nobody, malformed (by position).
expect 1 "$seal" seal --policy 'region=ap-south' --fleet fleet.yaml ec.pem -o x.sealed
grep -q 'selects no server' err.txt || fail "empty selection: $(cat err.txt)"
expect 2 "$seal" seal --policy 'region=eu-west || region=us-east' --fleet fleet.yaml ec.pem -o x.sealed
grep -q "at 15: '||' is not an operator; write 'or'" err.txt || fail "bad policy: $(cat err.txt)"
expect 2 "$seal" seal --policy 'region=eu-west' --fleet nonexistent.yaml ec.pem -o x.sealed
grep -q 'nonexistent.yaml: cannot open the fleet file' err.txt || fail "fleet: $(cat err.txt)"
[ ! -e x.sealed ] || fail "a refused seal wrote a file"
echo "ok: policies refused"

# 7. Rewrap after revoking eu-2: eu-2 cannot open the new file.
fleet fleet2.yaml eu-1:eu-west eu-2:eu-west:revoked us-1:us-east
expect 0 "$seal" rewrap --fleet fleet2.yaml --key eu-1.key ec.sealed -o ec2.sealed
expect 0 "$seal" inspect ec2.sealed
grep -qx 'recipients: 1 (1 node(s), 0 escrow)' out.txt || fail "rewrap kept eu-2: $(cat out.txt)"
expect 1 "$seal" open --key eu-2.key ec2.sealed -o x.pem
expect 0 "$seal" open --key eu-1.key ec2.sealed -o ec2.pem
signs ec2.pem ec.pem
cmp -s ec.sealed ec2.sealed && fail "rewrap wrote the same bytes"
echo "ok: rewrap without the revoked eu-2"

# 8. With an escrow recipient: after eu-1 leaves too, escrow re-wraps.
expect 0 "$seal" seal --policy 'region=eu-west' --fleet fleet.yaml --escrow vault.pub ec.pem -o ec3.sealed
expect 0 "$seal" inspect ec3.sealed
grep -qE '^  escrow  vault ' out.txt || fail "no escrow entry: $(cat out.txt)"
fleet fleet3.yaml eu-2:eu-west us-1:us-east
expect 0 "$seal" rewrap --fleet fleet3.yaml --key vault.key ec3.sealed -o ec4.sealed
expect 0 "$seal" inspect -json ec4.sealed
python3 - <<'EOF' || fail "rewrap by escrow: $(cat out.txt)"
import json
d = json.load(open("out.txt"))
assert [(r["kind"], r["name"]) for r in d["recipients"]] == \
    [("node", "eu-2"), ("escrow", "vault")], d
EOF
expect 1 "$seal" open --key eu-1.key ec4.sealed -o x.pem
expect 0 "$seal" open --key eu-2.key ec4.sealed -o ec4.pem
signs ec4.pem ec.pem
echo "ok: escrow rewrap to the current fleet"

# 9. Many keys in one run (--out-dir); every output appears whole, by a
# rename of a flushed temporary file, and never replaces a file.
mkdir -p in/sub && cp ec.pem in/a.key && cp rsa.pem in/sub/b.key && chmod 600 in/a.key in/sub/b.key
expect 0 "$seal" seal --policy 'region=eu-west' --fleet fleet.yaml --out-dir out in
grep -q 'sealed 2 of 2 keys to 2 recipients in .* keys/s' err.txt || fail "--out-dir: $(cat err.txt)"
[ -z "$(ls -A out | grep -v -e '^a\.sealed$' -e '^b\.sealed$')" ] || fail "--out-dir left $(ls -A out)"
expect 0 "$seal" open --key eu-1.key out/b.sealed -o b.pem
signs b.pem rsa.pem
cp out/a.sealed a.copy
expect 1 "$seal" seal --policy 'region=eu-west' --fleet fleet.yaml --out-dir out in
grep -q 'File exists (remove it first)' err.txt || fail "--out-dir over a file: $(cat err.txt)"
cmp -s a.copy out/a.sealed || fail "--out-dir replaced a file"
[ "$(ls -A out | wc -l)" = 2 ] || fail "a refused --out-dir left $(ls -A out)"
expect 2 "$seal" seal --policy 'region=eu-west' --fleet fleet.yaml ec.pem rsa.pem -o x.sealed
grep -q 'several keys: --out-dir' err.txt || fail "two keys, -o: $(cat err.txt)"
expect 2 "$seal" seal --policy 'region=eu-west' --fleet fleet.yaml --out-dir out ec.pem -o x.sealed
expect 2 "$seal" open --key eu-1.key --out-dir out ec.sealed
if command -v strace >/dev/null; then
    # LeakSanitizer refuses to run under ptrace (strace): leaks are
    # checked by every other run of keyless-seal in this test
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
        strace -f -e trace=openat,renameat2,link -o trace.txt \
        "$seal" seal --policy 'region=eu-west' --fleet fleet.yaml ec.pem -o whole.sealed 2>/dev/null
    ! grep -E 'openat\(.*"whole\.sealed"' trace.txt || fail "whole.sealed was opened for writing"
    grep -qE 'renameat2\(AT_FDCWD, "\.whole\.sealed\.[A-Za-z0-9]{6}", AT_FDCWD, "whole\.sealed", RENAME_NOREPLACE\) = 0' trace.txt ||
        fail "whole.sealed not renamed into place: $(grep -E 'renameat2|link' trace.txt)"
fi
[ -z "$(ls -A | grep '^\.')" ] || fail "temporary files left: $(ls -A | grep '^\.')"
echo "ok: --out-dir, whole files by rename, no file replaced"

# 10. Usage errors.
expect 2 "$seal" seal --fleet fleet.yaml ec.pem -o x.sealed
grep -q 'needs --policy' err.txt || fail "missing --policy: $(cat err.txt)"
expect 2 "$seal" frobnicate
expect 0 "$seal" --help
grep -q 'keyless-seal COMMAND' out.txt || fail "--help"
echo "seal_tool: all ok"
