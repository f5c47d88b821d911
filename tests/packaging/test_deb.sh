#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Debian package, installed and removed for real: builds it
# (`make deb`, or takes KL_DEB), then as root:
#   dpkg -i   binaries, man pages, unit, the keyless user, /etc/keyless
#             modes (keys/ 0700 keyless), unit enabled but nothing started;
#             the installed unit passes `systemd-analyze verify`
#   keylessd --check, run as keyless from /etc/keyless on the shipped
#             configuration with a dev PKI: 0 with valid files, non-zero
#             with a broken key or a key file others can read
#   dpkg -r   programs gone, configuration and keys kept
#   dpkg -P   /etc/keyless and the enablement links gone; the keyless user
#             is kept (README.Debian), and removed here if the test made it
# It changes the machine (it is meant for CI and throwaway hosts), so it
# refuses to run where keylessd is installed or /etc/keyless exists.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || skip "needs root: it installs the package with dpkg -i (run: sudo make test-packaging)"
command -v dpkg-deb >/dev/null || skip "dpkg-deb not found (not a Debian system)"
# dpkg's state of keylessd: present means anything but not-installed
package_present() {
    dpkg-query -W -f='${Status}\n' keylessd 2>/dev/null | grep -qv ' not-installed$'
}
if package_present; then
    skip "the keylessd package is already on this machine: dpkg -P keylessd first"
fi
[ -e /etc/keyless ] && skip "/etc/keyless exists (another key server's files?): not touching it"
command -v openssl >/dev/null || skip "openssl not found (for the dev PKI)"

tmp=$(mktemp -d)
user_existed=0
getent passwd keyless >/dev/null && user_existed=1
cleanup() {
    # leave the machine as found, even after a failure half-way
    if package_present; then
        dpkg -P keylessd >/dev/null 2>&1 || true
    fi
    rm -rf /etc/keyless
    if [ "$user_existed" -eq 0 ] && getent passwd keyless >/dev/null; then
        deluser --quiet --system keyless >/dev/null 2>&1 || userdel keyless 2>/dev/null || true
        getent group keyless >/dev/null && { delgroup --quiet --system keyless >/dev/null 2>&1 || groupdel keyless 2>/dev/null || true; }
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# Processes whose program is the installed /usr/sbin/keylessd (a keylessd
# run from a build directory by another test does not count).
installed_servers() {
    local p exe
    for p in /proc/[0-9]*; do
        exe=$(readlink "$p/exe" 2>/dev/null) || continue
        case $exe in /usr/sbin/keylessd | "/usr/sbin/keylessd (deleted)") echo "${p#/proc/}" ;; esac
    done
}

# ---- the package ----
deb=${KL_DEB:-}
if [ -z "$deb" ]; then
    deb=$(bash "$KL_SRC_DIR/packaging/build-deb.sh" "${KL_DEB_OUT:-$KL_SRC_DIR/build-deb}" 2>"$tmp/build.log" | tail -1)
    [ -f "$deb" ] || { tail -20 "$tmp/build.log" >&2; die "make deb failed"; }
fi
ok "package $(basename "$deb")"
info=$(dpkg-deb -I "$deb")
contents=$(dpkg-deb -c "$deb")
for lib in libssl3 libyaml-0-2 libjansson4 adduser; do
    check "Depends on $lib" grep -q "^ Depends:.*\b$lib\b" <<<"$info"
