#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# docs/ROUTING.md "Walkthrough" runs as printed: its ```sh blocks, in
# order, in one shell, from a directory that looks like the source tree
# (build/ and scripts/), with the walkthrough's ports swapped for free ones
# so that it can run beside other tests. Then the outcomes it shows are
# checked: a local and a forwarded signature verified, the route's metrics,
# the remote down and up again in A's log, the table re-read on SIGHUP.
set -uo pipefail
src=${KL_SRC_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${KL_BIN_DIR:-$src/build}
doc=$src/docs/ROUTING.md
for p in keylessd keyless-cli; do
    [ -x "$bin/$p" ] || { echo "walkthrough: $bin/$p not built" >&2; exit 1; }
done
command -v curl >/dev/null || { echo "walkthrough: curl is needed" >&2; exit 1; }

tmp=$(mktemp -d)
cleanup() {
    for f in "$tmp"/walk/*.pid; do
        [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
ln -s "$bin" "$tmp/build"
ln -s "$src/scripts" "$tmp/scripts"

# The walkthrough's commands: the ```sh blocks of its section.
sed -n '/^## Walkthrough/,/^## /p' "$doc" |
    awk '/^```sh$/ { f = 1; next } /^```$/ { f = 0 } f' >"$tmp/walk.sh"
[ -s "$tmp/walk.sh" ] || { echo "walkthrough: no sh block in $doc" >&2; exit 1; }
# Four free loopback ports for 2406, 2407, 3406, 3407.
read -r p1 p2 p3 p4 < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(4)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
sed -i -e "s/\b2406\b/$p1/g" -e "s/\b2407\b/$p2/g" -e "s/\b3406\b/$p3/g" \
    -e "s/\b3407\b/$p4/g" "$tmp/walk.sh"

# A step that hangs (a server that never gets ready) fails the test, not CI.
(cd "$tmp" && timeout 120 bash -e walk.sh) >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
fail=0
bad() {
    echo "walkthrough: FAIL: $*" >&2
    fail=1
}
[ $rc -eq 0 ] || bad "a command of the walkthrough failed (exit $rc)"
expect() { # WHAT PATTERN [COUNT]: the output has COUNT (default 1+) lines matching
    local n
    n=$(grep -c -E -- "$2" "$tmp/out")
    if [ "${3:-}" ]; then [ "$n" -eq "$3" ] || bad "$1: $n line(s), expected $3"; else
        [ "$n" -ge 1 ] || bad "$1"
    fi
}
expect "local ECDSA signature verified (twice)" '^OK: ECDSA-P-256 signature' 2
expect "forwarded RSA signature verified (before and after the outage)" '^OK: RSA-2048 PKCS#1 v1.5 signature' 2
expect "route up in the metrics" '^keylessd_route_up\{region="eu",route="dc-b"\} 1$'
expect "one attempt sent to the route" '^keylessd_route_requests_total\{region="eu",route="dc-b"\} 1$'
expect "route down in the metrics" '^keylessd_route_up\{region="eu",route="dc-b"\} 0$'
expect "remote configuration error while the remote is down" '^FAIL: .*remote configuration error' 1
expect "A logs the remote down" 'router: remote dc-b is down'
expect "A logs the remote up again" 'router: remote dc-b is up'
expect "table installed at startup" 'router: routing table installed: 1 servers, 1 keys'
expect "table re-read on SIGHUP" 'reload: routing table re-read'
[ $fail -eq 0 ] || exit 1
echo "walkthrough: ok"
