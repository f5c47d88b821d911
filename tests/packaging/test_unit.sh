#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The systemd unit, checked without a running systemd (it is not PID 1 on
# the build machines): `systemd-analyze verify` must accept it without a
# single complaint, its sandboxing must stay at a low exposure score, and it
# must carry the settings below (docs/OPERATIONS.md "Files").
set -uo pipefail
. "$(dirname "$0")/lib.sh"

unit=$KL_SRC_DIR/packaging/keylessd.service
command -v systemd-analyze >/dev/null ||
    skip "systemd-analyze not found: install the Debian package systemd (it need not run)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# verify_quiet FILE: verify must succeed and print nothing (it reports an
# unknown or misspelt setting as a warning with status 0). The man page is
# not installed here (test_deb.sh verifies with it), and ExecStart must
# exist: the built binary stands in for /usr/sbin/keylessd.
verify_quiet() {
    local out rc
    out=$(cd "$tmp" && systemd-analyze verify --man=no "$1" 2>&1)
    rc=$?
    [ $rc -eq 0 ] && [ -z "$out" ] && return 0
    echo "$out" | sed "s/^/$T:   /" >&2
    return 1
}
exe=$KL_BIN_DIR/keylessd
if [ ! -x "$exe" ]; then
    echo "$T: note: $exe not built; /bin/true stands in for ExecStart"
    exe=/bin/true
fi
sed "s|^ExecStart=/usr/sbin/keylessd|ExecStart=$exe|" "$unit" >"$tmp/keylessd.service"
check "systemd-analyze verify accepts the unit silently" verify_quiet "$tmp/keylessd.service"

# The check above must be able to fail: a misspelt key and a bad value.
mkdir -p "$tmp/bad"
sed -e 's/^NoNewPrivileges=yes/NoNewPrivilege=yes/' "$tmp/keylessd.service" >"$tmp/bad/keylessd.service"
if verify_quiet "$tmp/bad/keylessd.service" 2>/dev/null; then bad "a misspelt setting went unnoticed"; else ok "a misspelt setting is caught"; fi
sed -e 's/^ProtectSystem=strict/ProtectSystem=sturdy/' "$tmp/keylessd.service" >"$tmp/bad/keylessd.service"
if verify_quiet "$tmp/bad/keylessd.service" 2>/dev/null; then bad "a bad value went unnoticed"; else ok "a bad value is caught"; fi

# Exposure score (0 best .. 10 worst; --threshold counts tenths): keep it
# under 2.0 so that a weakened sandbox fails here.
if out=$(cd "$tmp" && systemd-analyze security --offline=yes --threshold=20 "$tmp/keylessd.service" 2>&1); then
    ok "$(echo "$out" | grep -o 'Overall exposure level.*' | sed 's/ [^ ]*$//')"
else
    echo "$out" | grep -v '^✓' | sed "s/^/$T:   /" >&2
    bad "systemd-analyze security: exposure above 2.0"
fi

# What the unit must carry, setting by setting.
has() {
    grep -qxF -- "$1" "$unit" || {
        echo "$T:   missing line: $1" >&2
        return 1
    }
}
for line in Type=notify Restart=on-failure 'ExecReload=/bin/kill -HUP $MAINPID' \
    User=keyless Group=keyless WorkingDirectory=/etc/keyless \
    NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes \
    PrivateDevices=yes ProtectKernelTunables=yes \
    'RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX' CapabilityBoundingSet= \
    LimitCORE=0 RuntimeDirectory=keyless \
    ConditionPathExists=/etc/keyless/server.pem ExecStart=/usr/sbin/keylessd; do
    check "unit has $line" has "$line"
done
# Nothing may write outside /run/keyless: no ReadWritePaths at all.
if grep -q '^ReadWritePaths=' "$unit"; then bad "unit opens ReadWritePaths"; else ok "no ReadWritePaths"; fi

# The packaged example's pid_file must be writable under this sandbox: in
# the RuntimeDirectory (the only place the service may write).
rundir=/run/$(sed -n 's/^RuntimeDirectory=//p' "$unit")
pidfile=$(sed -n 's/^#\{0,1\}pid_file: *//p' "$KL_SRC_DIR/packaging/gokeyless.yaml")
check "example pid_file ($pidfile) is in the unit's RuntimeDirectory $rundir" \
    test "$(dirname "${pidfile:-/nonexistent/x}")" = "$rundir"

finish