done
check "gokeyless.yaml is a conffile" sh -c 'dpkg-deb -e "$1" "$2/ctl" && grep -qx /etc/keyless/gokeyless.yaml "$2/ctl/conffiles"' _ "$deb" "$tmp"
check "keys/ shipped at 0700" grep -q '^drwx------ root/root .* ./etc/keyless/keys/$' <<<"$contents"
check "no file owned by the build user" bash -c '! grep -v " root/root " <<<"$1"' _ "$contents"
for page in README.md "$KL_SRC_DIR"/docs/*.md; do
    page=$(basename "$page")
    check "ships $page" grep -q "\./usr/share/doc/keylessd/$page\$" <<<"$contents"
done

# ---- dpkg -i ----
check "dpkg -i" sh -c 'DEBIAN_FRONTEND=noninteractive dpkg -i "$1" >"$2/install.log" 2>&1 || { cat "$2/install.log" >&2; exit 1; }' _ "$deb" "$tmp"
for f in /usr/sbin/keylessd /usr/bin/keyless-cli; do check "$f installed" test -x "$f"; done
check "no keylessd in /usr/bin" test ! -e /usr/bin/keylessd
check "keylessd --version runs" quiet /usr/sbin/keylessd --version
for f in /usr/share/man/man8/keylessd.8.gz /usr/share/man/man1/keyless-cli.1.gz \
    /usr/share/man/man1/keyless-keyref.1.gz \
    /lib/systemd/system/keylessd.service /usr/share/doc/keylessd/README.Debian \
    /usr/share/doc/keylessd/copyright /etc/default/keylessd; do
    check "$f installed" test -f "$f"
done
check "man finds keylessd(8)" sh -c 'man -w 8 keylessd | grep -q /usr/share/man/man8/keylessd.8.gz'
check "user keyless exists" quiet getent passwd keyless
uid=$(id -u keyless 2>/dev/null || echo 65535)
check "keyless is a system user (uid $uid)" test "$uid" -lt 1000
check "keyless cannot log in" sh -c 'getent passwd keyless | grep -q ":/usr/sbin/nologin$"'
check "group keyless exists" quiet getent group keyless
mode_is /etc/keyless 750 root:keyless
mode_is /etc/keyless/gokeyless.yaml 640 root:keyless
mode_is /etc/keyless/keys 700 keyless:keyless
mode_is /etc/default/keylessd 600 root:root
check "unit enabled for boot" test -L /etc/systemd/system/multi-user.target.wants/keylessd.service
sleep 1
check "nothing started (no /usr/sbin/keylessd process)" test -z "$(installed_servers)"
check "unit refuses to start unconfigured (ConditionPathExists)" \
    grep -qx 'ConditionPathExists=/etc/keyless/server.pem' /lib/systemd/system/keylessd.service

# The installed unit, with its real binary and man page: verify fully.
if command -v systemd-analyze >/dev/null; then
    out=$(cd "$tmp" && systemd-analyze verify /lib/systemd/system/keylessd.service 2>&1)
    rc=$?
    if [ $rc -eq 0 ] && [ -z "$out" ]; then ok "systemd-analyze verify of the installed unit"; else
        echo "$out" >&2
        bad "systemd-analyze verify of the installed unit"
    fi
else
    echo "$T: note: systemd-analyze not found (package systemd): installed unit not verified"
fi

# ---- keylessd --check on the shipped configuration ----
bash "$KL_SRC_DIR/scripts/dev-pki.sh" "$tmp/pki" 2>/dev/null || die "dev-pki.sh failed"
install -m 0644 "$tmp/pki/server.crt" /etc/keyless/server.pem
install -m 0600 -o keyless -g keyless "$tmp/pki/server.key" /etc/keyless/server-key.pem
install -m 0644 "$tmp/pki/ca.crt" /etc/keyless/keyless_cacert.pem
install -m 0600 -o keyless -g keyless "$tmp/pki/keys/"*.key /etc/keyless/keys/
nkeys=$(find /etc/keyless/keys -name '*.key' | wc -l)
# as the service runs it: user keyless, working directory /etc/keyless
run_check() { runuser -u keyless -- sh -c 'cd /etc/keyless && exec /usr/sbin/keylessd --check' >"$tmp/check.log" 2>&1; }
if run_check; then ok "keylessd --check accepts the configured package ($nkeys keys)"; else
    sed "s/^/$T:   /" "$tmp/check.log" >&2
    bad "keylessd --check failed on valid files"
fi
check "--check read the shipped gokeyless.yaml (it names $nkeys keys)" grep -q "$nkeys keys" "$tmp/check.log"
check "--check started nothing" test -z "$(installed_servers)"

echo "this is not a key" >/etc/keyless/keys/broken.key
chown keyless:keyless /etc/keyless/keys/broken.key
chmod 600 /etc/keyless/keys/broken.key
if run_check; then bad "keylessd --check exited 0 with a broken key"; else
    ok "keylessd --check exits non-zero with a broken key"
fi
check "... and names the file" grep -q broken.key "$tmp/check.log"
rm -f /etc/keyless/keys/broken.key

chmod 644 /etc/keyless/keys/ecdsa-p256.key
if run_check; then bad "keylessd --check accepted a key file others can read"; else
    ok "keylessd --check refuses a key file others can read"
fi
chmod 600 /etc/keyless/keys/ecdsa-p256.key
check "valid again" run_check

# ---- installed again over itself (what an upgrade's scripts do): the
# operator's edits, keys and modes survive, and still nothing starts ----
echo "# edited by the operator" >>/etc/keyless/gokeyless.yaml
check "dpkg -i again" sh -c 'DEBIAN_FRONTEND=noninteractive dpkg -i "$1" >"$2/install2.log" 2>&1 || { cat "$2/install2.log" >&2; exit 1; }' _ "$deb" "$tmp"
check "operator's edit of gokeyless.yaml kept" grep -qx "# edited by the operator" /etc/keyless/gokeyless.yaml
mode_is /etc/keyless/keys 700 keyless:keyless
mode_is /etc/keyless/keys/ecdsa-p256.key 600 keyless:keyless
check "still valid" run_check
check "still nothing started" test -z "$(installed_servers)"

# ---- dpkg -r: programs go, configuration and keys stay ----
check "dpkg -r" sh -c 'dpkg -r keylessd >"$1/remove.log" 2>&1 || { cat "$1/remove.log" >&2; exit 1; }' _ "$tmp"
for f in /usr/sbin/keylessd /usr/bin/keyless-cli /lib/systemd/system/keylessd.service \
    /usr/share/man/man8/keylessd.8.gz; do
    check "$f removed" test ! -e "$f"
done
check "package left as config-files" sh -c "dpkg-query -W -f='\${Status}' keylessd | grep -q config-files"
check "gokeyless.yaml kept" test -f /etc/keyless/gokeyless.yaml
check "keys kept" test -f /etc/keyless/keys/ecdsa-p256.key
check "server certificate kept" test -f /etc/keyless/server.pem

# ---- dpkg -P: /etc/keyless goes, the user stays ----
check "dpkg -P" sh -c 'dpkg -P keylessd >"$1/purge.log" 2>&1 || { cat "$1/purge.log" >&2; exit 1; }' _ "$tmp"
check "package gone" test "$(package_present && echo present)" = ""
check "/etc/keyless removed (keys included)" test ! -e /etc/keyless
check "/etc/default/keylessd removed" test ! -e /etc/default/keylessd
check "enablement link removed" test ! -e /etc/systemd/system/multi-user.target.wants/keylessd.service
check "no deb-systemd-helper state left" sh -c '! ls /var/lib/systemd/deb-systemd-helper-enabled 2>/dev/null | grep -q keylessd'
check "user keyless kept on purge (documented in README.Debian)" quiet getent passwd keyless

finish
