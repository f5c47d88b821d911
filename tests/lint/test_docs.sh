#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What the operator documentation (docs/*.md, README.md, packaging/) says
# must match what keylessd and its package do: each check below is a
# statement that once misled a new operator.
set -uo pipefail
src=${KL_SRC_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$src" || exit 1
nfail=0
ok() { echo "docs: ok: $*"; }
bad() {
    echo "docs: FAIL: $*" >&2
    nfail=$((nfail + 1))
}
# none WHAT PATTERN FILE...: no line of the files matches the (extended,
# case-insensitive) pattern; the matches are printed otherwise.
none() {
    local what=$1 pat=$2 out
    shift 2
    if out=$(grep -n -i -E -- "$pat" "$@"); then
        echo "$out" | sed 's/^/docs:   /' >&2
        bad "$what"
    else
        ok "$what"
    fi
}

# Reload works (SIGHUP, systemctl reload): docs/OPERATIONS.md "Signals and
# reload". Nothing may call it planned or ignored.
none "no page calls reload planned or ignored" \
    'reload.*(planned|ignored)|(planned|ignored).*reload' \
    packaging/debian/README.Debian packaging/man/*.[18] packaging/gokeyless.yaml \
    README.md docs/OPERATIONS.md
grep -q '^Reload and stop' packaging/debian/README.Debian &&
    grep -q 'Signals and reload' packaging/debian/README.Debian &&
    ok "README.Debian says what a reload does" ||
    bad "README.Debian lacks its \"Reload and stop\" section"

# The package Conflicts: gokeyless. The migration must stop gokeyless
# before it installs keylessd, keep the reference's files, check with
# --check before starting, and say how to go back.
mig=$(sed -n '/^## Migrating from gokeyless/,/^## /p' docs/OPERATIONS.md)
stop=$(grep -n 'systemctl disable --now gokeyless' <<<"$mig" | head -1 | cut -d: -f1)
inst=$(grep -n 'apt install .*keylessd' <<<"$mig" | head -1 | cut -d: -f1)
check=$(grep -n "runuser .*keylessd --check" <<<"$mig" | tail -1 | cut -d: -f1)
start=$(grep -n 'systemctl enable --now keylessd' <<<"$mig" | head -1 | cut -d: -f1)
if [ -n "$stop" ] && [ -n "$inst" ] && [ -n "$check" ] && [ -n "$start" ] &&
    [ "$stop" -lt "$inst" ] && [ "$inst" -lt "$check" ] && [ "$check" -lt "$start" ]; then
    ok "migration: stop gokeyless, install, --check, start, in that order"
else
    bad "migration steps out of order (lines: stop $stop, install $inst, check $check, start $start)"
fi
grep -q 'cp -a /etc/keyless' <<<"$mig" && grep -q '^\*\*Rollback' <<<"$mig" &&
    ok "migration keeps a copy and has a rollback" ||
    bad "migration lacks the copy of /etc/keyless or the rollback"

# docs/ROUTING.md is operator documentation, not a plan: nothing "to be
# added" or "later", and a walkthrough (run by
# tests/integration/test_routing_walkthrough.sh).
none "ROUTING.md has no plan left in it" \
    'to be added|configuration owner|\(later\)|for the configuration table|where today' \
    docs/ROUTING.md
grep -q '^## Walkthrough' docs/ROUTING.md && ok "ROUTING.md has a walkthrough" ||
    bad "ROUTING.md has no walkthrough"

# nginx before 1.23.4 (Debian 12 has 1.22) offers TLS 1.3 only when
# ssl_protocols says so: every nginx example with a key reference in the
# docs carries the line (docs/PROVIDER.md "Set-up").
if out=$(awk '/^ *```/ { if (inb && key && !proto) print FILENAME ":" start; inb = !inb; key = proto = 0; start = FNR; next }
    inb && /ssl_certificate_key/ { key = 1 }
    inb && /ssl_protocols.*TLSv1\.3/ { proto = 1 }' docs/*.md README.md) && [ -z "$out" ]; then
    ok "nginx examples set ssl_protocols TLSv1.2 TLSv1.3"
else
    echo "$out" | sed 's/^/docs:   nginx block without ssl_protocols TLSv1.3 at /' >&2
    bad "an nginx example lacks ssl_protocols TLSv1.2 TLSv1.3"
fi

# A minimal Debian has no sudo; runuser (util-linux) is always there.
none "commands use runuser, not sudo" \
    'sudo +(\\?-u|keylessd|chown|systemctl)' \
    docs/*.md README.md packaging/debian/README.Debian packaging/gokeyless.yaml \
    packaging/man/*.[18]

if [ "$nfail" -gt 0 ]; then
    echo "docs: $nfail check(s) failed" >&2
    exit 1
fi
echo "docs: all checks passed"
